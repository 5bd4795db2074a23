//! Golden byte vectors for `ng-proto`, checked in both directions.
//!
//! * `data/chunks.hex`: every chunk type, encoded and decoded.
//! * `data/capture-6.1-ng-version.hex` and `data/capture-6.2-echo.hex`: the captures of
//!   `nailgun.md` §6.1 and §6.2, replayed through [`ClientSession`] (it must send the exact
//!   client bytes for the same header and stdin) and [`ServerSession`] (it must parse the
//!   exact request and send the exact server bytes for the same actions).
//! * Failure cases, written inline: over-limit lengths, unknown and misplaced types,
//!   malformed environment entries, `L` assembly, the header cap and timeouts, and the client's
//!   rules for `X`, `S`, unexpected types and heartbeats.

mod common;

use bytes::{Bytes, BytesMut};
use common::{decode_all, hex, parse_vectors, read_data, Transcript};
use ng_proto::client_session::StdinSend;
use ng_proto::codec::{encode_stream, to_bytes};
use ng_proto::server_session::DisconnectReason;
use ng_proto::{
    exit, Chunk, ChunkType, ClientConfig, ClientEvent, ClientSession, DecodeError, Decoder, Header,
    HeaderArg, Limits, ProtocolError, Request, ServerConfig, ServerEvent, ServerSession,
    MAX_PAYLOAD_LEN,
};
use std::time::{Duration, Instant};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn server_events(s: &mut ServerSession) -> Vec<ServerEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn client_events(c: &mut ClientSession) -> Vec<ClientEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// Feeds hex bytes to a server session; returns the result and the events.
fn feed_server(
    s: &mut ServerSession,
    hex_bytes: &str,
    now: Instant,
) -> (Result<(), ProtocolError>, Vec<ServerEvent>) {
    let mut buf = BytesMut::from(&hex(hex_bytes)[..]);
    let r = s.handle_bytes(&mut buf, now);
    (r, server_events(s))
}

fn feed_client(
    c: &mut ClientSession,
    bytes: &[u8],
) -> (Result<(), ProtocolError>, Vec<ClientEvent>) {
    let mut buf = BytesMut::from(bytes);
    let r = c.handle_bytes(&mut buf);
    (r, client_events(c))
}

fn chunk(ty: u8, payload: &[u8]) -> Vec<u8> {
    to_bytes(ChunkType(ty), payload).to_vec()
}

/// A server session past `C ping`, with no arguments.
fn launched(config: ServerConfig, now: Instant) -> ServerSession {
    let mut s = ServerSession::new(config, now);
    let (r, events) = feed_server(&mut s, "00 00 00 04 43 70 69 6e 67", now);
    assert_eq!(r, Ok(()));
    assert!(matches!(&events[..], [ServerEvent::Launch(_)]));
    s
}

/// A client session that has sent a minimal header.
fn started(now: Instant) -> ClientSession {
    let mut c = ClientSession::new(ClientConfig::default(), now);
    c.send_header(
        &Header {
            command: b"ping".to_vec(),
            ..Header::default()
        },
        now,
    );
    c.take_transmit();
    c
}

// ---------------------------------------------------------------------------------------
// The chunk table
// ---------------------------------------------------------------------------------------

#[test]
fn chunk_vectors_encode_to_their_wire_bytes() {
    for v in parse_vectors(&read_data("chunks.hex")) {
        assert_eq!(
            &to_bytes(v.ty, &v.payload)[..],
            &v.wire[..],
            "chunks.hex line {}",
            v.line
        );
    }
}

#[test]
fn chunk_vectors_decode_from_their_wire_bytes() {
    for v in parse_vectors(&read_data("chunks.hex")) {
        let mut buf = BytesMut::from(&v.wire[..]);
        let mut d = Decoder::default();
        assert_eq!(d.bytes_needed(&buf), Ok(0), "line {}", v.line);
        let got = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!(got, Chunk::new(v.ty, v.payload.clone()), "line {}", v.line);
        assert!(buf.is_empty(), "line {}", v.line);
        assert_eq!(d.decode(&mut buf), Ok(None));
    }
}

#[test]
fn chunk_vectors_back_to_back_decode_in_order() {
    let vectors = parse_vectors(&read_data("chunks.hex"));
    let stream: Vec<u8> = vectors.iter().flat_map(|v| v.wire.clone()).collect();
    let chunks = decode_all(&stream);
    assert_eq!(chunks.len(), vectors.len());
    for (c, v) in chunks.iter().zip(&vectors) {
        assert_eq!((c.ty, &c.payload[..]), (v.ty, &v.payload[..]));
    }
}

#[test]
fn chunk_table_covers_every_type() {
    let vectors = parse_vectors(&read_data("chunks.hex"));
    for ty in b"AEDCL0.H12SXhipoq" {
        assert!(
            vectors.iter().any(|v| v.ty == ChunkType(*ty)),
            "no vector for {:?}",
            *ty as char
        );
    }
}

#[test]
fn encode_stream_cuts_into_pieces_and_sends_nothing_for_nothing() {
    let mut out = BytesMut::new();
    encode_stream(ChunkType::STDIN, b"abcde", 2, &mut out);
    assert_eq!(
        &out[..],
        &hex("00 00 00 02 30 61 62  00 00 00 02 30 63 64  00 00 00 01 30 65")[..]
    );
    let mut out = BytesMut::new();
    encode_stream(ChunkType::LONG_ARG, b"", 2048, &mut out);
    assert!(out.is_empty());
    // A piece size of 0 is taken as 1 rather than looping forever.
    let mut out = BytesMut::new();
    encode_stream(ChunkType::STDOUT, b"xy", 0, &mut out);
    assert_eq!(&out[..], &hex("00 00 00 01 31 78  00 00 00 01 31 79")[..]);
}

