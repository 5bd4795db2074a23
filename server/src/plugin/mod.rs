//! The plugin host: pools of warm worker processes speaking ngw (`docs/ngw.md`).
//!
//! Each `[[plugin]]` of the configuration is a pool of workers. A worker is a long-lived
//! process holding one end of a socketpair; on it each client session is the client's own
//! Nailgun exchange (`A E D C` → `S 0 . 1 2` → `X`), relayed between the client's
//! connection and the worker's channel. ngd speaks only ngw: a plugin that speaks another
//! protocol (`protocol = "nu"`, ...) runs behind a bridge, itself an ngw worker
//! (`ngd bridge <protocol> -- <command...>`, §15.2), so nothing here knows any other
//! protocol.
//!
//! The layers, each usable without the one above:
//! * [`pool`]: one pool's queue, backoff, disable and spawn decisions (no I/O);
//! * [`session`]: one session's stdin credit (no I/O);
//! * [`machine`]: one worker's protocol, sessions (one, or several with `mux`) and timers
//!   (no I/O);
//! * [`derive`]: which pool serves the program a shim found (the plugin's own, one derived
//!   from its table, or none: the client runs it), recognised on a thread of its own;
//! * [`launcher`]: the JVM command line a launcher script runs, learned by watching its
//!   `exec`s without running the program (for `ngd warm`, and again in each directory and
//!   environment by [`derive`]);
//! * [`budget`]: the memory budget: which pools give way (no I/O), over the workers'
//!   footprints ([`footprint`], read on a thread of its own);
//! * [`worker`]: spawning a process, a worker's channel I/O, and the raw process calls;
//! * [`reaper`]: workers on their way out, reaped without blocking, and how each ended;
//! * [`host`]: the pools and workers wired together, and the narrow interface the event
//!   loop calls ([`PluginHost`]), handing it [`Clients`] for what reaches clients and
//!   [`Channels`] for watching the workers' channels; nothing here knows the loop.
//!
//! No worker process outlives the host: every exit is reaped, every stop escalates `q` →
//! SIGTERM → SIGKILL to the worker's process group, and workers die with `ngd`
//! (`PR_SET_PDEATHSIG`).

pub mod budget;
pub mod config;
pub mod derive;
pub mod footprint;
pub mod host;
pub mod launcher;
pub mod machine;
pub mod pool;
pub mod reaper;
pub mod session;
pub mod worker;

use crate::session_io::ConnKey;
pub use config::PluginConfig;
pub use host::{HostInit, HostTimer, PluginHost};
pub use machine::{WorkerEnd, WorkerKey};
use ngw_vocab::WorkerFeature;
pub use pool::{Notice, PoolStatus, Refusal};
use serde::{Deserialize, Serialize};
use session::StdinBuffer;
use std::collections::BTreeMap;

/// The ngw extensions this host supports, announced to every worker in
/// `NGW_HOST_FEATURES` (`docs/ngw.md` §15).
pub const HOST_FEATURES: [WorkerFeature; 6] = [
    WorkerFeature::Mux,
    WorkerFeature::Notices,
    WorkerFeature::Fds,
    WorkerFeature::Ctty,
    WorkerFeature::Signals,
    WorkerFeature::StdinWindow,
];

/// A plugin session waiting for a worker, as its connection holds it.
#[derive(Debug)]
pub struct Queued {
    /// The pool that serves it.
    pub pool: usize,
    /// The resolved command name.
    pub command: String,
    /// The request, for the header.
    pub request: ng_proto::Request,
    /// The client's umask, if it reported it (`NGD_CLIENT_UMASK`).
    pub umask: Option<u32>,
    /// Stdin the client sent before a worker was bound (eager clients send it right after
    /// `C`).
    pub stdin: StdinBuffer,
    /// The client's own descriptors, offered to the worker with the header when it can
    /// take them (`docs/ngw.md` §15.4).
    pub fds: Option<crate::passed_fds::PassedFds>,
}

/// A plugin session relayed to a worker, as its connection holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The worker.
    pub worker: WorkerKey,
    /// `NGW_SESSION`.
    pub session: u64,
    /// The resolved command name.
    pub command: String,
}

