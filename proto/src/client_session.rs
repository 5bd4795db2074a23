//! The client's side of a session, without I/O.
//!
//! [`ClientSession`] encodes the header (`A`/`L` in argument order, then `E`, `D`, `C`),
//! decodes what the server sends, and enforces the client's rules:
//!
//! * **stdin credit**: each `S` grants one credit (a flag, not a counter, as in the reference
//!   C client); one `0` chunk or the `.` spends it. No stdin is ever sent without credit.
//! * **heartbeats**: an `H` goes out when nothing has been sent for
//!   [`ClientConfig::heartbeat_interval`]; the caller asks [`ClientSession::poll_timeout`]
//!   when to come back and passes the time in.
//! * **first `X` wins**: the exit code is parsed like `atoi`, and everything after it is
//!   ignored.
//! * **streamed output**: `1`/`2` payloads of any length are passed on piece by piece as they
//!   arrive, so a 100 MiB stdout chunk never needs a 100 MiB buffer.
//!
//! Only `1 2 S X` may come from a server; any other type is a protocol error (the reference
//! client exits 229).
//!
//! # Negotiated extensions
//!
//! A client that announces features ([`ClientConfig::announced`]; the caller puts the
//! matching `NGD_CLIENT_FEATURES` entry last in [`Header::env`]) also accepts `F` as the
//! server's first chunk. [`ClientEvent::Extensions`] then says what the server honours:
//! the features `F` names, or none at all when the first chunk is anything else (a stock
//! server). From then on, depending on what was accepted:
//!
//! * `signals`: [`ClientSession::send_signal`] queues `K`; the server may send `Z`
//!   ([`ClientEvent::Stopped`]) and report a death by signal in `X`
//!   ([`ClientEvent::ExitBySignal`]).
//! * `winsize`: [`ClientSession::send_window_size`] queues `W`.
//! * `stdin-window`: each `S` carries a byte count that adds to the stdin credit, and any
//!   number of `0` chunks may be sent while credit lasts ([`ClientSession::stdin_budget`]).
//!
//! `F` from a server the client did not announce to, or anywhere but first, is a protocol
//! error like any unknown type; so are `Z` and the extension payloads without their feature.

use crate::codec::{encode, encode_stream, ChunkHeader};
use crate::ext::{self, ExitReport, Features, SignalName, WinSize};
use crate::{exit, ChunkType, ProtocolError, HEADER_LEN, STDIN_CHUNK_LEN};
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How much of an `X` payload is parsed; the reference client reads at most this much.
const MAX_EXIT_PARSE: usize = 2047;

/// The longest `F` payload accepted.
const MAX_FEATURES_LEN: u32 = 1024;

/// Client-side settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Send `H` when nothing was sent for this long. The reference C client uses 500 ms.
    pub heartbeat_interval: Duration,
    /// The largest `L` piece sent for a file argument.
    pub long_arg_piece: usize,
    /// The features announced in the header's `NGD_CLIENT_FEATURES` entry; empty for a
    /// classic client, which then never accepts `F`.
    pub announced: Features,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_millis(500),
            long_arg_piece: STDIN_CHUNK_LEN,
            announced: Features::NONE,
        }
    }
}

/// One argument of a request, in command-line order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderArg {
    /// An ordinary argument, sent as one `A` chunk.
    Plain(Vec<u8>),
    /// The contents of a `--nailgun-filearg` file, sent as `L` pieces and an empty `L`.
    File(Vec<u8>),
}

/// Everything a client sends before the command runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// The command name (`C`).
    pub command: Vec<u8>,
    /// Arguments in order.
    pub args: Vec<HeaderArg>,
    /// Environment entries, `NAME=VALUE`, in the order sent; the server keeps the last of
    /// duplicate names.
    pub env: Vec<Vec<u8>>,
    /// The working directory (`D`).
    pub cwd: Vec<u8>,
}

/// What the client must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientEvent {
    /// Bytes for the client's stdout.
    Stdout(Bytes),
    /// Bytes for the client's stderr.
    Stderr(Bytes),
    /// The server granted one stdin credit (`S`).
    StdinRequested,
    /// The command finished with this code (as parsed; the process status is
    /// [`exit::status`] of it).
    Exit(i32),
    /// For an announcing client, before anything else: what the server honours in this
    /// session (`F`), or [`Features::NONE`] when the server's first chunk was not `F`.
    Extensions(Features),
    /// The command stopped itself with this signal (`Z`, with `signals`): stop the client
    /// the same way.
    Stopped(SignalName),
    /// For a client that announced `ctty`, before `F`: the server asks for the offered
    /// pseudo-terminal (`P`); answer with [`ClientSession::send_pty`].
    PtyWanted,
    /// The command was killed by a signal (`X "<code> <SIGNAME>[ core]"`, with `signals`);
    /// `code` is the classic code a stock client would exit with.
    ExitBySignal {
        /// The classic code (128 + the signal's number on the server).
        code: i32,
        /// The signal.
        signal: SignalName,
        /// The kernel dumped core.
        core: bool,
    },
}

