//! Whole recorded sessions between the real peers (`data/peer-*.hex`, see `data/README.md`)
//! and the `nailgun.md` §6 captures, replayed through both session machines.
//!
//! For each transcript: a [`ServerSession`] fed the client's bytes and driven by the actions
//! the reference server took must parse the request the header encodes and send the
//! reference server's bytes exactly, up to its first `X`; a [`ClientSession`] given the
//! header and stdin the reference client sent must send the same bytes, and make of the
//! server's bytes the output and exit code the reference client did.

mod common;

use bytes::Bytes;
use common::{
    decode_all, expected_client_bytes, expected_server_bytes, replay_client, replay_server, whole,
    Dir, Transcript, TRANSCRIPTS,
};
use ng_proto::{exit, ChunkType, ClientEvent, Request, ServerConfig, ServerEvent};

/// The request a header encodes, read by the rules of `nailgun.md` §2.1 and §8.5.
fn request_of(t: &Transcript) -> Request {
    let mut req = Request::default();
    let mut long: Option<Vec<u8>> = None;
    for c in decode_all(&t.segments[0].bytes) {
        if c.ty != ChunkType::LONG_ARG {
            if let Some(l) = long.take() {
                req.args.push(l.into());
            }
        }
        match c.ty {
            ChunkType::ARGUMENT => req.args.push(c.payload),
            ChunkType::LONG_ARG if c.payload.is_empty() => {
                req.args.push(long.take().unwrap_or_default().into())
            }
            ChunkType::LONG_ARG => long.get_or_insert_with(Vec::new).extend(&c.payload[..]),
            ChunkType::ENVIRONMENT => {
                let eq = c.payload.iter().position(|&b| b == b'=').unwrap();
                req.env
                    .push((c.payload.slice(..eq), c.payload.slice(eq + 1..)));
            }
            ChunkType::WORKING_DIR => req.cwd = Some(c.payload),
            ChunkType::COMMAND => {
                req.command = c.payload;
                return req;
            }
            ChunkType::HEARTBEAT => {}
            ty => panic!("{}: {ty:?} in the header", t.name),
        }
    }
    panic!("{}: no command", t.name)
}

/// What the reference client printed and exited with: the `1`/`2` payloads and the first `X`.
fn client_outcome(t: &Transcript) -> (Vec<u8>, Vec<u8>, i32) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    for c in decode_all(&t.bytes(Dir::ToClient)) {
        match c.ty {
            ChunkType::STDOUT => out.extend_from_slice(&c.payload),
            ChunkType::STDERR => err.extend_from_slice(&c.payload),
            ChunkType::EXIT => return (out, err, exit::parse(&c.payload)),
            _ => {}
        }
    }
    panic!("{}: no X", t.name)
}

#[test]
fn server_replays_every_transcript_byte_for_byte() {
    for name in TRANSCRIPTS {
        let t = Transcript::load(name);
        let r = replay_server(&t, ServerConfig::default(), &whole);
        assert_eq!(r.errors, [], "{name}");
        assert!(
            r.stdin_requests.iter().all(|&ok| ok),
            "{name}: an S was refused"
        );
        assert_eq!(r.sent, expected_server_bytes(&t), "{name}");
        let [(0, ServerEvent::Launch(req)), rest @ ..] = &r.events[..] else {
            panic!("{name}: {:?}", r.events)
        };
        assert_eq!(*req, request_of(&t), "{name}");
        // The stdin events are the client's `0` and `.` chunks, in order.
        let stdin: Vec<ServerEvent> = decode_all(&t.bytes(Dir::ToServer))
            .into_iter()
            .filter_map(|c| match c.ty {
                ChunkType::STDIN => Some(ServerEvent::Stdin(c.payload)),
                ChunkType::STDIN_EOF => Some(ServerEvent::StdinEof),
                _ => None,
            })
            .collect();
        let got: Vec<ServerEvent> = rest.iter().map(|(_, e)| e.clone()).collect();
        assert_eq!(got, stdin, "{name}");
    }
}

