//! Hostile clients: every bad input we can think of, fired at a running `ngd`.
//!
//! Each [`Kind`] is one attack, written against the wire directly (`ng_testkit`'s chunks,
//! raw sockets, no `ng-proto`), and judged against what
//! `docs/protocol.md` promises: every bad session ends in a clear refusal (a `2` chunk
//! starting `ngd: ` and an `X` with the documented code) or a closed socket, never a hang
//! past the timeout that applies to it. [`run_kind`] fires one kind `rounds × concurrency`
//! times, half over loopback TCP and half over the Unix socket, `concurrency` at once, and
//! then checks the server itself:
//!
//! * it still answers `ng-true` promptly (measured during the attack and after it);
//! * its descriptor count (`/proc/<pid>/fd`) is back to what it was before the attack,
//!   its RSS (`VmRSS`) is within a small tolerance of its baseline, and it uses no CPU,
//!   within [`Plan::settle`] of the attack's last connection closing;
//! * it is still alive.
//!
//! The result is a [`KindReport`]; [`matrix`] renders reports as the table in
//! `docs/reliability.md`. The bounded form runs in CI (`tests/e2e/hostile.rs`), the full
//! form from `tests/hostile-run` through the `ng-hostile` binary.
//!
//! # The RSS baseline
//!
//! `ngd` uses the system allocator. glibc's malloc raises its mmap threshold (up to 32 MiB)
//! each time a large block is freed, after which large buffers come from the heap and stay
//! resident when freed: after eight 16 MiB headers, RSS settles anywhere between +0 and
//! +30 MiB from one run to the next, which says nothing about leaks. The server under test
//! therefore runs with [`MALLOC_ENV`] (a fixed 128 KiB mmap threshold and trim threshold), so
//! that freed large buffers go back to the kernel and RSS follows live memory; `ng-hostile`
//! warns when the server's environment lacks it. [`warm_up`] then runs every legitimate path
//! (`ng-true`, 100 000 arguments, `ng-cat` round trips, `ng-yes` read in full and cut off)
//! `concurrency` wide before anything is measured, and its settled RSS is the baseline: after
//! each attack RSS must be at most `max(baseline, RSS before the attack) + tolerance`.

//!
//! # Layout
//!
//! * this module: the server's [`Limits`], the [`Target`], the [`Plan`];
//! * [`Kind`] (`kind`): every attack by name, what it must get and by when;
//! * `attacks`: one function per attack, grouped by concern (framing, chunk sequence,
//!   header contents, slow clients, output handling, floods);
//! * `attempt`: what one attempt knows and the sending and reading the attacks share;
//! * `response`: reading an answer and classifying it as an [`Outcome`];
//! * `warm`: the `ng-true` [`probe`] and the [`warm_up`] that sets the [`Baseline`];
//! * `run`: [`run_kind`], one kind's rounds, judgement and settling, as a [`KindReport`];
//! * `matrix`: the [`matrix`] and [`failure_details`].

mod attacks;
mod attempt;
mod kind;
mod matrix;
mod response;
mod run;
mod warm;

use std::time::Duration;

use ng_testkit::{procfs, Address};

pub use kind::Kind;
pub use matrix::{failure_details, matrix};
pub use response::Outcome;
pub use run::{run_kind, KindReport};
pub use warm::{probe, warm_up, Baseline};

/// `EX_PROTOCOL`: the client broke the protocol (docs/protocol.md, "Exit codes").
pub const EXIT_PROTOCOL: i32 = ng_server::exit_codes::PROTOCOL;
/// `EX_UNAVAILABLE`: too many connections.
pub const EXIT_UNAVAILABLE: i32 = ng_server::exit_codes::UNAVAILABLE;
/// Unknown command.
pub const EXIT_UNKNOWN: i32 = ng_server::exit_codes::UNKNOWN_COMMAND;

/// Connections over `max_connections` still get a refusal message, up to this many more;
/// past that they are closed at once (`REFUSAL_MARGIN` in `server/src/event_loop.rs`).
pub const REFUSAL_MARGIN: usize = 64;
/// How long `ngd` keeps reading and discarding after its `X` (docs/protocol.md: "until the
/// client closes or 2 s pass").
pub const DRAIN_LINGER: Duration = Duration::from_secs(2);

/// The environment under which `ngd`'s RSS follows its live memory (see the module docs).
pub const MALLOC_ENV: [(&str, &str); 2] = [
    ("MALLOC_MMAP_THRESHOLD_", "131072"),
    ("MALLOC_TRIM_THRESHOLD_", "131072"),
];

/// True if process `pid` runs with [`MALLOC_ENV`].
pub fn allocator_pinned(pid: u32) -> bool {
    MALLOC_ENV
        .iter()
        .all(|(name, value)| procfs::environ_has(pid, &format!("{name}={value}")))
}

