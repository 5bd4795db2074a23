//! A minimal Nailgun chunk codec and a raw client, written independently of `ng-proto`.
//!
//! The end-to-end tests judge `ng-proto`'s users, so the harness's own view of the wire
//! does not reuse it: a bug shared by both sides would hide itself. This is the whole
//! format (nailgun.md §1.1): a 4-byte big-endian payload length, one type byte, the
//! payload. Blocking I/O only; sizes are trusted up to [`MAX_TEST_CHUNK`].

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::server::Address;

/// The largest payload the harness accepts from a peer. Test traffic is far smaller.
pub const MAX_TEST_CHUNK: usize = 64 << 20;

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
        let len = u32::try_from(self.payload.len()).expect("a test chunk fits u32");
        let mut out = Vec::with_capacity(5 + self.payload.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.push(self.ty);
        out.extend_from_slice(&self.payload);
        out
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{:?}",
            self.ty as char,
            String::from_utf8_lossy(&self.payload)
        )
    }
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
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len > MAX_TEST_CHUNK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("chunk of {len} bytes"),
        ));
    }
    let mut payload = vec![0; len];
    stream.read_exact(&mut payload)?;
    Ok(Some(Chunk {
        ty: header[4],
        payload,
    }))
}

/// A connected stream of either transport.
#[derive(Debug)]
pub enum Stream {
    /// TCP, with `TCP_NODELAY` set.
    Tcp(TcpStream),
    /// A Unix domain socket.
    Unix(UnixStream),
}

impl Stream {
    /// Connects to `address`.
    pub fn connect(address: &Address) -> io::Result<Stream> {
        match address {
            Address::Tcp(addr) => {
                let stream = TcpStream::connect(addr)?;
                stream.set_nodelay(true)?;
                Ok(Stream::Tcp(stream))
            }
            Address::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path)?)),
        }
    }

    /// Sets the read timeout.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `command` with `args` as a bare-bones client that sends no stdin and **no
/// heartbeats**, and returns every chunk the server sent up to and including the first
/// `X`. Harness self-checks use it to show that a test can tell a silent client from one
/// that heartbeats.
pub fn run_silent(address: &Address, command: &str, args: &[&str]) -> io::Result<Vec<Chunk>> {
    let mut stream = Stream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut request = Vec::new();
    for arg in args {
        request.extend(Chunk::new(b'A', *arg).encode());
    }
    request.extend(Chunk::new(b'D', "/").encode());
    request.extend(Chunk::new(b'C', command).encode());
    stream.write_all(&request)?;
    let mut received = Vec::new();
    while let Some(chunk) = read_chunk(&mut stream)? {
        let last = chunk.ty == b'X';
        received.push(chunk);
        if last {
            return Ok(received);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("no X chunk; received {received:?}"),
    ))
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
}
