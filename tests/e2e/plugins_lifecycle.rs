//! The life of plugin workers under `ngd`, with our `ng` and the C client.
//!
//! A worker that crashes at import time or refuses to start (the plugin ends disabled, its
//! reason visible in `ng-stats`, `ngd status` and the clients' 126 message, and ngd keeps
//! serving); a command that hangs (fork mode: the SDK kills it after its kill grace; in
//! process: ngd kills and replaces the worker after its interrupt grace); a client killed
//! mid-run (the command is interrupted, nothing is left, the next run works); SIGHUP
//! reloads (a running session completes, the changed plugin serves its new command, a
//! removed plugin's workers go); and `ngd stop`/SIGTERM leaving no process and no socket.

use std::path::Path;
use std::time::{Duration, Instant};

use ng_testkit::procfs::{exists as alive, proc_info, wait_gone};
use ng_tests::client::ClientCmd;
use ng_tests::plugins::{
    describe, ngd_bin, python, send_signal, state, Json, JsonExt as _, Plugin, PluginServer, Proc,
};
use ng_tests::{both_clients, eqnice, Client, Output, Running, Transport};

/// `status.reason` of a disabled plugin's report.
#[track_caller]
fn reason(report: &Json) -> String {
    report
        .get("status")
        .and_then(|s| s.get("reason"))
        .and_then(Json::as_str)
        .unwrap_or_else(|| panic!("no status.reason in {report}"))
        .to_string()
}

/// Runs `ngd <args>`.
fn ngd_cli(args: &[&str]) -> Output {
    ClientCmd::new("ngd", ngd_bin()).args(args).run()
}

/// Waits for the client's `ready <pid> ...` line, then kills the client with SIGKILL (the
/// connection drops as in a crash), reaps it, and returns what it printed and the pid.
#[track_caller]
fn kill_when_ready(running: Running) -> (Output, u32) {
    running.wait_for_stdout("ready ", Duration::from_secs(20));
    running.wait_for_stdout("\n", Duration::from_secs(5));
    send_signal(running.pid(), libc::SIGKILL);
    let out = running.wait();
    assert_eq!(out.code(), None, "the client was killed\n{out:?}");
    let pid = out
        .stdout_text()
        .strip_prefix("ready ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no `ready <pid>` line\n{out:?}"));
    (out, pid)
}

/// The worker pid of plugin `w`'s in-process `pid` command (`prefix` + `pid`).
#[track_caller]
fn worker_pid(server: &PluginServer, client: Client, command: &str) -> u32 {
    let out = server.run(client, &[command]);
    out.assert_success();
    out.stdout_text()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{command} printed no pid\n{out:?}"))
}

#[track_caller]
fn assert_gone(server: &PluginServer, pid: u32, what: &str, timeout: Duration) {
    assert!(
        wait_gone(pid, timeout),
        "{what} (pid {pid}) is still there {timeout:?} later: {:?}\n{}",
        proc_info(pid),
        server.log()
    );
}

