//! One client connection: its socket, buffers, protocol session and lifecycle state, and
//! everything the event loop asks of it.
//!
//! ```text
//!  Header ──C──▶ Running ──command returns──▶ Finishing ──X written──▶ Draining ──EOF──▶ Closed
//!    │              │                            ▲                      (write side shut;
//!    │              ├── client gone ──▶ Closed   │                       input discarded)
//!    └── refusal / protocol error ───────────────┘
//! ```
//!
//! The protocol rules live in [`ng_proto::ServerSession`]; this type owns the I/O around it:
//! a read buffer bounded by the session's chunk limit, a write buffer fed by the running
//! command (through its [`SessionIo`]) and by the session (`S`, `X`, messages), and the
//! readiness flags of an edge-triggered socket.
//!
//! The loop calls a connection's methods and never looks at its state: `Conn::service`
//! moves it along, `Conn::on_timer` answers its deadline, `Conn::release` lets it go,
//! and the shutdown steps call `Conn::grace_over` and `Conn::answer_plugin_at_shutdown`.
//! A command runs in-process ([`Running`], in `inprocess`) or in a plugin's worker
//! ([`PluginState`], in `plugin`); the connection hands every step that differs between
//! the two (stdin, signals, window sizes, output, shutdown) to its state's variant.

mod inprocess;
mod plugin;

pub use inprocess::Running;
pub use plugin::PluginState;

use crate::plugin::PluginHost;
use crate::pool::Pool;
use crate::session_io::{CancelReason, ConnKey, LoopNotifier, SessionIo, STDIN_HIGH_WATER};
use crate::transport::{PeerAddr, Stream};
use crate::{exit_codes, ServerHandle, Settings};
use bytes::{Buf, Bytes, BytesMut};
use ng_proto::ext::{Features, SignalName};
use ng_proto::{ExtensionEvent, ProtocolError, ServerEvent, ServerSession};
use std::io::{self, ErrorKind, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a connection may stay open after its `X` waiting for the client to close.
const DRAIN_LINGER: Duration = Duration::from_secs(2);
/// At most this much is read from one connection per loop turn; the rest waits for the next
/// turn, so one busy client (a huge header, junk after its exit code) cannot delay others.
const READ_BUDGET: usize = 1 << 20;

/// The client extensions ngd honours for a session whose command does not run on the
/// client's descriptors.
pub(crate) const RELAYED: Features = Features::SIGNALS
    .union(Features::WINSIZE)
    .union(Features::STDIN_WINDOW);

/// What connections use of the server: its handle (registry, statistics), the nails'
/// thread pool, the loop's notifier and the settings.
pub(crate) struct Core {
    pub(crate) handle: ServerHandle,
    pub(crate) pool: Pool,
    pub(crate) notifier: LoopNotifier,
    pub(crate) settings: Settings,
}

/// What servicing one connection needs from the server around it.
pub(crate) struct Env<'a> {
    /// The server's shared parts.
    pub(crate) core: &'a Core,
    /// The plugin pools and their workers.
    pub(crate) host: &'a mut PluginHost,
    /// The loop's read buffer.
    pub(crate) scratch: &'a mut [u8],
    /// The connection's name for other threads and the host.
    pub(crate) key: ConnKey,
    /// The time of this loop turn.
    pub(crate) now: Instant,
}

/// Whether a connection read all it could this turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadBudget {
    /// It read until `WouldBlock`, end of file or stdin backpressure.
    Left,
    /// It used its read budget with more to read: service it again next turn.
    Spent,
}

/// A client that announced a version newer than this server's.
#[derive(Debug)]
pub struct NewerClient {
    /// Its version.
    pub version: Box<ng_proto::version::Version>,
    /// Its executable (on a Unix socket, from its pid), if it could be read.
    pub exe: Option<std::path::PathBuf>,
}

/// The lifecycle of a connection. See the module docs.
#[derive(Debug)]
pub enum ConnState {
    /// Reading `A E D L H` until `C`.
    Header,
    /// A command runs.
    Running(Running),
    /// A plugin command: the client was asked for its pseudo-terminal (`P`), whose answer
    /// comes before the command is queued.
    AwaitingPty(Box<AwaitingPty>),
    /// A plugin command: waiting for a worker, or relayed to one.
    Plugin(PluginState),
    /// The exit code is queued; writing what is left.
    Finishing,
    /// Everything is written and our side shut; reading until the client closes, so that
    /// unread heartbeats never turn our close into a reset that eats the `X`.
    Draining {
        /// Close anyway at this time.
        until: Instant,
    },
    /// To be removed.
    Closed,
}

