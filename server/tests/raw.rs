//! In-process server tests with raw-byte clients: exact bytes on the wire, limits, timeouts,
//! cancellation and lifecycle, without any client binary.

use ng_server::config::ServerConfig as Config;
use ng_server::{CancelReason, Context, Server, ServerHandle};
use ng_testkit::wire::{decode_all, frame, read_chunk};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

struct TestServer {
    addr: std::net::SocketAddr,
    handle: ServerHandle,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    fn start(config: Config, setup: impl FnOnce(&mut ng_server::ServerBuilder)) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut builder = Server::builder();
        builder.config(config);
        builder.tcp_listener(listener).unwrap();
        builder.nail(
            "args",
            "prints each argument on a line",
            |ctx: &mut Context| {
                for a in ctx.args().to_vec() {
                    ctx.stdout().write_all(&a).unwrap();
                    ctx.stdout().write_all(b"\n").unwrap();
                }
                0
            },
        );
        builder.nail("exit", "exits with its argument", |ctx: &mut Context| {
            ctx.args_lossy()[0].parse().unwrap()
        });
        builder.nail("panic", "panics", |_: &mut Context| -> i32 {
            panic!("boom")
        });
        setup(&mut builder);
        let server = builder.build().unwrap();
        let handle = server.handle();
        let thread = std::thread::spawn(move || server.run());
        Self {
            addr,
            handle,
            thread: Some(thread),
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    fn stop(mut self) {
        self.handle.request_stop();
        self.thread.take().unwrap().join().unwrap().unwrap();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.handle.request_stop();
            let _ = t.join();
        }
    }
}

fn header(command: &str, args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for a in args {
        out.extend(frame(b'A', a));
    }
    out.extend(frame(b'E', b"PATH=/bin"));
    out.extend(frame(b'D', b"/tmp"));
    out.extend(frame(b'C', command.as_bytes()));
    out
}

/// Reads everything until the server closes.
fn read_all(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    out
}

/// Decodes a server's output into (type, payload) pairs.
fn chunks(bytes: &[u8]) -> Vec<(char, Vec<u8>)> {
    decode_all(bytes)
        .into_iter()
        .map(|c| (c.ty as char, c.payload))
        .collect()
}

fn exit_of(out: &[(char, Vec<u8>)]) -> String {
    let exits: Vec<_> = out.iter().filter(|(t, _)| *t == 'X').collect();
    assert_eq!(exits.len(), 1, "exactly one X: {out:?}");
    assert_eq!(out.last().unwrap().0, 'X', "X is last");
    String::from_utf8(exits[0].1.clone()).unwrap()
}

fn stderr_of(out: &[(char, Vec<u8>)]) -> String {
    out.iter()
        .filter(|(t, _)| *t == '2')
        .map(|(_, p)| String::from_utf8_lossy(p).into_owned())
        .collect()
}

fn stdout_of(out: &[(char, Vec<u8>)]) -> Vec<u8> {
    out.iter()
        .filter(|(t, _)| *t == '1')
        .flat_map(|(_, p)| p.clone())
        .collect()
}

fn run(server: &TestServer, bytes: &[u8]) -> Vec<(char, Vec<u8>)> {
    let mut s = server.connect();
    s.write_all(bytes).unwrap();
    chunks(&read_all(&mut s))
}

#[test]
fn version_is_exact_bytes_then_fin() {
    let server = TestServer::start(Config::default(), |_| {});
    let mut s = server.connect();
    s.write_all(&header("ng-version", &[])).unwrap();
    let got = read_all(&mut s);
    let line = format!(
        "NailGun server version {} (ngd)\n",
        env!("CARGO_PKG_VERSION")
    );
    let mut want = frame(b'1', line.as_bytes());
    want.extend(frame(b'X', b"0\n"));
    assert_eq!(got, want);
}

#[test]
fn unknown_command_is_127_with_a_message() {
    let server = TestServer::start(Config::default(), |_| {});
    let out = run(&server, &header("no-such", &[]));
    assert_eq!(exit_of(&out), "127\n");
    let err = stderr_of(&out);
    assert!(err.contains("unknown command 'no-such'"), "{err}");
    assert!(err.contains("ng ng-commands"), "{err}");
}

