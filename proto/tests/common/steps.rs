//! Random-step harnesses for [`ServerSession`] and [`ClientSession`], each checked against a
//! small reference model after every step.
//!
//! A test (or a fuzz target) builds a list of steps, bytes from the peer, actions of the
//! local side and the passage of time, and runs them through [`ServerHarness`] or
//! [`ClientHarness`]. After each step the harness asserts (panics on failure):
//!
//! * that the session did exactly what the model predicts: the same events, the same error,
//!   the same bytes queued, the same deadline;
//! * protocol invariants checked on the session's own output, independently of the model:
//!   the server emits only `1 2 S X`, at most one `X` and nothing after it, never an `S`
//!   while one is outstanding, at most one `Launch`; the client sends its header once, then
//!   only `0 . H`, never stdin without an unspent `S`, nothing but `H` after `.`, nothing
//!   after the first `X`.
//!
//! Steps also have a compact byte encoding ([`decode_server_program`],
//! [`decode_client_program`]) so that the fuzz targets in `fuzz/` can drive the same
//! harnesses from arbitrary bytes; `fuzz/` includes this file with `#[path]`.

#![allow(dead_code)] // the fuzz targets and the tests each use part of it

use bytes::{Bytes, BytesMut};
use ng_proto::client_session::StdinSend;
use ng_proto::codec::{encode, to_bytes};
use ng_proto::server_session::DisconnectReason;
use ng_proto::{
    exit, ChunkType, ClientConfig, ClientEvent, ClientSession, DecodeError, Decoder, Header,
    HeaderArg, Limits, ProtocolError, Request, ServerConfig, ServerEvent, ServerSession,
    MAX_PAYLOAD_LEN,
};
use std::time::{Duration, Instant};

/// What the model charges per header item; must match the documented server rule.
const ITEM_OVERHEAD: usize = 16;
/// How much of an `X` payload a client parses.
const MAX_EXIT_PARSE: usize = 2047;

// ---------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------

/// One step of a server-side run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerStep {
    /// Raw bytes from the client.
    Bytes(Vec<u8>),
    /// One well-formed chunk from the client: type byte and payload.
    Chunk(u8, Vec<u8>),
    /// The command wants input.
    RequestStdin,
    /// The command writes to stdout.
    Stdout(Vec<u8>),
    /// The command writes to stderr.
    Stderr(Vec<u8>),
    /// The command exits.
    Exit(i32),
    /// This many milliseconds pass, then `handle_timeout`.
    Advance(u32),
    /// The client closed its side.
    Eof,
    /// The caller wrote this many bytes of the transmit queue.
    Written(usize),
}

/// The model's view of the server session.
#[derive(Debug)]
struct ServerModel {
    config: ServerConfig,
    /// Client bytes not yet taken as whole chunks.
    rbuf: Vec<u8>,
    header: bool,
    exited: bool,
    /// A protocol error happened: input is ignored from then on.
    broken: bool,
    request: Request,
    long_arg: Option<Vec<u8>>,
    used: usize,
    launched: bool,
    outstanding: bool,
    stdin_eof: bool,
    gone: bool,
    opened: Instant,
    last_rx: Instant,
    /// Every byte the session should have queued so far.
    tx: Vec<u8>,
}

impl ServerModel {
    fn max_len(&self) -> u32 {
        self.config.limits.max_chunk_len.min(MAX_PAYLOAD_LEN)
    }

    fn feed(&mut self, bytes: &[u8], now: Instant) -> (Vec<ServerEvent>, Option<ProtocolError>) {
        let mut events = Vec::new();
        if self.exited || self.broken {
            return (events, None);
        }
        self.rbuf.extend_from_slice(bytes);
        while self.rbuf.len() >= 5 {
            let len = u32::from_be_bytes([self.rbuf[0], self.rbuf[1], self.rbuf[2], self.rbuf[3]]);
            let ty = ChunkType(self.rbuf[4]);
            if len > self.max_len() {
                self.broken = true;
                let max = self.max_len();
                return (
                    events,
                    Some(DecodeError::ChunkTooLarge { len, max, ty }.into()),
                );
            }
            let end = 5 + len as usize;
            if self.rbuf.len() < end {
                break;
            }
            let payload = self.rbuf[5..end].to_vec();
            self.rbuf.drain(..end);
            self.last_rx = now;
            if let Err(e) = self.apply(ty, payload, &mut events) {
                self.broken = true;
                return (events, Some(e));
            }
        }
        (events, None)
    }

