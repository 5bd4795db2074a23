//! The server's side of a session, without I/O.
//!
//! [`ServerSession`] follows one connection from its first byte to its `X`:
//!
//! ```text
//!   Header ──C──▶ Running ──exit()──▶ Exited
//!     │              │
//!     └─ error ──────┴─▶ (caller writes a message and an exit code, then closes)
//! ```
//!
//! * **Header**: `A E D L H` in any order until `C`. `E` is split at the first `=`; entries
//!   with no `=` or an empty name are skipped and counted. `L` pieces up to an empty `L` make
//!   one argument at their position; an `L` run left open by the next `A` or `C` ends there
//!   (the Python client sends no terminator). The last `D` wins. Unknown types are skipped,
//!   as the reference server does. The whole header is bounded by
//!   [`ServerConfig::max_header_bytes`] and must finish within the header timeout.
//! * **Running**: `0` and `.` become [`ServerEvent::Stdin`] / [`ServerEvent::StdinEof`].
//!   `S` is sent only when the command asks for input ([`ServerSession::request_stdin`]) and
//!   no `S` is outstanding, so a client gets at most one credit at a time. Stdin that arrives
//!   without credit (eager clients such as the `nails` crate's) is accepted; the caller bounds
//!   it by reading the socket no faster than the command reads its stdin. `H` and any chunk
//!   refresh the heartbeat deadline; silence past it, or end of file, is
//!   [`ServerEvent::ClientGone`].
//! * **Exited**: exactly one `X "<n>\n"` is queued; later output is dropped, and everything
//!   the client still sends is read and ignored, so the caller can drain before closing.
//!
//! # Negotiated extensions
//!
//! A client that announces features (`E NGD_CLIENT_FEATURES=...` as the last `E` of its
//! header, see [`crate::ext`]) gets [`Request::client`] filled in; the extension entries
//! themselves never reach [`Request::env`]. Descriptors that arrived with the header
//! (`SCM_RIGHTS`, read by the caller) are reported with [`ServerSession::handle_passed_fds`]
//! and validated at `C` against the client's `NGD_CLIENT_FDS` map. After `Launch` the
//! caller says what it will honour with [`ServerSession::accept_extensions`], which queues
//! the `F` chunk as the session's first output. Only then are `K` and `W` from the client
//! accepted ([`ServerSession::poll_extension`]), `S` grants a byte
//! window instead of one chunk ([`ServerSession::set_stdin_window`]), and
//! [`ServerSession::exit_with`] and [`ServerSession::stopped`] may use the signal forms.
//! A client that announced nothing gets exactly the classic exchange.

use crate::codec::{encode, encode_stream};
use crate::ext::{self, ExitReport, FdMap, Features, SignalName, WinSize};
use crate::{exit, ChunkType, Decoder, Limits, ProtocolError};
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Server-side settings for one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// Chunk size limits.
    pub limits: Limits,
    /// The most the header phase may hold: argument, environment, directory and command
    /// bytes, plus 16 bytes of bookkeeping per item.
    pub max_header_bytes: usize,
    /// `C` must arrive within this long after the connection opens. `None` waits forever.
    pub header_timeout: Option<Duration>,
    /// After `C`, the client is gone if nothing arrives for this long. `None` disables it.
    /// The reference server's default is 10 s; the C client sends `H` every 0.5 to 1 s.
    pub heartbeat_timeout: Option<Duration>,
    /// The largest output chunk written; larger writes are split.
    pub max_output_chunk: usize,
}

/// The most descriptors a client may pass with its header: its fds 0, 1, 2 and, with
/// `ctty`, one pseudo-terminal.
pub const MAX_PASSED_FDS: usize = 4;

/// With `stdin-window`, the stdin credit a client is kept topped up to unless
/// [`ServerSession::set_stdin_window`] says otherwise: 1 MiB (measured: a 256 KiB window
/// held loopback TCP to about half the rate of a 1 MiB one).
pub const DEFAULT_STDIN_WINDOW: u32 = 1 << 20;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_header_bytes: 16 << 20,
            header_timeout: Some(Duration::from_secs(10)),
            heartbeat_timeout: Some(Duration::from_secs(10)),
            max_output_chunk: 1 << 20,
        }
    }
}

/// Bookkeeping charged per header item against [`ServerConfig::max_header_bytes`], so that
/// 10 million empty arguments are refused like one huge one.
const ITEM_OVERHEAD: usize = 16;

