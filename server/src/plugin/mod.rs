//! The plugin host: pools of warm worker processes speaking ngw (`docs/ngw.md`).
//!
//! Each `[[plugin]]` of the configuration is a [`Pool`] of [`Worker`]s. A worker is a
//! long-lived process holding one end of a socketpair; on it each client session is the
//! client's own Nailgun exchange (`A E D C` → `S 0 . 1 2` → `X`), which the event loop relays
//! between the client's connection and the worker's channel (`event_loop`'s relay functions).
//!
//! ```text
//!  spawn ─▶ Starting ──h──▶ Idle ◀──X── Busy ◀── header from a queued session
//!              │             │ p/o, idle timeout, recycle ─▶ Quitting (q → TERM → KILL)
//!              └─ no hello, error hello, EOF ─▶ failure (backoff, then disabled)
//! ```
//!
//! The host owns the workers (a slab; tokens above the connections'), the pools, the
//! command routes and every timer of theirs; the loop asks [`PluginHost::next_deadline`] and
//! calls back. Failures are counted per pool: consecutive failed starts or early deaths back
//! off exponentially (`restart_backoff_ms`, doubling, capped at 30 s), and after
//! `max_restarts` the pool is disabled with its reason visible in `ng-stats`/`ngd status`
//! until the configuration is reloaded. No worker process outlives the host: every exit is
//! reaped, every stop escalates `q` → SIGTERM → SIGKILL to the worker's process group, and
//! workers die with `ngd` (`PR_SET_PDEATHSIG`).

pub mod config;
pub(crate) mod relay;
pub mod worker;

use crate::session_io::ConnKey;
use bytes::Bytes;
pub use config::PluginConfig;
use serde::Serialize;
use slab::Slab;
use std::collections::VecDeque;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};
use worker::{ChannelBufs, Hello};

/// The ngw extensions this host supports, announced to every worker in
/// `NGW_HOST_FEATURES` (`docs/ngw.md` §15).
pub const HOST_FEATURES: &[&str] = &[];

/// The longest restart delay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A worker that dies this soon after its hello counts as a failed start.
pub(crate) const EARLY_DEATH: Duration = Duration::from_secs(10);
/// SIGTERM to SIGKILL when stopping a worker.
pub(crate) const TERM_TO_KILL: Duration = Duration::from_secs(2);

/// A worker's state. See the module docs.
#[derive(Debug)]
pub enum WorkerState {
    /// Spawned; waiting for the hello until `deadline`.
    Starting {
        /// Handshake deadline.
        deadline: Instant,
    },
    /// Waiting for a session.
    Idle {
        /// Since when.
        since: Instant,
        /// Next health ping.
        next_ping: Option<Instant>,
        /// An unanswered ping: its payload and deadline.
        ping: Option<(u64, Instant)>,
    },
    /// Running a session.
    Busy(Busy),
    /// Told to quit; escalating.
    Quitting {
        /// SIGTERM the group at this time.
        term_at: Instant,
        /// SIGKILL the group at this time (after SIGTERM).
        kill_at: Option<Instant>,
    },
}

impl WorkerState {
    /// A short name for status and logs.
    pub fn name(&self) -> &'static str {
        match self {
            WorkerState::Starting { .. } => "starting",
            WorkerState::Idle { .. } => "idle",
            WorkerState::Busy(_) => "busy",
            WorkerState::Quitting { .. } => "quitting",
        }
    }
}

/// A session in progress on a worker.
#[derive(Debug)]
pub struct Busy {
    /// The client's connection; `None` once the client is gone (the worker still owes `X`).
    pub conn: Option<ConnKey>,
    /// The command name (for statistics and messages).
    pub command: String,
    /// When the session started.
    pub started: Instant,
    /// The worker sent `S` and has not been answered yet.
    pub credit: bool,
    /// Client stdin that arrived while the worker had no credit.
    pub stdin_pending: VecDeque<Bytes>,
    /// Bytes in `stdin_pending`.
    pub stdin_pending_bytes: usize,
    /// The client's stdin ended (`.` received, not yet forwarded if no credit).
    pub stdin_eof: bool,
    /// `.` was sent to the worker: answer any later `S` with `.` too.
    pub eof_sent: bool,
    /// After a hangup: kill the worker if no `X` by then.
    pub hangup_deadline: Option<Instant>,
}