    fn apply(
        &mut self,
        ty: ChunkType,
        payload: Vec<u8>,
        events: &mut Vec<ServerEvent>,
    ) -> Result<(), ProtocolError> {
        if self.header {
            if ty != ChunkType::HEARTBEAT {
                self.used += payload.len() + ITEM_OVERHEAD;
                if self.used > self.config.max_header_bytes {
                    return Err(ProtocolError::HeaderTooLarge {
                        max: self.config.max_header_bytes,
                    });
                }
            }
            // An open `L` run ends at anything but another `L` (or an `H`).
            if ty != ChunkType::LONG_ARG && ty != ChunkType::HEARTBEAT {
                if let Some(long) = self.long_arg.take() {
                    self.request.args.push(long.into());
                }
            }
            match ty {
                ChunkType::ARGUMENT => self.request.args.push(payload.into()),
                ChunkType::ENVIRONMENT => match payload.iter().position(|&b| b == b'=') {
                    Some(eq) if eq > 0 => {
                        let value = payload[eq + 1..].to_vec();
                        let name = payload[..eq].to_vec();
                        self.request.env.push((name.into(), value.into()));
                    }
                    _ => self.request.skipped_env += 1,
                },
                ChunkType::WORKING_DIR => self.request.cwd = Some(payload.into()),
                ChunkType::LONG_ARG if payload.is_empty() => {
                    let long = self.long_arg.take().unwrap_or_default();
                    self.request.args.push(long.into());
                }
                ChunkType::LONG_ARG => self
                    .long_arg
                    .get_or_insert_with(Vec::new)
                    .extend_from_slice(&payload),
                ChunkType::COMMAND => {
                    let mut request = std::mem::take(&mut self.request);
                    request.command = payload.into();
                    self.header = false;
                    self.launched = true;
                    events.push(ServerEvent::Launch(request));
                }
                _ => {}
            }
            return Ok(());
        }
        match ty {
            ChunkType::HEARTBEAT => Ok(()),
            ChunkType::STDIN | ChunkType::STDIN_EOF if self.stdin_eof => {
                Err(ProtocolError::StdinAfterEof)
            }
            ChunkType::STDIN => {
                self.outstanding = false;
                if !payload.is_empty() {
                    events.push(ServerEvent::Stdin(payload.into()));
                }
                Ok(())
            }
            ChunkType::STDIN_EOF => {
                self.outstanding = false;
                self.stdin_eof = true;
                events.push(ServerEvent::StdinEof);
                Ok(())
            }
            ty => Err(ProtocolError::UnexpectedChunk {
                state: "running",
                ty,
            }),
        }
    }

    /// Whether the session is running a launched command whose client is still there.
    fn live(&self) -> bool {
        self.launched && !self.exited && !self.gone && !self.broken
    }

    fn deadline(&self) -> Option<Instant> {
        if self.exited || self.broken {
            None
        } else if self.header {
            self.config.header_timeout.map(|t| self.opened + t)
        } else if !self.gone {
            self.config.heartbeat_timeout.map(|t| self.last_rx + t)
        } else {
            None
        }
    }

    fn write(&mut self, ty: ChunkType, data: &[u8]) {
        if !self.exited {
            let piece = self.config.max_output_chunk.max(1);
            for part in data.chunks(piece) {
                self.tx.extend_from_slice(&to_bytes(ty, part));
            }
        }
    }
}

/// Runs [`ServerStep`]s through a [`ServerSession`] and checks it after each one.
#[derive(Debug)]
pub struct ServerHarness {
    session: ServerSession,
    model: ServerModel,
    now: Instant,
    rbuf: BytesMut,
    /// Bytes the caller already wrote to the socket.
    written: Vec<u8>,
    launches: usize,
    gone_events: usize,
    /// `S` sent and not yet answered by a `0` or `.` the session took in.
    s_outstanding: bool,
}

impl ServerHarness {
    /// A fresh session with `config`.
    pub fn new(config: ServerConfig) -> Self {
        let now = Instant::now();
        Self {
            session: ServerSession::new(config, now),
            model: ServerModel {
                config,
                rbuf: Vec::new(),
                header: true,
                exited: false,
                broken: false,
                request: Request::default(),
                long_arg: None,
                used: 0,
                launched: false,
                outstanding: false,
                stdin_eof: false,
                gone: false,
                opened: now,
                last_rx: now,
                tx: Vec::new(),
            },
            now,
            rbuf: BytesMut::new(),
            written: Vec::new(),
            launches: 0,
            gone_events: 0,
            s_outstanding: false,
        }
    }

