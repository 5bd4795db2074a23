//! Running one kind: fire its rounds at the server while watching it, judge every
//! attempt, wait for the server to settle, and probe it again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use ng_testkit::procfs::{self, RssProbe};
use ng_testkit::Transport;

use super::attempt::{Attempt, Gate};
use super::kind::Expect;
use super::response::Seen;
use super::warm::{cpu_idle, probe, Baseline};
use super::{Kind, Outcome, Plan, Target, REFUSAL_MARGIN};

/// What one kind did to the server.
#[derive(Clone, Debug)]
pub struct KindReport {
    /// The attack.
    pub kind: Kind,
    /// Attempts made.
    pub count: usize,
    /// Attempts over TCP and over the Unix socket.
    pub via: (usize, usize),
    /// How many attempts ended each way.
    pub outcomes: BTreeMap<Outcome, usize>,
    /// The slowest outcome, from connect.
    pub max_latency: Duration,
    /// When outcomes were due at the latest.
    pub bound: Duration,
    /// The slowest `ng-true` while the attack ran (floods: not probed).
    pub probe_during: Option<Duration>,
    /// The slowest `ng-true` after it.
    pub probe_after: Option<Duration>,
    /// Descriptors before the attack and once settled.
    pub fds: (usize, usize),
    /// RSS in KiB before, once settled, and the peak while the attack ran.
    pub rss_kib: (u64, u64, u64),
    /// How long the server took to settle after the attack's last connection closed.
    pub settled_in: Duration,
    /// The whole kind, attacks and checks.
    pub elapsed: Duration,
    /// Everything that went wrong; empty if the kind passed.
    pub failures: Vec<String>,
}

