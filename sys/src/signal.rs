//! Signals: sets and masks, dispositions, sending, and taking a pending one.
//!
//! The calls a signal handler may make are async-signal-safe: [`set_default`],
//! [`swap_default`], [`restore`], [`raise`], [`unblock`], [`block`] and [`kill_self`]
//! each make exactly one such system call and allocate nothing.

use crate::check;
use std::fmt;
use std::io;
use std::mem;

/// A set of signals (`sigset_t`), always initialised.
#[derive(Clone, Copy)]
pub struct SigSet(libc::sigset_t);

impl SigSet {
    /// The set of `signals`.
    pub fn of(signals: &[libc::c_int]) -> SigSet {
        // SAFETY: an all-zero sigset_t is valid storage; sigemptyset initialises it.
        let mut set: libc::sigset_t = unsafe { mem::zeroed() };
        // SAFETY: `set` is valid storage; an invalid signal number is an error return.
        unsafe {
            libc::sigemptyset(&mut set);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
        }
        SigSet(set)
    }

    /// Whether `signo` is in the set.
    pub fn contains(&self, signo: libc::c_int) -> bool {
        // SAFETY: the set is initialised.
        unsafe { libc::sigismember(&self.0, signo) == 1 }
    }

    /// Takes `signo` out of the set.
    pub fn remove(&mut self, signo: libc::c_int) {
        // SAFETY: the set is initialised.
        unsafe { libc::sigdelset(&mut self.0, signo) };
    }

    /// The C set, for the wrappers that pass it on.
    pub(crate) fn as_raw(&self) -> &libc::sigset_t {
        &self.0
    }
}

impl fmt::Debug for SigSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries((1..64).filter(|&s| self.contains(s)))
            .finish()
    }
}

/// A signal's disposition as `sigaction` reported it, to put back later.
#[derive(Clone, Copy)]
pub struct Disposition(libc::sigaction);

impl Disposition {
    /// Whether the signal is ignored (`SIG_IGN`).
    pub fn is_ignored(&self) -> bool {
        self.0.sa_sigaction == libc::SIG_IGN
    }
}

impl fmt::Debug for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Disposition")
            .field("ignored", &self.is_ignored())
            .finish_non_exhaustive()
    }
}

/// Gives `signo` the handler `handler` (`SA_RESTART`, nothing else blocked while it runs)
/// and returns the disposition it had.
pub fn catch(signo: libc::c_int, handler: extern "C" fn(libc::c_int)) -> io::Result<Disposition> {
    // SAFETY: an all-zero sigaction is valid storage; the fields that matter are set.
    let mut act: libc::sigaction = unsafe { mem::zeroed() };
    act.sa_sigaction = handler as libc::sighandler_t;
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: `act.sa_mask` is valid storage.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: an all-zero sigaction is valid storage for the old disposition.
    let mut old: libc::sigaction = unsafe { mem::zeroed() };
    // SAFETY: `handler` is a valid extern "C" function for the whole life of the process;
    // `old` is writable.
    check(unsafe { libc::sigaction(signo, &act, &mut old) })?;
    Ok(Disposition(old))
}

/// The disposition of `signo`, without changing it.
pub fn disposition(signo: libc::c_int) -> Option<Disposition> {
    // SAFETY: an all-zero sigaction is valid storage; the query writes only `old`.
    unsafe {
        let mut old: libc::sigaction = mem::zeroed();
        (libc::sigaction(signo, std::ptr::null(), &mut old) == 0).then_some(Disposition(old))
    }
}

/// Puts back a disposition read earlier. Async-signal-safe.
pub fn restore(signo: libc::c_int, old: &Disposition) {
    // SAFETY: `old` came from sigaction, so its handler is one the process had.
    unsafe { libc::sigaction(signo, &old.0, std::ptr::null_mut()) };
}

/// Gives `signo` its default action (`signal(SIG_DFL)`). Async-signal-safe.
pub fn set_default(signo: libc::c_int) {
    // SAFETY: setting the default disposition has no preconditions.
    unsafe { libc::signal(signo, libc::SIG_DFL) };
}

