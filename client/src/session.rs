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
//! # Heartbeats
//!
//! `H` goes out when nothing was sent for 500 ms ([`ClientSession::poll_timeout`]). The
//! main thread blocks in `read(2)` with the socket's receive timeout set to the time left
//! until that deadline, and checks the deadline after every read, so heartbeats also flow
//! while output streams in. The timeout is only re-armed when it is off by more than
//! [`TIMEOUT_SLACK`], which keeps `setsockopt` out of the streaming path. A heartbeat that
//! fails with `EPIPE`/`ECONNRESET` is ignored (the server may have just sent `X`).
//!
//! # How the session ends
//!
//! * The first `X`: the output before it has been written (writes are unbuffered), and the
//!   status is `code & 0xFF`. Anything after it is ignored.
//! * The server closes or resets the connection before `X`: `recv: <reason>`, 227.
//! * A chunk type a server may not send: `Unexpected chunk type N ('c')`, 229, after the
//!   output that came before it.
//! * Our stdout (or stderr) is a pipe whose reader is gone (`EPIPE`; Rust ignores SIGPIPE):
//!   no message, exit 141, the status the C client gets when SIGPIPE kills it. Exiting
//!   closes the socket, so the server sees the disconnect.
//! * Reading stdin fails: the stdin thread records `read: <reason>` and shuts the socket
//!   down, which wakes the main thread to report it (227).
//!
//! # Signals
//!
//! SIGINT and SIGTERM keep their default disposition: the client dies by the signal (so
//! the shell sees 130/143 and a `^C` in a pipeline behaves as usual), the kernel closes the
//! socket, and the server sees the disconnect and cancels the command. Nothing is forwarded
//! to the server; the reference client does the same.

use crate::exit::ClientError;
use crate::transport::Socket;
use ng_proto::bytes::BytesMut;
use ng_proto::{exit, ClientConfig, ClientEvent, ClientSession, Header, ProtocolError};
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How much the main thread asks the socket for per read.
const READ_LEN: usize = 64 * 1024;

/// Below this much free space the read buffer is grown (or compacted) before a read.
const MIN_SPARE: usize = 4096;

/// How far the socket's receive timeout may be from the heartbeat deadline before it is set
/// again. Bounds how late a heartbeat can be.
const TIMEOUT_SLACK: Duration = Duration::from_millis(20);

/// The shortest receive timeout set (a zero `SO_RCVTIMEO` would mean "wait forever").
const MIN_TIMEOUT: Duration = Duration::from_millis(1);

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

/// Runs one session on a connected socket and returns the process exit status.
pub fn run(socket: Socket, header: &Header) -> Result<u8, ClientError> {
    let now = Instant::now();
    let mut session = ClientSession::new(ClientConfig::default(), now);
    session.send_header(header, now);
    // A failed header write is not fatal yet: the server may have answered (say, refused
    // us with a message and an exit code) before closing. It is reported if no `X` comes.
    let header_error = socket.write_all(&session.take_transmit()).err();
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
        armed: None,
        stdin_started: false,
        header_error,
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
    /// The receive timeout currently set on the socket.
    armed: Option<Duration>,
    stdin_started: bool,
    header_error: Option<io::Error>,
}

impl MainLoop {
    fn run(mut self) -> Result<u8, ClientError> {
        let mut events = Vec::new();
        loop {
            let deadline = self.heartbeat()?;
            self.arm(deadline)?;
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
                    ClientEvent::Exit(code) => return Ok(exit::status(code)),
                }
            }
            if let Err(e) = result {
                return Err(protocol_error(e));
            }
        }
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

    /// Sets the socket's receive timeout to the time left until `deadline`, unless the one
    /// already set is close enough.
    fn arm(&mut self, deadline: Option<Instant>) -> Result<(), ClientError> {
        let Some(deadline) = deadline else {
            return Ok(());
        };
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(MIN_TIMEOUT);
        let close_enough = self
            .armed
            .is_some_and(|armed| armed.abs_diff(left) <= TIMEOUT_SLACK);
        if !close_enough {
            self.shared.socket.set_read_timeout(left).map_err(|e| {
                ClientError::Socket(format!("setsockopt: {}", crate::exit::strerror(&e)))
            })?;
            self.armed = Some(left);
        }
        Ok(())
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

/// The stdin thread: one read and one `0` (or `.`) per credit.
fn stdin_loop(shared: &Shared) {
    let mut buf = [0u8; ng_proto::STDIN_CHUNK_LEN];
    loop {
        {
            let mut state = shared.lock();
            while !state.session.has_stdin_credit() {
                state = shared.credit.wait(state).unwrap_or_else(|e| e.into_inner());
            }
        }
        let read = read_stdin(&mut buf);
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

/// One `read(2)` on fd 0, retried on `EINTR` and waited out on `EAGAIN` (a non-blocking
/// stdin inherited from the parent).
fn read_stdin(buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => wait_for(libc::STDIN_FILENO, libc::POLLIN),
            _ => return Err(err),
        }
    }
}

/// Writes all of `data` to `fd` (1 or 2), unbuffered.
fn write_out(fd: libc::c_int, mut data: &[u8]) -> Result<(), ClientError> {
    while !data.is_empty() {
        // SAFETY: `data` is valid for its length.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n >= 0 {
            data = &data[n as usize..];
            continue;
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => wait_for(fd, libc::POLLOUT),
            io::ErrorKind::BrokenPipe => return Err(ClientError::BrokenPipe),
            _ => return Err(ClientError::broken("write", &err)),
        }
    }
    Ok(())
}

/// Blocks until `fd` is ready for `events`.
fn wait_for(fd: libc::c_int, events: libc::c_short) {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd. Errors (EINTR) just make the caller retry.
    unsafe { libc::poll(&mut pfd, 1, -1) };
}