/// Whether stdin could be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StdinSend {
    /// Queued; the credit is spent.
    Sent,
    /// No credit: wait for `S`.
    NoCredit,
    /// End of stdin was already sent, or the session is over.
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing sent yet.
    Idle,
    /// Header sent; waiting for output and the exit code.
    Running,
    /// `X` received; the session is over.
    Exited(i32),
    /// The server broke the protocol or went away; the session is over without a code.
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rx {
    /// Waiting for a chunk header.
    Header,
    /// Inside a `1` or `2` payload.
    Data { ty: ChunkType, remaining: u32 },
    /// Skipping an `S` payload (normally empty).
    Skip { remaining: u32 },
    /// Collecting an `X` payload.
    Exit { len: u32 },
    /// Collecting a short extension payload (`F`, `Z`, a windowed `S`).
    Collect { ty: ChunkType, len: u32 },
}

/// The client's side of one Nailgun session. See the module docs.
#[derive(Debug)]
pub struct ClientSession {
    config: ClientConfig,
    phase: Phase,
    rx: Rx,
    credit: bool,
    stdin_closed: bool,
    /// What the server honours: `None` until its first chunk.
    accepted: Option<Features>,
    /// With `stdin-window`: bytes of stdin credit.
    window: u64,
    last_send: Instant,
    tx: BytesMut,
    events: VecDeque<ClientEvent>,
}

impl ClientSession {
    /// A session that has sent nothing yet.
    pub fn new(config: ClientConfig, now: Instant) -> Self {
        Self {
            config,
            phase: Phase::Idle,
            rx: Rx::Header,
            credit: false,
            stdin_closed: false,
            accepted: None,
            window: 0,
            last_send: now,
            tx: BytesMut::new(),
            events: VecDeque::new(),
        }
    }

    /// Queues the whole header: `A`/`L` in argument order, then `E`, `D` and `C`.
    /// Does nothing if the header was already sent.
    pub fn send_header(&mut self, header: &Header, now: Instant) {
        if self.phase != Phase::Idle {
            return;
        }
        for arg in &header.args {
            match arg {
                HeaderArg::Plain(a) => encode(ChunkType::ARGUMENT, a, &mut self.tx),
                HeaderArg::File(contents) => {
                    let piece = self.config.long_arg_piece;
                    encode_stream(ChunkType::LONG_ARG, contents, piece, &mut self.tx);
                    encode(ChunkType::LONG_ARG, b"", &mut self.tx);
                }
            }
        }
        for entry in &header.env {
            encode(ChunkType::ENVIRONMENT, entry, &mut self.tx);
        }
        encode(ChunkType::WORKING_DIR, &header.cwd, &mut self.tx);
        encode(ChunkType::COMMAND, &header.command, &mut self.tx);
        self.phase = Phase::Running;
        self.last_send = now;
    }

