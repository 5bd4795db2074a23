//! Hostile clients: every bad input we can think of, fired at a running `ngd` (issue #5).
//!
//! Each [`Kind`] is one attack, written against the wire directly (this crate's
//! [`wire`](crate::wire) chunks, raw sockets, no `ng-proto`), and judged against what
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

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{Address, Transport};
use crate::wire::{Chunk, Stream};

/// `EX_PROTOCOL`: the client broke the protocol (docs/protocol.md, "Exit codes").
pub const EXIT_PROTOCOL: i32 = 76;
/// `EX_UNAVAILABLE`: too many connections.
pub const EXIT_UNAVAILABLE: i32 = 69;
/// Unknown command.
pub const EXIT_UNKNOWN: i32 = 127;

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
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    MALLOC_ENV.iter().all(|(name, value)| {
        let want = format!("{name}={value}");
        environ.split(|&b| b == 0).any(|e| e == want.as_bytes())
    })
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

/// How one attempt ended, as the client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// `X n` with no `ngd: ` message: the command ran.
    Served(i32),
    /// A `2` chunk starting `ngd: ` and `X n`: the server refused, saying why.
    Refused(i32),
    /// The server closed the connection (end of file or reset) without an `X`.
    Closed,
    /// The attacker closed first, by design (connect-and-close, reset mid-output).
    Dropped,
    /// The connection could not be made.
    ConnectFailed,
    /// Nothing conclusive within the time allowed.
    Hung,
    /// The server broke the protocol (an unknown chunk type, a malformed `X`, output that
    /// should not exist).
    Broken,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Served(n) => write!(f, "served {n}"),
            Outcome::Refused(n) => write!(f, "refused {n}"),
            Outcome::Closed => f.write_str("closed"),
            Outcome::Dropped => f.write_str("dropped"),
            Outcome::ConnectFailed => f.write_str("connect failed"),
            Outcome::Hung => f.write_str("HUNG"),
            Outcome::Broken => f.write_str("BROKEN"),
        }
    }
}

/// Every attack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A chunk announcing 2^31 bytes (in the header, and as stdin after `C`).
    Length2p31,
    /// A chunk announcing 2^32−1 bytes.
    Length2p32m1,
    /// A chunk cut off inside its 5-byte header, then silence.
    CutMidHeader,
    /// A chunk cut off inside its payload, then silence.
    CutMidPayload,
    /// `C ng-cat`, then a stdin chunk cut off inside its payload, then silence.
    CutMidStdin,
    /// Unknown chunk types (and server-only ones) before `C`.
    UnknownBeforeCommand,
    /// An unexpected chunk type after `C`.
    UnknownAfterCommand,
    /// Stdin (`0`, `.`) before the server sent any `S`.
    StdinBeforeCredit,
    /// A `0` after `.`.
    StdinAfterEof,
    /// `E` entries without `=`, with an empty name, empty.
    EnvWithoutEquals,
    /// Non-UTF-8 arguments, environment and working directory.
    NonUtf8Header,
    /// A non-UTF-8 command name.
    NonUtf8Command,
    /// 100 000 arguments.
    Args100k,
    /// A header over `max_header_bytes` (many empty arguments, or a few big ones).
    HeaderTooLarge,
    /// One 64 MiB argument, over the chunk cap.
    Arg64MiB,
    /// A header with no `C`, then silence.
    NoCommand,
    /// Connect, then send nothing.
    Slowloris,
    /// A valid header sent one byte every 50 ms, too slowly to finish in time.
    SlowlorisTrickle,
    /// Connect and close at once (half of them with a reset).
    ConnectClose,
    /// `ng-yes 1G`, read 1 MiB, then close with `SO_LINGER` 0 (a reset on TCP).
    RstMidOutput,
    /// Heartbeats every 100 ms, and never a `C`.
    HeartbeatsOnly,
    /// `ng-yes 1G`, then never read and never send.
    NeverReads,
    /// `ng-yes` just under the output mark (the command finishes while its output is still
    /// queued), then never read and never send.
    NeverReadsFinished,
    /// `ng-yes 1G`, heartbeats, and never read; the client gives up after a while.
    NeverReadsAlive,
    /// `ng-true`, read its `X`, then keep sending (junk at full speed, or heartbeats).
    JunkAfterExit,
    /// More connections than `max_connections + 64` at once, all silent.
    FloodHold,
    /// More connections than `max_connections + 64` at once, each asking for `ng-true`.
    FloodRequests,
}

/// When an attempt's outcome is due.
#[derive(Clone, Copy, Debug)]
enum Due {
    /// At once (within the slack).
    Now,
    /// At the header timeout.
    Header,
    /// At the heartbeat timeout.
    Heartbeat,
    /// The client sits for the heartbeat timeout plus the slack, then gives up.
    AfterSit,
    /// At the end of the drain after `X`.
    Drain,
}

/// What a kind must get.
#[derive(Clone, Debug)]
struct Expect {
    allowed: Vec<Outcome>,
    due: Due,
    /// Each of these must occur at least once per round.
    required: Vec<Outcome>,
    /// Peak RSS during the attack may exceed the RSS before it by at most this much per
    /// concurrent attempt, plus the tolerance.
    peak_per_attempt_kib: Option<u64>,
}

