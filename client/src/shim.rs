//! `ng` as a shim: run under another name, it stands for what the shell would run.
//!
//! A shim is `ng` under a program's name (a link in ngd's shims directory, or any
//! `ln -s ng ~/bin/aws`). [`find`] looks that name up on `PATH` as the shell does: each
//! entry in order, an empty entry meaning the working directory and a relative one
//! resolved against it, the first regular file this process may execute. Every candidate
//! that is `ng` itself (the same device and inode as `/proc/self/exe`: the shim, another
//! shim of another directory, a hard link) is skipped, so the rule holds with the shims
//! directory anywhere on `PATH`, twice, or not at all (a shim called by its path).
//!
//! The program found rides with the header (`NGD_CLIENT_PROGRAM`, with the `exec`
//! feature): ngd serves it warm, or answers that the client must run it itself, and
//! [`exec`] then replaces `ng` with it, with the argv, environment, working directory,
//! descriptors, signal dispositions and mask `ng` was started with. When nothing but `ng`
//! is found (or `PATH` is unset, or `ng` cannot tell which file it is), nothing rides
//! and ngd runs the command by its name, as it does for `ng NAME`.
//!
//! The search costs one `stat` per `PATH` entry up to the program (and one `access` for
//! a file found): a few microseconds.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::MetadataExt as _;

/// The device and inode of a file.
type Identity = (u64, u64);

/// The program a shell would run for `name`, as an absolute path, skipping `ng` itself.
/// Relative entries are skipped when the working directory cannot be known.
pub fn find(name: &OsStr) -> Option<Vec<u8>> {
    let path = std::env::var_os("PATH")?;
    let me = identity(OsStr::new("/proc/self/exe"))?;
    let cwd = || std::env::current_dir().ok().map(|d| d.into_os_string());
    search(name.as_bytes(), path.as_bytes(), cwd, me)
}

/// [`find`] over a given `PATH`, working directory (asked for at the first relative entry)
/// and identity of `ng`.
fn search(
    name: &[u8],
    path: &[u8],
    cwd: impl FnOnce() -> Option<OsString>,
    me: Identity,
) -> Option<Vec<u8>> {
    if name.is_empty() || name.contains(&b'/') {
        return None;
    }
    let mut cwd = Some(cwd);
    let mut known: Option<OsString> = None;
    for dir in path.split(|&b| b == b':') {
        let mut candidate = Vec::with_capacity(dir.len() + name.len() + 64);
        if !dir.starts_with(b"/") {
            // As the shell resolves `dir/name`: against the working directory.
            if let Some(ask) = cwd.take() {
                known = ask();
            }
            let Some(cwd) = known.as_deref().map(OsStr::as_bytes) else {
                continue;
            };
            candidate.extend_from_slice(cwd);
            if !cwd.ends_with(b"/") {
                candidate.push(b'/');
            }
        }
        candidate.extend_from_slice(dir);
        if !candidate.is_empty() && !candidate.ends_with(b"/") {
            candidate.push(b'/');
        }
        candidate.extend_from_slice(name);
        let Ok(meta) = std::fs::metadata(OsStr::from_bytes(&candidate)) else {
            continue;
        };
        if !meta.is_file() || (meta.dev(), meta.ino()) == me {
            continue;
        }
        let Ok(c) = CString::new(candidate.clone()) else {
            continue;
        };
        if ng_sys::process::may_execute(&c) {
            return Some(candidate);
        }
    }
    None
}

fn identity(path: &OsStr) -> Option<Identity> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino()))
}

/// Replaces `ng` with `program`, run with `ng`'s own argv (argv[0] included) and
/// environment. `closed` are the bits of fds 0–2 that were closed when `ng` started
/// (closed again), and `pipe_ignored` whether SIGPIPE was ignored then (else its default
/// is put back). Returns only if the program cannot be run.
pub fn exec(program: &[u8], closed: u8, pipe_ignored: bool) -> std::io::Error {
    let argv: Vec<CString> = std::env::args_os()
        .map(OsString::into_vec)
        .filter_map(|a| CString::new(a).ok())
        .collect();
    let Ok(path) = CString::new(program) else {
        return std::io::Error::from(std::io::ErrorKind::InvalidInput);
    };
    if !pipe_ignored {
        ng_sys::signal::set_default(libc::SIGPIPE);
    }
    for fd in 0..3 {
        if closed & (1 << fd) != 0 {
            ng_sys::process::close(fd);
        }
    }
    ng_sys::process::exec(&path, &argv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn executable(path: &std::path::Path) {
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn the_first_executable_that_is_not_ng_wins() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["shims", "a", "b", "c"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        executable(&d.join("shims/tool"));
        std::fs::write(d.join("a/tool"), "not executable").unwrap();
        std::fs::create_dir(d.join("b/tool")).unwrap();
        executable(&d.join("c/tool"));
        let me = identity(d.join("shims/tool").as_os_str()).unwrap();
        let path = format!("{0}/shims:{0}/a:{0}/b:{0}/shims:{0}/c", d.display());
        let found = search(b"tool", path.as_bytes(), || None, me).unwrap();
        assert_eq!(found, format!("{}/c/tool", d.display()).into_bytes());
        // Only ng itself: nothing.
        let path = format!("{0}/shims:{0}/a", d.display());
        assert_eq!(search(b"tool", path.as_bytes(), || None, me), None);
        assert_eq!(search(b"a/tool", path.as_bytes(), || None, me), None);
    }

    #[test]
    fn relative_entries_resolve_against_the_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("bin")).unwrap();
        executable(&d.join("bin/tool"));
        executable(&d.join("tool"));
        let me = (0, 0);
        let cwd = || Some(d.as_os_str().to_owned());
        let found = search(b"tool", b"bin:/nonexistent", cwd, me).unwrap();
        assert_eq!(found, format!("{}/bin/tool", d.display()).into_bytes());
        // An empty entry is the working directory.
        let found = search(b"tool", b"/nonexistent::bin", cwd, me).unwrap();
        assert_eq!(found, format!("{}/tool", d.display()).into_bytes());
        // Without a working directory, a relative entry finds nothing.
        assert_eq!(search(b"tool", b"bin", || None, me), None);
    }
}
