//! One plugin's pool, as a state machine without I/O: its queue of waiting sessions, its
//! failure accounting (backoff, disable), how many workers to start, and its notices.
//!
//! The host ([`super::PluginHost`]) tells the pool what happened (a session queued, a
//! worker failed, a session completed) with the time, and asks what to do: which queued
//! sessions to refuse and why ([`Pool::expire`]), how many workers to start
//! ([`Pool::spawns_wanted`]). Nothing here touches a socket, a process or a clock, so the
//! rules of `docs/ngw.md` §9 (backoff `restart_backoff_ms · 2^(failures-1)` capped at 30 s,
//! disable after `max_restarts` consecutive failures with the reason, queue full → 75,
//! queue timeout → 75) are unit-tested below.
//!
//! A pool also decides whether it keeps workers at all ([`Residency`]): one with no
//! session for `idle_to_zero_ms` falls asleep and keeps none (the next session starts a
//! worker, as auto-start starts a server), and under the server's memory budget the least
//! recently used pools give way first ([`super::budget`]).
//!
//! A pool is also disabled by its worker's `disabled` notice (§15.3): a bridge that gave up
//! on its plugin says so, and from then on the pool refuses sessions (126) with the
//! bridge's reason, exactly as if ngd had given up itself. Like every disabled pool, it is
//! replaced by a fresh one on the next reload, changed table or not.

use super::config::PluginConfig;
use super::machine::Machine;
use crate::exit_codes;
use crate::session_io::ConnKey;
use ngw_vocab::restart::{Backoff, Decision, GiveUp, RestartPolicy};
use ngw_vocab::{Hello, NoticeKind};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

/// The longest restart delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How many notices a pool keeps (`docs/ngw.md` §15.3).
pub const NOTICES_KEPT: usize = 8;

/// Whether a pool takes sessions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum PoolStatus {
    /// Serving (or starting workers).
    Active,
    /// Gave up after repeated failures, or refused permanently; clients get 126.
    Disabled {
        /// Why, for clients and `ng-stats`.
        reason: String,
    },
    /// Removed by a reload: finishing its sessions, then gone.
    Retiring,
}

/// Why a session is refused a worker; each has its exit code and message (`docs/ngw.md` §9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Every worker is busy and `queue` sessions already wait.
    Busy {
        /// Sessions waiting.
        queued: usize,
    },
    /// The session waited `queue_timeout_ms`.
    TimedOut,
    /// The pool is disabled.
    CannotStart(String),
    /// The server is stopping.
    Stopping,
}

impl Refusal {
    /// The client's exit code.
    pub fn code(&self) -> i32 {
        match self {
            Refusal::Busy { .. } | Refusal::TimedOut => exit_codes::TEMPFAIL,
            Refusal::CannotStart(_) => exit_codes::CANNOT_START,
            Refusal::Stopping => exit_codes::UNAVAILABLE,
        }
    }

    /// The client's `ngd: ` line for `command`.
    pub fn message(&self, command: &str) -> String {
        match self {
            Refusal::Busy { queued } => {
                format!("ngd: '{command}' is busy ({queued} queued); try again later")
            }
            Refusal::TimedOut => format!("ngd: '{command}' timed out waiting for a worker"),
            Refusal::CannotStart(reason) => {
                format!("ngd: command '{command}' could not start: {reason}")
            }
            Refusal::Stopping => {
                format!("ngd: command '{command}' cancelled: the server is shutting down")
            }
        }
    }
}

/// A session waiting for a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// The client.
    pub conn: ConnKey,
    /// Since when it waits.
    pub since: Instant,
}

/// A worker's notice (`n` chunk), as kept and shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// What happened.
    pub kind: NoticeKind,
    /// The worker's sentence.
    pub message: String,
    /// The session it is about, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// The worker's pid.
    pub pid: u32,
    /// When ngd received it, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

impl Notice {
    /// A notice from worker `pid`, received now.
    pub fn received(kind: NoticeKind, message: String, session: Option<u64>, pid: u32) -> Self {
        Self {
            kind,
            message,
            session,
            pid,
            at_ms: Self::now_ms(),
        }
    }

