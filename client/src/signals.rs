//! Signals: which ones `ng` forwards, how they reach the session loop, and how `ng` stops
//! or dies by a signal itself.
//!
//! # Catching
//!
//! [`Catcher::install`] blocks the forwarded signals ([`FORWARDED`]) and opens a
//! `signalfd` for them, so they arrive as readable data the session loop polls next to the
//! socket: no handler runs, nothing races with a blocking read, and the stdin thread
//! inherits the mask. It costs two system calls, and a `sigaction` query per signal to
//! leave alone those the parent set to "ignore" (`nohup`, a background job of a
//! non-interactive shell): an ignored signal is neither caught nor forwarded, and is
//! reported to the server ([`Catcher::ignored`]) so the command ignores it as a cold run
//! would have.
//!
//! # Acting like the default
//!
//! When the server does not take signals (a stock server, TCP to an old `ngd`), each
//! caught signal gets exactly its default action: [`die_by`] for the terminating ones,
//! [`stop_by`] for `SIGTSTP`, nothing for `SIGWINCH` and `SIGCONT`. The shell then sees
//! what it always saw: `ng` killed by `SIGINT`, and the server cancels the command when the
//! connection drops.
//!
//! # Dying by the command's signal
//!
//! [`die_by`] restores the default disposition, unblocks the signal and raises it, so the
//! shell prints its usual "Killed" or "Segmentation fault" and a parent's `waitpid` sees a
//! signal. A core dump happens only when the command dumped core: otherwise
//! `RLIMIT_CORE` is set to 0 first (the shell's "(core dumped)" follows the command, and
//! `ng` never leaves a core of its own for a command that left none). A signal whose
//! default action does not kill falls back to the classic exit status.

use ng_proto::SignalName;
use std::io;
use std::mem;

/// The signals `ng` catches and forwards: the terminal's (`SIGINT`, `SIGQUIT`, `SIGTSTP`,
/// `SIGWINCH`), a hangup, the usual `kill` ones, and `SIGCONT` after a stop.
pub const FORWARDED: [libc::c_int; 9] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGWINCH,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCONT,
    libc::SIGTSTP,
];

/// Signals whose "ignore" disposition a cold command would inherit, and which `ng`
/// therefore reports when its parent set them so (`NGD_CLIENT_SIGIGN`).
const INHERITED_IGNORE: [libc::c_int; 10] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
];

/// Signal names and numbers, for the names that travel on the wire.
const NAMES: [(&str, libc::c_int); 31] = [
    ("SIGHUP", libc::SIGHUP),
    ("SIGINT", libc::SIGINT),
    ("SIGQUIT", libc::SIGQUIT),
    ("SIGILL", libc::SIGILL),
    ("SIGTRAP", libc::SIGTRAP),
    ("SIGABRT", libc::SIGABRT),
    ("SIGBUS", libc::SIGBUS),
    ("SIGFPE", libc::SIGFPE),
    ("SIGKILL", libc::SIGKILL),
    ("SIGUSR1", libc::SIGUSR1),
    ("SIGSEGV", libc::SIGSEGV),
    ("SIGUSR2", libc::SIGUSR2),
    ("SIGPIPE", libc::SIGPIPE),
    ("SIGALRM", libc::SIGALRM),
    ("SIGTERM", libc::SIGTERM),
    ("SIGSTKFLT", libc::SIGSTKFLT),
    ("SIGCHLD", libc::SIGCHLD),
    ("SIGCONT", libc::SIGCONT),
    ("SIGSTOP", libc::SIGSTOP),
    ("SIGTSTP", libc::SIGTSTP),
    ("SIGTTIN", libc::SIGTTIN),
    ("SIGTTOU", libc::SIGTTOU),
    ("SIGURG", libc::SIGURG),
    ("SIGXCPU", libc::SIGXCPU),
    ("SIGXFSZ", libc::SIGXFSZ),
    ("SIGVTALRM", libc::SIGVTALRM),
    ("SIGPROF", libc::SIGPROF),
    ("SIGWINCH", libc::SIGWINCH),
    ("SIGIO", libc::SIGIO),
    ("SIGPWR", libc::SIGPWR),
    ("SIGSYS", libc::SIGSYS),
];

/// The name of a signal number, if it has one here.
pub fn name_of(signo: libc::c_int) -> Option<SignalName> {
    NAMES
        .iter()
        .find(|(_, n)| *n == signo)
        .and_then(|(name, _)| SignalName::new(name.as_bytes()))
}

/// The number of a signal name, if this system has it.
pub fn number_of(name: &SignalName) -> Option<libc::c_int> {
    NAMES
        .iter()
        .find(|(n, _)| n.as_bytes() == name.as_bytes())
        .map(|(_, signo)| *signo)
}

fn sigset(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is valid storage; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { mem::zeroed() };
    // SAFETY: `set` is valid; the numbers are valid signals.
    unsafe {
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
    }
    set
}

/// The forwarded signals, caught through a `signalfd`.
#[derive(Debug)]
pub struct Catcher {
    fd: libc::c_int,
    /// The signals the parent left ignored (neither caught nor forwarded).
    ignored: Vec<libc::c_int>,
}

