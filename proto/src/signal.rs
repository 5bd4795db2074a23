//! The signals ngd knows by name: one table of names (`SIGINT`, ...) and this system's
//! numbers, shared by the client, the server, the worker crate and the bridges.
//!
//! A name on the wire is a [`SignalName`] (any well-formed name, known or not); its
//! [`SignalName::signal`] is the [`Signal`] it names when the table has it. Names a peer
//! sends that are not in the table stay [`SignalName`]s, and whoever delivers signals
//! decides what to do with them.

use std::fmt;

/// A signal ngd knows by name and number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// `SIGHUP`.
    Hup,
    /// `SIGINT`.
    Int,
    /// `SIGQUIT`.
    Quit,
    /// `SIGILL`.
    Ill,
    /// `SIGTRAP`.
    Trap,
    /// `SIGABRT`.
    Abrt,
    /// `SIGBUS`.
    Bus,
    /// `SIGFPE`.
    Fpe,
    /// `SIGKILL`.
    Kill,
    /// `SIGUSR1`.
    Usr1,
    /// `SIGSEGV`.
    Segv,
    /// `SIGUSR2`.
    Usr2,
    /// `SIGPIPE`.
    Pipe,
    /// `SIGALRM`.
    Alrm,
    /// `SIGTERM`.
    Term,
    /// `SIGSTKFLT`.
    Stkflt,
    /// `SIGCHLD`.
    Chld,
    /// `SIGCONT`.
    Cont,
    /// `SIGSTOP`.
    Stop,
    /// `SIGTSTP`.
    Tstp,
    /// `SIGTTIN`.
    Ttin,
    /// `SIGTTOU`.
    Ttou,
    /// `SIGURG`.
    Urg,
    /// `SIGXCPU`.
    Xcpu,
    /// `SIGXFSZ`.
    Xfsz,
    /// `SIGVTALRM`.
    Vtalrm,
    /// `SIGPROF`.
    Prof,
    /// `SIGWINCH`.
    Winch,
    /// `SIGIO`.
    Io,
    /// `SIGPWR`.
    Pwr,
    /// `SIGSYS`.
    Sys,
}

/// Every signal with its name and number, in the order of the numbers on Linux. The SDKs'
/// tests read this table from this file (`sdk/python/tests/test_vocabulary.py`), so each
/// entry stays on one line of this shape.
const TABLE: [(Signal, &str, libc::c_int); 31] = [
    (Signal::Hup, "SIGHUP", libc::SIGHUP),
    (Signal::Int, "SIGINT", libc::SIGINT),
    (Signal::Quit, "SIGQUIT", libc::SIGQUIT),
    (Signal::Ill, "SIGILL", libc::SIGILL),
    (Signal::Trap, "SIGTRAP", libc::SIGTRAP),
    (Signal::Abrt, "SIGABRT", libc::SIGABRT),
    (Signal::Bus, "SIGBUS", libc::SIGBUS),
    (Signal::Fpe, "SIGFPE", libc::SIGFPE),
    (Signal::Kill, "SIGKILL", libc::SIGKILL),
    (Signal::Usr1, "SIGUSR1", libc::SIGUSR1),
    (Signal::Segv, "SIGSEGV", libc::SIGSEGV),
    (Signal::Usr2, "SIGUSR2", libc::SIGUSR2),
    (Signal::Pipe, "SIGPIPE", libc::SIGPIPE),
    (Signal::Alrm, "SIGALRM", libc::SIGALRM),
    (Signal::Term, "SIGTERM", libc::SIGTERM),
    (Signal::Stkflt, "SIGSTKFLT", libc::SIGSTKFLT),
    (Signal::Chld, "SIGCHLD", libc::SIGCHLD),
    (Signal::Cont, "SIGCONT", libc::SIGCONT),
    (Signal::Stop, "SIGSTOP", libc::SIGSTOP),
    (Signal::Tstp, "SIGTSTP", libc::SIGTSTP),
    (Signal::Ttin, "SIGTTIN", libc::SIGTTIN),
    (Signal::Ttou, "SIGTTOU", libc::SIGTTOU),
    (Signal::Urg, "SIGURG", libc::SIGURG),
    (Signal::Xcpu, "SIGXCPU", libc::SIGXCPU),
    (Signal::Xfsz, "SIGXFSZ", libc::SIGXFSZ),
    (Signal::Vtalrm, "SIGVTALRM", libc::SIGVTALRM),
    (Signal::Prof, "SIGPROF", libc::SIGPROF),
    (Signal::Winch, "SIGWINCH", libc::SIGWINCH),
    (Signal::Io, "SIGIO", libc::SIGIO),
    (Signal::Pwr, "SIGPWR", libc::SIGPWR),
    (Signal::Sys, "SIGSYS", libc::SIGSYS),
];

