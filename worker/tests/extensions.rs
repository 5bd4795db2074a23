//! The extensions of `docs/ngw.md` §15.4–15.6 against the test driver: the client's
//! descriptors (taken, declined, malformed, truncated, on the wrong chunk), forwarded
//! signals and window sizes, stops, deaths by signal, and window-sized stdin.

use ngw::testing::{Driver, Request};
use ngw::{Channel, Hello, Interrupt, Session};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;
use std::time::Duration;

fn handler(s: &mut Session) -> i32 {
    match s.command.as_str() {
        // Copies its fd 0 to its fd 1 (the client's descriptors), and says so on the
        // relayed stderr.
        "fdcat" => {
            let Some(mut fds) = s.take_client_fds() else {
                writeln!(s.stderr(), "no descriptors").unwrap();
                return 3;
            };
            let mut stdin = Vec::new();
            // Stdin is the client's own: the relayed one reads end of file at once.
            s.stdin().read_to_end(&mut stdin).unwrap();
            assert!(stdin.is_empty());
            let mut data = Vec::new();
            if let Some(fd) = fds.take(0) {
                File::from(fd).read_to_end(&mut data).unwrap();
            }
            if let Some(fd) = fds.take(1) {
                File::from(fd).write_all(&data).unwrap();
            }
            writeln!(s.stderr(), "copied {}", data.len()).unwrap();
            0
        }
        "echo" => {
            writeln!(s.stdout(), "{}", s.args_lossy().join(" ")).unwrap();
            0
        }
        "cat" => {
            let mut data = Vec::new();
            s.stdin().read_to_end(&mut data).unwrap();
            s.stdout().write_all(&data).unwrap();
            0
        }
        "wait" => {
            let mut seen = Vec::new();
            while let Ok(i) = s.interrupts().recv() {
                if i == Interrupt::Hangup {
                    break;
                }
                seen.push(format!("{i:?}"));
                if seen.len() == 3 {
                    break;
                }
            }
            writeln!(s.stdout(), "{}", seen.join("|")).unwrap();
            0
        }
        "die" => {
            let name = s.args_lossy()[0].clone();
            assert!(s.exit_by_signal(&name, s.args.len() > 1));
            0
        }
        "stop" => {
            let sent = s.stopped("SIGTSTP").unwrap();
            writeln!(s.stdout(), "sent {sent}").unwrap();
            0
        }
        "ignored" => {
            let names: Vec<&str> = s.ignored_signals.iter().map(|n| n.as_str()).collect();
            writeln!(s.stdout(), "{}", names.join(",")).unwrap();
            0
        }
        _ => 127,
    }
}

const COMMANDS: [&str; 7] = ["fdcat", "echo", "cat", "wait", "die", "stop", "ignored"];

fn start(hello: Hello, host: &str) -> (Driver, JoinHandle<()>) {
    let (a, b) = UnixStream::pair().unwrap();
    let host = host.to_owned();
    let t = std::thread::spawn(move || {
        Channel::from_stream(b)
            .host_features(&host)
            .serve(hello, handler)
            .unwrap();
    });
    let mut d = Driver::over(a).unwrap();
    d.timeout = Duration::from_secs(20);
    (d, t)
}

fn all(max_sessions: u32) -> Hello {
    Hello::new(COMMANDS)
        .max_sessions(max_sessions)
        .client_fds_when(|c| c == "fdcat")
        .signals(true)
        .stdin_window(64 * 1024)
}

const HOST: &str = "mux,notices,fds,signals,stdin-window";

fn pipe() -> (File, File) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors.
    unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

