//! What a signal forwarded from a client does to a command: one table over `ng-proto`'s
//! signal names, by each signal's default action (signal(7)).
//!
//! Whoever delivers a forwarded signal asks it here: ngd, whether a signal cancels an
//! in-process command or ends a queued session; a worker, whether a stop or a continue
//! changes what it reports, and whether a signal interrupts a command that cannot die by
//! it. The SDKs' tests read [`TABLE`] from this file, so each entry stays on one line of
//! the shape `(Signal::Int, Effect::Ends),`.

use ng_proto::Signal;

/// What a signal does to a process that left it at its default action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Ends the process, and is what a user or another program sends to end or interrupt
    /// a command (`SIGINT`, `SIGTERM`, `SIGHUP`, ...): ngd cancels an in-process command
    /// with it, and ends a queued session as it would end the command.
    Ends,
    /// Ends the process too, but is the process's own fault, a limit or a timer it set, or
    /// cannot be caught (`SIGSEGV`, `SIGXCPU`, `SIGKILL`, ...): ngd only passes it on.
    Fatal,
    /// Stops the process (`SIGTSTP`, `SIGTTIN`, `SIGTTOU`, `SIGSTOP`).
    Stops,
    /// Continues a stopped process (`SIGCONT`).
    Continues,
    /// Nothing (`SIGCHLD`, `SIGURG`, `SIGWINCH`).
    Ignored,
}

/// Every signal of `ng-proto`'s table, in the same order, with what it does.
pub const TABLE: [(Signal, Effect); 31] = [
    (Signal::Hup, Effect::Ends),
    (Signal::Int, Effect::Ends),
    (Signal::Quit, Effect::Ends),
    (Signal::Ill, Effect::Fatal),
    (Signal::Trap, Effect::Fatal),
    (Signal::Abrt, Effect::Fatal),
    (Signal::Bus, Effect::Fatal),
    (Signal::Fpe, Effect::Fatal),
    (Signal::Kill, Effect::Fatal),
    (Signal::Usr1, Effect::Ends),
    (Signal::Segv, Effect::Fatal),
    (Signal::Usr2, Effect::Ends),
    (Signal::Pipe, Effect::Ends),
    (Signal::Alrm, Effect::Ends),
    (Signal::Term, Effect::Ends),
    (Signal::Stkflt, Effect::Fatal),
    (Signal::Chld, Effect::Ignored),
    (Signal::Cont, Effect::Continues),
    (Signal::Stop, Effect::Stops),
    (Signal::Tstp, Effect::Stops),
    (Signal::Ttin, Effect::Stops),
    (Signal::Ttou, Effect::Stops),
    (Signal::Urg, Effect::Ignored),
    (Signal::Xcpu, Effect::Fatal),
    (Signal::Xfsz, Effect::Fatal),
    (Signal::Vtalrm, Effect::Fatal),
    (Signal::Prof, Effect::Fatal),
    (Signal::Winch, Effect::Ignored),
    (Signal::Io, Effect::Fatal),
    (Signal::Pwr, Effect::Fatal),
    (Signal::Sys, Effect::Fatal),
];

impl Effect {
    /// What `signal` does.
    pub fn of(signal: Signal) -> Self {
        TABLE[signal as usize].1
    }

    /// Whether it ends the process ([`Effect::Ends`] or [`Effect::Fatal`]).
    pub fn ends_process(self) -> bool {
        matches!(self, Effect::Ends | Effect::Fatal)
    }

    /// Whether it leaves a process running: it stops it, continues it or does nothing. A
    /// command that can neither stop nor die by a signal (an in-process one) is not
    /// interrupted by it.
    pub fn is_harmless(self) -> bool {
        !self.ends_process()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_the_signal_table() {
        for (i, &(signal, _)) in TABLE.iter().enumerate() {
            assert_eq!(Signal::ALL[i], signal);
        }
    }

    #[test]
    fn stops_continues_and_ends() {
        let stops: Vec<Signal> = Signal::ALL
            .into_iter()
            .filter(|&s| Effect::of(s) == Effect::Stops)
            .collect();
        assert_eq!(
            stops,
            [Signal::Stop, Signal::Tstp, Signal::Ttin, Signal::Ttou]
        );
        assert_eq!(Effect::of(Signal::Cont), Effect::Continues);
        assert!(Effect::of(Signal::Int).ends_process());
        assert!(Effect::of(Signal::Segv).ends_process());
        assert!(Effect::of(Signal::Winch).is_harmless());
        assert!(Effect::of(Signal::Tstp).is_harmless());
    }
}