impl Kind {
    /// Every kind, in the order they run.
    pub const ALL: &'static [Kind] = &[
        Kind::Length2p31,
        Kind::Length2p32m1,
        Kind::CutMidHeader,
        Kind::CutMidPayload,
        Kind::CutMidStdin,
        Kind::UnknownBeforeCommand,
        Kind::UnknownAfterCommand,
        Kind::StdinBeforeCredit,
        Kind::StdinAfterEof,
        Kind::EnvWithoutEquals,
        Kind::NonUtf8Header,
        Kind::NonUtf8Command,
        Kind::Args100k,
        Kind::HeaderTooLarge,
        Kind::Arg64MiB,
        Kind::NoCommand,
        Kind::Slowloris,
        Kind::SlowlorisTrickle,
        Kind::ConnectClose,
        Kind::RstMidOutput,
        Kind::HeartbeatsOnly,
        Kind::NeverReads,
        Kind::NeverReadsFinished,
        Kind::NeverReadsAlive,
        Kind::JunkAfterExit,
        Kind::FloodHold,
        Kind::FloodRequests,
    ];

    /// The kind's name on the command line and in the matrix.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Length2p31 => "length-2^31",
            Kind::Length2p32m1 => "length-2^32-1",
            Kind::CutMidHeader => "cut-mid-header",
            Kind::CutMidPayload => "cut-mid-payload",
            Kind::CutMidStdin => "cut-mid-stdin",
            Kind::UnknownBeforeCommand => "unknown-before-C",
            Kind::UnknownAfterCommand => "unknown-after-C",
            Kind::StdinBeforeCredit => "stdin-before-S",
            Kind::StdinAfterEof => "stdin-after-eof",
            Kind::EnvWithoutEquals => "env-without-=",
            Kind::NonUtf8Header => "non-utf8-header",
            Kind::NonUtf8Command => "non-utf8-command",
            Kind::Args100k => "args-100k",
            Kind::HeaderTooLarge => "header-too-large",
            Kind::Arg64MiB => "arg-64MiB",
            Kind::NoCommand => "no-command",
            Kind::Slowloris => "slowloris",
            Kind::SlowlorisTrickle => "slowloris-trickle",
            Kind::ConnectClose => "connect-close",
            Kind::RstMidOutput => "rst-mid-output",
            Kind::HeartbeatsOnly => "heartbeats-only",
            Kind::NeverReads => "never-reads",
            Kind::NeverReadsFinished => "never-reads-finished",
            Kind::NeverReadsAlive => "never-reads-alive",
            Kind::JunkAfterExit => "junk-after-exit",
            Kind::FloodHold => "flood-hold",
            Kind::FloodRequests => "flood-requests",
        }
    }

    /// The kind called `name`.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// What the attack sends, and what it must get, in a line.
    pub fn what(self) -> &'static str {
        match self {
            Kind::Length2p31 => "a chunk announcing 2^31 bytes (A or Z before C, 0 after C ng-cat): 76 at once",
            Kind::Length2p32m1 => "a chunk announcing 2^32-1 bytes (A or Z before C, 0 after C ng-cat): 76 at once",
            Kind::CutMidHeader => "A, then 3 of the next chunk's 5 header bytes, then silence: 76 at the header timeout",
            Kind::CutMidPayload => "A, then a chunk with 40 of its 100 payload bytes, then silence: 76 at the header timeout",
            Kind::CutMidStdin => "C ng-cat, then a 0 chunk with 40 of 100 bytes, then silence: closed at the heartbeat timeout",
            Kind::UnknownBeforeCommand => "Z, NUL, 0xFF, h, q, S, X, 1, 2, 0, . chunks before C ng-true: skipped, served 0",
            Kind::UnknownAfterCommand => "C ng-cat, then Z / NUL / 0xFF / h / S / X / 1 / A / E / D / C / L: 76",
            Kind::StdinBeforeCredit => "C ng-cat, 0 0 . before any S: served 0, the bytes echoed",
            Kind::StdinAfterEof => "C ng-cat, ., 0: 76",
            Kind::EnvWithoutEquals => "E NOEQUALS, E =v, E '', E A=B=C, then C ng-true: served 0",
            Kind::NonUtf8Header => "non-UTF-8 A, E name and value, D, then C ng-true: served 0",
            Kind::NonUtf8Command => "C with a non-UTF-8 name: 127 with a message",
            Kind::Args100k => "100 000 A chunks, then C ng-true: served 0",
            Kind::HeaderTooLarge => "max_header_bytes/16+1 empty A, or three A of max_header_bytes/2 each: 76",
            Kind::Arg64MiB => "one A of 64 MiB (over max_chunk_bytes), all of it sent: 76 at once, RSS flat",
            Kind::NoCommand => "A, E, D, then silence: 76 at the header timeout",
            Kind::Slowloris => "connect, then silence: 76 at the header timeout",
            Kind::SlowlorisTrickle => "a valid header, one byte per 50 ms: 76 at the header timeout",
            Kind::ConnectClose => "connect and close at once (every other one with SO_LINGER 0)",
            Kind::RstMidOutput => "C ng-yes 1G, read 1 MiB, close with SO_LINGER 0: ng-yes cancelled",
            Kind::HeartbeatsOnly => "H every 100 ms, no C: 76 at the header timeout",
            Kind::NeverReads => "C ng-yes 1G (blocks at the output mark), never read or send: closed at the heartbeat timeout",
            Kind::NeverReadsFinished => "C ng-yes just under the output mark (finishes, output still queued in ngd), never read or send: closed at the heartbeat timeout",
            Kind::NeverReadsAlive => "C ng-yes 1G, H every 200 ms, never read; give up after heartbeat+slack: output stays buffered, bounded",
            Kind::JunkAfterExit => "C ng-true, read X, then junk at full speed or H every 100 ms: closed within the 2 s drain",
            Kind::FloodHold => "max_connections+64+concurrency silent connections at once: 76 / 69 / closed",
            Kind::FloodRequests => "max_connections+64+concurrency connections at once, then C ng-true: served 0 / 69 / closed",
        }
    }

    fn is_flood(self) -> bool {
        matches!(self, Kind::FloodHold | Kind::FloodRequests)
    }

    fn expect(self) -> Expect {
        use Outcome::*;
        let (allowed, due) = match self {
            Kind::Length2p31
            | Kind::Length2p32m1
            | Kind::UnknownAfterCommand
            | Kind::StdinAfterEof
            | Kind::HeaderTooLarge
            | Kind::Arg64MiB => (vec![Refused(EXIT_PROTOCOL)], Due::Now),
            Kind::CutMidHeader
            | Kind::CutMidPayload
            | Kind::NoCommand
            | Kind::Slowloris
            | Kind::SlowlorisTrickle
            | Kind::HeartbeatsOnly => (vec![Refused(EXIT_PROTOCOL)], Due::Header),
            Kind::CutMidStdin => (vec![Closed], Due::Heartbeat),
            Kind::UnknownBeforeCommand
            | Kind::StdinBeforeCredit
            | Kind::EnvWithoutEquals
            | Kind::NonUtf8Header
            | Kind::Args100k => (vec![Served(0)], Due::Now),
            Kind::NonUtf8Command => (vec![Refused(EXIT_UNKNOWN)], Due::Now),
            Kind::ConnectClose | Kind::RstMidOutput => (vec![Dropped], Due::Now),
            Kind::NeverReadsAlive => (vec![Dropped], Due::AfterSit),
            Kind::NeverReads | Kind::NeverReadsFinished => (vec![Closed], Due::Heartbeat),
            Kind::JunkAfterExit => (vec![Closed], Due::Drain),
            Kind::FloodHold => (
                vec![Refused(EXIT_PROTOCOL), Refused(EXIT_UNAVAILABLE), Closed],
                Due::Header,
            ),
            // 76 if connecting everyone took longer than the header timeout.
            Kind::FloodRequests => (
                vec![
                    Served(0),
                    Refused(EXIT_UNAVAILABLE),
                    Refused(EXIT_PROTOCOL),
                    Closed,
                ],
                Due::Now,
            ),
        };
        let required = match self {
            Kind::FloodHold => vec![Refused(EXIT_UNAVAILABLE)],
            Kind::FloodRequests => vec![Served(0), Refused(EXIT_UNAVAILABLE)],
            _ => Vec::new(),
        };
        let peak_per_attempt_kib = match self {
            // Refused after the 5-byte header: nothing of the 64 MiB may be held.
            Kind::Arg64MiB => Some(1024),
            // Output queued per connection is bounded by the output mark (512 KiB now);
            // 6 MiB each leaves room for buffers being swapped and encoded.
            Kind::NeverReads | Kind::NeverReadsFinished | Kind::NeverReadsAlive => Some(6 * 1024),
            _ => None,
        };
        Expect {
            allowed,
            due,
            required,
            peak_per_attempt_kib,
        }
    }

    /// How long after connecting an attempt's outcome is due at the latest.
    fn bound(self, limits: &Limits, plan: &Plan) -> Duration {
        match self.expect().due {
            Due::Now => plan.slack,
            Due::Header => limits.header_timeout + plan.slack,
            Due::Heartbeat => limits.heartbeat_timeout + plan.slack,
            Due::AfterSit => sit_time(limits, plan) + plan.slack,
            Due::Drain => DRAIN_LINGER + plan.slack,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `never-reads-finished`'s output: under `ngd`'s output mark (a command blocks in its
/// write once this much is queued), so the command finishes at once.
const FINISHED_OUTPUT: usize = ng_server::session_io::OUTPUT_HIGH_WATER - (16 << 10);

/// How long the never-reads attackers sit before looking.
fn sit_time(limits: &Limits, plan: &Plan) -> Duration {
    limits.heartbeat_timeout + plan.slack
}

// ---------------------------------------------------------------------------------------
// The server's vital signs
// ---------------------------------------------------------------------------------------

/// The server's resident set size in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The server's CPU time so far (user + system) in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces and ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after state.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// True while the process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The server's open descriptors.
pub fn fd_count(pid: u32) -> Option<usize> {
    crate::ngd_server::fd_count(pid).ok()
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

// ---------------------------------------------------------------------------------------
// Raw connections
// ---------------------------------------------------------------------------------------

fn raw_fd(s: &Stream) -> RawFd {
    match s {
        Stream::Tcp(t) => t.as_raw_fd(),
        Stream::Unix(u) => u.as_raw_fd(),
    }
}

fn try_clone(s: &Stream) -> io::Result<Stream> {
    Ok(match s {
        Stream::Tcp(t) => Stream::Tcp(t.try_clone()?),
        Stream::Unix(u) => Stream::Unix(u.try_clone()?),
    })
}

fn shutdown(s: &Stream, how: Shutdown) {
    let _ = match s {
        Stream::Tcp(t) => t.shutdown(how),
        Stream::Unix(u) => u.shutdown(how),
    };
}

fn set_write_timeout(s: &Stream, t: Duration) {
    let t = Some(t.max(Duration::from_millis(1)));
    let _ = match s {
        Stream::Tcp(s) => s.set_write_timeout(t),
        Stream::Unix(s) => s.set_write_timeout(t),
    };
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) {
    // SAFETY: `value` outlives the call and its size is passed.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Makes the next close of `s` a reset (TCP; a Unix socket simply closes).
fn set_linger_zero(s: &Stream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `linger` outlives the call and its size is passed.
    unsafe {
        libc::setsockopt(
            raw_fd(s),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Waits until `s` has something to read (or is closed), for at most `timeout`.
fn wait_readable(s: &Stream, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: raw_fd(s),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n > 0
}

/// Whether the server has closed its end of `s`, seen without reading from `s`.
///
/// A Unix socket reports `POLLHUP` once its peer is closed, however much unread data it
/// holds. A TCP peer's close queues its FIN behind the unsent data, so for TCP the server's
/// side is looked up instead: its socket in `/proc/net/tcp{,6}` (local = the server's
/// address, remote = ours) must still be one of the server's descriptors.
fn server_closed(s: &Stream, pid: u32) -> Result<bool, String> {
    match s {
        Stream::Unix(_) => {
            let mut pfd = libc::pollfd {
                fd: raw_fd(s),
                events: libc::POLLRDHUP,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, 0) };
            Ok(n > 0 && pfd.revents & libc::POLLHUP != 0)
        }
        Stream::Tcp(t) => {
            let ours = t.local_addr().map_err(|e| format!("local_addr: {e}"))?;
            let theirs = t.peer_addr().map_err(|e| format!("peer_addr: {e}"))?;
            let (local, remote) = (proc_net_hex(&theirs), proc_net_hex(&ours));
            let file = if theirs.is_ipv4() {
                "/proc/net/tcp"
            } else {
                "/proc/net/tcp6"
            };
            let table = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
            let inode = table.lines().skip(1).find_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                (f.get(1) == Some(&local.as_str()) && f.get(2) == Some(&remote.as_str()))
                    .then(|| f.get(9).map(|i| i.to_string()))
                    .flatten()
            });
            let Some(inode) = inode.filter(|i| i != "0") else {
                return Ok(true);
            };
            let link = format!("socket:[{inode}]");
            let held = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .map_err(|e| format!("/proc/{pid}/fd: {e}"))?
                .filter_map(Result::ok)
                .any(|e| {
                    std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == link.as_str())
                });
            Ok(!held)
        }
    }
}

/// An address as `/proc/net/tcp{,6}` writes it: the address's 32-bit words in host order,
/// in hex, then the port.
fn proc_net_hex(addr: &std::net::SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match addr.ip() {
        std::net::IpAddr::V4(ip) => vec![ip.octets()],
        std::net::IpAddr::V6(ip) => ip
            .octets()
            .chunks(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
    };
    let mut out: String = words
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
    let _ = write!(out, ":{:04X}", addr.port());
    out
}

fn connect(address: &Address, timeout: Duration) -> io::Result<Stream> {
    match address {
        Address::Tcp(addr) => {
            let s = TcpStream::connect_timeout(addr, timeout)?;
            s.set_nodelay(true)?;
            Ok(Stream::Tcp(s))
        }
        Address::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path)?)),
    }
}

fn chunk(ty: u8, payload: &[u8]) -> Vec<u8> {
    Chunk::new(ty, payload).encode()
}

fn chunk_header(len: u32, ty: u8) -> [u8; 5] {
    let l = len.to_be_bytes();
    [l[0], l[1], l[2], l[3], ty]
}

fn request(items: &[(u8, &[u8])]) -> Vec<u8> {
    items.iter().flat_map(|(ty, p)| chunk(*ty, p)).collect()
}

/// How reading a response ended.
#[derive(Debug)]
enum End {
    Exit(i32),
    Eof,
    Reset(String),
    Timeout,
    /// The caller's stdout budget was reached.
    Enough,
    Bad(String),
}

#[derive(Debug)]
struct Response {
    stdout: Vec<u8>,
    stdout_len: u64,
    stderr: Vec<u8>,
    end: End,
}

/// What to read.
#[derive(Clone, Copy, Debug)]
struct ReadOpts {
    deadline: Instant,
    /// Keep at most this much stdout.
    keep_stdout: usize,
    /// Stop once this much stdout arrived ([`End::Enough`]).
    stop_after: Option<u64>,
}

enum Fill {
    Done,
    Eof,
    Failed(End),
}

fn fill(s: &mut Stream, buf: &mut [u8], deadline: Instant) -> Fill {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Fill::Failed(End::Timeout);
        }
        if s.set_read_timeout(Some(left)).is_err() {
            return Fill::Failed(End::Reset("set_read_timeout".into()));
        }
        match s.read(&mut buf[got..]) {
            Ok(0) => return Fill::Eof,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Fill::Failed(End::Timeout)
            }
            Err(e) => return Fill::Failed(End::Reset(e.to_string())),
        }
    }
    Fill::Done
}