/// One worker process. See the module docs.
#[derive(Debug)]
pub struct Worker {
    /// Unique per spawned worker (slab slots are reused).
    pub serial: u64,
    /// Its pool.
    pub pool: usize,
    /// The process; its pid is also its process group.
    pub child: Child,
    /// Our end of the channel.
    pub channel: mio::net::UnixStream,
    /// Channel buffers and readiness.
    pub bufs: ChannelBufs,
    /// Lifecycle.
    pub state: WorkerState,
    /// The hello, once received.
    pub hello: Option<Hello>,
    /// Sessions completed.
    pub sessions: u64,
    /// When it was spawned.
    pub spawned_at: Instant,
    /// When its hello arrived.
    pub ready_at: Option<Instant>,
}

impl Worker {
    /// The worker's pid (and process group).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the worker acts on interrupts.
    pub fn has_feature(&self, feature: &str) -> bool {
        self.hello
            .as_ref()
            .is_some_and(|h| h.features.iter().any(|f| f == feature))
    }

    /// How long after `i hangup` the worker is killed.
    pub fn interrupt_grace(&self, config: &PluginConfig) -> Duration {
        let configured = PluginConfig::ms(config.interrupt_grace_ms);
        let kill_grace = self
            .hello
            .as_ref()
            .and_then(|h| h.kill_grace_ms)
            .map_or(Duration::ZERO, |ms| Duration::from_millis(ms + 1000));
        configured.max(kill_grace)
    }
}

/// A worker whose channel is closed, waiting to be reaped (its exit status tells its
/// client what happened). Never waited for on the loop thread: SIGCHLD or the deadline.
#[derive(Debug)]
pub struct Dying {
    /// The worker, out of the slab.
    pub worker: Worker,
    /// Why it is going.
    pub reason: String,
    /// It died as a failure (a failed start or an early death), to be counted when reaped;
    /// its pool starts no worker until then.
    pub failure: bool,
    /// SIGKILL its group at this time if it has not exited.
    pub deadline: Instant,
    /// SIGKILL was sent.
    pub killed: bool,
}

/// A session waiting for a worker.
#[derive(Clone, Copy, Debug)]
pub struct Queued {
    /// The client.
    pub conn: ConnKey,
    /// Since when it waits.
    pub since: Instant,
}

/// Whether a pool takes sessions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
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

/// One plugin's pool. See the module docs.
#[derive(Debug)]
pub struct Pool {
    /// Its configuration.
    pub config: PluginConfig,
    /// Active, disabled or retiring.
    pub status: PoolStatus,
    /// Worker slots belonging to it (any state).
    pub workers: Vec<usize>,
    /// Idle worker slots, longest idle first.
    pub idle: VecDeque<usize>,
    /// Sessions waiting for a worker, oldest first.
    pub queue: VecDeque<Queued>,
    /// Consecutive failed starts or early deaths.
    pub failures: u32,
    /// Workers restarted after a failure, over the pool's life.
    pub restarts: u64,
    /// No spawn before this (backoff).
    pub next_spawn: Option<Instant>,
    /// The last failure's reason.
    pub last_failure: Option<String>,
    /// Commands routed here (configured, or learned from the first hello).
    pub commands: Vec<String>,
    /// Sessions completed.
    pub sessions: u64,
}

impl Pool {
    /// A pool for `config`, with its configured commands.
    pub fn new(config: PluginConfig) -> Self {
        let commands = config.commands.clone();
        Self {
            config,
            status: PoolStatus::Active,
            workers: Vec::new(),
            idle: VecDeque::new(),
            queue: VecDeque::new(),
            failures: 0,
            restarts: 0,
            next_spawn: None,
            last_failure: None,
            commands,
            sessions: 0,
        }
    }

    /// The delay before the next start after `failures` consecutive failures.
    pub fn backoff(&self) -> Duration {
        let base = PluginConfig::ms(self.config.restart_backoff_ms);
        let shift = self.failures.saturating_sub(1).min(20);
        base.saturating_mul(1 << shift).min(MAX_BACKOFF)
    }
}

/// A snapshot of one pool for `ng-stats` and `ngd status`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PluginReport {
    /// The plugin's name.
    pub name: String,
    /// Active, disabled (with the reason) or retiring.
    pub status: PoolStatus,
    /// Commands routed to it.
    pub commands: Vec<String>,
    /// Workers by state.
    pub starting: usize,
    /// Idle workers.
    pub idle: usize,
    /// Busy workers.
    pub busy: usize,
    /// Workers being stopped.
    pub quitting: usize,
    /// Sessions waiting for a worker.
    pub queued: usize,
    /// Sessions completed.
    pub sessions: u64,
    /// Restarts after failures.
    pub restarts: u64,
    /// Consecutive failures now.
    pub failures: u32,
    /// The last failure's reason.
    pub last_failure: Option<String>,
    /// The workers' log file.
    pub log: String,
}

