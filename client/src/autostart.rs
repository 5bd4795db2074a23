//! Auto-start: when no server answers at the default address, start `ngd` and use it.
//!
//! Runs only after connecting failed, so `ng`'s start-up pays nothing for it. It applies to
//! the default address alone (no `--nailgun-server`, `--nailgun-port`, `NAILGUN_SERVER` or
//! `NAILGUN_PORT`): a server someone named is never started behind their back, nor one on
//! TCP. `--nailgun-no-autostart` or `NG_NO_AUTOSTART` (any non-empty value but `0`) turn
//! it off, and the connection failure is then reported as such (230).
//!
//! 1. The private runtime directory (`$XDG_RUNTIME_DIR/ngd`, else `/tmp/ngd-$UID`) is
//!    created with mode 0700 if missing; one that is a symlink or someone else's is left
//!    alone (and `ngd` would refuse it anyway).
//! 2. `autostart.lock` in it is locked (`flock`), so that of many clients starting at once
//!    exactly one starts a server; the others wait for the lock, then find the server.
//!    Having the lock, the client tries the socket again before starting anything.
//! 3. `ngd` is the newest known: the one next to `ng` (the directory of `/proc/self/exe`),
//!    else the first on `PATH`, unless the runtime directory's record of a newer `ngd`
//!    ([`ng_proto::handover`], written by a server that a newer client connected to) names
//!    a version newer than this `ng`'s and its file is still the one recorded. It runs as `ngd serve --autostarted --listen local:<default socket>
//!    --log-file <log>`: the default configuration file, the Unix socket only, an idle
//!    exit after 15 minutes unless the configuration says otherwise. It is detached:
//!    `setsid` (its own session and process group, no controlling terminal), stdin from
//!    `/dev/null`, stdout and stderr appended to the log, working directory `/`.
//! 4. Readiness comes as `READY=1` on a datagram socket in the abstract namespace, named
//!    to `ngd` in `NOTIFY_SOCKET` (systemd's protocol, which `ngd` speaks anyway). The wait
//!    is bounded ([`READY_TIMEOUT`]); if `ngd` exits first or the time runs out, `ng` exits
//!    69 (`EX_UNAVAILABLE`) with the exit status and the last lines the attempt wrote to
//!    the log.
//!
//! The log is `$XDG_STATE_HOME/ngd/ngd.log`, else `~/.local/state/ngd/ngd.log`, else
//! `ngd.log` in the runtime directory; over [`LOG_ROTATE_BYTES`] it is moved to
//! `ngd.log.1` before a start.

use crate::exit::ClientError;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Seek as _, SeekFrom};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest wait for a started server to be ready (plugins warm up before it is).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// A log larger than this is rotated before a start.
pub const LOG_ROTATE_BYTES: u64 = 1 << 20;
/// The environment variable that turns auto-start off.
pub const OPT_OUT_VAR: &str = "NG_NO_AUTOSTART";
/// How many lines of the log a failure shows.
const LOG_TAIL_LINES: usize = 12;