/// The server's limits that decide what each attack must get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `header_timeout_ms`.
    pub header_timeout: Duration,
    /// `heartbeat_timeout_ms`.
    pub heartbeat_timeout: Duration,
    /// `max_connections`.
    pub max_connections: usize,
    /// `max_chunk_bytes`.
    pub max_chunk_bytes: u32,
    /// `max_header_bytes`.
    pub max_header_bytes: u64,
}

impl Limits {
    /// `ngd`'s defaults (docs/configuration.md).
    pub fn ngd_defaults() -> Limits {
        use ng_server::config::ServerConfig as C;
        Limits {
            header_timeout: Duration::from_millis(C::DEFAULT_HEADER_TIMEOUT_MS),
            heartbeat_timeout: Duration::from_millis(C::DEFAULT_HEARTBEAT_TIMEOUT_MS),
            max_connections: C::DEFAULT_MAX_CONNECTIONS,
            max_chunk_bytes: C::DEFAULT_MAX_CHUNK_BYTES,
            max_header_bytes: C::DEFAULT_MAX_HEADER_BYTES,
        }
    }

    /// Short timeouts (1 s) and a small connection limit, so that every attack ends quickly:
    /// what CI and `tests/hostile-run` use. The header cap is 4 MiB so that the
    /// header-too-large attack stays cheap on a debug build.
    pub fn short() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(1),
            max_connections: 32,
            max_header_bytes: 4 << 20,
            ..Limits::ngd_defaults()
        }
    }

    /// The limits of a server running with `config`; `None` if a timeout this tool relies
    /// on is disabled (0).
    pub fn from_config(config: &ng_server::config::ServerConfig) -> Option<Limits> {
        if config.header_timeout_ms == 0 || config.heartbeat_timeout_ms == 0 {
            return None;
        }
        Some(Limits {
            header_timeout: Duration::from_millis(config.header_timeout_ms),
            heartbeat_timeout: Duration::from_millis(config.heartbeat_timeout_ms),
            max_connections: config.max_connections,
            max_chunk_bytes: config.max_chunk_bytes,
            max_header_bytes: config.max_header_bytes,
        })
    }

    /// The `ngd.toml` lines that set these limits.
    pub fn config_lines(&self) -> Vec<String> {
        vec![
            format!("header_timeout_ms = {}", self.header_timeout.as_millis()),
            format!(
                "heartbeat_timeout_ms = {}",
                self.heartbeat_timeout.as_millis()
            ),
            format!("max_connections = {}", self.max_connections),
            format!("max_chunk_bytes = {}", self.max_chunk_bytes),
            format!("max_header_bytes = {}", self.max_header_bytes),
        ]
    }
}

/// A running server to attack.
#[derive(Clone, Debug)]
pub struct Target {
    /// Where it listens; attempts alternate between these.
    pub addresses: Vec<Address>,
    /// Its process id, for `/proc/<pid>/{fd,status,stat}`.
    pub pid: u32,
    /// Its limits.
    pub limits: Limits,
}

/// How hard to attack, and how strictly to judge.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Rounds per kind; each round fires `concurrency` attempts at once (a flood fires
    /// `max_connections + 64 + concurrency`).
    pub rounds: usize,
    /// Attempts at once.
    pub concurrency: usize,
    /// Time allowed past a documented timeout, and for an answer that should be immediate.
    pub slack: Duration,
    /// `ng-true` after an attack must answer within this.
    pub probe_limit: Duration,
    /// RSS may exceed its baseline by this much once the attack's connections are closed.
    pub rss_tolerance_kib: u64,
    /// How long descriptors, RSS and CPU may take to come back after the attack.
    pub settle: Duration,
}

impl Plan {
    /// The bounded form CI runs: every kind twice at concurrency 8, loose timing for a
    /// debug build on a loaded two-core machine.
    pub fn bounded() -> Plan {
        Plan {
            rounds: 2,
            concurrency: 8,
            slack: Duration::from_secs(2),
            probe_limit: Duration::from_secs(1),
            rss_tolerance_kib: 2048,
            settle: Duration::from_secs(6),
        }
    }

    /// The full form's defaults (`ng-hostile` without options).
    pub fn full() -> Plan {
        Plan {
            rounds: 5,
            concurrency: 16,
            ..Plan::bounded()
        }
    }
}

/// Raises this process's soft limit on open files to its hard limit (at most 65536): a
/// flood holds over a thousand sockets against a server with the default
/// `max_connections`.
pub fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return;
        }
        let want = limit.rlim_max.min(65536);
        if limit.rlim_cur < want {
            limit.rlim_cur = want;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
