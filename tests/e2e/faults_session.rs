//! Faults during a session: a worker that dies after half a chunk, chunks a worker must
//! never send, an interrupt the worker ignores, and 100 MiB of stderr to a slow client and
//! to one that leaves.

use std::time::{Duration, Instant};

use ng_tests::faults::{
    last_failure, pids, poll, raw_plugin, rss_kib, running, sdk_plugin, stop_and_check, wait_log,
    Census, RawClient, RssProbe,
};
use ng_tests::plugins::{send_signal, JsonExt as _, PluginServer};
use ng_tests::{both_clients, eqnice, Client, Output, Transport};

/// Waits until `pid` has stopped running; fails the test after `timeout`.
#[track_caller]
fn assert_stops(server: &PluginServer, pid: u32, what: &str, timeout: Duration) {
    assert!(
        poll(timeout, || (!running(pid)).then_some(())).is_some(),
        "{what} (pid {pid}) is still running {timeout:?} later\n{}",
        server.log()
    );
}

/// The pid in `ok <pid>` from the raw fixture's `ok` command.
#[track_caller]
fn ok_pid(out: &Output) -> u32 {
    out.assert_success();
    pids(&out.stdout_text(), "ok ")[0]
}

both_clients! {
    /// A worker that writes a whole stdout chunk, then the header and 10 bytes of a
    /// 1000-byte one, then dies (exit 3, or SIGKILL): the client gets the whole chunk,
    /// none of the half one, `ngd: worker for 'half' died during the command (...)` and
    /// exit 1 or 137; the child the worker left in its process group is killed with it;
    /// a session running on the plugin's other worker and one on another plugin are
    /// unaffected; the worker is replaced and the reason is in ngd's log and
    /// `ng-stats --json`.
    fn worker_dies_after_half_a_chunk(client) {
        let raw = raw_plugin::<&str>("half", &[])
            .set("min_workers", 2)
            .set("max_workers", 3)
            .set("restart_backoff_ms", 20)
            .set("max_restarts", 10);
        let other = sdk_plugin("other");
        let names = [raw.name().to_string(), other.name().to_string()];
        let server = PluginServer::start(vec![raw, other]);
        let census = Census::new(&server, &names);
        server.wait_plugin(&names[0], Duration::from_secs(20), |r| r.u64_at("idle") == 2);

        let slow = server.cmd(client).args(["slow", "2"]).spawn();
        slow.wait_for_stdout("start\n", Duration::from_secs(10));
        for (mode, code, how) in [("exit", 1, "exited with status 3"), ("kill", 137, "killed by signal 9")] {
            let out = server.cmd(client).args(["half", mode]).run();
            let [worker, child] = pids(&out.stdout_text(), "partial ")[..] else {
                panic!("{out:?}");
            };
            out.assert_code(code);
            eqnice!(format!("partial {worker} {child}\n"), out.stdout_text(), "{out:?}");
            eqnice!(
                format!("ngd: worker for 'half' died during the command ({how}; closed its channel)\n"),
                out.stderr_text(),
                "{out:?}"
            );
            assert_stops(&server, worker, "the dead worker", Duration::from_secs(3));
            assert_stops(&server, child, "the dead worker's child", Duration::from_secs(3));
            wait_log(
                &server,
                &format!("worker {how} during a session: closed its channel"),
                Duration::from_secs(5),
            );
            let out = server.run(client, &["pid"]);
            out.assert_success();
        }
        let out = slow.wait();
        out.assert_success();
        let worker = pids(&out.stdout_text(), "done ")[0];
        eqnice!(format!("start\ndone {worker}\n"), out.stdout_text(), "{out:?}");

        let report = server.wait_plugin(&names[0], Duration::from_secs(20), |r| r.u64_at("idle") >= 2);
        assert!(report.u64_at("restarts") >= 2, "{report}");
        assert!(
            last_failure(&report).contains("killed by signal 9: closed its channel"),
            "{report}"
        );
        let fresh = ok_pid(&server.run(client, &["ok"]));
        assert!(running(fresh));
        stop_and_check(&server, &census);
    }
}

