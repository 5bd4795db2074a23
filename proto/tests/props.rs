//! Property tests for `ng-proto` (proptest).
//!
//! * The codec: `decode(encode(c)) == c` for any chunk and any sequence of chunks; on any
//!   bytes the decoder never panics and takes exactly one whole chunk (which re-encodes to
//!   the bytes taken) or nothing, in agreement with `bytes_needed`.
//! * The sessions: random step sequences (peer bytes, whole and cut chunks, local actions,
//!   time passing, end of file) run through the harnesses of `common/steps.rs`, which check
//!   every step against a reference model and the protocol invariants: at most one `Launch`,
//!   never two outstanding `S`, exactly one `X` and nothing after it, only `1 2 S X` from the
//!   server, a heartbeat deadline while running; on the client no stdin without an unspent
//!   `S`, at most one chunk per `S`, nothing but `H` after `.`, the first `X` wins.
//! * The two sides agree: any header a [`ClientSession`] sends, a [`ServerSession`] parses
//!   into the same request.

mod common;

use bytes::{Bytes, BytesMut};
use common::steps::{
    check_decode_once, client_config, server_config, ClientHarness, ClientStep, ServerHarness,
    ServerStep,
};
use ng_proto::codec::to_bytes;
use ng_proto::{
    exit, Chunk, ChunkType, ClientConfig, ClientSession, Decoder, Header, HeaderArg, Limits,
    ServerConfig, ServerEvent, ServerSession,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use std::time::Instant;

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..max)
}

/// Payloads that often hold `=`, for environment entries.
fn env_like() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![vec(select(b"ab=\0\xff".to_vec()), 0..8), bytes(8),]
}

fn limits() -> impl Strategy<Value = Limits> {
    select(vec![0, 1, 8, 64, Limits::DEFAULT_MAX_CHUNK_LEN, u32::MAX])
        .prop_map(|max_chunk_len| Limits { max_chunk_len })
}

/// A client-to-server chunk: mostly the types a client sends, sometimes anything.
fn client_chunk() -> impl Strategy<Value = (u8, Vec<u8>)> {
    prop_oneof![
        6 => (select(b"AEDCL0.H".to_vec()), bytes(12)),
        2 => (Just(b'E'), env_like()),
        3 => (select(b"0.HL".to_vec()), Just(Vec::new())),
        1 => (any::<u8>(), bytes(12)),
    ]
}

/// A server-to-client chunk: mostly `1 2 S`, sometimes `X` or anything.
fn server_chunk() -> impl Strategy<Value = (u8, Vec<u8>)> {
    prop_oneof![
        4 => (select(b"12".to_vec()), bytes(16)),
        4 => (Just(b'S'), prop_oneof![4 => Just(Vec::new()), 1 => bytes(4)]),
        1 => (Just(b'X'), prop_oneof![select(vec![b"0\n".to_vec(), b" 7x".to_vec(), b"-1".to_vec()]), bytes(6)]),
        1 => (any::<u8>(), bytes(6)),
    ]
}

/// One chunk's bytes cut into two reads.
fn cut_chunk(
    chunk: impl Strategy<Value = (u8, Vec<u8>)>,
) -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    (chunk, any::<prop::sample::Index>()).prop_map(|((ty, payload), at)| {
        let wire = to_bytes(ChunkType(ty), &payload).to_vec();
        let k = at.index(wire.len() + 1);
        (wire[..k].to_vec(), wire[k..].to_vec())
    })
}

fn server_steps() -> impl Strategy<Value = Vec<ServerStep>> {
    let group = prop_oneof![
        8 => client_chunk().prop_map(|(t, p)| vec![ServerStep::Chunk(t, p)]),
        3 => cut_chunk(client_chunk()).prop_map(|(a, b)| vec![ServerStep::Bytes(a), ServerStep::Bytes(b)]),
        1 => bytes(10).prop_map(|b| vec![ServerStep::Bytes(b)]),
        4 => Just(vec![ServerStep::RequestStdin]),
        2 => bytes(20).prop_map(|b| vec![ServerStep::Stdout(b)]),
        1 => bytes(20).prop_map(|b| vec![ServerStep::Stderr(b)]),
        1 => any::<i32>().prop_map(|c| vec![ServerStep::Exit(c)]),
        3 => prop_oneof![0u32..2_000, 0u32..25_000].prop_map(|ms| vec![ServerStep::Advance(ms)]),
        1 => Just(vec![ServerStep::Eof]),
        2 => (0usize..40).prop_map(|n| vec![ServerStep::Written(n)]),
    ];
    vec(group, 0..40).prop_map(|groups| groups.concat())
}

fn header() -> impl Strategy<Value = Header> {
    let arg = prop_oneof![
        3 => bytes(8).prop_map(HeaderArg::Plain),
        1 => bytes(10).prop_map(HeaderArg::File),
    ];
    (bytes(8), vec(arg, 0..4), vec(env_like(), 0..4), bytes(8)).prop_map(
        |(command, args, env, cwd)| Header {
            command,
            args,
            env,
            cwd,
        },
    )
}

