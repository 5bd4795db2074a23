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

use crate::codec::{encode, encode_stream, ChunkHeader};
use crate::{exit, ChunkType, ProtocolError, HEADER_LEN, STDIN_CHUNK_LEN};
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How much of an `X` payload is parsed; the reference client reads at most this much.
const MAX_EXIT_PARSE: usize = 2047;

/// Client-side settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Send `H` when nothing was sent for this long. The reference C client uses 500 ms.
    pub heartbeat_interval: Duration,
    /// The largest `L` piece sent for a file argument.
    pub long_arg_piece: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_millis(500),
            long_arg_piece: STDIN_CHUNK_LEN,
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
}

/// The client's side of one Nailgun session. See the module docs.
#[derive(Debug)]
pub struct ClientSession {
    config: ClientConfig,
    phase: Phase,
    rx: Rx,
    credit: bool,
    stdin_closed: bool,
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
                    self.rx = match h.ty {
                        ChunkType::STDOUT | ChunkType::STDERR if h.len == 0 => Rx::Header,
                        ChunkType::STDOUT | ChunkType::STDERR => Rx::Data {
                            ty: h.ty,
                            remaining: h.len,
                        },
                        ChunkType::SEND_INPUT => {
                            self.grant_credit();
                            Rx::Skip { remaining: h.len }
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
                    let code = exit::parse(&buf[..wanted]);
                    self.phase = Phase::Exited(code);
                    self.events.push_back(ClientEvent::Exit(code));
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

    fn grant_credit(&mut self) {
        if !self.stdin_closed && !self.credit {
            self.credit = true;
            self.events.push_back(ClientEvent::StdinRequested);
        }
    }

    /// True while one stdin chunk may be sent.
    pub fn has_stdin_credit(&self) -> bool {
        self.credit && !self.stdin_closed && self.phase == Phase::Running
    }

    /// Queues one `0` chunk with `data` (which should be non-empty), spending the credit.
    pub fn send_stdin(&mut self, data: &[u8], now: Instant) -> StdinSend {
        let state = self.stdin_state();
        if state == StdinSend::Sent {
            encode(ChunkType::STDIN, data, &mut self.tx);
            self.credit = false;
            self.last_send = now;
        }
        state
    }

    /// Queues the `.` chunk, spending the credit; no more stdin can be sent after it.
    pub fn send_stdin_eof(&mut self, now: Instant) -> StdinSend {
        let state = self.stdin_state();
        if state == StdinSend::Sent {
            encode(ChunkType::STDIN_EOF, b"", &mut self.tx);
            self.credit = false;
            self.stdin_closed = true;
            self.last_send = now;
        }
        state
    }

    fn stdin_state(&self) -> StdinSend {
        if self.stdin_closed || self.phase != Phase::Running {
            StdinSend::Closed
        } else if !self.credit {
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
