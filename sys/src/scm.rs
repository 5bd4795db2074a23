//! Passing descriptors over a Unix stream socket (`SCM_RIGHTS`): [`send_with_fds`] and
//! [`recv_with_fds`], the only sender and receiver of the workspace.
//!
//! The descriptors ride on the first byte of the data sent with them. On a stream socket
//! the kernel hands them to the read that returns that byte (and ends that read with the
//! message), and only to a reader that asks for them with `recvmsg`; a reader that does not
//! never sees them, and they are closed. Received descriptors are close-on-exec
//! (`MSG_CMSG_CLOEXEC`) and owned at once, so none can leak.

use std::io;
use std::mem;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The most descriptors one message carries either way.
pub const MAX_FDS: usize = 16;

/// Room for one control message of [`MAX_FDS`] descriptors, aligned as `cmsghdr` wants.
type Control = [u64; 10];

/// The control-message space `n` descriptors take (`CMSG_SPACE`).
fn space(n: usize) -> usize {
    // SAFETY: CMSG_SPACE is a pure size computation.
    unsafe { libc::CMSG_SPACE((n * mem::size_of::<libc::c_int>()) as u32) as usize }
}

/// One `sendmsg` of `data` with `fds` attached to its first byte (no control message when
/// `fds` is empty), retried after a signal; `MSG_NOSIGNAL`: a closed peer is `EPIPE`.
/// Returns the bytes written (the descriptors went with the first); the caller writes the
/// rest. Descriptors need at least one byte to ride on, and at most [`MAX_FDS`] go at
/// once: otherwise `InvalidInput`.
pub fn send_with_fds(fd: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    if fds.len() > MAX_FDS || (data.is_empty() && !fds.is_empty()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "descriptors need data to carry them, and at most 16 go at once",
        ));
    }
    let mut control: Control = [0; 10];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is a valid, empty header.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = mem::size_of_val(fds);
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space(fds.len()) as _;
        // SAFETY: `control` holds `space(MAX_FDS)` bytes, at least the `msg_controllen`
        // set above, so CMSG_FIRSTHDR is non-null and the header and the `bytes` of
        // descriptors after it lie inside `control`.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), bytes);
        }
    }
    loop {
        // SAFETY: `msg` points at `iov`, `data` and `control`, which outlive the call.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What one [`recv_with_fds`] read.
#[derive(Debug, Default)]
pub struct Received {
    /// Bytes read into the buffer (0: end of stream).
    pub len: usize,
    /// Descriptors that came with them, close-on-exec.
    pub fds: Vec<OwnedFd>,
    /// More descriptors came than were expected: the kernel dropped those that did not fit
    /// (`MSG_CTRUNC`), or the receiver closed those beyond the expected count.
    pub truncated: bool,
}

/// One `recvmsg` into `buf`, expecting at most `max` descriptors (capped at [`MAX_FDS`]);
/// never blocks if the socket is non-blocking, and does not retry after a signal. Extra
/// descriptors are closed and reported as [`Received::truncated`].
pub fn recv_with_fds(fd: RawFd, buf: &mut [u8], max: usize) -> io::Result<Received> {
    let max = max.min(MAX_FDS);
    let mut control: Control = [0; 10];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid, empty header.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if max > 0 {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space(max) as _;
    }
    // SAFETY: `msg` points at `iov`, `buf` and `control`, which outlive the call, with
    // their true lengths.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut received = Received {
        len: n as usize,
        fds: Vec::new(),
        truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
    };
    if max == 0 {
        return Ok(received);
    }
    // SAFETY: walking the control messages the kernel wrote into `control`, within
    // `msg_controllen`; every SCM_RIGHTS descriptor is a new one that only this process
    // holds, so each is owned here at once.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
                for i in 0..bytes / mem::size_of::<libc::c_int>() {
                    let raw = data.add(i).read_unaligned();
                    if raw >= 0 {
                        received.fds.push(OwnedFd::from_raw_fd(raw));
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if received.fds.len() > max {
        received.fds.truncate(max);
        received.truncated = true;
    }
    Ok(received)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn pipe_ends(n: usize) -> Vec<(std::fs::File, std::fs::File)> {
        (0..n)
            .map(|_| {
                let (a, b) = UnixStream::pair().unwrap();
                (OwnedFd::from(a).into(), OwnedFd::from(b).into())
            })
            .collect()
    }

    fn round_trip(n: usize) {
        let (tx, rx) = UnixStream::pair().unwrap();
        let ends = pipe_ends(n);
        let raw: Vec<RawFd> = ends.iter().map(|e| e.1.as_raw_fd()).collect();
        assert_eq!(send_with_fds(tx.as_raw_fd(), b"hello", &raw).unwrap(), 5);
        let mut buf = [0u8; 16];
        let got = recv_with_fds(rx.as_raw_fd(), &mut buf, n.max(1)).unwrap();
        assert_eq!(&buf[..got.len], b"hello");
        assert!(!got.truncated);
        assert_eq!(got.fds.len(), n);
        // Each received descriptor is the one sent: a write on it reaches its peer.
        for (fd, (mut peer, _)) in got.fds.into_iter().zip(ends) {
            let mut f = std::fs::File::from(fd);
            f.write_all(b"x").unwrap();
            let mut one = [0u8; 1];
            std::io::Read::read_exact(&mut peer, &mut one).unwrap();
            assert_eq!(&one, b"x");
        }
    }

    #[test]
    fn round_trip_of_none_one_and_several() {
        round_trip(0);
        round_trip(1);
        round_trip(3);
        round_trip(MAX_FDS);
    }

    fn open_count() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    #[test]
    fn extras_are_closed_and_reported() {
        let (tx, rx) = UnixStream::pair().unwrap();
        let ends = pipe_ends(1);
        let raw = [ends[0].1.as_raw_fd(); 6];
        let before = open_count();
        send_with_fds(tx.as_raw_fd(), b"abc", &raw).unwrap();
        let mut buf = [0u8; 16];
        let got = recv_with_fds(rx.as_raw_fd(), &mut buf, 3).unwrap();
        assert_eq!(got.len, 3);
        assert!(got.truncated);
        assert!(got.fds.len() <= 3);
        drop(got);
        assert_eq!(open_count(), before);
    }

    #[test]
    fn one_more_than_expected_is_closed_too() {
        // Four fit in the space of three (alignment slack): the receiver closes the fourth.
        let (tx, rx) = UnixStream::pair().unwrap();
        let ends = pipe_ends(1);
        let raw = [ends[0].1.as_raw_fd(); 4];
        send_with_fds(tx.as_raw_fd(), b"a", &raw).unwrap();
        let mut buf = [0u8; 4];
        let got = recv_with_fds(rx.as_raw_fd(), &mut buf, 3).unwrap();
        assert!(got.truncated);
        assert_eq!(got.fds.len(), 3);
    }

    #[test]
    fn a_reader_expecting_none_gets_none() {
        let (tx, rx) = UnixStream::pair().unwrap();
        let ends = pipe_ends(1);
        send_with_fds(tx.as_raw_fd(), b"a", &[ends[0].1.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 4];
        let got = recv_with_fds(rx.as_raw_fd(), &mut buf, 0).unwrap();
        assert_eq!((got.len, got.fds.len(), got.truncated), (1, 0, true));
    }

    #[test]
    fn descriptors_need_data_and_a_bound() {
        let (tx, _rx) = UnixStream::pair().unwrap();
        let e = send_with_fds(tx.as_raw_fd(), b"", &[0]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = send_with_fds(tx.as_raw_fd(), b"a", &[0; MAX_FDS + 1]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(send_with_fds(tx.as_raw_fd(), b"", &[]).unwrap(), 0);
    }
}