/// Reads chunks until `X`, end of file, an error, the deadline or the stdout budget.
fn read_response(s: &mut Stream, opts: ReadOpts) -> Response {
    let mut r = Response {
        stdout: Vec::new(),
        stdout_len: 0,
        stderr: Vec::new(),
        end: End::Eof,
    };
    let mut scratch = vec![0u8; 64 << 10];
    loop {
        let mut header = [0u8; 5];
        match fill(s, &mut header, opts.deadline) {
            Fill::Done => {}
            Fill::Eof => {
                r.end = End::Eof;
                return r;
            }
            Fill::Failed(end) => {
                r.end = end;
                return r;
            }
        }
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as u64;
        let ty = header[4];
        let max = match ty {
            b'1' => u64::MAX,
            b'2' => 1 << 20,
            b'S' => 0,
            b'X' => 64,
            _ => {
                r.end = End::Bad(format!(
                    "the server sent a chunk of type {ty:#04x} ({:?}), {len} bytes",
                    ty as char
                ));
                return r;
            }
        };
        if len > max {
            r.end = End::Bad(format!("{:?} chunk of {len} bytes", ty as char));
            return r;
        }
        let mut left = len;
        let mut payload = Vec::new();
        while left > 0 {
            let n = left.min(scratch.len() as u64) as usize;
            match fill(s, &mut scratch[..n], opts.deadline) {
                Fill::Done => {}
                Fill::Eof => {
                    r.end = End::Eof;
                    return r;
                }
                Fill::Failed(end) => {
                    r.end = end;
                    return r;
                }
            }
            left -= n as u64;
            match ty {
                b'1' => {
                    r.stdout_len += n as u64;
                    let keep = opts.keep_stdout.saturating_sub(r.stdout.len()).min(n);
                    r.stdout.extend_from_slice(&scratch[..keep]);
                }
                b'2' => r.stderr.extend_from_slice(&scratch[..n]),
                _ => payload.extend_from_slice(&scratch[..n]),
            }
            if ty == b'1' && opts.stop_after.is_some_and(|m| r.stdout_len >= m) {
                r.end = End::Enough;
                return r;
            }
        }
        if ty == b'X' {
            r.end = match std::str::from_utf8(&payload)
                .ok()
                .and_then(|t| t.strip_suffix('\n'))
                .and_then(|t| t.parse::<i32>().ok())
            {
                Some(code) => End::Exit(code),
                None => End::Bad(format!("malformed X payload {payload:?}")),
            };
            return r;
        }
    }
}

