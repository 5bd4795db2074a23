//! The client scenarios, unchanged, against `ngd`.
//!
//! The scenario bodies of the other modules (written against the reference Java server)
//! run here against `ngd-testbed`, which is the `ng-server` library with the test nails
//! built in (`tests/src/bin/ngd-testbed.rs`); `ngd_builtins` runs the ones the built-ins
//! suffice for (`ng-version`, and `ng-cat` as `Echo`) against the real `ngd` binary. Each
//! runs with both clients and over both transports. One test-bed server, listening on TCP
//! and on a Unix socket, is shared by the scenarios that leave it as they found it.
//!
//! Where `ngd` differs from the reference by design, the scenario here says so: it cancels
//! a command whose client stopped heartbeating, and the C client's 2 KiB stdin chunks
//! over TCP are fast (`TCP_QUICKACK`), so the C client gets the full megabyte over TCP too.

use std::time::Duration;

use ng_testkit::{read_chunk, Chunk, Stream};
use ng_tests::data::MIB;
use ng_tests::{both_clients, eqnice, Client, Flavor, NgdServer, Server, Transport};

use crate::stdin::Source;
use crate::{exit, failures, header, heartbeat, invocation, stdin, version};

fn testbed() -> &'static NgdServer {
    NgdServer::shared(Flavor::Testbed)
}

/// Scenarios written for the Java server, run on the shared test-bed over both transports:
/// `name => scenario, extra args;` becomes the tests `name::ours` and `name::c_client`,
/// each calling `scenario(server, client, extra args)` on TCP and then on the Unix socket.
macro_rules! on_testbed {
    ($($(#[$meta:meta])* $name:ident => $scenario:path $(, $arg:expr)*;)*) => {
        $(both_clients! {
            $(#[$meta])*
            fn $name(client) {
                for transport in Transport::ALL {
                    $scenario(&testbed().at(transport), client $(, $arg)*);
                }
            }
        })*
    };
}

on_testbed! {
    ng_version => version::version_matches_reference;
    args_arrive_intact => header::args_arrive_intact;
    env_arrives_intact => header::env_arrives_intact;
    cwd_arrives_intact => header::cwd_arrives_intact;
    /// 1 MiB through the test-bed's `Echo` from a pipe, over TCP and the Unix socket.
    stdin_pipe_1mib => mib_round_trips, Source::Pipe;
    /// 1 MiB through the test-bed's `Echo` from a regular file, over TCP and Unix.
    stdin_file_1mib => mib_round_trips, Source::File;
    open_stdin_is_not_waited_for => stdin::open_stdin_is_not_waited_for;
    exit_codes_wrap_to_8_bits => exit::codes_wrap_to_8_bits;
    symlink_named_ng_version => invocation::symlink_runs_the_version_nail;
    symlink_named_after_a_nail => invocation::symlink_forwards_every_argument;
    server_from_environment => invocation::server_from_environment;
}

both_clients! {
    /// Arguments, environment values and the working directory are bytes, not strings
    /// (nailgun.md §8 item 6): invalid UTF-8 arrives byte for byte. The Java server
    /// decodes UTF-8, so only `ngd` can show this.
    fn non_utf8_bytes_arrive_intact(client) {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt as _;
        let args: [&[u8]; 3] = [b"\xff\xfe", b"caf\xe9", b"ok"];
        let value: &[u8] = b"latin-1 \xe9t\xe9 \x80";
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().join(OsStr::from_bytes(b"d\xefr"));
        std::fs::create_dir(&cwd).unwrap();
        for transport in Transport::ALL {
            let at = testbed().at(transport);
            let out = client
                .cmd()
                .nail(&at, ng_tests::Nail::Dump)
                .args(args.iter().map(|a| OsStr::from_bytes(a)))
                .env("NG_T_BYTES", OsStr::from_bytes(value))
                .cwd(&cwd)
                .run();
            out.assert_success();
            let (got_args, got_env, got_cwd) = raw_dump(&out.stdout);
            assert_eq!(got_args, args, "over {transport:?}\n{out:?}");
            assert_eq!(
                got_env.iter().find(|(k, _)| k == b"NG_T_BYTES").map(|(_, v)| v.as_slice()),
                Some(value),
                "over {transport:?}\n{out:?}"
            );
            assert_eq!(
                got_cwd.as_deref(),
                Some(cwd.as_os_str().as_bytes()),
                "over {transport:?}\n{out:?}"
            );
        }
    }
}

/// The `Dump` output as raw bytes: arguments, environment entries, working directory.
type RawDump = (Vec<Vec<u8>>, Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>);

fn raw_dump(stdout: &[u8]) -> RawDump {
    let unhex = |h: &str| -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
            .collect()
    };
    let mut dump: RawDump = Default::default();
    for line in String::from_utf8_lossy(stdout).lines() {
        match line.split_once(':') {
            Some(("A", h)) => dump.0.push(unhex(h)),
            Some(("E", entry)) => {
                let (k, v) = entry.split_once(':').expect("E:<name>:<value>");
                dump.1.push((unhex(k), unhex(v)));
            }
            Some(("D", h)) => dump.2 = Some(unhex(h)),
            _ => panic!("malformed Dump line {line:?}"),
        }
    }
    dump
}

/// How long a megabyte of stdin may take through `ngd`, even from the C client over TCP.
///
/// Against the Java server the C client needs ~20 s for it over TCP (a delayed ACK per
/// 2 KiB chunk); `ngd` acknowledges at once (`TCP_QUICKACK`), which takes ~50 ms here. A
/// bound of a few seconds leaves room for a loaded machine and still catches the stall.
const MIB_STDIN_BOUND: Duration = Duration::from_secs(5);

/// 1 MiB from `source` round trips through `server`'s `Echo`, within [`MIB_STDIN_BOUND`].
pub fn mib_round_trips(server: &dyn Server, client: Client, source: Source) {
    let started = std::time::Instant::now();
    stdin::echo_round_trips(server, client, source, MIB);
    let took = started.elapsed();
    eprintln!(
        "1 MiB from a {source:?} with {client} via {}: {took:?}",
        server.address()
    );
    assert!(
        took < MIB_STDIN_BOUND,
        "1 MiB of stdin from a {source:?} took {took:?} with {client} on {}: is the server \
         still acknowledging at once (TCP_QUICKACK)?",
        server.describe()
    );
}

both_clients! {
    fn stdin_empty(client) {
        for transport in Transport::ALL {
            stdin::echo_round_trips(&testbed().at(transport), client, Source::Pipe, 0);
            stdin::echo_round_trips(&testbed().at(transport), client, Source::File, 0);
        }
    }
}

both_clients! {
    fn exit_codes_0_1_42_255(client) {
        for transport in Transport::ALL {
            for code in [0, 1, 42, 255] {
                exit::exit_code_passes_through(&testbed().at(transport), client, code);
            }
        }
    }
}

both_clients! {
    fn relative_unix_socket_path(client) {
        invocation::relative_unix_socket_path(&testbed().at(Transport::Unix), client);
    }
}

both_clients! {
    /// The server is SIGKILLed while `Sleep 30000` runs: the client exits 227 with the
    /// output it already had. A server of its own per transport.
    fn server_killed_mid_command_gives_227(client) {
        for transport in Transport::ALL {
            let server = NgdServer::builder(Flavor::Testbed).transport(transport).start();
            failures::server_killed_mid_command(&server, client);
        }
    }
}

/// The heartbeat timeout of the strict server: as in `heartbeat`, twice the C client's
/// heartbeat interval and shorter than the 3 s nail.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(2000);

fn strict_testbed() -> &'static NgdServer {
    static SERVER: std::sync::OnceLock<NgdServer> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| {
        NgdServer::builder(Flavor::Testbed)
            .tcp()
            .unix()
            .heartbeat_timeout(HEARTBEAT_TIMEOUT)
            .start()
    })
}