both_clients! {
    /// A worker that crashes at import time, and one whose preload fails (an error
    /// hello): after their restarts both plugins are disabled with the reason in
    /// `ng-stats --json` and `ngd status`, clients get 126 and `ngd: command 'X' could not
    /// start: <reason>`, the traceback is in the plugin's log, and ngd keeps serving its
    /// built-ins and a healthy plugin.
    fn worker_failing_at_start_disables_the_plugin(client) {
        let server = PluginServer::builder()
            .plugin(
                Plugin::python::<&str>("crashy", "crash_at_import.py", &[])
                    .commands(&["crashy"])
                    .set("restart_backoff_ms", 20)
                    .set("max_restarts", 3),
            )
            .plugin(
                Plugin::new(
                    "badpre",
                    &[
                        &*python().to_string_lossy(),
                        "-m",
                        "ngw",
                        "entrypoint",
                        "badpre=json:dumps",
                        "--preload",
                        "nosuchmod_fixture",
                    ],
                )
                .commands(&["badpre"])
                .set("restart_backoff_ms", 20)
                .set("max_restarts", 3),
            )
            .plugin(Plugin::worker::<&str>("w", &[]))
            .start();
        let disabled = |r: &Json| state(r) == "disabled";
        let crashy = server.wait_plugin("crashy", Duration::from_secs(30), disabled);
        let badpre = server.wait_plugin("badpre", Duration::from_secs(30), disabled);

        let crashy_reason = reason(&crashy);
        let log = server.log_path("crashy");
        assert!(
            crashy_reason.contains("exited with status 1 before its hello")
                && crashy_reason.contains(&*log.to_string_lossy()),
            "crashy's reason should say it exited before its hello and name its log: \
             {crashy_reason:?}"
        );
        let badpre_reason = reason(&badpre);
        assert!(
            badpre_reason.contains("preload failed: cannot import 'nosuchmod_fixture'"),
            "badpre's reason should carry the error hello: {badpre_reason:?}"
        );
        for (name, report) in [("crashy", &crashy), ("badpre", &badpre)] {
            assert_eq!(report.u64_at("idle") + report.u64_at("busy"), 0, "{report}");
            let out = server.cmd_on(client, Transport::Tcp).args([name, "arg"]).run();
            out.assert_code(126);
            eqnice!("", out.stdout_text(), "{out:?}");
            eqnice!(
                format!("ngd: command '{name}' could not start: {}\n", reason(report)),
                out.stderr_text(),
                "{out:?}"
            );
        }
        let crash_log = server.plugin_log("crashy");
        assert!(
            crash_log.contains("Traceback (most recent call last):")
                && crash_log.contains("RuntimeError: plugin fixture crashed at import time"),
            "crashy's traceback is not in its log:\n{crash_log}"
        );
        assert!(
            server.plugin_log("badpre").contains("ModuleNotFoundError"),
            "badpre's log lacks the import error:\n{}",
            server.plugin_log("badpre")
        );

        // `ngd status`, text and JSON, shows the same reasons.
        let addr = server.address(Transport::Unix).to_string();
        let out = ngd_cli(&["status", "--server", &addr]);
        out.assert_success();
        let text = out.stdout_text();
        for r in [&crashy_reason, &badpre_reason] {
            assert!(
                text.contains(&format!("DISABLED: {r}")),
                "`ngd status` does not show `DISABLED: {r}`\n{out:?}"
            );
        }
        let out = ngd_cli(&["status", "--json", "--server", &addr]);
        out.assert_success();
        let json: Json = serde_json::from_str(&out.stdout_text()).expect("ngd status --json is JSON");
        let listed: Vec<String> = json
            .get("plugins")
            .and_then(Json::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|p| state(p) == "disabled")
            .map(reason)
            .collect();
        assert!(
            listed.contains(&crashy_reason) && listed.contains(&badpre_reason),
            "`ngd status --json` lacks the reasons: {listed:?}"
        );

        // ngd still serves: a built-in, and the healthy plugin.
        let out = server.run(client, &["ng-version"]);
        out.assert_success();
        let out = server.run(client, &["fexit", "3"]);
        out.assert_code(3);
    }
}

both_clients! {
    /// A fork-mode command that ignores SIGHUP and sleeps: when its client disconnects,
    /// ngd interrupts the session, the SDK SIGKILLs the command after its kill grace, and
    /// the worker (which never hung itself) keeps serving.
    fn hung_fork_command_is_killed_after_the_kill_grace(client) {
        let server = PluginServer::start(vec![Plugin::worker("w", &["--kill-grace", "0.2"])
            .set("interrupt_grace_ms", 500)]);
        let worker = worker_pid(&server, client, "pid");
        let running = server.cmd(client).arg("fhang").spawn();
        let (_, child) = kill_when_ready(running);
        assert_gone(&server, child, "the hung fork-mode command", Duration::from_secs(5));
        server.assert_no_zombies(Duration::from_secs(2));
        assert_eq!(worker, worker_pid(&server, client, "pid"), "the worker was replaced");
        server.run(client, &["fexit", "0"]).assert_success();
    }
}

