//! One worker, as a state machine without I/O: the channel's protocol (`docs/ngw.md` §§4–9,
//! §15), its sessions and its timers.
//!
//! ```text
//!  spawn ─▶ Starting ──h──▶ Ready ──(sessions bound, up to max_sessions with mux)──┐
//!              │              │ p/o; idle timeout, recycle, retire ─▶ Quitting      │
//!              │              ◀──────────────────────────── X of each session ──────┘
//!              └─ no hello, error hello, EOF ─▶ ended (WorkerEnd)
//!  Quitting: q sent ── stop_timeout_ms ──▶ SIGTERM to the group ── 2 s ──▶ SIGKILL
//! ```
//!
//! The machine takes the worker's decoded chunks and the time, writes what the worker is
//! owed into [`Machine::wbuf`] (pure encoding), tells clients what their session produced
//! through [`Clients`], and returns what the host must do with processes ([`Due`],
//! [`WorkerEnd`]). Sessions are selected with `s` only when both sides speak `mux`.

use super::config::PluginConfig;
use super::session::{Ask, FdOffer, SessionRelay, StdinBuffer, ToWorker};
use super::Clients;
use crate::passed_fds::PassedFds;
use crate::session_io::ConnKey;
use bytes::{Bytes, BytesMut};
use ng_proto::codec::encode;
use ng_proto::ext::{self, ExitReport, SignalName, SignalTarget, WinSize};
use ng_proto::{exit, ChunkType, Request, Signal};
use ngw_vocab::{Hello, WorkerFeature, WorkerFeatures};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// `s`: selects the session the following session chunks belong to (`mux`).
pub const SELECT: ChunkType = ChunkType::WORKER_SELECT;
/// `n`: a worker's notice (`notices`).
pub const NOTICE: ChunkType = ChunkType::WORKER_NOTICE;
/// `t`: the worker's answer to a session's descriptors (`fds`).
pub const TAKEN: ChunkType = ChunkType::WORKER_TAKEN;
/// `z`: the command stopped itself (`signals`).
pub const STOPPED: ChunkType = ChunkType::WORKER_STOPPED;
/// SIGTERM to SIGKILL when stopping a worker.
pub const TERM_TO_KILL: Duration = Duration::from_secs(2);
/// A worker that dies this soon after its hello counts as a failed start.
pub const EARLY_DEATH: Duration = Duration::from_secs(10);
/// The most sessions a `mux` worker may ask for.
pub const MAX_SESSIONS: u64 = 1024;

/// A worker, as the event loop's tokens and the connections' bound state name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerKey {
    /// The slab index (the host's name for its channel).
    pub slot: usize,
    /// Unique per spawned worker (slots are reused; serials are not).
    pub serial: u64,
}

/// Why a worker ended. Logic branches on the variant; people read [`WorkerEnd::describe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerEnd {
    /// End of file on its channel: it went on its own.
    Closed,
    /// Its process exited (SIGCHLD) while its channel was open.
    Exited,
    /// Reading or writing its channel failed.
    ChannelFailed(String),
    /// It broke the protocol.
    Protocol(String),
    /// Its hello carried `error`.
    Refused(String),
    /// No hello within `handshake_timeout_ms`.
    NoHello(u64),
    /// No pong within `ping_timeout_ms`.
    PingTimeout,
    /// No `X` within the interrupt grace after a hangup.
    HangupTimeout,
    /// It was still there `TERM_TO_KILL` after SIGTERM.
    KilledAfterTerm,
    /// The server stopped.
    ServerStopped,
}

impl WorkerEnd {
    /// The worker went on its own (its exit status says why) rather than being killed.
    pub fn on_its_own(&self) -> bool {
        matches!(self, WorkerEnd::Closed | WorkerEnd::Exited)
    }

    /// The reason, for logs, `ngd status` and clients.
    pub fn describe(&self) -> String {
        match self {
            WorkerEnd::Closed => "closed its channel".into(),
            WorkerEnd::Exited => "exited".into(),
            WorkerEnd::ChannelFailed(e) => format!("its channel failed: {e}"),
            WorkerEnd::Protocol(what) => what.clone(),
            WorkerEnd::Refused(why) => format!("refused to start: {why}"),
            WorkerEnd::NoHello(ms) => format!("no hello within {ms} ms"),
            WorkerEnd::PingTimeout => "did not answer a ping".into(),
            WorkerEnd::HangupTimeout => "did not end its session after a hangup".into(),
            WorkerEnd::KilledAfterTerm => "killed after SIGTERM".into(),
            WorkerEnd::ServerStopped => "the server stopped".into(),
        }
    }
}

/// Where a worker is in its life. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Spawned; waiting for the hello until `deadline`.
    Starting {
        /// Handshake deadline.
        deadline: Instant,
    },
    /// Hello received; serving sessions.
    Ready {
        /// Since when it has had no session (`None` while it has some).
        idle_since: Option<Instant>,
        /// The next health ping.
        next_ping: Option<Instant>,
        /// An unanswered ping: payload and deadline.
        ping: Option<(u64, Instant)>,
    },
    /// Told to quit (`q`); escalating.
    Quitting {
        /// SIGTERM the group then.
        term_at: Instant,
        /// SIGKILL the group then (after SIGTERM).
        kill_at: Option<Instant>,
    },
}

/// What a timer asks the host to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// End the worker (killing its group).
    End(WorkerEnd),
    /// SIGTERM its process group (the stop escalation).
    Term,
    /// Idle too long above `min_workers`: stop it (`q`).
    IdleTimeout,
}

/// What a worker chunk meant beyond the relay itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Nothing the host must act on.
    None,
    /// A valid hello arrived (the host checks it against the pool).
    Hello(Box<Hello>),
    /// A session ended with `X`.
    SessionEnded {
        /// Its command.
        command: String,
        /// Its exit code (128 + N for a death by signal N).
        code: i32,
        /// How long it ran.
        elapsed: Duration,
    },
    /// A notice (`n`), already checked to be a JSON object with a string `kind`.
    Notice {
        /// Its kind.
        kind: String,
        /// Its message.
        message: String,
        /// The session it is about.
        session: Option<u64>,
    },
}

/// One worker's protocol state. See the module docs.
#[derive(Debug)]
pub struct Machine {
    /// Its pool.
    pub pool: usize,
    /// Lifecycle.
    pub phase: Phase,
    /// The hello, once received.
    pub hello: Option<Hello>,
    /// Bound sessions by `NGW_SESSION` id.
    pub sessions: BTreeMap<u64, SessionRelay>,
    /// Sessions completed.
    pub completed: u64,
    /// When it was spawned.
    pub spawned_at: Instant,
    /// When its hello arrived.
    pub ready_at: Option<Instant>,
    /// Takes no new session (it sent `retire`, or is to be recycled once its sessions end).
    pub retired: bool,
    /// Bytes for the worker's channel.
    pub wbuf: BytesMut,
    /// Descriptors to send with a session's header in [`Machine::wbuf`], in offset order;
    /// see [`Machine::next_write`] and [`Machine::wrote`].
    pub fd_marks: VecDeque<FdMark>,
    /// What the host supports (what `NGW_HOST_FEATURES` announced).
    host: WorkerFeatures,
    /// The session most recently selected towards the worker / from the worker (`mux`).
    out_selected: Option<u64>,
    in_selected: Option<u64>,
    ping_serial: u64,
}

/// A session's descriptors waiting in [`Machine::wbuf`]: they go with the bytes `at..end`,
/// the session's `s` (with `mux`) and header.
#[derive(Debug)]
pub struct FdMark {
    pub at: usize,
    pub end: usize,
    pub fds: PassedFds,
}

