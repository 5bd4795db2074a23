//! Signals: which ones `ng` forwards, how they reach the session loop, and how `ng` stops
//! or dies by a signal itself.
//!
//! # Catching
//!
//! Catching happens in two steps, so that almost none of it stands between connecting and
//! sending the header:
//!
//! 1. [`Catcher::install`], before connecting, gives each forwarded signal ([`FORWARDED`])
//!    a handler. Setting it returns the disposition the parent left, so the same
//!    `sigaction` call tells whether the signal was ignored (`nohup`, a background job of
//!    a non-interactive shell): an ignored signal gets its "ignore" back, is neither caught
//!    nor forwarded, and is reported to the server ([`Catcher::ignored`]) so the command
//!    ignores it as a cold run would have. Until the next step the handler does exactly
//!    what the default action would (die, stop for `SIGTSTP`, nothing for `SIGWINCH` and
//!    `SIGCONT`), so `^C` during a slow connect or an autostart still ends `ng` at once.
//! 2. [`Catcher::arm`], once connected, makes the handler only record the signal in an
//!    atomic bit set, and blocks the signals. The session loop waits with `ppoll`, which
//!    unblocks them for the duration of the wait only: a signal that arrived earlier is
//!    delivered as the wait begins, one that arrives during it ends the wait, and no
//!    handler ever interrupts anything else (the stdin thread inherits the mask and never
//!    runs one).
//!
//! That is one `sigaction` per signal before connecting (and a query each for `SIGTTIN`
//! and `SIGTTOU`, which are only reported), one `sigprocmask` after, and no descriptor.
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
//! default action does not kill falls back to the classic exit status. [`die_by`] and
//! [`stop_by`] make only async-signal-safe calls, so the unarmed handler uses them too.

use ng_proto::{Signal, SignalName};
use ng_sys::signal::{self, SigSet};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// The name of a signal number, if it has one here.
pub fn name_of(signo: libc::c_int) -> Option<SignalName> {
    Signal::from_number(signo).map(Signal::to_name)
}

/// The number of a signal name, if this system has it.
pub fn number_of(name: &SignalName) -> Option<libc::c_int> {
    name.number()
}

/// The forwarded signals that arrived and were not taken yet, one bit per signal number.
static CAUGHT: AtomicU64 = AtomicU64::new(0);

/// Whether the handler records signals ([`Catcher::arm`]) rather than acting on them.
static ARMED: AtomicBool = AtomicBool::new(false);

/// The handler of every caught signal. Armed, it records the signal (an atomic update is
/// async-signal-safe); before that it gives the signal its default action, using only
/// async-signal-safe calls (`sigaction`, `raise`, the signal mask, `_exit`).
extern "C" fn on_signal(signo: libc::c_int) {
    if !(1..64).contains(&signo) {
        return;
    }
    if ARMED.load(Ordering::SeqCst) {
        CAUGHT.fetch_or(1 << signo, Ordering::SeqCst);
        return;
    }
    match signo {
        libc::SIGWINCH | libc::SIGCONT => {}
        libc::SIGTSTP => stop_by(signo),
        _ => {
            die_by(signo, true);
            ng_sys::process::exit_now(128 + signo);
        }
    }
}

/// The forwarded signals, caught by [`on_signal`].
pub struct Catcher {
    /// The signals caught (the forwarded ones the parent did not leave ignored).
    caught: SigSet,
    /// Once armed, the signal mask to wait with: the one `ng` started with, minus the
    /// caught signals.
    wait_mask: Option<SigSet>,
    /// Once armed, the mask `ng` started with.
    original: Option<SigSet>,
    /// The signals the parent left ignored (neither caught nor forwarded), in
    /// [`INHERITED_IGNORE`] order.
    ignored: Vec<libc::c_int>,
}

impl std::fmt::Debug for Catcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catcher")
            .field("armed", &self.wait_mask.is_some())
            .field("ignored", &self.ignored)
            .finish_non_exhaustive()
    }
}

impl Catcher {
    /// Gives the forwarded signals that are not ignored the handler, still acting like
    /// their default action until [`Catcher::arm`]. `pipe_ignored` says whether `SIGPIPE`
    /// was ignored when `ng` started (`ng` ignores it itself from then on).
    pub fn install(pipe_ignored: bool) -> io::Result<Catcher> {
        // Armed, the handler runs only inside `ppoll`; before that (and in the moment
        // between arming and blocking) interrupted calls are restarted (`SA_RESTART`).
        let mut ignored_bits = 0u64;
        let mut caught = Vec::with_capacity(FORWARDED.len());
        for &signo in &FORWARDED {
            let old = match signal::catch(signo, on_signal) {
                Ok(old) => old,
                Err(err) => {
                    restore_default(&caught);
                    return Err(err);
                }
            };
            if old.is_ignored() && INHERITED_IGNORE.contains(&signo) {
                signal::restore(signo, &old);
                ignored_bits |= 1 << signo;
            } else {
                caught.push(signo);
            }
        }
        for &signo in INHERITED_IGNORE.iter().filter(|s| !FORWARDED.contains(s)) {
            let is_ignored = if signo == libc::SIGPIPE {
                pipe_ignored
            } else {
                signal::disposition(signo).is_some_and(|d| d.is_ignored())
            };
            if is_ignored {
                ignored_bits |= 1 << signo;
            }
        }
        let ignored = INHERITED_IGNORE
            .iter()
            .copied()
            .filter(|&s| ignored_bits & (1 << s) != 0)
            .collect();
        Ok(Catcher {
            caught: SigSet::of(&caught),
            wait_mask: None,
            original: None,
            ignored,
        })
    }