    /// Runs all `steps`, then the final checks.
    pub fn run(config: ServerConfig, steps: &[ServerStep]) {
        let mut h = Self::new(config);
        for step in steps {
            h.step(step);
        }
        h.finish();
    }

    /// Applies one step and checks everything.
    pub fn step(&mut self, step: &ServerStep) {
        let mut want_events = Vec::new();
        let mut want_error = None;
        let mut got_error = None;
        match step {
            ServerStep::Bytes(bytes) => {
                (want_events, want_error) = self.model.feed(bytes, self.now);
                got_error = self.feed(bytes);
            }
            ServerStep::Chunk(ty, payload) => {
                let wire = to_bytes(ChunkType(*ty), payload);
                (want_events, want_error) = self.model.feed(&wire, self.now);
                got_error = self.feed(&wire);
            }
            ServerStep::RequestStdin => {
                let want = self.model.live() && !self.model.outstanding && !self.model.stdin_eof;
                let before = self.session.transmit().len();
                let got = self.session.request_stdin();
                assert_eq!(got, want, "request_stdin");
                if want {
                    self.model.outstanding = true;
                    self.model
                        .tx
                        .extend_from_slice(&to_bytes(ChunkType::SEND_INPUT, b""));
                }
                let added = self.session.transmit().len() - before;
                assert_eq!(added, if got { 5 } else { 0 }, "S queued iff requested");
                if got {
                    assert!(!self.s_outstanding, "a second S while one is outstanding");
                    self.s_outstanding = true;
                }
            }
            ServerStep::Stdout(data) => {
                self.model.write(ChunkType::STDOUT, data);
                self.session.write_stdout(data);
            }
            ServerStep::Stderr(data) => {
                self.model.write(ChunkType::STDERR, data);
                self.session.write_stderr(data);
            }
            ServerStep::Exit(code) => {
                if !self.model.exited {
                    self.model.exited = true;
                    self.model
                        .tx
                        .extend_from_slice(&to_bytes(ChunkType::EXIT, &exit::format(*code)));
                }
                self.session.exit(*code);
            }
            ServerStep::Advance(ms) => {
                self.now += Duration::from_millis(u64::from(*ms));
                if let Some(deadline) = self.model.deadline() {
                    if self.now >= deadline {
                        if self.model.header {
                            self.model.broken = true;
                            want_error = Some(ProtocolError::HeaderTimeout);
                        } else {
                            self.model.gone = true;
                            want_events
                                .push(ServerEvent::ClientGone(DisconnectReason::HeartbeatTimeout));
                        }
                    }
                }
                got_error = self.session.handle_timeout(self.now).err();
                if let Some(deadline) = self.session.poll_timeout() {
                    assert!(
                        deadline > self.now,
                        "deadline not in the future after a timeout"
                    );
                }
            }
            ServerStep::Eof => {
                if self.model.exited {
                } else if self.model.header && !self.model.broken {
                    self.model.broken = true;
                    want_error = Some(ProtocolError::EofBeforeCommand);
                } else if self.model.launched && !self.model.gone {
                    self.model.gone = true;
                    want_events.push(ServerEvent::ClientGone(DisconnectReason::Eof));
                }
                got_error = self.session.handle_eof().err();
            }
            ServerStep::Written(n) => {
                let n = (*n).min(self.session.transmit().len());
                self.written
                    .extend_from_slice(&self.session.transmit()[..n]);
                self.session.advance_transmit(n);
            }
        }
        let mut got_events = Vec::new();
        while let Some(ev) = self.session.poll_event() {
            got_events.push(ev);
        }
        assert_eq!(got_error, want_error, "error after {step:?}");
        assert_eq!(got_events, want_events, "events after {step:?}");
        self.check(&got_events);
    }

    fn feed(&mut self, bytes: &[u8]) -> Option<ProtocolError> {
        self.rbuf.extend_from_slice(bytes);
        self.session.handle_bytes(&mut self.rbuf, self.now).err()
    }

