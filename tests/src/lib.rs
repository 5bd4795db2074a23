//! End-to-end test harness: real client binaries against real Nailgun servers.
//!
//! The tests in `tests/e2e/` run a client process (our `ng`, or the reference C client
//! `ng-nailgun` as an oracle) against a server process (the reference Java server
//! or `ngd`), and assert what a user would see: exit status, stdout and stderr.
//! This crate holds everything those tests share, so a scenario reads like a
//! specification and the same scenario can run against any server.
//!
//! # Layout
//!
//! * [`bins`]: where the binaries under test and the reference peers are.
//! * [`client`]: [`Client`] (which client binary) and [`ClientCmd`], a builder that runs
//!   one client with args, env, cwd, stdin and a timeout, returning an [`Output`].
//! * [`server`]: the server-under-test seam: [`Server`], [`Address`], [`Transport`] and
//!   the logical test [`Nail`]s every server must provide.
//! * [`java_server`]: [`JavaServer`], the reference Nailgun 0.9.3 server as a guard.
//! * [`ngd_server`]: [`NgdServer`], `ngd` (or `ngd-testbed`, `ngd` with the test nails
//!   built in, from `src/bin/`) as a guard, on TCP and/or a Unix socket.
//! * [`java`]: compiles the Java test nails in `tests/java/` once per run.
//! * [`ng_testkit`] (re-exported here in part): the chunk codec, raw sockets, the fake
//!   server ([`FakeServer`], for what the Java server cannot show: IPv6, `L` chunks),
//!   [`RefusingPort`] and `/proc` readings, shared with the other crates' tests.
//! * [`dump`]: parses the output of the `Dump` nail.
//! * [`process`]: child processes owned by the test process ([`process::OwnedChild`], the
//!   process behind each server guard), and output capture.
//! * [`pty`]: a pseudo-terminal driver ([`pty::Pty`]) and the terminal scenarios that
//!   compare a warm command with a cold one ([`pty::SCENARIOS`]).
//! * [`conformance`]: the worker conformance suite: every behaviour on every path a
//!   session can take, cold and warm side by side, for any runtime's worker.
//! * [`plugins`]: `ngd` with `[[plugin]]` tables ([`plugins::PluginServer`]), its plugin
//!   reports as JSON, and the check that no plugin process outlives it.
//! * [`faults`]: misbehaving workers, a process census, and a raw client that reads slowly.
//! * [`hostile`]: every bad input a client can send, fired at `ngd`, and the matrix.
//! * [`soak`]: a mixed load of both clients against a warm plugin, and `ngd`'s vital signs.
//! * [`data`]: deterministic test payloads.
//! * [`macros`]: [`eqnice!`], [`assert_bytes_eq!`] and [`both_clients!`].
//!
//! # Adding a server under test
//!
//! Implement [`Server`] for a guard that starts the server, knows its [`Address`], maps
//! each [`Nail`] to a command name and can be killed. Scenario functions in `tests/e2e/`
//! take `&dyn Server`, so they run unchanged against it.
//!
//! This crate panics on failure with context (command line, exit status, both output
//! streams, the server's log) instead of returning errors: it only ever runs inside tests.

pub mod bins;
pub mod client;
pub mod conformance;
pub mod data;
pub mod dump;
pub mod faults;
pub mod hostile;
pub mod java;
pub mod java_server;
pub mod jvm;
pub mod macros;
pub mod ngd_server;
pub mod plugins;
pub mod process;
pub mod pty;
pub mod server;
pub mod soak;

pub use client::{Client, ClientCmd, Input, Output, Running};
pub use dump::Dump;
pub use java_server::JavaServer;
pub use ng_testkit::{FakeServer, RefusingPort, Reply, Request};
pub use ngd_server::{Flavor, NgdServer};
pub use server::{Address, Nail, Server, Transport};

/// Held by tests that listen on the default TCP address `127.0.0.1:2113`, or that need
/// nothing to answer there (`ng`'s auto-start only happens when nothing does).
pub static DEFAULT_TCP_ADDR_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