impl ConnState {
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ConnState::Header => "header",
            ConnState::Running(_) => "running",
            ConnState::AwaitingPty(_) => "awaiting the pseudo-terminal",
            ConnState::Plugin(_) => "plugin",
            ConnState::Finishing => "finishing",
            ConnState::Draining { .. } => "draining",
            ConnState::Closed => "closed",
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Conn {
    /// Unique per accepted connection (slab slots are reused; serials are not).
    pub serial: u64,
    /// The socket.
    pub stream: Stream,
    /// Where it came from.
    pub peer: PeerAddr,
    /// The protocol state machine.
    pub session: ServerSession,
    /// Bytes read and not yet decoded (at most one partial chunk after decoding).
    pub rbuf: BytesMut,
    /// Bytes to write, in order: command output, then the session's own chunks.
    pub wbuf: BytesMut,
    /// The socket may have bytes to read (edge-triggered: cleared only on `WouldBlock`).
    pub readable: bool,
    /// The socket may accept bytes.
    pub writable: bool,
    /// Stdin bytes waiting for the command; reading pauses above the high-water mark.
    pub stdin_backlog: usize,
    /// Lifecycle.
    pub state: ConnState,
    /// The earliest timer queued for this connection, if any.
    pub timer_at: Option<Instant>,
    /// The last time bytes were written to the client (or the connection opened): a
    /// finished session whose client stops reading is closed after the heartbeat timeout.
    pub last_write: Instant,
    /// Descriptors the client passed with its header (Unix sockets), until the command
    /// is launched.
    pub client_fds: Vec<std::os::fd::OwnedFd>,
    /// A client newer than this server, until the loop looks at it ([`crate::upgrade`]).
    pub newer_client: Option<NewerClient>,
}

impl Conn {
    /// A connection accepted at `now`.
    pub fn new(
        serial: u64,
        stream: Stream,
        peer: PeerAddr,
        session: ServerSession,
        now: Instant,
    ) -> Self {
        Self {
            serial,
            stream,
            peer,
            session,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            readable: false,
            writable: false,
            stdin_backlog: 0,
            state: ConnState::Header,
            timer_at: None,
            last_write: now,
            client_fds: Vec::new(),
            newer_client: None,
        }
    }

    /// The client's pid, on a Unix socket (its credentials at `connect` time).
    fn peer_pid(&self) -> Option<u32> {
        use std::os::fd::AsRawFd as _;
        match &self.stream {
            Stream::Unix(s) => crate::sys::peer_pid(s.as_raw_fd()).ok(),
            Stream::Tcp(_) => None,
        }
    }

    /// When this connection next needs the timer.
    pub fn deadline(&self) -> Option<Instant> {
        match &self.state {
            ConnState::Header | ConnState::Running(_) | ConnState::Plugin(_) => {
                self.session.poll_timeout()
            }
            ConnState::AwaitingPty(w) => Some(
                self.session
                    .poll_timeout()
                    .map_or(w.until, |t| t.min(w.until)),
            ),
            ConnState::Draining { until } => Some(*until),
            ConnState::Finishing => Some(self.last_write + self.write_timeout()),
            ConnState::Closed => None,
        }
    }

    /// How long a client may leave output unread once its command has finished: the
    /// heartbeat timeout (10 s when heartbeats are not checked).
    pub fn write_timeout(&self) -> std::time::Duration {
        self.session
            .config()
            .heartbeat_timeout
            .unwrap_or(std::time::Duration::from_secs(10))
    }

    /// The worker session this connection is relayed to, if any.
    pub fn bound(&self) -> Option<&crate::plugin::Bound> {
        match &self.state {
            ConnState::Plugin(p) => p.bound(),
            _ => None,
        }
    }

    /// True once the connection is to be removed.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, ConnState::Closed)
    }

