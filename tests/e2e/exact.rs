//! Exact sessions against ngd (docs/protocol.md, "Negotiated extensions"): our `ng` passes
//! its own descriptors over the Unix socket and a command that takes them runs on them
//! (`ngtest-fds` reports what it got, compared with what the client had); over TCP and with
//! the stock C client the session is relayed (`1`/`2` chunks). Signals forwarded by our `ng` end
//! an in-process command as they end a cold one (the client dies of the same signal);
//! `ng-cat` copies the client's own stdin to its own stdout.

use ng_tests::{bins, Flavor, NgdServer, Transport};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn ng(client: &std::path::Path, transport: Transport, command: &str) -> Command {
    let server = NgdServer::shared(Flavor::Testbed);
    let mut cmd = Command::new(client);
    cmd.args(server.address_on(transport).client_args())
        .arg(command);
    cmd
}

fn temp_file(contents: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input");
    std::fs::write(&path, contents).unwrap();
    (dir, path)
}

#[test]
fn the_command_runs_on_the_clients_own_descriptors_over_unix() {
    let (_dir, path) = temp_file(b"data\n");
    let meta = std::fs::metadata(&path).unwrap();
    let out = ng(&bins::ng(), Transport::Unix, "ngtest-fds")
        .stdin(File::open(&path).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report = String::from_utf8_lossy(&out.stderr);
    let fd0 = format!("fd 0: {}:{} tty=false", meta.dev(), meta.ino());
    assert!(report.contains(&fd0), "{report}");
    assert!(
        report.contains("fd 1: ") && report.contains("fd 2: "),
        "{report}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "relayed\n");
}

#[test]
fn a_closed_descriptor_stays_closed_for_the_command() {
    let mut cmd = ng(&bins::ng(), Transport::Unix, "ngtest-fds");
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: only close(2) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::close(0);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(report.contains("fd 0: closed"), "{report}");
    assert!(!report.contains("fd 1: closed"), "{report}");
}

#[test]
fn tcp_and_the_stock_client_are_relayed() {
    for (client, transport) in [
        (bins::ng(), Transport::Tcp),
        (bins::c_client(), Transport::Unix),
        (bins::c_client(), Transport::Tcp),
    ] {
        let out = ng(&client, transport, "ngtest-fds")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "no descriptors\n",
            "{client:?} over {transport:?}"
        );
    }
}

#[test]
fn ng_cat_copies_the_clients_stdin_to_its_stdout_directly() {
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 253) as u8).collect();
    let (_dir, path) = temp_file(&data);
    for (client, transport) in [
        (bins::ng(), Transport::Unix),
        (bins::ng(), Transport::Tcp),
        (bins::c_client(), Transport::Unix),
    ] {
        let server = NgdServer::shared(Flavor::Ngd);
        let out = Command::new(&client)
            .args(server.address_on(transport).client_args())
            .arg("ng-cat")
            .stdin(File::open(&path).unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "{client:?} {transport:?}: {out:?}");
        assert!(
            out.stdout == data,
            "{client:?} over {transport:?}: {} bytes back",
            out.stdout.len()
        );
    }
}

#[test]
fn ng_cat_on_a_closed_pipe_ends_as_cat_does() {
    let server = NgdServer::shared(Flavor::Ngd);
    let (_dir, path) = temp_file(&vec![b'y'; 4 << 20]);
    let mut child = Command::new(bins::ng())
        .args(server.address_on(Transport::Unix).client_args())
        .arg("ng-cat")
        .stdin(File::open(&path).unwrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(141), "{status:?}");
}

/// Starts `ngtest-sleep` through `client` and waits for its first line.
fn sleeping(client: &std::path::Path, transport: Transport) -> (std::process::Child, Instant) {
    let mut child = ng(client, transport, "ngtest-sleep")
        .arg("20000")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut line = [0u8; 8];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut line)
        .unwrap();
    assert_eq!(&line, b"sleeping");
    (child, Instant::now())
}