/// What a client asked to run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The command (`C`): an alias or a name the server resolves.
    pub command: Bytes,
    /// The arguments, in order (`A`, and `L` runs).
    pub args: Vec<Bytes>,
    /// Environment entries in the order received, split at the first `=`.
    pub env: Vec<(Bytes, Bytes)>,
    /// The working directory (`D`), if one was sent.
    pub cwd: Option<Bytes>,
    /// How many `E` entries were skipped as malformed.
    pub skipped_env: usize,
    /// What the client announced (empty for every stock client).
    pub client: ClientExtensions,
}

/// What a client announced in its header (docs/protocol.md, "Negotiated extensions").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientExtensions {
    /// The features of `NGD_CLIENT_FEATURES`, when it was the header's last `E`.
    pub features: Features,
    /// The passed descriptors' map, when the client announced `fds`, its `NGD_CLIENT_FDS`
    /// is well-formed and exactly that many descriptors arrived with the header. `None`
    /// otherwise: the caller then closes whatever descriptors it received.
    pub fds: Option<FdMap>,
    /// With `ctty` (and valid `fds`): which client descriptors the client's
    /// pseudo-terminal stands for (`NGD_CLIENT_PTY`, a subset of `fds`). Its slave is the
    /// last descriptor received with the header, unless `pty_offered`.
    pub pty: Option<FdMap>,
    /// The header came without the slave of `pty`: the client opens and passes it when
    /// asked ([`ServerSession::request_pty`]).
    pub pty_offered: bool,
    /// How many descriptors arrived with the header.
    pub fds_received: usize,
    /// The terminal's size at start (`NGD_CLIENT_WINSIZE`).
    pub winsize: Option<WinSize>,
    /// Signals the client's parent left ignored (`NGD_CLIENT_SIGIGN`): the command should
    /// start with them ignored, as it would have inherited them.
    pub ignored_signals: Vec<SignalName>,
    /// With `exec`: the program a shell would have run for the command's name
    /// (`NGD_CLIENT_PROGRAM`, an absolute path), as the client found it.
    pub program: Option<Bytes>,
    /// The client's version (`NGD_CLIENT_VERSION`), when well-formed.
    pub version: Option<Box<crate::version::Version>>,
}

impl Request {
    /// The value of an environment entry; the last one wins, as in the reference server.
    pub fn env_var(&self, name: &[u8]) -> Option<&Bytes> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k.as_ref() == name)
            .map(|(_, v)| v)
    }
}

/// Why the server considers the client gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisconnectReason {
    /// The connection reached end of file.
    Eof,
    /// Nothing arrived within the heartbeat timeout.
    HeartbeatTimeout,
}

/// What the server must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerEvent {
    /// The header is complete: run this.
    Launch(Request),
    /// Stdin bytes for the command.
    Stdin(Bytes),
    /// The client's stdin ended.
    StdinEof,
    /// The client is gone; cancel the command.
    ClientGone(DisconnectReason),
    /// The client answered [`ServerSession::request_pty`] (`P`): the descriptors the
    /// caller read since are its pseudo-terminal's slave, if one came.
    Pty,
}

/// What an extension chunk from the client asks for ([`ServerSession::poll_extension`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtensionEvent {
    /// The client forwards a signal for the command (`K`, after `signals` was accepted);
    /// deliver it as [`ext::SignalTarget::of`] says.
    Signal(SignalName),
    /// The client's terminal changed size (`W`, after `winsize` was accepted).
    WindowSize(WinSize),
}

#[derive(Debug)]
enum Phase {
    /// Boxed: the header's state is large, and a session spends most of its life running.
    Header(Box<HeaderState>),
    Running(Running),
    Exited,
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Header(_) => "reading the header",
            Phase::Running(_) => "running",
            Phase::Exited => "exited",
        }
    }
}

#[derive(Debug, Default)]
struct HeaderState {
    request: Request,
    /// An `L` run in progress.
    long_arg: Option<BytesMut>,
    used: usize,
    /// The features of the last `E`, if it was `NGD_CLIENT_FEATURES`.
    announced: Option<Features>,
    /// The last `NGD_CLIENT_FDS` value, parsed (`Some(None)`: present but malformed).
    fd_map: Option<Option<FdMap>>,
    /// Descriptors reported by the caller so far.
    fds_received: usize,
}

