//! Exact sessions against ngd (docs/protocol.md, "Negotiated extensions"): our `ng` passes
//! its own descriptors over the Unix socket and a command that takes them runs on them
//! (`ngtest-fds` reports what it got, compared with what the client had); over TCP and with
//! the stock C client the session is relayed as before. Signals forwarded by our `ng` end
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
