//! Plugin commands, end to end. The real `ngd` binary runs Python ngw workers
//! (`tests/fixtures/python/plugin_worker.py`, the SDK from `sdk/python/src`), and our `ng`
//! and the reference C client run their commands, in-process and in fork mode.
//!
//! This module: what one invocation sees and produces — arguments, environment, working
//! directory and umask (the client's from `ng`, which reports it; ngd's own for the C
//! client); 1 MiB of binary stdin; fd-level output and subprocesses; exit
//! codes; isolation between fork-mode runs; 32 concurrent invocations on a pool of 4.
//! Worker failures, hangs, killed clients, reloads and stopping are in [`lifecycle`]
//! (`plugins_lifecycle.rs`), the aws CLI in [`aws`] (`plugins_aws.rs`), flask in [`flask`]
//! (`plugins_flask.rs`).
//!
//! Every test has its own server ([`PluginServer`]), which on drop stops `ngd` and fails
//! the test if any process it started (workers, session children, their children) is
//! left.

#[path = "plugins_aws.rs"]
mod aws;
#[path = "plugins_examples.rs"]
mod examples;
#[path = "plugins_flask.rs"]
mod flask;
#[path = "plugins_lifecycle.rs"]
mod lifecycle;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::time::Duration;

use ng_tests::client::ClientCmd;
use ng_tests::data::{self, MIB};
use ng_tests::plugins::{unhex, Json, JsonExt as _, Plugin, PluginServer, TAG_VAR};
use ng_tests::{assert_bytes_eq, both_clients, eqnice, Client, Output, Transport};

/// A server with the fixture worker as plugin `w` (its commands learned from the hello).
pub fn worker_server() -> PluginServer {
    PluginServer::start(vec![Plugin::worker::<&str>("w", &[])])
}

/// The one JSON line a fixture command printed.
#[track_caller]
pub fn json_line(out: &Output) -> Json {
    serde_json::from_str(&out.stdout_text())
        .unwrap_or_else(|e| panic!("not one JSON line: {e}\n{out:?}"))
}

/// A process's umask, from `/proc/<pid>/status`.
pub fn umask_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .expect("a Umask: line in /proc/<pid>/status");
    u32::from_str_radix(line.trim(), 8).unwrap()
}

/// Arguments that a careless relay would mangle: empty ones, non-ASCII, spaces, a newline,
/// and bytes that are not UTF-8 at all.
fn tricky_args() -> Vec<OsString> {
    vec![
        OsString::from(""),
        OsString::from("plain"),
        OsString::from("héllo wörld ✓ 😀"),
        OsString::from("two  spaces"),
        OsString::from(""),
        OsString::from("line one\nline two"),
        OsString::from("-x"),
        OsString::from_vec(vec![0xff, 0xfe, b'!', 0x80]),
    ]
}

/// What CPython adds to `env` as it starts (LC_CTYPE, when it coerces a C locale).
fn python_startup_sets(env: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let out = std::process::Command::new(ng_tests::plugins::python())
        .env_clear()
        .envs(
            env.iter()
                .map(|(k, v)| (OsStr::from_bytes(k), OsStr::from_bytes(v))),
        )
        .args([
            "-c",
            "import os, sys; sys.stdout.buffer.write(os.environb.get(b'LC_CTYPE', b''))",
        ])
        .output()
        .expect("run python");
    let value = out.stdout;
    if value.is_empty() || env.contains_key(b"LC_CTYPE".as_slice()) {
        return Vec::new();
    }
    vec![(b"LC_CTYPE".to_vec(), value)]
}

/// Hex-encoded `name -> value` from the fixture, as raw bytes.
fn env_bytes(json: &Json) -> BTreeMap<Vec<u8>, Vec<u8>> {
    json.get("env")
        .and_then(Json::as_object)
        .unwrap_or_else(|| panic!("no env object in {json}"))
        .iter()
        .map(|(k, v)| (unhex(k), unhex(v.as_str().unwrap())))
        .collect()
}