#[derive(Debug)]
struct Running {
    /// An `S` was sent and no `0`/`.` answered it yet.
    credit_out: bool,
    /// The client sent `.`.
    stdin_eof: bool,
    /// The client was reported gone.
    gone: bool,
    /// Input was broken by a protocol error; ignore what follows.
    broken: bool,
    /// What the client announced.
    announced: Features,
    /// The client's descriptors arrived and are valid.
    fds_valid: bool,
    /// What [`ServerSession::accept_extensions`] settled on.
    accepted: Features,
    /// Something other than `F` was queued for the client.
    output_started: bool,
    /// With `stdin-window`: bytes granted and not yet received.
    window_out: u64,
    /// The client is stopped (it forwarded `SIGTSTP`, or was sent `Z`): no heartbeats
    /// are expected until it sends something again.
    suspended: bool,
    /// A `P` was sent and the client's `P` has not come yet.
    pty_asked: bool,
    /// The server stopped waiting for the client's `P`, which may still come: ignored.
    pty_withdrawn: bool,
}

impl Running {
    fn new(announced: Features, fds_valid: bool) -> Self {
        Running {
            credit_out: false,
            stdin_eof: false,
            gone: false,
            broken: false,
            announced,
            fds_valid,
            accepted: Features::NONE,
            output_started: false,
            window_out: 0,
            suspended: false,
            pty_asked: false,
            pty_withdrawn: false,
        }
    }
}

/// The server's side of one Nailgun session. See the module docs.
#[derive(Debug)]
pub struct ServerSession {
    config: ServerConfig,
    decoder: Decoder,
    phase: Phase,
    opened: Instant,
    last_rx: Instant,
    tx: BytesMut,
    events: VecDeque<ServerEvent>,
    extension_events: VecDeque<ExtensionEvent>,
    stdin_window: u32,
}

