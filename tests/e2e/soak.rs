//! The soak, bounded form: `benches/soak`'s mix and checks at CI size.
//!
//! One `ngd` (this build's, with `shutdown_grace_ms = 1000`) with the soak's Python plugin
//! (`benches/soak.d/worker.py`: `soak-inline` in-process, `soak-fork` fork mode; one to four
//! workers) on loopback TCP and a Unix socket. A warm-up of [`WARMUP`] invocations, then
//! [`COUNT`] more, [`PARALLEL`] at once, drawn from a seed (`ng_tests::soak::Plan`):
//! `ng-true`, `ng-cat` with 0–4 KiB of stdin, `ng-yes 64K` and both plugin commands (exit
//! codes 0 and not), with `ng` and `ng-nailgun` over both transports; [`KILL_RATE`] of them
//! get `SIGKILL` a few milliseconds after the spawn. Then:
//!
//! * every invocation not killed produced exactly its exit code, stdout and stderr;
//! * once idle again, `ngd` has the descriptors it had idle after the warm-up, its pool is
//!   back to one worker and no session child is left (the worker may keep two children:
//!   the SDK's spare, forked ahead of time for the next fork-mode session, and the spare's
//!   successor);
//! * after `SIGTERM`, no process of the plugin world is left (the `PluginServer` guard).
//!
//! RSS is printed (start after the warm-up, end once idle), not asserted: a debug build and
//! a run this short say little about it; `benches/soak` asserts it over 100 000
//! invocations.

use std::time::{Duration, Instant};

use ng_tests::plugins::PluginServer;
use ng_tests::soak::{self, Plan, Verdict};

/// Invocations before the baseline.
const WARMUP: usize = 300;
/// Invocations measured.
const COUNT: usize = 1500;
/// Clients at once.
const PARALLEL: usize = 8;
/// Share of the invocations that get `SIGKILL`.
const KILL_RATE: f64 = 0.02;
/// `SIGKILL` 0 to this long after the spawn (three times as long for plugin commands).
const KILL_DELAY: Duration = Duration::from_millis(15);
/// The plan's seed.
const SEED: u64 = 0x50a4;
/// No invocation starts after this long (the run then fails as incomplete).
const TIME_LIMIT: Duration = Duration::from_secs(120);
/// Longest wait for `ngd` to be idle again.
const SETTLE: Duration = Duration::from_secs(20);

#[test]
fn mixed_load_with_killed_clients_leaves_nothing_behind() {
    let started = Instant::now();
    let stdin_dir = tempfile::tempdir().expect("a directory for the stdin files");
    let plan = Plan::new(
        SEED,
        WARMUP + COUNT,
        KILL_RATE,
        KILL_DELAY,
        stdin_dir.path(),
    );
    let server = PluginServer::builder().plugin(soak::plugin()).start();
    let deadline = started + TIME_LIMIT;

    let warm = soak::run(&server, &plan, 0..WARMUP, PARALLEL, deadline);
    let (base, waited, idle) = soak::settle(&server, None, SETTLE);
    assert!(
        idle,
        "ngd was not idle {waited:.1?} after the warm-up: {base:?}\n{}",
        server.log()
    );

    let t0 = Instant::now();
    let outcomes = soak::run(&server, &plan, WARMUP..WARMUP + COUNT, PARALLEL, deadline);
    let took = t0.elapsed();
    let (end, waited_end, idle_end) = soak::settle(&server, Some(base.fds), SETTLE);
    let fd_listing = ng_testkit::procfs::fd_listing(server.pid());

    let killed = outcomes
        .iter()
        .filter(|o| o.verdict == Verdict::Killed)
        .count();
    eprintln!(
        "soak: {} invocations in {took:.1?} ({:.0}/s), {PARALLEL} at once, {killed} killed\n{}\
         ngd idle after the warm-up -> idle after the run ({waited_end:.1?} later): \
         fds {} -> {}, RSS {} -> {} KiB ({:+} KiB, not asserted), threads {} -> {}, \
         workers {} -> {}, their children {} (spares), below those {}",
        outcomes.len(),
        outcomes.len() as f64 / took.as_secs_f64(),
        soak::summary(&outcomes),
        base.fds,
        end.fds,
        base.rss_kib,
        end.rss_kib,
        end.rss_kib as i64 - base.rss_kib as i64,
        base.threads,
        end.threads,
        base.workers,
        end.workers,
        end.children,
        end.deeper,
    );

    let mut failures = soak::failures(&warm);
    failures.extend(soak::failures(&outcomes));
    assert!(
        failures.is_empty(),
        "{} of {} invocations not killed failed:\n{}\n{}",
        failures.len(),
        warm.len() + outcomes.len(),
        failures.join("\n"),
        server.log()
    );
    assert_eq!(
        (warm.len(), outcomes.len()),
        (WARMUP, COUNT),
        "the run did not finish within {TIME_LIMIT:?}"
    );
    assert!(
        killed > 0,
        "no client was killed: the plan's kills all came too late"
    );
    assert_eq!(
        end.fds,
        base.fds,
        "ngd's descriptors did not come back to the baseline within {SETTLE:?}:\n{fd_listing}\n{}",
        server.log()
    );
    assert!(
        idle_end
            && end.workers == soak::MIN_WORKERS
            && end.children <= end.workers * soak::IDLE_CHILDREN_PER_WORKER
            && end.deeper == 0,
        "ngd's pool was not back to {} idle worker (with at most its spare and its successor) within \
         {SETTLE:?}: {end:?}\n{}",
        soak::MIN_WORKERS,
        server.log()
    );
    // SIGTERM; fails the test if ngd does not exit or any process of its world is left.
    server.stop();
    eprintln!("soak test took {:.1?}", started.elapsed());
}
