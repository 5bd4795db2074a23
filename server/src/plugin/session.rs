//! One plugin session's stdin relay, without I/O: the credit rules of `docs/ngw.md` §7.3
//! and §15.6, and what else ngd tracks per session (the client's descriptors, stops).
//!
//! The worker asks with `S`; ngd answers every classic `S` with exactly one `0` or `.`,
//! never sends either unasked, and answers `.` itself once the client's stdin ended or the
//! client is gone. A windowed `S "<bytes>"` (`stdin-window`) adds that many bytes to the
//! session's credit instead, answered by as many `0` chunks as the credit and the held
//! stdin allow. Stdin the client sends before it is asked (eager clients send it right
//! after `C`, before a worker is even bound) waits in a [`StdinBuffer`]: first in the
//! connection's queued state, then here. A held chunk larger than the worker's
//! `max_chunk` is split, never refused.

use crate::session_io::ConnKey;
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Instant;

/// Client stdin held until the worker asks for it.
#[derive(Debug, Default)]
pub struct StdinBuffer {
    /// Held chunks, oldest first.
    chunks: VecDeque<Bytes>,
    /// The client's `.` arrived.
    eof: bool,
    /// Bytes held.
    bytes: usize,
}

impl StdinBuffer {
    /// Holds one chunk.
    pub fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        self.bytes += data.len();
        self.chunks.push_back(data);
    }

    /// The client's `.` arrived.
    pub fn set_eof(&mut self) {
        self.eof = true;
    }

    /// Bytes held (the connection stops reading above the stdin high-water mark).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes at most `limit` bytes (at least one if any are held) from the front.
    fn take(&mut self, limit: usize) -> Option<Bytes> {
        let front = self.chunks.front_mut()?;
        let data = if front.len() > limit.max(1) {
            front.split_to(limit.max(1))
        } else {
            self.chunks.pop_front()?
        };
        self.bytes -= data.len();
        Some(data)
    }
}

/// What to send the worker for this session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToWorker {
    /// A `0` chunk.
    Data(Bytes),
    /// A `.` chunk.
    Eof,
}

/// How to answer the worker's `S`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ask {
    /// At once, from what is held (or `.`).
    Answer(Vec<ToWorker>),
    /// Ask the client for more; its answer goes straight through.
    Client,
}

/// The worker sent a classic `S` while its previous `S` was unanswered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoubleAsk;

/// The stdin the worker asked for and has not received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Credit {
    /// Nothing outstanding.
    None,
    /// A classic `S`: one chunk (or `.`).
    One,
    /// Windowed `S`: this many bytes (or `.`).
    Bytes(u64),
}

impl FdOffer {
    /// The command runs on the client's descriptors.
    pub fn taken(self) -> bool {
        matches!(self, Self::Taken | Self::TakenWithCtty)
    }
}

/// Whether the client's descriptors were offered to the worker with the header, and what
/// it answered (`docs/ngw.md` §15.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdOffer {
    /// The session came without descriptors, or the worker cannot take them.
    None,
    /// Sent with the header; the worker's `t` is awaited.
    Offered,
    /// The command runs on them (`t`).
    Taken,
    /// The command runs on them with the client's pseudo-terminal as its controlling
    /// terminal (`t ctty`).
    TakenWithCtty,
    /// The worker declined (`t relay`, or another chunk first).
    Declined,
}

/// A session bound to a worker. See the module docs.
#[derive(Debug)]
pub struct SessionRelay {
    /// `NGW_SESSION`.
    pub id: u64,
    /// The client; `None` once it is gone (the worker still owes `X`).
    pub conn: Option<ConnKey>,
    /// The command (statistics, messages).
    pub command: String,
    /// When the session was bound.
    pub started: Instant,
    /// After a hangup: the worker is killed if no `X` arrives by then.
    pub hangup_deadline: Option<Instant>,
    /// The client's descriptors.
    pub fds: FdOffer,
    /// The client's pseudo-terminal was offered with its descriptors (`NGW_CLIENT_PTY`).
    pub pty_offered: bool,
    /// The client forwarded a stop (`SIGTSTP`) and has not been continued: the worker's
    /// `z` for it is not passed on (the client stopped itself already).
    pub client_stopped: bool,
    stdin: StdinBuffer,
    credit: Credit,
    eof_sent: bool,
    /// The worker's inbound payload cap.
    max_chunk: usize,
}

