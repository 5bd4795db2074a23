//! Helpers shared by the `ng-proto` integration tests: hex data files, transcripts, and
//! replays of a transcript through [`ServerSession`] and [`ClientSession`].
//!
//! Data files live in `proto/tests/data/` (see its README). Two formats:
//!
//! * **chunk tables** (`chunks.hex`): one vector per line, `TYPE "PAYLOAD" : WIRE-HEX`, where
//!   `PAYLOAD` takes the escapes `\n \r \t \\ \" \xNN`;
//! * **transcripts** (`capture-*.hex`, `peer-*.hex`): lines of hex bytes prefixed by `>`
//!   (client to server) or `<` (server to client). Consecutive lines of one direction form a
//!   *segment*: bytes one side sent before the other side sent anything.
//!
//! Everything after a `#` on a line is a comment.
//!
//! A replay is driven by a *feed*, which cuts each segment into the pieces handed to
//! `handle_bytes`; the split-invariance tests compare replays under different feeds.

#![allow(dead_code)] // each test binary uses a different part of this module

pub mod steps;

use bytes::BytesMut;
use ng_proto::client_session::StdinSend;
use ng_proto::{
    exit, Chunk, ChunkType, ClientConfig, ClientEvent, ClientSession, Decoder, Header, HeaderArg,
    Limits, ProtocolError, ServerConfig, ServerEvent, ServerSession,
};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Parses hex bytes, ignoring whitespace and `#` comments. Panics on anything else.
#[track_caller]
pub fn hex(text: &str) -> Vec<u8> {
    ng_testkit::hex::decode_text(text)
}

/// The path of a file in `proto/tests/data/`.
pub fn data_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The text of a file in `proto/tests/data/`.
pub fn read_data(name: &str) -> String {
    let path = data_path(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One line of a chunk table.
#[derive(Clone, Debug)]
pub struct Vector {
    /// Line number in the file, for messages.
    pub line: usize,
    pub ty: ChunkType,
    pub payload: Vec<u8>,
    pub wire: Vec<u8>,
}

/// Parses a chunk table (see the module docs).
pub fn parse_vectors(text: &str) -> Vec<Vector> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut chars = line.chars();
        let ty = chars.next().unwrap();
        assert!(ty.is_ascii(), "line {}: type {ty:?}", i + 1);
        let rest = chars.as_str().trim_start();
        let (payload, rest) = parse_quoted(rest).unwrap_or_else(|| panic!("line {}", i + 1));
        let wire = rest
            .trim_start()
            .strip_prefix(':')
            .unwrap_or_else(|| panic!("line {}: expected ':'", i + 1));
        out.push(Vector {
            line: i + 1,
            ty: ChunkType(ty as u8),
            payload,
            wire: hex(wire),
        });
    }
    out
}

/// Parses a `"..."` string with `\n \r \t \\ \" \xNN` escapes; returns it and the rest.
fn parse_quoted(s: &str) -> Option<(Vec<u8>, &str)> {
    let body = s.strip_prefix('"')?;
    let bytes = body.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return Some((out, &body[i + 1..])),
            b'\\' => {
                let (b, used) = match bytes.get(i + 1)? {
                    b'n' => (b'\n', 2),
                    b'r' => (b'\r', 2),
                    b't' => (b'\t', 2),
                    b'\\' => (b'\\', 2),
                    b'"' => (b'"', 2),
                    b'x' => (u8::from_str_radix(body.get(i + 2..i + 4)?, 16).ok()?, 4),
                    _ => return None,
                };
                out.push(b);
                i += used;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    None
}

/// Which way a segment of a transcript went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Client to server (`>`).
    ToServer,
    /// Server to client (`<`).
    ToClient,
}

/// Bytes one side sent before the other side sent anything.
#[derive(Clone, Debug)]
pub struct Segment {
    pub dir: Dir,
    pub bytes: Vec<u8>,
}