impl KindReport {
    /// True if nothing went wrong.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// `refused 76 ×16`, `served 0 ×80, refused 69 ×64`.
    pub fn outcome_summary(&self) -> String {
        self.outcomes
            .iter()
            .map(|(o, n)| format!("{o} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One attempt's end: its number in the round, its transport, what it saw, when it began.
type Record = (usize, Transport, Seen, Instant);

/// What the server did while an attack ran.
struct During {
    attempts: Vec<Record>,
    /// Peak RSS, KiB.
    rss_peak: u64,
    /// The slowest `ng-true` probe.
    probe: Option<Duration>,
    /// Probes that failed.
    failures: Vec<String>,
}

/// Fires `kind` at `target` as `plan` says and checks the server afterwards.
pub fn run_kind(target: &Target, kind: Kind, plan: &Plan, baseline: &Baseline) -> KindReport {
    let started = Instant::now();
    let expect = kind.expect();
    let bound = kind.bound(&target.limits, plan);
    let pid = target.pid;
    // The previous kind's last probe may still be closing.
    let quiet_by = Instant::now() + Duration::from_secs(1);
    let mut fds_before = procfs::fd_count(pid).unwrap_or(0);
    while fds_before > baseline.fds && Instant::now() < quiet_by {
        thread::sleep(Duration::from_millis(20));
        fds_before = procfs::fd_count(pid).unwrap_or(0);
    }
    let rss_before = procfs::rss_kib(pid).unwrap_or(0);
    let per_round = if kind.is_flood() {
        target.limits.max_connections + REFUSAL_MARGIN + plan.concurrency
    } else {
        plan.concurrency.max(1)
    };

    let during = attack(target, kind, plan, bound, per_round, rss_before);
    let attack_done = Instant::now();

    let mut failures = Vec::new();
    let (outcomes, max_latency, via) = judge(&during.attempts, &expect, bound, &mut failures);
    if let Some(per) = expect.peak_per_attempt_kib {
        let allowed = rss_before + per * per_round as u64 + plan.rss_tolerance_kib;
        if during.rss_peak > allowed {
            failures.push(format!(
                "RSS peaked at {} KiB during the attack, over {allowed} KiB \
                 ({rss_before} before + {per} KiB × {per_round} + tolerance)",
                during.rss_peak
            ));
        }
    }
    failures.extend(during.failures);
    // Starvation: the loop serving the attackers must still get to other connections.
    if let Some(t) = during.probe.filter(|t| *t > plan.probe_limit + plan.slack) {
        failures.push(format!(
            "ng-true took {t:.2?} while the attack ran (limit {:.2?})",
            plan.probe_limit + plan.slack
        ));
    }
    let (fds_after, rss_after) = settle(
        pid,
        plan,
        baseline,
        (fds_before, rss_before),
        attack_done,
        &mut failures,
    );
    let settled_in = attack_done.elapsed();
    let probe_after = probe_after(target, plan, &mut failures);

    KindReport {
        kind,
        count: during.attempts.len(),
        via,
        outcomes,
        max_latency,
        bound,
        probe_during: during.probe,
        probe_after,
        fds: (fds_before, fds_after),
        rss_kib: (rss_before, rss_after, during.rss_peak),
        settled_in,
        elapsed: started.elapsed(),
        failures,
    }
}

/// Runs the rounds of the attack, `per_round` attempts at once, while an [`RssProbe`]
/// samples the server's RSS and a thread (except in a flood, which is meant to fill every
/// slot) probes it with `ng-true`.
fn attack(
    target: &Target,
    kind: Kind,
    plan: &Plan,
    bound: Duration,
    per_round: usize,
    rss_before: u64,
) -> During {
    let stop = AtomicBool::new(false);
    let rss = RssProbe::start(target.pid);
    let probes: Mutex<(Option<Duration>, Vec<String>)> = Mutex::new((None, Vec::new()));
    let mut attempts = Vec::new();
    let mut rss_peak = rss_before;
    thread::scope(|scope| {
        if !kind.is_flood() {
            scope.spawn(|| {
                // At least once, however short the attack.
                for n in 0..100_000usize {
                    let address = &target.addresses[n % target.addresses.len()];
                    let result = probe(address, bound + plan.slack);
                    let mut d = probes.lock().unwrap();
                    match result {
                        Ok(t) => d.0 = Some(d.0.map_or(t, |m: Duration| m.max(t))),
                        Err(e) => {
                            d.1.push(format!("ng-true via {address} during the attack: {e}"))
                        }
                    }
                    drop(d);
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    thread::sleep(Duration::from_millis(100));
                }
            });
        }
        for round in 0..plan.rounds.max(1) {
            attempts.extend(fire_round(target, kind, plan, bound, per_round, round));
        }
        rss_peak = rss_peak.max(rss.stop());
        stop.store(true, Ordering::Relaxed);
    });
    let (probe, failures) = probes.into_inner().unwrap();
    During {
        attempts,
        rss_peak,
        probe,
        failures,
    }
}

/// One round: `per_round` attempts on threads of their own, alternating addresses.
fn fire_round(
    target: &Target,
    kind: Kind,
    plan: &Plan,
    bound: Duration,
    per_round: usize,
    round: usize,
) -> Vec<Record> {
    let gate = Gate::new(per_round);
    let results = Mutex::new(Vec::with_capacity(per_round));
    thread::scope(|s| {
        for i in 0..per_round {
            let address = &target.addresses[(i + round) % target.addresses.len()];
            let (results, gate) = (&results, &gate);
            let spawned = thread::Builder::new()
                .stack_size(256 << 10)
                .spawn_scoped(s, move || {
                    let t0 = Instant::now();
                    let attempt = Attempt {
                        kind,
                        address,
                        pid: target.pid,
                        limits: &target.limits,
                        plan,
                        index: i + round * per_round,
                        started: t0,
                        deadline: t0 + bound,
                        gate: kind.is_flood().then_some(gate),
                    };
                    let seen = super::attacks::of(kind)(&attempt);
                    results
                        .lock()
                        .unwrap()
                        .push((i, address.transport(), seen, t0));
                });
            if let Err(e) = spawned {
                gate.arrive();
                results.lock().unwrap().push((
                    i,
                    address.transport(),
                    Seen::now(Outcome::ConnectFailed, format!("spawn: {e}")),
                    Instant::now(),
                ));
            }
        }
    });
    results.into_inner().unwrap()
}

/// Counts the outcomes and checks each against what the kind allows and by when; the
/// outcome counts, the slowest outcome, and the attempts per transport.
fn judge(
    attempts: &[Record],
    expect: &Expect,
    bound: Duration,
    failures: &mut Vec<String>,
) -> (BTreeMap<Outcome, usize>, Duration, (usize, usize)) {
    let mut outcomes = BTreeMap::new();
    let mut max_latency = Duration::ZERO;
    let mut via = (0, 0);
    for (i, transport, seen, t0) in attempts {
        *outcomes.entry(seen.outcome).or_insert(0) += 1;
        match transport {
            Transport::Tcp => via.0 += 1,
            Transport::Unix => via.1 += 1,
        }
        let latency = seen.at.saturating_duration_since(*t0);
        max_latency = max_latency.max(latency);
        if !expect.allowed.contains(&seen.outcome) {
            failures.push(format!(
                "attempt {i} via {transport:?}: {} after {latency:.2?} ({}); expected {}",
                seen.outcome,
                seen.detail,
                expect
                    .allowed
                    .iter()
                    .map(Outcome::to_string)
                    .collect::<Vec<_>>()
                    .join(" or ")
            ));
        } else if latency > bound {
            failures.push(format!(
                "attempt {i} via {transport:?}: {} only after {latency:.2?}, due within {bound:.2?}",
                seen.outcome
            ));
        }
    }
    for want in &expect.required {
        if !outcomes.contains_key(want) {
            failures.push(format!(
                "no attempt got {want} (got {})",
                outcomes
                    .iter()
                    .map(|(o, n)| format!("{o} ×{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    (outcomes, max_latency, via)
}

/// Waits until descriptors, RSS and CPU are back (`before` is descriptors and RSS before
/// the attack), for at most [`Plan::settle`] after `attack_done`; the descriptors and RSS
/// seen last.
fn settle(
    pid: u32,
    plan: &Plan,
    baseline: &Baseline,
    (fds_before, rss_before): (usize, u64),
    attack_done: Instant,
    failures: &mut Vec<String>,
) -> (usize, u64) {
    let rss_limit = rss_before.max(baseline.rss_kib) + plan.rss_tolerance_kib;
    let settle_deadline = attack_done + plan.settle;
    loop {
        let fds_after = procfs::fd_count(pid).unwrap_or(usize::MAX);
        let rss_after = procfs::rss_kib(pid).unwrap_or(u64::MAX);
        let idle = cpu_idle(pid);
        if fds_after <= fds_before && rss_after <= rss_limit && idle {
            return (fds_after, rss_after);
        }
        if Instant::now() <= settle_deadline {
            continue;
        }
        if !procfs::running(pid) {
            failures.push("the server died".to_string());
            return (fds_after, rss_after);
        }
        if fds_after > fds_before {
            failures.push(format!(
                "{fds_after} descriptors open {:.1?} after the attack, {fds_before} before:\n{}",
                plan.settle,
                procfs::fd_listing(pid)
            ));
        }
        if rss_after > rss_limit {
            failures.push(format!(
                "RSS {rss_after} KiB {:.1?} after the attack; before {rss_before} KiB, \
                 baseline {} KiB, tolerance {} KiB",
                plan.settle, baseline.rss_kib, plan.rss_tolerance_kib
            ));
        }
        if !idle {
            failures.push(format!(
                "the server still uses CPU {:.1?} after the attack (a command left running?)",
                plan.settle
            ));
        }
        return (fds_after, rss_after);
    }
}

/// `ng-true` three times over each address after the attack; the slowest answer.
fn probe_after(target: &Target, plan: &Plan, failures: &mut Vec<String>) -> Option<Duration> {
    if !procfs::running(target.pid) {
        if !failures.iter().any(|f| f == "the server died") {
            failures.push("the server died".to_string());
        }
        return None;
    }
    let mut slowest = None;
    for n in 0..3 * target.addresses.len() {
        let address = &target.addresses[n % target.addresses.len()];
        match probe(address, plan.probe_limit + plan.slack) {
            Ok(t) => {
                slowest = Some(slowest.map_or(t, |m: Duration| m.max(t)));
                if t > plan.probe_limit {
                    failures.push(format!(
                        "ng-true via {address} after the attack took {t:.2?} (limit {:.2?})",
                        plan.probe_limit
                    ));
                }
            }
            Err(e) => failures.push(format!("ng-true via {address} after the attack: {e}")),
        }
    }
    slowest
}
