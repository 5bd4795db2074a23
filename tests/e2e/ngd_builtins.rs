//! The real `ngd` binary and its built-ins, with the C client and with our `ng`.
//!
//! `ng-version`; binary data through `ng-cat` from pipes and files; 64 MiB from `ng-yes`;
//! unknown commands (127); a symlink named `ng-true`; 200 concurrent clients; a client
//! SIGKILLed while it streams (the server cancels the command, closes the session and
//! gets back to its baseline of open descriptors); `ng-stop`; `ngd status` and `ngd stop`.
//! Exit codes passing through are checked with the test-bed in `ngd_compat`.

use std::fs::File;
use std::io::{Read, Seek as _, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use ng_tests::client::{symlink, ClientCmd, DEFAULT_ENV};
use ng_tests::{
    bins, both_clients, data, eqnice, Address, Client, Flavor, Nail, NgdServer, Output, Server,
    Transport,
};

use crate::ngd_compat::mib_round_trips;
use crate::stdin::Source;

fn ngd() -> &'static NgdServer {
    NgdServer::shared(Flavor::Ngd)
}

both_clients! {
    /// `ng-version` prints `NailGun server version <v> (ngd)`, and our client prints
    /// exactly what the C client prints.
    fn ng_version(client) {
        for transport in Transport::ALL {
            crate::version::version_matches_reference(&ngd().at(transport), client);
        }
    }
}

both_clients! {
    /// 1 MiB of binary data through `ng-cat` from a pipe, byte for byte, TCP and Unix.
    fn ng_cat_1mib_from_a_pipe(client) {
        for transport in Transport::ALL {
            mib_round_trips(&ngd().at(transport), client, Source::Pipe);
        }
    }
}

both_clients! {
    /// 1 MiB of binary data through `ng-cat` from a regular file, TCP and Unix.
    fn ng_cat_1mib_from_a_file(client) {
        for transport in Transport::ALL {
            mib_round_trips(&ngd().at(transport), client, Source::File);
        }
    }
}

/// What `ng-yes 64M` must print: 64 MiB of `y\n`.
const YES_BYTES: u64 = 64 << 20;

