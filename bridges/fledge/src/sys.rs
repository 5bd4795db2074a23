//! fledge's platform module: every raw `libc` call of the bridge, each behind a function
//! that is safe to call.
//!
//! The rest of the crate names processes, descriptors and terminal modes through the
//! types here ([`Pid`], [`Signal`], [`WaitStatus`], [`TermModes`], [`ExecSetup`]) and never
//! writes `unsafe` itself. Errors are returned as [`std::io::Error`] from `errno`; an
//! interrupted call (`EINTR`) is retried where the caller would only retry it.
//!
//! Signalling by pid is sound by construction but only meaningful while the process has
//! not been reaped (or, for a group, while its leader or a member lives): the callers keep
//! that rule, as they say where they signal.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};

/// A process id (also a process group id: a plugin leads its own group).
pub type Pid = libc::pid_t;

/// A signal number.
pub type Signal = libc::c_int;

/// `Ok` when a libc call returned `0` or more, else `errno` as an error.
fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Makes writes to a closed pipe fail with `EPIPE` instead of killing the process.
pub fn ignore_sigpipe() {
    // SAFETY: `signal` with `SIG_IGN` installs no handler; it only changes a disposition.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Sends `sig` to every process of group `pgid`.
pub fn signal_group(pgid: Pid, sig: Signal) -> io::Result<()> {
    // SAFETY: `killpg` takes plain integers and touches no memory of ours.
    check(unsafe { libc::killpg(pgid, sig) }).map(drop)
}

/// Sends `sig` to process `pid` alone.
pub fn signal_process(pid: Pid, sig: Signal) -> io::Result<()> {
    // SAFETY: `kill` takes plain integers and touches no memory of ours.
    check(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// What `waitpid` reported for a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStatus {
    /// It stopped with this signal (it is still our unreaped child).
    Stopped(Signal),
    /// It ended and is reaped.
    Ended(ExitStatus),
}

/// `waitpid(pid, options)`, retried while interrupted.
fn wait(pid: Pid, options: libc::c_int) -> io::Result<libc::c_int> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a live, writable `c_int` for the duration of the call.
        let rc = unsafe { libc::waitpid(pid, &mut status, options) };
        match check(rc) {
            Ok(_) => return Ok(status),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Waits for child `pid` to end and reaps it. The caller owns the reaping: no other
/// code waits for this child (a `std::process::Child` handle of it is never waited on).
pub fn wait_for_exit(pid: Pid) -> io::Result<ExitStatus> {
    wait(pid, 0).map(ExitStatus::from_raw)
}

/// Waits for child `pid` to stop or to end (`WUNTRACED`); an ended child is reaped. The
/// caller owns the reaping, as for [`wait_for_exit`].
pub fn wait_for_stop_or_exit(pid: Pid) -> io::Result<WaitStatus> {
    let status = wait(pid, libc::WUNTRACED)?;
    Ok(if libc::WIFSTOPPED(status) {
        WaitStatus::Stopped(libc::WSTOPSIG(status))
    } else {
        WaitStatus::Ended(ExitStatus::from_raw(status))
    })
}

/// Puts `fd` in non-blocking mode.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `fcntl` with `F_GETFL`/`F_SETFL` on a descriptor the borrow keeps open;
    // neither reads or writes memory of ours.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

/// Blocks until `fd` is readable (or at end of file, or in error: a read then says
/// which); an interrupted or empty wait is retried.
pub fn wait_readable(fd: BorrowedFd<'_>) -> io::Result<()> {
    loop {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one live `pollfd`, matching the count 1; the borrow keeps the
        // descriptor open.
        match check(unsafe { libc::poll(&mut pfd, 1, -1) }) {
            Ok(0) => {}
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A pipe, both ends close-on-exec: `(read, write)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe2` writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: `pipe2` succeeded, so both are fresh descriptors nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Whether [`take_inherited_fd`] has given a descriptor out.
static INHERITED_TAKEN: AtomicBool = AtomicBool::new(false);

/// The descriptor `fd` this process was started with, as a file, the first time it is
/// asked for and only if it is open (`None` otherwise). The prompt helper's answer pipe
/// is fd 3, set up by [`give_fd_at_exec`] in the bridge.
pub fn take_inherited_fd(fd: RawFd) -> Option<File> {
    if INHERITED_TAKEN.swap(true, Ordering::SeqCst) {
        return None;
    }
    // SAFETY: `F_GETFD` only asks whether `fd` is open.
    check(unsafe { libc::fcntl(fd, libc::F_GETFD) }).ok()?;
    // SAFETY: `fd` is open, was inherited at exec (no object of this process was created
    // owning it before this first and only call), and the returned file becomes its one
    // owner.
    Some(unsafe { File::from_raw_fd(fd) })
}

/// Has `cmd`'s process get `fd` as its descriptor number `target`. `fd` lives in `cmd`
/// until `cmd` is dropped: drop `cmd` after spawning to close the parent's copy.
pub fn give_fd_at_exec(cmd: &mut Command, fd: OwnedFd, target: RawFd) {
    let setup = move || {
        // SAFETY: `dup2` is async-signal-safe and takes plain integers; `fd` is open
        // (owned by this closure).
        check(unsafe { libc::dup2(fd.as_raw_fd(), target) })?;
        Ok(())
    };
    // SAFETY: the closure only calls `dup2`, which is async-signal-safe, and allocates
    // nothing between fork and exec.
    unsafe { cmd.pre_exec(setup) };
}

/// What a plugin process sets up between fork and exec.
#[derive(Debug, Clone, Default)]
pub struct ExecSetup {
    /// The umask it starts with, when the session gave one.
    pub umask: Option<u32>,
    /// The signals it starts with ignored; every other one starts with its default action,
    /// whatever the bridge itself inherited ignored.
    pub ignored: Vec<Signal>,
    /// Which of its fds 0, 1, 2 are closed.
    pub closed: [bool; 3],
}

/// Has `cmd`'s process apply `setup` before it executes its program.
pub fn setup_at_exec(cmd: &mut Command, setup: ExecSetup) {
    let apply = move || {
        // SAFETY: `umask`, `signal` with `SIG_DFL` or `SIG_IGN` and `close` are
        // async-signal-safe and take plain integers; `setup` was allocated before the fork
        // and is only read.
        unsafe {
            if let Some(mask) = setup.umask {
                libc::umask(mask as libc::mode_t);
            }
            // A cold run inherits the client's ignored signals, not the bridge's (an ngd
            // started under `nohup` ignores SIGHUP): handlers are reset by exec, and an
            // ignored signal is not, so each standard one the session did not ignore is reset
            // here.
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP && !setup.ignored.contains(&sig) {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            for &sig in &setup.ignored {
                libc::signal(sig, libc::SIG_IGN);
            }
            for (fd, &closed) in setup.closed.iter().enumerate() {
                if closed {
                    libc::close(fd as libc::c_int);
                }
            }
        }
        Ok(())
    };
    // SAFETY: the closure makes only async-signal-safe calls and allocates nothing
    // between fork and exec.
    unsafe { cmd.pre_exec(apply) };
}

/// A terminal's modes, read to be put back later.
pub struct TermModes(libc::termios);

impl std::fmt::Debug for TermModes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TermModes")
    }
}

impl TermModes {
    /// The modes of the terminal on `fd`; `None` when it is not a terminal.
    pub fn read(fd: BorrowedFd<'_>) -> Option<Self> {
        // SAFETY: an all-zero `termios` is a valid value of this plain C struct.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: `t` is a live, writable `termios`; the borrow keeps `fd` open.
        check(unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) }).ok()?;
        Some(Self(t))
    }

    /// Puts these modes back on the terminal on `fd`, at once.
    pub fn restore(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: `self.0` was filled by `tcgetattr` and is only read; the borrow keeps
        // `fd` open.
        check(unsafe { libc::tcsetattr(fd.as_raw_fd(), libc::TCSANOW, &self.0) }).map(drop)
    }
}

/// The width in columns of the terminal on `fd`; `None` when it is not a terminal or
/// reports no width.
pub fn terminal_width(fd: BorrowedFd<'_>) -> Option<u16> {
    // SAFETY: an all-zero `winsize` is a valid value of this plain C struct.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: `TIOCGWINSZ` writes one `winsize` into `ws`, which is live and writable;
    // the borrow keeps `fd` open.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col > 0).then_some(ws.ws_col)
}

/// How a file lock is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Readers share it.
    Shared,
    /// One writer holds it.
    Exclusive,
}

/// Takes an advisory `flock` lock on `file`, waiting for it (interrupted waits retried).
pub fn lock_file(file: &File, mode: LockMode) -> io::Result<()> {
    let op = match mode {
        LockMode::Shared => libc::LOCK_SH,
        LockMode::Exclusive => libc::LOCK_EX,
    };
    loop {
        // SAFETY: `flock` on a descriptor `file` keeps open; no memory is passed.
        match check(unsafe { libc::flock(file.as_raw_fd(), op) }) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Releases the `flock` lock on `file`.
pub fn unlock_file(file: &File) -> io::Result<()> {
    // SAFETY: as in `lock_file`.
    check(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn pipe_carries_bytes_and_wait_readable_returns_at_data() {
        let (r, w) = pipe().unwrap();
        File::from(w).write_all(b"x").unwrap();
        wait_readable(r.as_fd()).unwrap();
        let mut buf = String::new();
        File::from(r).read_to_string(&mut buf).unwrap();
        assert_eq!(buf, "x");
    }

    #[test]
    #[allow(clippy::zombie_processes)] // reaped by `wait_for_stop_or_exit`, by pid
    fn wait_reports_a_stop_then_the_exit() {
        let child = Command::new("sh")
            .args(["-c", "kill -STOP $$; exit 7"])
            .spawn()
            .unwrap();
        let pid = child.id() as Pid;
        assert_eq!(
            wait_for_stop_or_exit(pid).unwrap(),
            WaitStatus::Stopped(libc::SIGSTOP)
        );
        signal_process(pid, libc::SIGCONT).unwrap();
        match wait_for_stop_or_exit(pid).unwrap() {
            WaitStatus::Ended(st) => assert_eq!(st.code(), Some(7)),
            other => panic!("expected the exit, got {other:?}"),
        }
    }

    #[test]
    fn a_pipe_is_not_a_terminal() {
        let (r, _w) = pipe().unwrap();
        assert!(terminal_width(r.as_fd()).is_none());
        assert!(TermModes::read(r.as_fd()).is_none());
    }
}
