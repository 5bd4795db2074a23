//! Test support shared by the tests of every crate in the workspace: `ng-proto`'s,
//! `ng`'s (`client/tests`), `ngd`'s (`server/tests`) and the end-to-end harness
//! (`ng-tests`).
//!
//! The tests judge `ng-proto` and the server built on it, so this crate's view of the wire
//! reuses neither: a bug shared by both sides would hide itself. It depends on `std` and
//! `libc` only.
//!
//! # Layout
//!
//! * [`wire`]: the Nailgun chunk codec (nailgun.md §1.1): [`Chunk`], [`frame`],
//!   [`read_chunk`], [`split_chunks`], [`take_chunk`], and [`Head`] for readers that stream payloads.
//! * [`net`]: [`Address`] and [`Transport`], a connected [`Stream`] of either transport
//!   with the socket options attack code needs, and [`RefusingPort`].
//! * [`fake`]: the one fake Nailgun server, [`FakeServer`]: its accepted [`Peer`] a test
//!   drives chunk by chunk, or [`FakeServer::record`] makes it a [`Recording`] that
//!   answers every session with a fixed [`Reply`] and records each [`Request`].
//! * [`procfs`]: what `/proc` says about a process: [`Proc`], descriptors, RSS, CPU time,
//!   environment, TCP sockets.
//! * [`hex`]: hex strings to bytes and back.
//! * [`exe`]: programs a test writes and then runs, written so that no thread's fork can
//!   make running them fail with "Text file busy".
//!
//! Every function panics with context on a failure the test cannot go on from, and returns
//! `Option`/`io::Result` where a test wants to tell outcomes apart.

pub mod exe;
pub mod fake;
pub mod hex;
pub mod net;
pub mod procfs;
pub mod wire;

pub use fake::{FakeServer, Got, Peer, Recording, Reply, Request};
pub use net::{Address, RefusingPort, Stream, Transport};
pub use procfs::Proc;
pub use wire::{frame, frames, read_chunk, split_chunks, take_chunk, Chunk, Head};
