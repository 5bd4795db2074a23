//! Finding and connecting to the server, and the connected [`Socket`].
//!
//! Where to connect is decided by [`Target::resolve`], a pure function of the options and
//! the environment:
//!
//! * `--nailgun-server` (else `NAILGUN_SERVER`) names the server: `local:PATH` is a Unix
//!   socket (a relative PATH is relative to the working directory); anything else is a host
//!   name or an IPv4/IPv6 address (`::1` or `[::1]`) on `--nailgun-port` (else
//!   `NAILGUN_PORT`, else 2113). Every address the name resolves to is tried in order.
//! * With neither a server nor a port given (an empty variable counts as not given),
//!   [`Target::Default`] tries ngd's own Unix socket
//!   ([`ng_proto::paths::default_socket_path`]) first, then
//!   [`ng_proto::paths::DEFAULT_TCP_ADDR`], where stock Nailgun servers listen.
//!
//! Sockets are made with `socket(2)`/`connect(2)` directly, so that a failure to create one
//! (231) is told apart from a failure to connect (230) as the reference client does, and a
//! `local:` path that does not fit in `sun_path` is refused before any system call.
//! TCP connections get `TCP_NODELAY`: every chunk leaves in one write, and Nagle's algorithm
//! must not hold the next one back waiting for an ACK.

use crate::exit::{strerror, ClientError};
use ng_proto::bytes::BytesMut;
use ng_proto::paths;
use std::ffi::{OsStr, OsString};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The TCP port used when none is given.
const DEFAULT_PORT: u16 = ng_proto::DEFAULT_PORT;

/// Where the client connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A Unix socket (`local:PATH`).
    Unix(PathBuf),
    /// A host name or address, and a port.
    Tcp {
        /// Host name or address literal, brackets removed.
        host: String,
        /// TCP port.
        port: u16,
    },
    /// Nothing named: ngd's default socket, then [`paths::DEFAULT_TCP_ADDR`].
    Default {
        /// ngd's default Unix socket for this user.
        socket: PathBuf,
    },
}

impl Target {
    /// Decides where to connect. `server` and `port` are the options if given, else the
    /// `NAILGUN_SERVER` and `NAILGUN_PORT` variables; `default_socket` is only called when
    /// neither is given.
    pub fn resolve(
        server: Option<&OsStr>,
        port: Option<&OsStr>,
        default_socket: impl FnOnce() -> PathBuf,
    ) -> Result<Target, ClientError> {
        let server = server.filter(|s| !s.is_empty());
        let port = port.filter(|p| !p.is_empty());
        if server.is_none() && port.is_none() {
            return Ok(Target::Default {
                socket: default_socket(),
            });
        }
        if let Some(path) = server.and_then(|s| s.as_bytes().strip_prefix(b"local:")) {
            return Ok(Target::Unix(PathBuf::from(OsStr::from_bytes(path))));
        }
        let port = match port {
            Some(p) => parse_port(p)?,
            None => DEFAULT_PORT,
        };
        let host = match server {
            Some(s) => {
                let s = s.to_string_lossy();
                let unbracketed = s
                    .strip_prefix('[')
                    .and_then(|rest| rest.strip_suffix(']'))
                    .unwrap_or(&s);
                unbracketed.to_owned()
            }
            None => "127.0.0.1".to_owned(),
        };
        Ok(Target::Tcp { host, port })
    }
}

/// ngd's default socket for the current user.
pub fn default_socket_path() -> PathBuf {
    let xdg = std::env::var_os("XDG_RUNTIME_DIR");
    paths::default_socket_path(xdg.as_deref(), ng_sys::process::real_uid())
}

/// A port number: decimal digits, surrounding blanks allowed.
fn parse_port(text: &OsStr) -> Result<u16, ClientError> {
    let trimmed = text.as_bytes().trim_ascii();
    std::str::from_utf8(trimmed)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            ClientError::BadArguments(format!("ng: invalid port: {}", text.to_string_lossy()))
        })
}

/// Why one connection attempt failed.
#[derive(Debug)]
enum Failure {
    /// `socket(2)` failed.
    Socket(io::Error),
    /// The Unix socket path does not fit in `sun_path`.
    PathTooLong(OsString, usize),
    /// The host name did not resolve.
    UnknownHost(String),
    /// `connect(2)` failed (for a host with several addresses: the last one).
    Connect(io::Error),
}