/// A whole session, as a list of segments.
#[derive(Clone, Debug)]
pub struct Transcript {
    pub name: String,
    pub segments: Vec<Segment>,
}

impl Transcript {
    /// Loads `proto/tests/data/<name>.hex`.
    pub fn load(name: &str) -> Self {
        Self::parse(name, &read_data(&format!("{name}.hex")))
    }

    /// Parses the transcript format (see the module docs).
    pub fn parse(name: &str, text: &str) -> Self {
        let mut segments: Vec<Segment> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let dir = match line.as_bytes()[0] {
                b'>' => Dir::ToServer,
                b'<' => Dir::ToClient,
                _ => panic!("{name}:{}: expected '>' or '<'", i + 1),
            };
            let bytes = hex(&line[1..]);
            match segments.last_mut() {
                Some(s) if s.dir == dir => s.bytes.extend_from_slice(&bytes),
                _ => segments.push(Segment { dir, bytes }),
            }
        }
        Self {
            name: name.to_owned(),
            segments,
        }
    }

    /// All bytes sent one way, concatenated.
    pub fn bytes(&self, dir: Dir) -> Vec<u8> {
        self.segments
            .iter()
            .filter(|s| s.dir == dir)
            .flat_map(|s| s.bytes.iter().copied())
            .collect()
    }
}

/// Every transcript in `proto/tests/data/`: the two captures of `nailgun.md` §6 and the
/// recordings of the real peers.
pub const TRANSCRIPTS: &[&str] = &[
    "capture-6.1-ng-version",
    "capture-6.2-echo",
    "peer-ng-version",
    "peer-echo-hi",
    "peer-echo-5000",
    "peer-args",
    "peer-exit-42",
    "peer-no-such-class",
    "peer-sleep",
];

/// Decodes `bytes` into whole chunks; panics if anything is left over or over-limit.
pub fn decode_all(bytes: &[u8]) -> Vec<Chunk> {
    let mut buf = BytesMut::from(bytes);
    let mut decoder = Decoder::new(Limits {
        max_chunk_len: u32::MAX,
    });
    let mut out = Vec::new();
    while let Some(chunk) = decoder.decode(&mut buf).expect("valid chunk stream") {
        out.push(chunk);
    }
    assert!(buf.is_empty(), "trailing partial chunk: {:02x?}", &buf[..]);
    out
}

/// Cuts a segment into the pieces handed to `handle_bytes`: `(segment index, bytes)`.
pub type Feed<'a> = &'a dyn Fn(usize, &[u8]) -> Vec<Vec<u8>>;

/// Each segment in one piece.
pub fn whole(_: usize, bytes: &[u8]) -> Vec<Vec<u8>> {
    vec![bytes.to_vec()]
}

/// Each segment one byte at a time.
pub fn bytewise(_: usize, bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes.iter().map(|&b| vec![b]).collect()
}

/// Segment `seg` cut in two at `at`; the others whole.
pub fn split_at(seg: usize, at: usize) -> impl Fn(usize, &[u8]) -> Vec<Vec<u8>> {
    move |i, bytes| {
        if i == seg {
            vec![bytes[..at].to_vec(), bytes[at..].to_vec()]
        } else {
            vec![bytes.to_vec()]
        }
    }
}

/// What a [`ServerSession`] did while replaying a transcript.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerReplay {
    /// Events, each with the index of the segment whose bytes caused it.
    pub events: Vec<(usize, ServerEvent)>,
    /// Errors from `handle_bytes`, with their segment index.
    pub errors: Vec<(usize, ProtocolError)>,
    /// What `request_stdin` answered for each `S` in the transcript.
    pub stdin_requests: Vec<bool>,
    /// The bytes the session queued for each server-to-client segment.
    pub sent: Vec<Vec<u8>>,
}