impl ServerSession {
    /// A session for a connection accepted at `now`.
    pub fn new(config: ServerConfig, now: Instant) -> Self {
        Self {
            config,
            decoder: Decoder::new(config.limits),
            phase: Phase::Header(Box::default()),
            opened: now,
            last_rx: now,
            tx: BytesMut::new(),
            events: VecDeque::new(),
            extension_events: VecDeque::new(),
            stdin_window: DEFAULT_STDIN_WINDOW,
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Decodes and applies every whole chunk in `buf`.
    ///
    /// An error means the client broke the protocol: input is ignored from then on, and the
    /// caller should tell the client (with [`ServerSession::write_stderr`] and
    /// [`ServerSession::exit`]) and close.
    pub fn handle_bytes(&mut self, buf: &mut BytesMut, now: Instant) -> Result<(), ProtocolError> {
        loop {
            match &self.phase {
                Phase::Exited => {
                    buf.clear();
                    return Ok(());
                }
                Phase::Running(r) if r.broken => {
                    buf.clear();
                    return Ok(());
                }
                _ => {}
            }
            let chunk = match self.decoder.decode(buf) {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.fail(e.into())),
            };
            self.last_rx = now;
            if let Err(e) = self.apply(chunk.ty, chunk.payload) {
                return Err(self.fail(e));
            }
        }
    }

    /// How many more bytes `buf` needs for its next chunk (0: one is ready), or the error for
    /// an over-limit header. Lets the caller bound its read buffer before reading.
    pub fn bytes_needed(&self, buf: &[u8]) -> Result<usize, ProtocolError> {
        Ok(self.decoder.bytes_needed(buf)?)
    }

    fn fail(&mut self, e: ProtocolError) -> ProtocolError {
        match &mut self.phase {
            Phase::Running(r) => r.broken = true,
            // No command was launched, so there is nobody to tell that the client left:
            // `gone` keeps a later end of file from reporting `ClientGone`.
            Phase::Header(_) => {
                self.phase = Phase::Running(Running {
                    stdin_eof: true,
                    gone: true,
                    broken: true,
                    ..Running::new(Features::NONE, false)
                })
            }
            Phase::Exited => {}
        }
        e
    }

    fn apply(&mut self, ty: ChunkType, payload: Bytes) -> Result<(), ProtocolError> {
        let max_header = self.config.max_header_bytes;
        match &mut self.phase {
            Phase::Header(h) => {
                if ty != ChunkType::HEARTBEAT {
                    h.used += payload.len() + ITEM_OVERHEAD;
                    if h.used > max_header {
                        return Err(ProtocolError::HeaderTooLarge { max: max_header });
                    }
                }
                if ty != ChunkType::LONG_ARG && ty != ChunkType::HEARTBEAT {
                    if let Some(long) = h.long_arg.take() {
                        h.request.args.push(long.freeze());
                    }
                }
                match ty {
                    ChunkType::ARGUMENT => h.request.args.push(payload),
                    ChunkType::ENVIRONMENT => {
                        h.announced = None;
                        match payload.iter().position(|&b| b == b'=') {
                            Some(eq) if eq > 0 => {
                                let name = payload.slice(..eq);
                                let value = payload.slice(eq + 1..);
                                if ext::is_extension_var(&name) {
                                    h.extension_entry(&name, &value);
                                } else {
                                    h.request.env.push((name, value));
                                }
                            }
                            _ => h.request.skipped_env += 1,
                        }
                    }
                    ChunkType::WORKING_DIR => h.request.cwd = Some(payload),
                    ChunkType::LONG_ARG if payload.is_empty() => {
                        let long = h.long_arg.take().unwrap_or_default();
                        h.request.args.push(long.freeze());
                    }
                    ChunkType::LONG_ARG => h
                        .long_arg
                        .get_or_insert_with(BytesMut::new)
                        .extend_from_slice(&payload),
                    ChunkType::COMMAND => {
                        let client = h.extensions();
                        let mut request = std::mem::take(&mut h.request);
                        request.command = payload;
                        request.client = client;
                        let mut announced = request.client.features;
                        if request.client.pty.is_none() {
                            announced = announced.without(Features::CTTY);
                        }
                        let fds_valid = request.client.fds.is_some();
                        self.phase = Phase::Running(Running::new(announced, fds_valid));
                        self.events.push_back(ServerEvent::Launch(request));
                    }
                    // H, and whatever else a client sends before C, as the reference does.
                    _ => {}
                }
                Ok(())
            }
            Phase::Running(r) => {
                // Anything from the client shows it is running again.
                r.suspended = false;
                r.apply(ty, payload, &mut self.events, &mut self.extension_events)
            }
            Phase::Exited => Ok(()),
        }
    }
}

impl Running {
    fn apply(
        &mut self,
        ty: ChunkType,
        payload: Bytes,
        events: &mut VecDeque<ServerEvent>,
        extension_events: &mut VecDeque<ExtensionEvent>,
    ) -> Result<(), ProtocolError> {
        let r = self;
        match ty {
            ChunkType::HEARTBEAT => Ok(()),
            ChunkType::STDIN | ChunkType::STDIN_EOF if r.stdin_eof => {
                Err(ProtocolError::StdinAfterEof)
            }
            ChunkType::STDIN => {
                r.credit_out = false;
                r.window_out = r.window_out.saturating_sub(payload.len() as u64);
                if !payload.is_empty() {
                    events.push_back(ServerEvent::Stdin(payload));
                }
                Ok(())
            }
            ChunkType::STDIN_EOF => {
                r.credit_out = false;
                r.stdin_eof = true;
                r.window_out = 0;
                events.push_back(ServerEvent::StdinEof);
                Ok(())
            }
            ChunkType::SIGNAL if r.accepted.contains(Features::SIGNALS) => {
                let name =
                    SignalName::new(&payload).ok_or(ProtocolError::BadExtensionPayload { ty })?;
                r.suspended = name.signal() == Some(crate::Signal::Tstp);
                extension_events.push_back(ExtensionEvent::Signal(name));
                Ok(())
            }
            ChunkType::PTY if r.pty_asked || r.pty_withdrawn => {
                if !payload.is_empty() {
                    return Err(ProtocolError::BadExtensionPayload { ty });
                }
                if r.pty_asked {
                    events.push_back(ServerEvent::Pty);
                }
                r.pty_asked = false;
                r.pty_withdrawn = false;
                Ok(())
            }
            ChunkType::WINDOW_SIZE if r.accepted.contains(Features::WINSIZE) => {
                let size =
                    WinSize::parse(&payload).ok_or(ProtocolError::BadExtensionPayload { ty })?;
                extension_events.push_back(ExtensionEvent::WindowSize(size));
                Ok(())
            }
            ty => Err(ProtocolError::UnexpectedChunk {
                state: "running",
                ty,
            }),
        }
    }
}

impl ServerSession {
    /// The client closed its side of the connection.
    pub fn handle_eof(&mut self) -> Result<(), ProtocolError> {
        match &mut self.phase {
            Phase::Header(_) => Err(self.fail(ProtocolError::EofBeforeCommand)),
            Phase::Running(r) => {
                if !r.gone {
                    r.gone = true;
                    self.events
                        .push_back(ServerEvent::ClientGone(DisconnectReason::Eof));
                }
                Ok(())
            }
            Phase::Exited => Ok(()),
        }
    }

