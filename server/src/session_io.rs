//! The state one running command shares with the event loop.
//!
//! A command (a [`Nail`](crate::Nail)) runs on a pool thread; its connection lives on the
//! event loop. They meet in one [`SessionIo`]: a mutex-guarded [`IoState`] plus a condition
//! variable the command thread waits on. The command side encodes its stdout/stderr chunks
//! straight into `IoState::out`, so the loop can hand that buffer to the socket without
//! copying it again; the loop side pushes stdin chunks and cancellation.
//!
//! Whenever the command side changes something the loop must act on, it *notifies*: the
//! connection's id goes on the loop's ready channel and the loop's `mio::Waker` fires, at
//! most once until the loop has looked (`IoState::notified`), so a command writing many small
//! pieces costs one wake-up per loop turn, not one per write.
//!
//! Memory is bounded in both directions: a writer blocks while more than
//! [`OUTPUT_HIGH_WATER`] bytes are queued or in flight (a single large write is taken in
//! [`OUTPUT_CHUNK`] pieces, each waiting for room), and the loop stops reading the socket
//! while more than [`STDIN_HIGH_WATER`] bytes of stdin wait for the command.

use bytes::{Bytes, BytesMut};
use crossbeam_channel::Sender;
use mio::Waker;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A writer blocks while this many output bytes are queued or unsent. Small on purpose:
/// measured, 512 KiB both cuts a streaming session's peak memory (two buffers that would
/// otherwise double up to 8 MiB each) and raises throughput (the buffers stay in cache).
pub const OUTPUT_HIGH_WATER: usize = 512 << 10;
/// A blocked writer resumes once the backlog falls below this.
pub const OUTPUT_LOW_WATER: usize = 128 << 10;
/// The largest output chunk a command's write becomes, so a buffer never has to grow far
/// past the high-water mark to hold one write.
pub const OUTPUT_CHUNK: usize = 128 << 10;
/// The loop stops reading the client while this much stdin waits for the command.
pub const STDIN_HIGH_WATER: usize = 1 << 20;
/// The loop keeps stdin requested (prefetch; with `stdin-window`, the window topped up)
/// while less than this much stdin waits for the command.
pub const STDIN_PREFETCH: usize = 512 << 10;

/// Why a command is asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelReason {
    /// The client closed the connection.
    ClientGone,
    /// The client stopped sending heartbeats.
    HeartbeatTimeout,
    /// The server is shutting down and the grace period ran out.
    Shutdown,
    /// The client broke the protocol.
    ProtocolError,
    /// The client forwarded a signal that ends a command (Ctrl-C, `kill`).
    Interrupted,
}

impl CancelReason {
    /// A short description for messages and logs.
    pub fn describe(self) -> &'static str {
        match self {
            CancelReason::ClientGone => "the client disconnected",
            CancelReason::HeartbeatTimeout => "the client stopped sending heartbeats",
            CancelReason::Shutdown => "the server is shutting down",
            CancelReason::ProtocolError => "the client broke the protocol",
            CancelReason::Interrupted => "the client was interrupted",
        }
    }
}

/// Identifies a connection to the loop: its slab key and a serial number, so a late
/// notification for a closed connection cannot be mistaken for its successor's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnKey {
    /// The slab index.
    pub slot: usize,
    /// Unique per accepted connection.
    pub serial: u64,
}

/// How the command side wakes the loop.
#[derive(Clone, Debug)]
pub struct LoopNotifier {
    pub(crate) ready: Sender<ConnKey>,
    pub(crate) waker: Arc<Waker>,
}