    fn check(&mut self, events: &[ServerEvent]) {
        for ev in events {
            match ev {
                ServerEvent::Launch(_) => self.launches += 1,
                ServerEvent::ClientGone(_) => self.gone_events += 1,
                ServerEvent::Stdin(_) | ServerEvent::StdinEof => {
                    assert_eq!(self.launches, 1, "stdin before launch");
                    self.s_outstanding = false;
                }
                // This harness never asks for a pseudo-terminal.
                ServerEvent::Pty => panic!("a pseudo-terminal nobody asked for"),
            }
        }
        // An empty `0` spends the credit too, but makes no event: ask the model.
        if !self.model.outstanding {
            self.s_outstanding = false;
        }
        assert!(self.launches <= 1, "more than one Launch");
        assert!(self.gone_events <= 1, "more than one ClientGone");
        if self.gone_events > 0 {
            assert_eq!(self.launches, 1, "ClientGone without a Launch");
        }

        // Output: exactly what the model queued, in whole chunks of the four server types.
        let mut all = self.written.clone();
        all.extend_from_slice(self.session.transmit());
        assert!(all == self.model.tx, "server output differs from the model");
        let chunks = whole_chunks(&all).expect("server output is whole chunks");
        let exits = chunks.iter().filter(|c| c.0 == ChunkType::EXIT).count();
        assert!(exits <= 1, "more than one X");
        assert_eq!(exits == 1, self.session.is_exited());
        if exits == 1 {
            assert_eq!(chunks.last().unwrap().0, ChunkType::EXIT, "X is not last");
        }
        for (ty, _) in &chunks {
            assert!(
                matches!(
                    *ty,
                    ChunkType::STDOUT | ChunkType::STDERR | ChunkType::SEND_INPUT | ChunkType::EXIT
                ),
                "server sent type {ty:?}"
            );
        }

        // Deadlines.
        assert_eq!(
            self.session.poll_timeout(),
            self.model.deadline(),
            "deadline"
        );
        if self.model.live() && self.model.config.heartbeat_timeout.is_some() {
            assert!(
                self.session.poll_timeout().is_some(),
                "no heartbeat deadline while running"
            );
        }
        assert_eq!(self.session.is_exited(), self.model.exited);
        assert_eq!(
            self.session.in_header(),
            self.model.header && !self.model.broken && !self.model.exited
        );
    }

    /// Final checks: everything queued is whole chunks ending in at most one `X`.
    pub fn finish(mut self) {
        let rest = self.session.take_transmit();
        self.written.extend_from_slice(&rest);
        assert!(self.written == self.model.tx);
    }
}

/// Splits bytes into whole `(type, payload)` chunks, or `None` if a partial chunk is left.
pub fn whole_chunks(bytes: &[u8]) -> Option<Vec<(ChunkType, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        if rest.len() < 5 {
            return None;
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if rest.len() < 5 + len {
            return None;
        }
        out.push((ChunkType(rest[4]), rest[5..5 + len].to_vec()));
        rest = &rest[5 + len..];
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------

/// One step of a client-side run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientStep {
    /// Send the header.
    SendHeader(Header),
    /// Raw bytes from the server.
    Bytes(Vec<u8>),
    /// One well-formed chunk from the server: type byte and payload.
    Chunk(u8, Vec<u8>),
    /// Stdin data to send, if there is credit.
    SendStdin(Vec<u8>),
    /// Stdin ended.
    SendEof,
    /// This many milliseconds pass, then `handle_timeout`.
    Advance(u32),
    /// The server closed the connection.
    Eof,
}

/// What a client must make of all the server bytes it took in, read from the start: a
/// non-incremental reading of the rules that the streaming session must agree with.
#[derive(Debug, Default)]
struct Reading {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// `S` headers seen before the end.
    sends: usize,
    exit: Option<i32>,
    bad: Option<ChunkType>,
}

fn read_all(input: &[u8]) -> Reading {
    let mut r = Reading::default();
    let mut rest = input;
    while rest.len() >= 5 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let ty = ChunkType(rest[4]);
        let body = &rest[5..];
        let avail = body.len().min(len);
        match ty {
            ChunkType::STDOUT => r.stdout.extend_from_slice(&body[..avail]),
            ChunkType::STDERR => r.stderr.extend_from_slice(&body[..avail]),
            ChunkType::SEND_INPUT => r.sends += 1,
            ChunkType::EXIT => {
                let wanted = len.min(MAX_EXIT_PARSE);
                if body.len() >= wanted {
                    r.exit = Some(exit::parse(&body[..wanted]));
                }
                return r;
            }
            _ => {
                r.bad = Some(ty);
                return r;
            }
        }
        if avail < len {
            return r;
        }
        rest = &body[len..];
    }
    r
}