/// Runs `command` (`info` in-process or `finfo` in fork mode) with tricky arguments and
/// environment from a non-ASCII directory and checks what it saw.
fn check_fidelity(server: &PluginServer, client: Client, transport: Transport, command: &str) {
    let cwd = tempfile::Builder::new()
        .prefix("cwd é ✓ ")
        .tempdir()
        .unwrap();
    let cwd_path = cwd.path().canonicalize().unwrap();
    let args = tricky_args();
    let cmd = server
        .cmd_on(client, transport)
        .cwd(&cwd_path)
        .env("CLIENT_VAR", "é ✓ ünïcode")
        .env("EMPTY_VALUE", "")
        .env("HAS_EQUALS", "a=b=c")
        .env("RAW_BYTES", std::ffi::OsStr::from_bytes(b"\xff\xfe-raw"))
        // A client cannot forge ngd's session metadata.
        .env("NGW_SESSION", "forged")
        .env("NGW_UMASK", "0777")
        .env("NGW_CLIENT_PID", "1")
        .arg(command)
        .args(&args);
    // What the command must see: exactly the client's environment, minus NGW_* (and the
    // NAILGUN_* entries the C client synthesises, which the client's own environment
    // does not have).
    let mut expected_env: BTreeMap<Vec<u8>, Vec<u8>> = cmd
        .env_vars()
        .iter()
        .filter(|(k, _)| !k.as_bytes().starts_with(b"NGW_"))
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    if command == "finfo" {
        // A forked command sees os.environ as a cold interpreter started with that
        // environment has it: with no locale set, CPython sets LC_CTYPE (PEP 538).
        expected_env.extend(python_startup_sets(&expected_env));
    }
    let out = cmd.run();
    let context = format!("{command} with {client} over {transport:?}\n{out:?}");
    out.assert_success();
    eqnice!("", out.stderr_text(), "{context}");
    let json = json_line(&out);

    let got_args: Vec<Vec<u8>> = json
        .get("args")
        .and_then(Json::as_array)
        .unwrap()
        .iter()
        .map(|a| unhex(a.as_str().unwrap()))
        .collect();
    let want_args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    assert_eq!(want_args, got_args, "arguments\n{context}");

    let got_env = env_bytes(&json);
    if got_env != expected_env {
        let lossy = |m: &BTreeMap<Vec<u8>, Vec<u8>>| {
            m.iter()
                .map(|(k, v)| {
                    format!(
                        "{}={}\n",
                        String::from_utf8_lossy(k),
                        String::from_utf8_lossy(v)
                    )
                })
                .collect::<String>()
        };
        eqnice!(
            lossy(&expected_env),
            lossy(&got_env),
            "the command's environment is not the client's\n{context}"
        );
        panic!("environments differ in bytes only\n{context}");
    }

    assert_bytes_eq!(
        cwd_path.as_os_str().as_bytes(),
        unhex(json.str_at("cwd")),
        "working directory\n{context}"
    );
    let forked = command.starts_with('f');
    assert_eq!(
        Some(&Json::Bool(forked)),
        json.get("forked"),
        "forked\n{context}"
    );
    if !forked {
        let session = json.str_at("session");
        assert!(
            !session.is_empty() && session.bytes().all(|b| b.is_ascii_digit()),
            "NGW_SESSION is ngd's decimal id, not the client's {session:?}\n{context}"
        );
    }
}

/// The umask a client runs with in [`check_umask`]; ngd runs with the test's (0022).
const CLIENT_UMASK: u32 = 0o027;

/// Runs `command` from a client whose umask is [`CLIENT_UMASK`] (through `sh -c 'umask
/// 027; exec client ...'`), with a forged `NGW_UMASK` in its environment: our `ng` reports
/// its umask (`NGD_CLIENT_UMASK`), so the command gets it, as a cold run would; the C
/// client does not, so the command gets ngd's own umask. Never the forged one.
fn check_umask(server: &PluginServer, client: Client, transport: Transport, command: &str) {
    let out = ClientCmd::new(client.name(), "/bin/sh")
        .arg("-c")
        .arg(format!("umask {CLIENT_UMASK:04o} && exec \"$0\" \"$@\""))
        .arg(client.bin())
        .server(server.address(transport))
        .env(TAG_VAR, server.tag())
        .env("NGW_UMASK", "0777")
        .arg(command)
        .run();
    out.assert_success();
    let ngd_umask = umask_of(server.pid());
    assert_ne!(
        ngd_umask, CLIENT_UMASK,
        "the test needs ngd's umask to differ"
    );
    let expected = match client {
        Client::Ours => CLIENT_UMASK,
        Client::CClient => ngd_umask,
    };
    let json = json_line(&out);
    assert_eq!(
        Some(u64::from(expected)),
        json.get("umask").and_then(Json::as_u64),
        "umask {expected:04o} expected ({client} with umask {CLIENT_UMASK:04o}, ngd with \
         {ngd_umask:04o}, NGW_UMASK=0777 forged)\n{out:?}"
    );
    assert!(
        !env_bytes(&json).contains_key(b"NGD_CLIENT_UMASK".as_slice()),
        "NGD_CLIENT_UMASK reached the command\n{out:?}"
    );
}