impl Machine {
    /// A worker just spawned for `pool`.
    pub fn new(pool: usize, config: &PluginConfig, host: WorkerFeatures, now: Instant) -> Self {
        Self {
            pool,
            phase: Phase::Starting {
                deadline: now + PluginConfig::ms(config.handshake_timeout_ms),
            },
            hello: None,
            sessions: BTreeMap::new(),
            completed: 0,
            spawned_at: now,
            ready_at: None,
            retired: false,
            wbuf: BytesMut::new(),
            fd_marks: VecDeque::new(),
            host,
            out_selected: None,
            in_selected: None,
            ping_serial: 0,
        }
    }

    /// The worker's hello lists `feature`.
    fn has_feature(&self, feature: WorkerFeature) -> bool {
        self.hello
            .as_ref()
            .is_some_and(|h| h.features.contains(feature))
    }

    /// Both sides name `feature`.
    fn both_speak(&self, feature: WorkerFeature) -> bool {
        self.host.contains(feature) && self.has_feature(feature)
    }

    /// Both sides speak `mux`.
    pub fn is_mux(&self) -> bool {
        self.both_speak(WorkerFeature::Mux)
    }

    /// Both sides speak `fds`: sessions may run on the client's descriptors.
    pub fn takes_fds(&self) -> bool {
        self.both_speak(WorkerFeature::Fds)
    }

    /// Both sides speak `ctty` (with `fds` and `signals`): the client's pseudo-terminal is
    /// offered with its descriptors.
    pub fn takes_ctty(&self) -> bool {
        self.takes_fds() && self.speaks_signals() && self.both_speak(WorkerFeature::Ctty)
    }

    /// Both sides speak `signals`.
    fn speaks_signals(&self) -> bool {
        self.both_speak(WorkerFeature::Signals)
    }

    /// The next write to the channel: how many bytes from the front of [`Machine::wbuf`],
    /// and the descriptors to send with them. A session's descriptors go in a `sendmsg` of
    /// their own that holds that session's start and header and nothing after it: the
    /// worker gives a read's descriptors to the last session start in the read (the kernel
    /// ends a read with the message that carries descriptors), so a later session's start
    /// in the same message would take them (`docs/ngw.md` §15.4).
    pub fn next_write(&self) -> (usize, Option<&PassedFds>) {
        let len = self.wbuf.len();
        match self.fd_marks.front() {
            Some(mark) if mark.at == 0 => (mark.end.min(len), Some(&mark.fds)),
            Some(mark) => (mark.at.min(len), None),
            None => (len, None),
        }
    }

    /// `n` bytes of [`Machine::wbuf`] were written (and, if a mark was at its front, its
    /// descriptors sent with the first of them): the marks move along, sent ones are
    /// dropped (closing ngd's copies).
    pub fn wrote(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        if self.fd_marks.front().is_some_and(|m| m.at == 0) {
            self.fd_marks.pop_front();
        }
        for mark in &mut self.fd_marks {
            mark.at = mark.at.saturating_sub(n);
            mark.end = mark.end.saturating_sub(n);
        }
    }

    /// Sessions it may run at once.
    pub fn max_sessions(&self) -> usize {
        if self.is_mux() {
            let n = self
                .hello
                .as_ref()
                .and_then(|h| h.max_sessions)
                .unwrap_or(1);
            n.clamp(1, MAX_SESSIONS) as usize
        } else {
            1
        }
    }

    /// Sessions that could be bound now.
    pub fn free_slots(&self) -> usize {
        match self.phase {
            Phase::Ready { .. } if !self.retired => {
                self.max_sessions().saturating_sub(self.sessions.len())
            }
            _ => 0,
        }
    }

    /// Waiting for its hello.
    pub fn is_starting(&self) -> bool {
        matches!(self.phase, Phase::Starting { .. })
    }

    /// Being stopped.
    pub fn is_quitting(&self) -> bool {
        matches!(self.phase, Phase::Quitting { .. })
    }

    /// Its failure would count as a failed start (no hello, or dead soon after it).
    pub fn dies_early(&self, now: Instant) -> bool {
        match self.phase {
            Phase::Starting { .. } => true,
            Phase::Ready { .. } => self
                .ready_at
                .is_some_and(|t| now.saturating_duration_since(t) < EARLY_DEATH),
            Phase::Quitting { .. } => false,
        }
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

    /// The worker's inbound payload cap (§2; 1 MiB when the hello does not say).
    pub fn max_chunk(&self) -> usize {
        let cap = self
            .hello
            .as_ref()
            .and_then(|h| h.max_chunk)
            .unwrap_or(1 << 20);
        usize::try_from(cap).unwrap_or(usize::MAX)
    }

    /// Encodes a session chunk, selecting the session first on a `mux` channel.
    fn send(&mut self, session: u64, ty: ChunkType, payload: &[u8]) {
        if self.is_mux() && self.out_selected != Some(session) {
            encode(SELECT, session.to_string().as_bytes(), &mut self.wbuf);
            self.out_selected = Some(session);
        }
        encode(ty, payload, &mut self.wbuf);
    }

    fn send_stdin(&mut self, session: u64, to: ToWorker) {
        match to {
            ToWorker::Data(data) => self.send(session, ChunkType::STDIN, &data),
            ToWorker::Eof => self.send(session, ChunkType::STDIN_EOF, b""),
        }
    }

    /// Binds a session: its header in one write (`docs/ngw.md` §7.1); the stdin the client
    /// sent while it waited goes with it into the session's relay. The client's
    /// descriptors, if any, ride with the header when the worker speaks `fds` (§15.4);
    /// returns whether they were offered (otherwise they are closed here).
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        &mut self,
        id: u64,
        conn: ConnKey,
        command: String,
        request: &Request,
        umask: u32,
        stdin: StdinBuffer,
        fds: Option<PassedFds>,
        now: Instant,
    ) -> bool {
        // The pseudo-terminal only for a worker that makes it the controlling terminal.
        let fds = fds.filter(|_| self.takes_fds()).map(|f| {
            if self.takes_ctty() {
                f
            } else {
                f.without_pty()
            }
        });
        let mut header = BytesMut::new();
        for a in &request.args {
            encode(ChunkType::ARGUMENT, a, &mut header);
        }
        let mut entry = BytesMut::new();
        for (name, value) in &request.env {
            if name.starts_with(b"NGW_") {
                continue;
            }
            entry.clear();
            entry.extend_from_slice(name);
            entry.extend_from_slice(b"=");
            entry.extend_from_slice(value);
            encode(ChunkType::ENVIRONMENT, &entry, &mut header);
        }
        encode(
            ChunkType::ENVIRONMENT,
            format!("NGW_UMASK={umask:04o}").as_bytes(),
            &mut header,
        );
        encode(
            ChunkType::ENVIRONMENT,
            format!("NGW_SESSION={id}").as_bytes(),
            &mut header,
        );
        if let Some(passed) = &fds {
            let entry = format!("NGW_CLIENT_FDS={}", passed.map().to_value());
            encode(ChunkType::ENVIRONMENT, entry.as_bytes(), &mut header);
            if let Some(pty) = passed.pty_map() {
                let entry = format!("NGW_CLIENT_PTY={}", pty.to_value());
                encode(ChunkType::ENVIRONMENT, entry.as_bytes(), &mut header);
            }
        }
        if self.speaks_signals() {
            let client = &request.client;
            if !client.ignored_signals.is_empty() {
                let names: Vec<&str> = client.ignored_signals.iter().map(|s| s.as_str()).collect();
                let entry = format!("NGW_SIGIGN={}", names.join(","));
                encode(ChunkType::ENVIRONMENT, entry.as_bytes(), &mut header);
            }
            if let Some(ws) = client.winsize {
                let entry = format!("NGW_CLIENT_WINSIZE={}", ws.to_value());
                encode(ChunkType::ENVIRONMENT, entry.as_bytes(), &mut header);
            }
        }
        if let Some(cwd) = &request.cwd {
            encode(ChunkType::WORKING_DIR, cwd, &mut header);
        }
        encode(ChunkType::COMMAND, command.as_bytes(), &mut header);
        let offered = fds.is_some();
        let pty_offered = fds.as_ref().is_some_and(|f| f.pty_map().is_some());
        let at = self.wbuf.len();
        if self.is_mux() && self.out_selected != Some(id) {
            encode(SELECT, id.to_string().as_bytes(), &mut self.wbuf);
            self.out_selected = Some(id);
        }
        self.wbuf.extend_from_slice(&header);
        if let Some(fds) = fds {
            let end = self.wbuf.len();
            self.fd_marks.push_back(FdMark { at, end, fds });
        }
        let mux = self.is_mux();
        if let Phase::Ready {
            idle_since,
            next_ping,
            ping,
        } = &mut self.phase
        {
            *idle_since = None;
            if !mux {
                // A worker with one session is never pinged while it runs (§6).
                *next_ping = None;
                *ping = None;
            }
        }
        let mut relay = SessionRelay::new(id, conn, command, stdin, self.max_chunk(), now);
        if offered {
            relay.fds = FdOffer::Offered;
            relay.pty_offered = pty_offered;
        }
        self.sessions.insert(id, relay);
        offered
    }