/// An outcome, when it was seen, and what explains it.
#[derive(Clone, Debug)]
struct Seen {
    outcome: Outcome,
    at: Instant,
    detail: String,
}

impl Seen {
    fn now(outcome: Outcome, detail: impl Into<String>) -> Seen {
        Seen {
            outcome,
            at: Instant::now(),
            detail: detail.into(),
        }
    }
}

fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines().next().unwrap_or("").to_string()
}

/// Judges a response: an `X` after an `ngd: ` line is a refusal.
fn classify(r: &Response) -> Seen {
    let ngd_line = String::from_utf8_lossy(&r.stderr)
        .lines()
        .any(|l| l.starts_with("ngd: "));
    match &r.end {
        End::Exit(code) if ngd_line => Seen::now(Outcome::Refused(*code), first_line(&r.stderr)),
        End::Exit(code) => Seen::now(
            Outcome::Served(*code),
            format!(
                "{} bytes of stdout; stderr {:?}",
                r.stdout_len,
                first_line(&r.stderr)
            ),
        ),
        End::Eof => Seen::now(
            Outcome::Closed,
            format!("end of file after {} bytes of stdout", r.stdout_len),
        ),
        End::Reset(e) => Seen::now(
            Outcome::Closed,
            format!("{e} after {} bytes of stdout", r.stdout_len),
        ),
        End::Timeout => Seen::now(
            Outcome::Hung,
            format!(
                "no X and no close in time ({} bytes of stdout, stderr {:?})",
                r.stdout_len,
                first_line(&r.stderr)
            ),
        ),
        End::Enough => Seen::now(
            Outcome::Dropped,
            format!("{} bytes of stdout", r.stdout_len),
        ),
        End::Bad(e) => Seen::now(Outcome::Broken, e.clone()),
    }
}

// ---------------------------------------------------------------------------------------
// The attacks
// ---------------------------------------------------------------------------------------

/// Everything one attempt needs.
struct Attempt<'a> {
    kind: Kind,
    address: &'a Address,
    /// The server's process id.
    pid: u32,
    limits: &'a Limits,
    plan: &'a Plan,
    /// The attempt's number within its round; variants alternate on it.
    index: usize,
    started: Instant,
    /// When the outcome is due at the latest.
    deadline: Instant,
    /// Floods: everyone connects before anyone sends.
    gate: Option<&'a Gate>,
}

