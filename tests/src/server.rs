//! The server-under-test seam: what a scenario needs to know about a server.
//!
//! Scenarios take `&dyn Server`. A server is reachable at an [`Address`] (TCP or a Unix
//! socket), provides the logical test [`Nail`]s under command names of its own, and can
//! be killed in the middle of a command. [`crate::JavaServer`] implements it with the
//! reference Nailgun 0.9.3 server and the Java nails in `tests/java/`;
//! [`crate::NgdServer`] with `ngd`'s built-ins, or with the equivalent Rust nails of
//! `ngd-testbed`.

pub use ng_testkit::{Address, Transport};

/// The nails the scenarios run. Every server under test provides all of them.
///
/// The reference implementations are `tests/java/ngtest/*.java`; their docs are the
/// contract an equivalent nail on another server must meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Nail {
    /// The server's version built-in (`ng-version`).
    Version,
    /// Copies stdin to stdout, binary safe, until end of input; exit 0.
    Echo,
    /// Prints args, env and cwd as the server received them; see [`crate::Dump`].
    Dump,
    /// `Exit <n>`: prints `exit <n>` on stdout and `exiting with <n>` on stderr, then
    /// exits with `n`.
    Exit,
    /// `Sleep <ms>`: prints `sleeping <ms>`, sleeps, then prints
    /// `slept, client connected: <true|false>` (whether the server still thought the
    /// client connected, e.g. because heartbeats kept arriving).
    Sleep,
}

/// A running server that scenarios can target.
pub trait Server: Send + Sync {
    /// A short description for failure messages, e.g. `java-0.9.3 local:/tmp/x/ng.sock`.
    fn describe(&self) -> String;

    /// Where the server listens.
    fn address(&self) -> &Address;

    /// The command name under which this server provides `nail`.
    fn command(&self, nail: Nail) -> String;

    /// What [`Nail::Version`] prints on stdout.
    fn version_output(&self) -> String;

    /// Kills the server at once (`SIGKILL`), as a crash would, and reaps it.
    fn kill(&self);

    /// The server's log so far (its stdout and stderr), for failure messages.
    fn log(&self) -> String;
}
