//! The Nailgun chunk codec, written independently of `ng-proto`.
//!
//! This is the whole format (nailgun.md §1.1): a 4-byte big-endian payload length, one
//! type byte, the payload. [`Head`] is the 5-byte chunk header on its own, for readers that
//! stream a large payload instead of holding it; [`Chunk`] is a whole chunk. Reading is
//! blocking ([`read_chunk`]) or from a buffer that may end inside a chunk
//! ([`split_chunks`]). Sizes are trusted up to [`MAX_TEST_CHUNK`].

use std::fmt;
use std::io::{self, Read};

/// The largest payload [`read_chunk`] accepts from a peer. Test traffic is far smaller.
pub const MAX_TEST_CHUNK: usize = 64 << 20;

/// The 5-byte header of a chunk: payload length and type byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The announced payload length.
    pub len: u32,
    /// The type byte, e.g. `b'A'`.
    pub ty: u8,
}

impl Head {
    /// The header's wire bytes. Any length may be announced, whatever follows.
    pub fn encode(len: u32, ty: u8) -> [u8; 5] {
        let l = len.to_be_bytes();
        [l[0], l[1], l[2], l[3], ty]
    }

    /// Parses the first 5 bytes of `bytes`, if there are that many.
    pub fn parse(bytes: &[u8]) -> Option<Head> {
        let b: &[u8; 5] = bytes.get(..5)?.try_into().ok()?;
        Some(Head {
            len: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            ty: b[4],
        })
    }
}

/// One chunk: its type byte and payload.
#[derive(Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The type byte, e.g. `b'A'`.
    pub ty: u8,
    /// The payload.
    pub payload: Vec<u8>,
}

impl Chunk {
    /// A chunk of type `ty` with `payload`.
    pub fn new(ty: u8, payload: impl Into<Vec<u8>>) -> Chunk {
        Chunk {
            ty,
            payload: payload.into(),
        }
    }

    /// The chunk's wire bytes, built in one buffer (so it goes out in one write).
    pub fn encode(&self) -> Vec<u8> {
        frame(self.ty, &self.payload)
    }
}

/// `1"hello\n"`: the type as a character and the payload as lossy text.
impl fmt::Debug for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{:?}",
            self.ty as char,
            String::from_utf8_lossy(&self.payload)
        )
    }
}

/// The wire bytes of one chunk.
pub fn frame(ty: u8, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a test chunk fits u32");
    let mut out = Vec::with_capacity(5 + payload.len());
    out.extend_from_slice(&Head::encode(len, ty));
    out.extend_from_slice(payload);
    out
}

/// The wire bytes of several chunks, in order: a whole request in one buffer.
pub fn frames(items: &[(u8, &[u8])]) -> Vec<u8> {
    items.iter().flat_map(|(ty, p)| frame(*ty, p)).collect()
}

/// Reads one chunk; `Ok(None)` at a clean end of stream before a header.
pub fn read_chunk(stream: &mut impl Read) -> io::Result<Option<Chunk>> {
    let mut header = [0u8; 5];
    let mut got = 0;
    while got < header.len() {
        match stream.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let head = Head::parse(&header).expect("five bytes");
    let len = head.len as usize;
    if len > MAX_TEST_CHUNK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("chunk of {len} bytes"),
        ));
    }
    let mut payload = vec![0; len];
    stream.read_exact(&mut payload)?;
    Ok(Some(Chunk::new(head.ty, payload)))
}

/// The whole chunks at the start of `bytes`, and how many bytes they take; what is left
/// after them is the start of a chunk not yet complete.
pub fn split_chunks(bytes: &[u8]) -> (Vec<Chunk>, usize) {
    let mut chunks = Vec::new();
    let mut at = 0;
    while let Some(head) = Head::parse(&bytes[at..]) {
        let end = at + 5 + head.len as usize;
        let Some(payload) = bytes.get(at + 5..end) else {
            break;
        };
        chunks.push(Chunk::new(head.ty, payload));
        at = end;
    }
    (chunks, at)
}

/// Takes the first chunk out of `buf` if it is complete; what follows stays.
pub fn take_chunk(buf: &mut Vec<u8>) -> Option<Chunk> {
    let head = Head::parse(buf)?;
    let end = 5 + head.len as usize;
    let payload = buf.get(5..end)?.to_vec();
    buf.drain(..end);
    Some(Chunk::new(head.ty, payload))
}

/// Every chunk in `bytes`, which must hold whole chunks only; panics on a partial one.
#[track_caller]
pub fn decode_all(bytes: &[u8]) -> Vec<Chunk> {
    let (chunks, used) = split_chunks(bytes);
    assert_eq!(
        used,
        bytes.len(),
        "trailing partial chunk: {:02x?}",
        &bytes[used..]
    );
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_then_read_round_trips() {
        let mut bytes = Chunk::new(b'A', "hello").encode();
        assert_eq!(bytes, b"\0\0\0\x05Ahello");
        bytes.extend(Chunk::new(b'S', "").encode());
        let mut input = &bytes[..];
        assert_eq!(
            read_chunk(&mut input).unwrap(),
            Some(Chunk::new(b'A', "hello"))
        );
        assert_eq!(read_chunk(&mut input).unwrap(), Some(Chunk::new(b'S', "")));
        assert_eq!(read_chunk(&mut input).unwrap(), None);
    }

    #[test]
    fn truncated_chunk_is_an_error() {
        let mut input = &b"\0\0\0\x05Ahi"[..];
        assert!(read_chunk(&mut input).is_err());
    }

    #[test]
    fn split_stops_before_a_partial_chunk() {
        let mut bytes = frames(&[(b'1', b"out"), (b'X', b"0\n")]);
        let whole = bytes.len();
        bytes.extend_from_slice(&Head::encode(10, b'2'));
        bytes.extend_from_slice(b"part");
        let (chunks, used) = split_chunks(&bytes);
        assert_eq!(chunks, [Chunk::new(b'1', "out"), Chunk::new(b'X', "0\n")]);
        assert_eq!(used, whole);
        assert_eq!(decode_all(&bytes[..whole]).len(), 2);
    }

    #[test]
    fn a_chunk_prints_as_type_and_text() {
        assert_eq!(format!("{:?}", Chunk::new(b'1', "hi\n")), "1\"hi\\n\"");
    }
}