    /// Milliseconds since the Unix epoch, for [`Notice::at_ms`].
    pub fn now_ms() -> u64 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Whether a pool keeps its workers running between sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Residency {
    /// Keeps `min_workers` running.
    Awake,
    /// No session for `idle_to_zero_ms`: keeps no worker until its next session.
    Asleep,
    /// Gave way to more recently used plugins under the memory budget: keeps no worker
    /// until its next session.
    Evicted,
}

/// What a pool learned from a worker's hello.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Learned {
    /// Its routes changed (class names, or the commands learned): publish them again.
    pub reroute: bool,
    /// The hello does not serve what the pool must: the worker broke the protocol.
    pub fault: Option<String>,
}

/// What a reload does with the pools (`ngd reload`): a pool whose table is unchanged and
/// that is active is kept; one whose table changed or went, or that is disabled, retires;
/// every table not kept starts a new pool, which takes over what a retiring pool of its
/// name had.
#[derive(Debug, PartialEq, Eq)]
pub struct Reload<'a> {
    /// How many pools are kept.
    pub kept: usize,
    /// The pools that retire.
    pub retire: Vec<usize>,
    /// The tables that start a new pool.
    pub start: Vec<&'a PluginConfig>,
}

impl<'a> Reload<'a> {
    /// The plan for reloading `pools` with the tables `plugins`.
    pub fn plan(pools: &[Pool], plugins: &'a [PluginConfig]) -> Self {
        let mut kept = Vec::new();
        let mut retire = Vec::new();
        for (pool, p) in pools.iter().enumerate() {
            if p.status == PoolStatus::Retiring {
                continue;
            }
            match plugins.iter().find(|c| c.name == p.config.name) {
                Some(c) if *c == p.config && p.status == PoolStatus::Active => {
                    kept.push(c.name.as_str());
                }
                _ => retire.push(pool),
            }
        }
        let start = plugins
            .iter()
            .filter(|c| !kept.contains(&c.name.as_str()))
            .collect();
        Self {
            kept: kept.len(),
            retire,
            start,
        }
    }
}

/// What the host counts of a pool's workers when the pool decides about spawning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Workers waiting for their hello.
    pub starting: usize,
    /// Workers not being stopped.
    pub alive: usize,
    /// A failed worker is not reaped yet (its failure is not counted yet).
    pub failure_pending: bool,
}

/// A pool's restart policy: `restart_backoff_ms` doubling after each failure in a row up
/// to [`MAX_BACKOFF`]; give up at the `max_restarts`-th failure in a row.
pub fn restart_policy(config: &PluginConfig) -> RestartPolicy {
    let backoff = Backoff::Doubling {
        base: PluginConfig::ms(config.restart_backoff_ms),
        max: MAX_BACKOFF,
    };
    RestartPolicy::new(backoff, GiveUp::InARow(config.max_restarts))
}

/// One plugin's pool. See the module docs.
#[derive(Debug)]
pub struct Pool {
    /// Its configuration.
    pub config: PluginConfig,
    /// Active, disabled or retiring.
    pub status: PoolStatus,
    /// Sessions waiting for a worker, oldest first.
    pub queue: VecDeque<Waiting>,
    /// Consecutive failed starts or early deaths, as [`Pool::restart`] counts them.
    pub failures: u32,
    /// When to start a worker again after a failure, and when to give up.
    pub restart: RestartPolicy,
    /// Workers replaced after they failed or died, over the pool's life.
    pub restarts: u64,
    /// No spawn before this (backoff).
    pub next_spawn: Option<Instant>,
    /// The last failure's reason.
    pub last_failure: Option<String>,
    /// Commands routed here (configured, or learned from the first hello).
    pub commands: Vec<String>,
    /// A worker's hello said it serves class names (the config may say so too).
    pub class_names: bool,
    /// Whether its workers take the client's pseudo-terminal (`ctty`), as the last hello
    /// said; `None` before the first.
    pub takes_ctty: Option<bool>,
    /// Sessions completed.
    pub sessions: u64,
    /// The last [`NOTICES_KEPT`] notices, oldest first.
    pub notices: VecDeque<Notice>,
    /// Notices received, per kind.
    pub notice_counts: BTreeMap<String, u64>,
    /// The workers' counters (`count` notices), per name.
    pub counters: BTreeMap<String, u64>,
    /// Whether it keeps workers between sessions.
    pub residency: Residency,
    /// When its last session was queued (or the pool made, [`Pool::touch`]).
    pub last_used: Option<Instant>,
    /// A pool derived for a shim's program ([`super::derive`]): the plugin it was derived
    /// from. Such a pool routes no command: only its plugin's shims reach it.
    pub derived_from: Option<String>,
}