/// How a worker's process ended, as a client should hear it: `(exit code, description)`.
pub fn describe_exit(status: Option<ExitStatus>) -> (i32, String) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => (1, format!("exited with status {code}")),
            (None, Some(sig)) => (128 + sig, format!("killed by signal {sig}")),
            _ => (1, "ended".to_owned()),
        },
        None => (1, "status unknown".to_owned()),
    }
}

/// The pools and their workers. Driven by the event loop.
#[derive(Debug, Default)]
pub struct PluginHost {
    /// Every live worker; token `FIRST_WORKER + slot`.
    pub workers: Slab<Worker>,
    /// The pools, in configuration order. Indices are stable for the life of the process
    /// (a reload retires a pool and appends a new one).
    pub pools: Vec<Pool>,
    /// Serial for the next spawned worker.
    pub next_worker_serial: u64,
    /// Serial for the next session (`NGW_SESSION`).
    pub next_session: u64,
    /// ngd's umask, sent as `NGW_UMASK` when the client does not report its own.
    pub umask: u32,
    /// Pools with work to do after this turn (a new queued session, a freed worker).
    pub dirty: Vec<usize>,
    /// Workers with bytes to write or to read after this turn.
    pub dirty_workers: Vec<usize>,
    /// The server is stopping: no new workers, no new sessions.
    pub stopping: bool,
    /// Workers whose channel closed, not yet reaped.
    pub dying: Vec<Dying>,
    /// ngd adopts orphans (`PR_SET_CHILD_SUBREAPER`; the `ngd` binary, not embedders).
    pub subreaper: bool,
    /// The executable that runs bridges; `None`: this process's own
    /// (`std::env::current_exe`).
    pub bridge_exe: Option<std::path::PathBuf>,
}

impl PluginHost {
    /// A host for these plugins (no workers started yet).
    pub fn new(plugins: Vec<PluginConfig>) -> Self {
        // SAFETY: umask(2) has no memory-safety preconditions; it is set back at once.
        let umask = unsafe {
            let old = libc::umask(0o022);
            libc::umask(old);
            old
        };
        let mut host = Self {
            umask: umask as u32,
            ..Self::default()
        };
        for p in plugins {
            host.pools.push(Pool::new(p));
        }
        host.dirty = (0..host.pools.len()).collect();
        host
    }

    /// Snapshots of every pool that is not fully retired.
    pub fn reports(&self) -> Vec<PluginReport> {
        self.pools
            .iter()
            .filter(|p| !(p.status == PoolStatus::Retiring && p.workers.is_empty()))
            .map(|p| {
                let count = |name: &str| {
                    p.workers
                        .iter()
                        .filter(|w| {
                            self.workers
                                .get(**w)
                                .is_some_and(|w| w.state.name() == name)
                        })
                        .count()
                };
                PluginReport {
                    name: p.config.name.clone(),
                    status: p.status.clone(),
                    commands: p.commands.clone(),
                    starting: count("starting"),
                    idle: count("idle"),
                    busy: count("busy"),
                    quitting: count("quitting"),
                    queued: p.queue.len(),
                    sessions: p.sessions,
                    restarts: p.restarts,
                    failures: p.failures,
                    last_failure: p.last_failure.clone(),
                    log: p.config.log_path().display().to_string(),
                }
            })
            .collect()
    }

