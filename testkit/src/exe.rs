//! Executables a test writes and then runs.
//!
//! Tests in one binary run on many threads, and every thread that starts a process forks.
//! A child forked while this process holds a file open for writing keeps a copy of that
//! descriptor until its own `exec`, and while any copy is open, running the file fails
//! with `ETXTBSY` ("Text file busy"). A test that writes a program with `std::fs` and runs
//! it at once therefore fails now and then on a busy machine. The functions here never
//! open the file in this process: a short-lived `sh` writes it, and has exited when they
//! return.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// Copies the program at `from` to `to`, executable by everyone (mode 755).
pub fn copy_executable(from: &Path, to: &Path) {
    sh(
        "cp -- \"$1\" \"$2\" && chmod 755 -- \"$2\"",
        &[from, to],
        None,
        &format!("copy {} to {}", from.display(), to.display()),
    );
}

/// Copies the directory tree `from` to `to` (which must not exist), keeping modes.
pub fn copy_tree(from: &Path, to: &Path) {
    sh(
        "cp -R -p -- \"$1\" \"$2\"",
        &[from, to],
        None,
        &format!("copy {} to {}", from.display(), to.display()),
    );
}

/// Writes `contents` to `path` as a program (mode 755), replacing any file there.
pub fn write_executable(path: &Path, contents: impl AsRef<[u8]>) {
    sh(
        "cat > \"$1\" && chmod 755 -- \"$1\"",
        &[path],
        Some(contents.as_ref()),
        &format!("write {}", path.display()),
    );
}

/// Runs `script` with `/bin/sh -c`, the paths as `$1`, `$2`, ..., and `input` (if any) on
/// its stdin; panics with `what` unless it succeeds.
fn sh(script: &str, paths: &[&Path], input: Option<&[u8]>, what: &str) {
    let mut sh = Command::new("/bin/sh");
    sh.args(["-c", script, "sh"]).args(paths);
    sh.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = sh.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    if let Some(bytes) = input {
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    let status = child.wait().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(status.success(), "{what}: sh exited with {status}");
}
