//! Sockets: creating and connecting a stream socket by address, socket options, sending
//! without `SIGPIPE`, shutting down.
//!
//! Creating and connecting are separate calls so that a caller can tell a failure to make
//! a socket from a failure to reach the peer.

use crate::{check, check_len};
use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A new stream socket of `family` (`AF_UNIX`, `AF_INET`, `AF_INET6`), close-on-exec.
pub fn stream_socket(family: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked.
    let fd = check(unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The longest Unix socket path, in bytes, plus one (`sun_path`'s size, which holds the
/// terminating NUL).
pub fn unix_path_room() -> usize {
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    addr.sun_path.len()
}

/// Connects `fd` (an `AF_UNIX` stream socket) to the socket at `path`; `InvalidInput` if
/// the path does not fit in `sun_path` ([`unix_path_room`]).
pub fn connect_unix(fd: RawFd, path: &[u8]) -> io::Result<()> {
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    if path.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &src) in addr.sun_path.iter_mut().zip(path) {
        *dst = src as libc::c_char;
    }
    let len = mem::offset_of!(libc::sockaddr_un, sun_path) + path.len() + 1;
    // SAFETY: `addr` is a valid sockaddr_un and `len` does not exceed its size.
    check(unsafe {
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Connects `fd` (an `AF_INET` or `AF_INET6` stream socket, as `addr` is) to `addr`.
pub fn connect_inet(fd: RawFd, addr: &SocketAddr) -> io::Result<()> {
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
    // SAFETY: `storage` holds a valid address of `len` bytes.
    check(unsafe {
        libc::connect(
            fd,
            (&storage as *const libc::sockaddr_storage).cast(),
            len as libc::socklen_t,
        )
    })
    .map(drop)
}

/// An integer socket option (`getsockopt`), such as `SO_TYPE` or `SO_ACCEPTCONN`.
pub fn int_option(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a pointer to a live c_int and its size; an invalid fd is an error return.
    check(unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(value)
}

/// Sets an integer socket option (`setsockopt`), such as `TCP_NODELAY`.
pub fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a live c_int of the size passed.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Makes reads of `fd` give up with `WouldBlock` after `timeout` (`SO_RCVTIMEO`; at least
/// one microsecond, since zero means "never").
pub fn set_read_timeout(fd: RawFd, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: timeout.subsec_micros().max(1) as libc::suseconds_t,
    };
    // SAFETY: the option value is a live timeval of the size passed.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Re-arms `TCP_QUICKACK` on a TCP socket (Linux; nothing elsewhere). Only a latency hint:
/// a failure changes nothing else.
pub fn tcp_quickack(fd: RawFd) {
    #[cfg(target_os = "linux")]
    let _ = set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
    #[cfg(not(target_os = "linux"))]
    let _ = fd;
}

/// One `send(2)` of `data` with `MSG_NOSIGNAL` (a closed peer is `EPIPE`, never a
/// signal); returns the bytes sent.
pub fn send_nosignal(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is readable for its length for the duration of the call.
    check_len(unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), libc::MSG_NOSIGNAL) })
}

/// Shuts both directions of `fd` down (which wakes a thread blocked reading it); a failure
/// leaves nothing to undo.
pub fn shutdown(fd: RawFd) {
    // SAFETY: plain system call on an integer descriptor.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn connects_by_unix_path_and_reads_options() {
        let dir = std::env::temp_dir().join(format!("ng-sys-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let path = dir.join("s");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let s = stream_socket(libc::AF_UNIX).unwrap();
        use std::os::unix::ffi::OsStrExt;
        connect_unix(s.as_raw_fd(), path.as_os_str().as_bytes()).unwrap();
        let (_peer, _) = listener.accept().unwrap();
        assert_eq!(
            int_option(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TYPE).unwrap(),
            libc::SOCK_STREAM
        );
        assert_eq!(send_nosignal(s.as_raw_fd(), b"hi").unwrap(), 2);
        set_read_timeout(s.as_raw_fd(), Duration::from_millis(1)).unwrap();
        let long = vec![b'x'; unix_path_room()];
        let e = connect_unix(s.as_raw_fd(), &long).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn connects_over_tcp() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = stream_socket(libc::AF_INET).unwrap();
        connect_inet(s.as_raw_fd(), &listener.local_addr().unwrap()).unwrap();
        set_int_option(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1).unwrap();
        tcp_quickack(s.as_raw_fd());
        shutdown(s.as_raw_fd());
    }
}