both_clients! {
    /// Arguments (empty, non-ASCII, not UTF-8), the environment (exactly the client's,
    /// without `NGW_*`/`NAILGUN_*`; forged `NGW_*` entries are dropped), the working
    /// directory and the umask (the client's when it reports it, as `ng` does; else
    /// ngd's own) reach in-process and fork-mode commands, over TCP and the Unix socket.
    fn args_env_cwd_umask_reach_the_command(client) {
        let server = worker_server();
        for transport in Transport::ALL {
            for command in ["info", "finfo"] {
                check_fidelity(&server, client, transport, command);
                check_umask(&server, client, transport, command);
            }
        }
    }
}

/// How stdin is attached in [`stdin_round_trip`].
#[derive(Clone, Copy, Debug)]
enum Source {
    Pipe,
    File,
}

fn stdin_round_trip(
    server: &PluginServer,
    client: Client,
    transport: Transport,
    command: &str,
    source: Source,
) {
    let input = data::binary(MIB);
    let file = tempfile::NamedTempFile::new().unwrap();
    let cmd = server
        .cmd_on(client, transport)
        .arg(command)
        .timeout(Duration::from_secs(60));
    let cmd = match source {
        Source::Pipe => cmd.stdin_bytes(input.clone()),
        Source::File => {
            std::fs::write(file.path(), &input).unwrap();
            cmd.stdin_file(file.path())
        }
    };
    let out = cmd.run();
    let context =
        format!("1 MiB from a {source:?} through {command} with {client} over {transport:?}");
    out.assert_success();
    eqnice!("", out.stderr_text(), "{context}\n{out:?}");
    assert_bytes_eq!(input, out.stdout, "{context}, took {:?}", out.elapsed);
    eprintln!("{context}: {:?}", out.elapsed);
}

both_clients! {
    /// 1 MiB of binary stdin comes back byte for byte through a fork-mode `cat` (`fcat`)
    /// and an in-process one (`cat`), from a pipe and from a regular file (Unix socket;
    /// over TCP too for our client — the C client's TCP stdin waits on delayed ACKs).
    fn stdin_1mib_round_trips(client) {
        let server = worker_server();
        let mut transports = vec![Transport::Unix];
        if client == Client::Ours {
            transports.push(Transport::Tcp);
        }
        for transport in transports {
            for command in ["fcat", "cat"] {
                for source in [Source::Pipe, Source::File] {
                    stdin_round_trip(&server, client, transport, command, source);
                }
            }
        }
    }
}

both_clients! {
    /// Output written at fd level (`os.write(1/2)`) and by a subprocess (`sh -c 'echo sub;
    /// echo err >&2'`) reaches the client's stdout and stderr, each on its own stream; an
    /// in-process command's `ctx.stdout`/`ctx.stderr` too.
    fn fd_level_and_subprocess_output(client) {
        let server = worker_server();
        for transport in Transport::ALL {
            let out = server.cmd_on(client, transport).arg("fout").run();
            out.assert_success();
            eqnice!("fd 1\nsub\nfd 1 again\n", out.stdout_text(), "{out:?}");
            eqnice!("fd 2\nerr\n", out.stderr_text(), "{out:?}");

            let out = server.cmd_on(client, transport).arg("out").run();
            out.assert_success();
            eqnice!("to stdout\nstdout again\n", out.stdout_text(), "{out:?}");
            eqnice!("to stderr\n", out.stderr_text(), "{out:?}");
        }
    }
}

/// Checks a traceback on stderr: Python's header, the exception last, and no frame of the
/// SDK's (it shows the command's frames only, as a cold run would).
#[track_caller]
fn assert_traceback(out: &Output, last_line: &str) {
    let stderr = out.stderr_text();
    assert!(
        stderr.starts_with("Traceback (most recent call last):\n")
            && stderr.ends_with(&format!("{last_line}\n"))
            && stderr.contains("plugin_worker.py")
            && !stderr.contains("/ngw/"),
        "expected a traceback of the command's frames ending in {last_line:?}\n{out:?}"
    );
}

