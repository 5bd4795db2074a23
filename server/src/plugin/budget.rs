//! The memory budget of all workers (`memory_budget_mb`): what each worker holds with
//! its descendants, and which pools give way when the total is over.
//!
//! The host tells the budget when a worker's memory may have changed (its hello, a
//! session's end: [`Budget::measure`]) and when the worker is gone ([`Budget::forget`]).
//! The readings are taken off the loop ([`super::footprint`]), so the host looks at them a
//! little later, when the check time the budget gave it comes ([`Budget::fired`], then
//! [`Budget::again`] while readings are still coming). To decide, the host describes its
//! active pools ([`Tenant`]) and their workers that are not quitting ([`Held`]), and the
//! budget answers which pools give way ([`Budget::evictions`]): the least recently used
//! that are awake and idle, as few as bring the total within the budget. No decision is
//! made while a worker's first reading is coming; a worker that cannot be read counts by
//! its own RSS. The decision takes no I/O and is unit-tested below.

use super::footprint::{Footprints, Known, SETTLE};
use super::pool::{Pool, PoolStatus, Residency};
use super::worker::Worker;
use std::time::Instant;

/// The budget and the footprints it is kept with.
#[derive(Debug, Default)]
pub struct Budget {
    /// The most bytes the workers of all pools may hold; `None`: no budget.
    limit: Option<u64>,
    /// Each worker's memory with its descendants, read off the event loop.
    footprints: Footprints,
    /// When the readings asked for are looked at next.
    check_at: Option<Instant>,
}

/// An active pool, as the budget counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tenant {
    /// The pool's index.
    pub pool: usize,
    /// Its last session's start (`None`: never used).
    pub last_used: Option<Instant>,
    /// Whether it may give way when its workers are idle: awake, no session waiting.
    pub may_give_way: bool,
}

/// A worker that is not quitting, as the budget counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// Its pool's index.
    pub pool: usize,
    /// Its process id, by which its footprint is read.
    pub pid: u32,
    /// Its own resident memory as last measured: its footprint until one is read.
    pub rss: u64,
    /// Whether it runs a session.
    pub busy: bool,
}

impl Tenant {
    /// Pool `pool`, if it is active.
    pub fn of(pool: usize, p: &Pool) -> Option<Self> {
        (p.status == PoolStatus::Active).then(|| Tenant {
            pool,
            last_used: p.last_used,
            may_give_way: p.residency == Residency::Awake && p.queue.is_empty(),
        })
    }
}

impl Held {
    /// Worker `w`, unless it is quitting.
    pub fn of(w: &Worker) -> Option<Self> {
        (!w.machine.is_quitting()).then(|| Held {
            pool: w.machine.pool,
            pid: w.pid(),
            rss: w.rss,
            busy: !w.machine.sessions.is_empty(),
        })
    }
}

/// Pools that give way, with the total that made them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    /// The pools, in the order they give way.
    pub pools: Vec<usize>,
    /// What the workers hold, in bytes.
    pub total: u64,
    /// The budget, in bytes.
    pub limit: u64,
}

impl Budget {
    /// A budget of `limit` bytes (`None`: no budget; footprints are still read, for
    /// status).
    pub fn new(limit: Option<u64>) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// Whether there is a budget to keep.
    pub fn is_set(&self) -> bool {
        self.limit.is_some()
    }

    /// Asks for a reading of worker `pid`'s footprint. Returns a time to look at the
    /// readings, for the caller's timers, when none was set.
    pub fn measure(&mut self, pid: u32, now: Instant) -> Option<Instant> {
        self.footprints.request(pid, now);
        self.check_later(now)
    }

    /// Forgets a worker that is gone.
    pub fn forget(&mut self, pid: u32) {
        self.footprints.forget(pid);
    }

    /// Whether `at` is the time the readings are looked at next.
    pub fn is_check_at(&self, at: Instant) -> bool {
        self.check_at == Some(at)
    }

    /// The check time came.
    pub fn fired(&mut self) {
        self.check_at = None;
    }

    /// After a check: another one when readings asked for are still coming.
    pub fn again(&mut self, now: Instant) -> Option<Instant> {
        if self.footprints.pending() {
            self.check_later(now)
        } else {
            None
        }
    }

    fn check_later(&mut self, now: Instant) -> Option<Instant> {
        if self.check_at.is_some() {
            return None;
        }
        let at = now + SETTLE;
        self.check_at = Some(at);
        Some(at)
    }

    /// What worker `pid` holds as shown in status: the latest reading, else (until the
    /// first) its own RSS.
    pub fn shown(&self, pid: u32, rss: u64) -> u64 {
        self.footprints.latest(pid).unwrap_or(rss)
    }

    /// What a worker holds: the latest footprint, else its own RSS; `None` while its first
    /// reading is coming.
    fn held(&self, w: &Held, now: Instant) -> Option<u64> {
        match self.footprints.known(w.pid, now) {
            Known::Bytes(bytes) => Some(bytes),
            Known::Awaited => None,
            Known::Unknown => Some(w.rss),
        }
    }

