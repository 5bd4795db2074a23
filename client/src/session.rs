//! The I/O loop around [`ClientSession`]: one session from header to exit code.
//!
//! # Threads and who writes the socket
//!
//! * The **main thread** sends the header, then reads the socket, feeds the bytes to the
//!   session, writes `1`/`2` payloads to fds 1 and 2 as the pieces arrive (no buffering:
//!   a prompt without a newline shows at once), and sends heartbeats.
//! * The **stdin thread** starts at the first `S`, never earlier, so an interactive terminal
//!   is not read unless the command asks. For each credit it does one plain `read(2)` of at
//!   most 2048 bytes on fd 0 (regular files, pipes and terminals alike; epoll would refuse
//!   regular files), and sends one `0` chunk, or `.` at end of file.
//!
//! Both threads write the socket, so writes are serialised: the [`ClientSession`] lives in a
//! mutex, and whoever queues a chunk takes the session's bytes and writes them with one
//! `write_all` before letting go of the lock. Chunks therefore leave whole and in order. A
//! condition variable wakes the stdin thread when an `S` grants credit.
//!
//! # The main loop and heartbeats
//!
//! The main thread waits for the socket with `ppoll`, which also lets the caught signals
//! in ([`Catcher`]), with a timeout at the next heartbeat deadline: `H` goes out when
//! nothing was sent for 500 ms ([`ClientSession::poll_timeout`]), checked after every read,
//! so heartbeats also flow while output streams in. A heartbeat that fails with `EPIPE`/`ECONNRESET` is ignored
//! (the server may have just sent `X`).
//!
//! # Extensions
//!
//! The header announces features ([`crate::request::Extensions`]); on a Unix socket it
//! carries fds 0, 1, 2 (`SCM_RIGHTS`, attached to its first byte). What the server honours
//! arrives as [`ClientEvent::Extensions`] before anything else. If it took the descriptors,
//! the command reads and writes them itself: no `S` and no output chunks come, and this
//! loop only forwards signals and waits for `X`. With `ctty` also accepted, the loop
//! relays the pseudo-terminal ([`crate::pty::Relay`]) between socket reads: window
//! changes go to it instead of `W`, a stop restores the terminal's modes first, and `X`
//! is acted on once the command's last output is shown. With `stdin-window`, `S` grants
//! bytes and the stdin thread reads up to [`WINDOW_READ_LEN`] at a time.
//!
//! # How the session ends
//!
//! * The first `X`: the output before it has been written (writes are unbuffered), and the
//!   status is `code & 0xFF`. Anything after it is ignored.
//! * The server closes or resets the connection before `X`: `recv: <reason>`, 227.
//! * A chunk type a server may not send: `Unexpected chunk type N ('c')`, 229, after the
//!   output that came before it.
//! * Our stdout (or stderr) is a pipe whose reader is gone (`EPIPE`; `ng` ignores SIGPIPE
//!   while it runs): no message; `main` then dies by SIGPIPE, as the C client does (status
//!   141 in a shell). Dying closes the socket, so the server sees the disconnect.
//! * Reading stdin fails: the stdin thread records `read: <reason>` and shuts the socket
//!   down, which wakes the main thread to report it (227).
//!
//! # Signals
//!
//! The forwarded signals ([`crate::signals::FORWARDED`]) are caught while the main thread
//! waits ([`crate::signals::Catcher`]). What happens to one depends on the server's answer:
//!
//! * `signals` accepted: `K <SIGNAME>` to the server. `SIGWINCH` becomes `W` with the new
//!   size when `winsize` is accepted. `SIGTSTP` is forwarded, then the client stops itself
//!   the same way; once continued it sends `K SIGCONT` (exactly one, whether or not the
//!   shell's `SIGCONT` is still pending) and the current window size. `Z` from the server
//!   (the command stopped itself) stops the client the same way.
//! * Anything else (a stock server, or no `signals`): the signal's default action, so
//!   `^C` kills the client as it always did, the kernel closes the socket and the server
//!   cancels the command.
//! * Before the server's first chunk it is not known yet: signals wait for it, at most
//!   [`DECIDE_WITHIN`] (ngd answers at once; a stock server may stay silent until its
//!   command exits), then get their default action.
//!
//! A death by signal reported in `X` ([`ClientEvent::ExitBySignal`]) ends the session with
//! [`Ending::Signal`]: `main` re-raises it ([`crate::signals::die_by`]).