impl Attempt<'_> {
    fn connect(&self) -> Result<Stream, Seen> {
        connect(self.address, self.plan.slack.max(Duration::from_secs(1)))
            .map_err(|e| Seen::now(Outcome::ConnectFailed, e.to_string()))
    }

    fn opts(&self) -> ReadOpts {
        ReadOpts {
            deadline: self.deadline,
            keep_stdout: 1 << 20,
            stop_after: None,
        }
    }

    /// Sends `bytes` (small: one write), then reads the outcome.
    fn send_then_judge(&self, bytes: &[u8]) -> Seen {
        match self.send_then_read(bytes) {
            Ok(r) => classify(&r),
            Err(seen) => seen,
        }
    }

    /// Sends `bytes` (small: one write), then reads the response.
    fn send_then_read(&self, bytes: &[u8]) -> Result<Response, Seen> {
        let mut s = self.connect()?;
        if let Err(e) = s.write_all(bytes) {
            // The server may already have answered and closed; look.
            let r = read_response(&mut s, self.opts());
            if matches!(r.end, End::Eof | End::Reset(_)) {
                return Err(Seen::now(Outcome::Closed, format!("write: {e}")));
            }
            return Ok(r);
        }
        Ok(read_response(&mut s, self.opts()))
    }

    /// Sends `parts` in order from a second thread while this one reads the outcome: a
    /// large request must not deadlock against the server's answer.
    fn send_big_then_judge(&self, parts: &[&[u8]]) -> Seen {
        let mut s = match self.connect() {
            Ok(s) => s,
            Err(seen) => return seen,
        };
        let mut writer = match try_clone(&s) {
            Ok(w) => w,
            Err(e) => return Seen::now(Outcome::ConnectFailed, format!("clone: {e}")),
        };
        set_write_timeout(
            &writer,
            self.deadline.saturating_duration_since(Instant::now()),
        );
        thread::scope(|scope| {
            scope.spawn(move || {
                for part in parts {
                    if writer.write_all(part).is_err() {
                        return;
                    }
                }
            });
            let seen = classify(&read_response(&mut s, self.opts()));
            // Wake a writer still blocked in write.
            shutdown(&s, Shutdown::Both);
            seen
        })
    }

    /// Sends `bytes`, then one more byte of filler every `every` (heartbeats, or the rest
    /// of a request) until the server answers or the deadline.
    fn trickle(&self, first: &[u8], next: impl Fn(usize) -> Vec<u8>, every: Duration) -> Seen {
        let mut s = match self.connect() {
            Ok(s) => s,
            Err(seen) => return seen,
        };
        if !first.is_empty() && s.write_all(first).is_err() {
            return classify(&read_response(&mut s, self.opts()));
        }
        let mut i = 0;
        while Instant::now() < self.deadline {
            if wait_readable(&s, every) {
                break;
            }
            let bytes = next(i);
            i += 1;
            if bytes.is_empty() || s.write_all(&bytes).is_err() {
                break;
            }
        }
        classify(&read_response(&mut s, self.opts()))
    }

    fn run(&self) -> Seen {
        let i = self.index;
        match self.kind {
            Kind::Length2p31 | Kind::Length2p32m1 => {
                let len = if self.kind == Kind::Length2p31 {
                    1u32 << 31
                } else {
                    u32::MAX
                };
                let mut bytes = Vec::new();
                let ty = match i % 3 {
                    0 => b'A',
                    1 => b'Z',
                    _ => {
                        bytes.extend(chunk(b'C', b"ng-cat"));
                        b'0'
                    }
                };
                bytes.extend(chunk_header(len, ty));
                bytes.extend_from_slice(b"some payload");
                self.send_then_judge(&bytes)
            }
            Kind::CutMidHeader => {
                let mut bytes = chunk(b'A', b"hello");
                bytes.extend_from_slice(&chunk_header(100, b'A')[..3]);
                self.send_then_judge(&bytes)
            }
            Kind::CutMidPayload => {
                let mut bytes = chunk(b'A', b"hello");
                bytes.extend_from_slice(&chunk_header(100, b'A'));
                bytes.extend_from_slice(&[b'x'; 40]);
                self.send_then_judge(&bytes)
            }
            Kind::CutMidStdin => {
                let mut bytes = chunk(b'C', b"ng-cat");
                bytes.extend_from_slice(&chunk_header(100, b'0'));
                bytes.extend_from_slice(&[b'x'; 40]);
                self.send_then_judge(&bytes)
            }
            Kind::UnknownBeforeCommand => {
                let mut bytes = Vec::new();
                for ty in [
                    b'Z', 0x00, 0xFF, b'h', b'q', b'S', b'X', b'1', b'2', b'0', b'.',
                ] {
                    bytes.extend(chunk(ty, b"junk"));
                    bytes.extend(chunk(ty, b""));
                }
                bytes.extend(chunk(b'C', b"ng-true"));
                self.send_then_judge(&bytes)
            }
            Kind::UnknownAfterCommand => {
                const TYPES: [u8; 12] = [
                    b'Z', 0x00, 0xFF, b'h', b'S', b'X', b'1', b'A', b'E', b'D', b'C', b'L',
                ];
                let mut bytes = chunk(b'C', b"ng-cat");
                bytes.extend(chunk(TYPES[i % TYPES.len()], b"x=y"));
                self.send_then_judge(&bytes)
            }
            Kind::StdinBeforeCredit => {
                let bytes = request(&[
                    (b'C', b"ng-cat"),
                    (b'0', b"hello, "),
                    (b'0', b"world\n"),
                    (b'.', b""),
                ]);
                match self.send_then_read(&bytes) {
                    Err(seen) => seen,
                    Ok(r) => {
                        let seen = classify(&r);
                        if seen.outcome == Outcome::Served(0) && r.stdout != b"hello, world\n" {
                            Seen::now(
                                Outcome::Broken,
                                format!("ng-cat echoed {:?}", String::from_utf8_lossy(&r.stdout)),
                            )
                        } else {
                            seen
                        }
                    }
                }
            }
            Kind::StdinAfterEof => {
                self.send_then_judge(&request(&[(b'C', b"ng-cat"), (b'.', b""), (b'0', b"late")]))
            }
            Kind::EnvWithoutEquals => self.send_then_judge(&request(&[
                (b'E', b"NOEQUALS"),
                (b'E', b"=value"),
                (b'E', b""),
                (b'E', b"A=B=C"),
                (b'A', b"arg"),
                (b'C', b"ng-true"),
            ])),
            Kind::NonUtf8Header => self.send_then_judge(&request(&[
                (b'A', b"\xff\xfe\xfd"),
                (b'A', b"caf\xe9"),
                (b'A', b"\xc0\xaf"),
                (b'E', b"\xff\xfe=\xc0\xaf"),
                (b'E', b"LANG=\xed\xa0\x80"),
                (b'D', b"/tmp/\xff\xfe"),
                (b'C', b"ng-true"),
            ])),
            Kind::NonUtf8Command => {
                self.send_then_judge(&request(&[(b'A', b"x"), (b'C', b"ng-\xff\xfe\xc0")]))
            }
            Kind::Args100k => {
                let payload = payloads().args_100k.as_slice();
                self.send_big_then_judge(&[payload, &chunk(b'C', b"ng-true")])
            }
            Kind::HeaderTooLarge => {
                let max = self.limits.max_header_bytes;
                if i % 2 == 0 {
                    let data = empty_args(max / 16 + 1);
                    self.send_big_then_judge(&[data, &chunk(b'C', b"ng-true")])
                } else {
                    // Two arguments of half the cap each, plus bookkeeping: just over.
                    let half = (max / 2).min(u64::from(self.limits.max_chunk_bytes)) as u32;
                    let n = max / u64::from(half.max(1)) + 1;
                    let head = chunk_header(half, b'A');
                    let body = zeros(half as usize);
                    let mut parts: Vec<&[u8]> = Vec::new();
                    for _ in 0..n {
                        parts.push(&head);
                        parts.push(body);
                    }
                    let c = chunk(b'C', b"ng-true");
                    parts.push(&c);
                    self.send_big_then_judge(&parts)
                }
            }
            Kind::Arg64MiB => {
                let head = chunk_header(64 << 20, b'A');
                let block = zeros(1 << 20);
                let mut parts: Vec<&[u8]> = vec![&head];
                parts.extend(std::iter::repeat_n(block, 64));
                self.send_big_then_judge(&parts)
            }
            Kind::NoCommand => self.send_then_judge(&request(&[
                (b'A', b"arg"),
                (b'E', b"NAME=value"),
                (b'D', b"/"),
            ])),
            Kind::Slowloris => self.send_then_judge(b""),
            Kind::SlowlorisTrickle => {
                let mut whole = Vec::new();
                for _ in 0..20 {
                    whole.extend(chunk(b'A', b"trickle"));
                }
                whole.extend(chunk(b'C', b"ng-true"));
                self.trickle(
                    &[],
                    |k| whole.get(k).map(|b| vec![*b]).unwrap_or_default(),
                    Duration::from_millis(50),
                )
            }
            Kind::HeartbeatsOnly => self.trickle(
                &chunk(b'H', b""),
                |_| chunk(b'H', b""),
                Duration::from_millis(100),
            ),
            Kind::ConnectClose => match self.connect() {
                Ok(s) => {
                    if i % 2 == 1 {
                        set_linger_zero(&s);
                    }
                    drop(s);
                    Seen::now(Outcome::Dropped, "closed at once")
                }
                Err(seen) => seen,
            },
            Kind::RstMidOutput => {
                let mut s = match self.connect() {
                    Ok(s) => s,
                    Err(seen) => return seen,
                };
                if let Err(e) = s.write_all(&request(&[(b'A', b"1G"), (b'C', b"ng-yes")])) {
                    return Seen::now(Outcome::Closed, format!("write: {e}"));
                }
                let r = read_response(
                    &mut s,
                    ReadOpts {
                        stop_after: Some(1 << 20),
                        keep_stdout: 0,
                        ..self.opts()
                    },
                );
                set_linger_zero(&s);
                drop(s);
                classify(&r)
            }
            Kind::NeverReads | Kind::NeverReadsFinished => {
                let size = if self.kind == Kind::NeverReads {
                    "1G".to_string()
                } else {
                    // Under the output mark, so the command finishes without ever waiting
                    // and the rest of its output stays queued in the server.
                    format!("{}", FINISHED_OUTPUT)
                };
                let size = size.as_bytes();
                let mut s = match self.connect() {
                    Ok(s) => s,
                    Err(seen) => return seen,
                };
                // A small receive buffer, so the output stays queued in the server rather
                // than in the kernel.
                setsockopt_int(raw_fd(&s), libc::SOL_SOCKET, libc::SO_RCVBUF, 4096);
                if let Err(e) = s.write_all(&request(&[(b'A', size), (b'C', b"ng-yes")])) {
                    return Seen::now(Outcome::Closed, format!("write: {e}"));
                }
                // Never read: watch the server's side of the connection instead.
                let sit_until = self.started + sit_time(self.limits, self.plan);
                loop {
                    match server_closed(&s, self.pid) {
                        Ok(true) => {
                            set_linger_zero(&s);
                            return Seen::now(Outcome::Closed, "the server closed its end");
                        }
                        Ok(false) => {}
                        Err(e) => return Seen::now(Outcome::Broken, e),
                    }
                    if Instant::now() >= sit_until {
                        set_linger_zero(&s);
                        return Seen::now(
                            Outcome::Hung,
                            format!(
                                "the server still holds the connection {:.1?} after the \
                                 client went silent without reading (heartbeat timeout {:?})",
                                self.started.elapsed(),
                                self.limits.heartbeat_timeout
                            ),
                        );
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            }
            Kind::NeverReadsAlive => {
                let mut s = match self.connect() {
                    Ok(s) => s,
                    Err(seen) => return seen,
                };
                setsockopt_int(raw_fd(&s), libc::SOL_SOCKET, libc::SO_RCVBUF, 4096);
                if let Err(e) = s.write_all(&request(&[(b'A', b"1G"), (b'C', b"ng-yes")])) {
                    return Seen::now(Outcome::Closed, format!("write: {e}"));
                }
                let until = Instant::now() + sit_time(self.limits, self.plan);
                let mut sent = 0;
                while Instant::now() < until && sent < 10_000 {
                    thread::sleep(Duration::from_millis(200));
                    if let Err(e) = s.write_all(&chunk(b'H', b"")) {
                        return Seen::now(Outcome::Closed, format!("heartbeat: {e}"));
                    }
                    sent += 1;
                }
                set_linger_zero(&s);
                drop(s);
                Seen::now(Outcome::Dropped, format!("gave up after {sent} heartbeats"))
            }
            Kind::JunkAfterExit => {
                let mut s = match self.connect() {
                    Ok(s) => s,
                    Err(seen) => return seen,
                };
                if let Err(e) = s.write_all(&chunk(b'C', b"ng-true")) {
                    return Seen::now(Outcome::Closed, format!("write: {e}"));
                }
                let r = read_response(&mut s, self.opts());
                if !matches!(r.end, End::Exit(0)) {
                    let seen = classify(&r);
                    return Seen::now(
                        Outcome::Broken,
                        format!(
                            "ng-true did not answer X 0: {} {}",
                            seen.outcome, seen.detail
                        ),
                    );
                }
                set_write_timeout(&s, Duration::from_millis(500));
                let junk = zeros(1 << 16);
                let h = chunk(b'H', b"");
                let mut writes = 0u64;
                while Instant::now() < self.deadline && writes < 1_000_000 {
                    let result = if i % 2 == 0 {
                        s.write_all(junk)
                    } else {
                        thread::sleep(Duration::from_millis(100));
                        s.write_all(&h)
                    };
                    writes += 1;
                    match result {
                        Ok(()) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                            ) => {}
                        Err(e) => {
                            return Seen::now(Outcome::Closed, format!("write {writes}: {e}"))
                        }
                    }
                }
                Seen::now(
                    Outcome::Hung,
                    format!(
                        "the server still took input {:?} after X",
                        self.deadline - self.started
                    ),
                )
            }
            Kind::FloodHold | Kind::FloodRequests => {
                let connected = self.connect();
                if let Some(gate) = self.gate {
                    gate.arrive_and_wait(self.deadline);
                }
                let mut s = match connected {
                    Ok(s) => s,
                    Err(seen) => return seen,
                };
                if self.kind == Kind::FloodRequests {
                    if let Err(e) = s.write_all(&chunk(b'C', b"ng-true")) {
                        let seen = classify(&read_response(&mut s, self.opts()));
                        if seen.outcome == Outcome::Closed {
                            return Seen::now(Outcome::Closed, format!("write: {e}"));
                        }
                        return seen;
                    }
                }
                classify(&read_response(&mut s, self.opts()))
            }
        }
    }
}

