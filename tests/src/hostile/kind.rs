//! The attacks by name: [`Kind`], and what each must get ([`Outcome`]s, by when); the
//! function that carries one out is [`attacks::of`](super::attacks::of).

use std::fmt;
use std::time::Duration;

use super::response::Outcome;
use super::{Limits, Plan, DRAIN_LINGER, EXIT_PROTOCOL, EXIT_UNAVAILABLE, EXIT_UNKNOWN};

/// Every attack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A chunk announcing 2^31 bytes (in the header, and as stdin after `C`).
    Length2p31,
    /// A chunk announcing 2^32−1 bytes.
    Length2p32m1,
    /// A chunk cut off inside its 5-byte header, then silence.
    CutMidHeader,
    /// A chunk cut off inside its payload, then silence.
    CutMidPayload,
    /// `C ng-cat`, then a stdin chunk cut off inside its payload, then silence.
    CutMidStdin,
    /// Unknown chunk types (and server-only ones) before `C`.
    UnknownBeforeCommand,
    /// An unexpected chunk type after `C`.
    UnknownAfterCommand,
    /// Stdin (`0`, `.`) before the server sent any `S`.
    StdinBeforeCredit,
    /// A `0` after `.`.
    StdinAfterEof,
    /// `E` entries without `=`, with an empty name, empty.
    EnvWithoutEquals,
    /// Non-UTF-8 arguments, environment and working directory.
    NonUtf8Header,
    /// A non-UTF-8 command name.
    NonUtf8Command,
    /// 100 000 arguments.
    Args100k,
    /// A header over `max_header_bytes` (many empty arguments, or a few big ones).
    HeaderTooLarge,
    /// One 64 MiB argument, over the chunk cap.
    Arg64MiB,
    /// A header with no `C`, then silence.
    NoCommand,
    /// Connect, then send nothing.
    Slowloris,
    /// A valid header sent one byte every 50 ms, too slowly to finish in time.
    SlowlorisTrickle,
    /// Connect and close at once (half of them with a reset).
    ConnectClose,
    /// `ng-yes 1G`, read 1 MiB, then close with `SO_LINGER` 0 (a reset on TCP).
    RstMidOutput,
    /// Heartbeats every 100 ms, and never a `C`.
    HeartbeatsOnly,
    /// `ng-yes 1G`, then never read and never send.
    NeverReads,
    /// `ng-yes` just under the output mark (the command finishes while its output is still
    /// queued), then never read and never send.
    NeverReadsFinished,
    /// `ng-yes 1G`, heartbeats, and never read; the client gives up after a while.
    NeverReadsAlive,
    /// `ng-true`, read its `X`, then keep sending (junk at full speed, or heartbeats).
    JunkAfterExit,
    /// More connections than `max_connections + 64` at once, all silent.
    FloodHold,
    /// More connections than `max_connections + 64` at once, each asking for `ng-true`.
    FloodRequests,
}

