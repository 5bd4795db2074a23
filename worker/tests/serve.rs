//! The worker runtime against the test driver: sessions, stdin credit, `mux`, pings,
//! interrupts, notices and quit.

use ngw::testing::{Driver, Request};
use ngw::{Channel, Hello, Interrupt, Session};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;
use std::time::Duration;

fn handler(s: &mut Session) -> i32 {
    match s.command.as_str() {
        "cat" => {
            let mut data = Vec::new();
            s.stdin().read_to_end(&mut data).unwrap();
            s.stdout().write_all(&data).unwrap();
            0
        }
        "echo" => {
            let line = s.args_lossy().join(" ");
            writeln!(s.stdout(), "{line}").unwrap();
            writeln!(s.stderr(), "cwd={} umask={:?}", s.cwd.display(), s.umask).unwrap();
            s.args.len() as i32
        }
        "sleep" => {
            let ms: u64 = s.args_lossy()[0].parse().unwrap();
            std::thread::sleep(Duration::from_millis(ms));
            writeln!(s.stdout(), "slept {ms}").unwrap();
            0
        }
        "wait" => match s.interrupts().recv() {
            Ok(Interrupt::Signal(name)) => {
                writeln!(s.stdout(), "got {name}").unwrap();
                130
            }
            Ok(Interrupt::Hangup) | Err(_) => 129,
            Ok(other) => {
                writeln!(s.stdout(), "got {other:?}").unwrap();
                2
            }
        },
        "notice" => {
            s.notice(ngw::NoticeKind::Fallback, "ran cold");
            0
        }
        "leave" => {
            // A reader left behind after the session ends must see end of file.
            let mut stdin = s.take_stdin();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = stdin.read_to_end(&mut buf);
                let _ = tx.send(buf.len());
            });
            LEFT.lock().unwrap().replace(rx);
            0
        }
        "panic" => panic!("boom"),
        _ => 127,
    }
}

static LEFT: std::sync::Mutex<Option<std::sync::mpsc::Receiver<usize>>> =
    std::sync::Mutex::new(None);

fn start(max_sessions: u32, host: &str) -> (Driver, JoinHandle<()>) {
    let (a, b) = UnixStream::pair().unwrap();
    let host = host.to_owned();
    let t = std::thread::spawn(move || {
        let hello = Hello::new(["cat", "echo", "sleep", "wait", "notice", "panic", "leave"])
            .max_sessions(max_sessions);
        Channel::from_stream(b)
            .host_features(&host)
            .serve(hello, handler)
            .unwrap();
    });
    (Driver::over(a).unwrap(), t)
}

#[test]
fn hello_lists_commands_and_features() {
    let (d, _t) = start(8, "mux,notices");
    let h = d.hello();
    assert_eq!(h["protocol"], 1);
    assert_eq!(h["commands"][0], "cat");
    assert_eq!(h["max_sessions"], 8);
    assert!(h["features"].as_array().unwrap().iter().any(|f| f == "mux"));
    assert!(h["features"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "notices"));
}

#[test]
fn no_mux_unless_the_host_supports_it() {
    let (d, _t) = start(8, "");
    assert_eq!(d.hello()["max_sessions"], 1);
    assert!(!d.hello()["features"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "mux"));
}

#[test]
fn stdin_reaches_the_command_through_credit() {
    let (mut d, _t) = start(1, "");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let out = d
        .run(&Request::new("cat", [""; 0]).stdin(data.clone()))
        .unwrap();
    assert_eq!(out.code, 0);
    assert_eq!(out.stdout, data);
}

#[test]
fn header_arrives_as_sent() {
    let (mut d, _t) = start(1, "");
    let out = d
        .run(&Request::new("echo", ["a", "b c"]).cwd("/tmp").env("X", "1"))
        .unwrap();
    assert_eq!(out.stdout_str(), "a b c\n");
    assert_eq!(out.stderr_str(), "cwd=/tmp umask=Some(18)\n");
    assert_eq!(out.code, 2);
    let again = d.run(&Request::new("echo", ["z"])).unwrap();
    assert_eq!(again.stdout_str(), "z\n");
}

#[test]
fn mux_runs_sessions_concurrently() {
    let (mut d, _t) = start(32, "mux");
    let reqs: Vec<_> = (0..32)
        .map(|i| Request::new("sleep", [format!("{}", 200 - i * 5)]))
        .collect();
    let t0 = std::time::Instant::now();
    let outs = d.run_all(&reqs).unwrap();
    // 32 sessions of up to 200 ms each: concurrent, so far less than their sum (6 s).
    assert!(t0.elapsed() < Duration::from_secs(3));
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.stdout_str(), format!("slept {}\n", 200 - i * 5));
    }
}

#[test]
fn ping_is_answered_while_sessions_run() {
    let (mut d, _t) = start(4, "mux");
    let id = d.start(&Request::new("sleep", ["300"])).unwrap();
    d.ping(b"\x00\x01").unwrap();
    assert_eq!(d.finish(id).unwrap().code, 0);
}

#[test]
fn interrupts_reach_their_session() {
    let (mut d, _t) = start(4, "mux");
    let a = d.start(&Request::new("wait", [""; 0])).unwrap();
    let b = d.start(&Request::new("wait", [""; 0])).unwrap();
    d.interrupt(b, "SIGINT").unwrap();
    d.interrupt(a, "hangup").unwrap();
    assert_eq!(d.finish(b).unwrap().stdout_str(), "got SIGINT\n");
    let oa = d.finish(a).unwrap();
    assert_eq!((oa.code, oa.stdout.len()), (129, 0));
}

#[test]
fn notices_go_to_the_host_when_it_takes_them() {
    let (mut d, _t) = start(1, "notices");
    d.run(&Request::new("notice", [""; 0])).unwrap();
    assert_eq!(d.notices.len(), 1);
    assert_eq!(d.notices[0]["kind"], "fallback");
    assert_eq!(d.notices[0]["message"], "ran cold");
}

#[test]
fn a_panic_is_exit_1_with_a_message() {
    let (mut d, _t) = start(1, "");
    let out = d.run(&Request::new("panic", [""; 0])).unwrap();
    assert_eq!(out.code, 1);
    assert!(out.stderr_str().contains("panicked"));
    assert_eq!(
        d.run(&Request::new("echo", ["ok"])).unwrap().stdout_str(),
        "ok\n"
    );
}

#[test]
fn quit_ends_the_worker() {
    let (d, t) = start(1, "");
    d.quit().unwrap();
    t.join().unwrap();
}

#[test]
fn a_stdin_left_behind_reads_end_of_file_when_the_session_ends() {
    let (mut d, _t) = start(1, "");
    let mut req = Request::new("leave", [""; 0]);
    req.hold_stdin = true;
    assert_eq!(d.run(&req).unwrap().code, 0);
    let rx = LEFT.lock().unwrap().take().unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 0);
    // The channel is still in step: the next session runs.
    assert_eq!(
        d.run(&Request::new("echo", ["ok"])).unwrap().stdout_str(),
        "ok\n"
    );
}