impl SessionRelay {
    /// A session for `conn`, with the stdin it sent while it waited; `max_chunk` is the
    /// worker's payload cap.
    pub fn new(
        id: u64,
        conn: ConnKey,
        command: String,
        stdin: StdinBuffer,
        max_chunk: usize,
        now: Instant,
    ) -> Self {
        Self {
            id,
            conn: Some(conn),
            command,
            started: now,
            hangup_deadline: None,
            fds: FdOffer::None,
            pty_offered: false,
            client_stopped: false,
            stdin,
            credit: Credit::None,
            eof_sent: false,
            max_chunk: max_chunk.max(1),
        }
    }

    /// Stdin bytes held for the worker.
    pub fn backlog(&self) -> usize {
        self.stdin.bytes()
    }

    /// The client sent a chunk: forwarded as far as the worker's credit goes, the rest
    /// held.
    pub fn client_stdin(&mut self, data: Bytes) -> Vec<ToWorker> {
        if self.conn.is_none() {
            return Vec::new();
        }
        self.stdin.push(data);
        self.drain()
    }

    /// The client's stdin ended.
    pub fn client_eof(&mut self) -> Vec<ToWorker> {
        self.stdin.set_eof();
        self.drain()
    }

    /// The worker sent `S`, with its byte count when windowed: answered from what is
    /// held, or the client must be asked for more.
    pub fn worker_asks(&mut self, grant: Option<u32>) -> Result<Ask, DoubleAsk> {
        match (grant, self.credit) {
            (None, Credit::None) => self.credit = Credit::One,
            (None, _) => return Err(DoubleAsk),
            (Some(n), Credit::Bytes(have)) => self.credit = Credit::Bytes(have + u64::from(n)),
            (Some(n), _) => self.credit = Credit::Bytes(u64::from(n)),
        }
        let out = self.drain();
        if out.is_empty() {
            Ok(Ask::Client)
        } else {
            Ok(Ask::Answer(out))
        }
    }

    /// The worker has credit that what is held did not cover.
    pub fn wants_stdin(&self) -> bool {
        self.credit != Credit::None
    }

    /// The client can send nothing more (its stdin ended, or it is gone).
    pub fn client_stdin_ended(&mut self) -> Vec<ToWorker> {
        self.stdin.set_eof();
        self.drain()
    }

    /// The client is gone: held stdin is dropped, an outstanding `S` answered with `.`,
    /// and the worker has until `deadline` to send `X`. `None` if it was already gone.
    pub fn hang_up(&mut self, deadline: Instant) -> Option<Vec<ToWorker>> {
        self.conn.take()?;
        self.stdin = StdinBuffer {
            eof: true,
            ..StdinBuffer::default()
        };
        self.hangup_deadline = Some(deadline);
        Some(self.drain())
    }

