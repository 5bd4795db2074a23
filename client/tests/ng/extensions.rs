//! The negotiated extensions (docs/protocol.md, "Negotiated extensions"): descriptors
//! passed over a Unix socket, the server's `F`, forwarded signals, `Z`, the signal form
//! of `X`, and the stdin window. The fake server plays ngd's side byte by byte.

use crate::util::{code, env_value, finish, temp_dir, Chunk, Got, Running, Server, STEP};
use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Stdio};
use std::time::Duration;

/// A fake server on a fresh Unix socket.
fn unix_server(tag: &str) -> (Server, std::path::PathBuf) {
    let dir = temp_dir(tag);
    (Server::unix(&dir.join("ng.sock")), dir)
}

/// Starts `ng cmd` with SIGINT etc. at their defaults, whatever the test runner inherited.
fn spawn(server: &Server) -> Child {
    let mut cmd = server.ng();
    cmd.arg("cmd");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGTSTP] {
                libc::signal(s, libc::SIG_DFL);
            }
            // A process group of its own, whose parent (this test) is in another group of
            // the same session: not orphaned, so a stop signal stops it, as in a shell's
            // job. (The kernel discards stop signals in an orphaned group, which is what
            // the test's own group may be under CI.)
            libc::setpgid(0, 0);
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

fn kill(child: &Child, signo: libc::c_int) {
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signo) }, 0);
}

/// The next chunk that is not a heartbeat.
fn data(peer: &mut crate::util::Peer) -> Chunk {
    match peer.next_data(STEP) {
        Got::Chunk(c) => c,
        other => panic!("expected a chunk, got {other:?}"),
    }
}

/// Waits until `child` is stopped (`waitid` with `WSTOPPED | WNOWAIT`).
fn wait_stopped(child: &Child) {
    // SAFETY: waiting on our own child without reaping it.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            child.id(),
            &mut info,
            libc::WSTOPPED | libc::WEXITED | libc::WNOWAIT,
        );
        assert_eq!(rc, 0);
        assert_eq!(info.si_code, libc::CLD_STOPPED, "ng is not stopped");
    }
}