both_clients! {
    /// An in-process command that ignores SIGHUP and swallows interrupts hangs its worker:
    /// after the client disconnects, ngd waits its interrupt grace (`max(interrupt_grace_ms
    /// = 500, kill_grace 0.1 s + 1 s)`), kills the worker and starts a new one, which
    /// serves the next invocation.
    fn hung_worker_is_replaced_after_the_interrupt_grace(client) {
        let server = PluginServer::start(vec![Plugin::worker("w", &["--kill-grace", "0.1"])
            .set("interrupt_grace_ms", 500)
            .set("restart_backoff_ms", 20)]);
        let running = server.cmd(client).arg("hang").spawn();
        let (_, worker) = kill_when_ready(running);
        let killed_at = Instant::now();
        assert_gone(&server, worker, "the hung worker", Duration::from_secs(10));
        let took = killed_at.elapsed();
        assert!(
            took >= Duration::from_millis(1000),
            "the worker was killed {took:?} after the client left, before its grace of 1.1 s"
        );
        let replacement = worker_pid(&server, client, "pid");
        assert_ne!(worker, replacement);
        server.run(client, &["exit", "0"]).assert_success();
        server.run(client, &["fexit", "0"]).assert_success();
        let report = server.plugin_report("w").unwrap();
        assert!(report.u64_at("restarts") >= 1, "{report}");
        server.assert_no_zombies(Duration::from_secs(2));
    }
}

/// Waits for `path` to exist, for at most `timeout`; returns its contents. `pid`: the
/// process that should have written it, whose state (signals pending, blocked, caught) the
/// failure shows.
#[track_caller]
fn wait_marker(server: &PluginServer, path: &Path, pid: u32, timeout: Duration) -> String {
    let start = Instant::now();
    let deadline = start + timeout;
    // Taken half a second in, before the SDK's SIGKILL after its kill grace (2 s).
    let mut early = None;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if !text.is_empty() {
                return text;
            }
        }
        if early.is_none() && start.elapsed() >= Duration::from_millis(500) {
            early = Some(process_state(pid));
        }
        assert!(
            Instant::now() < deadline,
            "{} did not appear within {timeout:?}: the command was not interrupted\n\
             pid {pid} after 0.5 s: {}\nnow: {}\nng-stats: {}\n{}",
            path.display(),
            early.as_deref().unwrap_or("-"),
            process_state(pid),
            server.stats(),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What /proc says of `pid`'s state and signals, for a failure message.
fn process_state(pid: u32) -> String {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return "gone".into();
    };
    let wanted = [
        "State", "PPid", "Threads", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt",
    ];
    let mut lines: Vec<String> = status
        .lines()
        .filter(|l| wanted.iter().any(|w| l.starts_with(&format!("{w}:"))))
        .map(str::to_owned)
        .collect();
    if let Ok(wchan) = std::fs::read_to_string(format!("/proc/{pid}/wchan")) {
        lines.push(format!("wchan: {wchan}"));
    }
    lines.join(", ")
}

both_clients! {
    /// A client killed with SIGKILL in the middle of a run: the command is interrupted
    /// (fork mode: SIGHUP reaches it and it writes a marker; in-process: `ngw.Interrupted`
    /// with reason `hangup`), its process is gone and reaped, and the next run works on
    /// the same worker.
    ///
    /// The fork-mode command takes half a second to handle its SIGHUP, and the SDK's kill
    /// grace (SIGHUP, then SIGKILL that much later) is longer than the wait for its marker:
    /// only the SIGHUP can end it here. With the fixture's grace of 0.3 s, a loaded machine
    /// can delay the handler past the grace, and the SIGKILL that follows (tested on its own
    /// above) would end the command first.
    fn killed_client_interrupts_the_command(client) {
        let server = PluginServer::start(vec![Plugin::worker(
            "w",
            &["--kill-grace", "20", "--hup-delay", "0.5"],
        )]);
        let dir = tempfile::tempdir().unwrap();
        let worker = worker_pid(&server, client, "pid");

        let marker = dir.path().join("fork-marker");
        let running = server.cmd(client).args(["fmark".as_ref(), marker.as_os_str()]).spawn();
        let (_, child) = kill_when_ready(running);
        eqnice!("SIGHUP\n", wait_marker(&server, &marker, child, Duration::from_secs(10)));
        assert_gone(&server, child, "the interrupted fork-mode command", Duration::from_secs(5));

        let marker = dir.path().join("inline-marker");
        let running = server.cmd(client).args(["mark".as_ref(), marker.as_os_str()]).spawn();
        assert_eq!(worker, kill_when_ready(running).1, "not the worker's pid");
        eqnice!("interrupted: hangup\n", wait_marker(&server, &marker, worker, Duration::from_secs(10)));

        server.assert_no_zombies(Duration::from_secs(2));
        let out = server.run(client, &["fout"]);
        out.assert_success();
        eqnice!("fd 1\nsub\nfd 1 again\n", out.stdout_text(), "{out:?}");
        assert_eq!(worker, worker_pid(&server, client, "pid"), "the worker was replaced");
    }
}