    /// Whatever the credit allows from what is held, then `.` if the client's stdin ended
    /// with nothing left.
    fn drain(&mut self) -> Vec<ToWorker> {
        let mut out = Vec::new();
        loop {
            match self.credit {
                Credit::None => break,
                Credit::One => match self.stdin.take(self.max_chunk) {
                    Some(data) => {
                        out.push(ToWorker::Data(data));
                        self.credit = Credit::None;
                    }
                    None => break,
                },
                Credit::Bytes(n) => {
                    let limit = usize::try_from(n).unwrap_or(usize::MAX).min(self.max_chunk);
                    match self.stdin.take(limit) {
                        Some(data) => {
                            let left = n.saturating_sub(data.len() as u64);
                            out.push(ToWorker::Data(data));
                            self.credit = if left == 0 {
                                Credit::None
                            } else {
                                Credit::Bytes(left)
                            };
                        }
                        None => break,
                    }
                }
            }
        }
        if self.credit != Credit::None
            && self.stdin.chunks.is_empty()
            && (self.stdin.eof || self.eof_sent || self.conn.is_none())
        {
            self.credit = Credit::None;
            self.eof_sent = true;
            out.push(ToWorker::Eof);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay(early: &[&'static [u8]], eof: bool) -> SessionRelay {
        relay_capped(early, eof, 1 << 20)
    }

    fn relay_capped(early: &[&'static [u8]], eof: bool, max_chunk: usize) -> SessionRelay {
        let mut stdin = StdinBuffer::default();
        for d in early {
            stdin.push(Bytes::from_static(d));
        }
        if eof {
            stdin.set_eof();
        }
        let conn = ConnKey { slot: 0, serial: 0 };
        SessionRelay::new(1, conn, "cat".into(), stdin, max_chunk, Instant::now())
    }

    fn data(d: &'static [u8]) -> ToWorker {
        ToWorker::Data(Bytes::from_static(d))
    }

    fn answer(items: &[ToWorker]) -> Result<Ask, DoubleAsk> {
        Ok(Ask::Answer(items.to_vec()))
    }

    #[test]
    fn early_stdin_goes_out_one_chunk_per_ask_then_eof() {
        let mut r = relay(&[b"ab", b"c"], true);
        assert_eq!(r.backlog(), 3);
        assert_eq!(r.worker_asks(None), answer(&[data(b"ab")]));
        assert_eq!(r.backlog(), 1);
        assert_eq!(r.worker_asks(None), answer(&[data(b"c")]));
        assert_eq!(r.worker_asks(None), answer(&[ToWorker::Eof]));
        // After `.`, any later `S` gets `.` too.
        assert_eq!(r.worker_asks(None), answer(&[ToWorker::Eof]));
    }

    #[test]
    fn stdin_is_forwarded_only_against_credit() {
        let mut r = relay(&[], false);
        assert_eq!(r.client_stdin(Bytes::from_static(b"x")), vec![]);
        assert_eq!(r.worker_asks(None), answer(&[data(b"x")]));
        assert_eq!(r.worker_asks(None), Ok(Ask::Client));
        assert_eq!(r.worker_asks(None), Err(DoubleAsk));
        assert_eq!(r.client_stdin(Bytes::from_static(b"y")), vec![data(b"y")]);
        assert_eq!(r.client_stdin(Bytes::from_static(b"z")), vec![]);
        assert_eq!(r.client_eof(), vec![], "z is still held");
        assert_eq!(r.worker_asks(None), answer(&[data(b"z")]));
        assert_eq!(r.worker_asks(None), answer(&[ToWorker::Eof]));
    }

    #[test]
    fn eof_answers_an_outstanding_ask() {
        let mut r = relay(&[], false);
        assert_eq!(r.worker_asks(None), Ok(Ask::Client));
        assert_eq!(r.client_eof(), vec![ToWorker::Eof]);
        let mut r = relay(&[], false);
        assert_eq!(r.worker_asks(None), Ok(Ask::Client));
        assert_eq!(r.client_stdin_ended(), vec![ToWorker::Eof]);
    }

    #[test]
    fn a_hangup_drops_held_stdin_and_answers_the_ask() {
        let now = Instant::now();
        let mut r = relay(&[b"held"], false);
        assert_eq!(r.hang_up(now), Some(vec![]));
        assert_eq!(r.hang_up(now), None, "once");
        assert_eq!(r.worker_asks(None), answer(&[ToWorker::Eof]));
        let mut r = relay(&[], false);
        assert_eq!(r.worker_asks(None), Ok(Ask::Client));
        assert_eq!(r.hang_up(now), Some(vec![ToWorker::Eof]));
        assert_eq!(r.hangup_deadline, Some(now));
        assert_eq!(r.client_stdin(Bytes::from_static(b"late")), vec![]);
    }

    #[test]
    fn chunks_over_the_workers_cap_are_split() {
        let mut r = relay_capped(&[b"abcdefg"], true, 3);
        assert_eq!(r.worker_asks(None), answer(&[data(b"abc")]));
        assert_eq!(r.worker_asks(None), answer(&[data(b"def")]));
        assert_eq!(r.worker_asks(None), answer(&[data(b"g")]));
        assert_eq!(r.worker_asks(None), answer(&[ToWorker::Eof]));
    }

    #[test]
    fn a_window_is_filled_across_chunks_and_topped_up() {
        let mut r = relay_capped(&[b"abcd", b"ef"], false, 4);
        assert_eq!(r.worker_asks(Some(5)), answer(&[data(b"abcd"), data(b"e")]));
        assert_eq!(
            r.worker_asks(Some(2)),
            answer(&[data(b"f")]),
            "1 byte left over"
        );
        assert_eq!(r.client_stdin(Bytes::from_static(b"gh")), vec![data(b"g")]);
        assert_eq!(r.client_stdin(Bytes::from_static(b"i")), vec![]);
        assert_eq!(r.worker_asks(Some(8)), answer(&[data(b"h"), data(b"i")]));
        assert_eq!(r.client_eof(), vec![ToWorker::Eof]);
        let mut r = relay(&[], false);
        assert_eq!(r.worker_asks(Some(10)), Ok(Ask::Client));
        assert_eq!(r.worker_asks(Some(10)), Ok(Ask::Client), "windows add up");
        assert_eq!(r.client_stdin_ended(), vec![ToWorker::Eof]);
    }
}