#[test]
fn unix_socket_passes_fds_0_1_2_with_the_header() {
    let (server, dir) = unix_server("fds");
    let child = spawn(&server);
    let running = Running::new(child);
    let mut peer = server.accept();
    let fds = peer.recv_fds();
    let header = peer.header();
    assert_eq!(fds.len(), 3, "descriptors received");
    assert_eq!(env_value(&header, "NGD_CLIENT_FDS").unwrap(), b"0,1,2");
    assert_eq!(
        env_value(&header, "NGD_CLIENT_FEATURES").unwrap(),
        b"fds,signals,winsize,stdin-window"
    );
    // The announcement is the header's last `E`.
    let last_e = header.iter().rev().find(|c| c.ty == b'E').unwrap();
    assert!(last_e.payload.starts_with(b"NGD_CLIENT_FEATURES="));
    // The command writes the client's own stdout and stderr directly.
    let mut out = std::fs::File::from(fds[1].try_clone().unwrap());
    out.write_all(b"straight to ng's stdout\n").unwrap();
    let mut err = std::fs::File::from(fds[2].try_clone().unwrap());
    err.write_all(b"and its stderr\n").unwrap();
    drop((out, err, fds));
    peer.send(b'F', b"fds,signals");
    peer.exit("0\n");
    let out = running.finish();
    assert_eq!(code(&out), 0);
    assert_eq!(out.stdout, b"straight to ng's stdout\n");
    assert_eq!(out.stderr, b"and its stderr\n");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_closed_stdin_stays_closed() {
    let (server, dir) = unix_server("closed");
    let mut cmd = server.ng();
    cmd.arg("cmd");
    // SAFETY: close(2) is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::close(0);
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let mut peer = server.accept();
    let fds = peer.recv_fds();
    let header = peer.header();
    assert_eq!(fds.len(), 2);
    assert_eq!(env_value(&header, "NGD_CLIENT_FDS").unwrap(), b"1,2");
    drop(fds);
    peer.exit("0\n");
    assert_eq!(code(&finish(child)), 0);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn tcp_announces_no_fds_and_passes_none() {
    let server = Server::tcp();
    let child = spawn(&server);
    let mut peer = server.accept();
    let header = peer.header();
    assert_eq!(env_value(&header, "NGD_CLIENT_FDS"), None);
    assert_eq!(
        env_value(&header, "NGD_CLIENT_FEATURES").unwrap(),
        b"signals,winsize,stdin-window"
    );
    peer.exit("0\n");
    assert_eq!(code(&finish(child)), 0);
}

#[test]
fn signals_are_forwarded_once_the_server_accepts_them() {
    let server = Server::tcp();
    let child = spawn(&server);
    let mut peer = server.accept();
    peer.header();
    peer.send(b'F', b"signals");
    // Let ng read the `F` before the signals arrive (either order works; this one tests
    // forwarding rather than the wait for the first chunk).
    std::thread::sleep(Duration::from_millis(50));
    for (signo, name) in [
        (libc::SIGINT, &b"SIGINT"[..]),
        (libc::SIGTERM, b"SIGTERM"),
        (libc::SIGHUP, b"SIGHUP"),
        (libc::SIGUSR1, b"SIGUSR1"),
        (libc::SIGQUIT, b"SIGQUIT"),
        (libc::SIGWINCH, b"SIGWINCH"),
    ] {
        kill(&child, signo);
        assert_eq!(data(&mut peer), Chunk::new(b'K', name));
    }
    peer.exit("130\n");
    assert_eq!(code(&finish(child)), 130);
}

#[test]
fn a_signal_before_the_first_chunk_waits_for_it() {
    let server = Server::tcp();
    let child = spawn(&server);
    let mut peer = server.accept();
    peer.header();
    kill(&child, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(20));
    peer.send(b'F', b"signals,winsize");
    assert_eq!(data(&mut peer), Chunk::new(b'K', b"SIGINT"));
    peer.exit("0\n");
    assert_eq!(code(&finish(child)), 0);
}

#[test]
fn without_signals_in_f_a_signal_has_its_default_action() {
    let server = Server::tcp();
    let child = spawn(&server);
    let mut peer = server.accept();
    peer.header();
    peer.send(b'F', b"winsize");
    std::thread::sleep(Duration::from_millis(50));
    kill(&child, libc::SIGTERM);
    peer.expect_closed();
    let out = finish(child);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{:?}", out.status);
}

#[test]
fn death_by_signal_is_reraised() {
    for (payload, signo) in [
        ("137 SIGKILL\n", libc::SIGKILL),
        ("139 SIGSEGV\n", libc::SIGSEGV),
        ("143 SIGTERM\n", libc::SIGTERM),
    ] {
        let server = Server::tcp();
        let child = spawn(&server);
        let mut peer = server.accept();
        peer.header();
        peer.send(b'F', b"signals");
        peer.exit(payload);
        let out = finish(child);
        assert_eq!(
            out.status.signal(),
            Some(signo),
            "{payload:?}: {:?}",
            out.status
        );
        assert!(!out.status.core_dumped(), "no core without `core`");
        assert!(
            out.stderr.is_empty(),
            "{:?}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_signal_report_without_signals_is_a_plain_code() {
    let server = Server::tcp();
    let child = spawn(&server);
    let mut peer = server.accept();
    peer.header();
    peer.send(b'F', b"winsize");
    peer.exit("137 SIGKILL\n");
    assert_eq!(code(&finish(child)), 137);
}

#[test]
fn sigtstp_stops_the_command_then_the_client_and_sigcont_resumes_both() {
    let server = Server::tcp();
    let child = spawn(&server);
    let mut peer = server.accept();
    peer.header();
    peer.send(b'F', b"signals");
    std::thread::sleep(Duration::from_millis(50));
    kill(&child, libc::SIGTSTP);
    assert_eq!(data(&mut peer), Chunk::new(b'K', b"SIGTSTP"));
    wait_stopped(&child);
    kill(&child, libc::SIGCONT);
    assert_eq!(data(&mut peer), Chunk::new(b'K', b"SIGCONT"));
    peer.exit("0\n");
    assert_eq!(code(&finish(child)), 0);
}

#[test]
fn z_stops_the_client_until_it_is_continued() {
    let server = Server::tcp();
    let child = spawn(&server);
    let mut peer = server.accept();
    peer.header();
    peer.send(b'F', b"signals");
    peer.send(b'Z', b"SIGTSTP");
    wait_stopped(&child);
    kill(&child, libc::SIGCONT);
    assert_eq!(data(&mut peer), Chunk::new(b'K', b"SIGCONT"));
    peer.exit("0\n");
    assert_eq!(code(&finish(child)), 0);
}

#[test]
fn f_after_another_chunk_is_an_unexpected_chunk() {
    let server = Server::tcp();
    let child = spawn(&server);
    let mut peer = server.accept();
    peer.header();
    peer.send(b'1', b"out\n");
    peer.send(b'F', b"signals");
    let out = finish(child);
    assert_eq!(code(&out), 229);
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Unexpected chunk type 70 ('F')\n"
    );
}

#[test]
fn stdin_window_moves_large_chunks_within_the_credit() {
    let server = Server::tcp();
    let input: Vec<u8> = (0..700_000u32).map(|i| (i % 253) as u8).collect();
    let mut cmd = server.ng();
    cmd.arg("cmd").stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = {
        let input = input.clone();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        })
    };
    let mut peer = server.accept();
    peer.header();
    peer.send(b'F', b"stdin-window");
    let window = 300_000usize;
    peer.send(b'S', window.to_string().as_bytes());
    let mut got = Vec::new();
    let mut credit = window;
    let mut largest = 0;
    loop {
        let c = data(&mut peer);
        match c.ty {
            b'0' => {
                assert!(c.payload.len() <= credit, "stdin beyond the window");
                credit -= c.payload.len();
                largest = largest.max(c.payload.len());
                got.extend_from_slice(&c.payload);
                if credit < window / 2 {
                    peer.send(b'S', (window - credit).to_string().as_bytes());
                    credit = window;
                }
            }
            b'.' => break,
            other => panic!("unexpected chunk {other}"),
        }
    }
    feeder.join().unwrap();
    assert_eq!(got, input);
    assert!(largest > 2048, "chunks of at most {largest} bytes");
    peer.exit("0\n");
    assert_eq!(code(&finish(child)), 0);
}

#[test]
fn a_malformed_grant_is_a_broken_connection() {
    let server = Server::tcp();
    let child = spawn(&server);
    let mut peer = server.accept();
    peer.header();
    peer.send(b'F', b"stdin-window");
    peer.send(b'S', b"");
    let out = finish(child);
    assert_eq!(code(&out), 227);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "recv: malformed send-input chunk ('S')\n"
    );
}