#[test]
fn decode_truncated_chunk_is_incomplete_not_an_error() {
    let mut d = Decoder::default();
    for partial in [
        "",
        "00",
        "00 00 00 05",
        "00 00 00 05 41",
        "00 00 00 05 41 68 69",
    ] {
        let mut buf = BytesMut::from(&hex(partial)[..]);
        assert_eq!(d.decode(&mut buf), Ok(None), "{partial}");
        assert_eq!(&buf[..], &hex(partial)[..], "{partial}: bytes consumed");
    }
    assert_eq!(d.bytes_needed(&hex("00 00 00 05 41 68 69")), Ok(3));
    assert_eq!(d.bytes_needed(&hex("00 00")), Ok(3));
}

// ---------------------------------------------------------------------------------------
// Over-limit lengths
// ---------------------------------------------------------------------------------------

#[test]
fn decode_rejects_over_limit_lengths_from_the_header_alone() {
    let max = Limits::DEFAULT_MAX_CHUNK_LEN;
    let limit_plus_one = max + 1;
    let cases = [
        (0x8000_0000u32, max),
        (u32::MAX, max),
        (limit_plus_one, max),
    ];
    for (len, want_max) in cases {
        let mut header = len.to_be_bytes().to_vec();
        header.push(b'A');
        let mut buf = BytesMut::from(&header[..]);
        let mut d = Decoder::default();
        let want = DecodeError::ChunkTooLarge {
            len,
            max: want_max,
            ty: ChunkType::ARGUMENT,
        };
        assert_eq!(d.bytes_needed(&buf), Err(want.clone()), "len {len}");
        assert_eq!(d.decode(&mut buf), Err(want), "len {len}");
        assert_eq!(buf.len(), 5, "the header stays in the buffer");
    }
}

#[test]
fn decode_accepts_exactly_the_limit() {
    let mut d = Decoder::new(Limits { max_chunk_len: 16 });
    let mut buf = BytesMut::from(&hex("00 00 00 10 30")[..]);
    assert_eq!(d.bytes_needed(&buf), Ok(16));
    assert_eq!(d.decode(&mut buf), Ok(None));
    buf.extend_from_slice(&[b'x'; 16]);
    assert_eq!(d.decode(&mut buf).unwrap().unwrap().payload.len(), 16);

    let mut buf = BytesMut::from(&hex("00 00 00 11 30")[..]);
    assert_eq!(
        d.decode(&mut buf),
        Err(DecodeError::ChunkTooLarge {
            len: 17,
            max: 16,
            ty: ChunkType::STDIN
        })
    );
}

#[test]
fn decode_limit_is_clamped_to_the_signed_range() {
    let mut d = Decoder::new(Limits {
        max_chunk_len: u32::MAX,
    });
    let mut buf = BytesMut::from(&hex("80 00 00 00 31")[..]);
    assert_eq!(
        d.decode(&mut buf),
        Err(DecodeError::ChunkTooLarge {
            len: 1 << 31,
            max: MAX_PAYLOAD_LEN,
            ty: ChunkType::STDOUT
        })
    );
    assert_eq!(
        d.bytes_needed(&hex("7f ff ff ff 31")),
        Ok(MAX_PAYLOAD_LEN as usize)
    );
}

#[test]
fn server_rejects_an_over_limit_chunk_and_ignores_what_follows() {
    let now = Instant::now();
    for header in ["80 00 00 00 41", "ff ff ff ff 41", "00 80 00 01 41"] {
        let mut s = ServerSession::new(ServerConfig::default(), now);
        assert!(s.bytes_needed(&hex(header)).is_err());
        let (r, events) = feed_server(&mut s, header, now);
        assert!(
            matches!(
                r,
                Err(ProtocolError::Decode(DecodeError::ChunkTooLarge { .. }))
            ),
            "{header}: {r:?}"
        );
        assert!(events.is_empty());
        // Whatever follows is ignored, even a complete command.
        let (r, events) = feed_server(&mut s, "00 00 00 04 43 70 69 6e 67", now);
        assert_eq!(r, Ok(()));
        assert!(events.is_empty());
        assert!(!s.in_header());
        assert_eq!(s.poll_timeout(), None);
        // The caller can still say why and end the session.
        s.write_stderr(b"too large\n");
        s.exit(1);
        assert_eq!(
            &s.take_transmit()[..],
            &hex("00 00 00 0a 32 74 6f 6f 20 6c 61 72 67 65 0a  00 00 00 02 58 31 0a")[..]
        );
    }
}

// ---------------------------------------------------------------------------------------
// The §6.1 capture: `ng-nailgun ng-version`
// ---------------------------------------------------------------------------------------

fn capture_6_1() -> (Vec<u8>, Vec<u8>) {
    let t = Transcript::load("capture-6.1-ng-version");
    (
        t.bytes(common::Dir::ToServer),
        t.bytes(common::Dir::ToClient),
    )
}

fn header_6_1(command: &str) -> Header {
    Header {
        command: command.as_bytes().to_vec(),
        args: Vec::new(),
        env: [
            "NAILGUN_FILESEPARATOR=/",
            "NAILGUN_PATHSEPARATOR=:",
            "NAILGUN_TTY_0=0",
            "NAILGUN_TTY_1=0",
            "NAILGUN_TTY_2=0",
        ]
        .iter()
        .map(|e| e.as_bytes().to_vec())
        .collect(),
        cwd: b"/tmp".to_vec(),
    }
}

fn request_6_1(command: &str) -> Request {
    Request {
        command: b(command),
        args: Vec::new(),
        env: vec![
            (b("NAILGUN_FILESEPARATOR"), b("/")),
            (b("NAILGUN_PATHSEPARATOR"), b(":")),
            (b("NAILGUN_TTY_0"), b("0")),
            (b("NAILGUN_TTY_1"), b("0")),
            (b("NAILGUN_TTY_2"), b("0")),
        ],
        cwd: Some(b("/tmp")),
        skipped_env: 0,
        client: Default::default(),
    }
}

