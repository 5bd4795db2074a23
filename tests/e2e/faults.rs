//! Fault injection for plugin workers, and `ngd` killed with SIGKILL.
//!
//! Every scenario runs the real `ngd` with misbehaving workers from `tests/fixtures/faults/`
//! (`raw_worker.py` speaks ngw by hand, so it breaks the protocol exactly where told;
//! `sdk_worker.py` uses the SDK) and checks three things besides the fault itself: the
//! reason shows in `ng-stats --json` and/or `ngd`'s log, other clients keep working, and at
//! the end nothing `ngd` started is still running (see `ng_tests::faults::Census`).
//!
//! * here: faults before a worker is ready, and between sessions: a crash before the
//!   hello, a crash loop (backoff, then disabled), lying hellos, a slow handshake, ignored
//!   pings;
//! * `faults_session.rs`: faults during a session: death after half a chunk, chunks a
//!   worker must never send, an ignored interrupt, a 100 MiB stderr flood;
//! * `faults_leftovers.rs`: commands that leave processes behind, and `kill -9` of `ngd`
//!   with a restart on the same socket.
//!
//! docs/reliability.md, "Plugin fault injection", is the matrix of these results.

#[path = "faults_leftovers.rs"]
mod leftovers;
#[path = "faults_session.rs"]
mod session;

use std::path::Path;
use std::time::Duration;

use ng_tests::faults::{
    cpu_share, disabled_reason, last_failure, poll, raw_plugin, running, starts, state,
    stop_and_check, wait_log, Census,
};
use ng_tests::plugins::{Json, JsonExt as _, Plugin, PluginServer};
use ng_tests::{eqnice, Client, Output};

/// Runs `args` with our client over the Unix socket.
#[track_caller]
fn run(server: &PluginServer, args: &[&str]) -> Output {
    server.run(Client::Ours, args)
}

/// Waits for plugin `name` to be disabled and returns its report.
#[track_caller]
fn wait_disabled(server: &PluginServer, name: &str, timeout: Duration) -> Json {
    server.wait_plugin(name, timeout, |r| state(r) == "disabled")
}

/// A client of a disabled plugin's `command` gets 126 and `ngd: command 'X' could not
/// start: <reason>`, and the reason is the one `ng-stats --json` shows.
#[track_caller]
fn assert_refused(server: &PluginServer, command: &str, report: &Json) {
    let out = run(server, &[command]);
    out.assert_code(126);
    eqnice!("", out.stdout_text(), "{out:?}");
    eqnice!(
        format!(
            "ngd: command '{command}' could not start: {}\n",
            disabled_reason(report)
        ),
        out.stderr_text(),
        "{out:?}"
    );
}

/// ngd still serves: a built-in, and the healthy raw plugin's `command` (an `ok`).
#[track_caller]
fn assert_others_work(server: &PluginServer, ok_command: &str) {
    run(server, &["ng-version"]).assert_success();
    let out = run(server, &[ok_command]);
    out.assert_success();
    assert!(out.stdout_text().starts_with("ok "), "{out:?}");
}

/// The `--starts` file of a test, in a directory the test owns.
fn starts_file(dir: &Path, name: &str) -> String {
    dir.join(name).to_string_lossy().into_owned()
}

