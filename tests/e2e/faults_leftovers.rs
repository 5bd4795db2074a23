//! Processes left behind: commands that start background processes and daemons, and
//! `ngd` itself killed with SIGKILL while workers and sessions are active.

use std::time::{Duration, Instant};

use ng_tests::faults::{
    describe, pids, poll, raw_plugin, running, sdk_plugin, stop_and_check, Census, Proc,
};
use ng_tests::plugins::{send_signal, JsonExt as _, PluginServer, TAG_VAR};
use ng_tests::{Client, Flavor, NgdServer};

/// Commands that leave processes behind and end: an in-process command of a raw worker
/// (a `sleep 1000` in the worker's process group, and a daemon: double fork and
/// `setsid`, running `sleep 1000`), and a fork-mode SDK command (a background `sleep
/// 1000` in the session's process group, and a daemon). Both sessions end with 0. After
/// `ngd` stops, none of those processes may be running.
#[test]
fn children_left_behind_are_gone_after_ngd_stops() {
    let raw = raw_plugin::<&str>("leaver", &[]);
    let sdk = sdk_plugin("fleaver");
    let names = [raw.name().to_string(), sdk.name().to_string()];
    let server = PluginServer::start(vec![raw, sdk]);
    let census = Census::new(&server, &names);

    let out = server.run(Client::Ours, &["leave"]);
    out.assert_success();
    let [in_group, raw_daemon] = pids(&out.stdout_text(), "left ")[..] else {
        panic!("{out:?}");
    };
    let out = server.run(Client::Ours, &["fleave"]);
    out.assert_success();
    let [session, background, sdk_daemon] = pids(&out.stdout_text(), "left ")[..] else {
        panic!("{out:?}");
    };
    census.snapshot();
    // The sessions are over; what they started is still there (as after a cold run).
    let left = [
        (
            in_group,
            "the raw command's `sleep 1000` in the worker's process group",
        ),
        (raw_daemon, "the raw command's daemon"),
        (
            background,
            "the fork-mode command's background `sleep 1000`",
        ),
        (sdk_daemon, "the fork-mode command's daemon"),
    ];
    for (pid, what) in left {
        assert!(
            running(pid),
            "{what} ({pid}) is not running after its session"
        );
    }
    assert!(
        poll(Duration::from_secs(3), || (!running(session)).then_some(())).is_some(),
        "the fork-mode session child {session} outlived its session"
    );
    // The census sees all of them through the tag in their environment.
    let world: Vec<Proc> = census.leftovers();
    for (pid, what) in left {
        assert!(
            world.iter().any(|p| p.pid == pid),
            "the census misses {what} ({pid}):\n{}",
            describe(&world)
        );
    }

    // Stop ngd, then look (the guard's own check, on drop, then finds nothing left).
    server.signal(libc::SIGTERM);
    assert!(
        server.ngd().wait_exit(Duration::from_secs(15)).is_some(),
        "ngd did not stop\n{}",
        server.log()
    );
    let survivors: Vec<String> = left
        .iter()
        .filter(|(pid, _)| running(*pid))
        .map(|(pid, what)| format!("{what} ({pid})"))
        .collect();
    census.assert_nothing_left(
        Duration::from_secs(2),
        &format!("after ngd stopped; of the processes the commands left: {survivors:?}"),
    );
}

/// `kill -9` of `ngd` while two workers and a fork-mode SDK worker are up, with an
/// in-process session and a fork-mode session running: within a second every worker and
/// the session child are gone (`PR_SET_PDEATHSIG`), the clients exit with our client's
/// "connection lost" code (227); the socket file is left behind and refuses connections.
/// A new `ngd` on the same socket path replaces the stale socket (and says so in its log)
/// and serves both plugins with new workers; when it stops, nothing is left.
#[test]
fn ngd_killed_with_sigkill_then_restarted() {
    let raw = raw_plugin::<&str>("k9raw", &[]).set("min_workers", 2);
    let sdk = sdk_plugin("k9sdk");
    let names = [raw.name().to_string(), sdk.name().to_string()];
    let server = PluginServer::start(vec![raw, sdk]);
    let census = Census::new(&server, &names);
    server.wait_plugin(&names[0], Duration::from_secs(20), |r| {
        r.u64_at("idle") == 2
    });

    let inline = server.cmd(Client::Ours).arg("sleep").spawn();
    let forked = server.cmd(Client::Ours).arg("fsleep").spawn();
    inline.wait_for_stdout("\n", Duration::from_secs(10));
    forked.wait_for_stdout("\n", Duration::from_secs(10));
    let world = census.snapshot();
    assert_eq!(
        world.len(),
        4,
        "3 workers and a session child:\n{}",
        describe(&world)
    );

    send_signal(server.pid(), libc::SIGKILL);
    let killed_at = Instant::now();
    let gone = poll(Duration::from_secs(3), || {
        world
            .iter()
            .all(|p| !running(p.pid))
            .then(|| killed_at.elapsed())
    });
    let still: Vec<Proc> = world.iter().filter(|p| running(p.pid)).cloned().collect();
    assert!(
        gone.is_some_and(|t| t < Duration::from_secs(1)),
        "orphaned workers are not gone within 1 s of `kill -9 ngd` (after {gone:?}):\n{}",
        describe(&still)
    );
    eprintln!("kill -9: the plugin world was gone after {gone:?}");
    for client in [inline, forked] {
        let out = client.wait();
        out.assert_code(227);
    }
    census.assert_nothing_left(Duration::from_secs(1), "after kill -9 of ngd");
    assert!(server.ngd().wait_exit(Duration::from_secs(5)).is_some());

    // The socket file is stale: it exists and nobody listens.
    let socket = server.socket_path();
    assert!(
        socket.exists(),
        "the killed ngd's socket {} is gone",
        socket.display()
    );
    let refused = std::os::unix::net::UnixStream::connect(&socket)
        .expect_err("a dead server's socket accepted a connection");
    assert_eq!(
        refused.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{refused}"
    );

    // A new ngd on the same path, same configuration.
    let config = std::fs::read_to_string(server.config_path()).unwrap();
    let restarted = NgdServer::builder(Flavor::Ngd)
        .listen(format!("local:{}", socket.display()))
        .config_line(config)
        .env(TAG_VAR, server.tag())
        .start();
    let census2 = census.for_ngd(restarted.pid());
    let log = restarted.stderr_text();
    assert!(
        log.contains("removed a stale socket left by a dead server"),
        "the restarted ngd does not say it replaced the stale socket:\n{log}"
    );
    let old: Vec<u32> = world.iter().map(|p| p.pid).collect();
    for command in ["ok", "pid"] {
        let out = server.run(Client::Ours, &[command]);
        out.assert_success();
        let pid: u32 = out
            .stdout_text()
            .trim()
            .trim_start_matches("ok ")
            .parse()
            .unwrap_or_else(|_| panic!("{out:?}"));
        assert!(!old.contains(&pid), "{command} ran on an old worker {pid}");
    }
    census2.snapshot();
    send_signal(restarted.pid(), libc::SIGTERM);
    let status = restarted.wait_exit(Duration::from_secs(15));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "the restarted ngd did not stop cleanly\n{}",
        ng_tests::Server::log(&restarted)
    );
    assert!(!socket.exists(), "the restarted ngd left its socket behind");
    census2.assert_nothing_left(Duration::from_secs(3), "after the restarted ngd stopped");
    stop_and_check(&server, &census);
}