    /// The client of `session` sent stdin; returns the bytes still held for the worker and
    /// whether the worker's credit (a window) wants more from the client. Chunks over the
    /// worker's `max_chunk` are split (`docs/ngw.md` §7.3).
    pub fn client_stdin(&mut self, session: u64, data: Bytes) -> (usize, bool) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return (0, false);
        };
        let out = s.client_stdin(data);
        let backlog = s.backlog();
        let more = s.wants_stdin();
        for to in out {
            self.send_stdin(session, to);
        }
        (backlog, more)
    }

    /// The client of `session` ended its stdin.
    pub fn client_eof(&mut self, session: u64) {
        let out = self
            .sessions
            .get_mut(&session)
            .map(SessionRelay::client_eof)
            .unwrap_or_default();
        for to in out {
            self.send_stdin(session, to);
        }
    }

    /// The client of `session` is gone: `.` for an outstanding `S`, `i hangup` (if the
    /// worker acts on interrupts), and a grace for its `X`.
    pub fn hang_up(&mut self, session: u64, config: &PluginConfig, now: Instant) {
        let deadline = now + self.interrupt_grace(config);
        let Some(answer) = self
            .sessions
            .get_mut(&session)
            .and_then(|s| s.hang_up(deadline))
        else {
            return;
        };
        for to in answer {
            self.send_stdin(session, to);
        }
        if self.has_feature(WorkerFeature::Interrupt) {
            self.send(session, ChunkType::WORKER_INTERRUPT, b"hangup");
        }
    }

    /// Forwards a client's signal to a session's command (`i SIGNAME`, or `i "SIGNAME
    /// process"` for a signal meant for the command's process alone, §15.5). False if the
    /// worker does not act on interrupts (the caller decides what the signal means then).
    pub fn signal(&mut self, session: u64, name: &SignalName) -> bool {
        if !self.has_feature(WorkerFeature::Interrupt) {
            return false;
        }
        let signals = self.speaks_signals();
        let Some(s) = self.sessions.get_mut(&session) else {
            return true;
        };
        match name.signal() {
            Some(Signal::Tstp | Signal::Stop) => s.client_stopped = true,
            Some(Signal::Cont) => s.client_stopped = false,
            _ => {}
        }
        let payload = if signals && SignalTarget::of(name) == SignalTarget::Process {
            format!("{} process", name.as_str())
        } else {
            name.as_str().to_owned()
        };
        self.send(session, ChunkType::WORKER_INTERRUPT, payload.as_bytes());
        true
    }

    /// The client's terminal changed size: `i "winsize ..."` to a worker that speaks
    /// `signals`; SIGWINCH to a command on the client's own terminal otherwise.
    pub fn window_size(&mut self, session: u64, size: WinSize) {
        let Some(s) = self.sessions.get(&session) else {
            return;
        };
        if self.speaks_signals() {
            let payload = format!("winsize {}", size.to_value());
            self.send(session, ChunkType::WORKER_INTERRUPT, payload.as_bytes());
        } else if s.fds.taken() && self.has_feature(WorkerFeature::Interrupt) {
            let winch = Signal::Winch.name();
            self.send(session, ChunkType::WORKER_INTERRUPT, winch.as_bytes());
        }
    }

    /// Sends `q` and starts the stop escalation.
    pub fn quit(&mut self, config: &PluginConfig, now: Instant) {
        if self.is_quitting() {
            return;
        }
        encode(ChunkType::WORKER_QUIT, b"", &mut self.wbuf);
        self.phase = Phase::Quitting {
            term_at: now + PluginConfig::ms(config.stop_timeout_ms),
            kill_at: None,
        };
    }

    /// Acts on one chunk from the worker.
    pub fn on_chunk(
        &mut self,
        ty: ChunkType,
        payload: &Bytes,
        config: &PluginConfig,
        clients: &mut dyn Clients,
        now: Instant,
    ) -> Result<Event, WorkerEnd> {
        let starting = self.is_starting();
        match ty {
            ChunkType::WORKER_HELLO if starting => self.on_hello(payload, config, now),
            ty if starting => Err(WorkerEnd::Protocol(format!("sent {ty} before its hello"))),
            ChunkType::WORKER_PONG => {
                if let Phase::Ready { ping, .. } = &mut self.phase {
                    if ping.is_some_and(|(p, _)| p.to_be_bytes()[..] == payload[..]) {
                        *ping = None;
                    }
                }
                Ok(Event::None)
            }
            SELECT if self.is_mux() => {
                let id = std::str::from_utf8(payload)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| {
                        WorkerEnd::Protocol("sent an s chunk that is not a session id".into())
                    })?;
                self.in_selected = Some(id);
                Ok(Event::None)
            }
            NOTICE if self.both_speak(WorkerFeature::Notices) => parse_notice(payload),
            ChunkType::STDOUT | ChunkType::STDERR | ChunkType::SEND_INPUT | ChunkType::EXIT => {
                self.session_chunk(ty, payload, clients, now)
            }
            TAKEN if self.takes_fds() => self.session_chunk(ty, payload, clients, now),
            STOPPED if self.speaks_signals() => self.session_chunk(ty, payload, clients, now),
            ty => Err(WorkerEnd::Protocol(format!(
                "sent {ty} while {}",
                self.phase_name()
            ))),
        }
    }

    /// A chunk that belongs to the current session.
    fn session_chunk(
        &mut self,
        ty: ChunkType,
        payload: &Bytes,
        clients: &mut dyn Clients,
        now: Instant,
    ) -> Result<Event, WorkerEnd> {
        let Some(id) = self.current_session() else {
            if self.is_quitting() {
                return Ok(Event::None);
            }
            let what = if self.is_mux() {
                "for a session that is not running"
            } else {
                "while idle"
            };
            return Err(WorkerEnd::Protocol(format!("sent {ty} {what}")));
        };
        self.on_session_chunk(id, ty, payload, clients, now)
    }

    /// A short name of its state for messages: starting, idle, busy or quitting.
    pub fn phase_name(&self) -> &'static str {
        match self.phase {
            Phase::Starting { .. } => "starting",
            Phase::Ready { .. } if self.sessions.is_empty() => "idle",
            Phase::Ready { .. } => "busy",
            Phase::Quitting { .. } => "quitting",
        }
    }

    /// The client of the session the worker's chunks are selected for (`mux`).
    pub fn reading_for(&self) -> Option<ConnKey> {
        self.in_selected
            .and_then(|id| self.sessions.get(&id))
            .and_then(|s| s.conn)
    }

    /// The session the worker's session chunks belong to now.
    fn current_session(&self) -> Option<u64> {
        if self.is_mux() {
            self.in_selected.filter(|id| self.sessions.contains_key(id))
        } else {
            self.sessions.keys().next().copied()
        }
    }

    fn on_session_chunk(
        &mut self,
        id: u64,
        ty: ChunkType,
        payload: &Bytes,
        clients: &mut dyn Clients,
        now: Instant,
    ) -> Result<Event, WorkerEnd> {
        let signals = self.speaks_signals();
        let windowed = self.both_speak(WorkerFeature::StdinWindow);
        let Some(s) = self.sessions.get_mut(&id) else {
            return Ok(Event::None);
        };
        // The answer to the client's descriptors comes first; anything else first declines.
        if s.fds == FdOffer::Offered {
            s.fds = match (ty, &payload[..]) {
                (TAKEN, b"") => FdOffer::Taken,
                (TAKEN, b"ctty") if s.pty_offered => FdOffer::TakenWithCtty,
                (TAKEN, b"ctty") => {
                    return Err(WorkerEnd::Protocol(
                        "answered t ctty for a session that came without a terminal".into(),
                    ))
                }
                _ => FdOffer::Declined,
            };
            if let Some(conn) = s.conn {
                clients.settle(conn, s.fds);
            }
            if ty == TAKEN {
                return Ok(Event::None);
            }
        }
        match ty {
            TAKEN => Err(WorkerEnd::Protocol(
                "sent t for a session that came without descriptors, or twice".into(),
            )),
            STOPPED => {
                let name = SignalName::new(payload).ok_or_else(|| {
                    WorkerEnd::Protocol("sent a z chunk that is not a signal name".into())
                })?;
                match s.conn {
                    // The client stopped itself when it forwarded the stop.
                    Some(_) if s.client_stopped => {}
                    Some(conn) => clients.stopped(conn, &name),
                    None => {}
                }
                Ok(Event::None)
            }
            ChunkType::STDOUT | ChunkType::STDERR => {
                if let Some(conn) = s.conn {
                    if ty == ChunkType::STDOUT {
                        clients.stdout(conn, payload);
                    } else {
                        clients.stderr(conn, payload);
                    }
                }
                Ok(Event::None)
            }
            ChunkType::SEND_INPUT => {
                let grant = if windowed && !payload.is_empty() {
                    Some(ext::parse_grant(payload).ok_or_else(|| {
                        WorkerEnd::Protocol("sent an S whose window is not a byte count".into())
                    })?)
                } else {
                    None
                };
                if s.fds.taken() {
                    return Err(WorkerEnd::Protocol(
                        "sent S for a session running on the client's descriptors".into(),
                    ));
                }
                let ask = s.worker_asks(grant).map_err(|_| {
                    WorkerEnd::Protocol("sent S while a previous S was unanswered".into())
                })?;
                let mut answer = match ask {
                    Ask::Answer(to) => to,
                    Ask::Client => Vec::new(),
                };
                // Credit left over (always for a classic `S` not answered from what is
                // held; possibly for a window): the client is asked for more.
                if s.wants_stdin() {
                    if let Some(conn) = s.conn {
                        if !clients.request_stdin(conn) {
                            answer.extend(s.client_stdin_ended());
                        }
                    }
                }
                if let Some(conn) = s.conn {
                    clients.stdin_backlog(conn, s.backlog());
                }
                for to in answer {
                    self.send_stdin(id, to);
                }
                Ok(Event::None)
            }
            _ => {
                let report = if signals {
                    ExitReport::parse(payload)
                } else {
                    ExitReport::Code(exit::parse(payload))
                };
                let code = report.code();
                let Some(s) = self.sessions.remove(&id) else {
                    return Ok(Event::None);
                };
                if let Some(conn) = s.conn {
                    clients.exit(conn, &report);
                }
                self.completed += 1;
                if self.in_selected == Some(id) {
                    self.in_selected = None;
                }
                if self.out_selected == Some(id) {
                    self.out_selected = None;
                }
                if self.sessions.is_empty() {
                    let mux = self.is_mux();
                    if let Phase::Ready {
                        idle_since,
                        next_ping,
                        ..
                    } = &mut self.phase
                    {
                        *idle_since = Some(now);
                        if !mux {
                            *next_ping = None;
                        }
                    }
                }
                Ok(Event::SessionEnded {
                    command: s.command,
                    code,
                    elapsed: now.saturating_duration_since(s.started),
                })
            }
        }
    }

    fn on_hello(
        &mut self,
        payload: &[u8],
        config: &PluginConfig,
        now: Instant,
    ) -> Result<Event, WorkerEnd> {
        let hello: Hello = serde_json::from_slice(payload).map_err(|e| {
            WorkerEnd::Protocol(format!("sent a hello that is not valid JSON: {e}"))
        })?;
        if let Some(error) = &hello.error {
            return Err(WorkerEnd::Refused(error.clone()));
        }
        self.hello = Some(hello.clone());
        self.ready_at = Some(now);
        self.phase = Phase::Ready {
            idle_since: Some(now),
            next_ping: None,
            ping: None,
        };
        self.schedule_ping(config, now);
        Ok(Event::Hello(Box::new(hello)))
    }

    fn schedule_ping(&mut self, config: &PluginConfig, now: Instant) {
        if let Phase::Ready { next_ping, .. } = &mut self.phase {
            *next_ping = (config.ping_interval_ms > 0)
                .then(|| now + PluginConfig::ms(config.ping_interval_ms));
        }
    }

    /// Sessions ended and the worker may be pinged again: a single-session worker's ping
    /// schedule starts over when it becomes idle.
    pub fn idle_again(&mut self, config: &PluginConfig, now: Instant) {
        if self.sessions.is_empty() && !self.is_mux() {
            self.schedule_ping(config, now);
        }
    }

    /// The earliest time [`Machine::due`] has something to do. `surplus`: the pool has more
    /// workers than `min_workers` (only a surplus worker times out when idle).
    pub fn deadline(&self, config: &PluginConfig, surplus: bool) -> Option<Instant> {
        let hangups = self
            .sessions
            .values()
            .filter_map(|s| s.hangup_deadline)
            .min();
        let own = match self.phase {
            Phase::Starting { deadline } => Some(deadline),
            Phase::Ready {
                idle_since,
                next_ping,
                ping,
            } => {
                let idle = idle_since
                    .filter(|_| surplus && config.idle_timeout_ms > 0)
                    .map(|t| t + PluginConfig::ms(config.idle_timeout_ms));
                [next_ping, ping.map(|(_, d)| d), idle]
                    .into_iter()
                    .flatten()
                    .min()
            }
            Phase::Quitting { term_at, kill_at } => Some(kill_at.unwrap_or(term_at)),
        };
        [own, hangups].into_iter().flatten().min()
    }

    /// Fires what is due at `now`: a ping is written into [`Machine::wbuf`]; the rest is
    /// for the host.
    pub fn due(&mut self, config: &PluginConfig, surplus: bool, now: Instant) -> Option<Due> {
        if self
            .sessions
            .values()
            .any(|s| s.hangup_deadline.is_some_and(|t| now >= t))
        {
            return Some(Due::End(WorkerEnd::HangupTimeout));
        }
        let pingable = self.sessions.is_empty() || self.is_mux();
        match &mut self.phase {
            Phase::Starting { deadline } if now >= *deadline => {
                Some(Due::End(WorkerEnd::NoHello(config.handshake_timeout_ms)))
            }
            Phase::Starting { .. } => None,
            Phase::Ready {
                idle_since,
                next_ping,
                ping,
            } => {
                if let Some((_, deadline)) = ping {
                    if now >= *deadline {
                        return Some(Due::End(WorkerEnd::PingTimeout));
                    }
                } else if pingable && next_ping.is_some_and(|t| now >= t) {
                    self.ping_serial += 1;
                    let payload = self.ping_serial;
                    *ping = Some((payload, now + PluginConfig::ms(config.ping_timeout_ms)));
                    *next_ping = Some(now + PluginConfig::ms(config.ping_interval_ms));
                    encode(
                        ChunkType::WORKER_PING,
                        &payload.to_be_bytes(),
                        &mut self.wbuf,
                    );
                }
                let idle_out = idle_since.is_some_and(|t| {
                    surplus
                        && config.idle_timeout_ms > 0
                        && now >= t + PluginConfig::ms(config.idle_timeout_ms)
                });
                idle_out.then_some(Due::IdleTimeout)
            }
            Phase::Quitting { term_at, kill_at } => match kill_at {
                Some(k) if now >= *k => Some(Due::End(WorkerEnd::KilledAfterTerm)),
                None if now >= *term_at => {
                    *kill_at = Some(now + TERM_TO_KILL);
                    Some(Due::Term)
                }
                _ => None,
            },
        }
    }
}