/// Workers that exit before their hello, with a status and killed by a signal: after
/// `max_restarts` failed starts each plugin is disabled, with a reason that says how the
/// worker ended and names its log, in `ng-stats --json` (`status.reason`, `last_failure`)
/// and in ngd's log; clients get 126 with that reason; no further start is tried; a
/// healthy plugin and the built-ins keep working.
#[test]
fn crash_before_hello_disables_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let exits = starts_file(dir.path(), "exits");
    let kills = starts_file(dir.path(), "kills");
    let exiting = raw_plugin("exits", &["--starts", &exits, "--exit-before-hello", "3"])
        .commands(&["exits"])
        .set("restart_backoff_ms", 20)
        .set("max_restarts", 2);
    let killed = raw_plugin("killed", &["--starts", &kills, "--kill-before-hello"])
        .commands(&["killed"])
        .set("restart_backoff_ms", 20)
        .set("max_restarts", 2);
    let healthy = raw_plugin("healthy", &["--prefix", "h-"]);
    let names = [
        exiting.name().to_string(),
        killed.name().to_string(),
        healthy.name().to_string(),
    ];
    let server = PluginServer::start(vec![exiting, killed, healthy]);
    let census = Census::new(&server, &names);

    let exits_report = wait_disabled(&server, &names[0], Duration::from_secs(20));
    let kills_report = wait_disabled(&server, &names[1], Duration::from_secs(20));
    for (report, how, name) in [
        (&exits_report, "exited with status 3", &names[0]),
        (&kills_report, "killed by signal 9", &names[1]),
    ] {
        let log = server.log_path(name);
        let expected = format!(
            "worker {how} before its hello; see {}",
            log.to_string_lossy()
        );
        eqnice!(
            format!("{expected} (2 failures in a row)"),
            disabled_reason(report),
            "{report}"
        );
        eqnice!(expected, last_failure(report), "{report}");
        assert_eq!(report.u64_at("idle") + report.u64_at("busy"), 0, "{report}");
        wait_log(
            &server,
            &format!("disabled after 2 consecutive failures: {expected}"),
            Duration::from_secs(5),
        );
        // The restart's own log line says why the worker is started again.
        wait_log(
            &server,
            &format!("worker started: restart after 1 failure(s) in a row: {expected}"),
            Duration::from_secs(5),
        );
    }
    assert_refused(&server, "exits", &exits_report);
    assert_refused(&server, "killed", &kills_report);
    assert!(
        server
            .plugin_log(&names[0])
            .contains("exiting with 3 before the hello"),
        "the worker's own words are not in its log:\n{}",
        server.plugin_log(&names[0])
    );
    // Disabled means no more attempts, and every start was counted. (How many starts a
    // plugin gets before it is disabled is `crash_loop_backs_off_then_disables`'s business:
    // here a worker's death can race its replacement's start.)
    for (file, name) in [(&exits, &names[0]), (&kills, &names[1])] {
        let counted = |r: &Json| {
            r.u64_at("starting") == 0
                && r.u64_at("failures") == starts(Path::new(file)).len() as u64
        };
        server.wait_plugin(name, Duration::from_secs(10), counted);
        let n = starts(Path::new(file)).len();
        assert!(n >= 2, "{name}: {n} starts\n{}", server.log());
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            starts(Path::new(file)).len(),
            n,
            "{name} was started again after it was disabled\n{}",
            server.log()
        );
    }
    assert_others_work(&server, "h-ok");
    stop_and_check(&server, &census);
}