use crate::exit::ClientError;
use crate::io::{read_stdin, write_out};
use crate::pty::{Relay, Terminal};
use crate::signals::{self, Catcher};
use crate::transport::Socket;
use ng_proto::bytes::BytesMut;
use ng_proto::{exit, ClientConfig, ClientEvent, ClientSession, Features, Header, ProtocolError};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How much the main thread asks the socket for per read.
const READ_LEN: usize = 64 * 1024;

/// Below this much free space the read buffer is grown (or compacted) before a read.
const MIN_SPARE: usize = 4096;

/// With `stdin-window`, the most the stdin thread reads at once.
pub const WINDOW_READ_LEN: usize = 128 * 1024;

/// How long a signal waits for the server's first chunk before it gets its default
/// action (see "Signals" above).
pub const DECIDE_WITHIN: Duration = Duration::from_millis(250);

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Exit with this status.
    Status(u8),
    /// The server says to run the program a shim stands for directly (`F exec`).
    Exec,
    /// The command died of signal `signo`: die the same way (`status` if that fails).
    Signal {
        /// The signal's number here.
        signo: libc::c_int,
        /// The command dumped core.
        core: bool,
        /// The classic status.
        status: u8,
    },
}

/// What the session needs besides the header.
#[derive(Debug)]
pub struct Options {
    /// The features the header announces.
    pub announced: Features,
    /// The descriptors to attach to the header (`SCM_RIGHTS`), in `NGD_CLIENT_FDS` order.
    pub fds: Vec<RawFd>,
    /// With `ctty`: the terminal a pseudo-terminal is offered for (`NGD_CLIENT_PTY`),
    /// opened when the server asks for it.
    pub pty: Option<Terminal>,
    /// The forwarded signals' catcher, armed, if it could be set up.
    pub catcher: Option<Catcher>,
}

/// What the main thread and the stdin thread share.
#[derive(Debug)]
struct Shared {
    /// The connection; read by the main thread only, written under `state`'s lock.
    socket: Socket,
    /// The protocol state. Holding the lock is also the right to write the socket.
    state: Mutex<State>,
    /// Signalled when an `S` grants stdin credit.
    credit: Condvar,
}

#[derive(Debug)]
struct State {
    session: ClientSession,
    /// A failure of the stdin thread, reported by the main thread once the socket (shut
    /// down by the stdin thread) wakes it.
    failure: Option<ClientError>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking thread cannot leave the session half-updated in a way that matters
        // here; keep going with whatever state there is.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes whatever the session has queued. Call with the lock held.
    fn flush(&self, state: &mut State) -> io::Result<()> {
        if !state.session.has_transmit() {
            return Ok(());
        }
        let bytes = state.session.take_transmit();
        self.socket.write_all(&bytes)
    }
}

/// Runs one session on a connected socket and returns how it ended.
pub fn run(socket: Socket, header: &Header, options: Options) -> Result<Ending, ClientError> {
    let now = Instant::now();
    let config = ClientConfig {
        announced: options.announced,
        ..ClientConfig::default()
    };
    let mut session = ClientSession::new(config, now);
    session.send_header(header, now);
    // A failed header write is not fatal yet: the server may have answered (say, refused
    // us with a message and an exit code) before closing. It is reported if no `X` comes.
    let header_error = socket
        .write_all_with_fds(&session.take_transmit(), &options.fds)
        .err();
    let shared = Arc::new(Shared {
        socket,
        state: Mutex::new(State {
            session,
            failure: None,
        }),
        credit: Condvar::new(),
    });
    MainLoop {
        shared,
        rbuf: BytesMut::with_capacity(READ_LEN),
        stdin_started: false,
        header_error,
        catcher: options.catcher,
        pending: Vec::new(),
        decide_by: None,
        terminal: options.pty,
        relay: None,
        pollfds: Vec::new(),
    }
    .run()
}

/// The main thread's side of the session.
#[derive(Debug)]
struct MainLoop {
    shared: Arc<Shared>,
    /// Bytes read but not yet consumed by the session (at most a partial chunk header or
    /// exit payload between reads; output payloads are passed on as they arrive).
    rbuf: BytesMut,
    stdin_started: bool,
    header_error: Option<io::Error>,
    catcher: Option<Catcher>,
    /// Signals caught before the server's first chunk.
    pending: Vec<libc::c_int>,
    /// When pending signals get their default action if the server is still silent.
    decide_by: Option<Instant>,
    /// The terminal a pseudo-terminal is offered for, until the server asks for it.
    terminal: Option<Terminal>,
    /// The pseudo-terminal passed with `ctty`; relaying once the server accepted it,
    /// dropped (closed) if it did not.
    relay: Option<Relay>,
    /// The descriptors of the last wait: the socket, then the relay's.
    pollfds: Vec<libc::pollfd>,
}