both_clients! {
    /// Exit codes, fork mode and in-process: 0, 3, `sys.exit("msg")` (the message on
    /// stderr, 1), an uncaught exception (its traceback on stderr, 1), and a command
    /// killed by SIGKILL (137). An in-process command that SIGKILLs its worker gets 137 and
    /// ngd's message, and the pool replaces the worker.
    fn exit_codes(client) {
        let server = worker_server();
        let run = |args: &[&str]| server.cmd_on(client, Transport::Tcp).args(args).run();
        for command in ["fexit", "exit"] {
            let out = run(&[command, "0"]);
            out.assert_code(0);
            eqnice!("before\n", out.stdout_text(), "{out:?}");
            eqnice!("", out.stderr_text(), "{out:?}");

            let out = run(&[command, "3"]);
            out.assert_code(3);
            eqnice!("before\n", out.stdout_text(), "{out:?}");
            eqnice!("", out.stderr_text(), "{out:?}");

            let out = run(&[command, "msg"]);
            out.assert_code(1);
            eqnice!("before\n", out.stdout_text(), "{out:?}");
            let message = if command == "fexit" { "fork message\n" } else { "in-process message\n" };
            eqnice!(message, out.stderr_text(), "{out:?}");

            let out = run(&[command, "raise"]);
            out.assert_code(1);
            eqnice!("before\n", out.stdout_text(), "{out:?}");
            let last = if command == "fexit" {
                "KeyError: 'missing'"
            } else {
                "ZeroDivisionError: integer division or modulo by zero"
            };
            assert_traceback(&out, last);
        }

        // Fork mode: the session child dies of SIGKILL; the worker reports 128 + 9, as a
        // death by signal that our `ng` re-raises (the stock client exits 137).
        let out = run(&["fexit", "kill"]);
        if client == Client::Ours {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out:?}");
        } else {
            out.assert_code(137);
        }
        eqnice!("before\n", out.stdout_text(), "{out:?}");
        eqnice!("", out.stderr_text(), "{out:?}");

        // In-process: the worker itself dies during the session.
        let worker = run(&["pid"]);
        worker.assert_success();
        let out = run(&["exit", "kill"]);
        out.assert_code(137);
        let stderr = out.stderr_text();
        assert!(
            stderr.starts_with("ngd: worker for 'exit' died during the command")
                && stderr.contains("signal 9")
                && stderr.ends_with('\n')
                && stderr.lines().count() == 1,
            "expected one `ngd: worker for 'exit' died during the command (killed by signal \
             9...)` line\n{out:?}"
        );
        // A new worker serves the next invocation.
        let again = run(&["pid"]);
        again.assert_success();
        assert_ne!(worker.stdout_text(), again.stdout_text(), "the dead worker's pid again");
        run(&["exit", "0"]).assert_success();
    }
}

both_clients! {
    /// Fork mode isolates runs: a global, an environment variable and the umask set by one
    /// run are not seen by the next.
    fn fork_mode_runs_are_isolated(client) {
        let server = worker_server();
        for value in ["first", "second", "third"] {
            let out = server.cmd(client).args(["fglobal", value]).run();
            out.assert_success();
            let json = json_line(&out);
            assert_eq!(Some(&Json::Null), json.get("previous"), "a global leaked\n{out:?}");
            assert_eq!(Some(&Json::Null), json.get("seen_env"), "os.environ leaked\n{out:?}");
        }
        let out = server.cmd(client).arg("finfo").run();
        out.assert_success();
        assert!(
            !env_bytes(&json_line(&out)).contains_key(b"FIXTURE_LEAK".as_slice()),
            "os.environ leaked into a later run\n{out:?}"
        );
    }
}

/// How many invocations run at once in [`concurrent_invocations`].
const CONCURRENT: usize = 32;
/// The pool they share.
const POOL: usize = 4;

both_clients! {
    /// 32 invocations at once on a pool of 4 workers (queue 32): all succeed with their
    /// own output, served by at most 4 workers, and the pool counts 32 sessions.
    fn concurrent_invocations(client) {
        let server = PluginServer::start(vec![Plugin::worker::<&str>("w", &[])
            .set("min_workers", POOL)
            .set("max_workers", POOL)
            .set("queue", CONCURRENT)]);
        server.wait_plugin("w", Duration::from_secs(20), |r| r.u64_at("idle") == POOL as u64);
        let running: Vec<_> = (0..CONCURRENT)
            .map(|i| {
                let transport = if i % 2 == 0 { Transport::Tcp } else { Transport::Unix };
                server
                    .cmd_on(client, transport)
                    .args(["fwork", &format!("job-{i}"), "0.2"])
                    .timeout(Duration::from_secs(60))
                    .spawn()
            })
            .collect();
        let mut workers = std::collections::BTreeSet::new();
        for (i, r) in running.into_iter().enumerate() {
            let out = r.wait();
            out.assert_success();
            eqnice!("", out.stderr_text(), "{out:?}");
            let text = out.stdout_text();
            let prefix = format!("job-{i} worker ");
            let worker = text
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix('\n'))
                .unwrap_or_else(|| panic!("expected `{prefix}<pid>`\n{out:?}"));
            workers.insert(worker.to_string());
        }
        assert!(
            workers.len() <= POOL,
            "{} workers served the invocations, the pool has {POOL}: {workers:?}",
            workers.len()
        );
        let report = server.plugin_report("w").expect("plugin w in ng-stats");
        assert_eq!(report.u64_at("sessions"), CONCURRENT as u64, "{report}");
        assert_eq!(report.u64_at("queued"), 0, "{report}");
        assert_eq!(report.u64_at("restarts"), 0, "{report}");
    }
}