/// What the host needs of client connections; the event loop implements it over its
/// connections, tests over plain records.
pub trait Clients {
    /// Stdout for a client (`1`).
    fn stdout(&mut self, conn: ConnKey, data: &[u8]);
    /// Stderr for a client (`2`).
    fn stderr(&mut self, conn: ConnKey, data: &[u8]);
    /// Asks a client for one stdin chunk (`S`); false if its stdin already ended.
    fn request_stdin(&mut self, conn: ConnKey) -> bool;
    /// Stdin bytes held for the client's worker (reading pauses above a mark).
    fn stdin_backlog(&mut self, conn: ConnKey, bytes: usize);
    /// The session ended as the worker's `X` says.
    fn exit(&mut self, conn: ConnKey, report: &ng_proto::ext::ExitReport);
    /// The worker answered the client's descriptors (or the session goes on without them):
    /// the client's extensions are settled now (`F`), with `fds` only if they were taken
    /// and `ctty` only if the pseudo-terminal became the controlling terminal.
    fn settle(&mut self, conn: ConnKey, answer: session::FdOffer);
    /// The command stopped itself with `signal`; the client should stop too (`Z`).
    fn stopped(&mut self, conn: ConnKey, signal: &ng_proto::ext::SignalName);
    /// The session ends with an `ngd: ` message line on stderr and this exit code.
    fn finish(&mut self, conn: ConnKey, code: i32, message: &str);
    /// The client's output is above the high-water mark.
    fn output_full(&self, conn: ConnKey) -> bool;
    /// Binds a queued session: the connection becomes [`Bound`] and hands over what it
    /// held; `None` if it no longer waits (the client left).
    fn bind(&mut self, conn: ConnKey, worker: WorkerKey, session: u64) -> Option<Queued>;
    /// Takes a queued session that is refused; `None` if it no longer waits.
    fn take_queued(&mut self, conn: ConnKey) -> Option<Queued>;
}

/// Where the host has its workers' channels watched for readiness: the event loop
/// implements it over its poll, so that nothing here knows the loop or its tokens. A
/// channel is named by its worker's slot; readiness comes back as
/// [`PluginHost::on_ready`] for that slot.
pub trait Channels: std::fmt::Debug + Send {
    /// Watches the channel of the worker in `slot` (readable and writable, edge-triggered).
    fn register(&self, channel: &mut mio::net::UnixStream, slot: usize) -> std::io::Result<()>;
    /// Stops watching a channel that is closed or about to be.
    fn deregister(&self, channel: &mut mio::net::UnixStream);
}

/// A snapshot of one pool for `ng-stats` and `ngd status`; `ngd warm` and `ngd list` read
/// it back from `ng-stats --json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PluginReport {
    /// The plugin's name.
    pub name: String,
    /// What its program speaks (`ngw`, or a bridged protocol).
    pub protocol: config::Protocol,
    /// Active, disabled (with the reason) or retiring.
    pub status: PoolStatus,
    /// Commands routed to it.
    pub commands: Vec<String>,
    /// Workers waiting for their hello.
    pub starting: usize,
    /// Workers without a session.
    pub idle: usize,
    /// Workers with at least one session.
    pub busy: usize,
    /// Workers being stopped.
    pub quitting: usize,
    /// Sessions running on its workers.
    pub running: usize,
    /// Sessions waiting for a worker.
    pub queued: usize,
    /// Sessions completed.
    pub sessions: u64,
    /// Workers replaced after they failed or died.
    pub restarts: u64,
    /// Consecutive failures now.
    pub failures: u32,
    /// The last failure's reason.
    pub last_failure: Option<String>,
    /// The workers' last notices, oldest first (`docs/ngw.md` §15.3).
    pub notices: Vec<Notice>,
    /// Notices received, per kind.
    pub notice_counts: BTreeMap<String, u64>,
    /// The workers' counters (`count` notices), per name.
    #[serde(default)]
    pub counters: BTreeMap<String, u64>,
    /// The workers' log file.
    pub log: String,
    /// Whether it keeps workers between sessions (`awake`, `asleep`, `evicted`).
    pub residency: pool::Residency,
    /// Its workers' memory with their descendants (summed PSS, `footprint`), in bytes.
    pub memory_bytes: u64,
    /// The program its table serves (`program`), if it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<std::path::PathBuf>,
    /// For a pool derived for a shim's program: the plugin it was derived from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived_from: Option<String>,
}

impl PluginReport {
    /// The report of pool `p`, before its workers are counted ([`PluginReport::count`]).
    pub fn of(p: &pool::Pool) -> Self {
        Self {
            name: p.config.name.clone(),
            protocol: p.config.protocol,
            status: p.status.clone(),
            commands: p.commands.clone(),
            starting: 0,
            idle: 0,
            busy: 0,
            quitting: 0,
            running: 0,
            queued: p.queue.len(),
            sessions: p.sessions,
            restarts: p.restarts,
            failures: p.failures,
            last_failure: p.last_failure.clone(),
            notices: p.notices.iter().cloned().collect(),
            notice_counts: p.notice_counts.clone(),
            counters: p.counters.clone(),
            log: p.config.log_path().display().to_string(),
            residency: p.residency,
            memory_bytes: 0,
            program: p.config.program.clone(),
            derived_from: p.derived_from.clone(),
        }
    }

    /// Counts one of the pool's workers, by its machine's phase; `memory` is what it
    /// holds, counted unless it is quitting.
    pub fn count(&mut self, m: &machine::Machine, memory: u64) {
        self.running += m.sessions.len();
        if !m.is_quitting() {
            self.memory_bytes += memory;
        }
        match m.phase {
            machine::Phase::Starting { .. } => self.starting += 1,
            machine::Phase::Quitting { .. } => self.quitting += 1,
            machine::Phase::Ready { .. } if m.sessions.is_empty() => self.idle += 1,
            machine::Phase::Ready { .. } => self.busy += 1,
        }
    }
}