/// Every kind, in the order they run: its name on the command line and in the matrix, and
/// what it sends and what it must get, in a line.
#[rustfmt::skip]
const TABLE: [(Kind, &str, &str); 27] = [
    (Kind::Length2p31, "length-2^31", "a chunk announcing 2^31 bytes (A or Z before C, 0 after C ng-cat): 76 at once"),
    (Kind::Length2p32m1, "length-2^32-1", "a chunk announcing 2^32-1 bytes (A or Z before C, 0 after C ng-cat): 76 at once"),
    (Kind::CutMidHeader, "cut-mid-header", "A, then 3 of the next chunk's 5 header bytes, then silence: 76 at the header timeout"),
    (Kind::CutMidPayload, "cut-mid-payload", "A, then a chunk with 40 of its 100 payload bytes, then silence: 76 at the header timeout"),
    (Kind::CutMidStdin, "cut-mid-stdin", "C ng-cat, then a 0 chunk with 40 of 100 bytes, then silence: closed at the heartbeat timeout"),
    (Kind::UnknownBeforeCommand, "unknown-before-C", "Z, NUL, 0xFF, h, q, S, X, 1, 2, 0, . chunks before C ng-true: skipped, served 0"),
    (Kind::UnknownAfterCommand, "unknown-after-C", "C ng-cat, then Z / NUL / 0xFF / h / S / X / 1 / A / E / D / C / L: 76"),
    (Kind::StdinBeforeCredit, "stdin-before-S", "C ng-cat, 0 0 . before any S: served 0, the bytes echoed"),
    (Kind::StdinAfterEof, "stdin-after-eof", "C ng-cat, ., 0: 76"),
    (Kind::EnvWithoutEquals, "env-without-=", "E NOEQUALS, E =v, E '', E A=B=C, then C ng-true: served 0"),
    (Kind::NonUtf8Header, "non-utf8-header", "non-UTF-8 A, E name and value, D, then C ng-true: served 0"),
    (Kind::NonUtf8Command, "non-utf8-command", "C with a non-UTF-8 name: 127 with a message"),
    (Kind::Args100k, "args-100k", "100 000 A chunks, then C ng-true: served 0"),
    (Kind::HeaderTooLarge, "header-too-large", "max_header_bytes/16+1 empty A, or three A of max_header_bytes/2 each: 76"),
    (Kind::Arg64MiB, "arg-64MiB", "one A of 64 MiB (over max_chunk_bytes), all of it sent: 76 at once, RSS flat"),
    (Kind::NoCommand, "no-command", "A, E, D, then silence: 76 at the header timeout"),
    (Kind::Slowloris, "slowloris", "connect, then silence: 76 at the header timeout"),
    (Kind::SlowlorisTrickle, "slowloris-trickle", "a valid header, one byte per 50 ms: 76 at the header timeout"),
    (Kind::ConnectClose, "connect-close", "connect and close at once (every other one with SO_LINGER 0)"),
    (Kind::RstMidOutput, "rst-mid-output", "C ng-yes 1G, read 1 MiB, close with SO_LINGER 0: ng-yes cancelled"),
    (Kind::HeartbeatsOnly, "heartbeats-only", "H every 100 ms, no C: 76 at the header timeout"),
    (Kind::NeverReads, "never-reads", "C ng-yes 1G (blocks at the output mark), never read or send: closed at the heartbeat timeout"),
    (Kind::NeverReadsFinished, "never-reads-finished", "C ng-yes just under the output mark (finishes, output still queued in ngd), never read or send: closed at the heartbeat timeout"),
    (Kind::NeverReadsAlive, "never-reads-alive", "C ng-yes 1G, H every 200 ms, never read; give up after heartbeat+slack: output stays buffered, bounded"),
    (Kind::JunkAfterExit, "junk-after-exit", "C ng-true, read X, then junk at full speed or H every 100 ms: closed within the 2 s drain"),
    (Kind::FloodHold, "flood-hold", "max_connections+64+concurrency silent connections at once: 76 / 69 / closed"),
    (Kind::FloodRequests, "flood-requests", "max_connections+64+concurrency connections at once, then C ng-true: served 0 / 69 / closed"),
];

/// When an attempt's outcome is due.
#[derive(Clone, Copy, Debug)]
pub(super) enum Due {
    /// At once (within the slack).
    Now,
    /// At the header timeout.
    Header,
    /// At the heartbeat timeout.
    Heartbeat,
    /// The client sits for the heartbeat timeout plus the slack, then gives up.
    AfterSit,
    /// At the end of the drain after `X`.
    Drain,
}

/// What a kind must get.
#[derive(Clone, Debug)]
pub(super) struct Expect {
    /// Every attempt must end one of these ways.
    pub allowed: Vec<Outcome>,
    /// By when.
    pub due: Due,
    /// Each of these must occur at least once per round.
    pub required: Vec<Outcome>,
    /// Peak RSS during the attack may exceed the RSS before it by at most this much per
    /// concurrent attempt, plus the tolerance.
    pub peak_per_attempt_kib: Option<u64>,
}