/// A crash loop: every start closes its channel and dies (its teardown takes 100 ms, as a
/// big process's does). The restarts back off (`restart_backoff_ms · 2^(failures-1)`: at
/// least 1 s, then 2 s, between starts), and after `max_restarts` = 3 failures the plugin
/// is disabled with the reason in `ng-stats --json` and ngd's log, clients get 126, and
/// nothing is started any more: 3 starts in all.
#[test]
fn crash_loop_backs_off_then_disables() {
    let dir = tempfile::tempdir().unwrap();
    let file = starts_file(dir.path(), "starts");
    let looping = raw_plugin(
        "crashloop",
        &[
            "--starts",
            &file,
            "--exit-before-hello",
            "3",
            "--linger",
            "0.1",
        ],
    )
    .commands(&["loop"])
    .set("restart_backoff_ms", 1000)
    .set("max_restarts", 3);
    let healthy = raw_plugin("healthy", &["--prefix", "h-"]);
    let names = [looping.name().to_string(), healthy.name().to_string()];
    let server = PluginServer::start(vec![looping, healthy]);
    let census = Census::new(&server, &names);

    // A client that arrives during the crash loop waits in the queue and is refused when
    // the plugin gives up.
    let early = server.cmd(Client::Ours).arg("loop").spawn();
    let report = wait_disabled(&server, &names[0], Duration::from_secs(30));
    let reason = disabled_reason(&report);
    let expected = format!(
        "worker exited with status 3 before its hello; see {}",
        server.log_path(&names[0]).to_string_lossy()
    );
    eqnice!(
        format!("{expected} (3 failures in a row)"),
        reason,
        "{report}"
    );
    wait_log(
        &server,
        &format!("disabled after 3 consecutive failures: {expected}"),
        Duration::from_secs(5),
    );
    let out = early.wait();
    out.assert_code(126);
    eqnice!(
        format!("ngd: command 'loop' could not start: {reason}\n"),
        out.stderr_text(),
        "{out:?}"
    );
    assert_refused(&server, "loop", &report);
    assert_others_work(&server, "h-ok");
    std::thread::sleep(Duration::from_millis(500));
    let seen = starts(Path::new(&file));
    let gaps: Vec<u64> = seen
        .windows(2)
        .map(|w| (w[1].1 - w[0].1) / 1_000_000)
        .collect();
    let context = format!("starts {seen:?}, gaps {gaps:?} ms\n{}", server.log());
    stop_and_check(&server, &census);
    // Each start waits out the backoff after the previous failure: the gap between two
    // starts is at least the backoff (plus the interpreter's start-up), and the third
    // failure disables the plugin.
    assert!(
        seen.len() == 3 && gaps[0] >= 1000 && gaps[1] >= 2000,
        "expected 3 starts, 1 s then 2 s apart (restart_backoff_ms = 1000, max_restarts = \
         3): {context}"
    );
}