/// Whether `NG_NO_AUTOSTART`'s value turns auto-start off.
pub fn opted_out(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// Where the server's log goes: `$XDG_STATE_HOME/ngd`, else `$HOME/.local/state/ngd`,
/// else the runtime directory.
pub fn log_path(xdg_state_home: Option<&OsStr>, home: Option<&OsStr>, runtime: &Path) -> PathBuf {
    let dir = match (xdg_state_home.map(Path::new), home) {
        (Some(d), _) if d.is_absolute() => d.join("ngd"),
        (_, Some(h)) if Path::new(h).is_absolute() => Path::new(h).join(".local/state/ngd"),
        _ => runtime.to_path_buf(),
    };
    dir.join("ngd.log")
}

/// Starts a server for `socket` (unless one appears meanwhile) and returns once it is
/// ready. Errors are [`ClientError::Unavailable`], with the reason and the log's tail.
pub fn start(socket: &Path) -> Result<(), ClientError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let runtime = socket
        .parent()
        .ok_or_else(|| unavailable("the default socket has no directory".into()))?;
    private_dir(runtime).map_err(|e| {
        unavailable(format!(
            "cannot use the runtime directory {}: {e}",
            runtime.display()
        ))
    })?;
    let _lock = Lock::acquire(&runtime.join("autostart.lock"), deadline)
        .map_err(|e| unavailable(format!("cannot take the auto-start lock: {e}")))?;
    if probe(socket) {
        // Another client started it while we waited for the lock.
        return Ok(());
    }
    let ngd = recorded_ngd(runtime).or_else(find_ngd).ok_or_else(|| {
        unavailable(
            "no server is running, and ngd was not found next to ng or on PATH to start \
             one (or run `ngd serve` yourself)"
                .into(),
        )
    })?;
    let log = log_path(
        std::env::var_os("XDG_STATE_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
        runtime,
    );
    let (log_file, log_start) = open_log(&log)
        .map_err(|e| unavailable(format!("cannot open the log {}: {e}", log.display())))?;
    let (notify, notify_name) =
        notify_socket().map_err(|e| unavailable(format!("cannot create a socket: {e}")))?;

    let mut listen = OsString::from("local:");
    listen.push(socket);
    let mut command = Command::new(&ngd);
    command
        .arg("serve")
        .arg("--autostarted")
        .arg("--listen")
        .arg(listen)
        .arg("--log-file")
        .arg(&log)
        .env("NOTIFY_SOCKET", &notify_name)
        .current_dir("/")
        .stdin(Stdio::null());
    match log_file.try_clone() {
        Ok(out) => command.stdout(out).stderr(log_file),
        Err(_) => command.stdout(Stdio::null()).stderr(Stdio::null()),
    };
    ng_sys::process::on_spawn(
        &mut command,
        ng_sys::process::ChildSetup {
            new_session: true,
            default_sigpipe: true,
            ..Default::default()
        },
    );
    let mut child = command
        .spawn()
        .map_err(|e| unavailable(format!("cannot run {}: {e}", ngd.display())))?;

    let failure = loop {
        if wait_ready(&notify, Duration::from_millis(20)) {
            return Ok(());
        }
        match child.try_wait() {
            Ok(Some(status)) => break format!("{} exited ({status})", ngd.display()),
            Ok(None) => {}
            Err(e) => break format!("cannot watch {}: {e}", ngd.display()),
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break format!(
                "{} was not ready after {} s, and was stopped",
                ngd.display(),
                READY_TIMEOUT.as_secs()
            );
        }
    };
    let tail = log_tail(&log, log_start);
    let mut message = format!("ng: no server was running, and starting one failed: {failure}");
    if tail.is_empty() {
        message.push_str(&format!("\nng: (nothing in {})", log.display()));
    } else {
        message.push_str(&format!("\nng: the end of {}:", log.display()));
        for line in tail {
            message.push_str("\n  ");
            message.push_str(&line);
        }
    }
    Err(ClientError::Unavailable(message))
}

fn unavailable(reason: String) -> ClientError {
    ClientError::Unavailable(format!("ng: cannot start a server: {reason}"))
}

/// Creates `dir` with mode 0700 (and missing parents), or checks that the existing one is
/// a real directory of ours.
fn private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    let uid = ng_sys::process::effective_uid();
    if !meta.is_dir() || meta.uid() != uid {
        return Err(io::Error::other("not a directory of ours"));
    }
    Ok(())
}

/// An exclusive `flock` on a file, released on drop (closing the file).
#[derive(Debug)]
struct Lock {
    _file: File,
}

impl Lock {
    fn acquire(path: &Path, deadline: Instant) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)?;
        loop {
            let Err(err) = ng_sys::fd::try_lock_exclusive(file.as_raw_fd()) else {
                return Ok(Self { _file: file });
            };
            let busy = matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            );
            if !busy {
                return Err(err);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "another ng has held it too long",
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Whether a server accepts connections on `socket`.
fn probe(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}

/// `ngd` next to this executable, else on `PATH`.
fn find_ngd() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("ngd")))
        .filter(|p| is_executable(p));
    beside.or_else(|| {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|d| d.join("ngd"))
            .find(|p| is_executable(p))
    })
}

/// The `ngd` the runtime directory's record names, when it is newer than this `ng`, its
/// file is still the one recorded, and it can be executed.
fn recorded_ngd(runtime: &Path) -> Option<PathBuf> {
    use ng_proto::handover::{NewestNgd, Stamp, MAX_RECORD_LEN, RECORD_NAME};
    let file = File::open(runtime.join(RECORD_NAME)).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_RECORD_LEN as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    let record = NewestNgd::parse(&bytes)?;
    let newer = record.version.is_newer_than(&ng_proto::version::current());
    let unchanged =
        fs::metadata(&record.path).is_ok_and(|m| Stamp::of_metadata(&m) == record.stamp);
    (newer && unchanged && is_executable(&record.path)).then_some(record.path)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Opens the log for appending (rotating a large one first); returns it and its length.
fn open_log(path: &Path) -> io::Result<(File, u64)> {
    if let Some(dir) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    if fs::metadata(path).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
        let mut old = path.as_os_str().to_owned();
        old.push(".1");
        let _ = fs::rename(path, old);
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)?;
    let len = file.metadata()?.len();
    Ok((file, len))
}

/// The last lines written to `path` after offset `from`.
fn log_tail(path: &Path, from: u64) -> Vec<String> {
    let mut text = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.seek(SeekFrom::Start(from));
        let _ = f.take(1 << 20).read_to_end(&mut text);
    }
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

