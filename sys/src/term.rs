//! Terminals: pseudo-terminal pairs, modes (`termios`), window size, the controlling
//! terminal and its foreground process group.

use crate::check;
use std::io;
use std::mem::{self, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// When new modes take effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// At once (`TCSANOW`).
    Now,
    /// Once the output written so far has been sent (`TCSADRAIN`).
    Drain,
}

/// A new pseudo-terminal: its master and its slave, both close-on-exec and neither made a
/// controlling terminal (`O_NOCTTY`). The slave is opened from the master itself
/// (`TIOCGPTPEER`), without looking its name up.
#[cfg(target_os = "linux")]
pub fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: plain system call; the descriptor is owned as soon as it exists.
    let master = unsafe { OwnedFd::from_raw_fd(check(libc::posix_openpt(flags))?) };
    // SAFETY: unlockpt and TIOCGPTPEER on the master we own; the slave is owned as soon
    // as it exists.
    let slave = unsafe {
        check(libc::unlockpt(master.as_raw_fd()))?;
        OwnedFd::from_raw_fd(check(libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            flags,
        ))?)
    };
    Ok((master, slave))
}

/// The terminal modes of `fd` (`tcgetattr`).
pub fn modes(fd: RawFd) -> io::Result<libc::termios> {
    let mut t = MaybeUninit::<libc::termios>::uninit();
    // SAFETY: tcgetattr writes a whole termios into the storage on success.
    check(unsafe { libc::tcgetattr(fd, t.as_mut_ptr()) })?;
    // SAFETY: tcgetattr succeeded, so `t` is initialised.
    Ok(unsafe { t.assume_init() })
}

/// Sets the terminal modes of `fd` (`tcsetattr`).
pub fn set_modes(fd: RawFd, modes: &libc::termios, when: When) -> io::Result<()> {
    let when = match when {
        When::Now => libc::TCSANOW,
        When::Drain => libc::TCSADRAIN,
    };
    // SAFETY: tcsetattr reads a live termios.
    check(unsafe { libc::tcsetattr(fd, when, modes) }).map(drop)
}

/// Turns `modes` into raw mode (`cfmakeraw`): bytes as typed, no echo, no signals from keys.
pub fn make_raw(modes: &mut libc::termios) {
    // SAFETY: cfmakeraw edits a live termios.
    unsafe { libc::cfmakeraw(modes) };
}

/// The window size of terminal `fd` (`TIOCGWINSZ`).
pub fn window_size(fd: RawFd) -> Option<libc::winsize> {
    // SAFETY: an all-zero winsize is valid storage for TIOCGWINSZ.
    let mut ws: libc::winsize = unsafe { mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize.
    (unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0).then_some(ws)
}

/// Sets the window size of terminal `fd` (`TIOCSWINSZ`; on a pseudo-terminal a change
/// sends `SIGWINCH` to its foreground process group).
pub fn set_window_size(fd: RawFd, ws: &libc::winsize) -> io::Result<()> {
    // SAFETY: TIOCSWINSZ reads a live winsize.
    check(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, ws) }).map(drop)
}

/// Whether `fd` is this process's controlling terminal with this process's group in its
/// foreground (`tcgetpgrp` is `getpgrp`).
pub fn in_foreground(fd: RawFd) -> bool {
    // SAFETY: plain queries; tcgetpgrp fails unless `fd` is our controlling terminal.
    unsafe { libc::tcgetpgrp(fd) == libc::getpgrp() }
}

/// The foreground process group of the terminal whose pseudo-terminal master is `master`
/// (`TIOCGPGRP` on the master): `Some(0)` when the terminal is no session's controlling
/// terminal, so that no process group gets the signals its keys make; `None` if it cannot
/// be asked.
pub fn foreground_group(master: RawFd) -> Option<libc::pid_t> {
    let mut pgrp: libc::pid_t = 0;
    // SAFETY: TIOCGPGRP writes a pid_t.
    (unsafe { libc::ioctl(master, libc::TIOCGPGRP, &mut pgrp) } == 0).then_some(pgrp)
}

/// Makes terminal `fd` the controlling terminal of this process, a session leader
/// without one (`TIOCSCTTY`, not stealing it from another session).
pub fn take_controlling(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument.
    check(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) }).map(drop)
}

/// Makes process group `pgid` the foreground group of terminal `fd`, our controlling
/// terminal (`tcsetpgrp`).
pub fn set_foreground(fd: RawFd, pgid: u32) -> io::Result<()> {
    // SAFETY: tcsetpgrp on integers.
    check(unsafe { libc::tcsetpgrp(fd, pgid as libc::pid_t) }).map(drop)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_new_pty_has_no_foreground_group() {
        let (master, _slave) = open_pty().unwrap();
        assert_eq!(foreground_group(master.as_raw_fd()), Some(0));
    }

    #[test]
    fn a_pty_pair_carries_modes_and_size() {
        let (master, slave) = open_pty().unwrap();
        let ws = libc::winsize {
            ws_row: 33,
            ws_col: 111,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        set_window_size(slave.as_raw_fd(), &ws).unwrap();
        let got = window_size(master.as_raw_fd()).unwrap();
        assert_eq!((got.ws_row, got.ws_col), (33, 111));
        let cooked = modes(slave.as_raw_fd()).unwrap();
        assert_ne!(cooked.c_lflag & libc::ICANON, 0);
        let mut raw = cooked;
        make_raw(&mut raw);
        set_modes(slave.as_raw_fd(), &raw, When::Now).unwrap();
        assert_eq!(modes(slave.as_raw_fd()).unwrap().c_lflag & libc::ICANON, 0);
        set_modes(slave.as_raw_fd(), &cooked, When::Drain).unwrap();
        assert_ne!(modes(slave.as_raw_fd()).unwrap().c_lflag & libc::ICANON, 0);
        // Not our controlling terminal.
        assert!(!in_foreground(slave.as_raw_fd()));
        assert!(modes(-1).is_err() && window_size(-1).is_none());
    }
}
