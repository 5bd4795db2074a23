//! systemd socket activation and readiness notification, without libsystemd.
//!
//! **Socket activation** (`sd_listen_fds(3)`): a service manager binds the listening sockets
//! and starts `ngd` on the first connection, passing them as descriptors 3, 4, ... with
//! `LISTEN_PID` (our pid: the variables are for us and not for a child that inherited them),
//! `LISTEN_FDS` (how many) and optionally `LISTEN_FDNAMES` (colon-separated names, from
//! `FileDescriptorName=`). [`parse_listen_env`] is the pure part; [`take_listeners`] checks
//! each descriptor (a listening stream socket, TCP or Unix), marks it close-on-exec, and
//! removes the variables so plugin workers do not inherit them. `systemd-socket-activate`
//! sets the same variables and is what the tests use.
//!
//! **Readiness** (`sd_notify(3)`): when `NOTIFY_SOCKET` names a datagram socket (a path, or
//! `@name` in the abstract namespace), [`Notifier::notify`] sends `READY=1` once every
//! configured command can be served, and `STOPPING=1` when the server stops. `ng`'s
//! auto-start uses the same mechanism to learn that the server it started is ready.

use std::ffi::OsStr;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

/// The first passed descriptor (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// Most descriptors accepted from the environment (far above any sane unit).
const MAX_LISTEN_FDS: usize = 64;

/// Why the socket-activation variables cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ActivationError {
    /// `LISTEN_FDS` is not a number or too large.
    #[error("LISTEN_FDS={0:?} is not a count of descriptors (0..={MAX_LISTEN_FDS})")]
    BadCount(String),
    /// `LISTEN_PID` is not a number.
    #[error("LISTEN_PID={0:?} is not a process id")]
    BadPid(String),
    /// A passed descriptor is not a listening stream socket.
    #[error(
        "socket activation: descriptor {fd} ({name}) is not a listening stream socket: {reason}"
    )]
    NotAListener {
        /// The descriptor.
        fd: RawFd,
        /// Its name from `LISTEN_FDNAMES`.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// One passed descriptor and its name (`unknown` when unnamed, as systemd says).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassedFd {
    /// The descriptor number.
    pub fd: RawFd,
    /// From `LISTEN_FDNAMES`.
    pub name: String,
}

/// The descriptors the variables describe, if they are meant for process `pid`.
///
/// No `LISTEN_FDS`, or a `LISTEN_PID` naming another process, is `Ok(vec![])`: the
/// variables were inherited from a parent that was activated, and are not ours.
pub fn parse_listen_env(
    listen_pid: Option<&OsStr>,
    listen_fds: Option<&OsStr>,
    listen_fdnames: Option<&OsStr>,
    pid: u32,
) -> Result<Vec<PassedFd>, ActivationError> {
    let Some(count) = listen_fds else {
        return Ok(Vec::new());
    };
    if let Some(p) = listen_pid {
        let text = String::from_utf8_lossy(p.as_bytes()).into_owned();
        let owner: u32 = text
            .trim()
            .parse()
            .map_err(|_| ActivationError::BadPid(text.clone()))?;
        if owner != pid {
            return Ok(Vec::new());
        }
    }
    let text = String::from_utf8_lossy(count.as_bytes()).into_owned();
    let n: usize = text
        .trim()
        .parse()
        .ok()
        .filter(|&n| n <= MAX_LISTEN_FDS)
        .ok_or_else(|| ActivationError::BadCount(text.clone()))?;
    let names: Vec<String> = listen_fdnames
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(':')
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Ok((0..n)
        .map(|i| PassedFd {
            fd: LISTEN_FDS_START + i as RawFd,
            name: names
                .get(i)
                .filter(|s| !s.is_empty())
                .cloned()
                .unwrap_or_else(|| "unknown".to_owned()),
        })
        .collect())
}

/// A listening socket received from the service manager.
#[derive(Debug)]
pub enum Activated {
    /// A TCP listener.
    Tcp(std::net::TcpListener),
    /// A Unix-socket listener, and its path (empty for an abstract or unnamed socket).
    Unix(std::os::unix::net::UnixListener, PathBuf),
}

/// Takes the listening sockets passed by a service manager, if any, and removes
/// `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` from the environment.
///
/// Call it early in `main`, before any thread is started (it changes the environment).
pub fn take_listeners() -> Result<Vec<Activated>, ActivationError> {
    let passed = parse_listen_env(
        std::env::var_os("LISTEN_PID").as_deref(),
        std::env::var_os("LISTEN_FDS").as_deref(),
        std::env::var_os("LISTEN_FDNAMES").as_deref(),
        std::process::id(),
    );
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    passed?.into_iter().map(adopt).collect()
}