both_clients! {
    /// SIGHUP reload: plugin `alpha` changes its command (`--tag v1` → `v2`), `doomed` is
    /// removed, `beta` is added. A session running on alpha across the reload completes
    /// normally (on the old worker); afterwards alpha's commands run the new command line,
    /// beta's commands work, doomed's are unknown (127), and the old workers are gone.
    fn sighup_reload(client) {
        let alpha = |tag: &str| Plugin::worker("alpha", &["--tag", tag]);
        let server = PluginServer::start(vec![
            alpha("v1"),
            Plugin::worker("doomed", &["--prefix", "d-", "--tag", "doomed"]),
        ]);
        let old_alpha = worker_pid(&server, client, "pid");
        let doomed = worker_pid(&server, client, "d-pid");
        eqnice!("v1\n", server.run(client, &["ver"]).stdout_text());

        let running = server
            .cmd(client)
            .args(["fslow", "1.5"])
            .timeout(Duration::from_secs(30))
            .spawn();
        running.wait_for_stdout("start\n", Duration::from_secs(20));
        server.reload(vec![
            alpha("v2"),
            Plugin::worker("beta", &["--prefix", "b-", "--tag", "beta"]),
        ]);
        server.wait_plugin("beta", Duration::from_secs(20), |r| {
            state(r) == "active" && r.u64_at("idle") >= 1
        });

        let out = running.wait();
        out.assert_success();
        eqnice!("start\ndone v1\n", out.stdout_text(), "the session across the reload\n{out:?}");
        eqnice!("", out.stderr_text(), "{out:?}");

        let out = server.run(client, &["ver"]);
        out.assert_success();
        eqnice!("v2\n", out.stdout_text(), "alpha after the reload\n{out:?}");
        let out = server.run(client, &["b-ver"]);
        out.assert_success();
        eqnice!("beta\n", out.stdout_text(), "{out:?}");
        server.run(client, &["b-fexit", "0"]).assert_success();

        let out = server.run(client, &["d-pid"]);
        out.assert_code(127);
        assert!(out.stderr_text().starts_with("ngd: ") && out.stderr_text().contains("d-pid"), "{out:?}");

        assert_gone(&server, doomed, "the removed plugin's worker", Duration::from_secs(15));
        assert_gone(&server, old_alpha, "alpha's old worker", Duration::from_secs(15));
        assert_ne!(old_alpha, worker_pid(&server, client, "pid"));
        server.wait_plugin("alpha", Duration::from_secs(10), |r| state(r) == "active");
        let deadline = Instant::now() + Duration::from_secs(5);
        while server.plugin_report("doomed").is_some() {
            assert!(Instant::now() < deadline, "doomed is still listed\n{}", server.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The processes of `server` whose command line contains `needle`.
fn matching(server: &PluginServer, needle: &str) -> Vec<Proc> {
    server
        .processes()
        .into_iter()
        .filter(|p| p.cmdline.contains(needle))
        .collect()
}

both_clients! {
    /// `ngd stop` while a fork-mode command runs with a grandchild (`sleep 60`) and while
    /// other workers idle: the client gets the command's end (143, SIGTERM), ngd exits 0,
    /// its Unix socket is removed, and no worker, session child or grandchild is left.
    fn ngd_stop_leaves_no_process(client) {
        let server = PluginServer::start(vec![
            Plugin::worker::<&str>("w", &[]).set("min_workers", 2),
            Plugin::worker("other", &["--prefix", "o-"]),
        ]);
        server.wait_plugin("w", Duration::from_secs(20), |r| r.u64_at("idle") == 2);
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pids");
        let running = server
            .cmd(client)
            .args(["fspawn".as_ref(), pid_file.as_os_str()])
            .timeout(Duration::from_secs(60))
            .spawn();
        running.wait_for_stdout("ready\n", Duration::from_secs(20));
        let pids: Vec<u32> = std::fs::read_to_string(&pid_file)
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        let (child, grandchild) = (pids[0], pids[1]);
        // The guard sees the whole plugin world: 3 workers, the session child, `sleep 60`.
        let world = server.processes();
        for pid in [child, grandchild] {
            assert!(
                world.iter().any(|p| p.pid == pid),
                "the guard does not see pid {pid}:\n{}",
                describe(&world)
            );
        }
        assert_eq!(matching(&server, "plugin_worker.py").len(), 4, "{}", describe(&world));

        let socket = server.socket_path();
        let addr = server.address(Transport::Tcp).to_string();
        let stop = ngd_cli(&["stop", "--server", &addr]);
        stop.assert_success();
        let out = running.wait();
        let status = server.wait_stopped(Duration::from_secs(20));
        assert_eq!(status.code(), Some(0), "ngd {status:?}\n{}", server.log());
        assert!(!socket.exists(), "{} survived `ngd stop`", socket.display());
        // The command dies of the SIGTERM it was forwarded: our `ng` dies of it too, the
        // stock client exits 143.
        let expected = if client == Client::Ours {
            use std::os::unix::process::ExitStatusExt;
            (out.status.signal(), None)
        } else {
            (None, out.code())
        };
        let wanted = if client == Client::Ours {
            (Some(libc::SIGTERM), None)
        } else {
            (None, Some(143))
        };
        assert_eq!(
            expected,
            wanted,
            "the running command's client should get its end (SIGTERM)\n{out:?}\n{}",
            server.log()
        );
        eqnice!("ready\n", out.stdout_text(), "{out:?}");
    }
}

/// SIGTERM with only idle workers (two plugins, three workers): ngd exits 0 at once, its
/// socket is removed, and every worker is gone.
#[test]
fn sigterm_with_idle_workers_leaves_no_process() {
    let server = PluginServer::start(vec![
        Plugin::worker::<&str>("w", &[]).set("min_workers", 2),
        Plugin::worker("other", &["--prefix", "o-"]),
    ]);
    server.wait_plugin("w", Duration::from_secs(20), |r| r.u64_at("idle") == 2);
    let workers = matching(&server, "plugin_worker.py");
    assert_eq!(workers.len(), 3, "{}", describe(&workers));
    let socket = server.socket_path();
    assert!(socket.exists());
    let started = Instant::now();
    server.signal(libc::SIGTERM);
    let status = server.wait_stopped(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "ngd {status:?}\n{}", server.log());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopping idle workers took {:?}",
        started.elapsed()
    );
    assert!(!socket.exists(), "{} survived SIGTERM", socket.display());
    for w in workers {
        assert!(!alive(w.pid), "worker {} survived", w.pid);
    }
}

/// The harness itself: the guard finds a daemon a command left behind in a session of its
/// own (by the tag the client's environment passed on), so a leak like it fails a test.
#[test]
fn guard_sees_a_daemon_left_by_a_command() {
    let server = PluginServer::start(vec![Plugin::worker::<&str>("w", &[])]);
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("daemon");
    server
        .cmd(Client::Ours)
        .args(["fdaemon".as_ref(), pid_file.as_os_str()])
        .run()
        .assert_success();
    let daemon: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let world = server.processes();
    let found = world.iter().find(|p| p.pid == daemon);
    // Kill it before asserting, so that a failure here does not leak it.
    send_signal(daemon, libc::SIGKILL);
    assert!(
        found.is_some_and(|p| p.cmdline == "sleep 60" && p.sid == daemon),
        "the guard does not see the daemon {daemon}:\n{}",
        describe(&world)
    );
    assert!(
        wait_gone(daemon, Duration::from_secs(5)),
        "pid {daemon} survived SIGKILL"
    );
}