impl MainLoop {
    fn run(mut self) -> Result<Ending, ClientError> {
        let mut events = Vec::new();
        loop {
            let heartbeat = self.heartbeat()?;
            let deadline = match (heartbeat, self.decide_by) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let (socket_ready, signal_ready) = self.wait(deadline)?;
            if let Some(relay) = &mut self.relay {
                relay.service(&self.pollfds[1..])?;
                for signo in relay.take_signals() {
                    self.on_signal(signo)?;
                }
            }
            if self.decide_by.is_some_and(|d| Instant::now() >= d) {
                self.decide_by = None;
                for signo in std::mem::take(&mut self.pending) {
                    default_action(signo);
                }
            }
            if signal_ready {
                while let Some(signo) = self.catcher.as_ref().and_then(Catcher::next) {
                    self.on_signal(signo)?;
                }
            }
            if !socket_ready {
                continue;
            }
            if self.rbuf.capacity() - self.rbuf.len() < MIN_SPARE {
                self.rbuf.reserve(READ_LEN);
            }
            match self.shared.socket.read_into(&mut self.rbuf) {
                Ok(0) => return Err(self.closed(None)),
                Ok(_) => self.shared.socket.ack_now(),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(self.closed(Some(e))),
            }

            let result = {
                let mut state = self.shared.lock();
                let result = state.session.handle_bytes(&mut self.rbuf);
                events.extend(std::iter::from_fn(|| state.session.poll_event()));
                result
            };
            for event in events.drain(..) {
                match event {
                    ClientEvent::Stdout(data) => write_out(libc::STDOUT_FILENO, &data)?,
                    ClientEvent::Stderr(data) => write_out(libc::STDERR_FILENO, &data)?,
                    ClientEvent::StdinRequested => self.stdin_requested()?,
                    ClientEvent::Exit(code) => {
                        self.drain()?;
                        return Ok(Ending::Status(exit::status(code)));
                    }
                    ClientEvent::ExitBySignal { code, signal, core } => {
                        self.drain()?;
                        let status = exit::status(code);
                        return Ok(match signals::number_of(&signal) {
                            Some(signo) => Ending::Signal {
                                signo,
                                core,
                                status,
                            },
                            None => Ending::Status(status),
                        });
                    }
                    ClientEvent::Extensions(accepted) if accepted.contains(Features::EXEC) => {
                        // Run it yourself: `ng` is replaced by the program (main.rs); what
                        // it caught meanwhile gets the default action first.
                        if let Some(catcher) = self.catcher.take() {
                            catcher.release();
                        }
                        for signo in std::mem::take(&mut self.pending) {
                            default_action(signo);
                        }
                        return Ok(Ending::Exec);
                    }
                    ClientEvent::Extensions(accepted) => {
                        self.start_relay(accepted)?;
                        self.decide_by = None;
                        for signo in std::mem::take(&mut self.pending) {
                            self.on_signal(signo)?;
                        }
                    }
                    ClientEvent::Stopped(signal) => {
                        if let Some(signo) = signals::number_of(&signal) {
                            self.stop_and_resume(signo)?;
                        }
                    }
                    ClientEvent::PtyWanted => self.send_pty()?,
                }
            }
            if let Err(e) = result {
                return Err(protocol_error(e));
            }
        }
    }

    /// Waits until the socket is readable, a caught signal arrives, or `deadline`. Returns
    /// whether the socket is ready and whether a signal is waiting.
    fn wait(&mut self, deadline: Option<Instant>) -> Result<(bool, bool), ClientError> {
        let pending = || self.catcher.as_ref().is_some_and(Catcher::pending);
        let timeout = match deadline {
            // A signal that is already waiting makes this only a look at the socket.
            _ if pending() => Some(Duration::ZERO),
            None => None,
            Some(d) => Some(d.saturating_duration_since(Instant::now())),
        };
        let mask = self.catcher.as_ref().and_then(Catcher::wait_mask);
        let fds = &mut self.pollfds;
        fds.clear();
        fds.push(libc::pollfd {
            fd: self.shared.socket.as_raw(),
            events: libc::POLLIN,
            revents: 0,
        });
        if let Some(relay) = &self.relay {
            relay.poll_fds(fds);
        }
        // The caught signals are unblocked for the wait only, so their handler runs here.
        if let Err(err) = ng_sys::fd::ppoll(fds, timeout, mask) {
            fds.iter_mut().for_each(|p| p.revents = 0);
            if err.kind() == io::ErrorKind::Interrupted {
                return Ok((false, pending()));
            }
            return Err(ClientError::broken("poll", &err));
        }
        Ok((fds[0].revents != 0, pending()))
    }

