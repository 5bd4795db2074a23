//! The `[[plugin]]` table of the configuration (`docs/ngw.md` §10).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One plugin: a program kept warm in a pool of worker processes.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Unique name; `NGW_PLUGIN`; names the log file.
    pub name: String,
    /// Program and arguments of the worker.
    pub command: Vec<String>,
    /// Added to ngd's environment for the worker (commands get the client's environment).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The worker's working directory; relative to the config file's directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Commands routed to this plugin; empty: learned from the first worker's hello.
    #[serde(default)]
    pub commands: Vec<String>,
    /// Workers kept running even when idle.
    #[serde(default = "one")]
    pub min_workers: usize,
    /// Workers at most, hence concurrent sessions.
    #[serde(default = "two")]
    pub max_workers: usize,
    /// Sessions that may wait for a worker; 0 refuses at once when all are busy.
    #[serde(default = "sixty_four")]
    pub queue: usize,
    /// How long a queued session waits before it is refused.
    #[serde(default = "thirty_s")]
    pub queue_timeout_ms: u64,
    /// Replace a worker after this many sessions (0: never).
    #[serde(default)]
    pub recycle_after: u64,
    /// Replace a worker whose RSS exceeds this after a session (0: no cap).
    #[serde(default)]
    pub max_memory_mb: u64,
    /// Stop workers above `min_workers` idle this long (0: never).
    #[serde(default = "five_min")]
    pub idle_timeout_ms: u64,
    /// Spawn to hello.
    #[serde(default = "ten_s")]
    pub handshake_timeout_ms: u64,
    /// `i hangup` to forced kill.
    #[serde(default = "five_s")]
    pub interrupt_grace_ms: u64,
    /// Ping idle workers this often (0: never).
    #[serde(default = "thirty_s")]
    pub ping_interval_ms: u64,
    /// A pong must arrive within this.
    #[serde(default = "five_s")]
    pub ping_timeout_ms: u64,
    /// `q` to SIGTERM when stopping a worker.
    #[serde(default = "five_s")]
    pub stop_timeout_ms: u64,
    /// First restart delay after a failure; doubles per consecutive failure, up to 30 s.
    #[serde(default = "hundred_ms")]
    pub restart_backoff_ms: u64,
    /// Consecutive failures after which the plugin is disabled.
    #[serde(default = "five")]
    pub max_restarts: u32,
    /// The workers' stdout/stderr; default `<state dir>/plugins/<name>.log`.
    #[serde(default)]
    pub log: Option<PathBuf>,
}

fn one() -> usize {
    1
}
fn two() -> usize {
    2
}
fn five() -> u32 {
    5
}
fn sixty_four() -> usize {
    64
}
fn hundred_ms() -> u64 {
    100
}
fn five_s() -> u64 {
    5_000
}
fn ten_s() -> u64 {
    10_000
}
fn thirty_s() -> u64 {
    30_000
}
fn five_min() -> u64 {
    300_000
}

impl PluginConfig {
    /// Checks what serde cannot; `base` is the config file's directory.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        if name.is_empty() || name.contains('/') {
            return Err(format!(
                "plugin name {name:?} must be non-empty without '/'"
            ));
        }
        if self.command.is_empty() || self.command[0].is_empty() {
            return Err(format!("plugin '{name}': command must name a program"));
        }
        if self.max_workers == 0 {
            return Err(format!("plugin '{name}': max_workers must be at least 1"));
        }
        if self.min_workers > self.max_workers {
            return Err(format!(
                "plugin '{name}': min_workers ({}) exceeds max_workers ({})",
                self.min_workers, self.max_workers
            ));
        }
        Ok(())
    }

    /// Resolves relative paths against the config file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        let cwd = match self.cwd.take() {
            Some(c) if c.is_relative() => base.join(c),
            Some(c) => c,
            None => base.to_path_buf(),
        };
        if self.command[0].contains('/') && Path::new(&self.command[0]).is_relative() {
            self.command[0] = cwd.join(&self.command[0]).to_string_lossy().into_owned();
        }
        self.cwd = Some(cwd);
        if let Some(log) = self.log.take() {
            self.log = Some(if log.is_relative() {
                base.join(log)
            } else {
                log
            });
        }
    }

    /// The log file: configured, or `<state dir>/plugins/<name>.log`.
    pub fn log_path(&self) -> PathBuf {
        self.log.clone().unwrap_or_else(|| {
            state_dir()
                .join("plugins")
                .join(format!("{}.log", self.name))
        })
    }

    pub(crate) fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }
}

/// `$XDG_STATE_HOME/ngd`, else `~/.local/state/ngd`, else the runtime directory.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from) {
        if d.is_absolute() {
            return d.join("ngd");
        }
    }
    if let Some(h) = std::env::var_os("HOME").map(PathBuf::from) {
        if h.is_absolute() {
            return h.join(".local/state/ngd");
        }
    }
    crate::security::RuntimeDir::default_path()
}