const VERSION_LINE: &str = "NailGun server version 0.9.3-SNAPSHOT\n";

#[test]
fn capture_6_1_sizes() {
    let (c2s, s2c) = capture_6_1();
    assert_eq!((c2s.len(), s2c.len()), (140, 50));
}

#[test]
fn capture_6_1_client_sends_the_exact_header() {
    let (c2s, _) = capture_6_1();
    let now = Instant::now();
    let mut c = ClientSession::new(ClientConfig::default(), now);
    assert!(!c.has_transmit());
    assert_eq!(c.poll_timeout(), None, "no heartbeat before the header");
    c.send_header(&header_6_1("ng-version"), now);
    assert_eq!(&c.take_transmit()[..], &c2s[..]);
    // Only once.
    c.send_header(&header_6_1("ng-version"), now);
    assert!(!c.has_transmit());
}

#[test]
fn capture_6_1_client_reads_output_and_exit() {
    let (_, s2c) = capture_6_1();
    let now = Instant::now();
    let mut c = ClientSession::new(ClientConfig::default(), now);
    c.send_header(&header_6_1("ng-version"), now);
    let (r, events) = feed_client(&mut c, &s2c);
    assert_eq!(r, Ok(()));
    assert_eq!(
        events,
        [ClientEvent::Stdout(b(VERSION_LINE)), ClientEvent::Exit(0)]
    );
    assert_eq!(c.exit_code(), Some(0));
    assert_eq!(c.poll_timeout(), None);
    assert_eq!(c.handle_eof(), Ok(()), "FIN after X is fine");
}

#[test]
fn capture_6_1_server_parses_the_request() {
    let (c2s, _) = capture_6_1();
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    let mut buf = BytesMut::from(&c2s[..]);
    assert_eq!(s.handle_bytes(&mut buf, now), Ok(()));
    assert!(buf.is_empty());
    assert_eq!(
        server_events(&mut s),
        [ServerEvent::Launch(request_6_1("ng-version"))]
    );
    assert!(!s.in_header());
}

#[test]
fn capture_6_1_server_sends_the_exact_output() {
    let (c2s, s2c) = capture_6_1();
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    s.handle_bytes(&mut BytesMut::from(&c2s[..]), now).unwrap();
    s.write_stdout(VERSION_LINE.as_bytes());
    s.exit(0);
    assert!(s.is_exited());
    assert_eq!(&s.take_transmit()[..], &s2c[..]);
    assert_eq!(&s2c[s2c.len() - 7..], &hex("00 00 00 02 58 30 0a")[..]);
}

// ---------------------------------------------------------------------------------------
// The §6.2 capture: stdin through `t.Echo`
// ---------------------------------------------------------------------------------------

#[test]
fn capture_6_2_client_side() {
    let t = Transcript::load("capture-6.2-echo");
    let segs: Vec<&[u8]> = t.segments.iter().map(|s| &s.bytes[..]).collect();
    let [header, s1, hi, s2_out, eof, x] = segs[..] else {
        panic!("expected 6 segments, got {}", segs.len());
    };
    let now = Instant::now();
    let mut c = ClientSession::new(ClientConfig::default(), now);
    c.send_header(&header_6_1("t.Echo"), now);
    assert_eq!(&c.take_transmit()[..], header);

    assert_eq!(c.send_stdin(b"hi\n", now), StdinSend::NoCredit);
    assert!(!c.has_transmit(), "no stdin before S");
    assert_eq!(
        feed_client(&mut c, s1),
        (Ok(()), vec![ClientEvent::StdinRequested])
    );
    assert!(c.has_stdin_credit());
    assert_eq!(c.send_stdin(b"hi\n", now), StdinSend::Sent);
    assert_eq!(&c.take_transmit()[..], hi);
    assert_eq!(c.send_stdin(b"more", now), StdinSend::NoCredit);

    assert_eq!(
        feed_client(&mut c, s2_out),
        (
            Ok(()),
            vec![ClientEvent::StdinRequested, ClientEvent::Stdout(b("hi\n"))]
        )
    );
    assert_eq!(c.send_stdin_eof(now), StdinSend::Sent);
    assert_eq!(&c.take_transmit()[..], eof);
    assert_eq!(c.send_stdin(b"late", now), StdinSend::Closed);
    assert_eq!(c.send_stdin_eof(now), StdinSend::Closed);

    assert_eq!(feed_client(&mut c, x), (Ok(()), vec![ClientEvent::Exit(0)]));
    assert!(!c.has_transmit());
}

#[test]
fn capture_6_2_server_side() {
    let t = Transcript::load("capture-6.2-echo");
    let segs: Vec<&[u8]> = t.segments.iter().map(|s| &s.bytes[..]).collect();
    let [header, s1, hi, s2_out, eof, x] = segs[..] else {
        panic!("expected 6 segments, got {}", segs.len());
    };
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    s.handle_bytes(&mut BytesMut::from(header), now).unwrap();
    assert_eq!(
        server_events(&mut s),
        [ServerEvent::Launch(request_6_1("t.Echo"))]
    );

    assert!(s.request_stdin());
    assert!(!s.request_stdin(), "one S outstanding at most");
    assert_eq!(&s.take_transmit()[..], s1);
    assert_eq!(s1, &hex("00 00 00 00 53")[..]);

    s.handle_bytes(&mut BytesMut::from(hi), now).unwrap();
    assert_eq!(server_events(&mut s), [ServerEvent::Stdin(b("hi\n"))]);

    assert!(s.request_stdin());
    s.write_stdout(b"hi\n");
    assert_eq!(&s.take_transmit()[..], s2_out);

    s.handle_bytes(&mut BytesMut::from(eof), now).unwrap();
    assert_eq!(server_events(&mut s), [ServerEvent::StdinEof]);
    assert!(s.stdin_ended());
    assert!(!s.request_stdin(), "no S after end of stdin");

    s.exit(0);
    assert_eq!(&s.take_transmit()[..], x);
    assert_eq!(x, &hex("00 00 00 02 58 30 0a")[..]);
}