both_clients! {
    /// `Sleep 3000` outlives the 2 s heartbeat timeout and completes, on both transports
    /// at once (the two runs overlap to save three seconds).
    fn three_second_nail_with_heartbeats(client) {
        let server = strict_testbed();
        std::thread::scope(|scope| {
            for transport in Transport::ALL {
                scope.spawn(move || {
                    heartbeat::three_second_nail_completes(&server.at(transport), client);
                });
            }
        });
    }
}

both_clients! {
    /// A command waiting 3.5 s for stdin (a slow producer, a user typing) is not taken
    /// for a gone client: the client heartbeats while its stdin is idle, on both
    /// transports at once.
    fn slow_stdin_with_heartbeats(client) {
        let server = strict_testbed();
        std::thread::scope(|scope| {
            for transport in Transport::ALL {
                scope.spawn(move || {
                    let at = server.at(transport);
                    let out = client
                        .cmd()
                        .nail(&at, ng_tests::Nail::Echo)
                        .stdin_later(Duration::from_millis(3500), "late\n")
                        .run();
                    out.assert_success();
                    eqnice!("late\n", out.stdout_text(), "on {}\n{out:?}", at.describe());
                });
            }
        });
    }
}

/// Harness check with teeth for the tests above: a client that never heartbeats is
/// dropped after the heartbeat timeout. `ngd` cancels the command and closes the
/// connection without an `X` (the client is presumed gone), where the reference server
/// lets the nail finish and report `client connected: false`.
#[test]
fn a_silent_client_is_cut_off() {
    let server = strict_testbed();
    for transport in Transport::ALL {
        let at = server.at(transport);
        let started = std::time::Instant::now();
        let chunks = silent_session(at.address(), &at.command(ng_tests::Nail::Sleep), "3000")
            .unwrap_or_else(|e| panic!("{e}\n{}", server.log()));
        let took = started.elapsed();
        let stdout: Vec<u8> = chunks
            .iter()
            .filter(|c| c.ty == b'1')
            .flat_map(|c| c.payload.clone())
            .collect();
        eqnice!(
            "sleeping 3000\n",
            String::from_utf8_lossy(&stdout),
            "over {transport:?}, chunks: {chunks:?}"
        );
        assert!(
            !chunks.iter().any(|c| c.ty == b'X'),
            "a silent client got an exit code over {transport:?}: {chunks:?}"
        );
        assert!(
            took >= HEARTBEAT_TIMEOUT - Duration::from_millis(100)
                && took < Duration::from_millis(2900),
            "the silent session over {transport:?} ended after {took:?}, expected about \
             {HEARTBEAT_TIMEOUT:?}: {chunks:?}\n{}",
            server.log()
        );
    }
}

/// Sends `command arg` and nothing more (no heartbeats, no stdin), and returns every chunk
/// until the server closes the connection.
fn silent_session(
    address: &ng_tests::Address,
    command: &str,
    arg: &str,
) -> std::io::Result<Vec<Chunk>> {
    use std::io::Write as _;
    let mut stream = Stream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut request = Chunk::new(b'A', arg).encode();
    request.extend(Chunk::new(b'D', "/").encode());
    request.extend(Chunk::new(b'C', command).encode());
    stream.write_all(&request)?;
    let mut received = Vec::new();
    loop {
        match read_chunk(&mut stream) {
            Ok(Some(chunk)) => received.push(chunk),
            Ok(None) => return Ok(received),
            // A reset also ends the session.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(received),
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{e}; got {received:?}"),
                ))
            }
        }
    }
}
