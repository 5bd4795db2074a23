//! The platform layer shared by every crate of the workspace: the raw system calls, each
//! behind a safe function.
//!
//! Contract: every public function is safe to call, is a thin wrapper over one system
//! facility, takes and returns plain values (descriptors as `RawFd` or `OwnedFd`, pids as
//! `u32`), never panics, and reports failure as `io::Result`, `Option` or `bool` where the
//! caller can act on it. Nothing here holds state or decides policy. Every `unsafe` block
//! states its contract in a `// SAFETY:` comment. The only dependency is `libc`: the
//! client `ng` links this crate and must start fast.
//!
//! # Layout
//!
//! * [`fd`]: reading, writing, polling and flags of descriptors; `flock`.
//! * [`scm`]: passing descriptors over a Unix stream socket (`SCM_RIGHTS`): the one sender
//!   and the one receiver.
//! * [`socket`]: creating, connecting and tuning sockets.
//! * [`signal`]: dispositions, masks and sending signals.
//! * [`process`]: ids, limits, and the set-up of a spawned child between `fork` and `exec`.
//! * [`seccomp`]: watching the programs a process tree executes (seccomp user
//!   notification of `execve`), and forbidding seccomp filters.
//! * [`term`]: terminals and pseudo-terminals: modes, window size, foreground group.

pub mod fd;
pub mod process;
pub mod scm;
pub mod seccomp;
pub mod signal;
pub mod socket;
pub mod term;

use std::io;

/// `Ok(rc)` for a non-negative return value, else the `errno` error.
fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `Ok(n)` for a non-negative byte count, else the `errno` error.
fn check_len(n: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// The C library's message for error number `code` (`strerror_r`), exactly as `perror`
/// prints it; `None` if it has none.
pub fn strerror(code: i32) -> Option<String> {
    let mut buf = [0 as libc::c_char; 256];
    // SAFETY: the buffer is valid for its length; the XSI strerror_r NUL-terminates on
    // success.
    if unsafe { libc::strerror_r(code, buf.as_mut_ptr(), buf.len()) } != 0 {
        return None;
    }
    // SAFETY: on success the buffer holds a NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(text.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn strerror_reads_like_perror() {
        assert_eq!(
            super::strerror(libc::ENOENT).as_deref(),
            Some("No such file or directory")
        );
    }
}