// ---------------------------------------------------------------------------------------
// Server: the header phase
// ---------------------------------------------------------------------------------------

#[test]
fn server_skips_unknown_types_before_the_command() {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    // Z "z", 0 "early", . , S, H, then A x and C ping.
    let (r, events) = feed_server(
        &mut s,
        "00 00 00 01 5a 7a  00 00 00 05 30 65 61 72 6c 79  00 00 00 00 2e  00 00 00 00 53
         00 00 00 00 48  00 00 00 01 41 78  00 00 00 04 43 70 69 6e 67",
        now,
    );
    assert_eq!(r, Ok(()));
    let [ServerEvent::Launch(req)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(req.args, [b("x")]);
    assert_eq!(req.command, b("ping"));
    assert_eq!(req.cwd, None, "D is optional");
}

#[test]
fn server_rejects_unknown_and_header_types_after_the_command() {
    let now = Instant::now();
    for (ty, hex_chunk) in [
        (b'Z', "00 00 00 01 5a 7a"),
        (b'A', "00 00 00 01 41 78"),
        (b'C', "00 00 00 01 43 78"),
        (b'L', "00 00 00 00 4c"),
        (b'1', "00 00 00 01 31 78"),
        (b'X', "00 00 00 02 58 30 0a"),
    ] {
        let mut s = launched(ServerConfig::default(), now);
        let (r, events) = feed_server(&mut s, hex_chunk, now);
        assert_eq!(
            r,
            Err(ProtocolError::UnexpectedChunk {
                state: "running",
                ty: ChunkType(ty)
            })
        );
        assert!(events.is_empty());
        // Input is ignored from then on.
        let (r, events) = feed_server(&mut s, "00 00 00 01 30 61  00 00 00 00 2e", now);
        assert_eq!((r, events), (Ok(()), vec![]));
        assert!(!s.request_stdin());
    }
}

#[test]
fn server_splits_env_at_the_first_equals_and_skips_malformed_entries() {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    let mut wire = Vec::new();
    for e in ["A=b=c", "NOEQUALS", "=leading", "EMPTY=", "", "A=second"] {
        wire.extend(chunk(b'E', e.as_bytes()));
    }
    wire.extend(chunk(b'C', b"env"));
    s.handle_bytes(&mut BytesMut::from(&wire[..]), now).unwrap();
    let [ServerEvent::Launch(req)] = &server_events(&mut s)[..] else {
        panic!()
    };
    assert_eq!(
        req.env,
        [
            (b("A"), b("b=c")),
            (b("EMPTY"), b("")),
            (b("A"), b("second"))
        ]
    );
    assert_eq!(req.skipped_env, 3);
    assert_eq!(req.env_var(b"A"), Some(&b("second")), "the last one wins");
    assert_eq!(req.env_var(b"NOEQUALS"), None);
}

#[test]
fn server_keeps_the_last_working_directory() {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    let mut wire = chunk(b'D', b"/a");
    wire.extend(chunk(b'D', b"/b"));
    wire.extend(chunk(b'C', b"pwd"));
    s.handle_bytes(&mut BytesMut::from(&wire[..]), now).unwrap();
    let [ServerEvent::Launch(req)] = &server_events(&mut s)[..] else {
        panic!()
    };
    assert_eq!(req.cwd, Some(b("/b")));
}

fn launch_args(wire: &[u8]) -> Vec<Bytes> {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    s.handle_bytes(&mut BytesMut::from(wire), now).unwrap();
    match &server_events(&mut s)[..] {
        [ServerEvent::Launch(req)] => req.args.clone(),
        other => panic!("{other:?}"),
    }
}

fn wire_of(chunks: &[(u8, &str)]) -> Vec<u8> {
    chunks
        .iter()
        .flat_map(|(ty, p)| chunk(*ty, p.as_bytes()))
        .collect()
}

#[test]
fn server_assembles_long_arguments_in_place() {
    // Pieces and an empty terminator make one argument at their position.
    let wire = wire_of(&[
        (b'A', "a"),
        (b'L', "he"),
        (b'L', "llo"),
        (b'L', ""),
        (b'A', "b"),
        (b'C', "cmd"),
    ]);
    assert_eq!(launch_args(&wire), [b("a"), b("hello"), b("b")]);
    // A lone terminator is an empty argument.
    let wire = wire_of(&[(b'L', ""), (b'A', "b"), (b'C', "cmd")]);
    assert_eq!(launch_args(&wire), [b(""), b("b")]);
    // A heartbeat inside a run does not end it.
    let wire = wire_of(&[
        (b'L', "x"),
        (b'H', ""),
        (b'L', "y"),
        (b'L', ""),
        (b'C', "c"),
    ]);
    assert_eq!(launch_args(&wire), [b("xy")]);
    // Two runs back to back.
    let wire = wire_of(&[
        (b'L', "1"),
        (b'L', ""),
        (b'L', "2"),
        (b'L', ""),
        (b'C', "c"),
    ]);
    assert_eq!(launch_args(&wire), [b("1"), b("2")]);
}

#[test]
fn server_closes_an_unterminated_long_argument_at_the_next_a_or_c() {
    // The Python client sends no terminator.
    let wire = wire_of(&[(b'L', "ab"), (b'L', "c"), (b'A', "next"), (b'C', "cmd")]);
    assert_eq!(launch_args(&wire), [b("abc"), b("next")]);
    let wire = wire_of(&[(b'A', "first"), (b'L', "tail"), (b'C', "cmd")]);
    assert_eq!(launch_args(&wire), [b("first"), b("tail")]);
}

#[test]
fn server_enforces_the_header_byte_cap() {
    let now = Instant::now();
    let config = ServerConfig {
        max_header_bytes: 64,
        ..ServerConfig::default()
    };
    // Each item costs its payload plus 16: four empty arguments fit exactly, a fifth does not.
    let mut s = ServerSession::new(config, now);
    let (r, _) = feed_server(&mut s, &"00 00 00 00 41 ".repeat(4), now);
    assert_eq!(r, Ok(()));
    let (r, _) = feed_server(&mut s, "00 00 00 00 41", now);
    assert_eq!(r, Err(ProtocolError::HeaderTooLarge { max: 64 }));
    let (r, events) = feed_server(&mut s, "00 00 00 01 43 63", now);
    assert_eq!((r, events), (Ok(()), vec![]), "ignored after the error");

    // Heartbeats cost nothing.
    let mut s = ServerSession::new(config, now);
    let (r, _) = feed_server(&mut s, &"00 00 00 00 48 ".repeat(100), now);
    assert_eq!(r, Ok(()));
    // A 32-byte argument (32 + 16) and an empty command (0 + 16) fit exactly.
    let mut wire = chunk(b'A', &[b'a'; 32]);
    wire.extend(chunk(b'C', b""));
    s.handle_bytes(&mut BytesMut::from(&wire[..]), now).unwrap();
    assert!(matches!(
        &server_events(&mut s)[..],
        [ServerEvent::Launch(_)]
    ));

    // One byte more does not.
    let mut s = ServerSession::new(config, now);
    let mut wire = chunk(b'A', &[b'a'; 33]);
    wire.extend(chunk(b'C', b""));
    let r = s.handle_bytes(&mut BytesMut::from(&wire[..]), now);
    assert_eq!(r, Err(ProtocolError::HeaderTooLarge { max: 64 }));
    assert!(server_events(&mut s).is_empty());
}

#[test]
fn server_header_timeout() {
    let t0 = Instant::now();
    let config = ServerConfig {
        header_timeout: Some(Duration::from_secs(10)),
        ..ServerConfig::default()
    };
    let mut s = ServerSession::new(config, t0);
    assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(10)));
    // Chunks do not move the header deadline.
    let (r, _) = feed_server(&mut s, "00 00 00 01 41 78", t0 + Duration::from_secs(5));
    assert_eq!(r, Ok(()));
    assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(10)));
    assert_eq!(s.handle_timeout(t0 + Duration::from_millis(9_999)), Ok(()));
    assert_eq!(
        s.handle_timeout(t0 + Duration::from_secs(10)),
        Err(ProtocolError::HeaderTimeout)
    );
    assert_eq!(s.poll_timeout(), None);
    let (r, events) = feed_server(&mut s, "00 00 00 01 43 63", t0 + Duration::from_secs(11));
    assert_eq!((r, events), (Ok(()), vec![]), "a late command is ignored");
    s.exit(899);
    assert_eq!(
        &s.take_transmit()[..],
        &hex("00 00 00 04 58 38 39 39 0a")[..]
    );

    // No timeout configured: no deadline.
    let s = ServerSession::new(
        ServerConfig {
            header_timeout: None,
            ..config
        },
        t0,
    );
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn server_heartbeat_timeout_reports_the_client_gone() {
    let t0 = Instant::now();
    let hb = Duration::from_secs(10);
    let config = ServerConfig {
        heartbeat_timeout: Some(hb),
        ..ServerConfig::default()
    };
    let t1 = t0 + Duration::from_secs(1);
    let mut s = launched(config, t1);
    assert_eq!(s.poll_timeout(), Some(t1 + hb));
    // An H refreshes the deadline.
    let t2 = t1 + Duration::from_secs(5);
    assert_eq!(feed_server(&mut s, "00 00 00 00 48", t2), (Ok(()), vec![]));
    assert_eq!(s.poll_timeout(), Some(t2 + hb));
    // Half a chunk does not.
    assert_eq!(
        feed_server(&mut s, "00 00", t2 + Duration::from_secs(1)).0,
        Ok(())
    );
    assert_eq!(s.poll_timeout(), Some(t2 + hb));

    assert_eq!(s.handle_timeout(t2 + hb - Duration::from_nanos(1)), Ok(()));
    assert!(server_events(&mut s).is_empty());
    assert_eq!(s.handle_timeout(t2 + hb), Ok(()));
    assert_eq!(
        server_events(&mut s),
        [ServerEvent::ClientGone(DisconnectReason::HeartbeatTimeout)]
    );
    assert_eq!(s.poll_timeout(), None);
    assert!(s.stdin_ended());
    assert!(!s.request_stdin());
    // Reported once.
    assert_eq!(s.handle_timeout(t2 + hb * 3), Ok(()));
    assert_eq!(s.handle_eof(), Ok(()));
    assert!(server_events(&mut s).is_empty());
    // The command may still finish.
    s.write_stdout(b"late\n");
    s.exit(0);
    assert_eq!(
        &s.take_transmit()[..],
        &hex("00 00 00 05 31 6c 61 74 65 0a  00 00 00 02 58 30 0a")[..]
    );
}