/// Runs [`ClientStep`]s through a [`ClientSession`] and checks it after each one.
#[derive(Debug)]
pub struct ClientHarness {
    session: ClientSession,
    config: ClientConfig,
    now: Instant,
    rbuf: BytesMut,
    /// Every server byte the session took in before it ended.
    input: Vec<u8>,
    /// `X` taken, an error, or end of file: the session takes nothing more.
    ended: bool,
    exit: Option<i32>,
    header_sent: bool,
    last_send: Instant,
    credit: bool,
    stdin_closed: bool,
    sends_seen: usize,
    /// Stdout and stderr bytes the session passed on, and what the model expects.
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_want: Vec<u8>,
    stderr_want: Vec<u8>,
    exit_events: usize,
    /// Every byte the session queued.
    sent: Vec<u8>,
}

impl ClientHarness {
    /// A fresh session with `config`.
    pub fn new(config: ClientConfig) -> Self {
        let now = Instant::now();
        Self {
            session: ClientSession::new(config, now),
            config,
            now,
            rbuf: BytesMut::new(),
            input: Vec::new(),
            ended: false,
            exit: None,
            header_sent: false,
            last_send: now,
            credit: false,
            stdin_closed: false,
            sends_seen: 0,
            stdout: Vec::new(),
            stderr: Vec::new(),
            stdout_want: Vec::new(),
            stderr_want: Vec::new(),
            exit_events: 0,
            sent: Vec::new(),
        }
    }

    /// Runs all `steps`.
    pub fn run(config: ClientConfig, steps: &[ClientStep]) {
        let mut h = Self::new(config);
        for step in steps {
            h.step(step);
        }
    }

    fn running(&self) -> bool {
        self.header_sent && !self.ended
    }

    /// The bytes a header must encode to, written out independently of the session.
    fn header_bytes(&self, header: &Header) -> BytesMut {
        let mut out = BytesMut::new();
        for arg in &header.args {
            match arg {
                HeaderArg::Plain(a) => encode(ChunkType::ARGUMENT, a, &mut out),
                HeaderArg::File(data) => {
                    for piece in data.chunks(self.config.long_arg_piece.max(1)) {
                        encode(ChunkType::LONG_ARG, piece, &mut out);
                    }
                    encode(ChunkType::LONG_ARG, b"", &mut out);
                }
            }
        }
        for e in &header.env {
            encode(ChunkType::ENVIRONMENT, e, &mut out);
        }
        encode(ChunkType::WORKING_DIR, &header.cwd, &mut out);
        encode(ChunkType::COMMAND, &header.command, &mut out);
        out
    }

