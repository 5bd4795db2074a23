//! Per-command statistics for `ng-stats` and `ngd status`.
//!
//! For each command: how often it ran, how many run now, how many failed (non-zero exit),
//! and latency percentiles over its most recent [`LATENCY_WINDOW`] runs (a ring buffer, so
//! memory stays flat however long the server lives). At most [`MAX_COMMANDS`] commands are
//! kept: a command's name can come from the client (a Java class name routed to a JVM
//! worker), and a new name past that bound takes the place of the command used least
//! recently that is not running. Plus server-wide connection counters.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How many recent latencies each command keeps for its percentiles.
pub const LATENCY_WINDOW: usize = 1024;

/// How many commands have statistics at once (each at most [`LATENCY_WINDOW`] latencies),
/// unless more than this are running at once: a running command is never evicted.
pub const MAX_COMMANDS: usize = 512;

#[derive(Debug, Default)]
struct CommandStats {
    runs: u64,
    running: u64,
    failures: u64,
    /// Ring buffer of recent latencies in microseconds.
    recent: Vec<u64>,
    next: usize,
    max_us: u64,
    /// When it was last started or finished, on [`Commands::clock`].
    used: u64,
}

/// The commands' statistics by name, bounded by [`MAX_COMMANDS`].
#[derive(Debug, Default)]
struct Commands {
    by_name: BTreeMap<String, CommandStats>,
    /// Counts starts and finishes: the order in which commands were used.
    clock: u64,
}

impl Commands {
    /// `command`'s entry, made if it has none (evicting the least recently used idle
    /// command at the bound), marked as used now.
    fn entry(&mut self, command: &str) -> &mut CommandStats {
        self.clock += 1;
        if !self.by_name.contains_key(command) && self.by_name.len() >= MAX_COMMANDS {
            let idle = self
                .by_name
                .iter()
                .filter(|(_, s)| s.running == 0)
                .min_by_key(|(_, s)| s.used)
                .map(|(name, _)| name.clone());
            if let Some(name) = idle {
                self.by_name.remove(&name);
            }
        }
        let s = self.by_name.entry(command.to_owned()).or_default();
        s.used = self.clock;
        s
    }
}

/// A snapshot of one command's statistics.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CommandReport {
    /// The command name.
    pub command: String,
    /// Finished and running invocations.
    pub runs: u64,
    /// Invocations running now.
    pub running: u64,
    /// Finished invocations with a non-zero exit code.
    pub failures: u64,
    /// Median latency, milliseconds, over the recent window.
    pub p50_ms: f64,
    /// 90th percentile latency, milliseconds.
    pub p90_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Largest latency ever seen, milliseconds.
    pub max_ms: f64,
}

/// Server-wide counters.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ServerCounters {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections refused (other users, over the connection limit, shutting down).
    pub refused: u64,
    /// Sessions ended by a protocol error.
    pub protocol_errors: u64,
    /// Requests for commands that do not exist.
    pub unknown_commands: u64,
}

/// All statistics of one server.
#[derive(Debug, Default)]
pub struct Stats {
    commands: Mutex<Commands>,
    accepted: AtomicU64,
    refused: AtomicU64,
    protocol_errors: AtomicU64,
    unknown_commands: AtomicU64,
}

impl Stats {
    /// A command started.
    pub fn started(&self, command: &str) {
        let mut map = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        let s = map.entry(command);
        s.runs += 1;
        s.running += 1;
    }

    /// A command finished with `code` after `elapsed`.
    pub fn finished(&self, command: &str, code: i32, elapsed: Duration) {
        let mut map = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        let s = map.entry(command);
        s.running = s.running.saturating_sub(1);
        if code != 0 {
            s.failures += 1;
        }
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        s.max_us = s.max_us.max(us);
        if s.recent.len() < LATENCY_WINDOW {
            s.recent.push(us);
        } else {
            s.recent[s.next] = us;
        }
        s.next = (s.next + 1) % LATENCY_WINDOW;
    }

    /// Counts an accepted connection.
    pub fn accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a refused connection.
    pub fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a protocol error.
    pub fn protocol_error(&self) {
        self.protocol_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request for an unknown command.
    pub fn unknown_command(&self) {
        self.unknown_commands.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot of every command's statistics, sorted by name.
    pub fn commands(&self) -> Vec<CommandReport> {
        let map = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        map.by_name
            .iter()
            .map(|(name, s)| {
                let mut sorted = s.recent.clone();
                sorted.sort_unstable();
                CommandReport {
                    command: name.clone(),
                    runs: s.runs,
                    running: s.running,
                    failures: s.failures,
                    p50_ms: percentile(&sorted, 50.0),
                    p90_ms: percentile(&sorted, 90.0),
                    p99_ms: percentile(&sorted, 99.0),
                    max_ms: s.max_us as f64 / 1000.0,
                }
            })
            .collect()
    }

    /// The server-wide counters.
    pub fn counters(&self) -> ServerCounters {
        ServerCounters {
            accepted: self.accepted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            protocol_errors: self.protocol_errors.load(Ordering::Relaxed),
            unknown_commands: self.unknown_commands.load(Ordering::Relaxed),
        }
    }
}

/// Nearest-rank percentile of sorted microsecond values, in milliseconds.
fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let idx = rank.clamp(1, sorted.len()) - 1;
    sorted[idx] as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn window_is_bounded_and_counts_are_kept() {
        let s = Stats::default();
        for i in 0..(LATENCY_WINDOW as u64 + 10) {
            s.started("x");
            s.finished("x", i32::from(i % 2 == 0), Duration::from_micros(i));
        }
        let r = &s.commands()[0];
        assert_eq!(r.runs, LATENCY_WINDOW as u64 + 10);
        assert_eq!(r.running, 0);
        assert_eq!(r.failures, (LATENCY_WINDOW as u64 + 10) / 2);
        let map = s.commands.lock().unwrap();
        assert_eq!(map.by_name["x"].recent.len(), LATENCY_WINDOW);
    }

    #[test]
    fn commands_are_bounded_and_the_least_recently_used_idle_one_goes() {
        let s = Stats::default();
        s.started("long");
        s.started("kept");
        for i in 0..(MAX_COMMANDS * 3) {
            let name = format!("ngtest.Class{i}");
            s.started(&name);
            s.finished(&name, 0, Duration::from_micros(5));
            if i % 100 == 0 {
                s.started("kept");
                s.finished("kept", 0, Duration::from_micros(5));
            }
        }
        let reports = s.commands();
        assert_eq!(reports.len(), MAX_COMMANDS);
        let names: Vec<&str> = reports.iter().map(|r| r.command.as_str()).collect();
        assert!(
            names.contains(&"long"),
            "a running command is never evicted"
        );
        assert!(names.contains(&"kept"), "a command in use stays");
        assert!(names.contains(&format!("ngtest.Class{}", MAX_COMMANDS * 3 - 1).as_str()));
        assert!(!names.contains(&"ngtest.Class0"));
        s.finished("long", 0, Duration::from_micros(5));
        let long = s
            .commands()
            .into_iter()
            .find(|r| r.command == "long")
            .unwrap();
        assert_eq!((long.runs, long.running), (1, 0));
    }
}