    /// The server asks for the offered pseudo-terminal: it is opened and its slave passed
    /// with `P` (nothing rides with `P` if none can be had: the command then runs on the
    /// terminal itself). `ng` keeps no copy of the slave, so the relay sees its end.
    fn send_pty(&mut self) -> Result<(), ClientError> {
        let opened = self.terminal.take().and_then(|t| t.open_pty().ok());
        let fds: Vec<RawFd> = opened.iter().map(|(_, slave)| slave.as_raw_fd()).collect();
        {
            let mut state = self.shared.lock();
            state.session.send_pty(Instant::now());
            let bytes = state.session.take_transmit();
            self.shared
                .socket
                .write_all_with_fds(&bytes, &fds)
                .map_err(|e| ClientError::broken("write", &e))?;
        }
        self.relay = opened.map(|(relay, _slave)| relay);
        Ok(())
    }

    /// The server's answer came: with `ctty` the relay starts, otherwise a
    /// pseudo-terminal passed with `P` is closed unused. No `P` comes after `F`: the
    /// terminal kept for one is let go.
    fn start_relay(&mut self, accepted: Features) -> Result<(), ClientError> {
        self.terminal = None;
        match &mut self.relay {
            Some(relay) if accepted.contains(Features::CTTY) => relay
                .start()
                .map_err(|e| ClientError::broken("terminal", &e)),
            _ => {
                self.relay = None;
                Ok(())
            }
        }
    }

    /// After `X`: the command's last output through the relay, and the terminal's modes
    /// back.
    fn drain(&mut self) -> Result<(), ClientError> {
        match &mut self.relay {
            Some(relay) => relay.drain(),
            None => Ok(()),
        }
    }

    /// Acts on one caught signal.
    fn on_signal(&mut self, signo: libc::c_int) -> Result<(), ClientError> {
        let accepted = self.shared.lock().session.extensions();
        match accepted {
            None => {
                self.pending.push(signo);
                self.decide_by
                    .get_or_insert_with(|| Instant::now() + DECIDE_WITHIN);
                Ok(())
            }
            Some(f) if f.contains(Features::SIGNALS) => self.forward(signo, f),
            Some(_) => {
                default_action(signo);
                Ok(())
            }
        }
    }

    /// Forwards a signal to a server that accepted `signals`.
    fn forward(&mut self, signo: libc::c_int, accepted: Features) -> Result<(), ClientError> {
        if signo == libc::SIGTSTP {
            self.send_signal(libc::SIGTSTP)?;
            return self.stop_and_resume(libc::SIGTSTP);
        }
        if let Some(relay) = self.relay.as_mut().filter(|r| r.relaying()) {
            match signo {
                // The pseudo-terminal takes the size; the kernel signals its foreground.
                libc::SIGWINCH => {
                    relay.resize();
                    return Ok(());
                }
                // Continued by the shell (`fg` after `bg`): the keyboard may be ours again.
                libc::SIGCONT => relay.resume(),
                _ => {}
            }
        }
        if signo == libc::SIGWINCH && accepted.contains(Features::WINSIZE) {
            return self.send_window_size();
        }
        self.send_signal(signo)
    }

    /// Stops the client with `signo`; once continued, tells the server to continue the
    /// command (one `K SIGCONT`, taking the shell's pending `SIGCONT` if there is one) and
    /// sends the window size, which may have changed meanwhile.
    fn stop_and_resume(&mut self, signo: libc::c_int) -> Result<(), ClientError> {
        if let Some(relay) = &mut self.relay {
            relay.suspend()?;
        }
        signals::stop_by(signo);
        if let Some(catcher) = &self.catcher {
            catcher.take_cont();
        }
        if let Some(relay) = self.relay.as_mut().filter(|r| r.relaying()) {
            // Raw again, and the pseudo-terminal has the current size.
            relay.resume();
            return self.send_signal(libc::SIGCONT);
        }
        self.send_signal(libc::SIGCONT)?;
        let accepted = self.shared.lock().session.extensions().unwrap_or_default();
        if accepted.contains(Features::WINSIZE) {
            self.send_window_size()?;
        }
        Ok(())
    }

    fn send_signal(&mut self, signo: libc::c_int) -> Result<(), ClientError> {
        let Some(name) = signals::name_of(signo) else {
            return Ok(());
        };
        self.send(|session, now| session.send_signal(&name, now))
    }

    fn send_window_size(&mut self) -> Result<(), ClientError> {
        match signals::window_size() {
            Some(size) => self.send(|session, now| session.send_window_size(size, now)),
            None => self.send_signal(libc::SIGWINCH),
        }
    }

