//! Stdin that a client sends before the worker asks for it reaches plugin commands intact.
//!
//! A Nailgun client may send its stdin eagerly, right after `C` and before any `S` (the
//! `nails` crate's client does). ngd holds it while the session waits for a worker and
//! while the worker has no credit, and hands it over one chunk per `S` (`docs/ngw.md` §7.3).
//! A raw client sends the header, stdin and `.` in one write (or in pieces), against the
//! fixture worker's in-process `cat` and fork-mode `fcat`, on both transports, with the
//! session bound at once or queued behind a busy worker.

use std::io::Write;
use std::time::Duration;

use ng_testkit::{read_chunk, Chunk, Stream};
use ng_tests::plugins::{Plugin, PluginServer};
use ng_tests::server::Address;
use ng_tests::{assert_bytes_eq, Transport};

/// What a raw session produced: stdout, stderr, exit code.
struct Outcome {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    code: String,
}

/// The header for `command` (no arguments, `/` as the directory).
fn header(command: &str) -> Vec<u8> {
    let mut bytes = Chunk::new(b'D', "/").encode();
    bytes.extend(Chunk::new(b'C', command).encode());
    bytes
}

/// Stdin `data` as `0` chunks of at most `piece` bytes, then `.`.
fn stdin(data: &[u8], piece: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for part in data.chunks(piece.max(1)) {
        bytes.extend(Chunk::new(b'0', part).encode());
    }
    bytes.extend(Chunk::new(b'.', "").encode());
    bytes
}

/// Sends `writes` one after the other (each in one `write`) from a thread of its own, while
/// reading to `X` and ignoring `S`: everything the client will ever send is sent unasked.
fn raw_session(address: &Address, writes: &[Vec<u8>]) -> Outcome {
    let mut stream = Stream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let writes = writes.to_vec();
    let sender = std::thread::spawn(move || {
        for w in writes {
            writer.write_all(&w).expect("send");
        }
    });
    let out = finish(&mut stream);
    sender.join().expect("the sender");
    out
}

fn finish(stream: &mut Stream) -> Outcome {
    let mut out = Outcome {
        stdout: Vec::new(),
        stderr: Vec::new(),
        code: String::new(),
    };
    loop {
        let chunk = read_chunk(stream)
            .expect("read")
            .expect("the server closed before X");
        match chunk.ty {
            b'1' => out.stdout.extend(&chunk.payload),
            b'2' => out.stderr.extend(&chunk.payload),
            b'S' => {}
            b'X' => {
                out.code = String::from_utf8_lossy(&chunk.payload).trim().to_owned();
                return out;
            }
            other => panic!("unexpected chunk {:?}", other as char),
        }
    }
}

/// Deterministic bytes, every value, `len` long.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 256) as u8).collect()
}

fn check(out: &Outcome, expected: &[u8]) {
    assert_eq!(
        out.code,
        "0",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_bytes_eq!(expected, &out.stdout);
}

fn server() -> PluginServer {
    PluginServer::start(vec![Plugin::worker::<&str>("w", &[])])
}

#[test]
fn eager_stdin_in_the_header_write_reaches_cat_and_fcat() {
    let server = server();
    let data = pattern(75);
    for transport in Transport::ALL {
        for command in ["cat", "fcat"] {
            let mut bytes = header(command);
            bytes.extend(stdin(&data, 2048));
            let out = raw_session(server.address(transport), &[bytes]);
            check(&out, &data);
        }
    }
}

#[test]
fn eager_stdin_in_several_writes_and_chunks_reaches_cat_and_fcat() {
    let server = server();
    // More than ngd holds before it stops reading the client (1 MiB).
    let data = pattern(3 << 20);
    for transport in Transport::ALL {
        for command in ["cat", "fcat"] {
            let body = stdin(&data, 1000);
            let (first, rest) = body.split_at(body.len() / 3);
            let out = raw_session(
                server.address(transport),
                &[header(command), first.to_vec(), rest.to_vec()],
            );
            check(&out, &data);
        }
    }
}

#[test]
fn only_end_of_stdin_before_any_request_ends_cat_and_fcat() {
    let server = server();
    for command in ["cat", "fcat"] {
        let mut bytes = header(command);
        bytes.extend(stdin(b"", 1));
        let out = raw_session(server.address(Transport::Unix), &[bytes]);
        check(&out, b"");
        // An empty `0` is no data, not the end.
        let mut bytes = header(command);
        bytes.extend(Chunk::new(b'0', "").encode());
        bytes.extend(stdin(b"after", 5));
        let out = raw_session(server.address(Transport::Unix), &[bytes]);
        check(&out, b"after");
    }
}

#[test]
fn eager_stdin_waits_in_the_queue_for_a_busy_worker() {
    let server = PluginServer::start(vec![Plugin::worker::<&str>("w", &[])
        .set("max_workers", 1)
        .set("min_workers", 1)]);
    for command in ["cat", "fcat"] {
        let address = server.address(Transport::Unix);
        // The only worker is busy with a session whose stdin stays open.
        let mut first = Stream::connect(address).expect("connect");
        first
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        first.write_all(&header(command)).unwrap();
        first
            .write_all(&Chunk::new(b'0', "first\n").encode())
            .unwrap();
        server.wait_plugin("w", Duration::from_secs(20), |r| {
            r.get("busy").and_then(|b| b.as_u64()) == Some(1)
        });
        // The second session queues with all its stdin already sent.
        let data = pattern(5000);
        let mut bytes = header(command);
        bytes.extend(stdin(&data, 512));
        let mut second = Stream::connect(address).expect("connect");
        second
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        second.write_all(&bytes).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let queued = server.plugin_report("w").expect("report");
        assert_eq!(
            queued.get("queued").and_then(|q| q.as_u64()),
            Some(1),
            "{queued}"
        );
        // Freeing the worker binds the queued session, whose stdin is then delivered.
        first.write_all(&Chunk::new(b'.', "").encode()).unwrap();
        check(&finish(&mut first), b"first\n");
        check(&finish(&mut second), &data);
    }
}