impl Failure {
    fn into_error(self) -> ClientError {
        match self {
            Failure::Socket(e) => ClientError::Socket(format!("socket: {}", strerror(&e))),
            Failure::PathTooLong(path, len) => ClientError::Socket(format!(
                "Socket path [{}] too long ({len})",
                path.to_string_lossy()
            )),
            Failure::UnknownHost(host) => ClientError::Connect(format!("Unknown host: {host}")),
            Failure::Connect(e) => ClientError::Connect(format!("connect: {}", strerror(&e))),
        }
    }

    /// A short reason for the default-server message.
    fn reason(&self) -> String {
        match self {
            Failure::Socket(e) | Failure::Connect(e) => strerror(e),
            Failure::PathTooLong(_, len) => format!("path too long ({len})"),
            Failure::UnknownHost(_) => "unknown host".to_owned(),
        }
    }
}

/// Connects to `target`.
pub fn connect(target: &Target) -> Result<Socket, ClientError> {
    match target {
        Target::Unix(path) => connect_unix(path).map_err(Failure::into_error),
        Target::Tcp { host, port } => connect_tcp(host, *port).map_err(Failure::into_error),
        Target::Default { socket } => {
            let unix = match connect_unix(socket) {
                Ok(s) => return Ok(s),
                Err(f @ Failure::Socket(_)) => return Err(f.into_error()),
                Err(f) => f,
            };
            let (host, port) = paths::DEFAULT_TCP_ADDR
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h, p.parse().ok()?)))
                .unwrap_or(("127.0.0.1", DEFAULT_PORT));
            match connect_tcp(host, port) {
                Ok(s) => Ok(s),
                Err(f @ Failure::Socket(_)) => Err(f.into_error()),
                Err(tcp) => Err(ClientError::Connect(format!(
                    "connect: no server at {} ({}) or {} ({})",
                    socket.display(),
                    unix.reason(),
                    paths::DEFAULT_TCP_ADDR,
                    tcp.reason()
                ))),
            }
        }
    }
}

fn connect_unix(path: &Path) -> Result<Socket, Failure> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= ng_sys::socket::unix_path_room() {
        return Err(Failure::PathTooLong(
            path.as_os_str().to_owned(),
            bytes.len(),
        ));
    }
    let socket = Socket::new(libc::AF_UNIX).map_err(Failure::Socket)?;
    ng_sys::socket::connect_unix(socket.raw(), bytes).map_err(Failure::Connect)?;
    Ok(socket)
}

fn connect_tcp(host: &str, port: u16) -> Result<Socket, Failure> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|_| Failure::UnknownHost(host.to_owned()))?;
    let mut last = None;
    for addr in addrs {
        let family = match addr {
            SocketAddr::V4(_) => libc::AF_INET,
            SocketAddr::V6(_) => libc::AF_INET6,
        };
        let socket = Socket::new(family).map_err(Failure::Socket)?;
        match ng_sys::socket::connect_inet(socket.raw(), &addr) {
            Ok(()) => {
                // Cannot fail on a connected TCP socket; a failure would only cost latency.
                let _ = ng_sys::socket::set_int_option(
                    socket.raw(),
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    1,
                );
                return Ok(socket);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => Failure::Connect(e),
        None => Failure::UnknownHost(host.to_owned()),
    })
}

/// A connected stream socket, TCP or Unix.
///
/// Shared by the main thread (reads, heartbeats) and the stdin thread (writes): reading and
/// writing a socket from two threads at once is fine, and writers serialise themselves
/// (see `session`), so every method takes `&self`.
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
    /// A TCP socket (as opposed to a Unix one).
    tcp: bool,
}

