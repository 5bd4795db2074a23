//! The Nailgun wire protocol, without I/O.
//!
//! `ng-proto` is shared by the `ng` client, the `ngd` server and the worker SDKs. It knows
//! the bytes and the rules of a Nailgun session, and nothing about sockets, clocks or threads:
//! callers feed it bytes and the current [`Instant`](std::time::Instant), and take back bytes
//! to send and events to act on. This makes every rule testable byte for byte, at every split
//! point, and fuzzable.
//!
//! # Layout
//!
//! * [`chunk`]: chunk types (`A E D C L 0 . H` client to server, `1 2 S X` server to client,
//!   and the lowercase control types of the ngw worker channel) and [`Chunk`].
//! * [`codec`]: the incremental [`Decoder`] with [`Limits`], checked before anything is
//!   allocated, and the one-buffer encoder.
//! * [`ext`]: the negotiated extensions of our `ng` and `ngd`: features, passed
//!   descriptors, window sizes, signal names, the end-of-session report.
//! * [`signal`]: [`Signal`], the one table of signal names and numbers.
//! * [`exit`]: the `X` payload: formatting (`"<n>\n"`) and `atoi`-style parsing.
//! * [`client_session`]: [`ClientSession`], the client's side of one session.
//! * [`server_session`]: [`ServerSession`], the server's side of one session.
//! * [`error`]: [`DecodeError`] and [`ProtocolError`].
//! * [`paths`]: the default socket path and TCP address, shared by `ngd` and `ng`.
//! * [`version`]: the version marker in each binary, and semver precedence.
//! * [`handover`]: the record of the newest `ngd` known, which auto-start prefers.
//!
//! # Wire format
//!
//! Every message is a chunk: a 4-byte big-endian payload length, one type byte, then the
//! payload. Lengths of 2^31 and above are rejected (the reference peers read them as signed).
//!
//! ```
//! use bytes::BytesMut;
//! use ng_proto::{codec, ChunkType, Decoder, Limits};
//!
//! let mut wire = BytesMut::new();
//! codec::encode(ChunkType::COMMAND, b"ng-version", &mut wire);
//! assert_eq!(&wire[..5], &[0, 0, 0, 10, b'C']);
//!
//! let chunk = Decoder::new(Limits::default()).decode(&mut wire).unwrap().unwrap();
//! assert_eq!(chunk.ty, ChunkType::COMMAND);
//! assert_eq!(&chunk.payload[..], b"ng-version");
//! ```
//!
//! This crate performs no I/O and never panics on what a peer sends.

#![deny(missing_docs)]
#![doc(test(attr(deny(warnings))))]

pub mod chunk;
pub mod client_session;
pub mod codec;
pub mod error;
pub mod exit;
pub mod ext;
pub mod handover;
pub mod paths;
pub mod server_session;
pub mod signal;
pub mod version;

/// The buffer crate this API is written in ([`bytes::BytesMut`] read buffers, [`bytes::Bytes`]
/// payloads), re-exported so callers can name those types without a dependency of their own.
pub use bytes;
pub use chunk::{Chunk, ChunkType};
pub use client_session::{ClientConfig, ClientEvent, ClientSession, Header, HeaderArg};
pub use codec::{Decoder, Limits, HEADER_LEN, MAX_PAYLOAD_LEN};
pub use error::{DecodeError, ProtocolError};
pub use ext::{ExitReport, FdMap, Features, SignalName, SignalTarget, WinSize};
pub use server_session::{
    ClientExtensions, DisconnectReason, ExtensionEvent, Request, ServerConfig, ServerEvent,
    ServerSession, MAX_PASSED_FDS,
};
pub use signal::Signal;

/// The TCP port Nailgun servers and clients use when none is given.
pub const DEFAULT_PORT: u16 = 2113;

/// How much stdin the reference C client sends per `0` chunk, and the size of its
/// `--nailgun-filearg` pieces.
pub const STDIN_CHUNK_LEN: usize = 2048;