    /// Applies one step and checks everything.
    pub fn step(&mut self, step: &ClientStep) {
        let mut want_tx = BytesMut::new();
        let mut want_requests = 0;
        let mut want_error = None;
        let mut got_error = None;
        match step {
            ClientStep::SendHeader(header) => {
                if !self.header_sent && !self.ended {
                    want_tx = self.header_bytes(header);
                    self.header_sent = true;
                    self.last_send = self.now;
                }
                self.session.send_header(header, self.now);
            }
            ClientStep::Bytes(bytes) => {
                (want_requests, want_error) = self.take(bytes);
                got_error = self.feed(bytes);
            }
            ClientStep::Chunk(ty, payload) => {
                let wire = to_bytes(ChunkType(*ty), payload);
                (want_requests, want_error) = self.take(&wire);
                got_error = self.feed(&wire);
            }
            ClientStep::SendStdin(data) => {
                let want = self.stdin_state();
                if want == StdinSend::Sent {
                    encode(ChunkType::STDIN, data, &mut want_tx);
                    self.credit = false;
                    self.last_send = self.now;
                }
                assert_eq!(self.session.has_stdin_credit(), want == StdinSend::Sent);
                assert_eq!(self.session.send_stdin(data, self.now), want);
            }
            ClientStep::SendEof => {
                let want = self.stdin_state();
                if want == StdinSend::Sent {
                    encode(ChunkType::STDIN_EOF, b"", &mut want_tx);
                    self.credit = false;
                    self.stdin_closed = true;
                    self.last_send = self.now;
                }
                assert_eq!(self.session.send_stdin_eof(self.now), want);
            }
            ClientStep::Advance(ms) => {
                self.now += Duration::from_millis(u64::from(*ms));
                if self.running() && self.now >= self.last_send + self.config.heartbeat_interval {
                    encode(ChunkType::HEARTBEAT, b"", &mut want_tx);
                    self.last_send = self.now;
                }
                self.session.handle_timeout(self.now);
            }
            ClientStep::Eof => {
                if self.exit.is_none() {
                    want_error = Some(ProtocolError::EofBeforeExit);
                }
                self.ended = true;
                got_error = self.session.handle_eof().err();
            }
        }
        assert_eq!(got_error, want_error, "error after {step:?}");

        let mut requests = 0;
        while let Some(ev) = self.session.poll_event() {
            assert_eq!(self.exit_events, 0, "event {ev:?} after Exit");
            match ev {
                ClientEvent::Stdout(b) => self.stdout.extend_from_slice(&b),
                ClientEvent::Stderr(b) => self.stderr.extend_from_slice(&b),
                ClientEvent::StdinRequested => requests += 1,
                ClientEvent::Exit(code) => {
                    self.exit_events += 1;
                    assert_eq!(Some(code), self.exit, "exit code");
                }
                // This harness's client announces nothing, so the server's extension
                // chunks are protocol errors and these never come.
                ClientEvent::Extensions(_)
                | ClientEvent::Stopped(_)
                | ClientEvent::PtyWanted
                | ClientEvent::ExitBySignal { .. } => panic!("extension event {ev:?}"),
            }
        }
        assert_eq!(
            requests, want_requests,
            "StdinRequested events after {step:?}"
        );
        assert!(
            self.stdout == self.stdout_want,
            "stdout differs after {step:?}"
        );
        assert!(
            self.stderr == self.stderr_want,
            "stderr differs after {step:?}"
        );
        assert_eq!(
            self.exit_events,
            usize::from(self.exit.is_some()),
            "Exit events"
        );
        assert_eq!(self.session.exit_code(), self.exit);

        let tx = self.session.take_transmit();
        assert_eq!(&tx[..], &want_tx[..], "bytes sent after {step:?}");
        self.sent.extend_from_slice(&tx);
        self.check_sent();

        let want_deadline = self
            .running()
            .then(|| self.last_send + self.config.heartbeat_interval);
        assert_eq!(
            self.session.poll_timeout(),
            want_deadline,
            "heartbeat deadline"
        );
    }

    fn stdin_state(&self) -> StdinSend {
        if self.stdin_closed || !self.running() {
            StdinSend::Closed
        } else if !self.credit {
            StdinSend::NoCredit
        } else {
            StdinSend::Sent
        }
    }

    /// The model takes server bytes: how many `StdinRequested` events and which error.
    fn take(&mut self, bytes: &[u8]) -> (usize, Option<ProtocolError>) {
        if self.ended {
            return (0, None);
        }
        self.input.extend_from_slice(bytes);
        let r = read_all(&self.input);
        let mut requests = 0;
        if r.sends > self.sends_seen && !self.credit && !self.stdin_closed {
            self.credit = true;
            requests = 1;
        }
        self.sends_seen = r.sends;
        let mut error = None;
        if let Some(code) = r.exit {
            self.exit = Some(code);
            self.ended = true;
        } else if let Some(ty) = r.bad {
            self.ended = true;
            error = Some(ProtocolError::UnexpectedChunk {
                state: "running",
                ty,
            });
        }
        self.stdout_want = r.stdout;
        self.stderr_want = r.stderr;
        (requests, error)
    }

    fn feed(&mut self, bytes: &[u8]) -> Option<ProtocolError> {
        self.rbuf.extend_from_slice(bytes);
        self.session.handle_bytes(&mut self.rbuf).err()
    }

