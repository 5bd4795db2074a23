//! Stdin is credit-based: nothing before the first `S`, at most one `0` (or the `.`) per
//! `S`, read with plain `read(2)` so pipes, regular files and terminals all work.

use crate::util::{code, finish, temp_dir, Got, Peer, Running, Server, STEP};
use std::fs::File;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long to watch for chunks that must not come.
const QUIET: Duration = Duration::from_millis(300);

/// Pseudo-random bytes (a fixed LCG), all 256 values included.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x2545_f491;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

/// Plays the server side of a stdin transfer: checks that nothing comes before the first
/// `S`, then grants one credit at a time and checks that each brings exactly one chunk.
/// Returns the `0` payload sizes and the data.
fn pull_stdin(peer: &mut Peer) -> (Vec<usize>, Vec<u8>) {
    peer.header();
    assert_eq!(peer.next_data(QUIET), Got::Timeout, "stdin sent before S");
    let mut sizes = Vec::new();
    let mut data = Vec::new();
    loop {
        peer.send(b'S', b"");
        match peer.next_data(STEP) {
            Got::Chunk(c) if c.ty == b'0' => {
                assert!(
                    !c.payload.is_empty() && c.payload.len() <= 2048,
                    "{}",
                    c.payload.len()
                );
                sizes.push(c.payload.len());
                data.extend_from_slice(&c.payload);
            }
            Got::Chunk(c) if c.ty == b'.' => {
                assert!(c.payload.is_empty());
                break;
            }
            other => panic!("expected stdin, got {other:?}"),
        }
        assert_eq!(
            peer.next_data(Duration::from_millis(100)),
            Got::Timeout,
            "more than one stdin chunk for one S"
        );
    }
    // After the `.` nothing more is sent, whatever the server asks.
    peer.send(b'S', b"");
    assert_eq!(
        peer.next_data(QUIET),
        Got::Timeout,
        "stdin after end of file"
    );
    peer.exit("0\n");
    (sizes, data)
}

#[test]
fn stdin_from_a_pipe_one_chunk_per_s() {
    let input = noise(5000);
    let server = Server::tcp();
    let mut child = server
        .ng()
        .arg("cmd")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let mut peer = server.accept();
    let (sizes, data) = pull_stdin(&mut peer);
    assert_eq!(code(&finish(child)), 0);
    assert_eq!(data, input);
    assert_eq!(sizes, vec![2048, 2048, 904]);
}

#[test]
fn stdin_from_a_regular_file_one_chunk_per_s() {
    let dir = temp_dir("stdin-file");
    let path = dir.join("input");
    let input = noise(4097);
    std::fs::write(&path, &input).unwrap();
    let server = Server::tcp();
    let child = server
        .ng()
        .arg("cmd")
        .stdin(File::open(&path).unwrap())
        .spawn()
        .unwrap();
    let mut peer = server.accept();
    let (sizes, data) = pull_stdin(&mut peer);
    assert_eq!(code(&finish(child)), 0);
    assert_eq!(data, input);
    assert_eq!(sizes, vec![2048, 2048, 1]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn empty_stdin_is_just_the_end() {
    let server = Server::tcp();
    let child = server.ng().arg("cmd").spawn().unwrap(); // stdin is /dev/null
    let mut peer = server.accept();
    let (sizes, data) = pull_stdin(&mut peer);
    assert_eq!(code(&finish(child)), 0);
    assert!(sizes.is_empty() && data.is_empty());
}

#[test]
fn two_s_before_any_input_grant_one_chunk() {
    let server = Server::tcp();
    let mut child = server
        .ng()
        .arg("cmd")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut peer = server.accept();
    peer.header();
    peer.send(b'S', b"");
    peer.send(b'S', b"");
    // Both credits arrive while the client waits for input: a flag, not a counter.
    std::thread::sleep(Duration::from_millis(200));
    stdin.write_all(b"one").unwrap();
    match peer.next_data(STEP) {
        Got::Chunk(c) => assert_eq!((c.ty, c.payload.as_slice()), (b'0', &b"one"[..])),
        other => panic!("{other:?}"),
    }
    stdin.write_all(b"two").unwrap();
    assert_eq!(
        peer.next_data(QUIET),
        Got::Timeout,
        "second chunk without a second S"
    );
    peer.send(b'S', b"");
    match peer.next_data(STEP) {
        Got::Chunk(c) => assert_eq!((c.ty, c.payload.as_slice()), (b'0', &b"two"[..])),
        other => panic!("{other:?}"),
    }
    peer.exit("5\n");
    drop(stdin);
    assert_eq!(code(&finish(child)), 5);
}

#[test]
fn exit_does_not_wait_for_stdin() {
    let server = Server::tcp();
    let mut child = server
        .ng()
        .arg("cmd")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    // Keep the pipe open and empty for the whole test, like `sleep 10 | ng cmd`.
    let _stdin = child.stdin.take().unwrap();
    let mut peer = server.accept();
    peer.header();
    peer.send(b'S', b"");
    std::thread::sleep(Duration::from_millis(50));
    peer.exit("9\n");
    assert_eq!(code(&finish(child)), 9);
}

#[test]
fn megabyte_binary_round_trip_through_an_echoing_server() {
    let input = noise(1 << 20);
    let server = Server::tcp();
    let mut child = server
        .ng()
        .arg("echo")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feed = input.clone();
    let writer = std::thread::spawn(move || stdin.write_all(&feed).unwrap());
    let running = Running::new(child);
    let mut peer = server.accept();
    peer.header();
    peer.send(b'S', b"");
    loop {
        match peer.next_data(STEP) {
            Got::Chunk(c) if c.ty == b'0' => {
                peer.send(b'1', &c.payload);
                peer.send(b'S', b"");
            }
            Got::Chunk(c) if c.ty == b'.' => break,
            other => panic!("{other:?}"),
        }
    }
    peer.exit("0\n");
    writer.join().unwrap();
    let out = running.finish();
    assert_eq!(code(&out), 0);
    assert!(out.stdout == input, "echoed bytes differ");
}

#[test]
fn stdin_read_error_is_227() {
    let dir = temp_dir("stdin-dir");
    let server = Server::tcp();
    // read(2) on a directory fails with EISDIR.
    let child = Command::new(env!("CARGO_BIN_EXE_ng"))
        .env_clear()
        .args(&server.args)
        .arg("cmd")
        .stdin(File::open(&dir).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peer = server.accept();
    peer.header();
    peer.send(b'S', b"");
    peer.expect_closed();
    let out = finish(child);
    assert_eq!(code(&out), 227);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "read: Is a directory\n"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
