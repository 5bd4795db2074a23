//! Split invariance: however the bytes are cut into reads, the decoder and both session
//! machines must do exactly what they do with the bytes in one piece.
//!
//! Every golden vector, every transcript segment and a set of failure streams is fed at
//! every split point and one byte at a time. For the decoder the chunks must be the same; for
//! [`ServerSession`] the events (and in which segment they came), errors and bytes sent; for
//! [`ClientSession`] the same, with streamed stdout/stderr pieces joined before comparing.

mod common;

use bytes::BytesMut;
use common::{
    bytewise, hex, parse_vectors, read_data, replay_client, replay_server, split_at, whole, Dir,
    Transcript, TRANSCRIPTS,
};
use ng_proto::{
    Chunk, ClientConfig, ClientEvent, ClientSession, DecodeError, Decoder, Header, Limits,
    ProtocolError, ServerConfig, ServerEvent, ServerSession,
};
use std::time::Instant;

/// Decodes `bytes` fed in `pieces`; returns the chunks and the first error.
fn decode_pieces(pieces: &[&[u8]], limits: Limits) -> (Vec<Chunk>, Option<DecodeError>) {
    let mut d = Decoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match d.decode(&mut buf) {
                Ok(Some(c)) => out.push(c),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

/// Every way to cut `bytes` once, and one byte at a time.
fn cuts(bytes: &[u8]) -> Vec<Vec<&[u8]>> {
    let mut all: Vec<Vec<&[u8]>> = (0..=bytes.len())
        .map(|k| vec![&bytes[..k], &bytes[k..]])
        .collect();
    all.push(bytes.chunks(1).collect());
    all
}

#[test]
fn decoder_chunk_vectors_at_every_split() {
    for v in parse_vectors(&read_data("chunks.hex")) {
        for pieces in cuts(&v.wire) {
            let (chunks, err) = decode_pieces(&pieces, Limits::default());
            assert_eq!(err, None, "line {}", v.line);
            assert_eq!(
                chunks,
                [Chunk::new(v.ty, v.payload.clone())],
                "line {}",
                v.line
            );
        }
    }
}

#[test]
fn decoder_chunk_table_as_one_stream_at_every_split() {
    let vectors = parse_vectors(&read_data("chunks.hex"));
    let stream: Vec<u8> = vectors.iter().flat_map(|v| v.wire.clone()).collect();
    let (want, err) = decode_pieces(&[&stream], Limits::default());
    assert_eq!((want.len(), err), (vectors.len(), None));
    for pieces in cuts(&stream) {
        assert_eq!(
            decode_pieces(&pieces, Limits::default()),
            (want.clone(), None)
        );
    }
}

#[test]
fn decoder_transcripts_at_every_split() {
    for name in TRANSCRIPTS {
        let t = Transcript::load(name);
        for dir in [Dir::ToServer, Dir::ToClient] {
            let stream = t.bytes(dir);
            let want = decode_pieces(&[&stream], Limits::default());
            assert_eq!(want.1, None);
            for pieces in cuts(&stream) {
                assert!(decode_pieces(&pieces, Limits::default()) == want, "{name}");
            }
        }
    }
}

#[test]
fn decoder_over_limit_header_fails_at_its_fifth_byte_whatever_the_split() {
    let limits = Limits { max_chunk_len: 16 };
    for stream in [
        hex("00 00 00 01 41 61  00 00 00 11 41 61 62"),
        hex("00 00 00 01 41 61  80 00 00 00 41"),
        hex("00 00 00 01 41 61  ff ff ff ff 30"),
    ] {
        let want = decode_pieces(&[&stream], limits);
        assert_eq!(want.0.len(), 1);
        assert!(want.1.is_some());
        for pieces in cuts(&stream) {
            assert_eq!(decode_pieces(&pieces, limits), want);
        }
        // Before its fifth byte, the bad header is just incomplete.
        assert_eq!(
            decode_pieces(&[&stream[..10]], limits),
            (want.0.clone(), None)
        );
    }
}

#[test]
fn server_transcripts_at_every_split() {
    for name in TRANSCRIPTS {
        let t = Transcript::load(name);
        let want = replay_server(&t, ServerConfig::default(), &whole);
        assert_eq!(
            replay_server(&t, ServerConfig::default(), &bytewise),
            want,
            "{name}"
        );
        for (i, seg) in t.segments.iter().enumerate() {
            if seg.dir != Dir::ToServer {
                continue;
            }
            for k in 0..=seg.bytes.len() {
                let got = replay_server(&t, ServerConfig::default(), &split_at(i, k));
                assert!(got == want, "{name}: segment {i} cut at {k}");
            }
        }
    }
}

#[test]
fn client_transcripts_at_every_split() {
    for name in TRANSCRIPTS {
        let t = Transcript::load(name);
        let want = replay_client(&t, &whole);
        assert_eq!(replay_client(&t, &bytewise), want, "{name}");
        for (i, seg) in t.segments.iter().enumerate() {
            if seg.dir != Dir::ToClient {
                continue;
            }
            for k in 0..=seg.bytes.len() {
                let got = replay_client(&t, &split_at(i, k));
                assert!(got == want, "{name}: segment {i} cut at {k}");
            }
        }
    }
}

/// Feeds a server session `pieces`; returns its events and first error.
fn server_pieces(
    config: ServerConfig,
    pieces: &[&[u8]],
) -> (Vec<ServerEvent>, Option<ProtocolError>) {
    let now = Instant::now();
    let mut s = ServerSession::new(config, now);
    let mut buf = BytesMut::new();
    let mut events = Vec::new();
    let mut error = None;
    for piece in pieces {
        buf.extend_from_slice(piece);
        if let Err(e) = s.handle_bytes(&mut buf, now) {
            error.get_or_insert(e);
        }
        events.extend(std::iter::from_fn(|| s.poll_event()));
    }
    (events, error)
}

/// Streams that exercise the header rules and every server-side error.
fn server_streams() -> Vec<(ServerConfig, Vec<u8>)> {
    let small = ServerConfig {
        limits: Limits { max_chunk_len: 16 },
        max_header_bytes: 80,
        ..ServerConfig::default()
    };
    let tiny_chunks = ServerConfig {
        limits: Limits { max_chunk_len: 16 },
        ..ServerConfig::default()
    };
    let header_zoo = "00 00 00 01 5a 7a  00 00 00 00 48  00 00 00 02 4c 61 62  00 00 00 00 48
                      00 00 00 01 4c 63  00 00 00 00 4c  00 00 00 08 45 4e 4f 45 51 55 41 4c 53
                      00 00 00 02 45 3d 78  00 00 00 05 45 41 3d 62 3d 63  00 00 00 01 4c 64
                      00 00 00 01 41 65  00 00 00 02 44 2f 61  00 00 00 01 43 63";
    let running = format!("{header_zoo} 00 00 00 02 30 68 69  00 00 00 00 48  00 00 00 00 30");
    [
        (ServerConfig::default(), header_zoo.to_owned()),
        (ServerConfig::default(), format!("{running} 00 00 00 00 2e")),
        (
            ServerConfig::default(),
            format!("{running} 00 00 00 00 2e 00 00 00 01 30 78"),
        ),
        (
            ServerConfig::default(),
            format!("{running} 00 00 00 01 5a 7a 00 00 00 00 2e"),
        ),
        (
            ServerConfig::default(),
            format!("{running} 00 00 00 01 41 7a"),
        ),
        (tiny_chunks, format!("{running} 00 00 00 11 30")),
        (
            small,
            "00 00 00 10 41 61 61 61 61 61 61 61 61 61 61 61 61 61 61 61 61
                 00 00 00 10 41 61 61 61 61 61 61 61 61 61 61 61 61 61 61 61 61
                 00 00 00 10 41 61 61 61 61 61 61 61 61 61 61 61 61 61 61 61 61"
                .to_owned(),
        ),
        (small, "00 00 00 01 41 61  ff ff ff ff 43".to_owned()),
    ]
    .into_iter()
    .map(|(c, s)| (c, hex(&s)))
    .collect()
}

#[test]
fn server_header_rules_and_errors_at_every_split() {
    for (config, stream) in server_streams() {
        let want = server_pieces(config, &[&stream]);
        for pieces in cuts(&stream) {
            assert_eq!(server_pieces(config, &pieces), want, "{:02x?}", stream);
        }
    }
    // And the streams say what they are meant to.
    let outcomes: Vec<_> = server_streams()
        .into_iter()
        .map(|(c, s)| server_pieces(c, &[&s]))
        .collect();
    let ServerEvent::Launch(req) = &outcomes[0].0[0] else {
        panic!()
    };
    assert_eq!(req.args, ["abc", "d", "e"]);
    assert_eq!(req.skipped_env, 2);
    assert_eq!(outcomes[1].1, None);
    assert_eq!(outcomes[2].1, Some(ProtocolError::StdinAfterEof));
    assert!(matches!(
        outcomes[3].1,
        Some(ProtocolError::UnexpectedChunk { .. })
    ));
    assert!(matches!(
        outcomes[4].1,
        Some(ProtocolError::UnexpectedChunk { .. })
    ));
    assert!(matches!(outcomes[5].1, Some(ProtocolError::Decode(_))));
    assert!(matches!(
        outcomes[6].1,
        Some(ProtocolError::HeaderTooLarge { .. })
    ));
    assert!(matches!(outcomes[7].1, Some(ProtocolError::Decode(_))));
}

/// Feeds a started client session `pieces`; returns its joined events and first error.
fn client_pieces(pieces: &[&[u8]]) -> (Vec<ClientEvent>, Option<ProtocolError>) {
    let now = Instant::now();
    let mut c = ClientSession::new(ClientConfig::default(), now);
    c.send_header(&Header::default(), now);
    let mut buf = BytesMut::new();
    let mut events = Vec::new();
    let mut error = None;
    for piece in pieces {
        buf.extend_from_slice(piece);
        if let Err(e) = c.handle_bytes(&mut buf) {
            error.get_or_insert(e);
        }
        events.extend(std::iter::from_fn(|| c.poll_event()));
    }
    (common::normalize(events), error)
}

#[test]
fn client_rules_and_errors_at_every_split() {
    let mut long_x = hex("00 00 0b b8 58 20 34 32");
    long_x.extend(std::iter::repeat_n(b'z', 2997));
    let streams = [
        hex(
            "00 00 00 00 31  00 00 00 02 53 7a 7a  00 00 00 03 32 65 72 72  00 00 00 00 53
             00 00 00 04 31 6f 75 74 0a  00 00 00 03 58 37 78 0a  00 00 00 01 58 39",
        ),
        hex("00 00 00 02 31 61 62  00 00 00 01 5a 7a  00 00 00 01 58 30"),
        long_x,
    ];
    for stream in &streams {
        let want = client_pieces(&[stream]);
        for pieces in cuts(stream) {
            assert_eq!(client_pieces(&pieces), want, "{:02x?}", &stream[..20]);
        }
    }
    assert_eq!(
        client_pieces(&[&streams[0]]),
        (
            vec![
                ClientEvent::StdinRequested,
                ClientEvent::Stderr("err".into()),
                ClientEvent::Stdout("out\n".into()),
                ClientEvent::Exit(7)
            ],
            None
        )
    );
    assert!(client_pieces(&[&streams[1]]).1.is_some());
    assert_eq!(client_pieces(&[&streams[2]]).0, [ClientEvent::Exit(42)]);
}