/// A barrier that cannot hang: everyone waits until all have arrived or a deadline.
struct Gate {
    arrived: Mutex<usize>,
    all: Condvar,
    total: usize,
}

impl Gate {
    fn new(total: usize) -> Gate {
        Gate {
            arrived: Mutex::new(0),
            all: Condvar::new(),
            total,
        }
    }

    fn arrive(&self) {
        let mut n = self.arrived.lock().unwrap();
        *n += 1;
        if *n >= self.total {
            self.all.notify_all();
        }
    }

    fn arrive_and_wait(&self, deadline: Instant) {
        self.arrive();
        let mut n = self.arrived.lock().unwrap();
        while *n < self.total {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            n = self.all.wait_timeout(n, left).unwrap().0;
        }
    }
}

/// Payloads shared by every attempt.
struct Payloads {
    args_100k: Vec<u8>,
}

fn payloads() -> &'static Payloads {
    static P: OnceLock<Payloads> = OnceLock::new();
    P.get_or_init(|| {
        let mut args_100k = Vec::with_capacity(100_000 * 12);
        for n in 0..100_000u32 {
            args_100k.extend(chunk(b'A', format!("{n:06}").as_bytes()));
        }
        Payloads { args_100k }
    })
}

/// `count` empty `A` chunks (cached for the last count asked).
fn empty_args(count: u64) -> &'static [u8] {
    static CACHE: Mutex<Vec<(u64, &'static [u8])>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap();
    if let Some((_, data)) = cache.iter().find(|(c, _)| *c == count) {
        return data;
    }
    let data: &'static [u8] = chunk(b'A', b"").repeat(count as usize).leak();
    cache.push((count, data));
    data
}

/// `len` zero bytes (cached per length).
fn zeros(len: usize) -> &'static [u8] {
    static CACHE: Mutex<Vec<&'static [u8]>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap();
    if let Some(data) = cache.iter().find(|d| d.len() == len) {
        return data;
    }
    let data: &'static [u8] = vec![0u8; len].leak();
    cache.push(data);
    data
}

// ---------------------------------------------------------------------------------------
// Probes, warm-up, settling
// ---------------------------------------------------------------------------------------

/// Runs `ng-true` with a bare client; the time from connect to `X 0`.
pub fn probe(address: &Address, timeout: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let mut s = connect(address, timeout).map_err(|e| format!("connect: {e}"))?;
    s.write_all(&request(&[(b'D', b"/"), (b'C', b"ng-true")]))
        .map_err(|e| format!("write: {e}"))?;
    let r = read_response(
        &mut s,
        ReadOpts {
            deadline: started + timeout,
            keep_stdout: 4096,
            stop_after: None,
        },
    );
    match r.end {
        End::Exit(0) if r.stderr.is_empty() && r.stdout.is_empty() => Ok(started.elapsed()),
        _ => {
            let seen = classify(&r);
            Err(format!("{}: {}", seen.outcome, seen.detail))
        }
    }
}

