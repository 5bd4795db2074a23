//! One plugin session's stdin relay, without I/O: the credit rule of `docs/ngw.md` §7.3.
//!
//! The worker asks with `S`; ngd answers every `S` with exactly one `0` or `.`, never sends
//! either unasked, and answers `.` itself once the client's stdin ended or the client is
//! gone. Stdin the client sends before it is asked (eager clients send it right after `C`,
//! before a worker is even bound) waits in a [`StdinBuffer`]: first in the connection's
//! queued state, then here, and goes out one chunk per `S`.

use crate::session_io::ConnKey;
use bytes::Bytes;
use std::collections::VecDeque;
use std::time::Instant;

/// Client stdin held until the worker asks for it.
#[derive(Debug, Default)]
pub struct StdinBuffer {
    chunks: VecDeque<Bytes>,
    bytes: usize,
    eof: bool,
}

impl StdinBuffer {
    /// Holds one chunk.
    pub fn push(&mut self, data: Bytes) {
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

    fn pop(&mut self) -> Option<Bytes> {
        let data = self.chunks.pop_front()?;
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
    Answer(ToWorker),
    /// Ask the client for a chunk; its answer goes straight through.
    Client,
}

/// The worker sent `S` while its previous `S` was unanswered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoubleAsk;

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
    stdin: StdinBuffer,
    credit: bool,
    eof_sent: bool,
}

impl SessionRelay {
    /// A session for `conn`, with the stdin it sent while it waited.
    pub fn new(id: u64, conn: ConnKey, command: String, stdin: StdinBuffer, now: Instant) -> Self {
        Self {
            id,
            conn: Some(conn),
            command,
            started: now,
            hangup_deadline: None,
            stdin,
            credit: false,
            eof_sent: false,
        }
    }

    /// Stdin bytes held for the worker.
    pub fn backlog(&self) -> usize {
        self.stdin.bytes()
    }

    /// The client sent a chunk: forwarded if the worker asked, else held.
    pub fn client_stdin(&mut self, data: Bytes) -> Option<ToWorker> {
        self.conn?;
        if self.credit {
            self.credit = false;
            return Some(ToWorker::Data(data));
        }
        self.stdin.push(data);
        None
    }

    /// The client's stdin ended.
    pub fn client_eof(&mut self) -> Option<ToWorker> {
        self.stdin.set_eof();
        if self.credit && self.stdin.chunks.is_empty() {
            return Some(self.send_eof());
        }
        None
    }

    /// The worker sent `S`.
    pub fn worker_asks(&mut self) -> Result<Ask, DoubleAsk> {
        if self.credit {
            return Err(DoubleAsk);
        }
        if let Some(data) = self.stdin.pop() {
            return Ok(Ask::Answer(ToWorker::Data(data)));
        }
        if self.stdin.eof || self.eof_sent || self.conn.is_none() {
            return Ok(Ask::Answer(self.send_eof()));
        }
        self.credit = true;
        Ok(Ask::Client)
    }

    /// The client cannot be asked: its stdin already ended.
    pub fn client_stdin_ended(&mut self) -> Option<ToWorker> {
        self.stdin.set_eof();
        self.credit.then(|| self.send_eof())
    }

    /// The client is gone: held stdin is dropped and an outstanding `S` answered with `.`.
    /// False if it was gone already.
    pub fn hang_up(&mut self, deadline: Instant) -> Option<Option<ToWorker>> {
        self.conn.take()?;
        self.stdin = StdinBuffer {
            eof: true,
            ..StdinBuffer::default()
        };
        self.hangup_deadline = Some(deadline);
        Some(self.credit.then(|| self.send_eof()))
    }

    fn send_eof(&mut self) -> ToWorker {
        self.credit = false;
        self.eof_sent = true;
        ToWorker::Eof
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay(early: &[&'static [u8]], eof: bool) -> SessionRelay {
        let mut stdin = StdinBuffer::default();
        for d in early {
            stdin.push(Bytes::from_static(d));
        }
        if eof {
            stdin.set_eof();
        }
        let conn = ConnKey { slot: 0, serial: 0 };
        SessionRelay::new(1, conn, "cat".into(), stdin, Instant::now())
    }

    fn data(d: &'static [u8]) -> ToWorker {
        ToWorker::Data(Bytes::from_static(d))
    }

    #[test]
    fn early_stdin_goes_out_one_chunk_per_ask_then_eof() {
        let mut r = relay(&[b"ab", b"c"], true);
        assert_eq!(r.backlog(), 3);
        assert_eq!(r.worker_asks(), Ok(Ask::Answer(data(b"ab"))));
        assert_eq!(r.backlog(), 1);
        assert_eq!(r.worker_asks(), Ok(Ask::Answer(data(b"c"))));
        assert_eq!(r.worker_asks(), Ok(Ask::Answer(ToWorker::Eof)));
        // After `.`, any later `S` gets `.` too.
        assert_eq!(r.worker_asks(), Ok(Ask::Answer(ToWorker::Eof)));
    }

    #[test]
    fn stdin_is_forwarded_only_against_credit() {
        let mut r = relay(&[], false);
        assert_eq!(r.client_stdin(Bytes::from_static(b"x")), None);
        assert_eq!(r.worker_asks(), Ok(Ask::Answer(data(b"x"))));
        assert_eq!(r.worker_asks(), Ok(Ask::Client));
        assert_eq!(r.worker_asks(), Err(DoubleAsk));
        assert_eq!(r.client_stdin(Bytes::from_static(b"y")), Some(data(b"y")));
        assert_eq!(r.client_stdin(Bytes::from_static(b"z")), None);
        assert_eq!(r.client_eof(), None, "z is still held");
        assert_eq!(r.worker_asks(), Ok(Ask::Answer(data(b"z"))));
        assert_eq!(r.worker_asks(), Ok(Ask::Answer(ToWorker::Eof)));
    }

    #[test]
    fn eof_answers_an_outstanding_ask() {
        let mut r = relay(&[], false);
        assert_eq!(r.worker_asks(), Ok(Ask::Client));
        assert_eq!(r.client_eof(), Some(ToWorker::Eof));
        let mut r = relay(&[], false);
        assert_eq!(r.worker_asks(), Ok(Ask::Client));
        assert_eq!(r.client_stdin_ended(), Some(ToWorker::Eof));
    }

    #[test]
    fn a_hangup_drops_held_stdin_and_answers_the_ask() {
        let now = Instant::now();
        let mut r = relay(&[b"held"], false);
        assert_eq!(r.hang_up(now), Some(None));
        assert_eq!(r.hang_up(now), None, "once");
        assert_eq!(r.worker_asks(), Ok(Ask::Answer(ToWorker::Eof)));
        let mut r = relay(&[], false);
        assert_eq!(r.worker_asks(), Ok(Ask::Client));
        assert_eq!(r.hang_up(now), Some(Some(ToWorker::Eof)));
        assert_eq!(r.hangup_deadline, Some(now));
        assert_eq!(r.client_stdin(Bytes::from_static(b"late")), None);
    }
}
