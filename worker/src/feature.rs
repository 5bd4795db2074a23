//! [`Negotiated`]: the extensions of the worker protocol (`docs/ngw.md` §15) a worker and
//! its host agreed on for one channel.

use ngw_vocab::{WorkerFeature, WorkerFeatures};

/// The extensions both sides named for this channel (`docs/ngw.md` §15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Negotiated {
    /// `mux`: several sessions at once.
    pub mux: bool,
    /// `notices`: `n` chunks reach ngd.
    pub notices: bool,
    /// `fds`: sessions may come with the client's descriptors.
    pub fds: bool,
    /// `signals`: `i` carries `SIGNAME process` and `winsize`, `z` and signal `X` reports
    /// are understood.
    pub signals: bool,
    /// `stdin-window`: the window each `S` asks for.
    pub stdin_window: Option<u32>,
}

impl Negotiated {
    /// The features a hello lists for this negotiation: always `interrupt`, then each
    /// extension agreed on.
    pub fn features(&self) -> WorkerFeatures {
        let mut set = WorkerFeatures::of(&[WorkerFeature::Interrupt]);
        for (on, feature) in [
            (self.mux, WorkerFeature::Mux),
            (self.notices, WorkerFeature::Notices),
            (self.fds, WorkerFeature::Fds),
            (self.signals, WorkerFeature::Signals),
            (self.stdin_window.is_some(), WorkerFeature::StdinWindow),
        ] {
            if on {
                set.insert(feature);
            }
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negotiation_lists_interrupt_then_what_was_agreed() {
        let n = Negotiated {
            mux: true,
            signals: true,
            stdin_window: Some(4),
            ..Negotiated::default()
        };
        assert_eq!(
            n.features().names(),
            ["interrupt", "mux", "signals", "stdin-window"]
        );
        assert_eq!(Negotiated::default().features().names(), ["interrupt"]);
    }
}