fn kill(child: &std::process::Child, signal: i32) {
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
}

#[test]
fn a_forwarded_signal_ends_the_command_and_the_client_dies_of_it() {
    for transport in Transport::ALL {
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            let (mut child, started) = sleeping(&bins::ng(), transport);
            // Window changes and continues are not ends: the command keeps running.
            kill(&child, libc::SIGWINCH);
            kill(&child, libc::SIGCONT);
            std::thread::sleep(Duration::from_millis(200));
            assert!(child.try_wait().unwrap().is_none(), "still running");
            kill(&child, signal);
            let status = child.wait().unwrap();
            assert_eq!(status.signal(), Some(signal), "{transport:?}: {status:?}");
            assert!(started.elapsed() < Duration::from_secs(10));
            let mut rest = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut rest)
                .unwrap();
            assert_eq!(rest, " 20000\n", "the command was cancelled, not run out");
        }
    }
}

#[test]
fn the_stock_client_still_dies_of_its_own_default_action() {
    for transport in Transport::ALL {
        let (mut child, _) = sleeping(&bins::c_client(), transport);
        kill(&child, libc::SIGINT);
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    }
}

#[test]
fn stdin_streams_in_windows_over_tcp() {
    // A relayed ng-cat (TCP): the data arrives intact with many chunks in flight.
    let server = NgdServer::shared(Flavor::Ngd);
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 241) as u8).collect();
    let mut child = Command::new(bins::ng())
        .args(server.address_on(Transport::Tcp).client_args())
        .arg("ng-cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = {
        let data = data.clone();
        std::thread::spawn(move || stdin.write_all(&data))
    };
    let mut back = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut back).unwrap();
    writer.join().unwrap().unwrap();
    assert!(child.wait().unwrap().success());
    assert!(back == data, "{} bytes back", back.len());
}

mod raw {
    //! A raw client over the Unix socket passing descriptors the way it likes: what ngd
    //! honours and what it closes, and that it keeps no descriptor afterwards.

    use super::*;
    use ng_testkit::wire::{frames, read_chunk, Chunk};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::net::UnixStream;

    /// `sendmsg` of `data` with `fds` on its first byte. Not the server's
    /// `sys::send_with_fds`: a hostile client must be able to send more than it allows.
    fn send_with_fds(sock: &UnixStream, data: &[u8], fds: &[RawFd]) {
        let n = ng_sys::scm::send_with_fds(sock.as_raw_fd(), data, fds).unwrap();
        assert_eq!(n, data.len());
    }

