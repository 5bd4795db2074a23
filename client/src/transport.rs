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
use std::mem;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
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
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    paths::default_socket_path(xdg.as_deref(), uid)
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
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(Failure::PathTooLong(
            path.as_os_str().to_owned(),
            bytes.len(),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    let len = mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    let socket = Socket::new(libc::AF_UNIX).map_err(Failure::Socket)?;
    // SAFETY: `addr` is a valid sockaddr_un and `len` does not exceed its size.
    socket
        .connect(
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
        .map_err(Failure::Connect)?;
    Ok(socket)
}

fn connect_tcp(host: &str, port: u16) -> Result<Socket, Failure> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|_| Failure::UnknownHost(host.to_owned()))?;
    let mut last = None;
    for addr in addrs {
        let (storage, len) = sockaddr(&addr);
        let family = match addr {
            SocketAddr::V4(_) => libc::AF_INET,
            SocketAddr::V6(_) => libc::AF_INET6,
        };
        let socket = Socket::new(family).map_err(Failure::Socket)?;
        match socket.connect((&storage as *const libc::sockaddr_storage).cast(), len) {
            Ok(()) => {
                // Cannot fail on a connected TCP socket; a failure would only cost latency.
                let _ = socket.set_int_option(libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
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

/// A `SocketAddr` as the C library's socket address.
fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large enough and aligned for every address type.
            let sin = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above.
            let sin6 = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
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
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        Ok(Socket {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            tcp: family != libc::AF_UNIX,
        })
    }

    /// Connects; `addr` must point to a socket address of `len` bytes.
    fn connect(&self, addr: *const libc::sockaddr, len: libc::socklen_t) -> io::Result<()> {
        // SAFETY: the callers pass a valid address of `len` bytes.
        let rc = unsafe { libc::connect(self.raw(), addr, len) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn set_int_option(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        value: libc::c_int,
    ) -> io::Result<()> {
        // SAFETY: the option value is a c_int of the given size.
        let rc = unsafe {
            libc::setsockopt(
                self.raw(),
                level,
                name,
                (&value as *const libc::c_int).cast(),
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes [`Socket::read_into`] give up with `WouldBlock` after `timeout` (which must
    /// not be zero: a zero `SO_RCVTIMEO` means "never"). Only `ng --help`'s short listing
    /// uses it; a session waits with `poll`.
    pub fn set_read_timeout(&self, timeout: std::time::Duration) -> io::Result<()> {
        debug_assert!(!timeout.is_zero());
        let tv = libc::timeval {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_usec: timeout.subsec_micros().max(1) as libc::suseconds_t,
        };
        // SAFETY: the option value is a timeval of the given size.
        let rc = unsafe {
            libc::setsockopt(
                self.as_raw(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// One `read(2)` into the spare capacity of `buf` (reserve first). `Ok(0)` is end of
    /// stream.
    pub fn read_into(&self, buf: &mut BytesMut) -> io::Result<usize> {
        let spare = buf.spare_capacity_mut();
        // SAFETY: `spare` is writable memory of `spare.len()` bytes.
        let n = unsafe { libc::read(self.raw(), spare.as_mut_ptr().cast(), spare.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        // SAFETY: the kernel initialised the first `n` spare bytes.
        unsafe { buf.set_len(buf.len() + n) };
        Ok(n)
    }

    /// Writes all of `data`. `MSG_NOSIGNAL`: a closed peer is `EPIPE`, never a signal.
    pub fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            // SAFETY: `data` is valid for its length.
            let n = unsafe {
                libc::send(
                    self.raw(),
                    data.as_ptr().cast(),
                    data.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            data = &data[n as usize..];
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
        #[cfg(target_os = "linux")]
        if self.tcp {
            // Only a latency hint: nothing to do if it fails.
            let _ = self.set_int_option(libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
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
        // Room for one control message of up to four descriptors, aligned for cmsghdr.
        let mut control = [0u64; 8];
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(mem::size_of_val(fds) as u32) } as usize;
        debug_assert!(space <= mem::size_of_val(&control));
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        // SAFETY: an all-zero msghdr is a valid value.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer holds `space` bytes, enough for one header and the
        // descriptors (CMSG_FIRSTHDR is non-null for a buffer that large).
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(mem::size_of_val(fds) as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(cmsg).cast::<RawFd>(),
                fds.len(),
            );
        }
        let sent = loop {
            // SAFETY: `msg` points at live buffers for the duration of the call.
            let n = unsafe { libc::sendmsg(self.raw(), &msg, libc::MSG_NOSIGNAL) };
            if n >= 0 {
                break n as usize;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        };
        self.write_all(&data[sent..])
    }

    /// Shuts both directions down, which wakes a thread blocked reading the socket.
    pub fn shutdown(&self) {
        // SAFETY: plain system call on a descriptor we own; failure leaves nothing to undo.
        unsafe { libc::shutdown(self.raw(), libc::SHUT_RDWR) };
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