fn client_steps() -> impl Strategy<Value = Vec<ClientStep>> {
    let group = prop_oneof![
        1 => header().prop_map(|h| vec![ClientStep::SendHeader(h)]),
        8 => server_chunk().prop_map(|(t, p)| vec![ClientStep::Chunk(t, p)]),
        3 => cut_chunk(server_chunk()).prop_map(|(a, b)| vec![ClientStep::Bytes(a), ClientStep::Bytes(b)]),
        1 => bytes(10).prop_map(|b| vec![ClientStep::Bytes(b)]),
        4 => bytes(8).prop_map(|b| vec![ClientStep::SendStdin(b)]),
        1 => Just(vec![ClientStep::SendEof]),
        3 => (0u32..1_200).prop_map(|ms| vec![ClientStep::Advance(ms)]),
        1 => Just(vec![ClientStep::Eof]),
    ];
    // Most runs start by sending the header, as a real client does.
    (prop::option::weighted(0.9, header()), vec(group, 0..40)).prop_map(|(first, groups)| {
        first
            .map(ClientStep::SendHeader)
            .into_iter()
            .chain(groups.concat())
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn decode_of_encode_is_identity(ty in any::<u8>(), payload in bytes(300)) {
        let mut buf = to_bytes(ChunkType(ty), &payload);
        let chunk = Decoder::default().decode(&mut buf).unwrap().unwrap();
        prop_assert_eq!(chunk, Chunk::new(ChunkType(ty), payload));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn decode_of_encoded_sequence_is_identity(chunks in vec((any::<u8>(), bytes(40)), 0..20)) {
        let mut buf = BytesMut::new();
        for (ty, p) in &chunks {
            ng_proto::codec::encode(ChunkType(*ty), p, &mut buf);
        }
        let mut d = Decoder::default();
        let mut got = Vec::new();
        while let Some(c) = d.decode(&mut buf).unwrap() {
            got.push((c.ty.0, c.payload.to_vec()));
        }
        prop_assert_eq!(got, chunks);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn decoder_takes_one_whole_chunk_or_nothing(limits in limits(), data in bytes(48)) {
        let mut buf = BytesMut::from(&data[..]);
        let _ = check_decode_once(limits, &mut buf);
    }

    #[test]
    fn decoder_on_chunk_like_bytes(
        limits in limits(),
        len in prop_oneof![0u32..16, any::<u32>()],
        ty in any::<u8>(),
        rest in bytes(24),
    ) {
        // A plausible header, so that the whole-chunk path is taken often; then keep
        // decoding until the buffer runs dry or breaks.
        let mut data = len.to_be_bytes().to_vec();
        data.push(ty);
        data.extend_from_slice(&rest);
        let mut buf = BytesMut::from(&data[..]);
        while let Ok(Some(_)) = check_decode_once(limits, &mut buf) {}
    }

    #[test]
    fn exit_code_format_parses_back(code in any::<i32>()) {
        prop_assert_eq!(exit::parse(&exit::format(code)), code);
    }

    #[test]
    fn server_session_follows_the_model(flags in any::<u8>(), steps in server_steps()) {
        ServerHarness::run(server_config(flags), &steps);
    }

    #[test]
    fn client_session_follows_the_model(flags in any::<u8>(), steps in client_steps()) {
        ClientHarness::run(client_config(flags), &steps);
    }

    #[test]
    fn server_parses_what_the_client_sends(header in header(), piece in 1usize..4) {
        let now = Instant::now();
        let mut c = ClientSession::new(ClientConfig { long_arg_piece: piece, ..ClientConfig::default() }, now);
        c.send_header(&header, now);
        let mut wire = c.take_transmit();
        let mut s = ServerSession::new(ServerConfig::default(), now);
        s.handle_bytes(&mut wire, now).unwrap();
        prop_assert!(wire.is_empty());
        let Some(ServerEvent::Launch(req)) = s.poll_event() else {
            panic!("no launch");
        };
        let args: Vec<Bytes> = header.args.iter().map(|a| match a {
            HeaderArg::Plain(b) | HeaderArg::File(b) => Bytes::from(b.clone()),
        }).collect();
        prop_assert_eq!(req.args, args);
        let valid: Vec<(Bytes, Bytes)> = header.env.iter().filter_map(|e| {
            let eq = e.iter().position(|&b| b == b'=')?;
            (eq > 0).then(|| (Bytes::from(e[..eq].to_vec()), Bytes::from(e[eq + 1..].to_vec())))
        }).collect();
        prop_assert_eq!(req.skipped_env, header.env.len() - valid.len());
        prop_assert_eq!(req.env, valid);
        prop_assert_eq!(req.cwd, Some(Bytes::from(header.cwd.clone())));
        prop_assert_eq!(req.command, Bytes::from(header.command.clone()));
    }
}