    /// Decodes what the server sent, consuming `buf` as far as it can.
    ///
    /// After the first `X`, everything is ignored. An error means the server broke the
    /// protocol; the session is then over.
    pub fn handle_bytes(&mut self, buf: &mut BytesMut) -> Result<(), ProtocolError> {
        loop {
            if matches!(self.phase, Phase::Exited(_) | Phase::Failed) {
                buf.clear();
                return Ok(());
            }
            match self.rx {
                Rx::Header => {
                    let Some(h) = ChunkHeader::peek(buf) else {
                        return Ok(());
                    };
                    buf.advance(HEADER_LEN);
                    if self.accepted.is_none() {
                        if h.ty == ChunkType::PTY
                            && h.len == 0
                            && self.config.announced.contains(Features::CTTY)
                        {
                            self.events.push_back(ClientEvent::PtyWanted);
                            continue;
                        }
                        if h.ty == ChunkType::FEATURES && !self.config.announced.is_empty() {
                            if h.len > MAX_FEATURES_LEN {
                                return Err(self.bad_payload(h.ty));
                            }
                            self.rx = Rx::Collect {
                                ty: h.ty,
                                len: h.len,
                            };
                            continue;
                        }
                        self.settle(Features::NONE);
                    }
                    let accepted = self.accepted.unwrap_or_default();
                    self.rx = match h.ty {
                        ChunkType::STDOUT | ChunkType::STDERR if h.len == 0 => Rx::Header,
                        ChunkType::STDOUT | ChunkType::STDERR => Rx::Data {
                            ty: h.ty,
                            remaining: h.len,
                        },
                        ChunkType::SEND_INPUT if accepted.contains(Features::STDIN_WINDOW) => {
                            if h.len > 10 {
                                return Err(self.bad_payload(h.ty));
                            }
                            Rx::Collect {
                                ty: h.ty,
                                len: h.len,
                            }
                        }
                        ChunkType::SEND_INPUT => {
                            self.grant_credit();
                            Rx::Skip { remaining: h.len }
                        }
                        ChunkType::STOPPED if accepted.contains(Features::SIGNALS) => {
                            if h.len as usize > SignalName::MAX_LEN {
                                return Err(self.bad_payload(h.ty));
                            }
                            Rx::Collect {
                                ty: h.ty,
                                len: h.len,
                            }
                        }
                        ChunkType::EXIT => Rx::Exit { len: h.len },
                        ty => {
                            self.phase = Phase::Failed;
                            return Err(ProtocolError::UnexpectedChunk {
                                state: "running",
                                ty,
                            });
                        }
                    };
                }
                Rx::Data { ty, remaining } => {
                    if buf.is_empty() {
                        return Ok(());
                    }
                    let n = buf.len().min(remaining as usize);
                    let piece = buf.split_to(n).freeze();
                    self.events.push_back(if ty == ChunkType::STDOUT {
                        ClientEvent::Stdout(piece)
                    } else {
                        ClientEvent::Stderr(piece)
                    });
                    let remaining = remaining - n as u32;
                    self.rx = if remaining == 0 {
                        Rx::Header
                    } else {
                        Rx::Data { ty, remaining }
                    };
                }
                Rx::Skip { remaining } => {
                    let n = buf.len().min(remaining as usize);
                    buf.advance(n);
                    let remaining = remaining - n as u32;
                    if remaining > 0 {
                        self.rx = Rx::Skip { remaining };
                        return Ok(());
                    }
                    self.rx = Rx::Header;
                }
                Rx::Exit { len } => {
                    let wanted = (len as usize).min(MAX_EXIT_PARSE);
                    if buf.len() < wanted {
                        return Ok(());
                    }
                    let accepted = self.accepted.unwrap_or_default();
                    let event = match ExitReport::parse(&buf[..wanted]) {
                        ExitReport::Signal { code, signal, core }
                            if accepted.contains(Features::SIGNALS) =>
                        {
                            ClientEvent::ExitBySignal { code, signal, core }
                        }
                        report => ClientEvent::Exit(report.code()),
                    };
                    self.phase = Phase::Exited(exit::parse(&buf[..wanted]));
                    self.events.push_back(event);
                }
                Rx::Collect { ty, len } => {
                    let len = len as usize;
                    if buf.len() < len {
                        return Ok(());
                    }
                    let payload = buf.split_to(len);
                    self.rx = Rx::Header;
                    match ty {
                        ChunkType::FEATURES => {
                            let offered = Features::parse(&payload);
                            self.settle(offered.intersect(self.config.announced));
                        }
                        ChunkType::STOPPED => {
                            let signal =
                                SignalName::new(&payload).ok_or_else(|| self.bad_payload(ty))?;
                            self.events.push_back(ClientEvent::Stopped(signal));
                        }
                        _ => {
                            let grant =
                                ext::parse_grant(&payload).ok_or_else(|| self.bad_payload(ty))?;
                            self.grant_window(grant);
                        }
                    }
                }
            }
        }
    }

    /// The server closed the connection. An error unless `X` already arrived.
    pub fn handle_eof(&mut self) -> Result<(), ProtocolError> {
        match self.phase {
            Phase::Exited(_) => Ok(()),
            _ => {
                self.phase = Phase::Failed;
                Err(ProtocolError::EofBeforeExit)
            }
        }
    }

    fn bad_payload(&mut self, ty: ChunkType) -> ProtocolError {
        self.phase = Phase::Failed;
        ProtocolError::BadExtensionPayload { ty }
    }

    /// Fixes what the server honours and, for an announcing client, says so.
    fn settle(&mut self, accepted: Features) {
        self.accepted = Some(accepted);
        if !self.config.announced.is_empty() {
            self.events.push_back(ClientEvent::Extensions(accepted));
        }
    }

    fn grant_window(&mut self, grant: u32) {
        if self.stdin_closed {
            return;
        }
        let before = self.window;
        self.window = (self.window + u64::from(grant)).min(u64::from(ext::MAX_STDIN_GRANT));
        if before == 0 && self.window > 0 {
            self.events.push_back(ClientEvent::StdinRequested);
        }
    }

    /// What the server honours in this session: `None` until its first chunk arrives.
    pub fn extensions(&self) -> Option<Features> {
        self.accepted
    }