    /// The pools that give way now to keep `workers` (those of `tenants` not quitting)
    /// within the budget; `None` when there is no budget, a first reading is coming, or
    /// no pool need go.
    pub fn evictions(
        &self,
        tenants: &[Tenant],
        workers: &[Held],
        now: Instant,
    ) -> Option<Eviction> {
        let limit = self.limit?;
        let mut usage = Vec::with_capacity(tenants.len());
        for t in tenants {
            let mut bytes = 0;
            let mut busy = false;
            for w in workers.iter().filter(|w| w.pool == t.pool) {
                bytes += self.held(w, now)?;
                busy |= w.busy;
            }
            usage.push(Usage {
                pool: t.pool,
                bytes,
                last_used: t.last_used,
                evictable: t.may_give_way && !busy,
            });
        }
        let pools = evictions(&usage, limit);
        let total = usage.iter().map(|u| u.bytes).sum();
        (!pools.is_empty()).then_some(Eviction {
            pools,
            total,
            limit,
        })
    }
}

/// One pool's share of the memory budget, as the host measured it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Usage {
    /// The pool's index.
    pub pool: usize,
    /// Its workers' resident memory.
    pub bytes: u64,
    /// Its last session's start (`None`: never used).
    pub last_used: Option<Instant>,
    /// Whether it may give way now: awake, no session running or waiting.
    pub evictable: bool,
}

/// The pools to evict so that the total stays within `budget` bytes: the least recently
/// used evictable ones first (never used before used), as few as needed. When the
/// evictable pools cannot bring the total down, all of them go (pools with sessions stay).
fn evictions(usage: &[Usage], budget: u64) -> Vec<usize> {
    let mut total: u64 = usage.iter().map(|u| u.bytes).sum();
    let mut candidates: Vec<&Usage> = usage
        .iter()
        .filter(|u| u.evictable && u.bytes > 0)
        .collect();
    candidates.sort_by_key(|u| (u.last_used, u.pool));
    let mut out = Vec::new();
    for u in candidates {
        if total <= budget {
            break;
        }
        total -= u.bytes;
        out.push(u.pool);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_least_recently_used_give_way_first() {
        let t0 = Instant::now();
        let mb = 1 << 20;
        let u = |pool, bytes, used: Option<u64>, evictable| Usage {
            pool,
            bytes: bytes * mb,
            last_used: used.map(|s| t0 + Duration::from_secs(s)),
            evictable,
        };
        let usage = [
            u(0, 30, Some(5), true),
            u(1, 30, Some(1), true),
            u(2, 30, Some(9), true),
            u(3, 30, Some(0), false),
        ];
        // 120 MiB against 100: one goes, the least recently used evictable one.
        assert_eq!(evictions(&usage, 100 * mb), [1]);
        assert_eq!(evictions(&usage, 60 * mb), [1, 0]);
        assert_eq!(evictions(&usage, 120 * mb), Vec::<usize>::new());
        // A pool with a session never goes; when the rest cannot make it, all of them do.
        assert_eq!(evictions(&usage, 10 * mb), [1, 0, 2]);
        // Never used counts as least recently used; empty pools are not candidates.
        let usage = [
            u(0, 30, Some(5), true),
            u(1, 30, None, true),
            u(2, 0, None, true),
        ];
        assert_eq!(evictions(&usage, 40 * mb), [1]);
    }

    fn held(pool: usize, pid: u32, mib: u64, busy: bool) -> Held {
        Held {
            pool,
            pid,
            rss: mib << 20,
            busy,
        }
    }

    #[test]
    fn without_a_budget_nothing_gives_way() {
        let t = Tenant {
            pool: 0,
            last_used: None,
            may_give_way: true,
        };
        let budget = Budget::new(None);
        let workers = [held(0, u32::MAX, 1 << 10, false)];
        assert_eq!(budget.evictions(&[t], &workers, Instant::now()), None);
    }

    #[test]
    fn unread_workers_count_by_their_rss_and_busy_pools_stay() {
        let t0 = Instant::now();
        let tenant = |pool, used: u64, may_give_way| Tenant {
            pool,
            last_used: Some(t0 + Duration::from_secs(used)),
            may_give_way,
        };
        let tenants = [tenant(0, 1, true), tenant(1, 2, true), tenant(2, 0, false)];
        // Pids that were never asked for: their RSS stands in.
        let workers = [
            held(0, u32::MAX - 1, 40, false),
            held(1, u32::MAX - 2, 40, false),
            held(1, u32::MAX - 3, 10, true),
            held(2, u32::MAX - 4, 40, false),
        ];
        let budget = Budget::new(Some(100 << 20));
        let e = budget.evictions(&tenants, &workers, t0).unwrap();
        // 130 MiB: pool 2 may not give way, pool 1 runs a session, pool 0 goes.
        assert_eq!((e.pools, e.total, e.limit), (vec![0], 130 << 20, 100 << 20));
        let roomy = Budget::new(Some(200 << 20));
        assert_eq!(roomy.evictions(&tenants, &workers, t0), None);
    }

    #[test]
    fn no_decision_while_a_first_reading_is_coming() {
        let now = Instant::now();
        let mut budget = Budget::new(Some(1));
        let me = std::process::id();
        let at = budget.measure(me, now).expect("a check time");
        assert_eq!(at, now + SETTLE);
        assert!(budget.is_check_at(at));
        assert_eq!(budget.measure(me, now), None, "one check at a time");
        let tenants = [Tenant {
            pool: 0,
            last_used: None,
            may_give_way: true,
        }];
        assert_eq!(
            budget.evictions(&tenants, &[held(0, me, 1, false)], now),
            None
        );
        budget.fired();
        assert!(!budget.is_check_at(at));
        assert_eq!(
            budget.again(now),
            Some(now + SETTLE),
            "the reading is still coming"
        );
        budget.forget(me);
        assert_eq!(budget.shown(me, 7), 7);
    }
}