/// What the warm-up left: the idle server's descriptors and RSS.
#[derive(Clone, Copy, Debug)]
pub struct Baseline {
    /// Descriptors.
    pub fds: usize,
    /// `VmRSS` in KiB.
    pub rss_kib: u64,
}

/// Runs every legitimate path `concurrency` wide a few times (see the module docs), waits
/// until the server is idle, and returns its vital signs.
pub fn warm_up(target: &Target, plan: &Plan) -> Result<Baseline, String> {
    let failures = Mutex::new(Vec::new());
    for round in 0..3 {
        thread::scope(|scope| {
            for i in 0..plan.concurrency.max(1) {
                let address = &target.addresses[(i + round) % target.addresses.len()];
                let failures = &failures;
                scope.spawn(move || {
                    if let Err(e) = warm_one(address, i + round) {
                        failures.lock().unwrap().push(format!("{address}: {e}"));
                    }
                });
            }
        });
    }
    let failures = failures.into_inner().unwrap();
    if !failures.is_empty() {
        return Err(format!("warm-up failed:\n{}", failures.join("\n")));
    }
    let deadline = Instant::now() + plan.settle;
    let mut last = (usize::MAX, 0);
    loop {
        let fds = fd_count(target.pid).ok_or("the server is gone")?;
        let rss = rss_kib(target.pid).ok_or("the server is gone")?;
        let idle = cpu_idle(target.pid);
        if idle && (fds, rss) == last {
            return Ok(Baseline { fds, rss_kib: rss });
        }
        if Instant::now() > deadline {
            return Ok(Baseline { fds, rss_kib: rss });
        }
        last = (fds, rss);
    }
}