/// Gives `signo` its default action with `sigaction` and returns the disposition it had,
/// for [`restore`]. Async-signal-safe.
pub fn swap_default(signo: libc::c_int) -> Disposition {
    // SAFETY: all-zero sigactions are valid; SIG_DFL with an empty mask is a valid action.
    unsafe {
        let mut old: libc::sigaction = mem::zeroed();
        let mut dfl: libc::sigaction = mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(signo, &dfl, &mut old);
        Disposition(old)
    }
}

/// Ignores `signo` (`signal(SIG_IGN)`); true if it was ignored already.
pub fn ignore(signo: libc::c_int) -> bool {
    // SAFETY: setting a signal's disposition to "ignore" has no preconditions.
    unsafe { libc::signal(signo, libc::SIG_IGN) == libc::SIG_IGN }
}

/// Blocks `set` on this thread; returns the mask it had. Async-signal-safe.
pub fn block(set: &SigSet) -> io::Result<SigSet> {
    // SAFETY: an all-zero sigset_t is valid storage for the old mask, which
    // pthread_sigmask fills.
    let mut old: libc::sigset_t = unsafe { mem::zeroed() };
    // SAFETY: `set` is initialised; `old` is writable.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set.0, &mut old) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(SigSet(old))
}

/// Unblocks `set` on this thread; a pending signal of it is delivered now.
/// Async-signal-safe.
pub fn unblock(set: &SigSet) {
    // SAFETY: `set` is initialised; the old mask is not wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set.0, std::ptr::null_mut()) };
}

/// Sets this thread's mask to `set` (to put back a mask [`block`] returned).
pub fn set_mask(set: &SigSet) {
    // SAFETY: `set` is initialised; the old mask is not wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set.0, std::ptr::null_mut()) };
}

/// Takes `signo` if it is pending (blocked and arrived), without waiting; true if it was.
pub fn take_pending(signo: libc::c_int) -> bool {
    let set = SigSet::of(&[signo]);
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: an initialised set and a zero timeout; no siginfo wanted.
    unsafe { libc::sigtimedwait(&set.0, std::ptr::null_mut(), &zero) == signo }
}

/// Raises `signo` on this thread. Async-signal-safe.
pub fn raise(signo: libc::c_int) {
    // SAFETY: raise has no memory-safety preconditions.
    unsafe { libc::raise(signo) };
}

/// Sends `signo` to this process. Async-signal-safe.
pub fn kill_self(signo: libc::c_int) {
    // SAFETY: kill(2) on our own pid; no memory is involved.
    unsafe { libc::kill(libc::getpid(), signo) };
}

/// Sends `signo` to process `pid`; nothing for a pid of 0 or one beyond `pid_t`.
pub fn kill(pid: u32, signo: libc::c_int) {
    if let Ok(pid @ 1..) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) on one pid; no memory is involved.
        unsafe { libc::kill(pid, signo) };
    }
}

/// Sends `signo` to the process group `pgid`; nothing for a group id of 0 or one beyond
/// `pid_t`.
pub fn kill_group(pgid: u32, signo: libc::c_int) {
    if let Ok(pgid @ 1..) = libc::pid_t::try_from(pgid) {
        // SAFETY: kill(2) with a negative pid addresses a process group; no memory is
        // involved.
        unsafe { libc::kill(-pgid, signo) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_hold_what_they_are_given() {
        let mut s = SigSet::of(&[libc::SIGINT, libc::SIGTERM]);
        assert!(s.contains(libc::SIGINT) && s.contains(libc::SIGTERM));
        assert!(!s.contains(libc::SIGHUP));
        s.remove(libc::SIGINT);
        assert!(!s.contains(libc::SIGINT));
        assert_eq!(format!("{s:?}"), format!("{{{}}}", libc::SIGTERM));
    }

    #[test]
    fn a_blocked_signal_waits_until_taken() {
        let set = SigSet::of(&[libc::SIGUSR2]);
        let old = block(&set).unwrap();
        assert!(!take_pending(libc::SIGUSR2));
        raise(libc::SIGUSR2);
        assert!(take_pending(libc::SIGUSR2));
        assert!(!take_pending(libc::SIGUSR2));
        if !old.contains(libc::SIGUSR2) {
            unblock(&set);
        }
    }
}