    /// From now on the caught signals are recorded for the session loop, and blocked
    /// outside its waits. On failure nothing changes: they keep their default action.
    pub fn arm(&mut self) -> io::Result<()> {
        ARMED.store(true, Ordering::SeqCst);
        let mut wait_mask = match signal::block(&self.caught) {
            Ok(old) => old,
            Err(err) => {
                ARMED.store(false, Ordering::SeqCst);
                return Err(err);
            }
        };
        self.original = Some(wait_mask);
        // A signal the parent left blocked is caught all the same.
        for signo in FORWARDED {
            if self.caught.contains(signo) {
                wait_mask.remove(signo);
            }
        }
        self.wait_mask = Some(wait_mask);
        Ok(())
    }

    /// Puts back what `ng` was started with, before it execs a program in its place: the
    /// caught signals' default dispositions and the original mask. A signal caught and not
    /// yet taken gets its default action now, as it would have without `ng`.
    pub fn release(self) {
        restore_default(
            &FORWARDED
                .iter()
                .copied()
                .filter(|&s| self.caught.contains(s))
                .collect::<Vec<_>>(),
        );
        if let Some(original) = &self.original {
            signal::set_mask(original);
        }
        while let Some(signo) = self.next() {
            signal::raise(signo);
        }
    }

    /// Once armed, the mask to wait with (`ppoll`): the caught signals unblocked.
    pub fn wait_mask(&self) -> Option<&SigSet> {
        self.wait_mask.as_ref()
    }

    /// True if a caught signal is waiting to be taken with [`Catcher::next`].
    pub fn pending(&self) -> bool {
        CAUGHT.load(Ordering::Relaxed) != 0
    }

    /// The names of the signals the parent left ignored.
    pub fn ignored(&self) -> Vec<SignalName> {
        self.ignored.iter().filter_map(|&s| name_of(s)).collect()
    }

    /// The next caught signal (the lowest number first), if one is pending.
    pub fn next(&self) -> Option<libc::c_int> {
        let bits = CAUGHT.load(Ordering::Relaxed);
        if bits == 0 {
            return None;
        }
        let signo = bits.trailing_zeros();
        CAUGHT.fetch_and(!(1 << signo), Ordering::Relaxed);
        Some(signo as libc::c_int)
    }

    /// Takes a `SIGCONT` that arrived (caught, or still pending while blocked) without
    /// waiting; true if there was one.
    pub fn take_cont(&self) -> bool {
        let bit = 1 << libc::SIGCONT;
        let caught = CAUGHT.fetch_and(!bit, Ordering::Relaxed) & bit != 0;
        let pending = signal::take_pending(libc::SIGCONT);
        caught || pending
    }
}

/// Puts the default disposition back on `signals` (after a failed install).
fn restore_default(signals: &[libc::c_int]) {
    for &signo in signals {
        signal::set_default(signo);
    }
}

/// Dies by `signo` with its default action. Returns only if that action does not kill
/// (the caller then exits with the classic status). Without `core`, `RLIMIT_CORE` is set
/// to 0 first so that no core of `ng` is written.
pub fn die_by(signo: libc::c_int, core: bool) {
    if !core {
        // A failure only means a possible core file.
        ng_sys::process::forbid_core_dump();
    }
    if signo == libc::SIGKILL {
        signal::kill_self(libc::SIGKILL);
        return;
    }
    // Restoring the default disposition, then raising and unblocking the signal on this
    // thread; the default action happens at the unblock.
    signal::set_default(signo);
    signal::raise(signo);
    signal::unblock(&SigSet::of(&[signo]));
}

/// Stops the client with `signo` (`SIGTSTP`, `SIGTTIN`, `SIGTTOU`, `SIGSTOP`) as its
/// default action would, and returns once continued. In an orphaned process group the
/// kernel discards such a stop, as it would for the command run cold, and this returns
/// at once.
pub fn stop_by(signo: libc::c_int) {
    if signo == libc::SIGSTOP {
        signal::kill_self(libc::SIGSTOP);
        return;
    }
    // As in `die_by`; the stop happens at the unblock, and the signal is blocked again
    // once continued.
    let set = SigSet::of(&[signo]);
    let old = signal::swap_default(signo);
    signal::raise(signo);
    signal::unblock(&set);
    let _ = signal::block(&set);
    signal::restore(signo, &old);
}

/// The size of the first terminal among fds 1, 2 and 0.
pub fn window_size() -> Option<ng_proto::WinSize> {
    for fd in [1, 2, 0] {
        if let Some(ws) = ng_sys::term::window_size(fd) {
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
        for (name, signo) in Signal::ALL.map(|s| (s.name(), s.number())) {
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