    /// Checks the whole client output so far against the protocol's rules, without the model.
    fn check_sent(&self) {
        let chunks = whole_chunks(&self.sent).expect("client output is whole chunks");
        let mut iter = chunks.iter().map(|(ty, _)| *ty).peekable();
        if iter.peek().is_some() {
            // The header: A/L/E/D, then C.
            loop {
                match iter.next() {
                    Some(ChunkType::COMMAND) => break,
                    Some(
                        ChunkType::ARGUMENT
                        | ChunkType::LONG_ARG
                        | ChunkType::ENVIRONMENT
                        | ChunkType::WORKING_DIR,
                    ) => {}
                    other => panic!("header chunk {other:?}"),
                }
            }
        }
        let mut eof = false;
        for ty in iter {
            match ty {
                ChunkType::HEARTBEAT => {}
                ChunkType::STDIN | ChunkType::STDIN_EOF => {
                    assert!(!eof, "stdin after .");
                    eof = ty == ChunkType::STDIN_EOF;
                }
                ty => panic!("client sent {ty:?} after the header"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Byte encodings of step lists, for the fuzz targets and their seed corpus
// ---------------------------------------------------------------------------------------

/// Reads a program's bytes; missing bytes read as 0 / empty.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn bytes(&mut self) -> Vec<u8> {
        let n = usize::from(self.byte()).min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head.to_vec()
    }
}

/// The server configuration a program's first byte selects.
pub fn server_config(flags: u8) -> ServerConfig {
    let d = ServerConfig::default();
    ServerConfig {
        limits: Limits {
            max_chunk_len: if flags & 1 != 0 {
                64
            } else {
                d.limits.max_chunk_len
            },
        },
        max_header_bytes: if flags & 2 != 0 {
            300
        } else {
            d.max_header_bytes
        },
        header_timeout: if flags & 4 != 0 {
            None
        } else {
            d.header_timeout
        },
        heartbeat_timeout: if flags & 8 != 0 {
            None
        } else {
            d.heartbeat_timeout
        },
        max_output_chunk: if flags & 16 != 0 {
            7
        } else {
            d.max_output_chunk
        },
    }
}

/// Decodes a server program: a flags byte for [`server_config`], then steps.
pub fn decode_server_program(data: &[u8]) -> (ServerConfig, Vec<ServerStep>) {
    let mut r = Reader(data);
    let config = server_config(r.byte());
    let mut steps = Vec::new();
    while !r.0.is_empty() {
        steps.push(match r.byte() % 9 {
            0 => ServerStep::Bytes(r.bytes()),
            1 => {
                let ty = r.byte();
                ServerStep::Chunk(ty, r.bytes())
            }
            2 => ServerStep::RequestStdin,
            3 => ServerStep::Stdout(r.bytes()),
            4 => ServerStep::Stderr(r.bytes()),
            5 => ServerStep::Exit(i32::from(i16::from_be_bytes([r.byte(), r.byte()]))),
            6 => ServerStep::Advance(u32::from(r.byte()) * 100),
            7 => ServerStep::Eof,
            _ => ServerStep::Written(usize::from(r.byte())),
        });
    }
    (config, steps)
}

fn put_bytes(out: &mut Vec<u8>, op: u8, data: &[u8]) {
    for piece in data.chunks(255) {
        out.push(op);
        out.push(piece.len() as u8);
        out.extend_from_slice(piece);
    }
}

/// Encodes server steps as a program (the inverse of [`decode_server_program`] for steps it
/// can express: long data is cut into several steps, exit codes are clamped to `i16`).
pub fn encode_server_program(flags: u8, steps: &[ServerStep]) -> Vec<u8> {
    let mut out = vec![flags];
    for step in steps {
        match step {
            ServerStep::Bytes(b) => put_bytes(&mut out, 0, b),
            ServerStep::Chunk(ty, b) => {
                out.extend_from_slice(&[1, *ty, b.len().min(255) as u8]);
                out.extend_from_slice(&b[..b.len().min(255)]);
            }
            ServerStep::RequestStdin => out.push(2),
            ServerStep::Stdout(b) => put_bytes(&mut out, 3, b),
            ServerStep::Stderr(b) => put_bytes(&mut out, 4, b),
            ServerStep::Exit(code) => {
                out.push(5);
                let code = (*code).clamp(i16::MIN.into(), i16::MAX.into()) as i16;
                out.extend_from_slice(&code.to_be_bytes());
            }
            ServerStep::Advance(ms) => out.extend_from_slice(&[6, (*ms / 100).min(255) as u8]),
            ServerStep::Eof => out.push(7),
            ServerStep::Written(n) => out.extend_from_slice(&[8, (*n).min(255) as u8]),
        }
    }
    out
}

/// The client configuration a program's first byte selects.
pub fn client_config(flags: u8) -> ClientConfig {
    ClientConfig {
        long_arg_piece: if flags & 1 != 0 {
            3
        } else {
            ClientConfig::default().long_arg_piece
        },
        ..ClientConfig::default()
    }
}

/// Decodes a client program: a flags byte for [`client_config`], then steps.
pub fn decode_client_program(data: &[u8]) -> (ClientConfig, Vec<ClientStep>) {
    let mut r = Reader(data);
    let config = client_config(r.byte());
    let mut steps = Vec::new();
    while !r.0.is_empty() {
        steps.push(match r.byte() % 7 {
            0 => ClientStep::Bytes(r.bytes()),
            1 => {
                let ty = r.byte();
                ClientStep::Chunk(ty, r.bytes())
            }
            2 => {
                let command = r.bytes();
                let args = (0..r.byte() % 8)
                    .map(|_| {
                        let kind = r.byte();
                        let data = r.bytes();
                        if kind & 1 != 0 {
                            HeaderArg::File(data)
                        } else {
                            HeaderArg::Plain(data)
                        }
                    })
                    .collect();
                let env = (0..r.byte() % 8).map(|_| r.bytes()).collect();
                let cwd = r.bytes();
                ClientStep::SendHeader(Header {
                    command,
                    args,
                    env,
                    cwd,
                })
            }
            3 => ClientStep::SendStdin(r.bytes()),
            4 => ClientStep::SendEof,
            5 => ClientStep::Advance(u32::from(r.byte()) * 10),
            _ => ClientStep::Eof,
        });
    }
    (config, steps)
}

fn put_field(out: &mut Vec<u8>, data: &[u8]) {
    let n = data.len().min(255);
    out.push(n as u8);
    out.extend_from_slice(&data[..n]);
}

/// Encodes client steps as a program (long fields are truncated to 255 bytes, and at most
/// 7 arguments and 7 environment entries are kept).
pub fn encode_client_program(flags: u8, steps: &[ClientStep]) -> Vec<u8> {
    let mut out = vec![flags];
    for step in steps {
        match step {
            ClientStep::Bytes(b) => put_bytes(&mut out, 0, b),
            ClientStep::Chunk(ty, b) => {
                out.extend_from_slice(&[1, *ty]);
                put_field(&mut out, b);
            }
            ClientStep::SendHeader(h) => {
                out.push(2);
                put_field(&mut out, &h.command);
                out.push(h.args.len().min(7) as u8);
                for arg in h.args.iter().take(7) {
                    match arg {
                        HeaderArg::Plain(a) => {
                            out.push(0);
                            put_field(&mut out, a);
                        }
                        HeaderArg::File(a) => {
                            out.push(1);
                            put_field(&mut out, a);
                        }
                    }
                }
                out.push(h.env.len().min(7) as u8);
                for e in h.env.iter().take(7) {
                    put_field(&mut out, e);
                }
                put_field(&mut out, &h.cwd);
            }
            ClientStep::SendStdin(b) => {
                out.push(3);
                put_field(&mut out, b);
            }
            ClientStep::SendEof => out.push(4),
            ClientStep::Advance(ms) => out.extend_from_slice(&[5, (*ms / 10).min(255) as u8]),
            ClientStep::Eof => out.push(6),
        }
    }
    out
}

/// Checks one [`Decoder::decode`] call on arbitrary bytes: it takes exactly one whole chunk
/// (which re-encodes to the bytes taken) or nothing, and agrees with `bytes_needed`.
/// Returns the chunk, if one was taken.
pub fn check_decode_once(
    limits: Limits,
    buf: &mut BytesMut,
) -> Result<Option<(ChunkType, Bytes)>, DecodeError> {
    let mut decoder = Decoder::new(limits);
    let before = buf.clone();
    let needed = decoder.bytes_needed(&before);
    let result = decoder.decode(buf);
    match &result {
        Ok(Some(chunk)) => {
            let used = before.len() - buf.len();
            assert_eq!(
                used,
                5 + chunk.payload.len(),
                "took more or less than one chunk"
            );
            assert_eq!(&to_bytes(chunk.ty, &chunk.payload)[..], &before[..used]);
            assert_eq!(&buf[..], &before[used..]);
            assert_eq!(needed, Ok(0));
        }
        Ok(None) => {
            assert_eq!(&buf[..], &before[..], "Ok(None) consumed bytes");
            let n = needed.expect("bytes_needed agrees");
            assert!(n > 0);
            assert!(before.len() + n >= 5);
        }
        Err(e) => {
            assert_eq!(&buf[..], &before[..], "an error consumed bytes");
            assert_eq!(needed.as_ref().err(), Some(e));
            let DecodeError::ChunkTooLarge { len, max, ty } = e.clone() else {
                panic!("unknown error {e:?}");
            };
            assert!(len > max && max <= MAX_PAYLOAD_LEN);
            assert_eq!(ty.0, before[4]);
            assert_eq!(
                len,
                u32::from_be_bytes([before[0], before[1], before[2], before[3]])
            );
        }
    }
    result.map(|c| c.map(|c| (c.ty, c.payload)))
}
