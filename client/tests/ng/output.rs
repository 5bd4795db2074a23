//! Output streaming, heartbeats, a broken stdout pipe and signals.

use crate::util::{code, finish, frame, Got, Running, Server, STEP};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::ChildStdout;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Reads from `pipe` on a thread; each read's bytes arrive on the channel.
fn reader(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    rx
}

/// Collects from `rx` until `want` has been seen in full.
fn expect_output(rx: &mpsc::Receiver<Vec<u8>>, want: &[u8]) {
    let mut got = Vec::new();
    let deadline = Instant::now() + STEP;
    while got.len() < want.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(bytes) => got.extend(bytes),
            Err(_) => panic!("only {:?} arrived", String::from_utf8_lossy(&got)),
        }
    }
    assert_eq!(got, want);
}

#[test]
fn output_is_written_as_it_arrives() {
    let server = Server::tcp();
    let mut child = server.ng().arg("cmd").spawn().unwrap();
    let stdout = reader(child.stdout.take().unwrap());
    let stderr = reader(child.stderr.take().unwrap());
    let mut peer = server.accept();
    peer.header();
    // A prompt without a newline must show before the command ends.
    peer.send(b'1', b"name? ");
    expect_output(&stdout, b"name? ");
    peer.send(b'2', b"warn");
    expect_output(&stderr, b"warn");
    peer.send(b'1', b"");
    peer.send(b'1', b"x");
    expect_output(&stdout, b"x");
    peer.exit("0\n");
    assert_eq!(code(&finish(child)), 0);
}

#[test]
fn chunks_of_any_size_pass_through() {
    let big: Vec<u8> = (0..(4 << 20)).map(|i: u32| (i % 253) as u8).collect();
    let server = Server::tcp();
    let running = Running::new(server.ng().arg("cmd").spawn().unwrap());
    let mut peer = server.accept();
    peer.header();
    peer.send(b'1', &big);
    for b in b"tiny" {
        peer.send(b'1', &[*b]);
    }
    peer.send(b'2', b"to stderr\n");
    // Several chunks in one write.
    let mut burst = frame(b'1', b"a");
    burst.extend(frame(b'2', b"b"));
    burst.extend(frame(b'1', b"c"));
    peer.send_raw(&burst);
    peer.exit("0\n");
    let out = running.finish();
    assert_eq!(code(&out), 0);
    let mut want = big;
    want.extend_from_slice(b"tinyac");
    assert!(
        out.stdout == want,
        "stdout differs ({} bytes)",
        out.stdout.len()
    );
    assert_eq!(out.stderr, b"to stderr\nb");
}

#[test]
fn heartbeat_when_the_server_stalls() {
    let server = Server::tcp();
    let child = server.ng().arg("cmd").spawn().unwrap();
    let mut peer = server.accept();
    peer.header();
    let start = Instant::now();
    match peer.next(Duration::from_millis(1500)) {
        Got::Chunk(c) => assert_eq!((c.ty, c.payload.len()), (b'H', 0)),
        other => panic!("no heartbeat within 1.5 s: {other:?}"),
    }
    let first = start.elapsed();
    assert!(
        first >= Duration::from_millis(300),
        "heartbeat too early: {first:?}"
    );
    // And they keep coming while the server stays silent.
    match peer.next(Duration::from_millis(1500)) {
        Got::Chunk(c) => assert_eq!(c.ty, b'H'),
        other => panic!("no second heartbeat: {other:?}"),
    }
    peer.exit("0\n");
    assert_eq!(code(&finish(child)), 0);
}

#[test]
fn heartbeats_continue_while_output_streams() {
    let server = Server::tcp();
    let running = Running::new(server.ng().arg("cmd").spawn().unwrap());
    let mut peer = server.accept();
    peer.header();
    let start = Instant::now();
    let mut heartbeats = 0;
    while start.elapsed() < Duration::from_millis(1600) {
        peer.send(b'1', b".");
        match peer.next(Duration::from_millis(40)) {
            Got::Chunk(c) if c.ty == b'H' => heartbeats += 1,
            Got::Timeout => {}
            other => panic!("{other:?}"),
        }
    }
    peer.exit("0\n");
    assert_eq!(code(&running.finish()), 0);
    assert!(heartbeats >= 1, "no heartbeat while output was streaming");
}

#[test]
fn broken_stdout_pipe_ends_quietly_by_sigpipe() {
    let server = Server::tcp();
    let mut child = server.ng().arg("cmd").spawn().unwrap();
    // The reader goes away before any output, like `ng cmd | head -c0`.
    let stdout: ChildStdout = child.stdout.take().unwrap();
    drop(stdout);
    let mut peer = server.accept();
    peer.header();
    peer.send(b'1', b"nobody reads this\n");
    // The server sees the client go away.
    peer.expect_closed();
    let out = finish(child);
    // Killed by SIGPIPE, as the C client is (141 in a shell).
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sigint_and_sigterm_kill_the_client_and_the_server_sees_it() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let server = Server::tcp();
        let mut cmd = server.ng();
        cmd.arg("cmd");
        // The test's own parent may have left these ignored (a background job); ng keeps
        // whatever it inherits, so start it from the default.
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        let mut peer = server.accept();
        peer.header();
        // SAFETY: sending a signal to our own child.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        peer.expect_closed();
        let out = finish(child);
        assert_eq!(out.status.signal(), Some(signal), "{:?}", out.status);
    }
}
