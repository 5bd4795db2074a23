//! Blocking reads and writes on the user's descriptors (stdin, stdout, stderr, the
//! terminal): whole writes, retried on `EINTR` and waited out on `EAGAIN`, for a descriptor
//! the user's shell may have left non-blocking. Used by the session loop and the
//! pseudo-terminal relay alike.

use crate::exit::ClientError;
use std::io;

/// One `read(2)` on fd 0, retried on `EINTR` and waited out on `EAGAIN` (a non-blocking
/// stdin inherited from the parent).
pub fn read_stdin(buf: &mut [u8]) -> io::Result<usize> {
    loop {
        let err = match ng_sys::fd::read(libc::STDIN_FILENO, buf) {
            Ok(n) => return Ok(n),
            Err(e) => e,
        };
        match err.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => wait_for(libc::STDIN_FILENO, libc::POLLIN),
            _ => return Err(err),
        }
    }
}

/// Writes all of `data` to `fd` (1 or 2, or the user's terminal), unbuffered.
pub fn write_out(fd: libc::c_int, mut data: &[u8]) -> Result<(), ClientError> {
    while !data.is_empty() {
        let err = match ng_sys::fd::write(fd, data) {
            Ok(n) => {
                data = &data[n..];
                continue;
            }
            Err(e) => e,
        };
        match err.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => wait_for(fd, libc::POLLOUT),
            io::ErrorKind::BrokenPipe => return Err(ClientError::BrokenPipe),
            _ => return Err(ClientError::broken("write", &err)),
        }
    }
    Ok(())
}

/// Blocks until `fd` is ready for `events`.
fn wait_for(fd: libc::c_int, events: libc::c_short) {
    let mut pfd = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    // Errors (EINTR) just make the caller retry.
    let _ = ng_sys::fd::poll(&mut pfd, -1);
}
