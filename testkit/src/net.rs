//! Where a server listens, and raw connections to it.
//!
//! [`Address`] names a server the two ways Nailgun clients understand (TCP, or a Unix
//! socket). [`Stream`] is a connected socket of either kind, with the socket options that
//! raw clients and attackers set (timeouts, `SO_LINGER` 0 for a reset, a small receive
//! buffer) and a poll for readability. [`RefusingPort`] is a loopback port where nothing
//! listens. [`run_silent`] is the smallest client there is: a header, then only reading.

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use crate::wire::{frame, frames, read_chunk, Chunk};

/// Where a server listens, in the two forms Nailgun clients understand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// A TCP socket: `--nailgun-server <ip> --nailgun-port <port>`.
    Tcp(SocketAddr),
    /// A Unix domain socket: `--nailgun-server local:<path>`.
    Unix(PathBuf),
}

impl Address {
    /// The value for `--nailgun-server` or `NAILGUN_SERVER`.
    ///
    /// IPv6 addresses are written bare (`::1`), the form `getaddrinfo` takes.
    pub fn server(&self) -> OsString {
        match self {
            Address::Tcp(addr) => OsString::from(addr.ip().to_string()),
            Address::Unix(path) => {
                let mut value = OsString::from("local:");
                value.push(path);
                value
            }
        }
    }

    /// The value for `--nailgun-port` or `NAILGUN_PORT`, if the address has one.
    pub fn port(&self) -> Option<u16> {
        match self {
            Address::Tcp(addr) => Some(addr.port()),
            Address::Unix(_) => None,
        }
    }

    /// The client options that name this address:
    /// `--nailgun-server <server> [--nailgun-port <port>]`.
    pub fn client_args(&self) -> Vec<OsString> {
        let mut args = vec![OsString::from("--nailgun-server"), self.server()];
        if let Some(port) = self.port() {
            args.push(OsString::from("--nailgun-port"));
            args.push(OsString::from(port.to_string()));
        }
        args
    }

    /// The transport this address uses.
    pub fn transport(&self) -> Transport {
        match self {
            Address::Tcp(_) => Transport::Tcp,
            Address::Unix(_) => Transport::Unix,
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(addr) => write!(f, "{addr}"),
            Address::Unix(path) => write!(f, "local:{}", path.display()),
        }
    }
}

/// How a client reaches a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Loopback TCP.
    Tcp,
    /// A Unix domain socket in a private temporary directory.
    Unix,
}

impl Transport {
    /// Both transports, TCP first.
    pub const ALL: [Transport; 2] = [Transport::Tcp, Transport::Unix];
}

/// A connected socket of either transport.
#[derive(Debug)]
pub enum Stream {
    /// TCP, with `TCP_NODELAY` set.
    Tcp(TcpStream),
    /// A Unix domain socket.
    Unix(UnixStream),
}

/// What both kinds of socket do alike, so that [`Stream`] forwards to one of them.
trait Socket: Read + Write + AsRawFd {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
    fn shutdown(&self, how: Shutdown) -> io::Result<()>;
}

macro_rules! socket {
    ($ty:ty) => {
        impl Socket for $ty {
            fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
                <$ty>::set_read_timeout(self, timeout)
            }
            fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
                <$ty>::set_write_timeout(self, timeout)
            }
            fn set_nonblocking(&self, on: bool) -> io::Result<()> {
                <$ty>::set_nonblocking(self, on)
            }
            fn shutdown(&self, how: Shutdown) -> io::Result<()> {
                <$ty>::shutdown(self, how)
            }
        }
    };
}

socket!(TcpStream);
socket!(UnixStream);