/// Hellos that lie. `protocol: 2`: disabled at once, one start only. A hello without a
/// configured command, a hello that is not JSON, and an error hello: failed starts,
/// disabled after `max_restarts`. Each reason shows in `ng-stats --json` and ngd's log,
/// clients get 126 with it, and a healthy plugin keeps working.
#[test]
fn lying_hellos() {
    let dir = tempfile::tempdir().unwrap();
    let p2_starts = starts_file(dir.path(), "p2");
    let fast = |p: Plugin| p.set("restart_backoff_ms", 20).set("max_restarts", 2);
    let plugins = vec![
        raw_plugin(
            "proto2",
            &[
                "--prefix",
                "p2-",
                "--starts",
                &p2_starts,
                "--hello",
                "protocol2",
            ],
        )
        .commands(&["p2-ok"])
        .set("restart_backoff_ms", 20),
        fast(raw_plugin(
            "missing",
            &["--prefix", "m-", "--hello", "missing"],
        ))
        .commands(&["m-ok", "m-slow"]),
        fast(raw_plugin(
            "badjson",
            &["--prefix", "j-", "--hello", "invalid-json"],
        ))
        .commands(&["j-ok"]),
        fast(raw_plugin(
            "refuses",
            &["--prefix", "e-", "--hello", "error"],
        ))
        .commands(&["e-ok"]),
        raw_plugin("healthy", &["--prefix", "h-"]),
    ];
    let names: Vec<String> = plugins.iter().map(|p| p.name().to_string()).collect();
    let server = PluginServer::start(plugins);
    let census = Census::new(&server, &names);

    let cases = [
        (&names[0], "p2-ok", "protocol"),
        (
            &names[1],
            "m-slow",
            "worker does not serve command 'm-slow'",
        ),
        (&names[2], "j-ok", "sent a hello that is not valid JSON"),
        (
            &names[3],
            "e-ok",
            "refused to start: the raw fixture refuses to start",
        ),
    ];
    for (name, command, needle) in &cases {
        let report = wait_disabled(&server, name, Duration::from_secs(20));
        let reason = disabled_reason(&report);
        assert!(
            reason.contains(needle),
            "{name}: the reason {reason:?} does not say {needle:?}"
        );
        assert!(last_failure(&report).contains(needle), "{report}");
        wait_log(&server, needle, Duration::from_secs(5));
        assert_refused(&server, command, &report);
    }
    // A protocol mismatch would only repeat: disabled after one start, with the versions
    // in the reason and no failure count; the others after `max_restarts` failed starts.
    let p2 = server.plugin_report(&names[0]).unwrap();
    let reason = disabled_reason(&p2);
    assert!(
        reason.contains('2') && reason.contains('1') && !reason.contains("failures in a row"),
        "the protocol-2 reason should name both versions and be no failure count: {reason:?}"
    );
    for (name, _, _) in &cases[1..] {
        let reason = disabled_reason(&server.plugin_report(name).unwrap());
        assert!(
            reason.ends_with("(2 failures in a row)"),
            "{name}: {reason:?}"
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        starts(Path::new(&p2_starts)).len(),
        1,
        "the protocol-2 worker was started again\n{}",
        server.log()
    );
    assert_others_work(&server, "h-ok");
    stop_and_check(&server, &census);
}

/// A worker whose hello comes after `handshake_timeout_ms` (its first start sleeps 30 s,
/// with a child in its process group): ngd kills the group (`no hello within 400 ms`,
/// in `last_failure` and the log), starts another worker, and a client that was waiting
/// all along is served by it; built-ins answer meanwhile.
#[test]
fn slow_handshake_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let file = starts_file(dir.path(), "starts");
    let slow = raw_plugin(
        "slowhello",
        &[
            "--prefix",
            "s-",
            "--starts",
            &file,
            "--faulty",
            "1",
            "--slow-hello",
            "30",
        ],
    )
    .commands(&["s-ok"])
    .set("handshake_timeout_ms", 400)
    .set("restart_backoff_ms", 20);
    let names = [slow.name().to_string()];
    let server = PluginServer::start(vec![slow]);
    let census = Census::new(&server, &names);
    let waiting = server.cmd(Client::Ours).arg("s-ok").spawn();
    run(&server, &["ng-version"]).assert_success();

    let first = poll(Duration::from_secs(10), || {
        starts(Path::new(&file)).first().copied()
    })
    .expect("the first worker started")
    .0;
    let child: u32 = poll(Duration::from_secs(10), || {
        let log = server.plugin_log(&names[0]);
        log.lines()
            .find_map(|l| l.strip_prefix("slow-hello child "))
            .and_then(|pid| pid.trim().parse().ok())
    })
    .expect("the slow worker's child pid in its log");
    census.snapshot();

    let out = waiting.wait();
    out.assert_success();
    let second = starts(Path::new(&file));
    assert_eq!(second.len(), 2, "{second:?}\n{}", server.log());
    eqnice!(
        format!("ok {}\n", second[1].0),
        out.stdout_text(),
        "{out:?}"
    );
    for (pid, what) in [
        (first, "the slow worker"),
        (child, "the slow worker's child"),
    ] {
        assert!(
            poll(Duration::from_secs(3), || (!running(pid)).then_some(())).is_some(),
            "{what} ({pid}) is still running\n{}",
            server.log()
        );
    }

    let report = server.plugin_report(&names[0]).unwrap();
    eqnice!("active", state(&report), "{report}");
    eqnice!("no hello within 400 ms", last_failure(&report), "{report}");
    wait_log(
        &server,
        "worker failed: no hello within 400 ms",
        Duration::from_secs(5),
    );
    assert!(report.u64_at("restarts") >= 1, "{report}");
    stop_and_check(&server, &census);
}