/// The server-to-client segments of `t` as the reference server sent them up to and including
/// the first `X`: what a [`ServerSession`] driven by the same actions must send.
pub fn expected_server_bytes(t: &Transcript) -> Vec<Vec<u8>> {
    let mut exited = false;
    let mut out = Vec::new();
    for seg in t.segments.iter().filter(|s| s.dir == Dir::ToClient) {
        let mut bytes = Vec::new();
        for chunk in decode_all(&seg.bytes) {
            if !exited {
                bytes.extend_from_slice(&ng_proto::codec::to_bytes(chunk.ty, &chunk.payload));
                exited = chunk.ty == ChunkType::EXIT;
            }
        }
        out.push(bytes);
    }
    out
}

/// Replays `t` through a [`ServerSession`]: client bytes go in as `feed` cuts them; each
/// server chunk of the transcript becomes the action that produces it (`S`: request_stdin,
/// `1`/`2`: write, `X`: exit with the parsed code). No time passes.
pub fn replay_server(t: &Transcript, config: ServerConfig, feed: Feed<'_>) -> ServerReplay {
    let now = Instant::now();
    let mut s = ServerSession::new(config, now);
    let mut rbuf = BytesMut::new();
    let mut r = ServerReplay {
        events: Vec::new(),
        errors: Vec::new(),
        stdin_requests: Vec::new(),
        sent: Vec::new(),
    };
    for (i, seg) in t.segments.iter().enumerate() {
        match seg.dir {
            Dir::ToServer => {
                for piece in feed(i, &seg.bytes) {
                    rbuf.extend_from_slice(&piece);
                    if let Err(e) = s.handle_bytes(&mut rbuf, now) {
                        r.errors.push((i, e));
                    }
                    while let Some(ev) = s.poll_event() {
                        r.events.push((i, ev));
                    }
                }
            }
            Dir::ToClient => {
                for chunk in decode_all(&seg.bytes) {
                    match chunk.ty {
                        ChunkType::SEND_INPUT => r.stdin_requests.push(s.request_stdin()),
                        ChunkType::STDOUT => s.write_stdout(&chunk.payload),
                        ChunkType::STDERR => s.write_stderr(&chunk.payload),
                        ChunkType::EXIT => s.exit(exit::parse(&chunk.payload)),
                        ty => panic!("{}: server sent {ty:?}", t.name),
                    }
                }
                r.sent.push(s.take_transmit().to_vec());
            }
        }
    }
    r
}

/// Client events with runs of `Stdout` (or `Stderr`) pieces joined, so that replays under
/// different feeds compare equal.
pub fn normalize(events: Vec<ClientEvent>) -> Vec<ClientEvent> {
    let mut out: Vec<ClientEvent> = Vec::new();
    for ev in events {
        match (out.last_mut(), ev) {
            (Some(ClientEvent::Stdout(a)), ClientEvent::Stdout(b))
            | (Some(ClientEvent::Stderr(a)), ClientEvent::Stderr(b)) => {
                let mut joined = BytesMut::from(&a[..]);
                joined.extend_from_slice(&b);
                *a = joined.freeze();
            }
            (_, ev) => out.push(ev),
        }
    }
    out
}

/// What a [`ClientSession`] did while replaying a transcript.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientReplay {
    /// Events, normalised with [`normalize`].
    pub events: Vec<ClientEvent>,
    /// The first error from `handle_bytes`.
    pub error: Option<ProtocolError>,
    /// The bytes the session queued for each client-to-server segment.
    pub sent: Vec<Vec<u8>>,
    pub exit_code: Option<i32>,
}