/// A received descriptor is the very file the client has open, not a copy of its data.
#[test]
fn passed_descriptors_are_the_clients_own() {
    let (server, dir) = unix_server("same");
    let file = dir.join("out.txt");
    let out_file = std::fs::File::create(&file).unwrap();
    let mut cmd = server.ng();
    cmd.arg("cmd").stdout(out_file);
    let child = cmd.spawn().unwrap();
    let mut peer = server.accept();
    let fds: Vec<OwnedFd> = peer.recv_fds();
    peer.header();
    let stat = |fd: &OwnedFd| {
        // SAFETY: fstat on a descriptor we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
        (st.st_dev, st.st_ino)
    };
    let meta = std::fs::metadata(&file).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(stat(&fds[1]), (meta.dev(), meta.ino()));
    drop(fds);
    peer.send(b'F', b"fds");
    peer.exit("0\n");
    assert_eq!(code(&finish(child)), 0);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn signals_the_parent_ignored_are_reported_and_stay_ignored() {
    let server = Server::tcp();
    let mut cmd = server.ng();
    cmd.arg("cmd");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            for s in [
                libc::SIGINT,
                libc::SIGQUIT,
                libc::SIGTERM,
                libc::SIGUSR1,
                libc::SIGPIPE,
                libc::SIGTSTP,
                libc::SIGTTIN,
            ] {
                libc::signal(s, libc::SIG_DFL);
            }
            for s in [libc::SIGHUP, libc::SIGUSR2, libc::SIGTTOU] {
                libc::signal(s, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let mut peer = server.accept();
    let header = peer.header();
    assert_eq!(
        env_value(&header, "NGD_CLIENT_SIGIGN").unwrap(),
        b"SIGHUP,SIGUSR2,SIGTTOU"
    );
    peer.send(b'F', b"signals");
    std::thread::sleep(Duration::from_millis(50));
    // Ignored: neither forwarded nor acted on. Had either been caught, its `K` would
    // come before the `K SIGINT`.
    kill(&child, libc::SIGHUP);
    kill(&child, libc::SIGUSR2);
    std::thread::sleep(Duration::from_millis(50));
    kill(&child, libc::SIGINT);
    assert_eq!(data(&mut peer), Chunk::new(b'K', b"SIGINT"));
    peer.exit("0\n");
    assert_eq!(code(&finish(child)), 0);
}

#[test]
fn a_signal_while_connecting_has_its_default_action() {
    // A Unix listener that never accepts, with its queue full: `ng`'s connect blocks
    // there, after it has set its signal handlers and before it arms them.
    let dir = temp_dir("connecting");
    let path = dir.join("full.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    // SAFETY: lowering the backlog of our own listening socket.
    assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
    let mut queued = Vec::new();
    loop {
        // SAFETY: a new non-blocking socket, owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        assert!(fd >= 0);
        // SAFETY: `fd` is ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero sockaddr_un is valid; the path fits.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
            *d = *s as libc::c_char;
        }
        // SAFETY: a valid address of its full size.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EAGAIN)
            );
            break;
        }
        queued.push(fd);
        assert!(queued.len() < 64, "the listen queue never filled");
    }
    let mut cmd = crate::util::ng();
    cmd.args([
        "--nailgun-server",
        &format!("local:{}", path.display()),
        "cmd",
    ]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    // Wait until ng is blocked in connect(2).
    let syscall = format!("/proc/{}/syscall", child.id());
    let deadline = std::time::Instant::now() + STEP;
    loop {
        let now = std::fs::read_to_string(&syscall).unwrap_or_default();
        if now.split_whitespace().next() == Some(&libc::SYS_connect.to_string()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "ng is not connecting: {now}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    kill(&child, libc::SIGINT);
    let out = finish(child);
    assert_eq!(out.status.signal(), Some(libc::SIGINT), "{:?}", out.status);
    drop((queued, listener));
    std::fs::remove_dir_all(dir).unwrap();
}
