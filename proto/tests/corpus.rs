//! The fuzz targets' seed corpus (`fuzz/corpus/<target>/seed-*`), generated from the golden
//! vectors and transcripts in `data/`, must be up to date, and every seed must pass its
//! target's checks.
//!
//! To regenerate the seeds after changing the data or the program encoding:
//!
//! ```text
//! NG_BLESS_CORPUS=1 cargo test -p ng-proto --test corpus
//! ```
//!
//! Only `seed-*` files are managed here; whatever `fuzz/run-long` adds beside them is left
//! alone.

mod common;

use bytes::BytesMut;
use common::steps::{
    check_decode_once, decode_client_program, decode_server_program, encode_client_program,
    encode_server_program, ClientHarness, ClientStep, ServerHarness, ServerStep,
};
use common::{decode_all, header_of, parse_vectors, read_data, Dir, Transcript, TRANSCRIPTS};
use ng_proto::{ChunkType, Limits};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The server program that replays a transcript (see `replay_server`).
fn server_program(t: &Transcript) -> Vec<ServerStep> {
    let mut steps = Vec::new();
    for seg in &t.segments {
        match seg.dir {
            Dir::ToServer => steps.push(ServerStep::Bytes(seg.bytes.clone())),
            Dir::ToClient => {
                for c in decode_all(&seg.bytes) {
                    steps.push(match c.ty {
                        ChunkType::SEND_INPUT => ServerStep::RequestStdin,
                        ChunkType::STDOUT => ServerStep::Stdout(c.payload.to_vec()),
                        ChunkType::STDERR => ServerStep::Stderr(c.payload.to_vec()),
                        _ => ServerStep::Exit(ng_proto::exit::parse(&c.payload)),
                    });
                }
                steps.push(ServerStep::Written(255));
            }
        }
    }
    steps.push(ServerStep::Eof);
    steps
}

/// The client program that replays a transcript (see `replay_client`).
fn client_program(t: &Transcript) -> Vec<ClientStep> {
    let mut steps = Vec::new();
    let mut header = Vec::new();
    let mut sent = false;
    for seg in &t.segments {
        match seg.dir {
            Dir::ToClient => steps.push(ClientStep::Bytes(seg.bytes.clone())),
            Dir::ToServer => {
                for c in decode_all(&seg.bytes) {
                    if !sent {
                        sent = c.ty == ChunkType::COMMAND;
                        header.push(c);
                        if sent {
                            steps.push(ClientStep::SendHeader(header_of(&header)));
                        }
                        continue;
                    }
                    steps.push(match c.ty {
                        ChunkType::STDIN => ClientStep::SendStdin(c.payload.to_vec()),
                        ChunkType::STDIN_EOF => ClientStep::SendEof,
                        _ => ClientStep::Advance(500),
                    });
                }
            }
        }
    }
    steps.push(ClientStep::Eof);
    steps
}

/// Every seed, by target and file name.
fn seeds() -> BTreeMap<(&'static str, String), Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stream = vec![0];
    for v in parse_vectors(&read_data("chunks.hex")) {
        stream.extend_from_slice(&v.wire);
    }
    out.insert(("decode", "seed-chunks".to_owned()), stream);
    for name in TRANSCRIPTS {
        let t = Transcript::load(name);
        for (dir, tag) in [(Dir::ToServer, "c2s"), (Dir::ToClient, "s2c")] {
            let mut input = vec![0];
            input.extend(t.bytes(dir));
            out.insert(("decode", format!("seed-{name}-{tag}")), input);
        }
        let program = encode_server_program(0, &server_program(&t));
        out.insert(("server_session", format!("seed-{name}")), program);
        let program = encode_client_program(0, &client_program(&t));
        out.insert(("client_session", format!("seed-{name}")), program);
    }
    // Small limits and timeouts, so the fuzzer starts near the error paths.
    let t = Transcript::load("capture-6.2-echo");
    let mut steps = server_program(&t);
    steps.insert(1, ServerStep::Advance(12_000));
    out.insert(
        (
            "server_session",
            "seed-small-limits-heartbeat-timeout".to_owned(),
        ),
        encode_server_program(0b1_0011, &steps),
    );
    let mut decode_small = vec![1];
    decode_small.extend(common::hex("00 00 00 01 41 61  00 00 00 41 41"));
    out.insert(("decode", "seed-over-limit".to_owned()), decode_small);
    out.insert(
        ("client_session", "seed-small-pieces".to_owned()),
        encode_client_program(1, &client_program(&Transcript::load("peer-args"))),
    );
    out
}

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

#[test]
fn fuzz_seed_corpus_is_up_to_date() {
    let seeds = seeds();
    let bless = std::env::var_os("NG_BLESS_CORPUS").is_some();
    let mut stale = Vec::new();
    for target in ["decode", "server_session", "client_session"] {
        let dir = corpus_dir(target);
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
        }
        let on_disk: Vec<String> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("seed-"))
                    .collect()
            })
            .unwrap_or_default();
        for name in on_disk {
            if !seeds.contains_key(&(target, name.clone())) {
                if bless {
                    std::fs::remove_file(dir.join(&name)).unwrap();
                } else {
                    stale.push(format!("{target}/{name} (not generated)"));
                }
            }
        }
    }
    for ((target, name), bytes) in &seeds {
        let path = corpus_dir(target).join(name);
        if bless {
            std::fs::write(&path, bytes).unwrap();
        } else if std::fs::read(&path).ok().as_ref() != Some(bytes) {
            stale.push(format!("{target}/{name}"));
        }
    }
    assert!(
        stale.is_empty(),
        "fuzz seed corpus out of date (run NG_BLESS_CORPUS=1 cargo test -p ng-proto --test corpus): {stale:?}"
    );
}

#[test]
fn every_seed_passes_its_target() {
    for ((target, name), bytes) in seeds() {
        match target {
            "decode" => {
                let limits = Limits {
                    max_chunk_len: if bytes[0] % 4 == 1 {
                        64
                    } else {
                        Limits::DEFAULT_MAX_CHUNK_LEN
                    },
                };
                let mut buf = BytesMut::from(&bytes[1..]);
                while let Ok(Some(_)) = check_decode_once(limits, &mut buf) {}
            }
            "server_session" => {
                let (config, steps) = decode_server_program(&bytes);
                ServerHarness::run(config, &steps);
            }
            _ => {
                let (config, steps) = decode_client_program(&bytes);
                ClientHarness::run(config, &steps);
            }
        }
        let _ = name;
    }
}

#[test]
fn programs_round_trip_through_their_encoding() {
    let t = Transcript::load("capture-6.2-echo");
    let steps = server_program(&t);
    let (_, decoded) = decode_server_program(&encode_server_program(0, &steps));
    assert_eq!(decoded, steps);
    let steps = client_program(&t);
    let (_, decoded) = decode_client_program(&encode_client_program(0, &steps));
    assert_eq!(decoded, steps);
}
