//! `exec`: a shell command run for the plugin in the project root (the client's working
//! directory), as fledge 1.8.0 runs it: `sh -c`, stdin from /dev/null, its own process
//! group, a `cwd` confined to the project root and the plugin's directory (an escape is
//! refused without running anything), the whole group killed at the timeout (code 124).
//! Unlike fledge, output is read while the command runs, so a command writing more than a
//! pipe's worth does not stall until its timeout; each stream keeps fledge's 10 MiB cap.

use crate::protocol::ExecResult;
use crate::sys;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The most output kept per stream.
pub const MAX_OUTPUT: u64 = 10 * 1024 * 1024;

/// Where the command runs, or the refusal fledge answers with.
pub fn work_dir(root: &Path, plugin_dir: &Path, cwd: Option<&str>) -> Result<PathBuf, ExecResult> {
    let Some(dir) = cwd else {
        return Ok(root.to_path_buf());
    };
    let refuse = |stderr: String| ExecResult {
        code: 1,
        stderr,
        stdout: String::new(),
    };
    let canonical = root.join(dir).canonicalize().map_err(|_| {
        refuse(format!(
            "exec cwd '{dir}' does not exist or is not accessible"
        ))
    })?;
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let plugin = plugin_dir
        .canonicalize()
        .unwrap_or_else(|_| plugin_dir.to_path_buf());
    if canonical.starts_with(&root) || canonical.starts_with(&plugin) {
        Ok(canonical)
    } else {
        Err(refuse(
            "exec cwd escapes project and plugin directory".into(),
        ))
    }
}

fn reader(stream: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(s) = stream {
            let mut s = s.take(MAX_OUTPUT);
            let _ = s.read_to_end(&mut buf);
            // Keep draining past the cap so the command never blocks on a full pipe.
            let _ = std::io::copy(&mut s.into_inner(), &mut std::io::sink());
        }
        buf
    })
}

/// Runs `command`; `stop` is polled and ends it early (the whole group is killed).
pub fn run(
    command: &str,
    dir: &Path,
    env: &[(OsString, OsString)],
    timeout: Duration,
    stop: impl Fn() -> bool,
) -> ExecResult {
    let spawned = Command::new("sh")
        .args(["-c", command])
        .current_dir(dir)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return ExecResult {
                code: 127,
                stderr: format!("spawning exec command: {command}: {e}"),
                stdout: String::new(),
            }
        }
    };
    let pgid = child.id() as sys::Pid;
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let start = Instant::now();
    let mut pause = Duration::from_micros(200);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(_) => break None,
        }
        if start.elapsed() >= timeout || stop() {
            // The group is the one the command leads; it is reaped just below.
            let _ = sys::signal_group(pgid, libc::SIGKILL);
            let _ = child.wait();
            let _ = (out.join(), err.join());
            return ExecResult {
                code: 124,
                stderr: format!("command timed out after {}s", timeout.as_secs()),
                stdout: String::new(),
            };
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    ExecResult {
        code: status.and_then(|s| s.code()).unwrap_or_else(|| {
            // Killed by a signal: fledge reports 1.
            let _ = status.and_then(|s| s.signal());
            1
        }),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Vec<(OsString, OsString)> {
        std::env::vars_os().filter(|(k, _)| k == "PATH").collect()
    }

    #[test]
    fn cwd_is_confined() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("proj");
        let plugin = tmp.path().join("plugin");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&plugin).unwrap();
        assert_eq!(work_dir(&root, &plugin, None).unwrap(), root);
        assert!(work_dir(&root, &plugin, Some("sub")).is_ok());
        assert!(work_dir(&root, &plugin, Some(plugin.to_str().unwrap())).is_ok());
        let e = work_dir(&root, &plugin, Some("..")).unwrap_err();
        assert_eq!(
            (e.code, e.stderr.as_str()),
            (1, "exec cwd escapes project and plugin directory")
        );
        let e = work_dir(&root, &plugin, Some("nope")).unwrap_err();
        assert_eq!(
            e.stderr,
            "exec cwd 'nope' does not exist or is not accessible"
        );
    }

    #[test]
    fn runs_and_times_out() {
        let tmp = tempfile::tempdir().unwrap();
        let r = run(
            "echo hi; echo err >&2; exit 3",
            tmp.path(),
            &env(),
            Duration::from_secs(5),
            || false,
        );
        assert_eq!(
            r,
            ExecResult {
                code: 3,
                stderr: "err\n".into(),
                stdout: "hi\n".into()
            }
        );
        let big = run(
            "head -c 300000 /dev/zero | tr '\\0' a",
            tmp.path(),
            &env(),
            Duration::from_secs(20),
            || false,
        );
        assert_eq!((big.code, big.stdout.len()), (0, 300000));
        let r = run(
            "sleep 30 & sleep 30",
            tmp.path(),
            &env(),
            Duration::from_secs(1),
            || false,
        );
        assert_eq!(
            (r.code, r.stderr.as_str()),
            (124, "command timed out after 1s")
        );
    }
}