impl Signal {
    /// Every signal in the table, in the order of their numbers.
    pub const ALL: [Signal; 31] = {
        let mut all = [Signal::Hup; 31];
        let mut i = 0;
        while i < TABLE.len() {
            all[i] = TABLE[i].0;
            i += 1;
        }
        all
    };

    /// The signal named `name` (`SIGINT`), exactly as the wire spells it.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        TABLE
            .iter()
            .find(|(_, n, _)| n.as_bytes() == name)
            .map(|&(s, _, _)| s)
    }

    /// The signal numbered `n` on this system.
    pub fn from_number(n: libc::c_int) -> Option<Self> {
        TABLE
            .iter()
            .find(|&&(_, _, number)| number == n)
            .map(|&(s, _, _)| s)
    }

    /// Its name, `SIG` included.
    pub fn name(self) -> &'static str {
        TABLE[self as usize].1
    }

    /// Its number on this system.
    pub fn number(self) -> libc::c_int {
        TABLE[self as usize].2
    }

    /// Its name as the wire carries it.
    pub fn to_name(self) -> SignalName {
        SignalName::new(self.name().as_bytes()).expect("the table holds well-formed names")
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The name of a signal, `SIG` and 1 to 12 upper-case letters, digits or `+`
/// (`SIGINT`, `SIGRTMIN+3`). Its number is looked up by whoever delivers it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SignalName {
    len: u8,
    bytes: [u8; 15],
}

impl SignalName {
    /// The longest name accepted, `SIG` included.
    pub const MAX_LEN: usize = 15;

    /// Validates a name.
    pub fn new(name: &[u8]) -> Option<Self> {
        let rest = name.strip_prefix(b"SIG")?;
        if rest.is_empty()
            || name.len() > Self::MAX_LEN
            || !rest
                .iter()
                .all(|&b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'+')
        {
            return None;
        }
        let mut bytes = [0; 15];
        bytes[..name.len()].copy_from_slice(name);
        Some(Self {
            len: name.len() as u8,
            bytes,
        })
    }

    /// The name's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored.
        std::str::from_utf8(self.as_bytes()).unwrap_or("SIG?")
    }
}

impl fmt::Debug for SignalName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for SignalName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SignalName {
    /// The signal this name stands for, if the table knows it.
    pub fn signal(&self) -> Option<Signal> {
        Signal::from_name(self.as_bytes())
    }

    /// This system's number for the name, if the table knows it.
    pub fn number(&self) -> Option<libc::c_int> {
        self.signal().map(Signal::number)
    }
}

impl From<Signal> for SignalName {
    fn from(signal: Signal) -> Self {
        signal.to_name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_variant_order_and_names_and_numbers_agree() {
        for (i, &(signal, name, number)) in TABLE.iter().enumerate() {
            assert_eq!(signal as usize, i, "{name}");
            assert_eq!(Signal::ALL[i], signal);
            assert_eq!(signal.name(), name);
            assert_eq!(signal.number(), number);
            assert_eq!(Signal::from_name(name.as_bytes()), Some(signal));
            assert_eq!(Signal::from_number(number), Some(signal));
            assert_eq!(signal.to_name().as_str(), name);
            assert_eq!(signal.to_name().signal(), Some(signal));
        }
    }

    #[test]
    fn unknown_names_and_numbers_are_none() {
        for name in [&b"INT"[..], b"SIGNOPE", b"sigint", b"", b"SIGRTMIN+3"] {
            assert_eq!(Signal::from_name(name), None, "{name:?}");
        }
        assert_eq!(Signal::from_number(0), None);
        assert_eq!(Signal::from_number(libc::SIGRTMIN()), None);
        let rt = SignalName::new(b"SIGRTMIN+3").unwrap();
        assert_eq!((rt.signal(), rt.number()), (None, None));
        assert_eq!(Signal::Term.to_string(), "SIGTERM");
    }
}