/// The [`Header`] a client must have been given to send these header chunks.
pub fn header_of(chunks: &[Chunk]) -> Header {
    let mut h = Header::default();
    let mut long: Option<Vec<u8>> = None;
    for c in chunks {
        match c.ty {
            ChunkType::ARGUMENT => h.args.push(HeaderArg::Plain(c.payload.to_vec())),
            ChunkType::LONG_ARG if c.payload.is_empty() => h
                .args
                .push(HeaderArg::File(long.take().unwrap_or_default())),
            ChunkType::LONG_ARG => long
                .get_or_insert_with(Vec::new)
                .extend_from_slice(&c.payload),
            ChunkType::ENVIRONMENT => h.env.push(c.payload.to_vec()),
            ChunkType::WORKING_DIR => h.cwd = c.payload.to_vec(),
            ChunkType::COMMAND => h.command = c.payload.to_vec(),
            ty => panic!("not a header chunk: {ty:?}"),
        }
    }
    h
}

/// The client-to-server segments of `t` as a [`ClientSession`] sends them: the same, except
/// that nothing follows the first `X` (the C client may still send an `H` after it, from its
/// select loop, before it exits).
pub fn expected_client_bytes(t: &Transcript) -> Vec<Vec<u8>> {
    let mut exited = false;
    let mut out = Vec::new();
    for seg in &t.segments {
        match seg.dir {
            Dir::ToClient => {
                exited |= decode_all(&seg.bytes)
                    .iter()
                    .any(|c| c.ty == ChunkType::EXIT)
            }
            Dir::ToServer if exited => out.push(Vec::new()),
            Dir::ToServer => out.push(seg.bytes.clone()),
        }
    }
    out
}

/// Replays `t` through a [`ClientSession`]: the header chunks of the first segment become a
/// [`Header`]; later `0` and `.` chunks become `send_stdin`/`send_stdin_eof` (which must
/// succeed), each `H` becomes a wait of one heartbeat interval; server bytes go in as `feed`
/// cuts them.
pub fn replay_client(t: &Transcript, feed: Feed<'_>) -> ClientReplay {
    let config = ClientConfig::default();
    let mut now = Instant::now();
    let mut c = ClientSession::new(config, now);
    let mut header = Vec::new();
    let mut header_sent = false;
    let mut rbuf = BytesMut::new();
    let mut events = Vec::new();
    let mut r = ClientReplay {
        events: Vec::new(),
        error: None,
        sent: Vec::new(),
        exit_code: None,
    };
    for (i, seg) in t.segments.iter().enumerate() {
        match seg.dir {
            Dir::ToServer => {
                for chunk in decode_all(&seg.bytes) {
                    if c.exit_code().is_some() {
                        continue;
                    }
                    if !header_sent {
                        let is_command = chunk.ty == ChunkType::COMMAND;
                        header.push(chunk);
                        if is_command {
                            c.send_header(&header_of(&header), now);
                            header_sent = true;
                        }
                        continue;
                    }
                    match chunk.ty {
                        ChunkType::STDIN => {
                            assert_eq!(c.send_stdin(&chunk.payload, now), StdinSend::Sent)
                        }
                        ChunkType::STDIN_EOF => {
                            assert_eq!(c.send_stdin_eof(now), StdinSend::Sent)
                        }
                        ChunkType::HEARTBEAT => {
                            now = c.poll_timeout().expect("heartbeat deadline");
                            c.handle_timeout(now);
                        }
                        ty => panic!("{}: client sent {ty:?} after C", t.name),
                    }
                }
                r.sent.push(c.take_transmit().to_vec());
            }
            Dir::ToClient => {
                for piece in feed(i, &seg.bytes) {
                    rbuf.extend_from_slice(&piece);
                    if let Err(e) = c.handle_bytes(&mut rbuf) {
                        r.error.get_or_insert(e);
                    }
                    while let Some(ev) = c.poll_event() {
                        events.push(ev);
                    }
                }
            }
        }
        // Time passes between segments, but never a whole heartbeat interval.
        now += Duration::from_millis(1);
    }
    if let Err(e) = c.handle_eof() {
        r.error.get_or_insert(e);
    }
    r.events = normalize(events);
    r.exit_code = c.exit_code();
    r
}