/// Checks one passed descriptor and takes ownership of it.
fn adopt(passed: PassedFd) -> Result<Activated, ActivationError> {
    let fd = passed.fd;
    let fail = |reason: String| ActivationError::NotAListener {
        fd,
        name: passed.name.clone(),
        reason,
    };
    let int_opt = |level, name| ng_sys::socket::int_option(fd, level, name);
    let sock_type = int_opt(libc::SOL_SOCKET, libc::SO_TYPE).map_err(|e| fail(e.to_string()))?;
    if sock_type != libc::SOCK_STREAM {
        return Err(fail(format!("socket type {sock_type}, not a stream")));
    }
    let listening =
        int_opt(libc::SOL_SOCKET, libc::SO_ACCEPTCONN).map_err(|e| fail(e.to_string()))?;
    if listening == 0 {
        return Err(fail("not listening".to_owned()));
    }
    let domain = int_opt(libc::SOL_SOCKET, libc::SO_DOMAIN).map_err(|e| fail(e.to_string()))?;
    // A listening socket passed to us alone: from here on the listener owns it.
    let _ = ng_sys::fd::set_cloexec(fd);
    let claim = || ng_sys::fd::claim_inherited(fd).map_err(|e| fail(e.to_string()));
    match domain {
        libc::AF_INET | libc::AF_INET6 => Ok(Activated::Tcp(claim()?.into())),
        libc::AF_UNIX => {
            let l = std::os::unix::net::UnixListener::from(claim()?);
            let path = l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(PathBuf::from))
                .unwrap_or_default();
            Ok(Activated::Unix(l, path))
        }
        other => Err(fail(format!("address family {other}"))),
    }
}

/// Sends `sd_notify` messages to `NOTIFY_SOCKET`, if the service manager (or `ng`) set it.
#[derive(Debug, Default)]
pub struct Notifier {
    target: Option<Vec<u8>>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET` and removes it from the environment, so plugin workers do not
    /// notify in our name. Call it before any thread is started.
    pub fn from_env() -> Self {
        let target = std::env::var_os("NOTIFY_SOCKET")
            .map(|v| v.as_bytes().to_vec())
            .filter(|v| !v.is_empty());
        std::env::remove_var("NOTIFY_SOCKET");
        Self { target }
    }

    /// Whether anyone listens for notifications.
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends one notification (`READY=1`, `STOPPING=1`, `STATUS=...`, newline-separated).
    /// Failures are logged, never fatal: the server works without its supervisor knowing.
    pub fn notify(&self, message: &str) {
        let Some(target) = &self.target else {
            return;
        };
        if let Err(e) = send(target, message.as_bytes()) {
            tracing::warn!(error = %e, "could not notify the service manager ({message:?})");
        }
    }
}

/// Sends `message` as one datagram to `target`: a path, or `@name` for the abstract
/// namespace.
fn send(target: &[u8], message: &[u8]) -> io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    match target.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt as _;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.send_to_addr(message, &addr)?;
        }
        None => {
            socket.send_to(message, OsStr::from_bytes(target))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn nothing_passed() {
        assert_eq!(parse_listen_env(None, None, None, 7), Ok(vec![]));
    }

    #[test]
    fn descriptors_for_us_with_names() {
        let got = parse_listen_env(os("7"), os("2"), os("unix:tcp"), 7).unwrap();
        assert_eq!(
            got,
            vec![
                PassedFd {
                    fd: 3,
                    name: "unix".into()
                },
                PassedFd {
                    fd: 4,
                    name: "tcp".into()
                }
            ]
        );
    }

    #[test]
    fn missing_names_are_unknown() {
        let got = parse_listen_env(os("7"), os("2"), os("only"), 7).unwrap();
        assert_eq!(got[1].name, "unknown");
        let got = parse_listen_env(None, os("1"), None, 7).unwrap();
        assert_eq!(got[0].name, "unknown");
    }

    #[test]
    fn another_process_s_descriptors_are_ignored() {
        assert_eq!(parse_listen_env(os("8"), os("2"), None, 7), Ok(vec![]));
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(
            parse_listen_env(os("7"), os("two"), None, 7),
            Err(ActivationError::BadCount(_))
        ));
        assert!(matches!(
            parse_listen_env(os("7"), os("100000"), None, 7),
            Err(ActivationError::BadCount(_))
        ));
        assert!(matches!(
            parse_listen_env(os("x"), os("1"), None, 7),
            Err(ActivationError::BadPid(_))
        ));
    }

    #[test]
    fn notify_reaches_a_datagram_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let receiver = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier {
            target: Some(path.as_os_str().as_bytes().to_vec()),
        };
        notifier.notify("READY=1");
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