#[test]
fn server_eof_before_the_command_is_an_error() {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    let (r, _) = feed_server(&mut s, "00 00 00 01 41 78  00 00 00 04 43 70", now);
    assert_eq!(r, Ok(()));
    assert_eq!(s.handle_eof(), Err(ProtocolError::EofBeforeCommand));
    assert!(server_events(&mut s).is_empty());
    assert_eq!(s.poll_timeout(), None);
}

/// A header that failed launches nothing, so the end of file that follows (the caller
/// drains the socket after sending its error) must not report a `ClientGone` for it.
#[test]
fn server_error_in_the_header_reports_no_client_gone() {
    let t0 = Instant::now();
    let timeout = ServerConfig::default().header_timeout.unwrap();
    // Header timeout, then end of file.
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    assert_eq!(
        s.handle_timeout(t0 + timeout),
        Err(ProtocolError::HeaderTimeout)
    );
    assert_eq!(s.handle_eof(), Ok(()));
    assert!(server_events(&mut s).is_empty());
    // Over-limit chunk in the header, then end of file.
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    assert!(feed_server(&mut s, "ff ff ff ff 41", t0).0.is_err());
    assert_eq!(s.handle_eof(), Ok(()));
    assert!(server_events(&mut s).is_empty());
    // End of file before the command, reported twice.
    let mut s = ServerSession::new(ServerConfig::default(), t0);
    assert_eq!(s.handle_eof(), Err(ProtocolError::EofBeforeCommand));
    assert_eq!(s.handle_eof(), Ok(()));
    assert!(server_events(&mut s).is_empty());
    assert!(s.stdin_ended());
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn server_eof_after_the_command_reports_the_client_gone_once() {
    let now = Instant::now();
    let mut s = launched(ServerConfig::default(), now);
    assert_eq!(s.handle_eof(), Ok(()));
    assert_eq!(s.handle_eof(), Ok(()));
    assert_eq!(
        server_events(&mut s),
        [ServerEvent::ClientGone(DisconnectReason::Eof)]
    );
    assert_eq!(s.poll_timeout(), None);
    assert!(!s.request_stdin());
}

// ---------------------------------------------------------------------------------------
// Server: running
// ---------------------------------------------------------------------------------------

#[test]
fn server_stdin_after_end_of_stdin_is_an_error() {
    let now = Instant::now();
    for late in ["00 00 00 01 30 61", "00 00 00 00 2e"] {
        let mut s = launched(ServerConfig::default(), now);
        let (r, events) = feed_server(&mut s, "00 00 00 00 2e", now);
        assert_eq!((r, events), (Ok(()), vec![ServerEvent::StdinEof]));
        let (r, events) = feed_server(&mut s, late, now);
        assert_eq!((r, events), (Err(ProtocolError::StdinAfterEof), vec![]));
    }
}

#[test]
fn server_sends_one_s_per_answered_request() {
    let now = Instant::now();
    let mut s = launched(ServerConfig::default(), now);
    assert!(s.request_stdin());
    assert!(!s.request_stdin());
    assert_eq!(&s.take_transmit()[..], &hex("00 00 00 00 53")[..]);
    // An empty 0 answers the S too, and makes no event.
    assert_eq!(feed_server(&mut s, "00 00 00 00 30", now), (Ok(()), vec![]));
    assert!(s.request_stdin());
    assert_eq!(
        feed_server(&mut s, "00 00 00 02 30 61 62", now),
        (Ok(()), vec![ServerEvent::Stdin(b("ab"))])
    );
    // Eager stdin (without an S) is accepted, as documented.
    assert_eq!(
        feed_server(&mut s, "00 00 00 01 30 63", now),
        (Ok(()), vec![ServerEvent::Stdin(b("c"))])
    );
    assert!(s.request_stdin());
    assert_eq!(
        &s.take_transmit()[..],
        &hex("00 00 00 00 53  00 00 00 00 53")[..]
    );
    // H changes nothing.
    assert_eq!(feed_server(&mut s, "00 00 00 00 48", now), (Ok(()), vec![]));
    assert!(!s.request_stdin());
}

#[test]
fn server_sends_no_s_before_the_command() {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    assert!(!s.request_stdin());
    assert!(s.transmit().is_empty());
}

#[test]
fn server_sends_exactly_one_exit_and_nothing_after_it() {
    let now = Instant::now();
    let mut s = launched(ServerConfig::default(), now);
    s.write_stderr(b"e");
    s.exit(42);
    s.exit(0);
    s.write_stdout(b"after");
    assert!(!s.request_stdin());
    assert_eq!(
        &s.take_transmit()[..],
        &hex("00 00 00 01 32 65  00 00 00 03 58 34 32 0a")[..]
    );
    // The client may still send H (the C client does), or anything: all ignored.
    let (r, events) = feed_server(
        &mut s,
        "00 00 00 00 48  00 00 00 01 5a 7a  ff ff ff ff 41",
        now,
    );
    assert_eq!((r, events), (Ok(()), vec![]));
    assert_eq!(s.handle_eof(), Ok(()));
    assert!(server_events(&mut s).is_empty());
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn server_exit_codes_are_formatted_like_the_jdk17_reference() {
    let now = Instant::now();
    for (code, want) in [
        (0, "00 00 00 02 58 30 0a"),
        (-1, "00 00 00 03 58 2d 31 0a"),
        (898, "00 00 00 04 58 38 39 38 0a"),
        (
            i32::MIN,
            "00 00 00 0c 58 2d 32 31 34 37 34 38 33 36 34 38 0a",
        ),
    ] {
        let mut s = launched(ServerConfig::default(), now);
        s.exit(code);
        assert_eq!(&s.take_transmit()[..], &hex(want)[..], "{code}");
    }
}

#[test]
fn server_cuts_large_writes_at_max_output_chunk() {
    let now = Instant::now();
    let config = ServerConfig {
        max_output_chunk: 2,
        ..ServerConfig::default()
    };
    let mut s = launched(config, now);
    s.write_stdout(b"abc");
    s.write_stdout(b"");
    assert_eq!(
        &s.take_transmit()[..],
        &hex("00 00 00 02 31 61 62  00 00 00 01 31 63")[..]
    );
}

#[test]
fn server_partial_writes_keep_the_rest_queued() {
    let now = Instant::now();
    let mut s = launched(ServerConfig::default(), now);
    s.write_stdout(b"hi");
    s.exit(0);
    let all = s.transmit().to_vec();
    s.advance_transmit(3);
    assert_eq!(s.transmit(), &all[3..]);
    s.advance_transmit(1000);
    assert!(s.transmit().is_empty());
}

// ---------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------

fn exit_after(payload: &[u8]) -> (Result<(), ProtocolError>, Vec<ClientEvent>) {
    let mut c = started(Instant::now());
    feed_client(&mut c, &chunk(b'X', payload))
}

#[test]
fn client_parses_x_like_atoi() {
    for (payload, code, status) in [
        (&b""[..], 0, 0),
        (b" 7x", 7, 7),
        (b"42", 42, 42),
        (b"0\n", 0, 0),
        (b"898\n", 898, 130),
        (b"899\n", 899, 131),
        (b"-1\n", -1, 255),
        (b"300", 300, 44),
        (b"junk", 0, 0),
    ] {
        assert_eq!(
            exit_after(payload),
            (Ok(()), vec![ClientEvent::Exit(code)]),
            "{payload:?}"
        );
        assert_eq!(exit::status(code), status);
    }
}

#[test]
fn client_parses_only_the_first_2047_bytes_of_a_long_x() {
    // "7" and then 5000 bytes of junk: 7, and no need to wait for the junk.
    let mut payload = b"7".to_vec();
    payload.extend(std::iter::repeat_n(b'z', 5000));
    let wire = chunk(b'X', &payload);
    let mut c = started(Instant::now());
    let (r, events) = feed_client(&mut c, &wire[..5 + 2047]);
    assert_eq!((r, events), (Ok(()), vec![ClientEvent::Exit(7)]));
    assert_eq!(feed_client(&mut c, &wire[5 + 2047..]), (Ok(()), vec![]));

    // Digits past byte 2047 are not read: 2047 spaces then "5" is 0.
    let mut payload = vec![b' '; 2047];
    payload.push(b'5');
    assert_eq!(exit_after(&payload), (Ok(()), vec![ClientEvent::Exit(0)]));

    // One byte short of 2047 is not yet an exit.
    let mut c = started(Instant::now());
    let wire = chunk(b'X', &[b'1'; 3000]);
    assert_eq!(feed_client(&mut c, &wire[..5 + 2046]), (Ok(()), vec![]));
    assert_eq!(c.exit_code(), None);
}

#[test]
fn client_rejects_types_a_server_never_sends() {
    for ty in [b'Z', b'A', b'0', b'.', b'H', b'C', 0u8, b'h'] {
        let mut c = started(Instant::now());
        let mut wire = chunk(b'1', b"out\n");
        wire.extend(chunk(ty, b"z"));
        wire.extend(chunk(b'X', b"0"));
        let (r, events) = feed_client(&mut c, &wire);
        assert_eq!(
            r,
            Err(ProtocolError::UnexpectedChunk {
                state: "running",
                ty: ChunkType(ty)
            })
        );
        assert_eq!(
            events,
            [ClientEvent::Stdout(b("out\n"))],
            "output before it is kept"
        );
        assert_eq!(c.exit_code(), None);
        assert_eq!(c.poll_timeout(), None, "the session is over");
        assert_eq!(feed_client(&mut c, &chunk(b'X', b"0")), (Ok(()), vec![]));
        assert_eq!(c.send_stdin(b"x", Instant::now()), StdinSend::Closed);
    }
}

#[test]
fn client_eof_before_x_is_an_error() {
    let mut c = started(Instant::now());
    let (r, _) = feed_client(&mut c, &hex("00 00 00 03 32 65 72"));
    assert_eq!(r, Ok(()));
    assert_eq!(c.handle_eof(), Err(ProtocolError::EofBeforeExit));
    assert_eq!(c.poll_timeout(), None);
    // Half an X is not an X either.
    let mut c = started(Instant::now());
    feed_client(&mut c, &hex("00 00 00 02 58 34")).0.unwrap();
    assert_eq!(c.handle_eof(), Err(ProtocolError::EofBeforeExit));
    // Nor is nothing at all.
    let mut c = started(Instant::now());
    assert_eq!(c.handle_eof(), Err(ProtocolError::EofBeforeExit));
}

#[test]
fn client_first_x_wins_and_later_bytes_are_ignored() {
    let mut c = started(Instant::now());
    let mut wire = chunk(b'X', b"1\n");
    wire.extend(chunk(b'X', b"2\n"));
    wire.extend(chunk(b'1', b"late"));
    wire.extend(chunk(b'Z', b""));
    wire.extend(hex("ff ff ff ff"));
    assert_eq!(
        feed_client(&mut c, &wire),
        (Ok(()), vec![ClientEvent::Exit(1)])
    );
    assert_eq!(feed_client(&mut c, &chunk(b'X', b"3")), (Ok(()), vec![]));
    assert_eq!(c.exit_code(), Some(1));
    // The older JDKs' second X with just "\n".
    let mut c = started(Instant::now());
    let mut wire = chunk(b'X', b"5");
    wire.extend(chunk(b'X', b"\n"));
    assert_eq!(
        feed_client(&mut c, &wire),
        (Ok(()), vec![ClientEvent::Exit(5)])
    );
    assert_eq!(c.exit_code(), Some(5));
}

#[test]
fn client_s_grants_one_credit_and_two_s_still_one() {
    let now = Instant::now();
    let mut c = started(now);
    assert!(!c.has_stdin_credit());
    let two_s = hex("00 00 00 00 53  00 00 00 00 53");
    assert_eq!(
        feed_client(&mut c, &two_s),
        (Ok(()), vec![ClientEvent::StdinRequested])
    );
    assert!(c.has_stdin_credit());
    assert_eq!(c.send_stdin(b"a", now), StdinSend::Sent);
    assert_eq!(c.send_stdin(b"b", now), StdinSend::NoCredit);
    assert_eq!(c.send_stdin_eof(now), StdinSend::NoCredit);
    assert_eq!(&c.take_transmit()[..], &hex("00 00 00 01 30 61")[..]);
    // An S with a payload still grants credit; the payload is skipped.
    assert_eq!(
        feed_client(&mut c, &hex("00 00 00 02 53 7a 7a  00 00 00 01 31 6f")),
        (
            Ok(()),
            vec![ClientEvent::StdinRequested, ClientEvent::Stdout(b("o"))]
        )
    );
    assert_eq!(c.send_stdin_eof(now), StdinSend::Sent);
    assert_eq!(&c.take_transmit()[..], &hex("00 00 00 00 2e")[..]);
    // After `.`, S grants nothing.
    assert_eq!(
        feed_client(&mut c, &hex("00 00 00 00 53")),
        (Ok(()), vec![])
    );
    assert!(!c.has_stdin_credit());
    assert_eq!(c.send_stdin(b"x", now), StdinSend::Closed);
}

#[test]
fn client_sends_no_stdin_without_credit() {
    let now = Instant::now();
    let mut c = ClientSession::new(ClientConfig::default(), now);
    assert_eq!(
        c.send_stdin(b"x", now),
        StdinSend::Closed,
        "before the header"
    );
    let mut c = started(now);
    assert_eq!(c.send_stdin(b"x", now), StdinSend::NoCredit);
    assert_eq!(c.send_stdin_eof(now), StdinSend::NoCredit);
    assert!(!c.has_transmit());
    // Output does not grant credit.
    feed_client(&mut c, &hex("00 00 00 01 31 61  00 00 00 01 32 62"))
        .0
        .unwrap();
    assert_eq!(c.send_stdin(b"x", now), StdinSend::NoCredit);
    // After the exit, no stdin even with credit.
    feed_client(&mut c, &hex("00 00 00 00 53")).0.unwrap();
    feed_client(&mut c, &hex("00 00 00 01 58 30")).0.unwrap();
    assert_eq!(c.send_stdin(b"x", now), StdinSend::Closed);
    assert!(!c.has_transmit());
}

#[test]
fn client_heartbeat_is_due_after_the_interval_and_not_before() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut c = ClientSession::new(ClientConfig::default(), t0);
    c.handle_timeout(t0 + ms(5000));
    assert!(!c.has_transmit(), "no heartbeat before the header");
    let mut c = started(t0);
    assert_eq!(c.poll_timeout(), Some(t0 + ms(500)));
    c.handle_timeout(t0 + ms(499));
    assert!(!c.has_transmit());
    c.handle_timeout(t0 + ms(500));
    assert_eq!(&c.take_transmit()[..], &hex("00 00 00 00 48")[..]);
    assert_eq!(c.poll_timeout(), Some(t0 + ms(1000)));
    c.handle_timeout(t0 + ms(999));
    assert!(!c.has_transmit());
    // Sending stdin counts as sending: it moves the deadline.
    feed_client(&mut c, &hex("00 00 00 00 53")).0.unwrap();
    assert_eq!(c.send_stdin(b"x", t0 + ms(900)), StdinSend::Sent);
    c.take_transmit();
    assert_eq!(c.poll_timeout(), Some(t0 + ms(1400)));
    c.handle_timeout(t0 + ms(1000));
    assert!(!c.has_transmit());
    // Late by a lot: still one H.
    c.handle_timeout(t0 + ms(9000));
    assert_eq!(&c.take_transmit()[..], &hex("00 00 00 00 48")[..]);
    // No heartbeat after the exit.
    feed_client(&mut c, &hex("00 00 00 01 58 30")).0.unwrap();
    assert_eq!(c.poll_timeout(), None);
    c.handle_timeout(t0 + ms(99_000));
    assert!(!c.has_transmit());
}

#[test]
fn client_header_puts_file_arguments_in_place() {
    let now = Instant::now();
    let config = ClientConfig {
        long_arg_piece: 2,
        ..ClientConfig::default()
    };
    let mut c = ClientSession::new(config, now);
    c.send_header(
        &Header {
            command: b"c".to_vec(),
            args: vec![
                HeaderArg::Plain(b"a".to_vec()),
                HeaderArg::File(b"xyz".to_vec()),
                HeaderArg::File(Vec::new()),
                HeaderArg::Plain(Vec::new()),
            ],
            env: vec![b"K=v".to_vec()],
            cwd: b"/".to_vec(),
        },
        now,
    );
    let want = "00 00 00 01 41 61
                00 00 00 02 4c 78 79  00 00 00 01 4c 7a  00 00 00 00 4c
                00 00 00 00 4c
                00 00 00 00 41
                00 00 00 03 45 4b 3d 76
                00 00 00 01 44 2f
                00 00 00 01 43 63";
    assert_eq!(&c.take_transmit()[..], &hex(want)[..]);
}

#[test]
fn client_streams_output_and_skips_empty_chunks() {
    let mut c = started(Instant::now());
    let wire = hex("00 00 00 00 31  00 00 00 00 32  00 00 00 04 31 61 62 63 64");
    // The first 7 bytes of the stdout payload's chunk: two bytes of data so far.
    let (r, events) = feed_client(&mut c, &wire[..17]);
    assert_eq!((r, events), (Ok(()), vec![ClientEvent::Stdout(b("ab"))]));
    let (r, events) = feed_client(&mut c, &wire[17..]);
    assert_eq!((r, events), (Ok(()), vec![ClientEvent::Stdout(b("cd"))]));
}

#[test]
fn client_streams_a_chunk_announced_larger_than_any_buffer() {
    // The client never buffers a whole output chunk, so even 2^32 - 1 is streamed.
    let mut c = started(Instant::now());
    let (r, events) = feed_client(&mut c, &hex("ff ff ff ff 31 61 62"));
    assert_eq!((r, events), (Ok(()), vec![ClientEvent::Stdout(b("ab"))]));
}