impl Stream {
    /// Connects to `address`.
    pub fn connect(address: &Address) -> io::Result<Stream> {
        match address {
            Address::Tcp(addr) => Stream::tcp(TcpStream::connect(addr)?),
            Address::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path)?)),
        }
    }

    /// Connects to `address`, giving up on TCP after `timeout`.
    pub fn connect_timeout(address: &Address, timeout: Duration) -> io::Result<Stream> {
        match address {
            Address::Tcp(addr) => Stream::tcp(TcpStream::connect_timeout(addr, timeout)?),
            Address::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path)?)),
        }
    }

    fn tcp(stream: TcpStream) -> io::Result<Stream> {
        stream.set_nodelay(true)?;
        Ok(Stream::Tcp(stream))
    }

    fn socket(&self) -> &dyn Socket {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }

    fn socket_mut(&mut self) -> &mut dyn Socket {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }

    /// A second handle on the same socket (to write from one thread, read from another).
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    /// Sets the read timeout.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(timeout)
    }

    /// Sets the write timeout (at least 1 ms: zero would mean none).
    pub fn set_write_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.socket()
            .set_write_timeout(Some(timeout.max(Duration::from_millis(1))))
    }

    /// Switches non-blocking mode.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.socket().set_nonblocking(on)
    }

    /// Shuts down one or both directions; errors (already closed) are ignored.
    pub fn shutdown(&self, how: Shutdown) {
        let _ = self.socket().shutdown(how);
    }

    /// Makes the next close a reset (TCP; a Unix socket simply closes).
    pub fn set_linger_zero(&self) {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        setsockopt(self.as_raw_fd(), libc::SOL_SOCKET, libc::SO_LINGER, &linger);
    }

    /// Asks for a receive buffer of `bytes` (the kernel may round it).
    pub fn set_recv_buffer(&self, bytes: libc::c_int) {
        setsockopt(self.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, &bytes);
    }

    /// Waits until there is something to read (or the peer closed), for at most `timeout`.
    pub fn wait_readable(&self, timeout: Duration) -> bool {
        poll(self.as_raw_fd(), libc::POLLIN, timeout) != 0
    }

    /// Whether the peer has closed its end (`POLLRDHUP`/`POLLHUP`), seen without reading.
    /// Reliable for a Unix socket, whatever it holds unread; a TCP peer's close waits
    /// behind the data it still has to send.
    pub fn peer_hung_up(&self) -> bool {
        poll(self.as_raw_fd(), libc::POLLRDHUP, Duration::ZERO) & libc::POLLHUP != 0
    }
}

/// `poll(2)` on one descriptor; the returned events (0 on timeout or error).
fn poll(fd: RawFd, events: libc::c_short, timeout: Duration) -> libc::c_short {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n > 0 {
        pfd.revents
    } else {
        0
    }
}

/// `setsockopt(2)` with a value of type `T`; errors are ignored (best effort).
fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) {
    // SAFETY: `value` outlives the call and its size is passed.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        );
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.socket().as_raw_fd()
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.socket_mut().read(buf)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.socket_mut().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A loopback TCP port where nothing listens, reserved while the guard lives.
///
/// The socket is bound, so no other test or process can take the port, but it never
/// listens, so every connection to it is refused: "nothing listening" without a race.
#[derive(Debug)]
pub struct RefusingPort {
    _socket: std::os::fd::OwnedFd,
    address: Address,
}

impl RefusingPort {
    /// Reserves a port on 127.0.0.1.
    pub fn new() -> RefusingPort {
        use std::os::fd::{FromRawFd as _, OwnedFd};
        // SAFETY: plain socket calls on a descriptor we own, with correctly sized
        // `sockaddr_in` buffers.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
            let socket = OwnedFd::from_raw_fd(fd);
            let mut sin: libc::sockaddr_in = std::mem::zeroed();
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let addr = &mut sin as *mut libc::sockaddr_in as *mut libc::sockaddr;
            assert!(
                libc::bind(fd, addr, len) == 0,
                "bind: {}",
                io::Error::last_os_error()
            );
            assert!(
                libc::getsockname(fd, addr, &mut len) == 0,
                "getsockname: {}",
                io::Error::last_os_error()
            );
            let port = u16::from_be(sin.sin_port);
            RefusingPort {
                _socket: socket,
                address: Address::Tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
            }
        }
    }

    /// The refusing address.
    pub fn address(&self) -> &Address {
        &self.address
    }
}

impl Default for RefusingPort {
    fn default() -> Self {
        RefusingPort::new()
    }
}

/// Runs `command` with `args` as a bare-bones client that sends no stdin and **no
/// heartbeats**, and returns every chunk the server sent up to and including the first
/// `X`. Harness self-checks use it to show that a test can tell a silent client from one
/// that heartbeats.
pub fn run_silent(address: &Address, command: &str, args: &[&str]) -> io::Result<Vec<Chunk>> {
    let mut stream = Stream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut request: Vec<u8> = args
        .iter()
        .flat_map(|a| frame(b'A', a.as_bytes()))
        .collect();
    request.extend(frames(&[(b'D', b"/"), (b'C', command.as_bytes())]));
    stream.write_all(&request)?;
    let mut received = Vec::new();
    while let Some(chunk) = read_chunk(&mut stream)? {
        let last = chunk.ty == b'X';
        received.push(chunk);
        if last {
            return Ok(received);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("no X chunk; received {received:?}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_unix_peer_is_seen_without_reading() {
        let (a, b) = UnixStream::pair().unwrap();
        let b = Stream::Unix(b);
        assert!(!b.peer_hung_up());
        assert!(!b.wait_readable(Duration::from_millis(1)));
        drop(a);
        assert!(b.peer_hung_up());
        assert!(b.wait_readable(Duration::from_millis(1)));
    }

    #[test]
    fn a_refusing_port_refuses() {
        let port = RefusingPort::new();
        let err = Stream::connect(port.address()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    }
}
