//! One client connection: its socket, buffers, protocol session and lifecycle state.
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

use crate::session_io::SessionIo;
use crate::transport::{PeerAddr, Stream};
use bytes::BytesMut;
use ng_proto::ServerSession;
use std::sync::Arc;
use std::time::Instant;

/// The lifecycle of a connection. See the module docs.
#[derive(Debug)]
pub enum ConnState {
    /// Reading `A E D L H` until `C`.
    Header,
    /// A command runs.
    Running(Running),
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
            ConnState::Plugin(_) => "plugin",
            ConnState::Finishing => "finishing",
            ConnState::Draining { .. } => "draining",
            ConnState::Closed => "closed",
        }
    }
}

/// A running command, as the connection sees it.
#[derive(Debug)]
pub struct Running {
    /// Shared with the command's thread.
    pub io: Arc<SessionIo>,
    /// The resolved command name (for statistics and logs).
    pub command: String,
    /// The client forwarded a signal that ends a command, and the command was cancelled
    /// for it: the session ends as the signal would have ended a cold run.
    pub interrupted: Option<(ng_proto::ext::SignalName, i32)>,
}

/// A plugin command, as the connection sees it: waiting for a worker (holding its request
/// and any stdin sent meanwhile), then relayed to one.
#[derive(Debug)]
pub enum PluginState {
    /// Queued in its pool.
    Queued(Box<crate::plugin::Queued>),
    /// Bound to a worker's session until its `X`.
    Bound(crate::plugin::Bound),
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
        }
    }

    /// When this connection next needs the timer.
    pub fn deadline(&self) -> Option<Instant> {
        match &self.state {
            ConnState::Header | ConnState::Running(_) | ConnState::Plugin(_) => {
                self.session.poll_timeout()
            }
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
            ConnState::Plugin(PluginState::Bound(b)) => Some(b),
            _ => None,
        }
    }

    /// Ends the session as a cold run ends when `signal` kills it: a client that accepted
    /// `signals` dies of it; any other gets 128 + its number.
    pub fn finish_by_signal(&mut self, signal: &ng_proto::ext::SignalName, number: i32) {
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
}