/// A datagram socket in the abstract namespace for `READY=1`, and its `NOTIFY_SOCKET`
/// name (`@...`).
fn notify_socket() -> io::Result<(UnixDatagram, OsString)> {
    use std::os::linux::net::SocketAddrExt as _;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("ngd-autostart-{}-{nanos}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let socket = UnixDatagram::bind_addr(&addr)?;
    socket.set_nonblocking(true)?;
    Ok((socket, OsString::from(format!("@{name}"))))
}

/// Waits up to `timeout` for a datagram containing the line `READY=1`.
fn wait_ready(socket: &UnixDatagram, timeout: Duration) -> bool {
    let mut pfd = [libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if !ng_sys::fd::poll(&mut pfd, timeout.as_millis() as libc::c_int).is_ok_and(|n| n > 0) {
        return false;
    }
    let mut buf = [0u8; 4096];
    // Non-blocking: drains what arrived, then stops.
    while let Ok(len) = socket.recv(&mut buf) {
        if buf[..len].split(|&c| c == b'\n').any(|l| l == b"READY=1") {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt as _;

    #[test]
    fn a_recorded_ngd_is_started_only_when_newer_and_unchanged() {
        use ng_proto::handover::{NewestNgd, Stamp, RECORD_NAME};
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path();
        let ngd = runtime.join("ngd");
        std::fs::write(&ngd, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&ngd, std::fs::Permissions::from_mode(0o755)).unwrap();
        let record = |version: &str| {
            let r = NewestNgd {
                version: ng_proto::version::Version::parse(version.as_bytes()).unwrap(),
                path: ngd.clone(),
                stamp: Stamp::of_metadata(&fs::metadata(&ngd).unwrap()),
            };
            fs::write(runtime.join(RECORD_NAME), r.to_bytes().unwrap()).unwrap();
        };
        assert_eq!(recorded_ngd(runtime), None, "no record");
        record("999.0.0");
        assert_eq!(recorded_ngd(runtime), Some(ngd.clone()));
        record(env!("CARGO_PKG_VERSION"));
        assert_eq!(recorded_ngd(runtime), None, "not newer than this ng");
        record("0.0.1-alpha");
        assert_eq!(recorded_ngd(runtime), None, "older");
        record("999.0.0");
        std::fs::write(&ngd, "#!/bin/sh\n# reinstalled\n").unwrap();
        assert_eq!(recorded_ngd(runtime), None, "its file changed");
        fs::write(runtime.join(RECORD_NAME), b"ngd-newest 1\ngarbage\n").unwrap();
        assert_eq!(recorded_ngd(runtime), None, "malformed");
    }

    #[test]
    fn opt_out_values() {
        assert!(!opted_out(None));
        assert!(!opted_out(Some(OsStr::new(""))));
        assert!(!opted_out(Some(OsStr::new("0"))));
        assert!(opted_out(Some(OsStr::new("1"))));
        assert!(opted_out(Some(OsStr::new("yes"))));
    }

    #[test]
    fn log_path_rules() {
        let rt = Path::new("/run/user/1/ngd");
        assert_eq!(
            log_path(Some(OsStr::new("/s")), Some(OsStr::new("/h")), rt),
            PathBuf::from("/s/ngd/ngd.log")
        );
        assert_eq!(
            log_path(Some(OsStr::new("rel")), Some(OsStr::new("/h")), rt),
            PathBuf::from("/h/.local/state/ngd/ngd.log")
        );
        assert_eq!(
            log_path(None, None, rt),
            PathBuf::from("/run/user/1/ngd/ngd.log")
        );
    }

    #[test]
    fn ready_arrives_over_the_notify_socket() {
        let (socket, name) = notify_socket().unwrap();
        assert!(name.as_bytes().starts_with(b"@ngd-autostart-"));
        assert!(!wait_ready(&socket, Duration::ZERO));
        let sender = UnixDatagram::unbound().unwrap();
        use std::os::linux::net::SocketAddrExt as _;
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(&name.as_bytes()[1..]).unwrap();
        sender.send_to_addr(b"STATUS=x", &addr).unwrap();
        sender.send_to_addr(b"MAINPID=1\nREADY=1", &addr).unwrap();
        assert!(wait_ready(&socket, Duration::from_secs(5)));
    }

    #[test]
    fn log_tail_shows_only_the_new_lines() {
        let dir = std::env::temp_dir().join(format!("ng-tail-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ngd.log");
        fs::write(&path, "old\n").unwrap();
        let (_, start) = open_log(&path).unwrap();
        let mut text = fs::read_to_string(&path).unwrap();
        text.push_str("new 1\n\nnew 2\n");
        fs::write(&path, text).unwrap();
        assert_eq!(log_tail(&path, start), ["new 1", "new 2"]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