/// Reads `r` to its end: returns only once every copy of the write end is closed, which
/// is how these tests see that the worker closed the descriptors it was passed. Fails
/// after 20 s (a descriptor kept open).
fn drained(mut r: File) -> Vec<u8> {
    let end = std::time::Instant::now() + Duration::from_secs(20);
    let mut v = Vec::new();
    loop {
        let mut pfd = libc::pollfd {
            fd: r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polling a descriptor we own.
        unsafe { libc::poll(&mut pfd, 1, 100) };
        if pfd.revents != 0 {
            let mut buf = [0u8; 4096];
            match r.read(&mut buf).unwrap() {
                0 => return v,
                n => v.extend_from_slice(&buf[..n]),
            }
        }
        assert!(
            std::time::Instant::now() < end,
            "a passed descriptor was never closed"
        );
    }
}

fn features(d: &Driver) -> Vec<String> {
    d.hello()["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn extensions_are_named_only_when_both_sides_want_them() {
    let (d, _t) = start(all(4), HOST);
    assert_eq!(
        features(&d),
        [
            "interrupt",
            "mux",
            "notices",
            "fds",
            "signals",
            "stdin-window"
        ]
    );
    let (d, _t) = start(Hello::new(COMMANDS).max_sessions(4), HOST);
    assert_eq!(features(&d), ["interrupt", "mux", "notices"]);
    let (d, _t) = start(all(4), "mux");
    assert_eq!(features(&d), ["interrupt", "mux"]);
}

#[test]
fn a_session_takes_the_client_descriptors_and_answers_t_first() {
    for max in [1, 4] {
        let (mut d, _t) = start(all(max), HOST);
        let (in_r, mut in_w) = pipe();
        let (out_r, out_w) = pipe();
        in_w.write_all(b"through the client's own pipe\n").unwrap();
        drop(in_w);
        let req = Request::new("fdcat", [""; 0])
            .fds(vec![in_r.into(), out_w.into()], "0,1")
            // Any `S` would be held for ever: the session must not ask for stdin.
            .hold_stdin();
        let out = d.run(&req).unwrap();
        drop(req);
        assert_eq!(out.taken, Some(true));
        assert_eq!(out.before_taken, 0);
        assert_eq!(out.code, 0);
        assert_eq!(out.stderr_str(), "copied 30\n");
        assert_eq!(drained(out_r), b"through the client's own pipe\n");
    }
}

#[test]
fn a_command_that_does_not_take_them_declines_and_closes_them() {
    let (mut d, _t) = start(all(4), HOST);
    let (r, w) = pipe();
    let req = Request::new("echo", ["relayed"]).fds(vec![w.into()], "1");
    let out = d.run(&req).unwrap();
    drop(req);
    assert_eq!((out.taken, out.before_taken), (Some(false), 0));
    assert_eq!(out.stdout_str(), "relayed\n");
    assert!(drained(r).is_empty());
}

#[test]
fn a_worker_without_fds_gets_none_and_closes_what_arrives() {
    let (mut d, _t) = start(Hello::new(COMMANDS), HOST);
    let (r, w) = pipe();
    let req = Request::new("fdcat", [""; 0]).fds(vec![w.into()], "1");
    let out = d.run(&req).unwrap();
    drop(req);
    assert_eq!((out.taken, out.code), (None, 3));
    assert!(drained(r).is_empty());
}

#[test]
fn a_map_that_does_not_match_the_descriptors_is_declined() {
    let (mut d, _t) = start(all(1), HOST);
    for (n, map) in [(2, "0,1,2"), (1, "1,0"), (1, "x"), (3, "")] {
        let (r, w) = pipe();
        let fds: Vec<OwnedFd> = (0..n).map(|_| w.try_clone().unwrap().into()).collect();
        drop(w);
        let req = Request::new("fdcat", [""; 0]).fds(fds, map);
        let out = d.run(&req).unwrap();
        drop(req);
        assert_eq!((out.taken, out.code), (Some(false), 3), "{map:?}");
        assert!(drained(r).is_empty());
    }
}

#[test]
fn descriptors_without_a_map_or_on_another_chunk_are_closed() {
    let (mut d, _t) = start(all(4), HOST);
    // No NGW_CLIENT_FDS: closed, and no `t` (nothing to answer).
    let (r, w) = pipe();
    let id = d.next_id();
    let mut raw = bytes::BytesMut::new();
    let chunk = |ty: u8, p: &[u8], out: &mut bytes::BytesMut| {
        ng_proto::codec::encode(ng_proto::ChunkType(ty), p, out)
    };
    chunk(b's', id.to_string().as_bytes(), &mut raw);
    chunk(b'E', format!("NGW_SESSION={id}").as_bytes(), &mut raw);
    chunk(b'C', b"cat", &mut raw);
    // The driver does not know this session; start a tracked one after it instead and
    // check the first ends cleanly by its descriptors being closed.
    d.send_raw(&raw, &[w.as_raw_fd()]).unwrap();
    drop(w);
    assert!(drained(r).is_empty());
    // On a stdin chunk of a running session: closed, and the session goes on.
    let id = d.start(&Request::new("cat", [""; 0]).hold_stdin()).unwrap();
    let (r, w) = pipe();
    let mut raw = bytes::BytesMut::new();
    chunk(b's', id.to_string().as_bytes(), &mut raw);
    chunk(b'0', b"data", &mut raw);
    d.send_raw(&raw, &[w.as_raw_fd()]).unwrap();
    drop(w);
    assert!(drained(r).is_empty());
    d.release_stdin(id).unwrap();
    let out = d.finish(id).unwrap();
    assert_eq!(out.stdout_str(), "data");
}

#[test]
fn a_truncated_control_message_closes_everything_and_declines() {
    let (mut d, _t) = start(all(1), HOST);
    let (r, w) = pipe();
    let fds: Vec<OwnedFd> = (0..8).map(|_| w.try_clone().unwrap().into()).collect();
    drop(w);
    let req = Request::new("fdcat", [""; 0]).fds(fds, "0,1,2");
    let out = d.run(&req).unwrap();
    drop(req);
    assert_eq!((out.taken, out.code), (Some(false), 3));
    assert!(drained(r).is_empty());
}

#[test]
fn concurrent_sessions_each_get_their_own_descriptors() {
    let (mut d, _t) = start(all(8), HOST);
    let mut reqs = Vec::new();
    let mut readers = Vec::new();
    for i in 0..6 {
        let (in_r, mut in_w) = pipe();
        let (out_r, out_w) = pipe();
        in_w.write_all(format!("session {i}").as_bytes()).unwrap();
        drop(in_w);
        reqs.push(Request::new("fdcat", [""; 0]).fds(vec![in_r.into(), out_w.into()], "0,1"));
        reqs.push(Request::new("echo", [format!("plain {i}")]));
        readers.push(out_r);
    }
    let outs = d.run_all(&reqs).unwrap();
    drop(reqs);
    for (i, r) in readers.into_iter().enumerate() {
        assert_eq!(outs[2 * i].taken, Some(true));
        assert_eq!(outs[2 * i + 1].taken, None);
        assert_eq!(outs[2 * i + 1].stdout_str(), format!("plain {i}\n"));
        assert_eq!(drained(r), format!("session {i}").as_bytes());
    }
}

#[test]
fn interrupts_carry_process_signals_and_window_sizes() {
    let (mut d, _t) = start(all(2), HOST);
    let id = d.start(&Request::new("wait", [""; 0])).unwrap();
    d.interrupt(id, "SIGTERM process").unwrap();
    d.interrupt(id, "not an interrupt").unwrap();
    d.interrupt(id, "winsize 120 40 0 0").unwrap();
    d.interrupt(id, "SIGINT").unwrap();
    let out = d.finish(id).unwrap();
    assert_eq!(
        out.stdout_str(),
        "ProcessSignal(\"SIGTERM\")|WindowSize(WinSize { cols: 120, rows: 40, xpixel: 0, ypixel: 0 })|Signal(\"SIGINT\")\n"
    );
}

#[test]
fn a_death_by_signal_is_reported_when_signals_was_negotiated() {
    let (mut d, _t) = start(all(1), HOST);
    let out = d.run(&Request::new("die", ["SIGKILL"])).unwrap();
    assert_eq!(
        (out.code, out.exit.as_slice()),
        (137, &b"137 SIGKILL\n"[..])
    );
    let out = d.run(&Request::new("die", ["SIGSEGV", "core"])).unwrap();
    assert_eq!(out.exit, b"139 SIGSEGV core\n");
    let (mut d, _t) = start(all(1), "mux");
    let out = d.run(&Request::new("die", ["SIGKILL"])).unwrap();
    assert_eq!(out.exit, b"137\n");
}

#[test]
fn stops_are_reported_with_signals_only() {
    let (mut d, _t) = start(all(1), HOST);
    let out = d.run(&Request::new("stop", [""; 0])).unwrap();
    assert_eq!(out.stops, ["SIGTSTP"]);
    assert_eq!(out.stdout_str(), "sent true\n");
    let (mut d, _t) = start(all(1), "");
    let out = d.run(&Request::new("stop", [""; 0])).unwrap();
    assert!(out.stops.is_empty());
    assert_eq!(out.stdout_str(), "sent false\n");
}

#[test]
fn ignored_signals_come_from_the_header() {
    let (mut d, _t) = start(all(1), HOST);
    let req = Request::new("ignored", [""; 0]).env("NGW_SIGIGN", "SIGHUP,bogus,SIGINT");
    assert_eq!(d.run(&req).unwrap().stdout_str(), "SIGHUP,SIGINT\n");
}

#[test]
fn windowed_stdin_streams_in_several_chunks_per_s() {
    let (mut d, _t) = start(all(1), HOST);
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    // The driver answers a windowed `S` with as many `0` chunks as the window holds,
    // splitting its 64 KiB pieces, and fails on a second `S` while one is outstanding
    // in the classic sense.
    let out = d
        .run(&Request::new("cat", [""; 0]).stdin(data.clone()))
        .unwrap();
    assert_eq!(out.stdout.len(), data.len());
    assert_eq!(out.stdout, data);
    let out = d.run(&Request::new("cat", [""; 0])).unwrap();
    assert!(out.stdout.is_empty());
}