impl LoopNotifier {
    pub(crate) fn notify(&self, key: ConnKey) {
        // The loop owns the receiver for as long as it runs; after it has gone, nobody needs
        // the notification.
        if self.ready.send(key).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// The mutable half of [`SessionIo`].
#[derive(Debug, Default)]
pub struct IoState {
    /// Encoded `1`/`2` chunks the command wrote, not yet taken by the loop.
    pub out: BytesMut,
    /// Bytes the loop took from `out` and has not yet written to the socket.
    pub unsent: usize,
    /// A writer is blocked on the backlog.
    pub writer_waiting: bool,
    /// Stdin chunks waiting for the command.
    pub stdin: VecDeque<Bytes>,
    /// Total bytes in `stdin`.
    pub stdin_bytes: usize,
    /// The client sent `.`, or can send nothing more.
    pub stdin_eof: bool,
    /// The command has read stdin at least once; from then on the loop prefetches.
    pub stdin_started: bool,
    /// A reader is blocked waiting for stdin.
    pub reader_waiting: bool,
    /// Set once; the command should stop.
    pub cancelled: Option<CancelReason>,
    /// The command's exit code, once it has returned.
    pub finished: Option<i32>,
    /// The loop has been notified and has not looked yet.
    pub notified: bool,
}

/// Shared between one running command and its connection. See the module docs.
#[derive(Debug)]
pub struct SessionIo {
    key: ConnKey,
    state: Mutex<IoState>,
    cond: Condvar,
    notifier: LoopNotifier,
    /// Inline commands run on the loop thread and must never wait.
    inline: bool,
}

impl SessionIo {
    pub(crate) fn new(key: ConnKey, notifier: LoopNotifier, inline: bool) -> Arc<Self> {
        Arc::new(Self {
            key,
            state: Mutex::new(IoState::default()),
            cond: Condvar::new(),
            notifier,
            inline,
        })
    }

    /// Locks the state. A command thread that panicked while holding the lock cannot leave
    /// it inconsistent in a way that matters (every field is valid on its own), so a
    /// poisoned lock is simply taken over.
    pub fn lock(&self) -> MutexGuard<'_, IoState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, IoState>) -> MutexGuard<'a, IoState> {
        self.cond.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the command thread if it waits on anything.
    pub fn wake_command(&self) {
        self.cond.notify_all();
    }

    /// Tells the loop to look at this connection (once until it has looked).
    pub fn notify_loop(&self, st: &mut IoState) {
        if !st.notified && !self.inline {
            st.notified = true;
            self.notifier.notify(self.key);
        }
    }

    /// Command side: queue output of the given chunk type, waiting while the backlog is over
    /// the high-water mark. Fails once the command is cancelled.
    pub(crate) fn write(&self, ty: ng_proto::ChunkType, data: &[u8]) -> std::io::Result<()> {
        let mut st = self.lock();
        for piece in data.chunks(OUTPUT_CHUNK) {
            loop {
                if let Some(reason) = st.cancelled {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::BrokenPipe,
                        reason.describe(),
                    ));
                }
                if self.inline || st.out.len() + st.unsent < OUTPUT_HIGH_WATER {
                    break;
                }
                st.writer_waiting = true;
                self.notify_loop(&mut st);
                st = self.wait(st);
            }
            ng_proto::codec::encode(ty, piece, &mut st.out);
            self.notify_loop(&mut st);
        }
        Ok(())
    }

    /// Command side: read stdin into `buf`; 0 at end of stdin (or once cancelled).
    pub(crate) fn read(&self, buf: &mut [u8]) -> usize {
        if buf.is_empty() {
            return 0;
        }
        let mut st = self.lock();
        if !st.stdin_started {
            st.stdin_started = true;
        }
        loop {
            if let Some(front) = st.stdin.front_mut() {
                let n = front.len().min(buf.len());
                buf[..n].copy_from_slice(&front[..n]);
                if n == front.len() {
                    st.stdin.pop_front();
                } else {
                    bytes::Buf::advance(front, n);
                }
                st.stdin_bytes -= n;
                // The loop may want to send the next S, or resume reading the socket.
                self.notify_loop(&mut st);
                return n;
            }
            if st.stdin_eof || st.cancelled.is_some() || self.inline {
                return 0;
            }
            st.reader_waiting = true;
            self.notify_loop(&mut st);
            st = self.wait(st);
            st.reader_waiting = false;
        }
    }

    /// Command side: the command returned.
    pub(crate) fn finish(&self, code: i32) {
        let mut st = self.lock();
        st.finished = Some(code);
        self.notify_loop(&mut st);
    }

    /// Either side: is the command asked to stop?
    pub fn cancelled(&self) -> Option<CancelReason> {
        self.lock().cancelled
    }

    /// Loop side: ask the command to stop, waking it if it waits.
    pub(crate) fn cancel(&self, reason: CancelReason) {
        let mut st = self.lock();
        if st.cancelled.is_none() {
            st.cancelled = Some(reason);
        }
        drop(st);
        self.cond.notify_all();
    }

    /// Command side: wait until cancelled or `timeout` passes; true if cancelled.
    pub(crate) fn wait_cancelled(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if st.cancelled.is_some() {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= deadline || self.inline {
                return false;
            }
            st = self
                .cond
                .wait_timeout(st, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}