#[test]
fn header_chunks_in_any_order_with_heartbeats_and_long_args() {
    let server = TestServer::start(Config::default(), |_| {});
    let mut bytes = Vec::new();
    bytes.extend(frame(b'H', b""));
    bytes.extend(frame(b'E', b"NOEQUALS"));
    bytes.extend(frame(b'A', b"first"));
    bytes.extend(frame(b'D', b"/"));
    bytes.extend(frame(b'L', b"long "));
    bytes.extend(frame(b'H', b""));
    bytes.extend(frame(b'L', b"argument"));
    bytes.extend(frame(b'L', b""));
    bytes.extend(frame(b'A', b""));
    bytes.extend(frame(b'A', "é\u{1F600}".as_bytes()));
    bytes.extend(frame(b'Z', b"unknown before C is skipped"));
    bytes.extend(frame(b'C', b"args"));
    let out = run(&server, &bytes);
    assert_eq!(exit_of(&out), "0\n");
    assert_eq!(
        stdout_of(&out),
        "first\nlong argument\n\né\u{1F600}\n".as_bytes()
    );
}

#[test]
fn exit_codes_pass_through_verbatim() {
    let server = TestServer::start(Config::default(), |_| {});
    for code in ["0", "1", "42", "255", "898", "-1"] {
        let out = run(&server, &header("exit", &[code.as_bytes()]));
        assert_eq!(exit_of(&out), format!("{code}\n"));
    }
}

#[test]
fn stdin_is_credit_based_one_s_at_a_time() {
    let server = TestServer::start(Config::default(), |_| {});
    let mut s = server.connect();
    s.write_all(&header("ng-cat", &[])).unwrap();
    let next = |s: &mut TcpStream| {
        let c = read_chunk(s).unwrap().expect("server closed early");
        (c.ty as char, c.payload)
    };
    // The command reads first: one S, and nothing else until we answer it.
    assert_eq!(next(&mut s), ('S', vec![]));
    let mut credits = 0; // S received and not yet answered
    let mut echoed = Vec::new();
    for piece in [&b"hello "[..], b"world"] {
        s.write_all(&frame(b'0', piece)).unwrap();
        let want = echoed.len() + piece.len();
        // Wait for the echo and the next S, in either order.
        while echoed.len() < want || credits == 0 {
            match next(&mut s) {
                ('1', p) => echoed.extend(p),
                ('S', _) => credits += 1,
                other => panic!("unexpected {other:?}"),
            }
            assert!(credits <= 1, "two S without a 0 between them");
        }
        credits -= 1;
    }
    assert_eq!(echoed, b"hello world");
    s.write_all(&frame(b'.', b"")).unwrap();
    assert_eq!(next(&mut s), ('X', b"0\n".to_vec()));
}

#[test]
fn eager_stdin_without_credit_is_accepted() {
    let server = TestServer::start(Config::default(), |_| {});
    let mut bytes = header("ng-cat", &[]);
    bytes.extend(frame(b'0', b"abc"));
    bytes.extend(frame(b'0', b"def"));
    bytes.extend(frame(b'.', b""));
    let out = run(&server, &bytes);
    assert_eq!(stdout_of(&out), b"abcdef");
    assert_eq!(exit_of(&out), "0\n");
}

#[test]
fn protocol_errors_get_a_message_and_76() {
    let server = TestServer::start(Config::default(), |_| {});
    // A length over the limit, refused before buffering.
    let mut bytes = Vec::new();
    bytes.extend([0xff, 0xff, 0xff, 0xff, b'A']);
    let out = run(&server, &bytes);
    assert_eq!(exit_of(&out), "76\n");
    assert!(stderr_of(&out).contains("larger than the limit"));
    // Stdin after end of stdin.
    let mut bytes = header("ng-cat", &[]);
    bytes.extend(frame(b'.', b""));
    bytes.extend(frame(b'0', b"late"));
    let out = run(&server, &bytes);
    assert_eq!(exit_of(&out), "76\n");
    // A header chunk after C.
    let mut bytes = header("ng-cat", &[]);
    bytes.extend(frame(b'A', b"late"));
    let out = run(&server, &bytes);
    assert_eq!(exit_of(&out), "76\n");
    assert!(stderr_of(&out).contains("unexpected chunk"));
    // The server still serves.
    assert_eq!(exit_of(&run(&server, &header("ng-true", &[]))), "0\n");
    assert_eq!(server.handle.stats().counters().protocol_errors, 3);
}