    /// True while a command runs, in-process or in a plugin's worker.
    pub fn runs_command(&self) -> bool {
        matches!(self.state, ConnState::Running(_) | ConnState::Plugin(_))
    }

    /// Ends the session as a cold run ends when `signal` kills it: a client that accepted
    /// `signals` dies of it; any other gets 128 + its number.
    pub fn finish_by_signal(&mut self, signal: &SignalName, number: i32) {
        self.session.exit_with(&ng_proto::ext::ExitReport::Signal {
            code: 128 + number,
            signal: signal.clone(),
            core: false,
        });
        self.state = ConnState::Finishing;
    }

    /// Ends the session with an `ngd: ` message line on stderr and `code`: every refusal
    /// takes this path.
    pub fn finish(&mut self, code: i32, message: &str) {
        let mut line = Vec::with_capacity(message.len() + 1);
        line.extend_from_slice(message.as_bytes());
        line.push(b'\n');
        self.session.write_stderr(&line);
        self.session.exit(code);
        self.state = ConnState::Finishing;
    }

    /// The running command's shared state, if one runs.
    pub fn io(&self) -> Option<&Arc<SessionIo>> {
        match &self.state {
            ConnState::Running(r) => Some(&r.io),
            _ => None,
        }
    }

    /// Moves the connection along as far as it can go now: takes what its command
    /// produced, reads and decodes what the client sent, acts on the session's events,
    /// writes, then moves the lifecycle on. A session stays bound to a worker only while
    /// the connection is in that state: any other way out (its `X`, a protocol error, a
    /// close) hangs the worker's session up, which is a no-op once the session has ended.
    pub(crate) fn service(&mut self, env: &mut Env<'_>) -> ReadBudget {
        let bound_before = self.bound().cloned();
        self.pull_io();
        let mut budget = self.read_input(env);
        self.pull_io();
        self.flush();
        if matches!(self.state, ConnState::Finishing)
            && self.wbuf.is_empty()
            && self.session.transmit().is_empty()
        {
            // Our last byte is out: FIN now, then wait for the client to close.
            let _ = self.stream.shutdown_write();
            self.state = ConnState::Draining {
                until: env.now + DRAIN_LINGER,
            };
            // The client may already have closed; look once more.
            if self.read_input(env) == ReadBudget::Spent {
                budget = ReadBudget::Spent;
            }
        }
        if let Some(bound) = bound_before {
            if self.bound() != Some(&bound) {
                env.host.hang_up(&bound, env.now);
            } else if self.wbuf.len() < crate::session_io::OUTPUT_LOW_WATER {
                // The client drained: read the worker again.
                env.host.client_drained(&bound);
            }
        }
        budget
    }

    /// The connection's deadline came: a drain or a write timeout ends it; otherwise the
    /// session checks its heartbeats.
    pub(crate) fn on_timer(&mut self, env: &mut Env<'_>) {
        match self.state {
            ConnState::Draining { until } if env.now >= until => {
                self.state = ConnState::Closed;
            }
            ConnState::Finishing if env.now >= self.last_write + self.write_timeout() => {
                tracing::debug!(conn = self.serial, peer = %self.peer, "the client stopped reading its output");
                self.state = ConnState::Closed;
            }
            ConnState::AwaitingPty(ref w) if env.now >= w.until => {
                tracing::debug!(conn = self.serial, peer = %self.peer, "no pseudo-terminal came: the command goes on without");
                self.session.withdraw_pty();
                self.pty_answered(env, None);
            }
            ConnState::Header
            | ConnState::Running(_)
            | ConnState::AwaitingPty(_)
            | ConnState::Plugin(_) => match self.session.handle_timeout(env.now) {
                Ok(()) => self.handle_events(env),
                Err(e) => self.protocol_error(env.core, e),
            },
            _ => {}
        }
    }

    /// Lets go of a connection the loop removed: its command is cancelled, its worker's
    /// session hung up, its socket deregistered.
    pub(crate) fn release(mut self, host: &mut PluginHost, registry: &mio::Registry) {
        if let Some(io) = self.io() {
            io.cancel(CancelReason::ClientGone);
        }
        if let Some(bound) = self.bound() {
            host.hang_up(bound, Instant::now());
        }
        let _ = self.stream.deregister(registry);
        tracing::debug!(conn = self.serial, peer = %self.peer, "closed");
    }