/// Chunks a worker must never send during a session: `A` (a request type), a stdout chunk
/// announced at 1 GiB (over ngd's 8 MiB cap), and a second `S` before the first was
/// answered (the client's stdin held open and silent). Each time ngd kills the worker, the
/// client gets `ngd: worker for 'X' died during the command (killed by signal 9; <the
/// violation>)` and 137, the reason is in ngd's log, a new worker serves the next command,
/// and another plugin is unaffected.
#[test]
fn protocol_violations_kill_and_replace_the_worker() {
    let raw = raw_plugin::<&str>("violator", &[])
        .set("restart_backoff_ms", 20)
        .set("max_restarts", 10);
    let other = sdk_plugin("other");
    let names = [raw.name().to_string(), other.name().to_string()];
    let server = PluginServer::start(vec![raw, other]);
    let census = Census::new(&server, &names);
    let cases = [
        ("chunk-a", "ready\n", "sent argument ('A') while busy"),
        (
            "overcap",
            "ready\n",
            "protocol error: stdout chunk of 1073741824 bytes is larger than the limit of \
             8388608 bytes",
        ),
        ("double-s", "", "sent S while a previous S was unanswered"),
    ];
    for (command, stdout, violation) in cases {
        let before = ok_pid(&server.run(Client::Ours, &["ok"]));
        // A stdin that neither ends nor sends: nothing the client sends can answer the
        // first `S` of `double-s` before the second arrives.
        let out = server.cmd(Client::Ours).arg(command).stdin_open().run();
        out.assert_code(137);
        eqnice!(stdout, out.stdout_text(), "{out:?}");
        eqnice!(
            format!(
                "ngd: worker for '{command}' died during the command (killed by signal 9; \
                 {violation})\n"
            ),
            out.stderr_text(),
            "{out:?}"
        );
        wait_log(
            &server,
            &format!("worker killed by signal 9 during a session: {violation}"),
            Duration::from_secs(5),
        );
        assert_stops(
            &server,
            before,
            "the violating worker",
            Duration::from_secs(3),
        );
        let after = ok_pid(&server.run(Client::Ours, &["ok"]));
        assert_ne!(before, after, "the worker was not replaced");
        server.run(Client::Ours, &["pid"]).assert_success();
        census.snapshot();
    }
    let report = server.plugin_report(&names[0]).unwrap();
    assert!(report.u64_at("restarts") >= 3, "{report}");
    stop_and_check(&server, &census);
}

/// A worker that announces `interrupt` but ignores `i hangup` and never ends its session
/// (with a `sleep 1000` in its process group): when the client is killed, ngd waits
/// `interrupt_grace_ms` (300), then SIGKILLs the worker's process group and starts a new
/// worker. Meanwhile the plugin's other worker serves; the reason is in ngd's log.
#[test]
fn ignored_interrupt_gets_the_group_killed() {
    let raw = raw_plugin::<&str>("deafint", &[])
        .set("min_workers", 2)
        .set("interrupt_grace_ms", 300)
        .set("restart_backoff_ms", 20);
    let names = [raw.name().to_string()];
    let server = PluginServer::start(vec![raw]);
    let census = Census::new(&server, &names);
    server.wait_plugin(&names[0], Duration::from_secs(20), |r| {
        r.u64_at("idle") == 2
    });

    let hung = server.cmd(Client::Ours).arg("noint").spawn();
    hung.wait_for_stdout("\n", Duration::from_secs(10));
    send_signal(hung.pid(), libc::SIGKILL);
    let left_at = Instant::now();
    let out = hung.wait();
    let [worker, child] = pids(&out.stdout_text(), "ready ")[..] else {
        panic!("{out:?}");
    };
    census.snapshot();
    // The other worker serves during the grace.
    let other = ok_pid(&server.run(Client::Ours, &["ok"]));
    assert_ne!(other, worker);

    assert_stops(
        &server,
        worker,
        "the worker that ignored the hangup",
        Duration::from_secs(5),
    );
    let took = left_at.elapsed();
    eprintln!("the worker that ignored the hangup was gone {took:?} after its client");
    assert_stops(
        &server,
        child,
        "the child in its process group",
        Duration::from_secs(1),
    );
    assert!(
        took >= Duration::from_millis(300),
        "the worker was killed {took:?} after its client left, before the 300 ms grace"
    );
    wait_log(
        &server,
        "worker killed by signal 9 during a session: did not end its session after a hangup",
        Duration::from_secs(5),
    );
    let log = server.plugin_log(&names[0]);
    assert!(
        log.contains("noint: ignoring 'i' b'hangup'"),
        "the worker did not get `i hangup`:\n{log}"
    );
    let report = server.wait_plugin(&names[0], Duration::from_secs(10), |r| {
        r.u64_at("idle") == 2
    });
    assert!(report.u64_at("restarts") >= 1, "{report}");
    for _ in 0..2 {
        assert_ne!(ok_pid(&server.run(Client::Ours, &["ok"])), worker);
    }
    stop_and_check(&server, &census);
}