    /// Queues `K` with a signal for the command, if the server accepted `signals`.
    /// Returns whether it was queued.
    pub fn send_signal(&mut self, signal: &SignalName, now: Instant) -> bool {
        self.send_extension(Features::SIGNALS, ChunkType::SIGNAL, signal.as_bytes(), now)
    }

    /// Queues `W` with the terminal's new size, if the server accepted `winsize`.
    /// Returns whether it was queued.
    pub fn send_window_size(&mut self, size: WinSize, now: Instant) -> bool {
        let value = size.to_value();
        self.send_extension(
            Features::WINSIZE,
            ChunkType::WINDOW_SIZE,
            value.as_bytes(),
            now,
        )
    }

    /// Queues `P`, the answer to [`ClientEvent::PtyWanted`]; the caller attaches the
    /// pseudo-terminal's slave to its bytes (`SCM_RIGHTS`), or nothing if it has none.
    pub fn send_pty(&mut self, now: Instant) {
        if self.phase == Phase::Running {
            encode(ChunkType::PTY, b"", &mut self.tx);
            self.last_send = now;
        }
    }

    fn send_extension(
        &mut self,
        feature: Features,
        ty: ChunkType,
        payload: &[u8],
        now: Instant,
    ) -> bool {
        let accepted = self.accepted.is_some_and(|a| a.contains(feature));
        if !accepted || self.phase != Phase::Running {
            return false;
        }
        encode(ty, payload, &mut self.tx);
        self.last_send = now;
        true
    }

    fn grant_credit(&mut self) {
        if !self.stdin_closed && !self.credit {
            self.credit = true;
            self.events.push_back(ClientEvent::StdinRequested);
        }
    }

    /// True while one stdin chunk may be sent.
    pub fn has_stdin_credit(&self) -> bool {
        self.stdin_budget() > 0
    }

    fn windowed(&self) -> bool {
        self.accepted
            .is_some_and(|a| a.contains(Features::STDIN_WINDOW))
    }

    /// How many stdin bytes may be sent now: with `stdin-window`, the credit left;
    /// otherwise one chunk of [`STDIN_CHUNK_LEN`] per `S`.
    pub fn stdin_budget(&self) -> usize {
        if self.stdin_closed || self.phase != Phase::Running {
            0
        } else if self.windowed() {
            usize::try_from(self.window).unwrap_or(usize::MAX)
        } else if self.credit {
            STDIN_CHUNK_LEN
        } else {
            0
        }
    }

    /// Queues one `0` chunk with `data` (which should be non-empty), spending the credit
    /// (with `stdin-window`, `data.len()` bytes of it; more than the budget is refused).
    pub fn send_stdin(&mut self, data: &[u8], now: Instant) -> StdinSend {
        let state = self.stdin_state();
        if state != StdinSend::Sent {
            return state;
        }
        if self.windowed() {
            if data.len() as u64 > self.window {
                return StdinSend::NoCredit;
            }
            self.window -= data.len() as u64;
        }
        encode(ChunkType::STDIN, data, &mut self.tx);
        self.credit = false;
        self.last_send = now;
        state
    }

    /// Queues the `.` chunk, spending the credit; no more stdin can be sent after it.
    pub fn send_stdin_eof(&mut self, now: Instant) -> StdinSend {
        let state = self.stdin_state();
        if state == StdinSend::Sent {
            encode(ChunkType::STDIN_EOF, b"", &mut self.tx);
            self.credit = false;
            self.window = 0;
            self.stdin_closed = true;
            self.last_send = now;
        }
        state
    }

    fn stdin_state(&self) -> StdinSend {
        if self.stdin_closed || self.phase != Phase::Running {
            StdinSend::Closed
        } else if self.stdin_budget() == 0 {
            StdinSend::NoCredit
        } else {
            StdinSend::Sent
        }
    }

    /// When [`ClientSession::handle_timeout`] should next be called: the heartbeat deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running => Some(self.last_send + self.config.heartbeat_interval),
            _ => None,
        }
    }

    /// Queues an `H` if nothing was sent for the heartbeat interval.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(deadline) = self.poll_timeout() {
            if now >= deadline {
                encode(ChunkType::HEARTBEAT, b"", &mut self.tx);
                self.last_send = now;
            }
        }
    }

    /// The next event to act on.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Takes the bytes queued for the server. Each chunk is contiguous, so writing the whole
    /// buffer with one `write_all` never splits a chunk across writes.
    pub fn take_transmit(&mut self) -> BytesMut {
        self.tx.split()
    }

    /// True if bytes are queued for the server.
    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty()
    }

    /// The exit code, once `X` has arrived.
    pub fn exit_code(&self) -> Option<i32> {
        match self.phase {
            Phase::Exited(code) => Some(code),
            _ => None,
        }
    }
}