    /// The server's shutdown grace is over: an in-process command is cancelled and
    /// answered for, a connection still in its header is refused, and a plugin session's
    /// worker forwards SIGTERM to the command, whose own exit code (143 for most programs)
    /// then reaches the client.
    pub(crate) fn grace_over(&mut self, host: &mut PluginHost) {
        match &self.state {
            ConnState::Running(r) => {
                tracing::info!(conn = self.serial, command = %r.command, "cancelled by shutdown");
                r.io.cancel(CancelReason::Shutdown);
                self.finish(
                    exit_codes::TERMINATED,
                    "ngd: command cancelled: the server is shutting down",
                );
            }
            ConnState::Header | ConnState::AwaitingPty(_) => {
                self.finish(exit_codes::UNAVAILABLE, "ngd: the server is shutting down");
            }
            ConnState::Plugin(p) => p.terminate(host),
            _ => {}
        }
    }

    /// A plugin session that did not answer SIGTERM in time is answered by ngd; its worker
    /// is hung up as the relay ends.
    pub(crate) fn answer_plugin_at_shutdown(&mut self) {
        if matches!(self.state, ConnState::Plugin(_)) {
            tracing::info!(conn = self.serial, "plugin command cancelled by shutdown");
            self.finish(
                exit_codes::TERMINATED,
                "ngd: command cancelled: the server is shutting down",
            );
        }
    }