impl Socket {
    fn new(family: libc::c_int) -> io::Result<Socket> {
        Ok(Socket {
            fd: ng_sys::socket::stream_socket(family)?,
            tcp: family != libc::AF_UNIX,
        })
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes [`Socket::read_into`] give up with `WouldBlock` after `timeout` (which must
    /// not be zero: a zero `SO_RCVTIMEO` means "never"). Only `ng --help`'s short listing
    /// uses it; a session waits with `poll`.
    pub fn set_read_timeout(&self, timeout: std::time::Duration) -> io::Result<()> {
        debug_assert!(!timeout.is_zero());
        ng_sys::socket::set_read_timeout(self.raw(), timeout)
    }

    /// One `read(2)` into the spare capacity of `buf` (reserve first). `Ok(0)` is end of
    /// stream.
    pub fn read_into(&self, buf: &mut BytesMut) -> io::Result<usize> {
        crate::sys::read_into(self.raw(), buf)
    }

    /// Writes all of `data`. `MSG_NOSIGNAL`: a closed peer is `EPIPE`, never a signal.
    pub fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            match ng_sys::socket::send_nosignal(self.raw(), data) {
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// On TCP, acknowledges the next segments at once instead of delaying the ACK
    /// (`TCP_QUICKACK`, which the kernel drops again after a while, hence after every read).
    ///
    /// The reference Java server writes each chunk as two or three small `write`s without
    /// `TCP_NODELAY`, so Nagle's algorithm holds the rest of a chunk back until our ACK for
    /// the first piece arrives; with a delayed ACK that costs 40 ms per chunk, which makes
    /// stdin (one `S` round trip per 2 KiB) crawl. Acknowledging at once ends the stall.
    pub fn ack_now(&self) {
        if self.tcp {
            ng_sys::socket::tcp_quickack(self.raw());
        }
    }

    /// True for a Unix socket, which can carry descriptors.
    pub fn is_unix(&self) -> bool {
        !self.tcp
    }

    /// The descriptor, for `poll`.
    pub fn as_raw(&self) -> RawFd {
        self.raw()
    }

    /// Writes all of `data`, with `fds` attached (`SCM_RIGHTS`) to its first byte; an empty
    /// `fds` is a plain [`Socket::write_all`]. The kernel delivers the descriptors with the
    /// first read that returns that byte, to a reader that asks for them; a reader that
    /// does not (`read(2)`, any stock server) never sees them, and they are closed.
    pub fn write_all_with_fds(&self, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
        if fds.is_empty() || data.is_empty() {
            return self.write_all(data);
        }
        let fds = &fds[..fds.len().min(ng_proto::MAX_PASSED_FDS)];
        let sent = ng_sys::scm::send_with_fds(self.raw(), data, fds)?;
        self.write_all(&data[sent..])
    }

    /// Shuts both directions down, which wakes a thread blocked reading the socket.
    pub fn shutdown(&self) {
        ng_sys::socket::shutdown(self.raw());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{BAD_ARGUMENTS, CONNECT_FAILED, SOCKET_FAILED};

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    fn default() -> PathBuf {
        PathBuf::from("/run/user/1/ngd/ngd.sock")
    }

    #[test]
    fn nothing_named_means_the_default_server() {
        assert_eq!(
            Target::resolve(None, None, default).unwrap(),
            Target::Default { socket: default() }
        );
        assert_eq!(
            Target::resolve(os(""), os(""), default).unwrap(),
            Target::Default { socket: default() }
        );
    }

    #[test]
    fn a_port_alone_means_loopback() {
        assert_eq!(
            Target::resolve(None, os("3000"), default).unwrap(),
            Target::Tcp {
                host: "127.0.0.1".into(),
                port: 3000
            }
        );
    }

    #[test]
    fn a_server_alone_uses_port_2113() {
        assert_eq!(
            Target::resolve(os("example.org"), None, default).unwrap(),
            Target::Tcp {
                host: "example.org".into(),
                port: 2113
            }
        );
    }

    #[test]
    fn local_prefix_is_a_unix_socket() {
        assert_eq!(
            Target::resolve(os("local:rel/ng.sock"), os("1"), default).unwrap(),
            Target::Unix("rel/ng.sock".into())
        );
    }

    #[test]
    fn ipv6_brackets_are_removed() {
        for server in ["::1", "[::1]"] {
            assert_eq!(
                Target::resolve(os(server), os("7"), default).unwrap(),
                Target::Tcp {
                    host: "::1".into(),
                    port: 7
                }
            );
        }
    }

    #[test]
    fn bad_ports_are_bad_arguments() {
        for port in ["x", "70000", "-1", "12a"] {
            let err = Target::resolve(None, os(port), default).unwrap_err();
            assert_eq!(err.code(), BAD_ARGUMENTS, "{port}");
        }
        assert!(Target::resolve(None, os(" 2113 "), default).is_ok());
    }

    #[test]
    fn long_socket_path_is_a_socket_failure() {
        let path = PathBuf::from("/tmp/".to_owned() + &"x".repeat(200));
        let err = connect(&Target::Unix(path)).unwrap_err();
        assert_eq!(err.code(), SOCKET_FAILED);
        assert!(err.message().unwrap().starts_with("Socket path [/tmp/xxx"));
        assert!(err.message().unwrap().ends_with("too long (205)"));
    }

    #[test]
    fn missing_socket_file_is_a_connect_failure() {
        let err = connect(&Target::Unix("/nonexistent/ngd-test.sock".into())).unwrap_err();
        assert_eq!(err.code(), CONNECT_FAILED);
        assert_eq!(err.message().unwrap(), "connect: No such file or directory");
    }
}