impl Pool {
    /// A pool for `config`, with its configured commands.
    pub fn new(config: PluginConfig) -> Self {
        let commands = config.commands.clone();
        let restart = restart_policy(&config);
        Self {
            config,
            status: PoolStatus::Active,
            queue: VecDeque::new(),
            failures: 0,
            restart,
            restarts: 0,
            next_spawn: None,
            last_failure: None,
            commands,
            class_names: false,
            takes_ctty: None,
            sessions: 0,
            notices: VecDeque::new(),
            notice_counts: BTreeMap::new(),
            counters: BTreeMap::new(),
            residency: Residency::Awake,
            last_used: None,
            derived_from: None,
        }
    }

    /// Marks the pool used at `now`: it wakes (keeps `min_workers` again) and is the most
    /// recently used.
    pub fn touch(&mut self, now: Instant) {
        self.last_used = Some(now);
        self.residency = Residency::Awake;
    }

    /// Why a pool cannot use a worker whose hello is `hello`: it speaks another version of
    /// the protocol (`None`: this one).
    pub fn unspoken(hello: &Hello) -> Option<String> {
        if hello.speaks_this_protocol() {
            return None;
        }
        let theirs = hello.protocol.map_or_else(
            || "no protocol version".to_owned(),
            |v| format!("protocol {v}"),
        );
        let ours = ngw_vocab::PROTOCOL;
        Some(format!(
            "its worker speaks ngw {theirs}; this ngd speaks {ours}"
        ))
    }

    /// Learns what a worker's hello says (`docs/ngw.md` §5): whether its workers take the
    /// client's terminal (`takes_ctty`), whether they serve class names, and, when the
    /// table lists no commands, the commands; when it lists them, every one must be served.
    pub fn learn(&mut self, hello: &Hello, takes_ctty: bool) -> Learned {
        let mut learned = Learned::default();
        self.takes_ctty = Some(takes_ctty);
        if hello.class_names && !self.class_names {
            self.class_names = true;
            learned.reroute = true;
        }
        if self.config.commands.is_empty() {
            if hello.commands.is_empty() && !self.class_names {
                learned.fault = Some("its hello lists no commands".into());
            } else if self.commands != hello.commands {
                self.commands = hello.commands.clone();
                learned.reroute = true;
            }
        } else if let Some(missing) = self
            .config
            .commands
            .iter()
            .find(|c| !hello.commands.contains(c))
        {
            learned.fault = Some(format!("worker does not serve command '{missing}'"));
        }
        learned
    }

