//! Errors: malformed bytes ([`DecodeError`]) and broken session rules ([`ProtocolError`]).
//!
//! Running out of bytes is never an error: the decoder answers `Ok(None)` and waits for more.

use crate::ChunkType;
use std::fmt;

/// The bytes on the wire cannot be a chunk we accept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The header announced a payload larger than the configured limit. Checked before any
    /// buffer is grown for it.
    ChunkTooLarge {
        /// The announced payload length (a `u32`; values of 2^31 and above are never valid).
        len: u32,
        /// The limit in force.
        max: u32,
        /// The chunk's type byte.
        ty: ChunkType,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::ChunkTooLarge { len, max, ty } => write!(
                f,
                "{} chunk of {len} bytes is larger than the limit of {max} bytes",
                ty.name()
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// The peer broke a rule of the session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The chunk stream itself was malformed.
    Decode(DecodeError),
    /// A chunk type the current state does not accept.
    UnexpectedChunk {
        /// The state the session was in.
        state: &'static str,
        /// The type received.
        ty: ChunkType,
    },
    /// Stdin data or end-of-file arrived after the client had already sent `.`.
    StdinAfterEof,
    /// The header phase (arguments, environment, directory) grew past its limit.
    HeaderTooLarge {
        /// The limit in force, in bytes.
        max: usize,
    },
    /// The peer closed the connection before the header phase ended with `C`.
    EofBeforeCommand,
    /// No `C` within the header timeout.
    HeaderTimeout,
    /// The server closed the connection before sending `X`.
    EofBeforeExit,
    /// An extension chunk (`F K W Z`, or a windowed `S`) whose payload is malformed.
    BadExtensionPayload {
        /// The chunk's type.
        ty: ChunkType,
    },
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::Decode(e) => e.fmt(f),
            ProtocolError::UnexpectedChunk { state, ty } => {
                write!(f, "unexpected chunk type {} ({ty:?}) while {state}", ty.0)
            }
            ProtocolError::StdinAfterEof => write!(f, "stdin received after end of stdin"),
            ProtocolError::HeaderTooLarge { max } => write!(
                f,
                "arguments and environment exceed the limit of {max} bytes"
            ),
            ProtocolError::EofBeforeCommand => write!(f, "connection closed before the command"),
            ProtocolError::HeaderTimeout => write!(f, "no command received in time"),
            ProtocolError::EofBeforeExit => write!(f, "connection closed before the exit code"),
            ProtocolError::BadExtensionPayload { ty } => {
                write!(f, "malformed {} chunk ({ty:?})", ty.name())
            }
        }
    }
}

impl std::error::Error for ProtocolError {}

impl From<DecodeError> for ProtocolError {
    fn from(e: DecodeError) -> Self {
        ProtocolError::Decode(e)
    }
}