fn parse_notice(payload: &[u8]) -> Result<Event, WorkerEnd> {
    let bad = || WorkerEnd::Protocol("sent a notice that is not a JSON object with a kind".into());
    let value: serde_json::Value = serde_json::from_slice(payload).map_err(|_| bad())?;
    let kind = value.get("kind").and_then(|k| k.as_str()).ok_or_else(bad)?;
    Ok(Event::Notice {
        kind: kind.to_owned(),
        message: value
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or_default()
            .to_owned(),
        session: value.get("session").and_then(serde_json::Value::as_u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clients as plain records: what each connection was sent.
    #[derive(Default)]
    struct Log {
        events: Vec<(usize, String)>,
        stdin_ended: bool,
    }

    impl Clients for Log {
        fn stdout(&mut self, conn: ConnKey, data: &[u8]) {
            self.events
                .push((conn.slot, format!("1 {}", String::from_utf8_lossy(data))));
        }
        fn stderr(&mut self, conn: ConnKey, data: &[u8]) {
            self.events
                .push((conn.slot, format!("2 {}", String::from_utf8_lossy(data))));
        }
        fn request_stdin(&mut self, conn: ConnKey) -> bool {
            self.events.push((conn.slot, "S".into()));
            !self.stdin_ended
        }
        fn stdin_backlog(&mut self, _conn: ConnKey, _bytes: usize) {}
        fn exit(&mut self, conn: ConnKey, report: &ExitReport) {
            let payload = String::from_utf8_lossy(&report.to_payload()).into_owned();
            self.events
                .push((conn.slot, format!("X {}", payload.trim_end())));
        }
        fn settle(&mut self, conn: ConnKey, answer: FdOffer) {
            self.events.push((conn.slot, format!("F {answer:?}")));
        }
        fn stopped(&mut self, conn: ConnKey, signal: &SignalName) {
            self.events
                .push((conn.slot, format!("Z {}", signal.as_str())));
        }
        fn finish(&mut self, conn: ConnKey, code: i32, message: &str) {
            self.events
                .push((conn.slot, format!("finish {code} {message}")));
        }
        fn output_full(&self, _conn: ConnKey) -> bool {
            false
        }
        fn bind(&mut self, _: ConnKey, _: WorkerKey, _: u64) -> Option<super::super::Queued> {
            None
        }
        fn take_queued(&mut self, _: ConnKey) -> Option<super::super::Queued> {
            None
        }
    }

    fn config(extra: &str) -> PluginConfig {
        toml::from_str(&format!("name = \"p\"\ncommand = [\"w\"]\n{extra}")).unwrap()
    }

    fn conn(slot: usize) -> ConnKey {
        ConnKey {
            slot,
            serial: slot as u64,
        }
    }

    /// The chunks in `bytes`, as (type, payload) text.
    fn chunks(bytes: &mut BytesMut) -> Vec<String> {
        let mut d = ng_proto::Decoder::new(ng_proto::Limits::default());
        let mut out = Vec::new();
        while let Ok(Some(c)) = d.decode(bytes) {
            out.push(format!(
                "{} {}",
                c.ty.0 as char,
                String::from_utf8_lossy(&c.payload)
            ));
        }
        out
    }

    fn ready(features: &[&str], hello: &str, config: &PluginConfig, now: Instant) -> Machine {
        let host = WorkerFeatures::from_names(features.iter().copied());
        let mut m = Machine::new(0, config, host, now);
        let event = m
            .on_chunk(
                ChunkType::WORKER_HELLO,
                &Bytes::copy_from_slice(hello.as_bytes()),
                config,
                &mut Log::default(),
                now,
            )
            .unwrap();
        assert!(matches!(event, Event::Hello(_)));
        m
    }

    fn request(command: &str) -> Request {
        Request {
            command: command.as_bytes().to_vec().into(),
            args: vec![Bytes::from_static(b"a1")],
            env: vec![(Bytes::from_static(b"NGW_FORGED"), Bytes::from_static(b"1"))],
            cwd: Some(Bytes::from_static(b"/tmp")),
            skipped_env: 0,
            client: Default::default(),
        }
    }

    #[test]
    fn the_handshake_times_out_and_an_error_hello_refuses() {
        let c = config("handshake_timeout_ms = 400");
        let t0 = Instant::now();
        let mut m = Machine::new(0, &c, WorkerFeatures::NONE, t0);
        assert_eq!(m.deadline(&c, false), Some(t0 + Duration::from_millis(400)));
        assert_eq!(m.due(&c, false, t0), None);
        assert_eq!(
            m.due(&c, false, t0 + Duration::from_millis(400)),
            Some(Due::End(WorkerEnd::NoHello(400)))
        );
        assert_eq!(WorkerEnd::NoHello(400).describe(), "no hello within 400 ms");
        let err = m
            .on_chunk(
                ChunkType::WORKER_HELLO,
                &Bytes::from_static(br#"{"protocol":1,"pid":1,"error":"nope"}"#),
                &c,
                &mut Log::default(),
                t0,
            )
            .unwrap_err();
        assert_eq!(err, WorkerEnd::Refused("nope".into()));
        assert!(m.dies_early(t0));
    }

    #[test]
    fn idle_workers_are_pinged_and_killed_without_a_pong() {
        let c = config("ping_interval_ms = 1000\nping_timeout_ms = 500");
        let t0 = Instant::now();
        let mut m = ready(&[], r#"{"protocol":1,"pid":1,"commands":["x"]}"#, &c, t0);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(m.deadline(&c, false), Some(t1));
        assert_eq!(m.due(&c, false, t1), None);
        let sent = chunks(&mut m.wbuf);
        assert_eq!(sent.len(), 1);
        assert!(sent[0].starts_with('p'));
        assert_eq!(m.deadline(&c, false), Some(t1 + Duration::from_millis(500)));
        assert_eq!(
            m.due(&c, false, t1 + Duration::from_millis(500)),
            Some(Due::End(WorkerEnd::PingTimeout))
        );
        // The right pong clears it.
        let mut m = ready(&[], r#"{"protocol":1,"pid":1,"commands":["x"]}"#, &c, t0);
        m.due(&c, false, t1);
        let pong = Bytes::copy_from_slice(&1u64.to_be_bytes());
        m.on_chunk(ChunkType::WORKER_PONG, &pong, &c, &mut Log::default(), t1)
            .unwrap();
        assert_eq!(m.due(&c, false, t1 + Duration::from_millis(500)), None);
    }

    #[test]
    fn a_surplus_idle_worker_times_out_and_the_stop_escalates() {
        let c = config("idle_timeout_ms = 2000\nping_interval_ms = 0\nstop_timeout_ms = 3000");
        let t0 = Instant::now();
        let mut m = ready(&[], r#"{"protocol":1,"pid":1,"commands":["x"]}"#, &c, t0);
        assert_eq!(m.deadline(&c, false), None, "not surplus: stays");
        let t2 = t0 + Duration::from_secs(2);
        assert_eq!(m.deadline(&c, true), Some(t2));
        assert_eq!(m.due(&c, true, t2), Some(Due::IdleTimeout));
        m.quit(&c, t2);
        assert_eq!(chunks(&mut m.wbuf), ["q "]);
        assert_eq!(m.free_slots(), 0);
        let t5 = t2 + Duration::from_secs(3);
        assert_eq!(m.due(&c, true, t5 - Duration::from_millis(1)), None);
        assert_eq!(m.due(&c, true, t5), Some(Due::Term));
        assert_eq!(m.deadline(&c, true), Some(t5 + TERM_TO_KILL));
        assert_eq!(
            m.due(&c, true, t5 + TERM_TO_KILL),
            Some(Due::End(WorkerEnd::KilledAfterTerm))
        );
    }

    #[test]
    fn a_session_is_relayed_with_its_early_stdin() {
        let c = config("");
        let t0 = Instant::now();
        let mut m = ready(&[], r#"{"protocol":1,"pid":1,"commands":["x"]}"#, &c, t0);
        let mut early = StdinBuffer::default();
        early.push(Bytes::from_static(b"eager"));
        early.set_eof();
        m.bind(
            7,
            conn(3),
            "x".into(),
            &request("x"),
            0o022,
            early,
            None,
            t0,
        );
        assert_eq!(m.free_slots(), 0);
        assert_eq!(
            chunks(&mut m.wbuf),
            [
                "A a1",
                "E NGW_UMASK=0022",
                "E NGW_SESSION=7",
                "D /tmp",
                "C x"
            ]
        );
        let mut log = Log::default();
        let s = Bytes::new();
        m.on_chunk(ChunkType::SEND_INPUT, &s, &c, &mut log, t0)
            .unwrap();
        m.on_chunk(ChunkType::SEND_INPUT, &s, &c, &mut log, t0)
            .unwrap();
        assert_eq!(chunks(&mut m.wbuf), ["0 eager", ". "]);
        m.on_chunk(
            ChunkType::STDOUT,
            &Bytes::from_static(b"eager"),
            &c,
            &mut log,
            t0,
        )
        .unwrap();
        let end = m
            .on_chunk(
                ChunkType::EXIT,
                &Bytes::from_static(b"0\n"),
                &c,
                &mut log,
                t0,
            )
            .unwrap();
        assert!(matches!(end, Event::SessionEnded { code: 0, .. }));
        assert_eq!(log.events, [(3, "1 eager".into()), (3, "X 0".into())]);
        assert_eq!(m.free_slots(), 1);
        // Idle again: a session chunk now is a protocol error.
        let err = m
            .on_chunk(ChunkType::STDOUT, &s, &c, &mut log, t0)
            .unwrap_err();
        assert!(err.describe().contains("while idle"), "{err:?}");
    }

    #[test]
    fn a_hangup_answers_stdin_interrupts_and_kills_after_the_grace() {
        let c = config("interrupt_grace_ms = 1000");
        let t0 = Instant::now();
        let hello = r#"{"protocol":1,"pid":1,"commands":["x"],"features":["interrupt"],"kill_grace_ms":2000}"#;
        let mut m = ready(&[], hello, &c, t0);
        m.bind(
            1,
            conn(0),
            "x".into(),
            &request("x"),
            0,
            StdinBuffer::default(),
            None,
            t0,
        );
        m.wbuf.clear();
        let mut log = Log::default();
        m.on_chunk(ChunkType::SEND_INPUT, &Bytes::new(), &c, &mut log, t0)
            .unwrap();
        m.hang_up(1, &c, t0);
        assert_eq!(chunks(&mut m.wbuf), [". ", "i hangup"]);
        // The grace is the worker's kill grace plus a second, above the configured one.
        let grace = Duration::from_secs(3);
        assert_eq!(m.deadline(&c, false), Some(t0 + grace));
        assert_eq!(
            m.due(&c, false, t0 + grace),
            Some(Due::End(WorkerEnd::HangupTimeout))
        );
    }

    #[test]
    fn mux_selects_sessions_both_ways_and_pings_while_busy() {
        let c = config("ping_interval_ms = 1000");
        let t0 = Instant::now();
        let hello =
            r#"{"protocol":1,"pid":1,"commands":["x"],"features":["mux"],"max_sessions":2}"#;
        // Without the host's mux, the worker runs one session at a time.
        let plain = ready(&[], hello, &c, t0);
        assert_eq!((plain.is_mux(), plain.free_slots()), (false, 1));
        let mut m = ready(&["mux"], hello, &c, t0);
        assert_eq!((m.is_mux(), m.free_slots()), (true, 2));
        m.bind(
            5,
            conn(0),
            "x".into(),
            &request("x"),
            0,
            StdinBuffer::default(),
            None,
            t0,
        );
        m.bind(
            6,
            conn(1),
            "x".into(),
            &request("x"),
            0,
            StdinBuffer::default(),
            None,
            t0,
        );
        assert_eq!(m.free_slots(), 0);
        let sent = chunks(&mut m.wbuf);
        assert_eq!(sent[0], "s 5");
        assert_eq!(sent[6], "s 6", "{sent:?}");
        m.client_eof(5);
        m.client_eof(5);
        m.client_eof(6);
        assert!(m.wbuf.is_empty(), "no `.` without an `S`");
        let mut log = Log::default();
        let s = |id: &str| Bytes::copy_from_slice(id.as_bytes());
        m.on_chunk(SELECT, &s("6"), &c, &mut log, t0).unwrap();
        m.on_chunk(ChunkType::SEND_INPUT, &Bytes::new(), &c, &mut log, t0)
            .unwrap();
        m.on_chunk(ChunkType::STDOUT, &s("six"), &c, &mut log, t0)
            .unwrap();
        m.on_chunk(SELECT, &s("5"), &c, &mut log, t0).unwrap();
        m.on_chunk(ChunkType::STDOUT, &s("five"), &c, &mut log, t0)
            .unwrap();
        m.on_chunk(ChunkType::EXIT, &s("3\n"), &c, &mut log, t0)
            .unwrap();
        assert_eq!(chunks(&mut m.wbuf), [". "], "6 is still selected");
        assert_eq!(
            log.events,
            [(1, "1 six".into()), (0, "1 five".into()), (0, "X 3".into())]
        );
        // Session 5 is over: a chunk for it is a protocol error.
        let err = m
            .on_chunk(ChunkType::STDOUT, &s("late"), &c, &mut log, t0)
            .unwrap_err();
        assert!(err.describe().contains("not running"), "{err:?}");
        // Busy mux workers are pinged.
        let mut m = ready(&["mux"], hello, &c, t0);
        m.bind(
            1,
            conn(0),
            "x".into(),
            &request("x"),
            0,
            StdinBuffer::default(),
            None,
            t0,
        );
        m.wbuf.clear();
        m.due(&c, false, t0 + Duration::from_secs(1));
        assert!(chunks(&mut m.wbuf)[0].starts_with('p'));
    }

    #[test]
    fn notices_need_both_sides_and_a_kind() {
        let c = config("");
        let t0 = Instant::now();
        let hello = r#"{"protocol":1,"pid":1,"commands":["x"],"features":["notices"]}"#;
        let mut m = ready(&["notices"], hello, &c, t0);
        let n = Bytes::from_static(br#"{"kind":"retire","message":"stale code","session":4}"#);
        let event = m.on_chunk(NOTICE, &n, &c, &mut Log::default(), t0).unwrap();
        assert_eq!(
            event,
            Event::Notice {
                kind: "retire".into(),
                message: "stale code".into(),
                session: Some(4)
            }
        );
        let bad = Bytes::from_static(br#"{"message":"no kind"}"#);
        assert!(m
            .on_chunk(NOTICE, &bad, &c, &mut Log::default(), t0)
            .is_err());
        let mut plain = ready(&[], hello, &c, t0);
        assert!(plain
            .on_chunk(NOTICE, &n, &c, &mut Log::default(), t0)
            .is_err());
    }

    fn passed(map: &[u8]) -> PassedFds {
        let map = ext::FdMap::parse(map).unwrap();
        let fds = (0..map.count())
            .map(|_| std::fs::File::open("/dev/null").unwrap().into())
            .collect();
        PassedFds::new(map, fds).unwrap()
    }

    const EXACT: &[&str] = &["mux", "notices", "fds", "signals", "stdin-window"];

    fn chunk(m: &mut Machine, log: &mut Log, ty: ChunkType, payload: &'static [u8]) {
        let c = config("");
        m.on_chunk(ty, &Bytes::from_static(payload), &c, log, Instant::now())
            .unwrap();
    }

    fn passed_with_pty(map: &[u8], pty: &[u8]) -> PassedFds {
        let map = ext::FdMap::parse(map).unwrap();
        let fds = (0..=map.count())
            .map(|_| std::fs::File::open("/dev/null").unwrap().into())
            .collect();
        PassedFds::with_pty(map, ext::FdMap::parse(pty), fds).unwrap()
    }

    #[test]
    fn descriptors_go_in_a_message_that_ends_with_their_session_header() {
        // The worker gives a read's descriptors to the last session start in it, and the
        // kernel ends a read with the message that carries them: a session without
        // descriptors whose header shares that message would take the other's.
        let c = config("");
        let t0 = Instant::now();
        let hello = r#"{"protocol":1,"pid":1,"commands":["x"],"features":["mux","fds","signals"],"max_sessions":8}"#;
        let mut m = ready(&["mux", "fds", "signals"], hello, &c, t0);
        let bind = |m: &mut Machine, id: u64, fds: Option<PassedFds>| {
            let req = request("x");
            m.bind(
                id,
                conn(id as usize),
                "x".into(),
                &req,
                0o022,
                StdinBuffer::default(),
                fds,
                t0,
            )
        };
        assert!(bind(&mut m, 1, Some(passed(b"0,1,2"))));
        let first = m.wbuf.len();
        assert!(!bind(&mut m, 2, None));
        let second = m.wbuf.len();
        assert!(bind(&mut m, 3, Some(passed(b"0,1,2"))));
        assert!(bind(&mut m, 4, Some(passed(b"0,1,2"))));
        let fourth_at = m.fd_marks[2].at;

        // Session 1's descriptors with exactly its `s` and header.
        let (n, fds) = m.next_write();
        assert_eq!((n, fds.map(|f| f.raw().len())), (first, Some(3)));
        let next = |m: &Machine| {
            let (n, fds) = m.next_write();
            (n, fds.is_some())
        };
        let sent = chunks(&mut BytesMut::from(&m.wbuf[..n]));
        assert_eq!(sent.iter().filter(|c| c.starts_with("s ")).count(), 1);
        // A partial write: the descriptors went with its first byte; the rest of its header
        // and session 2's go plain, up to session 3's start.
        bytes::Buf::advance(&mut m.wbuf, 5);
        m.wrote(5);
        assert_eq!(next(&m), (second - 5, false));
        bytes::Buf::advance(&mut m.wbuf, second - 5);
        m.wrote(second - 5);
        // Session 3's, then session 4's, each in a message of its own.
        let (n, with) = next(&m);
        assert_eq!((n, with), (fourth_at - second, true));
        bytes::Buf::advance(&mut m.wbuf, n);
        m.wrote(n);
        let (n, with) = next(&m);
        assert_eq!((n, with), (m.wbuf.len(), true));
        bytes::Buf::advance(&mut m.wbuf, n);
        m.wrote(n);
        assert!(m.fd_marks.is_empty());
        assert_eq!(next(&m), (0, false));
    }

    #[test]
    fn the_pseudo_terminal_goes_only_to_a_worker_that_takes_it() {
        let c = config("");
        let t0 = Instant::now();
        let host: &[&str] = &["fds", "ctty", "signals"];
        // A worker that lists ctty: the pty rides last, NGW_CLIENT_PTY names it, and
        // `t ctty` settles the client with ctty.
        let hello = r#"{"protocol":1,"pid":1,"commands":["x"],"features":["fds","ctty","signals","interrupt"]}"#;
        let mut m = ready(host, hello, &c, t0);
        let fds = passed_with_pty(b"0,1,2", b"1,2");
        assert!(m.bind(
            7,
            conn(3),
            "x".into(),
            &request("x"),
            0o022,
            StdinBuffer::default(),
            Some(fds),
            t0
        ));
        assert_eq!(m.fd_marks[0].fds.raw().len(), 4);
        let sent = chunks(&mut m.wbuf.clone());
        assert!(
            sent.contains(&"E NGW_CLIENT_PTY=1,2".to_owned()),
            "{sent:?}"
        );
        let mut log = Log::default();
        chunk(&mut m, &mut log, TAKEN, b"ctty");
        assert_eq!(log.events, [(3, "F TakenWithCtty".into())]);
        // One without it: the same descriptors, the pty closed, no entry.
        let hello =
            r#"{"protocol":1,"pid":1,"commands":["x"],"features":["fds","signals","interrupt"]}"#;
        let mut m = ready(host, hello, &c, t0);
        let fds = passed_with_pty(b"0,1,2", b"1,2");
        assert!(m.bind(
            7,
            conn(3),
            "x".into(),
            &request("x"),
            0o022,
            StdinBuffer::default(),
            Some(fds),
            t0
        ));
        assert_eq!(m.fd_marks[0].fds.raw().len(), 3);
        let sent = chunks(&mut m.wbuf.clone());
        assert!(
            !sent.iter().any(|c| c.starts_with("E NGW_CLIENT_PTY")),
            "{sent:?}"
        );
        // `t ctty` for a session offered no pty breaks the protocol.
        let r = m.on_chunk(TAKEN, &Bytes::from_static(b"ctty"), &c, &mut log, t0);
        assert!(r.is_err());
    }

    #[test]
    fn descriptors_ride_with_the_header_and_t_settles_the_client() {
        let c = config("");
        let t0 = Instant::now();
        let hello =
            r#"{"protocol":1,"pid":1,"commands":["x"],"features":["fds","signals","interrupt"]}"#;
        let mut m = ready(EXACT, hello, &c, t0);
        encode(ChunkType::WORKER_PING, b"p", &mut m.wbuf);
        let mut req = request("x");
        req.client.ignored_signals = vec![SignalName::new(b"SIGHUP").unwrap()];
        req.client.winsize = Some(WinSize {
            cols: 120,
            rows: 40,
            xpixel: 0,
            ypixel: 0,
        });
        let offered = m.bind(
            7,
            conn(3),
            "x".into(),
            &req,
            0o022,
            StdinBuffer::default(),
            Some(passed(b"1,2")),
            t0,
        );
        assert!(offered);
        assert_eq!(m.fd_marks.len(), 1);
        assert_eq!(m.fd_marks[0].at, 6, "at the header's first byte");
        m.wrote(3);
        assert_eq!(m.fd_marks[0].at, 3);
        m.wrote(3);
        assert_eq!(m.fd_marks[0].at, 0);
        m.wrote(1);
        assert!(m.fd_marks.is_empty(), "sent with that byte, then closed");
        let mut log = Log::default();
        chunk(&mut m, &mut log, TAKEN, b"");
        chunk(&mut m, &mut log, STOPPED, b"SIGTSTP");
        assert!(m.signal(7, &SignalName::new(b"SIGTERM").unwrap()));
        assert!(m.signal(7, &SignalName::new(b"SIGTSTP").unwrap()));
        chunk(&mut m, &mut log, STOPPED, b"SIGTSTP");
        assert!(m.signal(7, &SignalName::new(b"SIGCONT").unwrap()));
        m.window_size(
            7,
            WinSize {
                cols: 100,
                rows: 30,
                xpixel: 0,
                ypixel: 0,
            },
        );
        chunk(&mut m, &mut log, ChunkType::EXIT, b"139 SIGSEGV core\n");
        assert_eq!(
            log.events,
            [
                (3, "F Taken".into()),
                (3, "Z SIGTSTP".into()),
                (3, "X 139 SIGSEGV core".into())
            ],
            "the second stop was the client's own: not passed back"
        );
        let mut sent = chunks(&mut m.wbuf);
        assert_eq!(sent.remove(0), "p p");
        assert!(
            sent.contains(&"E NGW_CLIENT_FDS=1,2".to_owned()),
            "{sent:?}"
        );
        assert!(sent.contains(&"E NGW_SIGIGN=SIGHUP".to_owned()), "{sent:?}");
        assert!(
            sent.contains(&"E NGW_CLIENT_WINSIZE=120 40 0 0".to_owned()),
            "{sent:?}"
        );
        let tail: Vec<&str> = sent
            .iter()
            .map(String::as_str)
            .skip_while(|c| !c.starts_with("C "))
            .collect();
        assert_eq!(
            tail,
            [
                "C x",
                "i SIGTERM process",
                "i SIGTSTP",
                "i SIGCONT",
                "i winsize 100 30 0 0"
            ]
        );
    }

    #[test]
    fn a_declined_or_unsupported_offer_is_relayed() {
        let c = config("");
        let t0 = Instant::now();
        let plain = r#"{"protocol":1,"pid":1,"commands":["x"]}"#;
        let mut m = ready(EXACT, plain, &c, t0);
        let offered = m.bind(
            1,
            conn(3),
            "x".into(),
            &request("x"),
            0,
            StdinBuffer::default(),
            Some(passed(b"0,1,2")),
            t0,
        );
        assert!(
            !offered && m.fd_marks.is_empty(),
            "a worker without fds gets none"
        );
        let sent = chunks(&mut m.wbuf);
        assert!(
            !sent.iter().any(|c| c.starts_with("E NGW_CLIENT_FDS")),
            "{sent:?}"
        );

        let hello = r#"{"protocol":1,"pid":1,"commands":["x"],"features":["fds"]}"#;
        let mut m = ready(EXACT, hello, &c, t0);
        assert!(m.bind(
            1,
            conn(3),
            "x".into(),
            &request("x"),
            0,
            StdinBuffer::default(),
            Some(passed(b"0,1,2")),
            t0
        ));
        let mut log = Log::default();
        chunk(&mut m, &mut log, ChunkType::STDOUT, b"hi");
        chunk(&mut m, &mut log, ChunkType::EXIT, b"139 SIGSEGV\n");
        assert_eq!(
            log.events,
            [
                (3, "F Declined".into()),
                (3, "1 hi".into()),
                (3, "X 139".into())
            ],
            "another chunk first declines; without signals X is a plain code"
        );
        let mut m = ready(EXACT, hello, &c, t0);
        m.bind(
            2,
            conn(4),
            "x".into(),
            &request("x"),
            0,
            StdinBuffer::default(),
            Some(passed(b"0,1,2")),
            t0,
        );
        let mut log = Log::default();
        chunk(&mut m, &mut log, TAKEN, b"relay");
        assert_eq!(log.events, [(4, "F Declined".into())]);
        let err = m
            .on_chunk(TAKEN, &Bytes::new(), &c, &mut log, t0)
            .unwrap_err();
        assert!(matches!(err, WorkerEnd::Protocol(_)), "{err:?}");
        let mut m = ready(&["mux"], hello, &c, t0);
        m.bind(
            3,
            conn(5),
            "x".into(),
            &request("x"),
            0,
            StdinBuffer::default(),
            None,
            t0,
        );
        let err = m
            .on_chunk(TAKEN, &Bytes::new(), &c, &mut log, t0)
            .unwrap_err();
        assert!(
            matches!(err, WorkerEnd::Protocol(_)),
            "t from a worker the host did not offer fds: {err:?}"
        );
    }

    #[test]
    fn windowed_s_is_answered_with_many_chunks() {
        let c = config("");
        let t0 = Instant::now();
        let hello =
            r#"{"protocol":1,"pid":1,"commands":["x"],"features":["stdin-window"],"max_chunk":4}"#;
        let mut m = ready(EXACT, hello, &c, t0);
        let mut early = StdinBuffer::default();
        early.push(Bytes::from_static(b"abcdefghij"));
        m.bind(1, conn(3), "x".into(), &request("x"), 0, early, None, t0);
        chunks(&mut m.wbuf);
        let mut log = Log::default();
        chunk(&mut m, &mut log, ChunkType::SEND_INPUT, b"6");
        assert_eq!(chunks(&mut m.wbuf), ["0 abcd", "0 ef"]);
        chunk(&mut m, &mut log, ChunkType::SEND_INPUT, b"100");
        assert_eq!(chunks(&mut m.wbuf), ["0 ghij"]);
        assert_eq!(
            log.events,
            [(3, "S".into())],
            "the client is asked for more"
        );
        m.client_eof(1);
        assert_eq!(chunks(&mut m.wbuf), [". "]);
        let err = m
            .on_chunk(
                ChunkType::SEND_INPUT,
                &Bytes::from_static(b"x"),
                &c,
                &mut log,
                t0,
            )
            .unwrap_err();
        assert!(matches!(err, WorkerEnd::Protocol(_)), "{err:?}");
    }
}