fn warm_one(address: &Address, i: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let opts = ReadOpts {
        deadline,
        keep_stdout: 1 << 20,
        stop_after: None,
    };
    probe(address, Duration::from_secs(10))?;
    // A big header: 100 000 arguments.
    let mut s = connect(address, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let mut writer = try_clone(&s).map_err(|e| e.to_string())?;
    let r = thread::scope(|scope| {
        scope.spawn(move || {
            let _ = writer.write_all(&payloads().args_100k);
            let _ = writer.write_all(&chunk(b'C', b"ng-true"));
        });
        read_response(&mut s, opts)
    });
    if !matches!(r.end, End::Exit(0)) {
        return Err(format!("100 000 arguments: {:?}", r.end));
    }
    drop(s);
    // ng-cat: 200 KiB through, stdin sent eagerly, read back in parallel.
    let data = crate::data::binary(200 << 10);
    let mut s = connect(address, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let mut writer = try_clone(&s).map_err(|e| e.to_string())?;
    let echoed = thread::scope(|scope| {
        scope.spawn(|| {
            let _ = writer.write_all(&chunk(b'C', b"ng-cat"));
            for piece in data.chunks(2048) {
                if writer.write_all(&chunk(b'0', piece)).is_err() {
                    return;
                }
            }
            let _ = writer.write_all(&chunk(b'.', b""));
        });
        read_response(&mut s, opts)
    });
    if !matches!(echoed.end, End::Exit(0)) || echoed.stdout != data {
        return Err(format!(
            "ng-cat: {:?}, {} of {} bytes back",
            echoed.end,
            echoed.stdout_len,
            data.len()
        ));
    }
    drop(s);
    // ng-yes read in full, and ng-yes cut off.
    let size: &[u8] = if i % 2 == 0 { b"16M" } else { b"3M" };
    let mut s = connect(address, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.write_all(&request(&[(b'A', size), (b'C', b"ng-yes")]))
        .map_err(|e| e.to_string())?;
    let r = read_response(
        &mut s,
        ReadOpts {
            keep_stdout: 0,
            ..opts
        },
    );
    if !matches!(r.end, End::Exit(0)) {
        return Err(format!("ng-yes: {:?}", r.end));
    }
    drop(s);
    let mut s = connect(address, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.write_all(&request(&[(b'A', b"1G"), (b'C', b"ng-yes")]))
        .map_err(|e| e.to_string())?;
    let _ = read_response(
        &mut s,
        ReadOpts {
            keep_stdout: 0,
            stop_after: Some(2 << 20),
            ..opts
        },
    );
    set_linger_zero(&s);
    drop(s);
    Ok(())
}

/// True if the server used at most a fifth of a core over the next 250 ms.
fn cpu_idle(pid: u32) -> bool {
    let window = Duration::from_millis(250);
    let before = cpu_ticks(pid);
    thread::sleep(window);
    let after = cpu_ticks(pid);
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    match (before, after) {
        (Some(b), Some(a)) => (a - b) * 1000 / hz <= window.as_millis() as u64 / 5,
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------
// Running a kind
// ---------------------------------------------------------------------------------------

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

/// Fires `kind` at `target` as `plan` says and checks the server afterwards.
pub fn run_kind(target: &Target, kind: Kind, plan: &Plan, baseline: &Baseline) -> KindReport {
    let started = Instant::now();
    let limits = target.limits;
    let expect = kind.expect();
    let bound = kind.bound(&limits, plan);
    let pid = target.pid;
    let mut failures = Vec::new();
    // The previous kind's last probe may still be closing.
    let quiet_by = Instant::now() + Duration::from_secs(1);
    let mut fds_before = fd_count(pid).unwrap_or(0);
    while fds_before > baseline.fds && Instant::now() < quiet_by {
        thread::sleep(Duration::from_millis(20));
        fds_before = fd_count(pid).unwrap_or(0);
    }
    let rss_before = rss_kib(pid).unwrap_or(0);

    let per_round = if kind.is_flood() {
        limits.max_connections + REFUSAL_MARGIN + plan.concurrency
    } else {
        plan.concurrency.max(1)
    };
    let stop = AtomicBool::new(false);
    let peak = Mutex::new(rss_before);
    let during: Mutex<(Option<Duration>, Vec<String>)> = Mutex::new((None, Vec::new()));
    let mut attempts: Vec<(usize, Transport, Seen, Instant)> = Vec::new();

    thread::scope(|scope| {
        // RSS sampler.
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if let Some(r) = rss_kib(pid) {
                    let mut p = peak.lock().unwrap();
                    *p = (*p).max(r);
                }
                thread::sleep(Duration::from_millis(10));
            }
        });
        // ng-true while the attack runs (a flood is meant to fill every slot).
        if !kind.is_flood() {
            scope.spawn(|| {
                // At least once, however short the attack.
                for n in 0..100_000usize {
                    let address = &target.addresses[n % target.addresses.len()];
                    let result = probe(address, bound + plan.slack);
                    let mut d = during.lock().unwrap();
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
            let gate = Gate::new(per_round);
            let results = Mutex::new(Vec::with_capacity(per_round));
            thread::scope(|s| {
                for i in 0..per_round {
                    let address = &target.addresses[(i + round) % target.addresses.len()];
                    let results = &results;
                    let gate = &gate;
                    let limits = &limits;
                    let spawned =
                        thread::Builder::new()
                            .stack_size(256 << 10)
                            .spawn_scoped(s, move || {
                                let t0 = Instant::now();
                                let attempt = Attempt {
                                    kind,
                                    address,
                                    pid,
                                    limits,
                                    plan,
                                    index: i + round * per_round,
                                    started: t0,
                                    deadline: t0 + bound,
                                    gate: kind.is_flood().then_some(gate),
                                };
                                let seen = attempt.run();
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
            attempts.extend(results.into_inner().unwrap());
        }
        stop.store(true, Ordering::Relaxed);
    });
    let attack_done = Instant::now();

    // Judge each attempt.
    let mut outcomes = BTreeMap::new();
    let mut max_latency = Duration::ZERO;
    let mut via = (0, 0);
    for (i, transport, seen, t0) in &attempts {
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
    let rss_peak = *peak.lock().unwrap();
    if let Some(per) = expect.peak_per_attempt_kib {
        let allowed = rss_before + per * per_round as u64 + plan.rss_tolerance_kib;
        if rss_peak > allowed {
            failures.push(format!(
                "RSS peaked at {rss_peak} KiB during the attack, over {allowed} KiB \
                 ({rss_before} before + {per} KiB × {per_round} + tolerance)"
            ));
        }
    }
    let (probe_during, during_failures) = during.into_inner().unwrap();
    failures.extend(during_failures);
    // Starvation: the loop serving the attackers must still get to other connections.
    if let Some(t) = probe_during.filter(|t| *t > plan.probe_limit + plan.slack) {
        failures.push(format!(
            "ng-true took {t:.2?} while the attack ran (limit {:.2?})",
            plan.probe_limit + plan.slack
        ));
    }

    // Settle: descriptors, RSS and CPU back.
    let rss_limit = rss_before.max(baseline.rss_kib) + plan.rss_tolerance_kib;
    let settle_deadline = attack_done + plan.settle;
    let (mut fds_after, mut rss_after);
    loop {
        fds_after = fd_count(pid).unwrap_or(usize::MAX);
        rss_after = rss_kib(pid).unwrap_or(u64::MAX);
        let idle = cpu_idle(pid);
        let ok = fds_after <= fds_before && rss_after <= rss_limit && idle;
        if ok {
            break;
        }
        if Instant::now() > settle_deadline {
            if !alive(pid) {
                failures.push("the server died".to_string());
                break;
            }
            if fds_after > fds_before {
                failures.push(format!(
                    "{fds_after} descriptors open {:.1?} after the attack, {fds_before} before:\n{}",
                    plan.settle,
                    crate::ngd_server::fd_listing(pid)
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
            break;
        }
    }
    let settled_in = attack_done.elapsed();

    // ng-true after.
    let mut probe_after = None;
    if alive(pid) {
        for n in 0..3 * target.addresses.len() {
            let address = &target.addresses[n % target.addresses.len()];
            match probe(address, plan.probe_limit + plan.slack) {
                Ok(t) => {
                    probe_after = Some(probe_after.map_or(t, |m: Duration| m.max(t)));
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
    } else if !failures.iter().any(|f| f == "the server died") {
        failures.push("the server died".to_string());
    }

    KindReport {
        kind,
        count: attempts.len(),
        via,
        outcomes,
        max_latency,
        bound,
        probe_during,
        probe_after,
        fds: (fds_before, fds_after),
        rss_kib: (rss_before, rss_after, rss_peak),
        settled_in,
        elapsed: started.elapsed(),
        failures,
    }
}

// ---------------------------------------------------------------------------------------
// The matrix
// ---------------------------------------------------------------------------------------

fn ms(d: Duration) -> String {
    if d < Duration::from_secs(10) {
        format!("{:.0} ms", d.as_secs_f64() * 1000.0)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn opt_ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.1} ms", d.as_secs_f64() * 1000.0))
        .unwrap_or_else(|| "–".to_string())
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// The matrix: one row per kind. Markdown for `docs/reliability.md`, or aligned text.
pub fn matrix(reports: &[KindReport], markdown: bool) -> String {
    let head = [
        "kind",
        "n (tcp+unix)",
        "outcomes",
        "max time to outcome",
        "due within",
        "ng-true during / after",
        "fds before→after",
        "RSS MiB before→after (peak)",
        "settled in",
        "verdict",
    ];
    let rows: Vec<[String; 10]> = reports
        .iter()
        .map(|r| {
            [
                r.kind.name().to_string(),
                format!("{} ({}+{})", r.count, r.via.0, r.via.1),
                r.outcome_summary(),
                ms(r.max_latency),
                ms(r.bound),
                format!("{} / {}", opt_ms(r.probe_during), opt_ms(r.probe_after)),
                format!("{}→{}", r.fds.0, r.fds.1),
                format!(
                    "{}→{} ({})",
                    mib(r.rss_kib.0),
                    mib(r.rss_kib.1),
                    mib(r.rss_kib.2)
                ),
                ms(r.settled_in),
                if r.passed() {
                    "ok".to_string()
                } else {
                    format!("FAIL ({})", r.failures.len())
                },
            ]
        })
        .collect();
    let mut out = String::new();
    if markdown {
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let _ = writeln!(
            out,
            "|{}",
            head.iter()
                .enumerate()
                .map(|(i, _)| if (1..3).contains(&i) || i == 0 {
                    "---|"
                } else {
                    "---:|"
                })
                .collect::<String>()
        );
        for row in &rows {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, c)| if i == 0 { format!("`{c}`") } else { c.clone() })
                .collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    } else {
        let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: Vec<&str>| -> String {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        let _ = writeln!(out, "{}", line(head.to_vec()));
        for row in &rows {
            let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
        }
    }
    out
}

/// Every failure of every report, for after the matrix.
pub fn failure_details(reports: &[KindReport]) -> String {
    let mut out = String::new();
    for r in reports.iter().filter(|r| !r.passed()) {
        let _ = writeln!(out, "{} ({}):", r.kind, r.kind.what());
        for f in r.failures.iter().take(12) {
            let _ = writeln!(out, "  - {f}");
        }
        if r.failures.len() > 12 {
            let _ = writeln!(out, "  ... and {} more", r.failures.len() - 12);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for &k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(k));
        }
        let mut names: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Kind::ALL.len());
    }

    #[test]
    fn responses_are_classified() {
        let mut wire = chunk(b'2', b"ngd: protocol error: nope\n");
        wire.extend(chunk(b'X', b"76\n"));
        let r = read_response(
            &mut Stream::Unix(pair_with(&wire)),
            ReadOpts {
                deadline: Instant::now() + Duration::from_secs(5),
                keep_stdout: 10,
                stop_after: None,
            },
        );
        assert_eq!(classify(&r).outcome, Outcome::Refused(76));

        let r = read_response(
            &mut Stream::Unix(pair_with(&chunk(b'Q', b""))),
            ReadOpts {
                deadline: Instant::now() + Duration::from_secs(5),
                keep_stdout: 10,
                stop_after: None,
            },
        );
        assert_eq!(classify(&r).outcome, Outcome::Broken);
    }

    /// A socket that yields `bytes` and then end of file.
    fn pair_with(bytes: &[u8]) -> UnixStream {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(bytes).unwrap();
        drop(a);
        b
    }
}
