//! One attempt of an attack: its context, and the ways of sending and reading that the
//! attacks share; the barrier floods connect behind; payloads built once per run.

use std::io::Write;
use std::net::Shutdown;
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use ng_testkit::{frame, Address, Stream};

use super::response::{classify, read_response, End, ReadOpts, Response, Seen};
use super::{Kind, Limits, Outcome, Plan};

/// Everything one attempt needs.
pub(super) struct Attempt<'a> {
    /// The attack.
    pub kind: Kind,
    /// Where to connect.
    pub address: &'a Address,
    /// The server's process id.
    pub pid: u32,
    /// The server's limits.
    pub limits: &'a Limits,
    /// How hard, how strictly.
    pub plan: &'a Plan,
    /// The attempt's number within its round; variants alternate on it.
    pub index: usize,
    /// When the attempt began.
    pub started: Instant,
    /// When the outcome is due at the latest.
    pub deadline: Instant,
    /// Floods: everyone connects before anyone sends.
    pub gate: Option<&'a Gate>,
}

impl Attempt<'_> {
    /// Connects, or says why not.
    pub fn connect(&self) -> Result<Stream, Seen> {
        Stream::connect_timeout(self.address, self.plan.slack.max(Duration::from_secs(1)))
            .map_err(|e| Seen::now(Outcome::ConnectFailed, e.to_string()))
    }

    /// Read until the deadline, keeping 1 MiB of stdout.
    pub fn opts(&self) -> ReadOpts {
        ReadOpts {
            deadline: self.deadline,
            keep_stdout: 1 << 20,
            stop_after: None,
        }
    }

    /// Sends `bytes` (small: one write), then reads the outcome.
    pub fn send_then_judge(&self, bytes: &[u8]) -> Seen {
        match self.send_then_read(bytes) {
            Ok(r) => classify(&r),
            Err(seen) => seen,
        }
    }

    /// Sends `bytes` (small: one write), then reads the response.
    pub fn send_then_read(&self, bytes: &[u8]) -> Result<Response, Seen> {
        let mut s = self.connect()?;
        if let Err(e) = s.write_all(bytes) {
            // The server may already have answered and closed; look.
            let r = read_response(&mut s, self.opts());
            if matches!(r.end, End::Eof | End::Reset(_)) {
                return Err(Seen::now(Outcome::Closed, format!("write: {e}")));
            }
            return Ok(r);
        }
        Ok(read_response(&mut s, self.opts()))
    }

    /// Sends `parts` in order from a second thread while this one reads the outcome: a
    /// large request must not deadlock against the server's answer.
    pub fn send_big_then_judge(&self, parts: &[&[u8]]) -> Seen {
        let mut s = match self.connect() {
            Ok(s) => s,
            Err(seen) => return seen,
        };
        let mut writer = match s.try_clone() {
            Ok(w) => w,
            Err(e) => return Seen::now(Outcome::ConnectFailed, format!("clone: {e}")),
        };
        let _ = writer.set_write_timeout(self.deadline.saturating_duration_since(Instant::now()));
        thread::scope(|scope| {
            scope.spawn(move || {
                for part in parts {
                    if writer.write_all(part).is_err() {
                        return;
                    }
                }
            });
            let seen = classify(&read_response(&mut s, self.opts()));
            // Wake a writer still blocked in write.
            s.shutdown(Shutdown::Both);
            seen
        })
    }

    /// Sends `bytes`, then one more byte of filler every `every` (heartbeats, or the rest
    /// of a request) until the server answers or the deadline.
    pub fn trickle(&self, first: &[u8], next: impl Fn(usize) -> Vec<u8>, every: Duration) -> Seen {
        let mut s = match self.connect() {
            Ok(s) => s,
            Err(seen) => return seen,
        };
        if !first.is_empty() && s.write_all(first).is_err() {
            return classify(&read_response(&mut s, self.opts()));
        }
        let mut i = 0;
        while Instant::now() < self.deadline {
            if s.wait_readable(every) {
                break;
            }
            let bytes = next(i);
            i += 1;
            if bytes.is_empty() || s.write_all(&bytes).is_err() {
                break;
            }
        }
        classify(&read_response(&mut s, self.opts()))
    }
}

/// A barrier that cannot hang: everyone waits until all have arrived or a deadline.
pub(super) struct Gate {
    arrived: Mutex<usize>,
    all: Condvar,
    total: usize,
}

impl Gate {
    pub fn new(total: usize) -> Gate {
        Gate {
            arrived: Mutex::new(0),
            all: Condvar::new(),
            total,
        }
    }

    pub fn arrive(&self) {
        let mut n = self.arrived.lock().unwrap();
        *n += 1;
        if *n >= self.total {
            self.all.notify_all();
        }
    }

    pub fn arrive_and_wait(&self, deadline: Instant) {
        self.arrive();
        let mut n = self.arrived.lock().unwrap();
        while *n < self.total {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            n = self.all.wait_timeout(n, left).unwrap().0;
        }
    }
}

/// Payloads shared by every attempt.
pub(super) struct Payloads {
    /// 100 000 `A` chunks.
    pub args_100k: Vec<u8>,
}

pub(super) fn payloads() -> &'static Payloads {
    static P: OnceLock<Payloads> = OnceLock::new();
    P.get_or_init(|| {
        let mut args_100k = Vec::with_capacity(100_000 * 12);
        for n in 0..100_000u32 {
            args_100k.extend(frame(b'A', format!("{n:06}").as_bytes()));
        }
        Payloads { args_100k }
    })
}

/// `count` empty `A` chunks (cached for the last count asked).
pub(super) fn empty_args(count: u64) -> &'static [u8] {
    static CACHE: Mutex<Vec<(u64, &'static [u8])>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap();
    if let Some((_, data)) = cache.iter().find(|(c, _)| *c == count) {
        return data;
    }
    let data: &'static [u8] = frame(b'A', b"").repeat(count as usize).leak();
    cache.push((count, data));
    data
}

/// `len` zero bytes (cached per length).
pub(super) fn zeros(len: usize) -> &'static [u8] {
    static CACHE: Mutex<Vec<&'static [u8]>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap();
    if let Some(data) = cache.iter().find(|d| d.len() == len) {
        return data;
    }
    let data: &'static [u8] = vec![0u8; len].leak();
    cache.push(data);
    data
}