    /// When [`ServerSession::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Header(_) => self.config.header_timeout.map(|t| self.opened + t),
            Phase::Running(r) if !r.gone && !r.broken && !r.suspended => {
                self.config.heartbeat_timeout.map(|t| self.last_rx + t)
            }
            _ => None,
        }
    }

    /// Applies the passage of time: the header timeout is an error; the heartbeat timeout
    /// reports the client gone.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), ProtocolError> {
        let Some(deadline) = self.poll_timeout() else {
            return Ok(());
        };
        if now < deadline {
            return Ok(());
        }
        match &mut self.phase {
            Phase::Header(_) => Err(self.fail(ProtocolError::HeaderTimeout)),
            Phase::Running(r) => {
                r.gone = true;
                self.events
                    .push_back(ServerEvent::ClientGone(DisconnectReason::HeartbeatTimeout));
                Ok(())
            }
            Phase::Exited => Ok(()),
        }
    }

    /// The next event to act on.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// The next extension event (`K`, `W`) to act on. Drain it after
    /// [`ServerSession::poll_event`] after each [`ServerSession::handle_bytes`]: stdin that
    /// arrived in the same read is then handed to the command before a signal is delivered.
    pub fn poll_extension(&mut self) -> Option<ExtensionEvent> {
        self.extension_events.pop_front()
    }

    /// Sets the stdin credit a `stdin-window` client is kept topped up to (bytes, at least
    /// 1, at most [`ext::MAX_STDIN_GRANT`]). The caller's bound on buffered stdin should
    /// be at least this large, or the client will block on a full window.
    pub fn set_stdin_window(&mut self, bytes: u32) {
        self.stdin_window = bytes.clamp(1, ext::MAX_STDIN_GRANT);
    }

    /// The command wants input: queues `S` unless one is outstanding or stdin has ended.
    /// Returns true if an `S` was queued.
    ///
    /// With `stdin-window` accepted, `S` instead tops the client's byte credit up to
    /// the stdin window ([`ServerSession::set_stdin_window`]), once at least half of it has
    /// been used: call this
    /// whenever the command has taken stdin, and the window keeps moving.
    pub fn request_stdin(&mut self) -> bool {
        let window = u64::from(self.stdin_window);
        match &mut self.phase {
            Phase::Running(r) if r.stdin_eof || r.gone || r.broken => false,
            Phase::Running(r) if r.accepted.contains(Features::STDIN_WINDOW) => {
                if r.window_out > window / 2 {
                    return false;
                }
                let grant = window - r.window_out;
                r.window_out = window;
                r.output_started = true;
                encode(
                    ChunkType::SEND_INPUT,
                    grant.to_string().as_bytes(),
                    &mut self.tx,
                );
                true
            }
            Phase::Running(r) if !r.credit_out => {
                r.credit_out = true;
                r.output_started = true;
                encode(ChunkType::SEND_INPUT, b"", &mut self.tx);
                true
            }
            _ => false,
        }
    }

    /// Settles the session's extensions after `Launch`: the features of `server` that the
    /// client announced (`fds` only if its descriptors arrived valid) are honoured from now
    /// on, and an `F` chunk naming them is queued. Does nothing, and returns
    /// [`Features::NONE`], for a client that announced nothing, or once anything else has
    /// been queued for the client (`F` must be its first chunk) or extensions were settled.
    pub fn accept_extensions(&mut self, server: Features) -> Features {
        let Phase::Running(r) = &mut self.phase else {
            return Features::NONE;
        };
        if r.announced.is_empty() || r.output_started || r.broken {
            return Features::NONE;
        }
        let mut accepted = r.announced.intersect(server);
        if !r.fds_valid {
            accepted = accepted.without(Features::FDS.union(Features::CTTY));
        }
        r.accepted = accepted;
        r.output_started = true;
        encode(
            ChunkType::FEATURES,
            accepted.to_list().as_bytes(),
            &mut self.tx,
        );
        accepted
    }

    /// The features in force for this session (empty until
    /// [`ServerSession::accept_extensions`]).
    pub fn extensions(&self) -> Features {
        match &self.phase {
            Phase::Running(r) => r.accepted,
            _ => Features::NONE,
        }
    }

    /// The caller read `count` descriptors (`SCM_RIGHTS`) from the connection. Returns
    /// true while they may still be used (they came with the header, and the `C`
    /// decides; or one came while [`ServerSession::request_pty`]'s answer is awaited),
    /// false if the caller must close them now.
    pub fn handle_passed_fds(&mut self, count: usize) -> bool {
        match &mut self.phase {
            Phase::Header(h) => {
                h.fds_received = h.fds_received.saturating_add(count);
                h.fds_received <= MAX_PASSED_FDS
            }
            Phase::Running(r) => r.pty_asked && count == 1,
            Phase::Exited => false,
        }
    }

    /// After `Launch`, for a client that offered a pseudo-terminal without passing it
    /// ([`ClientExtensions::pty_offered`]): queues `P`, which asks for it. The client's
    /// `P` comes back as [`ServerEvent::Pty`], with the slave read as a passed
    /// descriptor. Returns false (and queues nothing) once anything else was queued for
    /// the client, or if it was asked already.
    pub fn request_pty(&mut self) -> bool {
        let Phase::Running(r) = &mut self.phase else {
            return false;
        };
        if r.output_started || r.pty_asked || r.broken || !r.announced.contains(Features::CTTY) {
            return false;
        }
        r.pty_asked = true;
        encode(ChunkType::PTY, b"", &mut self.tx);
        true
    }

    /// The server goes on without the pseudo-terminal it asked for: a `P` that comes
    /// later is ignored (and what rides with it is to be closed).
    pub fn withdraw_pty(&mut self) {
        if let Phase::Running(r) = &mut self.phase {
            if r.pty_asked {
                r.pty_asked = false;
                r.pty_withdrawn = true;
            }
        }
    }

    /// Whether the client's answer to [`ServerSession::request_pty`] is awaited: read the
    /// connection with its passed descriptors.
    pub fn awaits_pty(&self) -> bool {
        matches!(&self.phase, Phase::Running(r) if r.pty_asked && !r.gone && !r.broken)
    }

    /// True once the client sent `.` (or can send nothing more).
    pub fn stdin_ended(&self) -> bool {
        match &self.phase {
            Phase::Running(r) => r.stdin_eof || r.gone || r.broken,
            _ => true,
        }
    }

    /// Queues stdout bytes (dropped after the exit code).
    pub fn write_stdout(&mut self, data: &[u8]) {
        self.write(ChunkType::STDOUT, data);
    }

    /// Queues stderr bytes (dropped after the exit code).
    pub fn write_stderr(&mut self, data: &[u8]) {
        self.write(ChunkType::STDERR, data);
    }

    fn write(&mut self, ty: ChunkType, data: &[u8]) {
        self.mark_output();
        if !matches!(self.phase, Phase::Exited) {
            encode_stream(ty, data, self.config.max_output_chunk, &mut self.tx);
        }
    }

    fn mark_output(&mut self) {
        if let Phase::Running(r) = &mut self.phase {
            r.output_started = true;
        }
    }

    /// Queues the one `X` chunk, `"<code>\n"`. Later calls are ignored: the first exit wins.
    pub fn exit(&mut self, code: i32) {
        self.exit_with(&ExitReport::Code(code));
    }

    /// Queues the one `X` chunk for `report`: a death by signal is told as such
    /// (`"<code> <SIGNAME>[ core]\n"`) only to a client that accepted `signals`; any other
    /// client gets `"<code>\n"`. Later calls are ignored.
    pub fn exit_with(&mut self, report: &ExitReport) {
        if matches!(self.phase, Phase::Exited) {
            return;
        }
        let payload = match report {
            ExitReport::Signal { .. } if self.extensions().contains(Features::SIGNALS) => {
                report.to_payload()
            }
            _ => exit::format(report.code()),
        };
        encode(ChunkType::EXIT, &payload, &mut self.tx);
        self.phase = Phase::Exited;
    }

    /// The command stopped itself with `signal` (say, a full-screen program suspending on
    /// its own `^Z`): queues `Z` so the client stops as well. Only for a client that
    /// accepted `signals`; returns whether it was queued.
    ///
    /// Until the client sends anything again (its `K SIGCONT` once resumed), the heartbeat
    /// timeout is suspended: a stopped client sends no heartbeats.
    pub fn stopped(&mut self, signal: &SignalName) -> bool {
        if !self.extensions().contains(Features::SIGNALS) {
            return false;
        }
        if let Phase::Running(r) = &mut self.phase {
            r.suspended = true;
        }
        encode(ChunkType::STOPPED, signal.as_bytes(), &mut self.tx);
        true
    }

    /// True once the exit code is queued.
    pub fn is_exited(&self) -> bool {
        matches!(self.phase, Phase::Exited)
    }

    /// True while the header is still being read.
    pub fn in_header(&self) -> bool {
        matches!(self.phase, Phase::Header(_))
    }

    /// A short description of the state, for logs.
    pub fn state_name(&self) -> &'static str {
        self.phase.name()
    }

    /// Bytes queued for the client. Write them, then call
    /// [`ServerSession::advance_transmit`] with how many were written.
    pub fn transmit(&self) -> &[u8] {
        &self.tx
    }

    /// Drops `n` bytes from the front of the transmit queue.
    pub fn advance_transmit(&mut self, n: usize) {
        self.tx.advance(n.min(self.tx.len()));
    }

    /// Takes all queued bytes at once.
    pub fn take_transmit(&mut self) -> BytesMut {
        self.tx.split()
    }
}