#[test]
fn client_replays_every_transcript_byte_for_byte() {
    for name in TRANSCRIPTS {
        let t = Transcript::load(name);
        let r = replay_client(&t, &whole);
        assert_eq!(r.error, None, "{name}");
        assert_eq!(r.sent, expected_client_bytes(&t), "{name}");
        let (out, err, code) = client_outcome(&t);
        assert_eq!(r.exit_code, Some(code), "{name}");
        let mut got_out = Vec::new();
        let mut got_err = Vec::new();
        for ev in &r.events {
            match ev {
                ClientEvent::Stdout(b) => got_out.extend_from_slice(b),
                ClientEvent::Stderr(b) => got_err.extend_from_slice(b),
                _ => {}
            }
        }
        assert_eq!((got_out, got_err), (out, err), "{name}");
        assert_eq!(r.events.last(), Some(&ClientEvent::Exit(code)), "{name}");
    }
}

#[test]
fn recordings_match_the_nailgun_md_captures() {
    for (capture, peer) in [
        ("capture-6.1-ng-version", "peer-ng-version"),
        ("capture-6.2-echo", "peer-echo-hi"),
    ] {
        let a = Transcript::load(capture);
        let b = Transcript::load(peer);
        let seg = |t: &Transcript| {
            t.segments
                .iter()
                .map(|s| (s.dir, s.bytes.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(seg(&a), seg(&b), "{capture} vs {peer}");
    }
}

#[test]
fn peer_args_long_argument_lands_in_place() {
    let t = Transcript::load("peer-args");
    let r = replay_server(&t, ServerConfig::default(), &whole);
    let ServerEvent::Launch(req) = &r.events[0].1 else {
        panic!()
    };
    let file: Vec<u8> = (0..2100u32).map(|i| ((i * 7) % 251) as u8).collect();
    let want: Vec<Bytes> = vec![
        "a1".into(),
        "".into(),
        "sp ace".into(),
        file.into(),
        "\u{fc}".as_bytes().to_vec().into(),
    ];
    assert_eq!(req.args, want);
    assert_eq!(req.env_var(b"EQ"), Some(&Bytes::from("a=b")));
    assert_eq!(req.env_var(b"EMPTY"), Some(&Bytes::new()));
    assert_eq!(req.env_var(b"LANG"), Some(&Bytes::from("C.UTF-8")));
    assert_eq!(req.skipped_env, 0);
    assert_eq!(req.command, "t.Args");
}

#[test]
fn peer_exit_42_first_x_wins() {
    let t = Transcript::load("peer-exit-42");
    let xs = decode_all(&t.bytes(Dir::ToClient))
        .into_iter()
        .filter(|c| c.ty == ChunkType::EXIT)
        .count();
    assert_eq!(xs, 2, "the 0.9.3 server sends X twice on System.exit");
    let r = replay_client(&t, &whole);
    assert_eq!(r.exit_code, Some(42));
    assert_eq!(
        r.events,
        [
            ClientEvent::Stdout("exiting\n".into()),
            ClientEvent::Exit(42)
        ]
    );
    // Our server sends one X and nothing after it.
    let r = replay_server(&t, ServerConfig::default(), &whole);
    let sent: Vec<u8> = r.sent.concat();
    assert!(sent.ends_with(b"\x00\x00\x00\x03X42\n"));
    assert_eq!(decode_all(&sent).len(), 2);
}

#[test]
fn peer_echo_5000_stdin_goes_one_chunk_per_s() {
    let t = Transcript::load("peer-echo-5000");
    let r = replay_client(&t, &whole);
    let requests = r
        .events
        .iter()
        .filter(|e| **e == ClientEvent::StdinRequested)
        .count();
    let sizes: Vec<usize> = decode_all(&t.bytes(Dir::ToServer))
        .iter()
        .filter(|c| c.ty == ChunkType::STDIN)
        .map(|c| c.payload.len())
        .collect();
    assert_eq!(sizes, [2048, 2048, 904]);
    // Three 0 and one . answer four S; the reference's prefetch S after the . is not there.
    assert_eq!(requests, 4);
}

#[test]
fn peer_sleep_heartbeats() {
    let t = Transcript::load("peer-sleep");
    let r = replay_client(&t, &whole);
    let sent = r.sent.concat();
    let hs = decode_all(&sent)
        .iter()
        .filter(|c| c.ty == ChunkType::HEARTBEAT)
        .count();
    assert_eq!(
        hs, 1,
        "one H while idle; the reference's H after X is not ours"
    );
    let recorded = decode_all(&t.bytes(Dir::ToServer))
        .iter()
        .filter(|c| c.ty == ChunkType::HEARTBEAT)
        .count();
    assert_eq!(recorded, 2);
}