/// A worker that never answers a ping (`ping_interval_ms` = `ping_timeout_ms` = 200):
/// ngd kills it while it idles (`did not answer a ping`, in `last_failure` and the log)
/// and starts another, which answers its pings and so keeps serving.
#[test]
fn ignored_pings_get_the_worker_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let file = starts_file(dir.path(), "starts");
    let deaf = raw_plugin(
        "deaf",
        &["--starts", &file, "--faulty", "1", "--pings", "ignore"],
    )
    .set("ping_interval_ms", 200)
    .set("ping_timeout_ms", 200)
    .set("restart_backoff_ms", 20);
    let names = [deaf.name().to_string()];
    let server = PluginServer::start(vec![deaf]);
    let census = Census::new(&server, &names);

    let both = poll(Duration::from_secs(15), || {
        let s = starts(Path::new(&file));
        (s.len() >= 2).then_some(s)
    })
    .unwrap_or_else(|| panic!("the deaf worker was not replaced\n{}", server.log()));
    let (deaf_pid, healthy_pid) = (both[0].0, both[1].0);
    run(&server, &["ng-version"]).assert_success();
    wait_log(
        &server,
        "idle worker killed by signal 9: did not answer a ping",
        Duration::from_secs(5),
    );
    assert!(
        poll(Duration::from_secs(3), || (!running(deaf_pid))
            .then_some(()))
        .is_some(),
        "the deaf worker {deaf_pid} is still running"
    );
    let report = server.wait_plugin(&names[0], Duration::from_secs(10), |r| {
        r.u64_at("idle") == 1
    });
    assert!(
        last_failure(&report).contains("did not answer a ping"),
        "{report}"
    );
    assert!(report.u64_at("restarts") >= 1, "{report}");
    // The replacement answers its pings: several intervals later it still serves.
    eqnice!(
        format!("ok {healthy_pid}\n"),
        run(&server, &["ok"]).stdout_text()
    );
    std::thread::sleep(Duration::from_millis(800));
    eqnice!(
        format!("ok {healthy_pid}\n"),
        run(&server, &["ok"]).stdout_text()
    );
    assert_eq!(starts(Path::new(&file)).len(), 2, "{}", server.log());
    stop_and_check(&server, &census);
}

/// An idle `ngd` must not use the CPU, whatever its plugins went through. A worker that
/// sits idle past `idle_timeout_ms` while the pool is at `min_workers` (it is kept, rightly),
/// and a plugin disabled with a restart still pending (a `protocol: 2` hello; its backoff
/// of 100 ms long past): in each case ngd's event loop must wait, not poll. Measured over
/// 1 s: ngd uses under a quarter of a CPU.
#[test]
fn idle_ngd_stays_idle_after_idle_timeouts_and_disabled_plugins() {
    let idle = raw_plugin("idler", &["--prefix", "i-"]).set("idle_timeout_ms", 200);
    let p2 =
        raw_plugin("proto2", &["--prefix", "p2-", "--hello", "protocol2"]).commands(&["p2-ok"]);
    let names = [idle.name().to_string(), p2.name().to_string()];
    let scenarios = [
        ("a worker idle past idle_timeout_ms at min_workers", idle),
        ("a plugin disabled by a protocol-2 hello", p2),
    ];
    let mut spinning = Vec::new();
    for (what, plugin) in scenarios {
        let name = plugin.name().to_string();
        let server = PluginServer::start(vec![plugin]);
        let census = Census::new(&server, &names);
        server.wait_plugin(&name, Duration::from_secs(20), |r| {
            state(r) == "disabled" || r.u64_at("idle") == 1
        });
        std::thread::sleep(Duration::from_millis(500));
        let share = cpu_share(server.pid(), Duration::from_secs(1));
        eprintln!("{what}: ngd used {:.0}% of a CPU", share * 100.0);
        if share > 0.25 {
            spinning.push(format!("{what}: {:.0}% of a CPU", share * 100.0));
        }
        let report = server.plugin_report(&name).unwrap();
        assert!(
            state(&report) == "disabled" || report.u64_at("idle") == 1,
            "{report}"
        );
        stop_and_check(&server, &census);
    }
    assert!(
        spinning.is_empty(),
        "an idle ngd busy-loops (its event loop polls with a zero timeout):\n{}",
        spinning.join("\n")
    );
}