    /// A pipe: (read end, write end).
    fn pipe() -> (File, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors that we then own.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: fresh descriptors from pipe2.
        unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// The header of `ng-cat` with `features` announced and `map` as NGD_CLIENT_FDS.
    fn header(features: &str, map: Option<&str>) -> Vec<u8> {
        let mut items: Vec<(u8, Vec<u8>)> = vec![(b'D', b"/".to_vec())];
        if let Some(map) = map {
            items.push((b'E', format!("NGD_CLIENT_FDS={map}").into_bytes()));
        }
        items.push((b'E', format!("NGD_CLIENT_FEATURES={features}").into_bytes()));
        items.push((b'C', b"ng-cat".to_vec()));
        let refs: Vec<(u8, &[u8])> = items.iter().map(|(t, p)| (*t, p.as_slice())).collect();
        frames(&refs)
    }

    /// Every chunk until `X`.
    fn chunks(sock: &mut UnixStream) -> Vec<Chunk> {
        let mut all = Vec::new();
        while let Some(c) = read_chunk(sock).unwrap() {
            let last = c.ty == b'X';
            all.push(c);
            if last {
                break;
            }
        }
        all
    }

    fn connect(server: &NgdServer) -> UnixStream {
        let path = server.address_on(Transport::Unix).server();
        let path = path.to_string_lossy();
        let sock = UnixStream::connect(path.trim_start_matches("local:")).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        sock
    }

    /// The session is relayed: `F` without `fds`, then `S` for stdin.
    fn assert_relayed(sock: &mut UnixStream, what: &str) {
        let first = read_chunk(sock).unwrap().unwrap();
        assert_eq!(first.ty, b'F', "{what}: {first:?}");
        assert!(
            !String::from_utf8_lossy(&first.payload).contains("fds"),
            "{what}: {first:?}"
        );
        sock.write_all(&frames(&[(b'0', b"hi"), (b'.', b"")]))
            .unwrap();
        let rest = chunks(sock);
        let out: Vec<u8> = rest
            .iter()
            .filter(|c| c.ty == b'1')
            .flat_map(|c| c.payload.clone())
            .collect();
        assert_eq!(out, b"hi", "{what}: {rest:?}");
    }

    #[test]
    fn what_a_client_may_pass_and_what_ngd_closes() {
        // A server of its own, so that its descriptor count is this test's alone.
        let server = NgdServer::builder(Flavor::Ngd).unix().start();
        let baseline = server.fd_count();
        let all = "fds,signals,winsize,stdin-window";

        // Honoured: the command writes the client's own pipe; no output chunk comes.
        let (mut out_r, out_w) = pipe();
        let (_err_r, err_w) = pipe();
        let (stdin_r, stdin_w) = pipe();
        let mut sock = connect(&server);
        let fds = [stdin_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
        send_with_fds(&sock, &header(all, Some("0,1,2")), &fds);
        drop((stdin_r, out_w, err_w));
        let mut w = File::from(stdin_w);
        w.write_all(b"direct").unwrap();
        drop(w);
        let chunks_seen = chunks(&mut sock);
        assert_eq!(chunks_seen[0].ty, b'F');
        assert!(String::from_utf8_lossy(&chunks_seen[0].payload).contains("fds"));
        assert!(
            chunks_seen.iter().all(|c| c.ty != b'1' && c.ty != b'S'),
            "{chunks_seen:?}"
        );
        let mut got = Vec::new();
        out_r.read_to_end(&mut got).unwrap();
        assert_eq!(
            got, b"direct",
            "ngd kept no copy: end of file once the command ended"
        );

        // More than three: the kernel truncates, ngd closes them all and relays.
        let (mut r, w) = pipe();
        let four = [w.as_raw_fd(); 4];
        let mut sock = connect(&server);
        send_with_fds(&sock, &header(all, Some("0,1,2")), &four);
        drop(w);
        assert_relayed(&mut sock, "four descriptors");
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();

        // Passed without announcing `fds`: closed, relayed.
        let (mut r, w) = pipe();
        let mut sock = connect(&server);
        send_with_fds(
            &sock,
            &header("signals", Some("0,1,2")),
            &[w.as_raw_fd(); 3],
        );
        drop(w);
        assert_relayed(&mut sock, "fds not announced");
        r.read_to_end(&mut rest).unwrap();

        // A map that does not match the count: closed, relayed.
        let (mut r, w) = pipe();
        let mut sock = connect(&server);
        send_with_fds(&sock, &header(all, Some("0,1")), &[w.as_raw_fd(); 3]);
        drop(w);
        assert_relayed(&mut sock, "map of two, three descriptors");
        r.read_to_end(&mut rest).unwrap();

        // Descriptors after the header: never read, closed.
        let (mut r, w) = pipe();
        let mut sock = connect(&server);
        sock.write_all(&header("signals,stdin-window", None))
            .unwrap();
        let first = read_chunk(&mut sock).unwrap().unwrap();
        assert_eq!(first.ty, b'F');
        send_with_fds(&sock, &frames(&[(b'0', b"hi")]), &[w.as_raw_fd()]);
        drop(w);
        sock.write_all(&frames(&[(b'.', b"")])).unwrap();
        let rest_chunks = chunks(&mut sock);
        assert_eq!(rest_chunks.last().map(|c| c.ty), Some(b'X'));
        r.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());

        server.wait_fd_count(baseline, Duration::from_secs(10));
    }
}