/// 100 MiB on stderr, written as fast as the worker can without ever reading its channel,
/// (1) to a client that stalls for 1.5 s and then reads slowly: every byte arrives in
/// order and the exit code follows; (2) to a client that reads 1 MiB and disconnects:
/// ngd discards the rest and the worker finishes its session and stays. Throughout,
/// ngd's RSS stays within 32 MiB of its size before, and other commands (the plugin's
/// other worker, another plugin, a built-in) answer promptly.
#[test]
fn stderr_flood_keeps_ngd_bounded() {
    const FLOOD: u64 = 100 << 20;
    let raw = raw_plugin::<&str>("flood", &[])
        .set("min_workers", 2)
        .set("max_workers", 2)
        .set("interrupt_grace_ms", 30000);
    let other = sdk_plugin("other");
    let names = [raw.name().to_string(), other.name().to_string()];
    let server = PluginServer::start(vec![raw, other]);
    let census = Census::new(&server, &names);
    server.wait_plugin(&names[0], Duration::from_secs(20), |r| {
        r.u64_at("idle") == 2
    });
    let workers_before = census.workers();
    let others_work = || {
        for args in [&["ok"][..], &["pid"], &["ng-version"]] {
            let out = server
                .cmd(Client::Ours)
                .args(args)
                .timeout(Duration::from_secs(10))
                .run();
            out.assert_success();
            assert!(
                out.elapsed < Duration::from_secs(3),
                "slow while flooding: {out:?}"
            );
        }
    };
    let baseline = rss_kib(server.pid()).expect("ngd's RSS");
    let probe = RssProbe::start(server.pid());
    let address = server.address(Transport::Unix).clone();
    let flood = FLOOD.to_string();

    // (1) A stalled, then slow, reader.
    let mut slow = RawClient::start(&address, server.tag(), "flood", &[&flood]);
    slow.stall(Duration::from_millis(1500));
    others_work();
    slow.read_slowly(
        FLOOD / 4,
        32 << 10,
        Duration::from_millis(1),
        Duration::from_secs(60),
    );
    assert_eq!(
        slow.finish(Duration::from_secs(60)),
        Some(0),
        "the exit code after the flood"
    );
    assert_eq!(slow.received, [8, FLOOD], "stdout and stderr bytes");
    eqnice!("flooded\n", String::from_utf8_lossy(&slow.heads[0]));
    let pattern: Vec<u8> = (0..=255u8).cycle().take(64 << 10).collect();
    assert!(
        slow.heads[1] == pattern,
        "stderr does not start with the fixture's pattern"
    );

    // (2) A reader that leaves after 1 MiB.
    let mut leaving = RawClient::start(&address, server.tag(), "flood", &[&flood]);
    leaving.read_slowly(1 << 20, 64 << 10, Duration::ZERO, Duration::from_secs(30));
    drop(leaving);
    others_work();
    // Two `ok`s and two floods: the abandoned flood ended as a session like any other.
    let report = server.wait_plugin(&names[0], Duration::from_secs(30), |r| {
        r.u64_at("idle") == 2 && r.u64_at("sessions") == 4
    });
    let max = probe.stop();
    assert_eq!(
        census
            .workers()
            .iter()
            .filter(|w| workers_before.contains(w))
            .count(),
        workers_before.len(),
        "a flooding worker was replaced: {report}\n{}",
        server.log()
    );
    assert!(
        max < baseline + (32 << 10),
        "ngd's RSS grew from {baseline} KiB to {max} KiB while relaying {} MiB\n{}",
        FLOOD >> 20,
        server.log()
    );
    eprintln!("ngd RSS: {baseline} KiB before, at most {max} KiB during the floods");
    stop_and_check(&server, &census);
}