    /// Why a worker of this pool whose session just ended quits rather than waits for the
    /// next one (`None`: it waits): its session limit, its memory cap (`rss` bytes), its
    /// own `retire`, ngd stopping, or the pool no longer active.
    pub fn why_quit(&self, machine: &Machine, rss: u64, stopping: bool) -> Option<&'static str> {
        let config = &self.config;
        if config.recycle_after > 0 && machine.completed >= config.recycle_after {
            Some("recycled after its session limit")
        } else if config.max_memory_mb > 0 && rss > config.max_memory_mb << 20 {
            Some("recycled over its memory cap")
        } else if machine.retired {
            Some("retired by its own notice")
        } else if stopping {
            Some("stopping")
        } else if self.status != PoolStatus::Active {
            Some("no longer needed")
        } else {
            None
        }
    }

    /// Why it starts a worker now, with `alive` workers not quitting, for the log: a restart
    /// after failures (with the last one), its first workers, a replacement to keep
    /// `min_workers`, or sessions waiting.
    pub fn spawn_reason(&self, alive: usize) -> String {
        if self.failures > 0 {
            return format!(
                "restart after {} failure(s) in a row: {}",
                self.failures,
                self.last_failure.as_deref().unwrap_or("unknown")
            );
        }
        if alive < self.config.min_workers {
            if self.sessions == 0 && self.restarts == 0 {
                "starting the pool".to_owned()
            } else {
                format!(
                    "replacing a worker (min_workers = {})",
                    self.config.min_workers
                )
            }
        } else {
            format!("{} session(s) waiting", self.queue.len())
        }
    }

    /// The workers it keeps running: `min_workers` while awake, none asleep or evicted.
    pub fn min_workers(&self) -> usize {
        match self.residency {
            Residency::Awake => self.config.min_workers,
            Residency::Asleep | Residency::Evicted => 0,
        }
    }

    /// A session of the pool ended at `now`: it was in use until then.
    pub fn session_ended(&mut self, now: Instant) {
        self.last_used = Some(now);
    }

    /// When it falls asleep if no session comes: `idle_to_zero_ms` after its last use (a
    /// session's start or end, whichever came last), so a session longer than that does
    /// not leave it asleep the moment it ends.
    pub fn sleep_at(&self) -> Option<Instant> {
        let after = self.config.idle_to_zero_ms;
        (self.residency == Residency::Awake && after > 0 && self.config.min_workers > 0)
            .then_some(self.last_used?)
            .map(|t| t + PluginConfig::ms(after))
    }

    /// Falls asleep if it is time and nothing runs (`running` sessions) or waits; true if
    /// it did (the host then stops its idle workers).
    pub fn maybe_sleep(&mut self, now: Instant, running: usize) -> bool {
        let due = self.sleep_at().is_some_and(|t| now >= t);
        if due && running == 0 && self.queue.is_empty() {
            self.residency = Residency::Asleep;
            return true;
        }
        false
    }

    /// Gives way under the memory budget (the host stops its idle workers).
    pub fn evict(&mut self) {
        self.residency = Residency::Evicted;
    }

    /// Takes over from `old`, a pool of the same name that a reload retires: its queued
    /// sessions, and the commands it learned from its workers' hello when the new table
    /// names none, so that the commands stay routed (and their sessions wait for the new
    /// worker's hello) instead of being unknown until then. A hello that lists other
    /// commands replaces them.
    pub fn take_over(&mut self, old: &mut Pool) {
        self.queue.extend(old.queue.drain(..));
        if self.config.commands.is_empty() && !old.commands.is_empty() {
            self.commands = old.commands.clone();
        }
        self.class_names |= old.class_names;
    }

    /// The delay before the next start after `failures` consecutive failures.
    pub fn backoff(&self) -> Duration {
        self.restart.delay(self.failures)
    }

    /// Queues a session, or refuses it when `queue` sessions already wait beyond the
    /// `free` session slots of ready workers.
    pub fn admit(&mut self, conn: ConnKey, free: usize, now: Instant) -> Result<(), Refusal> {
        let queued = self.queue.len();
        if self.status == PoolStatus::Active && queued >= free + self.config.queue {
            return Err(Refusal::Busy { queued });
        }
        self.touch(now);
        self.queue.push_back(Waiting { conn, since: now });
        Ok(())
    }

    /// Takes the queued sessions that cannot be served: all of them when the pool is
    /// disabled or the server stops, else those that waited `queue_timeout_ms`.
    pub fn expire(&mut self, now: Instant, stopping: bool) -> Vec<(ConnKey, Refusal)> {
        let timeout = PluginConfig::ms(self.config.queue_timeout_ms);
        let mut refused = Vec::new();
        while let Some(w) = self.queue.front().copied() {
            let refusal = match &self.status {
                PoolStatus::Disabled { reason } => Refusal::CannotStart(reason.clone()),
                _ if stopping => Refusal::Stopping,
                _ if now >= w.since + timeout => Refusal::TimedOut,
                _ => break,
            };
            self.queue.pop_front();
            refused.push((w.conn, refusal));
        }
        refused
    }

    /// How many workers to start now: up to `min_workers`, plus one per queued session not
    /// covered by a starting worker, within `max_workers`, and none during a backoff or
    /// while a failed worker is not yet reaped (its failure decides the next backoff).
    pub fn spawns_wanted(&mut self, now: Instant, census: Census, stopping: bool) -> usize {
        if self.status != PoolStatus::Active || stopping || census.failure_pending {
            return 0;
        }
        if self.next_spawn.is_some_and(|t| now < t) {
            return 0;
        }
        // A passed backoff is over whether or not a worker is wanted now.
        self.next_spawn = None;
        let for_queue = self.queue.len().saturating_sub(census.starting);
        let want = self
            .min_workers()
            .saturating_sub(census.alive)
            .max(for_queue);
        want.min(self.config.max_workers().saturating_sub(census.alive))
    }

    /// Records a failed start or an early death; true if the pool is now disabled.
    pub fn record_failure(&mut self, reason: String, now: Instant) -> bool {
        let decision = self.restart.on_failure(now);
        self.failures = self.restart.failures();
        self.last_failure = Some(reason.clone());
        if let Decision::GiveUp { .. } = decision {
            self.next_spawn = None;
            if self.status == PoolStatus::Active {
                self.status = PoolStatus::Disabled {
                    reason: format!("{reason} ({} failures in a row)", self.failures),
                };
            }
            return true;
        }
        if let Decision::RestartAfter(delay) = decision {
            self.next_spawn = Some(now + delay);
        }
        false
    }

    /// Disables the pool at once (a failure that would only repeat).
    pub fn disable(&mut self, reason: String) {
        self.last_failure = Some(reason.clone());
        self.next_spawn = None;
        if self.status == PoolStatus::Active {
            self.status = PoolStatus::Disabled { reason };
        }
    }

    /// A session completed: the failure count starts over.
    pub fn session_completed(&mut self) {
        self.sessions += 1;
        self.restart.on_success();
        self.failures = self.restart.failures();
    }

    /// Keeps a notice (the last [`NOTICES_KEPT`]) and counts it. A `disabled` notice (a
    /// bridge whose plugin failed too often) disables the pool with the notice's message
    /// as the reason. A `count` notice adds one to the counter its message names, and is
    /// neither kept nor counted as a notice.
    pub fn notice(&mut self, notice: Notice) {
        if notice.kind == NoticeKind::Count {
            *self.counters.entry(notice.message).or_default() += 1;
            return;
        }
        if notice.kind == NoticeKind::Disabled {
            self.disable(notice.message.clone());
        }
        let count = self.notice_counts.entry(notice.kind.as_str().to_owned());
        *count.or_default() += 1;
        if self.notices.len() == NOTICES_KEPT {
            self.notices.pop_front();
        }
        self.notices.push_back(notice);
    }

    /// When the pool next needs attention: its oldest session's queue timeout, the end of
    /// its backoff, the time it falls asleep.
    pub fn deadline(&self) -> Option<Instant> {
        let queue = self
            .queue
            .front()
            .map(|w| w.since + PluginConfig::ms(self.config.queue_timeout_ms));
        let spawn = self
            .next_spawn
            .filter(|_| self.status == PoolStatus::Active);
        let sleep = self
            .sleep_at()
            .filter(|_| self.status == PoolStatus::Active);
        [queue, spawn, sleep].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> PluginConfig {
        toml::from_str(&format!("name = \"p\"\ncommand = [\"true\"]\n{extra}")).unwrap()
    }

    #[test]
    fn a_hello_teaches_commands_and_class_names_or_is_at_fault() {
        let hello = |commands: &[&str], class_names| Hello {
            protocol: Some(1),
            commands: commands.iter().map(|c| c.to_string()).collect(),
            class_names,
            ..Hello::default()
        };
        let mut p = Pool::new(config(""));
        let learned = p.learn(&hello(&["a", "b"], false), true);
        assert_eq!(
            learned,
            Learned {
                reroute: true,
                fault: None
            }
        );
        assert_eq!((p.commands.len(), p.takes_ctty), (2, Some(true)));
        assert_eq!(
            p.learn(&hello(&["a", "b"], false), true),
            Learned::default()
        );
        let empty = p.learn(&hello(&[], false), false);
        assert_eq!(empty.fault.as_deref(), Some("its hello lists no commands"));
        let classes = p.learn(&hello(&[], true), false);
        assert_eq!(
            classes,
            Learned {
                reroute: true,
                fault: None
            }
        );
        assert!(p.commands.is_empty() && p.class_names);
        let mut fixed = Pool::new(config("commands = [\"a\", \"b\"]"));
        let missing = fixed.learn(&hello(&["a"], false), false);
        let fault = "worker does not serve command 'b'";
        assert_eq!(missing.fault.as_deref(), Some(fault));
        assert_eq!(fixed.commands, ["a", "b"], "the table's commands stay");
    }

    fn named(name: &str, extra: &str) -> PluginConfig {
        toml::from_str(&format!("name = \"{name}\"\ncommand = [\"true\"]\n{extra}")).unwrap()
    }

    #[test]
    fn a_reload_keeps_what_is_unchanged_and_replaces_the_rest() {
        let mut disabled = Pool::new(named("d", ""));
        disabled.disable("broken".into());
        let mut retiring = Pool::new(named("r", ""));
        retiring.status = PoolStatus::Retiring;
        let pools = [
            Pool::new(named("same", "")),
            Pool::new(named("changed", "")),
            Pool::new(named("gone", "")),
            disabled,
            retiring,
        ];
        let plugins = [
            named("same", ""),
            named("changed", "max_workers = 3"),
            named("d", ""),
            named("r", ""),
            named("new", ""),
        ];
        let plan = Reload::plan(&pools, &plugins);
        assert_eq!((plan.kept, plan.retire), (1, vec![1, 2, 3]));
        let started: Vec<&str> = plan.start.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(started, ["changed", "d", "r", "new"]);
    }

    fn key(slot: usize) -> ConnKey {
        ConnKey {
            slot,
            serial: slot as u64,
        }
    }

    #[test]
    fn backoff_follows_restart_backoff_ms_doubling_up_to_30_s() {
        let mut p = Pool::new(config("restart_backoff_ms = 1000\nmax_restarts = 10"));
        let now = Instant::now();
        let mut delays = Vec::new();
        for _ in 0..7 {
            assert!(!p.record_failure("boom".into(), now));
            delays.push(p.next_spawn.unwrap() - now);
        }
        let secs: Vec<u64> = delays.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30]);
    }

    #[test]
    fn no_spawn_during_a_backoff_then_one_after_it() {
        let mut p = Pool::new(config("restart_backoff_ms = 5000"));
        let t0 = Instant::now();
        let census = Census::default();
        assert_eq!(p.spawns_wanted(t0, census, false), 1, "min_workers = 1");
        p.record_failure("no hello".into(), t0);
        assert_eq!(p.deadline(), Some(t0 + Duration::from_secs(5)));
        assert_eq!(
            p.spawns_wanted(t0 + Duration::from_secs(4), census, false),
            0
        );
        assert_eq!(
            p.spawns_wanted(t0 + Duration::from_secs(5), census, false),
            1
        );
        assert_eq!(p.next_spawn, None);
        // An unreaped failure holds the next start back.
        let pending = Census {
            failure_pending: true,
            ..census
        };
        assert_eq!(
            p.spawns_wanted(t0 + Duration::from_secs(9), pending, false),
            0
        );
    }

    #[test]
    fn repeated_failures_disable_the_pool_with_the_reason_and_refuse_with_126() {
        let mut p = Pool::new(config(""));
        let now = Instant::now();
        for i in 0..4 {
            assert!(!p.record_failure(format!("boom {i}"), now));
        }
        assert!(p.record_failure("exited with status 3".into(), now));
        let PoolStatus::Disabled { reason } = &p.status else {
            panic!("{:?}", p.status);
        };
        assert_eq!(reason, "exited with status 3 (5 failures in a row)");
        assert_eq!(p.spawns_wanted(now, Census::default(), false), 0);
        p.admit(key(1), 0, now).unwrap();
        let refused = p.expire(now, false);
        assert_eq!(refused.len(), 1);
        let (conn, refusal) = &refused[0];
        assert_eq!(*conn, key(1));
        assert_eq!(refusal.code(), 126);
        assert_eq!(
            refusal.message("x"),
            "ngd: command 'x' could not start: exited with status 3 (5 failures in a row)"
        );
    }

    #[test]
    fn a_completed_session_resets_the_failure_count() {
        let mut p = Pool::new(config(""));
        let now = Instant::now();
        p.record_failure("a".into(), now);
        p.record_failure("b".into(), now);
        p.session_completed();
        assert_eq!((p.failures, p.sessions), (0, 1));
        assert_eq!(p.backoff(), Duration::from_millis(100));
    }

    #[test]
    fn a_full_queue_refuses_at_once_with_75() {
        let mut p = Pool::new(config("queue = 2"));
        let now = Instant::now();
        p.admit(key(1), 0, now).unwrap();
        p.admit(key(2), 0, now).unwrap();
        let refusal = p.admit(key(3), 0, now).unwrap_err();
        assert_eq!(refusal, Refusal::Busy { queued: 2 });
        assert_eq!(refusal.code(), 75);
        assert_eq!(
            refusal.message("x"),
            "ngd: 'x' is busy (2 queued); try again later"
        );
        // Free session slots on ready workers make room beyond the queue.
        p.admit(key(3), 1, now).unwrap();
        // queue = 0: refused at once when nothing is free.
        let mut p = Pool::new(config("queue = 0"));
        assert!(p.admit(key(1), 0, now).is_err());
        p.admit(key(1), 1, now).unwrap();
    }

    #[test]
    fn queued_sessions_time_out_oldest_first_with_75() {
        let mut p = Pool::new(config("queue_timeout_ms = 1000"));
        let t0 = Instant::now();
        p.admit(key(1), 0, t0).unwrap();
        p.admit(key(2), 0, t0 + Duration::from_millis(500)).unwrap();
        assert_eq!(p.deadline(), Some(t0 + Duration::from_secs(1)));
        assert!(p.expire(t0 + Duration::from_millis(999), false).is_empty());
        let refused = p.expire(t0 + Duration::from_millis(1000), false);
        assert_eq!(refused, vec![(key(1), Refusal::TimedOut)]);
        assert_eq!(refused[0].1.code(), 75);
        assert_eq!(p.deadline(), Some(t0 + Duration::from_millis(1500)));
        // Stopping refuses the rest at once.
        let refused = p.expire(t0, true);
        assert_eq!(refused, vec![(key(2), Refusal::Stopping)]);
        assert!(p.queue.is_empty());
    }

    #[test]
    fn spawns_cover_min_workers_and_the_queue_within_max_workers() {
        let mut p = Pool::new(config("min_workers = 0\nmax_workers = 3"));
        let now = Instant::now();
        assert_eq!(p.spawns_wanted(now, Census::default(), false), 0);
        for i in 0..5 {
            p.admit(key(i), 0, now).unwrap();
        }
        let census = Census {
            starting: 1,
            alive: 1,
            failure_pending: false,
        };
        assert_eq!(
            p.spawns_wanted(now, census, false),
            2,
            "capped by max_workers"
        );
        assert_eq!(p.spawns_wanted(now, census, true), 0, "none while stopping");
        let mut p = Pool::new(config("min_workers = 2\nmax_workers = 2"));
        assert_eq!(p.spawns_wanted(now, Census::default(), false), 2);
    }

    #[test]
    fn a_disabled_notice_disables_the_pool_with_its_message_and_refuses_with_126() {
        let mut p = Pool::new(config("protocol = \"jsonrpc\""));
        let now = Instant::now();
        let notice = |kind: &str, message: &str| Notice {
            kind: kind.into(),
            message: message.into(),
            session: Some(7),
            pid: 1,
            at_ms: 0,
        };
        p.notice(notice(
            "restart",
            "the plugin exited with status 3; restarting it",
        ));
        assert_eq!(p.status, PoolStatus::Active);
        let reason = "disabled after 3 restarts within 600 s (last failure: exited with status 3)";
        p.notice(notice("disabled", reason));
        assert_eq!(
            p.status,
            PoolStatus::Disabled {
                reason: reason.into()
            }
        );
        assert_eq!(p.last_failure.as_deref(), Some(reason));
        assert_eq!(p.notice_counts["disabled"], 1);
        assert_eq!(p.spawns_wanted(now, Census::default(), false), 0);
        p.admit(key(1), 4, now).unwrap();
        let refused = p.expire(now, false);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].1.code(), 126);
        assert_eq!(
            refused[0].1.message("demo_inc"),
            format!("ngd: command 'demo_inc' could not start: {reason}")
        );
        // A retiring pool (replaced by a reload) stays retiring.
        let mut p = Pool::new(config(""));
        p.status = PoolStatus::Retiring;
        p.notice(notice("disabled", reason));
        assert_eq!(p.status, PoolStatus::Retiring);
    }

    #[test]
    fn a_successor_takes_the_queue_and_the_learned_commands() {
        let now = Instant::now();
        let mut old = Pool::new(config(""));
        old.commands = vec!["a".into(), "b".into()];
        old.admit(key(1), 0, now).unwrap();
        old.disable("gave up".into());
        let mut next = Pool::new(config(""));
        next.take_over(&mut old);
        assert_eq!(next.commands, ["a", "b"]);
        assert_eq!(next.queue.len(), 1);
        assert!(old.queue.is_empty());
        assert_eq!(next.status, PoolStatus::Active);
        // Configured commands are the new table's, not the old pool's.
        let mut next = Pool::new(config("commands = [\"c\"]"));
        next.take_over(&mut old);
        assert_eq!(next.commands, ["c"]);
    }

    #[test]
    fn notices_keep_the_last_eight_and_count_every_kind() {
        let mut p = Pool::new(config(""));
        for i in 0..10 {
            p.notice(Notice {
                kind: if i % 2 == 0 {
                    NoticeKind::Fallback
                } else {
                    NoticeKind::Stale
                },
                message: format!("n{i}"),
                session: None,
                pid: 1,
                at_ms: i,
            });
        }
        assert_eq!(p.notices.len(), NOTICES_KEPT);
        assert_eq!(p.notices.front().map(|n| n.message.as_str()), Some("n2"));
        assert_eq!(p.notice_counts["fallback"], 5);
        assert_eq!(p.notice_counts["stale"], 5);
    }

    #[test]
    fn count_notices_add_to_their_counter_and_are_not_kept() {
        let mut p = Pool::new(config(""));
        for name in ["cache-used", "cache-unused", "cache-used"] {
            p.notice(Notice::received(NoticeKind::Count, name.into(), Some(1), 1));
        }
        assert_eq!(p.counters["cache-used"], 2);
        assert_eq!(p.counters["cache-unused"], 1);
        assert!(p.notices.is_empty());
        assert!(p.notice_counts.is_empty());
    }

    #[test]
    fn a_session_longer_than_idle_to_zero_leaves_its_pool_awake_when_it_ends() {
        let mut p = Pool::new(config("idle_to_zero_ms = 1000"));
        let t0 = Instant::now();
        p.touch(t0);
        let end = t0 + Duration::from_secs(5);
        p.session_ended(end);
        assert!(!p.maybe_sleep(end, 0));
        assert_eq!(p.sleep_at(), Some(end + Duration::from_secs(1)));
        assert!(p.maybe_sleep(end + Duration::from_secs(1), 0));
    }

    #[test]
    fn idle_to_zero_sleeps_when_nothing_runs_and_a_session_wakes_it() {
        let mut p = Pool::new(config("idle_to_zero_ms = 60000"));
        let t0 = Instant::now();
        let minute = Duration::from_secs(60);
        p.touch(t0);
        assert_eq!(p.min_workers(), 1);
        assert_eq!(p.deadline(), Some(t0 + minute));
        assert!(!p.maybe_sleep(t0 + minute / 2, 0));
        // Due, but a session runs: awake until it ends.
        assert!(!p.maybe_sleep(t0 + minute, 1));
        assert!(p.maybe_sleep(t0 + minute, 0));
        assert_eq!(p.residency, Residency::Asleep);
        assert_eq!(p.min_workers(), 0);
        assert_eq!(p.deadline(), None);
        let census = Census::default();
        assert_eq!(p.spawns_wanted(t0 + minute, census, false), 0);
        // The next session wakes it and starts a worker for itself.
        let later = t0 + minute * 5;
        p.admit(key(1), 0, later).unwrap();
        assert_eq!(p.residency, Residency::Awake);
        assert_eq!(p.spawns_wanted(later, census, false), 1);
        assert_eq!(
            p.deadline(),
            Some(later + Duration::from_secs(30)),
            "queue timeout"
        );
        // Off with 0, and for a pool that keeps no worker anyway.
        let mut never = Pool::new(config("idle_to_zero_ms = 0"));
        never.touch(t0);
        assert_eq!(never.sleep_at(), None);
        let mut none = Pool::new(config("min_workers = 0"));
        none.touch(t0);
        assert_eq!(none.sleep_at(), None);
    }

    #[test]
    fn an_evicted_pool_keeps_no_worker_until_used() {
        let mut p = Pool::new(config("min_workers = 2\nmax_workers = 3"));
        let t0 = Instant::now();
        p.touch(t0);
        p.evict();
        assert_eq!(p.min_workers(), 0);
        assert_eq!(p.sleep_at(), None);
        p.admit(key(1), 0, t0).unwrap();
        assert_eq!(p.min_workers(), 2);
    }
}