    /// Reads and decodes until `WouldBlock`, end of file, stdin backpressure, or the read
    /// budget.
    fn read_input(&mut self, env: &mut Env<'_>) -> ReadBudget {
        let mut budget = READ_BUDGET;
        while self.readable && !self.is_closed() {
            if budget == 0 {
                return ReadBudget::Spent;
            }
            if self.stdin_backlog > STDIN_HIGH_WATER {
                // Resumed when the command reads (it notifies the loop).
                return ReadBudget::Left;
            }
            let with_fds = self.session.in_header() || self.session.awaits_pty();
            let read = if with_fds && matches!(self.stream, Stream::Unix(_)) {
                self.read_header(env.scratch)
            } else {
                self.stream.read(env.scratch)
            };
            match read {
                Ok(0) => {
                    self.readable = false;
                    self.on_eof(env);
                    return ReadBudget::Left;
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    self.stream.quickack();
                    if self.session.is_exited() {
                        continue; // draining: discard
                    }
                    self.rbuf.extend_from_slice(&env.scratch[..n]);
                    let result = self.session.handle_bytes(&mut self.rbuf, env.now);
                    self.handle_events(env);
                    self.handle_extensions(env.host);
                    if let Err(e) = result {
                        self.protocol_error(env.core, e);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(conn = self.serial, peer = %self.peer, state = self.state.name(), "read: {e}");
                    self.readable = false;
                    self.close(CancelReason::ClientGone);
                }
            }
        }
        ReadBudget::Left
    }

    /// Reads a Unix connection's header with `recvmsg`: the client's descriptors ride with
    /// its first byte (`fds`, docs/protocol.md), and its pseudo-terminal with its `P`
    /// (`ctty`). Descriptors the session cannot use (too many, truncated, after `C`
    /// unless `P` is awaited) are closed at once; the rest wait for the launch.
    fn read_header(&mut self, scratch: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let received = crate::sys::recv_with_fds(self.stream.as_raw_fd(), scratch)?;
        if received.truncated {
            // More than a client may pass: none of them is used.
            self.session
                .handle_passed_fds(crate::sys::MAX_PASSED_FDS + 1);
            self.client_fds.clear();
        } else if !received.fds.is_empty() && self.session.handle_passed_fds(received.fds.len()) {
            self.client_fds.extend(received.fds);
        }
        Ok(received.len)
    }

    /// Writes until `WouldBlock` or done; a dead client ends the connection.
    fn flush(&mut self) {
        let tx = self.session.take_transmit();
        if !tx.is_empty() {
            if self.wbuf.is_empty() {
                self.wbuf = tx;
            } else {
                self.wbuf.extend_from_slice(&tx);
            }
        }
        let mut wrote = false;
        while self.writable && !self.wbuf.is_empty() {
            match self.stream.write(&self.wbuf) {
                Ok(0) => {
                    self.close(CancelReason::ClientGone);
                    return;
                }
                Ok(n) => {
                    self.wbuf.advance(n);
                    wrote = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.writable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(conn = self.serial, peer = %self.peer, state = self.state.name(), "write: {e}");
                    self.close(CancelReason::ClientGone);
                    return;
                }
            }
        }
        if wrote {
            self.last_write = Instant::now();
            if let ConnState::Running(r) = &self.state {
                r.output_written(self.wbuf.len());
            }
        }
    }

    fn on_eof(&mut self, env: &mut Env<'_>) {
        match self.state {
            ConnState::Header => {
                tracing::debug!(conn = self.serial, peer = %self.peer, "closed before the command");
                self.state = ConnState::Closed;
            }
            ConnState::Running(_) | ConnState::AwaitingPty(_) | ConnState::Plugin(_) => {
                if let Err(e) = self.session.handle_eof() {
                    self.protocol_error(env.core, e);
                }
                self.handle_events(env);
            }
            ConnState::Finishing | ConnState::Draining { .. } => self.state = ConnState::Closed,
            ConnState::Closed => {}
        }
    }

    /// Acts on everything the session decoded.
    fn handle_events(&mut self, env: &mut Env<'_>) {
        while let Some(event) = self.session.poll_event() {
            match event {
                ServerEvent::Launch(request) => self.launch(env, request),
                ServerEvent::Stdin(data) => self.stdin(env.host, data),
                ServerEvent::StdinEof => self.stdin_eof(env.host),
                ServerEvent::Pty => {
                    let mut fds = std::mem::take(&mut self.client_fds);
                    let slave = if fds.len() == 1 { fds.pop() } else { None };
                    self.pty_answered(env, slave);
                }
                ServerEvent::ClientGone(reason) => {
                    let reason = match reason {
                        ng_proto::DisconnectReason::Eof => CancelReason::ClientGone,
                        ng_proto::DisconnectReason::HeartbeatTimeout => {
                            CancelReason::HeartbeatTimeout
                        }
                    };
                    tracing::debug!(conn = self.serial, peer = %self.peer, state = self.state.name(), "{}", reason.describe());
                    self.close(reason);
                }
            }
        }
    }

    /// Stdin from the client, in every state a connection can be in: a plugin session
    /// keeps it while queued and hands it to its worker once bound; a running nail takes
    /// it; in `Header` the session cannot produce it; after the command it is dropped, as
    /// the protocol says.
    fn stdin(&mut self, host: &mut PluginHost, data: Bytes) {
        match &mut self.state {
            ConnState::Plugin(p) => {
                let (backlog, more) = p.stdin(host, data);
                self.stdin_backlog = backlog;
                if more {
                    self.session.request_stdin();
                }
            }
            ConnState::Running(r) => self.stdin_backlog = r.stdin(data),
            _ => {}
        }
    }

    /// The client's stdin ended.
    fn stdin_eof(&mut self, host: &mut PluginHost) {
        match &mut self.state {
            ConnState::Plugin(p) => p.stdin_eof(host),
            ConnState::Running(r) => r.stdin_eof(),
            _ => {}
        }
    }

    /// Acts on the client's extension chunks (`K`, `W`) the session decoded.
    fn handle_extensions(&mut self, host: &mut PluginHost) {
        while let Some(event) = self.session.poll_extension() {
            match event {
                ExtensionEvent::Signal(name) => self.signal(host, name),
                ExtensionEvent::WindowSize(size) => {
                    if let ConnState::Plugin(p) = &mut self.state {
                        p.window_size(host, size);
                    }
                }
            }
        }
    }

    /// A signal the client forwarded (`K`).
    fn signal(&mut self, host: &mut PluginHost, name: SignalName) {
        let kills = name
            .signal()
            .filter(|&s| ngw_vocab::Effect::of(s) == ngw_vocab::Effect::Ends)
            .map(ng_proto::Signal::number);
        match &mut self.state {
            ConnState::Plugin(p) => {
                if let plugin::Signalled::Ends(number) = p.signal(host, &name, kills) {
                    tracing::debug!(
                        conn = self.serial,
                        signal = name.as_str(),
                        "signalled while queued"
                    );
                    self.finish_by_signal(&name, number);
                }
            }
            ConnState::Running(r) => {
                if let Some(number) = kills {
                    r.interrupt(name, number);
                }
            }
            _ => {}
        }
    }

    /// Ends the connection at once: its command is cancelled for `reason`.
    fn close(&mut self, reason: CancelReason) {
        if let Some(io) = self.io() {
            io.cancel(reason);
        }
        self.state = ConnState::Closed;
    }

    fn protocol_error(&mut self, core: &Core, e: ProtocolError) {
        core.handle.stats().protocol_error();
        tracing::info!(conn = self.serial, peer = %self.peer, state = self.state.name(), "protocol error: {e}");
        if let Some(io) = self.io() {
            io.cancel(CancelReason::ProtocolError);
        }
        if matches!(e, ProtocolError::EofBeforeCommand) || self.session.is_exited() {
            self.state = ConnState::Closed;
            return;
        }
        self.finish(exit_codes::PROTOCOL, &format!("ngd: protocol error: {e}"));
    }

    /// Resolves the command of a complete header and starts it: in-process, or queued in
    /// its plugin's pool; an unknown command is refused.
    fn launch(&mut self, env: &mut Env<'_>, mut request: ng_proto::Request) {
        let core = env.core;
        let handle = &core.handle;
        let umask = take_client_umask(&mut request);
        // Before the command runs, while the client surely waits: its executable.
        self.newer_client = request
            .client
            .version
            .take()
            .filter(|v| v.is_newer_than(crate::upgrade::ours()) && !handle.outdated())
            .map(|version| NewerClient {
                version,
                exe: self.peer_pid().and_then(crate::sys::procfs::exe_of),
            });
        let fds = std::mem::take(&mut self.client_fds);
        let passed = request
            .client
            .fds
            .and_then(|map| crate::passed_fds::PassedFds::with_pty(map, request.client.pty, fds));
        let Some((name, entry)) = handle.registry().resolve(&request.command) else {
            handle.stats().unknown_command();
            let shown = String::from_utf8_lossy(&request.command);
            tracing::info!(conn = self.serial, peer = %self.peer, "unknown command {shown:?}");
            self.finish(
                exit_codes::UNKNOWN_COMMAND,
                &format!(
                    "ngd: unknown command '{shown}'; run 'ng ng-commands' to list the commands"
                ),
            );
            return;
        };
        tracing::debug!(conn = self.serial, peer = %self.peer, command = %name, args = request.args.len(), env = request.env.len(), "launch");
        let mut launch = Launch {
            name,
            request,
            umask,
            passed,
        };
        match entry.target {
            crate::registry::Target::Nail {
                nail,
                inline,
                client_fds,
            } => self.start_nail(env, launch, nail, inline, client_fds),
            crate::registry::Target::Plugin { pool } => {
                // A shim names the program the shell would have run (docs/protocol.md,
                // `exec`): its pool, or the client runs it.
                let program = launch.request.client.program.clone();
                let request = &launch.request;
                let context = || learning_context(request);
                let pool = match program.map(|p| (env.host.route_program(pool, &p, context), p)) {
                    None => pool,
                    Some((Ok((pool, session_env)), _)) => {
                        set_session_env(&mut launch.request, session_env);
                        pool
                    }
                    Some((Err(reason), program)) => {
                        if self.run_directly(&launch.name, &program, &reason) {
                            return;
                        }
                        pool
                    }
                };
                self.start_plugin(env, launch, pool)
            }
        }
    }

    /// Tells a shim to run `program` itself (`F exec`, then `X 0`, which it never reads):
    /// no warm pool serves it, or not yet. False if the client did not announce `exec`.
    fn run_directly(&mut self, name: &str, program: &[u8], reason: &str) -> bool {
        if !self
            .session
            .accept_extensions(Features::EXEC)
            .contains(Features::EXEC)
        {
            return false;
        }
        tracing::info!(
            conn = self.serial,
            command = %name,
            program = %String::from_utf8_lossy(program),
            "the shim runs the program directly: {reason}"
        );
        self.session.exit(0);
        self.state = ConnState::Finishing;
        true
    }

    /// A plugin command: when the client offered a pseudo-terminal and the pool's workers
    /// may take one, it is asked for first (`P`, [`ConnState::AwaitingPty`]); then the
    /// command is queued.
    fn start_plugin(&mut self, env: &mut Env<'_>, mut launch: Launch, pool: usize) {
        if launch
            .passed
            .as_ref()
            .is_some_and(crate::passed_fds::PassedFds::pty_offered)
        {
            if env.host.may_take_ctty(pool) && self.session.request_pty() {
                self.state = ConnState::AwaitingPty(Box::new(AwaitingPty {
                    launch,
                    pool,
                    until: env.now + PTY_WAIT,
                }));
                return;
            }
            launch.passed = launch.passed.map(crate::passed_fds::PassedFds::without_pty);
        }
        self.queue_plugin(env, launch, pool);
    }

    /// The client's answer to `P` (its slave, or none), or none in time: the command is
    /// queued, with the pseudo-terminal if it came.
    fn pty_answered(&mut self, env: &mut Env<'_>, slave: Option<std::os::fd::OwnedFd>) {
        let state = std::mem::replace(&mut self.state, ConnState::Closed);
        let ConnState::AwaitingPty(waiting) = state else {
            self.state = state;
            return;
        };
        let AwaitingPty {
            mut launch, pool, ..
        } = *waiting;
        launch.passed = launch.passed.map(|p| match slave {
            Some(slave) => p.with_slave(slave),
            None => p.without_pty(),
        });
        self.queue_plugin(env, launch, pool);
    }
}

/// How long the client may take to pass the pseudo-terminal it offered, once asked.
const PTY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A plugin command waiting for the client's pseudo-terminal.
#[derive(Debug)]
pub struct AwaitingPty {
    /// The command, with the client's descriptors.
    launch: Launch,
    /// Its plugin's pool.
    pool: usize,
    /// When to go on without the pseudo-terminal.
    until: Instant,
}

/// A resolved command about to start, with what the client sent for it.
#[derive(Debug)]
struct Launch {
    /// The resolved command name.
    name: String,
    /// The client's request, without our own extension entries.
    request: ng_proto::Request,
    /// The client's umask, if it reported it (`NGD_CLIENT_UMASK`).
    umask: Option<u32>,
    /// The client's own descriptors, when it passed them.
    passed: Option<crate::passed_fds::PassedFds>,
}

/// The directory and environment a launcher is learned in for `request`
/// (`plugin::launcher`): the client's, as a shell would run the launcher (without the
/// Nailgun protocol's own `NAILGUN_*` entries), its variables sorted by name; `None`
/// without a directory.
fn learning_context(request: &ng_proto::Request) -> Option<crate::plugin::launcher::Context> {
    use std::os::unix::ffi::OsStrExt as _;
    let os = |b: &[u8]| std::ffi::OsStr::from_bytes(b).to_os_string();
    let cwd = std::path::PathBuf::from(os(request.cwd.as_deref()?));
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = request
        .env
        .iter()
        .filter(|(name, _)| !name.starts_with(b"NAILGUN_"))
        .map(|(name, value)| (os(name), os(value)))
        .collect();
    env.sort();
    Some(crate::plugin::launcher::Context { cwd, env })
}

/// Sets `vars` in `request`'s environment (replacing the client's values): what a
/// launcher sets for its JVM.
fn set_session_env(request: &mut ng_proto::Request, vars: crate::plugin::derive::SessionEnv) {
    use std::os::unix::ffi::OsStringExt as _;
    for (name, value) in vars {
        let (name, value) = (
            bytes::Bytes::from(name.into_vec()),
            bytes::Bytes::from(value.into_vec()),
        );
        request.env.retain(|(n, _)| *n != name);
        request.env.push((name, value));
    }
}

/// Removes our client's `NGD_CLIENT_UMASK` extension entry (a command never sees it) and
/// returns its value, if well-formed (octal, at most 0o7777).
fn take_client_umask(request: &mut ng_proto::Request) -> Option<u32> {
    const NAME: &[u8] = b"NGD_CLIENT_UMASK";
    let value = request.env_var(NAME).cloned();
    request.env.retain(|(name, _)| name.as_ref() != NAME);
    let value = std::str::from_utf8(value.as_deref()?).ok()?;
    u32::from_str_radix(value, 8).ok().filter(|m| *m <= 0o7777)
}
