//! The attacks, one function per [`Kind`](super::Kind), grouped by what they go after.
//!
//! Each takes the [`Attempt`](super::attempt::Attempt) it runs as, sends its bytes on a
//! raw socket, and returns what it saw; [`Kind::attack`](super::Kind::attack) maps each
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

pub(super) mod flood;
pub(super) mod framing;
pub(super) mod header;
pub(super) mod output;
pub(super) mod sequence;
pub(super) mod slow;
