//! Descriptors: one `read`, `write` or `poll`, descriptor and status flags, file type,
//! advisory locks (`flock`), pipes, putting a descriptor on a given number (`dup2`), and
//! taking ownership of an inherited descriptor.
//!
//! Each function makes one system call (two for a flag update) and retries nothing: the
//! caller decides what `EINTR` or `EAGAIN` means for it.

use crate::signal::SigSet;
use crate::{check, check_len};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Whether `fd` is open and a terminal (`isatty`).
pub fn is_tty(fd: RawFd) -> bool {
    // SAFETY: isatty only inspects the descriptor; a closed one is an error return.
    unsafe { libc::isatty(fd) == 1 }
}

/// One `read(2)` into `buf`; `Ok(0)` is end of file.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable memory of `buf.len()` bytes for the duration of the call.
    check_len(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) })
}

/// One `read(2)` into memory not yet initialised; on `Ok(n)` the kernel initialised the
/// first `n` bytes of `buf`.
pub fn read_uninit(fd: RawFd, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    // SAFETY: `buf` is writable memory of `buf.len()` bytes; read(2) only writes to it.
    check_len(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) })
}

/// One `write(2)` of `data`; returns the bytes written.
pub fn write(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is readable for its length for the duration of the call.
    check_len(unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) })
}

/// One `poll(2)` of `fds` for up to `timeout_ms` milliseconds (negative: no limit);
/// returns how many have events.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<usize> {
    // SAFETY: `fds` is a live, writable array of `fds.len()` pollfds.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    check(n).map(|n| n as usize)
}

/// One `ppoll(2)` of `fds`: waits up to `timeout` (`None`: no limit) with the signal mask
/// `mask` in place for the duration of the wait only (`None`: the mask unchanged).
pub fn ppoll(
    fds: &mut [libc::pollfd],
    timeout: Option<Duration>,
    mask: Option<&SigSet>,
) -> io::Result<usize> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
    let mask_ptr = mask.map_or(std::ptr::null(), |m| m.as_raw() as *const _);
    // SAFETY: `fds` is a live, writable array of `fds.len()` pollfds; the timeout and the
    // mask are null or point at values that outlive the call.
    let n = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            ts_ptr,
            mask_ptr,
        )
    };
    check(n).map(|n| n as usize)
}

/// Sets `FD_CLOEXEC` on `fd`.
pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an integer descriptor; an invalid one is an error return.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) }).map(drop)
}

/// Clears `FD_CLOEXEC` on `fd`, keeping its other descriptor flags. Async-signal-safe.
pub fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an integer descriptor; an invalid one is an error return.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) }).map(drop)
}

/// Sets `O_NONBLOCK` on `fd`, keeping its other status flags.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an integer descriptor; an invalid one is an error return.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

/// Whether `O_NONBLOCK` is set on the open file description `fd` refers to.
pub fn is_nonblocking(fd: RawFd) -> io::Result<bool> {
    // SAFETY: F_GETFL only reads the descriptor's status flags.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    Ok(flags & libc::O_NONBLOCK != 0)
}

/// Sets or clears `O_NONBLOCK` on `fd`, keeping its other status flags.
pub fn set_nonblocking_to(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on an integer descriptor; an invalid one is an error return.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    let wanted = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    if wanted == flags {
        return Ok(());
    }
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd, libc::F_SETFL, wanted) }).map(drop)
}

/// The access mode `fd` was opened with (`O_RDONLY`, `O_WRONLY`, `O_RDWR`); `None` if it
/// is not open.
pub fn access_mode(fd: RawFd) -> Option<libc::c_int> {
    // SAFETY: F_GETFL only reads the descriptor's status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    (flags >= 0).then_some(flags & libc::O_ACCMODE)
}

/// An open descriptor's file type (its `S_IFMT` bits) and the device it stands for
/// (`st_rdev`); `None` if `fstat` fails.
pub fn file_type(fd: RawFd) -> Option<(libc::mode_t, libc::dev_t)> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a whole stat into the storage on success.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so `st` is initialised.
    let st = unsafe { st.assume_init() };
    Some((st.st_mode & libc::S_IFMT, st.st_rdev))
}

/// Opens `/dev/null` for reading and writing on the lowest free descriptor, without
/// `FD_CLOEXEC`, and leaves it open for good (it fills a closed fd 0, 1 or 2). Returns
/// the descriptor, or -1 on failure.
pub fn open_dev_null_at_lowest() -> RawFd {
    // SAFETY: a NUL-terminated path; the descriptor is deliberately never closed.
    unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) }
}

/// Takes ownership of `fd`, a descriptor this process inherited (systemd's `LISTEN_FDS`,
/// `NGW_FD`) and that nothing else in it owns; call once per such descriptor. Fails if
/// `fd` is not open.
pub fn claim_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only reads the descriptor flags; it fails if `fd` is not open.
    check(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: `fd` is open, and the caller names a descriptor it inherited and that no
    // other value owns, so this is its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Tries to take an exclusive `flock` on `fd` without blocking (`WouldBlock` when another
/// holds it).
pub fn try_lock_exclusive(fd: RawFd) -> io::Result<()> {
    // SAFETY: flock on a descriptor the caller keeps open; no memory is involved.
    check(unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) }).map(drop)
}

/// Takes an exclusive `flock` on `fd`, waiting for it (retried after a signal).
pub fn lock_exclusive(fd: RawFd) -> io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor the caller keeps open; no memory is involved.
        match check(unsafe { libc::flock(fd, libc::LOCK_EX) }) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A new pipe, both ends close-on-exec: `(read end, write end)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into a live array of two.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: two new descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Makes `target` a copy of `fd`, without close-on-exec (`dup2`; the flag is cleared by
/// hand when they are the same descriptor). Whatever `target` was is closed.
pub fn put_on(fd: RawFd, target: RawFd) -> io::Result<()> {
    if fd == target {
        return clear_cloexec(fd);
    }
    // SAFETY: dup2 on integer descriptors; the caller gives up what `target` was.
    check(unsafe { libc::dup2(fd, target) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn reads_writes_and_polls_a_pipe() {
        let mut ends = [0; 2];
        // SAFETY: pipe writes two descriptors, owned at once.
        let (r, w) = unsafe {
            assert_eq!(libc::pipe(ends.as_mut_ptr()), 0);
            (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1]))
        };
        assert_eq!(write(w.as_raw_fd(), b"abc").unwrap(), 3);
        let mut p = [libc::pollfd {
            fd: r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(poll(&mut p, 1000).unwrap(), 1);
        let mut buf = [0u8; 8];
        assert_eq!(read(r.as_raw_fd(), &mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"abc");
        assert_eq!(file_type(r.as_raw_fd()).map(|k| k.0), Some(libc::S_IFIFO));
        assert_eq!(access_mode(w.as_raw_fd()), Some(libc::O_WRONLY));
        assert!(!is_tty(r.as_raw_fd()));
        set_nonblocking(r.as_raw_fd()).unwrap();
        let e = read(r.as_raw_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn closed_descriptors_are_errors() {
        assert!(claim_inherited(-1).is_err());
        assert_eq!(access_mode(-1), None);
        assert!(file_type(-1).is_none());
    }
}