    /// The earliest time any worker or pool timer is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for (_, w) in &self.workers {
            match &w.state {
                WorkerState::Starting { deadline } => consider(Some(*deadline)),
                WorkerState::Idle {
                    since,
                    next_ping,
                    ping,
                } => {
                    consider(*next_ping);
                    consider(ping.map(|(_, d)| d));
                    // Only a surplus worker times out; reporting the deadline of one that
                    // stays would make the loop spin once it passed.
                    let p = &self.pools[w.pool];
                    if p.config.idle_timeout_ms > 0 && p.workers.len() > p.config.min_workers {
                        consider(Some(*since + PluginConfig::ms(p.config.idle_timeout_ms)));
                    }
                }
                WorkerState::Busy(b) => consider(b.hangup_deadline),
                WorkerState::Quitting { term_at, kill_at } => {
                    consider(Some(kill_at.unwrap_or(*term_at)))
                }
            }
        }
        for d in &self.dying {
            consider(Some(d.deadline));
        }
        for p in &self.pools {
            if p.status == PoolStatus::Active {
                consider(p.next_spawn);
            }
            if let Some(q) = p.queue.front() {
                consider(Some(q.since + PluginConfig::ms(p.config.queue_timeout_ms)));
            }
        }
        next
    }

    /// Records a failed start or early death; returns true if the pool is now disabled.
    pub fn record_failure(&mut self, pool: usize, reason: String, now: Instant) -> bool {
        let p = &mut self.pools[pool];
        p.failures += 1;
        p.last_failure = Some(reason.clone());
        tracing::warn!(plugin = %p.config.name, failures = p.failures, "worker failed: {reason}");
        if p.failures >= p.config.max_restarts.max(1) {
            p.next_spawn = None;
            if p.status == PoolStatus::Active {
                tracing::error!(
                    plugin = %p.config.name,
                    "disabled after {} consecutive failures: {reason}",
                    p.failures
                );
                p.status = PoolStatus::Disabled {
                    reason: format!("{reason} ({} failures in a row)", p.failures),
                };
            }
            return true;
        }
        p.next_spawn = Some(now + p.backoff());
        false
    }

    /// Disables a pool at once (a failure that would only repeat).
    pub fn disable(&mut self, pool: usize, reason: String) {
        let p = &mut self.pools[pool];
        tracing::error!(plugin = %p.config.name, "disabled: {reason}");
        p.last_failure = Some(reason.clone());
        p.next_spawn = None;
        if p.status == PoolStatus::Active {
            p.status = PoolStatus::Disabled { reason };
        }
    }

    /// True when every active pool knows its commands (configured, or from a hello).
    pub fn is_warm(&self) -> bool {
        self.pools
            .iter()
            .all(|p| p.status != PoolStatus::Active || !p.commands.is_empty())
    }

    /// The longest a worker's stop escalation can take (q, then SIGTERM, then SIGKILL),
    /// plus a margin for reaping.
    pub fn max_stop_time(&self) -> Duration {
        let longest = self
            .pools
            .iter()
            .map(|p| PluginConfig::ms(p.config.stop_timeout_ms))
            .max()
            .unwrap_or_default();
        longest + TERM_TO_KILL + Duration::from_secs(1)
    }

    /// True when no worker is left (for the end of a shutdown).
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty() && self.dying.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> PluginConfig {
        toml::from_str(
            r#"
            name = "p"
            command = ["true"]
            "#,
        )
        .unwrap()
    }

    #[test]
    fn defaults_follow_the_spec() {
        let c = config();
        assert_eq!((c.min_workers, c.max_workers(), c.queue), (1, 2, 64));
        assert_eq!(c.handshake_timeout_ms, 10_000);
        assert_eq!(c.max_restarts, 5);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let mut p = Pool::new(config());
        p.failures = 1;
        assert_eq!(p.backoff(), Duration::from_millis(100));
        p.failures = 3;
        assert_eq!(p.backoff(), Duration::from_millis(400));
        p.failures = 30;
        assert_eq!(p.backoff(), MAX_BACKOFF);
    }

    #[test]
    fn repeated_failures_disable_the_pool_with_the_reason() {
        let mut host = PluginHost::new(vec![config()]);
        let now = Instant::now();
        for i in 0..4 {
            assert!(!host.record_failure(0, format!("boom {i}"), now));
        }
        assert!(host.record_failure(0, "boom".into(), now));
        assert!(matches!(
            &host.pools[0].status,
            PoolStatus::Disabled { reason } if reason.contains("boom") && reason.contains("5 failures")
        ));
    }

    #[test]
    fn exits_map_to_shell_codes() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(describe_exit(Some(ExitStatus::from_raw(9))).0, 137);
        assert_eq!(describe_exit(Some(ExitStatus::from_raw(3 << 8))).0, 1);
        assert_eq!(describe_exit(None).0, 1);
    }

    #[test]
    fn bad_configs_are_refused() {
        let mut c = config();
        c.min_workers = 3;
        assert!(c.validate().unwrap_err().contains("min_workers"));
        let mut c = config();
        c.command.clear();
        assert!(c.validate().is_err());
    }
}
