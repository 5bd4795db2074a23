//! Incremental chunk decoder and one-buffer encoder.
//!
//! The [`Decoder`] takes whole chunks off the front of a [`BytesMut`] read buffer. It reads
//! the 5-byte header first and checks the announced length against [`Limits`] before the
//! caller grows any buffer for the payload, so a peer announcing 4 GiB costs nothing.
//! A partial chunk is `Ok(None)`, never an error.
//!
//! The encoder writes each chunk, header and payload, into one contiguous buffer, so a
//! chunk always leaves in a single `write` (see the Nagle note in `docs/protocol.md`).

use crate::{Chunk, ChunkType, DecodeError};
use bytes::{Buf, BufMut, BytesMut};

/// Bytes in a chunk header: a 4-byte big-endian length and the type byte.
pub const HEADER_LEN: usize = 5;

/// The largest payload any chunk may carry: the reference peers read the length as a
/// signed 32-bit integer.
pub const MAX_PAYLOAD_LEN: u32 = i32::MAX as u32;

/// Size limits a decoder enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest payload accepted in one chunk, in bytes. Clamped to [`MAX_PAYLOAD_LEN`].
    pub max_chunk_len: u32,
}

impl Limits {
    /// The default: 8 MiB per chunk, far above what any known client sends (2 KiB stdin
    /// pieces; a Python client's stdin line; one argument, which Linux caps at 128 KiB).
    pub const DEFAULT_MAX_CHUNK_LEN: u32 = 8 << 20;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_chunk_len: Self::DEFAULT_MAX_CHUNK_LEN,
        }
    }
}

/// A parsed chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The payload length.
    pub len: u32,
    /// The type byte.
    pub ty: ChunkType,
}

impl ChunkHeader {
    /// Parses the first [`HEADER_LEN`] bytes of `buf`, if there are that many.
    pub fn peek(buf: &[u8]) -> Option<Self> {
        let h: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Self {
            len: u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
            ty: ChunkType(h[4]),
        })
    }

    /// Checks the length against `limits`.
    pub fn check(self, limits: &Limits) -> Result<Self, DecodeError> {
        let max = limits.max_chunk_len.min(MAX_PAYLOAD_LEN);
        if self.len > max {
            return Err(DecodeError::ChunkTooLarge {
                len: self.len,
                max,
                ty: self.ty,
            });
        }
        Ok(self)
    }

    /// The header's wire bytes.
    pub fn to_bytes(self) -> [u8; HEADER_LEN] {
        let l = self.len.to_be_bytes();
        [l[0], l[1], l[2], l[3], self.ty.0]
    }
}

/// Takes whole chunks off the front of a read buffer.
#[derive(Clone, Debug, Default)]
pub struct Decoder {
    limits: Limits,
}

impl Decoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self { limits }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Removes and returns the first whole chunk of `buf`.
    ///
    /// `Ok(None)` means `buf` holds only part of a chunk (it is left untouched); reserve
    /// [`Decoder::bytes_needed`] more and call again. An error means the stream is broken:
    /// the offending header stays in `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Chunk>, DecodeError> {
        let Some(header) = ChunkHeader::peek(buf) else {
            return Ok(None);
        };
        let header = header.check(&self.limits)?;
        let total = HEADER_LEN + header.len as usize;
        if buf.len() < total {
            return Ok(None);
        }
        buf.advance(HEADER_LEN);
        let payload = buf.split_to(header.len as usize).freeze();
        Ok(Some(Chunk {
            ty: header.ty,
            payload,
        }))
    }

    /// How many more bytes `buf` needs before [`Decoder::decode`] can return a chunk, or an
    /// error if the chunk at its front is over the limit. 0 means a chunk is ready.
    pub fn bytes_needed(&self, buf: &[u8]) -> Result<usize, DecodeError> {
        match ChunkHeader::peek(buf) {
            None => Ok(HEADER_LEN - buf.len()),
            Some(h) => {
                let h = h.check(&self.limits)?;
                Ok((HEADER_LEN + h.len as usize).saturating_sub(buf.len()))
            }
        }
    }
}

/// Appends one chunk, header and payload, to `dst` as one contiguous run of bytes.
///
/// A payload longer than [`MAX_PAYLOAD_LEN`] is split into several chunks of the same type,
/// which is what the stream types (`0 1 2 L`) mean anyway; no argument or environment entry
/// can be that long on any real system.
pub fn encode(ty: ChunkType, payload: &[u8], dst: &mut BytesMut) {
    if payload.len() <= MAX_PAYLOAD_LEN as usize {
        dst.reserve(HEADER_LEN + payload.len());
        dst.put_u32(payload.len() as u32);
        dst.put_u8(ty.0);
        dst.put_slice(payload);
        return;
    }
    for piece in payload.chunks(MAX_PAYLOAD_LEN as usize) {
        encode(ty, piece, dst);
    }
}

/// Appends the chunks of a stream type (`0 1 2 L`), splitting `data` into pieces of at most
/// `max_piece` bytes. Empty `data` yields nothing (an empty `L` is a terminator, not data).
pub fn encode_stream(ty: ChunkType, data: &[u8], max_piece: usize, dst: &mut BytesMut) {
    let max_piece = max_piece.clamp(1, MAX_PAYLOAD_LEN as usize);
    dst.reserve(data.len() + HEADER_LEN * data.len().div_ceil(max_piece));
    for piece in data.chunks(max_piece) {
        encode(ty, piece, dst);
    }
}

/// Encodes one chunk into a new buffer.
pub fn to_bytes(ty: ChunkType, payload: &[u8]) -> BytesMut {
    let mut b = BytesMut::with_capacity(HEADER_LEN + payload.len());
    encode(ty, payload, &mut b);
    b
}