both_clients! {
    /// `ng-yes 64M` arrives complete: exactly 64 MiB, all `y\n`, exit 0 (the output is
    /// checked as it streams, not held in memory).
    fn ng_yes_64m_arrives_complete(client) {
        let server = ngd().at(Transport::Unix);
        let mut child = client_command(client, server.address())
            .args(["ng-yes", "64M"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the client");
        let mut stdout = child.stdout.take().unwrap();
        let counter = thread::spawn(move || {
            let mut buf = vec![0u8; 256 << 10];
            let (mut total, mut first_bad) = (0u64, None);
            loop {
                let n = match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                for (i, &b) in buf[..n].iter().enumerate() {
                    let offset = total + i as u64;
                    let want = if offset % 2 == 0 { b'y' } else { b'\n' };
                    if b != want && first_bad.is_none() {
                        first_bad = Some((offset, b));
                    }
                }
                total += n as u64;
            }
            (total, first_bad)
        });
        let mut stderr = String::new();
        let mut err_pipe = child.stderr.take().unwrap();
        let status = wait_with_deadline(&mut child, Duration::from_secs(60), "ng-yes 64M");
        let _ = err_pipe.read_to_string(&mut stderr);
        let (total, first_bad) = counter.join().unwrap();
        assert_eq!(status.code(), Some(0), "{status:?}, stderr {stderr:?}");
        assert_eq!(total, YES_BYTES, "bytes received; stderr {stderr:?}");
        assert_eq!(first_bad, None, "first byte that is not y\\n (offset, byte)");
        eqnice!("", stderr);
    }
}

both_clients! {
    /// An unknown command exits 127 with one line on stderr naming the command and how
    /// to list the commands.
    fn unknown_command_gives_127(client) {
        for transport in Transport::ALL {
            let out = client
                .cmd()
                .server(ngd().at(transport).address())
                .args(["no-such-command", "arg"])
                .run();
            out.assert_code(127);
            eqnice!("", out.stdout_text(), "{out:?}");
            let stderr = out.stderr_text();
            assert!(
                stderr.starts_with("ngd: ")
                    && stderr.ends_with('\n')
                    && stderr.lines().count() == 1
                    && stderr.contains("no-such-command")
                    && stderr.contains("ng ng-commands"),
                "expected one line `ngd: ... no-such-command ... ng ng-commands`\n{out:?}"
            );
        }
    }
}

both_clients! {
    /// A symlink to the client named `ng-true` runs `ng-true`: exit 0, no output.
    fn symlink_named_ng_true(client) {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("ng-true");
        symlink(&client.bin(), &link);
        for transport in Transport::ALL {
            let out = ClientCmd::new(client.name(), &link)
                .server(ngd().at(transport).address())
                .run();
            out.assert_success();
            eqnice!("", out.stdout_text(), "{out:?}");
            eqnice!("", out.stderr_text(), "{out:?}");
        }
    }
}

/// How many clients run at once in [`concurrent_clients`].
const CONCURRENT: usize = 200;

both_clients! {
    /// 200 clients at once, half `ng-true` and half `ng-cat`, alternating TCP and Unix:
    /// all succeed with the right output. The `ng-cat` clients' stdin is held back until
    /// every client has started, so their sessions really are open together.
    fn concurrent_clients(client) {
        raise_fd_limit();
        let server = NgdServer::both(Flavor::Ngd);
        let started = Instant::now();
        let mut clients: Vec<Concurrent> = Vec::with_capacity(CONCURRENT);
        for i in 0..CONCURRENT {
            let transport = if i % 4 < 2 { Transport::Tcp } else { Transport::Unix };
            let cat = i % 2 == 1;
            let input = if cat { data::binary(3000 + i) } else { Vec::new() };
            let stdout = tempfile::tempfile().unwrap();
            let stderr = tempfile::tempfile().unwrap();
            let mut cmd = client_command(client, server.address_on(transport));
            cmd.arg(if cat { "ng-cat" } else { "ng-true" })
                .stdin(if cat { Stdio::piped() } else { Stdio::null() })
                .stdout(stdout.try_clone().unwrap())
                .stderr(stderr.try_clone().unwrap());
            let mut child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("start client {i} of {CONCURRENT}: {e}"));
            let stdin = child.stdin.take();
            clients.push(Concurrent { i, child, stdin, input, stdout, stderr, transport });
        }
        let spawned = started.elapsed();
        for c in &mut clients {
            if let Some(mut stdin) = c.stdin.take() {
                // The pipe holds it all (3 KiB); the client reads it when ngd asks.
                stdin.write_all(&c.input).expect("feed an ng-cat client");
            }
        }
        let deadline = started + Duration::from_secs(45);
        let mut failures = Vec::new();
        for c in &mut clients {
            let left = deadline.saturating_duration_since(Instant::now());
            let status = wait_with_deadline(&mut c.child, left, "a concurrent client");
            let stdout = read_back(&mut c.stdout);
            let stderr = read_back(&mut c.stderr);
            if status.code() != Some(0) || stdout != c.input {
                failures.push(format!(
                    "client {} ({:?}, {}): {status:?}, {} bytes of stdout (expected {}), \
                     stderr {:?}",
                    c.i,
                    c.transport,
                    if c.input.is_empty() { "ng-true" } else { "ng-cat" },
                    stdout.len(),
                    c.input.len(),
                    String::from_utf8_lossy(&stderr),
                ));
            }
        }
        let took = started.elapsed();
        eprintln!("{CONCURRENT} concurrent {client} clients: spawned in {spawned:?}, done in {took:?}");
        assert!(
            failures.is_empty(),
            "{} of {CONCURRENT} clients failed:\n{}\n{}",
            failures.len(),
            failures.join("\n"),
            server.log()
        );
    }
}

/// Raises this process's soft limit on open files toward its hard limit: two
/// [`concurrent_clients`] tests at once hold about a thousand descriptors (output files and
/// stdin pipes), the common default soft limit.
fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return;
        }
        let want = limit.rlim_max.min(16384);
        if limit.rlim_cur < want {
            limit.rlim_cur = want;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// One of the [`concurrent_clients`].
struct Concurrent {
    i: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    input: Vec<u8>,
    stdout: File,
    stderr: File,
    transport: Transport,
}

both_clients! {
    /// A client SIGKILLed while `ng-cat` streams (stdin from `/dev/zero`): the server
    /// cancels the command, closes the session, returns to its baseline of open
    /// descriptors, and keeps serving others. Over TCP and Unix.
    fn client_killed_mid_ng_cat(client) {
        let server = NgdServer::both(Flavor::Ngd);
        // Warm up: the first sessions start the pool's threads, and so on.
        for transport in Transport::ALL {
            client.cmd().nail(&server.at(transport), Nail::Echo).stdin_bytes("warm").run().assert_success();
        }
        let baseline = settled_fd_count(&server);
        for transport in Transport::ALL {
            let mut victim = client_command(client, server.address_on(transport))
                .arg("ng-cat")
                .stdin(File::open("/dev/zero").unwrap())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start the client");
            wait_running(&server, "ng-cat", 1, Duration::from_secs(10));
            thread::sleep(Duration::from_millis(200));
            assert!(
                victim.try_wait().unwrap().is_none(),
                "the {client} client streaming /dev/zero through ng-cat over {transport:?} \
                 exited on its own: {:?}",
                victim.wait()
            );
            victim.kill().unwrap();
            let status = victim.wait().unwrap();
            assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");

            let killed = Instant::now();
            wait_running(&server, "ng-cat", 0, Duration::from_secs(5));
            server.wait_fd_count(baseline, Duration::from_secs(5));
            eprintln!(
                "{client} over {transport:?}: ng-cat cancelled and session closed {:?} after \
                 SIGKILL (baseline {baseline} fds)",
                killed.elapsed()
            );
            assert!(server.is_running(), "the server died\n{}", server.log());

            // Still serving.
            crate::version::version_matches_reference(&server.at(transport), client);
            crate::stdin::echo_round_trips(&server.at(transport), client, Source::Pipe, 10_000);
        }
    }
}

both_clients! {
    /// `ng-stop` answers 0, then the server exits 0 and removes its Unix socket file.
    fn ng_stop_stops_the_server(client) {
        for transport in Transport::ALL {
            let server = NgdServer::both(Flavor::Ngd);
            let socket = unix_path(&server);
            assert!(socket.exists(), "no socket file {}", socket.display());
            let out = client.cmd().server(server.address_on(transport)).arg("ng-stop").run();
            out.assert_success();
            eqnice!("", out.stdout_text(), "{out:?}");
            eqnice!("", out.stderr_text(), "{out:?}");
            let status = server
                .wait_exit(Duration::from_secs(10))
                .unwrap_or_else(|| panic!("the server still runs 10 s after ng-stop\n{}", server.log()));
            assert_eq!(status.code(), Some(0), "server {status:?}\n{}", server.log());
            assert!(!socket.exists(), "{} is still there after ng-stop\n{}", socket.display(), server.log());
        }
    }
}

/// The grace period of [`ng_stop_gives_running_commands_a_grace_period`].
const GRACE: Duration = Duration::from_millis(1000);

both_clients! {
    /// `ng-stop` while commands run (on the test-bed, with a 1 s `shutdown_grace_ms`): a
    /// command that ends within the grace period completes normally; one that does not is
    /// cancelled with 143 and one `ngd: ` line on stderr; then the server exits 0.
    fn ng_stop_gives_running_commands_a_grace_period(client) {
        let server = NgdServer::builder(Flavor::Testbed)
            .unix()
            .tcp()
            .config_line(format!("shutdown_grace_ms = {}", GRACE.as_millis()))
            .start();
        let sleep = |transport, ms: &str| {
            client
                .cmd()
                .nail(&server.at(transport), Nail::Sleep)
                .arg(ms)
                .timeout(Duration::from_secs(20))
                .spawn()
        };
        let short = sleep(Transport::Unix, "400");
        let long = sleep(Transport::Tcp, "30000");
        short.wait_for_stdout("sleeping", Duration::from_secs(10));
        long.wait_for_stdout("sleeping", Duration::from_secs(10));
        let stopped = Instant::now();
        let out = client.cmd().server(server.address_on(Transport::Unix)).arg("ng-stop").run();
        out.assert_success();

        let out = short.wait();
        out.assert_success();
        eqnice!("sleeping 400\nslept, client connected: true\n", out.stdout_text(), "{out:?}");

        let out = long.wait();
        let took = stopped.elapsed();
        out.assert_code(143);
        eqnice!("sleeping 30000\n", out.stdout_text(), "{out:?}");
        let stderr = out.stderr_text();
        assert!(
            stderr.starts_with("ngd: ") && stderr.lines().count() == 1,
            "expected one `ngd: ` line on stderr\n{out:?}"
        );
        assert!(
            took >= GRACE - Duration::from_millis(50) && took < GRACE + Duration::from_secs(3),
            "cancelled {took:?} after ng-stop, with a grace period of {GRACE:?}\n{out:?}"
        );
        let status = server
            .wait_exit(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("the server still runs after ng-stop\n{}", server.log()));
        assert_eq!(status.code(), Some(0), "server {status:?}\n{}", server.log());
    }
}

/// `ngd status` and `ngd stop --server ADDR` against a running server, over each
/// transport: status shows the server's pid and its commands, stop ends it (exit 0,
/// socket removed), and status then says no server is running.
#[test]
fn ngd_status_and_stop() {
    for transport in Transport::ALL {
        let server = NgdServer::both(Flavor::Ngd);
        let at = server.at(transport);
        let addr = at.address().to_string();
        Client::Ours
            .cmd()
            .nail(&at, Nail::Version)
            .run()
            .assert_success();

        let out = ngd_cli(&["status", "--server", &addr]);
        out.assert_success();
        let text = out.stdout_text();
        assert!(
            text.contains(&format!("pid {}", server.pid())) && text.contains("ng-version"),
            "`ngd status` shows neither the pid {} nor ng-version\n{out:?}",
            server.pid()
        );
        let out = ngd_cli(&["status", "--json", "--server", &addr]);
        out.assert_success();
        let json = out.stdout_text().replace(' ', "");
        assert!(
            json.trim_start().starts_with('{')
                && json.contains(&format!("\"pid\":{}", server.pid())),
            "`ngd status --json` lacks \"pid\":{}\n{out:?}",
            server.pid()
        );

        let socket = unix_path(&server);
        let out = ngd_cli(&["stop", "--server", &addr]);
        out.assert_success();
        let status = server
            .wait_exit(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("the server still runs after `ngd stop`\n{}", server.log()));
        assert_eq!(
            status.code(),
            Some(0),
            "server {status:?}\n{}",
            server.log()
        );
        assert!(!socket.exists(), "{} survived `ngd stop`", socket.display());

        let out = ngd_cli(&["status", "--server", &addr]);
        out.assert_code(1);
        assert!(
            out.stderr_text().starts_with("ngd: no server is running"),
            "{out:?}"
        );
    }
}

/// Runs the `ngd` binary with `args` (a management subcommand).
fn ngd_cli(args: &[&str]) -> Output {
    ClientCmd::new("ngd", bins::ngd()).args(args).run()
}

/// The server's Unix socket path.
fn unix_path(server: &NgdServer) -> std::path::PathBuf {
    match server.address_on(Transport::Unix) {
        Address::Unix(path) => path.clone(),
        Address::Tcp(_) => unreachable!(),
    }
}

/// A bare `Command` for `client` naming `address`, with the harness's environment, for
/// tests that need their own stdio plumbing.
fn client_command(client: Client, address: &Address) -> Command {
    let mut cmd = Command::new(client.bin());
    cmd.env_clear()
        .envs(DEFAULT_ENV.iter().copied())
        .current_dir("/")
        .args(address.client_args());
    cmd
}

/// Waits for `child`, killing it and failing the test after `timeout`.
#[track_caller]
fn wait_with_deadline(
    child: &mut Child,
    timeout: Duration,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait for a client") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} (pid {}) did not finish within {timeout:?} and was killed",
                child.id()
            );
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// Everything written to `file` from the start.
fn read_back(file: &mut File) -> Vec<u8> {
    let mut bytes = Vec::new();
    file.rewind().unwrap();
    file.read_to_end(&mut bytes).unwrap();
    bytes
}

/// The server's descriptor count once it has not changed for 200 ms (connections from
/// finished clients are closed a moment after they exit).
fn settled_fd_count(server: &NgdServer) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = server.fd_count();
    let mut since = Instant::now();
    while Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
        let now = server.fd_count();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= Duration::from_millis(200) {
            return now;
        }
    }
    panic!(
        "the server's descriptor count never settled\n{}",
        server.log()
    );
}

/// How many runs of `command` are in progress, from `ngd status` (its `running`
/// column); 0 if the command has never run.
fn running(server: &NgdServer, command: &str) -> u64 {
    let addr = server.address_on(Transport::Unix).to_string();
    let out = ngd_cli(&["status", "--server", &addr]);
    out.assert_success();
    let text = out.stdout_text();
    let header: Vec<&str> = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("command"))
        .unwrap_or_else(|| panic!("no table in `ngd status`\n{out:?}"))
        .split_whitespace()
        .collect();
    let column = header
        .iter()
        .position(|&h| h == "running")
        .unwrap_or_else(|| panic!("no `running` column in `ngd status`\n{out:?}"));
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&command))
        .map_or(0, |fields| {
            fields[column]
                .parse()
                .unwrap_or_else(|_| panic!("`running` of {command} is not a number\n{out:?}"))
        })
}

/// Waits until `ngd status` shows `want` runs of `command` in progress.
#[track_caller]
fn wait_running(server: &NgdServer, command: &str, want: u64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let now = running(server, command);
        if now == want {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "{command} still has {now} runs in progress after {timeout:?}, expected {want}\n{}",
                server.log()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
}
