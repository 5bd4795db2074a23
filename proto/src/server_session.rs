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

use crate::codec::{encode, encode_stream};
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
}

#[derive(Debug)]
enum Phase {
    Header(HeaderState),
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
}

impl ServerSession {
    /// A session for a connection accepted at `now`.
    pub fn new(config: ServerConfig, now: Instant) -> Self {
        Self {
            config,
            decoder: Decoder::new(config.limits),
            phase: Phase::Header(HeaderState::default()),
            opened: now,
            last_rx: now,
            tx: BytesMut::new(),
            events: VecDeque::new(),
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
                    credit_out: false,
                    stdin_eof: true,
                    gone: true,
                    broken: true,
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
                    ChunkType::ENVIRONMENT => match payload.iter().position(|&b| b == b'=') {
                        Some(eq) if eq > 0 => {
                            let name = payload.slice(..eq);
                            let value = payload.slice(eq + 1..);
                            h.request.env.push((name, value));
                        }
                        _ => h.request.skipped_env += 1,
                    },
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
                        let mut request = std::mem::take(&mut h.request);
                        request.command = payload;
                        self.phase = Phase::Running(Running {
                            credit_out: false,
                            stdin_eof: false,
                            gone: false,
                            broken: false,
                        });
                        self.events.push_back(ServerEvent::Launch(request));
                    }
                    // H, and whatever else a client sends before C, as the reference does.
                    _ => {}
                }
                Ok(())
            }
            Phase::Running(r) => match ty {
                ChunkType::HEARTBEAT => Ok(()),
                ChunkType::STDIN | ChunkType::STDIN_EOF if r.stdin_eof => {
                    Err(ProtocolError::StdinAfterEof)
                }
                ChunkType::STDIN => {
                    r.credit_out = false;
                    if !payload.is_empty() {
                        self.events.push_back(ServerEvent::Stdin(payload));
                    }
                    Ok(())
                }
                ChunkType::STDIN_EOF => {
                    r.credit_out = false;
                    r.stdin_eof = true;
                    self.events.push_back(ServerEvent::StdinEof);
                    Ok(())
                }
                ty => Err(ProtocolError::UnexpectedChunk {
                    state: "running",
                    ty,
                }),
            },
            Phase::Exited => Ok(()),
        }
    }

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
            Phase::Running(r) if !r.gone && !r.broken => {
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

    /// The command wants input: queues `S` unless one is outstanding or stdin has ended.
    /// Returns true if an `S` was queued.
    pub fn request_stdin(&mut self) -> bool {
        match &mut self.phase {
            Phase::Running(r) if !r.credit_out && !r.stdin_eof && !r.gone && !r.broken => {
                r.credit_out = true;
                encode(ChunkType::SEND_INPUT, b"", &mut self.tx);
                true
            }
            _ => false,
        }
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
        if !matches!(self.phase, Phase::Exited) {
            encode_stream(ty, data, self.config.max_output_chunk, &mut self.tx);
        }
    }

    /// Queues the one `X` chunk, `"<code>\n"`. Later calls are ignored: the first exit wins.
    pub fn exit(&mut self, code: i32) {
        if !matches!(self.phase, Phase::Exited) {
            encode(ChunkType::EXIT, &exit::format(code), &mut self.tx);
            self.phase = Phase::Exited;
        }
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