impl Catcher {
    /// Blocks the forwarded signals that are not ignored and opens a non-blocking
    /// `signalfd` for them. `pipe_ignored` says whether `SIGPIPE` was ignored when `ng`
    /// started (`ng` ignores it itself from then on).
    pub fn install(pipe_ignored: bool) -> io::Result<Catcher> {
        let mut ignored = Vec::new();
        for &signo in &INHERITED_IGNORE {
            let is_ignored = if signo == libc::SIGPIPE {
                pipe_ignored
            } else {
                // SAFETY: querying a disposition writes only `old`.
                unsafe {
                    let mut old: libc::sigaction = mem::zeroed();
                    libc::sigaction(signo, std::ptr::null(), &mut old) == 0
                        && old.sa_sigaction == libc::SIG_IGN
                }
            };
            if is_ignored {
                ignored.push(signo);
            }
        }
        let caught: Vec<libc::c_int> = FORWARDED
            .iter()
            .copied()
            .filter(|s| !ignored.contains(s))
            .collect();
        let set = sigset(&caught);
        // SAFETY: `set` is initialised; the old mask is not wanted.
        if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new signalfd for an initialised set.
        let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            // SAFETY: as above.
            unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
            return Err(err);
        }
        Ok(Catcher { fd, ignored })
    }

    /// The descriptor to poll for readability.
    pub fn fd(&self) -> libc::c_int {
        self.fd
    }

    /// The names of the signals the parent left ignored.
    pub fn ignored(&self) -> Vec<SignalName> {
        self.ignored.iter().filter_map(|&s| name_of(s)).collect()
    }

    /// The next caught signal, if one is pending.
    pub fn next(&self) -> Option<libc::c_int> {
        // SAFETY: an all-zero signalfd_siginfo is valid storage.
        let mut info: libc::signalfd_siginfo = unsafe { mem::zeroed() };
        let size = mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: `info` is writable for `size` bytes.
        let n = unsafe {
            libc::read(
                self.fd,
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        };
        (n == size as isize).then_some(info.ssi_signo as libc::c_int)
    }

    /// Takes a pending `SIGCONT` without waiting; true if there was one.
    pub fn take_cont(&self) -> bool {
        let set = sigset(&[libc::SIGCONT]);
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: an initialised set and a zero timeout; no siginfo wanted.
        unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) == libc::SIGCONT }
    }
}

impl Drop for Catcher {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours.
        unsafe { libc::close(self.fd) };
    }
}

/// Dies by `signo` with its default action. Returns only if that action does not kill
/// (the caller then exits with the classic status). Without `core`, `RLIMIT_CORE` is set
/// to 0 first so that no core of `ng` is written.
pub fn die_by(signo: libc::c_int, core: bool) {
    if !core {
        let zero = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: lowering our own limit; a failure only means a possible core file.
        unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) };
    }
    if signo == libc::SIGKILL {
        // SAFETY: killing ourselves.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        return;
    }
    let set = sigset(&[signo]);
    // SAFETY: restoring the default disposition, then raising and unblocking the signal
    // on this thread; the default action happens at the unblock.
    unsafe {
        libc::signal(signo, libc::SIG_DFL);
        libc::raise(signo);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Stops the client with `signo` (`SIGTSTP`, `SIGTTIN`, `SIGTTOU`, `SIGSTOP`) as its
/// default action would, and returns once continued. In an orphaned process group the
/// kernel discards such a stop, as it would for the command run cold, and this returns
/// at once.
pub fn stop_by(signo: libc::c_int) {
    if signo == libc::SIGSTOP {
        // SAFETY: stopping ourselves.
        unsafe { libc::kill(libc::getpid(), libc::SIGSTOP) };
        return;
    }
    let set = sigset(&[signo]);
    // SAFETY: as in `die_by`; the stop happens at the unblock, and the signal is blocked
    // again once continued.
    unsafe {
        let mut old: libc::sigaction = mem::zeroed();
        let mut dfl: libc::sigaction = mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(signo, &dfl, &mut old);
        libc::raise(signo);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::sigaction(signo, &old, std::ptr::null_mut());
    }
}

/// The size of the first terminal among fds 1, 2 and 0.
pub fn window_size() -> Option<ng_proto::WinSize> {
    for fd in [1, 2, 0] {
        // SAFETY: an all-zero winsize is valid storage for TIOCGWINSZ.
        let mut ws: libc::winsize = unsafe { mem::zeroed() };
        // SAFETY: TIOCGWINSZ writes a winsize.
        if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0 {
            return Some(ng_proto::WinSize {
                cols: ws.ws_col,
                rows: ws.ws_row,
                xpixel: ws.ws_xpixel,
                ypixel: ws.ws_ypixel,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_agree() {
        for (name, signo) in NAMES {
            let n = SignalName::new(name.as_bytes()).unwrap();
            assert_eq!(number_of(&n), Some(signo));
            assert_eq!(name_of(signo).unwrap().as_str(), name);
        }
        assert_eq!(number_of(&SignalName::new(b"SIGNOPE").unwrap()), None);
        for signo in FORWARDED {
            assert!(name_of(signo).is_some(), "{signo}");
        }
    }
}