    /// Queues an extension chunk with `queue` and writes it.
    fn send(
        &self,
        queue: impl FnOnce(&mut ClientSession, Instant) -> bool,
    ) -> Result<(), ClientError> {
        let mut state = self.shared.lock();
        if queue(&mut state.session, Instant::now()) {
            if let Err(e) = self.shared.flush(&mut state) {
                if !is_disconnect(&e) {
                    return Err(ClientError::broken("send", &e));
                }
            }
        }
        Ok(())
    }

    /// Sends `H` if it is due and returns the next heartbeat deadline.
    fn heartbeat(&self) -> Result<Option<Instant>, ClientError> {
        let mut state = self.shared.lock();
        let now = Instant::now();
        if state.session.poll_timeout().is_some_and(|d| now >= d) {
            state.session.handle_timeout(now);
            if let Err(e) = self.shared.flush(&mut state) {
                if !is_disconnect(&e) {
                    return Err(ClientError::broken("send", &e));
                }
            }
        }
        Ok(state.session.poll_timeout())
    }

    /// An `S` granted credit: start the stdin thread, or wake it.
    fn stdin_requested(&mut self) -> Result<(), ClientError> {
        if self.stdin_started {
            self.shared.credit.notify_one();
            return Ok(());
        }
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("stdin".into())
            .stack_size(64 * 1024)
            .spawn(move || stdin_loop(&shared))
            .map_err(|e| ClientError::broken("thread", &e))?;
        self.stdin_started = true;
        Ok(())
    }

    /// The error for a connection that ended (`err` is `None` at end of stream) before `X`.
    fn closed(&mut self, err: Option<io::Error>) -> ClientError {
        let mut state = self.shared.lock();
        if let Some(failure) = state.failure.take() {
            return failure;
        }
        if let Some(e) = self.header_error.take() {
            return ClientError::broken("send", &e);
        }
        match err {
            Some(e) => ClientError::broken("recv", &e),
            None => {
                let reason = state
                    .session
                    .handle_eof()
                    .err()
                    .unwrap_or(ProtocolError::EofBeforeExit);
                ClientError::ConnectionBroken(format!("recv: {reason}"))
            }
        }
    }
}

/// A signal's default action, for a server that does not take signals: stop for
/// `SIGTSTP`, nothing for `SIGWINCH` and `SIGCONT`, death for the rest.
fn default_action(signo: libc::c_int) {
    match signo {
        libc::SIGWINCH | libc::SIGCONT => {}
        libc::SIGTSTP => signals::stop_by(signo),
        _ => {
            signals::die_by(signo, true);
            std::process::exit(128 + signo);
        }
    }
}

/// The client error for a protocol violation by the server.
fn protocol_error(e: ProtocolError) -> ClientError {
    match e {
        ProtocolError::UnexpectedChunk { ty, .. } => ClientError::UnexpectedChunk(ty.0),
        other => ClientError::ConnectionBroken(format!("recv: {other}")),
    }
}

/// True for the errors that mean the server has gone away.
fn is_disconnect(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET))
}

/// The stdin thread: reads as much as the credit allows and sends it as one `0` (or `.`
/// at end of file): one chunk per `S`, or with `stdin-window` up to [`WINDOW_READ_LEN`]
/// at a time while the window lasts.
fn stdin_loop(shared: &Shared) {
    let windowed = shared
        .lock()
        .session
        .extensions()
        .is_some_and(|f| f.contains(Features::STDIN_WINDOW));
    let len = if windowed {
        WINDOW_READ_LEN
    } else {
        ng_proto::STDIN_CHUNK_LEN
    };
    let mut buf = vec![0u8; len];
    loop {
        let budget = {
            let mut state = shared.lock();
            while !state.session.has_stdin_credit() {
                state = shared.credit.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            state.session.stdin_budget()
        };
        let want = budget.min(buf.len());
        let read = read_stdin(&mut buf[..want]);
        let mut state = shared.lock();
        let now = Instant::now();
        let eof = match read {
            Ok(0) => {
                state.session.send_stdin_eof(now);
                true
            }
            Ok(n) => {
                state.session.send_stdin(&buf[..n], now);
                false
            }
            Err(e) => {
                state.failure = Some(ClientError::broken("read", &e));
                shared.socket.shutdown();
                return;
            }
        };
        if let Err(e) = shared.flush(&mut state) {
            // A server that went away is noticed (and reported, or its `X` honoured) by the
            // main thread's next read.
            if !is_disconnect(&e) {
                state.failure = Some(ClientError::broken("send", &e));
                shared.socket.shutdown();
            }
            return;
        }
        if eof {
            return;
        }
    }
}