impl HeaderState {
    /// Records one of the `NGD_CLIENT_*` extension entries (never part of the request's
    /// environment). `NGD_CLIENT_FEATURES` counts only if no other `E` follows it.
    fn extension_entry(&mut self, name: &[u8], value: &[u8]) {
        if name == ext::FEATURES_VAR {
            self.announced = Some(Features::parse(value));
        } else if name == ext::FDS_VAR {
            self.fd_map = Some(FdMap::parse(value));
        } else if name == ext::PTY_VAR {
            // Malformed is as absent: the descriptors then outnumber `NGD_CLIENT_FDS`.
            self.request.client.pty = FdMap::parse(value);
        } else if name == ext::WINSIZE_VAR {
            self.request.client.winsize = WinSize::parse(value);
        } else if name == ext::SIGIGN_VAR {
            self.request.client.ignored_signals = ext::parse_signal_list(value);
        } else if name == ext::VERSION_VAR {
            self.request.client.version = crate::version::Version::parse(value).map(Box::new);
        } else if name == ext::PROGRAM_VAR {
            self.request.client.program = value
                .starts_with(b"/")
                .then(|| Bytes::copy_from_slice(value));
        }
    }

    /// The client's extensions as they stand at `C`.
    fn extensions(&self) -> ClientExtensions {
        let features = self.announced.unwrap_or_default();
        // With `ctty`, a pseudo-terminal standing for some of the passed descriptors rides
        // last; without a valid map for it, the session has no descriptors at all.
        let pty = self
            .request
            .client
            .pty
            .filter(|p| features.contains(Features::CTTY) && p.count() > 0);
        // Its slave rides with the header, or is offered: sent when asked for.
        let expected = |map: FdMap| {
            self.fds_received == map.count() + usize::from(pty.is_some())
                || (pty.is_some() && self.fds_received == map.count())
        };
        let fds = match self.fd_map {
            Some(Some(map))
                if features.contains(Features::FDS)
                    && expected(map)
                    && pty.is_none_or(|p| p.fds().all(|fd| map.index_of(fd).is_some())) =>
            {
                Some(map)
            }
            _ => None,
        };
        let pty = pty.filter(|_| fds.is_some());
        ClientExtensions {
            features,
            fds,
            pty,
            pty_offered: pty.is_some() && fds.is_some_and(|m| m.count() == self.fds_received),
            fds_received: self.fds_received,
            winsize: self.request.client.winsize,
            ignored_signals: self.request.client.ignored_signals.clone(),
            program: self
                .request
                .client
                .program
                .clone()
                .filter(|_| features.contains(Features::EXEC)),
            version: self.request.client.version.clone(),
        }
    }
}
