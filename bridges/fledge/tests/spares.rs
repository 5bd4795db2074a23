//! Spare processes around the end of runs and of the bridge: runs right after one another,
//! and no spare outlives the bridge (each is killed; none is left to read end of file on
//! its stdin). That a run waits for the spare still being started is tested in
//! `src/host/spares.rs`.
//!
//! This test binary makes itself a child subreaper, so the bridge's orphans become its
//! children and their ends can be waited for; that is why these tests live in a binary of
//! their own.

mod common;

use common::{log_lines, pid_of, Driver, Spec, World};
use serde_json::json;
use std::path::Path;

fn warm(w: &World, log: &Path) -> Spec {
    let mut s = Spec::new(w, "warm", &[]);
    s.env.push(("WARM_LOG".into(), log.display().to_string()));
    s
}

/// Waits for every remaining descendant (orphans included) to end; returns each one's
/// pid and wait status.
fn reap_all() -> Vec<(libc::pid_t, libc::c_int)> {
    let mut ended = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: waiting for any child of this test process.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid > 0 {
            ended.push((pid, status));
            continue;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            _ => return ended,
        }
    }
}

#[test]
fn spares_around_the_end_of_runs_and_of_the_bridge() {
    // SAFETY: a process attribute of this test binary (see the module comment).
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) }, 0);
    let w = World::new();
    let log = w.tmp.path().join("starts.log");

    // Runs right after one another, each asking for the next process as it ends.
    let mut d = Driver::start(&w.config(json!({})), &[]);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let o = d.run(warm(&w, &log));
        assert_eq!(o.code, 0, "{}", o.err());
        seen.push(pid_of(&o.out()));
    }
    seen.dedup();
    assert_eq!(seen.len(), 3, "each run had a process of its own: {seen:?}");
    assert_eq!(d.quit(), 0);

    // The bridge told to quit right after a run (its spare being started, or not yet)
    // and a while after one (its spare waiting): every spare is killed with the bridge.
    for round in 0..12 {
        let mut d = Driver::start(&w.config(json!({})), &[]);
        assert_eq!(d.run(warm(&w, &log)).code, 0);
        if round % 3 == 2 {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        assert_eq!(d.quit(), 0);
    }
    let ended = reap_all();
    let log_text = log_lines(&log);
    assert!(
        !log_text.iter().any(|l| l.starts_with("eof")),
        "a spare outlived the bridge and read end of file: {log_text:?}"
    );
    // Orphaned spares (killed by the bridge, reaped here) died of SIGKILL.
    for (pid, status) in ended {
        if log_text.contains(&pid.to_string()) {
            assert!(
                libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
                "process {pid} ended with status {status:#x}"
            );
        }
    }
}