#[test]
fn header_timeout_refuses_a_silent_client() {
    let mut config = Config::default();
    config.header_timeout_ms = 200;
    let server = TestServer::start(config, |_| {});
    let mut s = server.connect();
    s.write_all(&frame(b'A', b"x")).unwrap();
    let t0 = Instant::now();
    let out = chunks(&read_all(&mut s));
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(exit_of(&out), "76\n");
    assert!(stderr_of(&out).contains("no command"));
}

#[test]
fn a_panicking_command_gets_1_and_the_server_survives() {
    let server = TestServer::start(Config::default(), |_| {});
    let out = run(&server, &header("panic", &[]));
    assert_eq!(exit_of(&out), "1\n");
    assert!(
        stderr_of(&out).contains("panicked: boom"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(exit_of(&run(&server, &header("ng-true", &[]))), "0\n");
}

fn waiting_nail(
    log: Arc<Mutex<Vec<CancelReason>>>,
) -> impl Fn(&mut Context) -> i32 + Send + Sync + 'static {
    move |ctx: &mut Context| {
        ctx.stdout().write_all(b"started\n").unwrap();
        if ctx.wait_cancelled(Duration::from_secs(20)) {
            log.lock().unwrap().push(ctx.cancelled().unwrap());
            3
        } else {
            0
        }
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn client_disconnect_cancels_the_command() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let server = TestServer::start(Config::default(), move |b| {
        b.nail("wait", "waits for cancellation", waiting_nail(l));
    });
    let mut s = server.connect();
    s.write_all(&header("wait", &[])).unwrap();
    let mut first = [0u8; 13];
    s.read_exact(&mut first).unwrap();
    drop(s);
    wait_for("cancellation", || !log.lock().unwrap().is_empty());
    assert_eq!(log.lock().unwrap()[0], CancelReason::ClientGone);
    wait_for("the run to be counted", || {
        server
            .handle
            .stats()
            .commands()
            .iter()
            .any(|c| c.command == "wait" && c.running == 0)
    });
}

#[test]
fn heartbeat_silence_cancels_the_command() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let mut config = Config::default();
    config.heartbeat_timeout_ms = 300;
    let server = TestServer::start(config, move |b| {
        b.nail("wait", "waits for cancellation", waiting_nail(l));
    });
    let mut s = server.connect();
    s.write_all(&header("wait", &[])).unwrap();
    wait_for("cancellation", || !log.lock().unwrap().is_empty());
    assert_eq!(log.lock().unwrap()[0], CancelReason::HeartbeatTimeout);
    drop(s);
}

#[test]
fn heartbeats_keep_a_long_command_alive() {
    let mut config = Config::default();
    config.heartbeat_timeout_ms = 300;
    let server = TestServer::start(config, |b| {
        b.nail(
            "sleep",
            "sleeps 1s unless cancelled",
            |ctx: &mut Context| {
                if ctx.wait_cancelled(Duration::from_secs(1)) {
                    9
                } else {
                    0
                }
            },
        );
    });
    let mut s = server.connect();
    s.write_all(&header("sleep", &[])).unwrap();
    let hb = s.try_clone().unwrap();
    let beat = std::thread::spawn(move || {
        let mut hb = hb;
        for _ in 0..15 {
            std::thread::sleep(Duration::from_millis(100));
            if hb.write_all(&frame(b'H', b"")).is_err() {
                break;
            }
        }
    });
    let out = chunks(&read_all(&mut s));
    assert_eq!(exit_of(&out), "0\n");
    beat.join().unwrap();
}

#[test]
fn a_client_that_never_reads_is_paused_not_buffered() {
    let written = Arc::new(AtomicU64::new(0));
    let w = written.clone();
    let server = TestServer::start(Config::default(), move |b| {
        b.nail(
            "flood",
            "writes until cancelled",
            move |ctx: &mut Context| {
                let block = vec![b'x'; 64 << 10];
                while ctx.stdout().write_all(&block).is_ok() {
                    w.fetch_add(block.len() as u64, Ordering::Relaxed);
                }
                0
            },
        );
    });
    let mut s = server.connect();
    s.write_all(&header("flood", &[])).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let a = written.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    let b = written.load(Ordering::Relaxed);
    assert_eq!(a, b, "the writer must be blocked");
    // Bounded: the high-water mark plus what the kernel buffers hold.
    assert!(
        b < 64 << 20,
        "wrote {b} bytes into a client that reads nothing"
    );
    s.shutdown(Shutdown::Both).unwrap();
}

#[test]
fn connections_over_the_limit_are_refused_cleanly() {
    let mut config = Config::default();
    config.max_connections = 2;
    let server = TestServer::start(config, |_| {});
    let mut held: Vec<TcpStream> = (0..2).map(|_| server.connect()).collect();
    for h in &mut held {
        h.write_all(&frame(b'A', b"x")).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let out = run(&server, &header("ng-true", &[]));
    assert_eq!(exit_of(&out), "69\n");
    assert!(stderr_of(&out).contains("too many connections"));
    drop(held);
    wait_for("a free slot", || {
        let mut s = server.connect();
        s.write_all(&header("ng-true", &[])).unwrap();
        exit_of(&chunks(&read_all(&mut s))) == "0\n"
    });
}

#[test]
fn aliases_can_be_added_and_used() {
    let server = TestServer::start(Config::default(), |_| {});
    let out = run(&server, &header("ng-alias", &[b"t", b"ng-true"]));
    assert_eq!(exit_of(&out), "0\n");
    assert_eq!(exit_of(&run(&server, &header("t", &[]))), "0\n");
    let out = run(&server, &header("ng-alias", &[]));
    assert_eq!(stdout_of(&out), b"t\tng-true\n");
    let out = run(&server, &header("ng-alias", &[b"x", b"missing"]));
    assert_eq!(exit_of(&out), "1\n");
}

#[test]
fn stats_json_is_valid_and_counts_runs() {
    let server = TestServer::start(Config::default(), |_| {});
    for _ in 0..3 {
        run(&server, &header("ng-true", &[]));
    }
    let out = run(&server, &header("ng-stats", &[b"--json"]));
    let text = String::from_utf8(stdout_of(&out)).unwrap();
    assert!(text.contains("\"command\":\"ng-true\""), "{text}");
    assert!(text.contains("\"runs\":3"), "{text}");
}

#[test]
fn ng_stop_answers_zero_then_the_server_exits() {
    let server = TestServer::start(Config::default(), |_| {});
    let out = run(&server, &header("ng-stop", &[]));
    assert_eq!(exit_of(&out), "0\n");
    let TestServer { thread, .. } = &mut { server };
    let t = thread.take().unwrap();
    wait_for("exit", || t.is_finished());
    t.join().unwrap().unwrap();
}

#[test]
fn stop_waits_for_running_commands_then_cancels_with_143() {
    let mut config = Config::default();
    config.shutdown_grace_ms = 300;
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let server = TestServer::start(config, move |b| {
        b.nail("wait", "waits for cancellation", waiting_nail(l));
    });
    let mut s = server.connect();
    s.write_all(&header("wait", &[])).unwrap();
    let mut first = [0u8; 13];
    s.read_exact(&mut first).unwrap();
    let t0 = Instant::now();
    server.handle.request_stop();
    let out = chunks(&read_all(&mut s));
    assert!(t0.elapsed() >= Duration::from_millis(250));
    assert_eq!(exit_of(&out), "143\n");
    assert!(stderr_of(&out).contains("shutting down"));
    server.stop();
}

#[test]
fn two_hundred_concurrent_clients_all_succeed() {
    let server = Arc::new(TestServer::start(Config::default(), |_| {}));
    let threads: Vec<_> = (0..200)
        .map(|i| {
            let server = server.clone();
            std::thread::spawn(move || {
                let payload = format!("client {i}\n");
                let mut bytes = header("ng-cat", &[]);
                bytes.extend(frame(b'0', payload.as_bytes()));
                bytes.extend(frame(b'.', b""));
                let out = run(&server, &bytes);
                assert_eq!(exit_of(&out), "0\n");
                assert_eq!(stdout_of(&out), payload.as_bytes());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn commands_blocked_on_stdin_do_not_starve_others() {
    // Regression: with a small fixed pool, a few commands waiting on interactive stdin
    // starved every other command. The pool grows on demand.
    let server = TestServer::start(Config::default(), |_| {});
    let blocked: Vec<TcpStream> = (0..10)
        .map(|_| {
            let mut s = server.connect();
            s.write_all(&header("ng-cat", &[])).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let out = run(&server, &header("ng-yes", &[b"10"]));
    assert_eq!(exit_of(&out), "0\n");
    assert_eq!(stdout_of(&out), b"y\ny\ny\ny\ny\n");
    drop(blocked);
}

/// The Python reference client's wire habits (read from `nailgun-client/py/ng.py`, which
/// no package registry ships): `L` pieces first with no terminator, every chunk's header
/// and payload in two separate sends, a heartbeat every 0.5 s from right after `C`, one
/// `readline()` per `S` (so stdin chunks of any size), and `int()` on the exit payload.
#[test]
fn the_python_clients_wire_habits_are_served() {
    let server = TestServer::start(Config::default(), |_| {});
    let mut s = server.connect();
    s.set_nodelay(false).unwrap();
    let send = |s: &mut TcpStream, ty: u8, payload: &[u8]| {
        let c = frame(ty, payload);
        s.write_all(&c[..5]).unwrap();
        s.write_all(&c[5..]).unwrap();
    };
    send(&mut s, b'L', b"file ");
    send(&mut s, b'L', b"contents");
    send(&mut s, b'A', b"second");
    send(&mut s, b'E', b"NAILGUN_TTY_0=0");
    send(&mut s, b'D', b"/tmp");
    send(&mut s, b'C', b"args");
    let out = chunks(&read_all(&mut s));
    assert_eq!(stdout_of(&out), b"file contents\nsecond\n");
    assert_eq!(exit_of(&out).trim().parse::<i32>().unwrap(), 0);

    // Stdin: one whole line per S, longer than the C client's 2 KiB, heartbeats in between.
    let mut s = server.connect();
    send(&mut s, b'C', b"ng-cat");
    let line = [b'x'; 10_000];
    let mut reader = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut lines_sent = 0;
        let mut echoed = 0usize;
        loop {
            let c = read_chunk(&mut reader)
                .unwrap()
                .expect("server closed early");
            match c.ty {
                b'S' if lines_sent < 3 => {
                    send(&mut s, b'H', b"");
                    send(&mut s, b'0', &line);
                    lines_sent += 1;
                }
                b'S' => send(&mut s, b'.', b""),
                b'1' => echoed += c.payload.len(),
                b'X' => return (echoed, c.payload),
                other => panic!("unexpected chunk {other}"),
            }
        }
    });
    let (echoed, exit) = writer.join().unwrap();
    assert_eq!(echoed, 30_000);
    assert_eq!(exit, b"0\n");
}

#[test]
fn the_client_umask_extension_is_never_seen_by_commands() {
    let server = TestServer::start(Config::default(), |b| {
        b.nail("env-names", "prints env names", |ctx: &mut Context| {
            let names: Vec<String> = ctx
                .env()
                .iter()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect();
            let _ = writeln!(ctx.stdout(), "{}", names.join(","));
            0
        });
    });
    let mut bytes = frame(b'E', b"NGD_CLIENT_UMASK=0027");
    bytes.extend(frame(b'E', b"KEEP=1"));
    bytes.extend(frame(b'C', b"env-names"));
    let out = run(&server, &bytes);
    assert_eq!(stdout_of(&out), b"KEEP\n");
}