impl Kind {
    /// Every kind, in the order they run.
    pub const ALL: &'static [Kind] = &{
        let mut all = [Kind::Length2p31; TABLE.len()];
        let mut i = 0;
        while i < TABLE.len() {
            all[i] = TABLE[i].0;
            i += 1;
        }
        all
    };

    fn entry(self) -> &'static (Kind, &'static str, &'static str) {
        TABLE
            .iter()
            .find(|e| e.0 == self)
            .expect("every kind is in the table")
    }

    /// The kind's name on the command line and in the matrix.
    pub fn name(self) -> &'static str {
        self.entry().1
    }

    /// The kind called `name`.
    pub fn from_name(name: &str) -> Option<Kind> {
        TABLE.iter().find(|e| e.1 == name).map(|e| e.0)
    }

    /// What the attack sends, and what it must get, in a line.
    pub fn what(self) -> &'static str {
        self.entry().2
    }

    /// Whether the kind floods the server with connections.
    pub(super) fn is_flood(self) -> bool {
        matches!(self, Kind::FloodHold | Kind::FloodRequests)
    }

    /// What every attempt of the kind must get.
    pub(super) fn expect(self) -> Expect {
        use Outcome::*;
        let (allowed, due) = match self {
            Kind::Length2p31
            | Kind::Length2p32m1
            | Kind::UnknownAfterCommand
            | Kind::StdinAfterEof
            | Kind::HeaderTooLarge
            | Kind::Arg64MiB => (vec![Refused(EXIT_PROTOCOL)], Due::Now),
            Kind::CutMidHeader
            | Kind::CutMidPayload
            | Kind::NoCommand
            | Kind::Slowloris
            | Kind::SlowlorisTrickle
            | Kind::HeartbeatsOnly => (vec![Refused(EXIT_PROTOCOL)], Due::Header),
            Kind::CutMidStdin => (vec![Closed], Due::Heartbeat),
            Kind::UnknownBeforeCommand
            | Kind::StdinBeforeCredit
            | Kind::EnvWithoutEquals
            | Kind::NonUtf8Header
            | Kind::Args100k => (vec![Served(0)], Due::Now),
            Kind::NonUtf8Command => (vec![Refused(EXIT_UNKNOWN)], Due::Now),
            Kind::ConnectClose | Kind::RstMidOutput => (vec![Dropped], Due::Now),
            Kind::NeverReadsAlive => (vec![Dropped], Due::AfterSit),
            Kind::NeverReads | Kind::NeverReadsFinished => (vec![Closed], Due::Heartbeat),
            Kind::JunkAfterExit => (vec![Closed], Due::Drain),
            Kind::FloodHold => (
                vec![Refused(EXIT_PROTOCOL), Refused(EXIT_UNAVAILABLE), Closed],
                Due::Header,
            ),
            // 76 if connecting everyone took longer than the header timeout.
            Kind::FloodRequests => (
                vec![
                    Served(0),
                    Refused(EXIT_UNAVAILABLE),
                    Refused(EXIT_PROTOCOL),
                    Closed,
                ],
                Due::Now,
            ),
        };
        let required = match self {
            Kind::FloodHold => vec![Refused(EXIT_UNAVAILABLE)],
            Kind::FloodRequests => vec![Served(0), Refused(EXIT_UNAVAILABLE)],
            _ => Vec::new(),
        };
        let peak_per_attempt_kib = match self {
            // Refused after the 5-byte header: nothing of the 64 MiB may be held.
            Kind::Arg64MiB => Some(1024),
            // Output queued per connection is bounded by the output mark (512 KiB,
            // `session_io::OUTPUT_HIGH_WATER`);
            // 6 MiB each leaves room for buffers being swapped and encoded.
            Kind::NeverReads | Kind::NeverReadsFinished | Kind::NeverReadsAlive => Some(6 * 1024),
            _ => None,
        };
        Expect {
            allowed,
            due,
            required,
            peak_per_attempt_kib,
        }
    }

    /// How long after connecting an attempt's outcome is due at the latest.
    pub(super) fn bound(self, limits: &Limits, plan: &Plan) -> Duration {
        match self.expect().due {
            Due::Now => plan.slack,
            Due::Header => limits.header_timeout + plan.slack,
            Due::Heartbeat => limits.heartbeat_timeout + plan.slack,
            Due::AfterSit => sit_time(limits, plan) + plan.slack,
            Due::Drain => DRAIN_LINGER + plan.slack,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `never-reads-finished`'s output: under `ngd`'s output mark (a command blocks in its
/// write once this much is queued), so the command finishes at once.
pub(super) const FINISHED_OUTPUT: usize = ng_server::session_io::OUTPUT_HIGH_WATER - (16 << 10);

/// How long the never-reads attackers sit before looking.
pub(super) fn sit_time(limits: &Limits, plan: &Plan) -> Duration {
    limits.heartbeat_timeout + plan.slack
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for &k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(k));
        }
        let mut names: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Kind::ALL.len());
    }
}
