//! The attacks, one function per [`Kind`](super::Kind), grouped by what they go after.
//!
//! Each takes the [`Attempt`](super::attempt::Attempt) it runs as, sends its bytes on a
//! raw socket, and returns what it saw; [`of`] maps each
//! kind to its function, and [`Kind::what`](super::Kind::what) says in a line what it sends
//! and what it must get.
//!
//! * [`framing`]: chunk lengths and chunks cut short.
//! * [`sequence`]: chunk types where they do not belong, stdin out of turn.
//! * [`header`]: what a header holds (odd bytes, odd entries) and how big it gets.
//! * [`slow`]: clients that connect and then say nothing, or too little too slowly.
//! * [`output`]: clients that mishandle the server's output: reset, never read, junk
//!   after `X`.
//! * [`flood`]: more connections than the server takes.

use super::attempt::Attempt;
use super::response::Seen;
use super::Kind;

pub(super) mod flood;
pub(super) mod framing;
pub(super) mod header;
pub(super) mod output;
pub(super) mod sequence;
pub(super) mod slow;

/// The function that carries out one attempt of a kind.
pub(super) fn of(kind: Kind) -> fn(&Attempt<'_>) -> Seen {
    match kind {
        Kind::Length2p31 | Kind::Length2p32m1 => framing::huge_length,
        Kind::CutMidHeader => framing::cut_mid_header,
        Kind::CutMidPayload => framing::cut_mid_payload,
        Kind::CutMidStdin => framing::cut_mid_stdin,
        Kind::UnknownBeforeCommand => sequence::unknown_before_command,
        Kind::UnknownAfterCommand => sequence::unknown_after_command,
        Kind::StdinBeforeCredit => sequence::stdin_before_credit,
        Kind::StdinAfterEof => sequence::stdin_after_eof,
        Kind::EnvWithoutEquals => header::env_without_equals,
        Kind::NonUtf8Header => header::non_utf8_header,
        Kind::NonUtf8Command => header::non_utf8_command,
        Kind::Args100k => header::args_100k,
        Kind::HeaderTooLarge => header::header_too_large,
        Kind::Arg64MiB => header::arg_64mib,
        Kind::NoCommand => header::no_command,
        Kind::Slowloris => slow::slowloris,
        Kind::SlowlorisTrickle => slow::slowloris_trickle,
        Kind::HeartbeatsOnly => slow::heartbeats_only,
        Kind::ConnectClose => slow::connect_close,
        Kind::RstMidOutput => output::rst_mid_output,
        Kind::NeverReads | Kind::NeverReadsFinished => output::never_reads,
        Kind::NeverReadsAlive => output::never_reads_alive,
        Kind::JunkAfterExit => output::junk_after_exit,
        Kind::FloodHold | Kind::FloodRequests => flood::flood,
    }
}
