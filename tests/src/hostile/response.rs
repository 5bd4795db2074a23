//! Reading a server's answer to one attempt, and judging it.
//!
//! [`read_response`] reads chunks until `X`, end of file, an error, a deadline or a stdout
//! budget, streaming stdout so that a gigabyte of `ng-yes` costs no memory; payload sizes
//! are checked per type before anything is read. [`classify`] turns a [`Response`] into
//! the [`Outcome`] the attack tables speak of.

use std::fmt;
use std::io::{self, Read};
use std::time::Instant;

use ng_testkit::{Head, Stream};

/// How one attempt ended, as the client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// `X n` with no `ngd: ` message: the command ran.
    Served(i32),
    /// A `2` chunk starting `ngd: ` and `X n`: the server refused, saying why.
    Refused(i32),
    /// The server closed the connection (end of file or reset) without an `X`.
    Closed,
    /// The attacker closed first, by design (connect-and-close, reset mid-output).
    Dropped,
    /// The connection could not be made.
    ConnectFailed,
    /// Nothing conclusive within the time allowed.
    Hung,
    /// The server broke the protocol (an unknown chunk type, a malformed `X`, output that
    /// should not exist).
    Broken,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Served(n) => write!(f, "served {n}"),
            Outcome::Refused(n) => write!(f, "refused {n}"),
            Outcome::Closed => f.write_str("closed"),
            Outcome::Dropped => f.write_str("dropped"),
            Outcome::ConnectFailed => f.write_str("connect failed"),
            Outcome::Hung => f.write_str("HUNG"),
            Outcome::Broken => f.write_str("BROKEN"),
        }
    }
}

/// How reading a response ended.
#[derive(Debug)]
pub(super) enum End {
    Exit(i32),
    Eof,
    Reset(String),
    Timeout,
    /// The caller's stdout budget was reached.
    Enough,
    Bad(String),
}

/// What a server answered to one attempt.
#[derive(Debug)]
pub(super) struct Response {
    /// The first stdout bytes, up to [`ReadOpts::keep_stdout`].
    pub stdout: Vec<u8>,
    /// How much stdout arrived.
    pub stdout_len: u64,
    /// All of stderr.
    pub stderr: Vec<u8>,
    /// How reading ended.
    pub end: End,
}

/// What to read.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReadOpts {
    /// When to give up ([`End::Timeout`]).
    pub deadline: Instant,
    /// Keep at most this much stdout.
    pub keep_stdout: usize,
    /// Stop once this much stdout arrived ([`End::Enough`]).
    pub stop_after: Option<u64>,
}

enum Fill {
    Done,
    Eof,
    Failed(End),
}

fn fill(s: &mut Stream, buf: &mut [u8], deadline: Instant) -> Fill {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Fill::Failed(End::Timeout);
        }
        if s.set_read_timeout(Some(left)).is_err() {
            return Fill::Failed(End::Reset("set_read_timeout".into()));
        }
        match s.read(&mut buf[got..]) {
            Ok(0) => return Fill::Eof,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Fill::Failed(End::Timeout)
            }
            Err(e) => return Fill::Failed(End::Reset(e.to_string())),
        }
    }
    Fill::Done
}

/// Reads chunks until `X`, end of file, an error, the deadline or the stdout budget.
pub(super) fn read_response(s: &mut Stream, opts: ReadOpts) -> Response {
    let mut r = Response {
        stdout: Vec::new(),
        stdout_len: 0,
        stderr: Vec::new(),
        end: End::Eof,
    };
    let mut scratch = vec![0u8; 64 << 10];
    loop {
        let mut header = [0u8; 5];
        match fill(s, &mut header, opts.deadline) {
            Fill::Done => {}
            Fill::Eof => {
                r.end = End::Eof;
                return r;
            }
            Fill::Failed(end) => {
                r.end = end;
                return r;
            }
        }
        let head = Head::parse(&header).expect("five bytes");
        let (len, ty) = (u64::from(head.len), head.ty);
        let max = match ty {
            b'1' => u64::MAX,
            b'2' => 1 << 20,
            b'S' => 0,
            b'X' => 64,
            _ => {
                r.end = End::Bad(format!(
                    "the server sent a chunk of type {ty:#04x} ({:?}), {len} bytes",
                    ty as char
                ));
                return r;
            }
        };
        if len > max {
            r.end = End::Bad(format!("{:?} chunk of {len} bytes", ty as char));
            return r;
        }
        let mut left = len;
        let mut payload = Vec::new();
        while left > 0 {
            let n = left.min(scratch.len() as u64) as usize;
            match fill(s, &mut scratch[..n], opts.deadline) {
                Fill::Done => {}
                Fill::Eof => {
                    r.end = End::Eof;
                    return r;
                }
                Fill::Failed(end) => {
                    r.end = end;
                    return r;
                }
            }
            left -= n as u64;
            match ty {
                b'1' => {
                    r.stdout_len += n as u64;
                    let keep = opts.keep_stdout.saturating_sub(r.stdout.len()).min(n);
                    r.stdout.extend_from_slice(&scratch[..keep]);
                }
                b'2' => r.stderr.extend_from_slice(&scratch[..n]),
                _ => payload.extend_from_slice(&scratch[..n]),
            }
            if ty == b'1' && opts.stop_after.is_some_and(|m| r.stdout_len >= m) {
                r.end = End::Enough;
                return r;
            }
        }
        if ty == b'X' {
            r.end = match std::str::from_utf8(&payload)
                .ok()
                .and_then(|t| t.strip_suffix('\n'))
                .and_then(|t| t.parse::<i32>().ok())
            {
                Some(code) => End::Exit(code),
                None => End::Bad(format!("malformed X payload {payload:?}")),
            };
            return r;
        }
    }
}

/// An outcome, when it was seen, and what explains it.
#[derive(Clone, Debug)]
pub(super) struct Seen {
    /// How the attempt ended.
    pub outcome: Outcome,
    /// When that was seen.
    pub at: Instant,
    /// What explains it, for failure messages.
    pub detail: String,
}

impl Seen {
    pub(super) fn now(outcome: Outcome, detail: impl Into<String>) -> Seen {
        Seen {
            outcome,
            at: Instant::now(),
            detail: detail.into(),
        }
    }
}

pub(super) fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines().next().unwrap_or("").to_string()
}

/// Judges a response: an `X` after an `ngd: ` line is a refusal.
pub(super) fn classify(r: &Response) -> Seen {
    let ngd_line = String::from_utf8_lossy(&r.stderr)
        .lines()
        .any(|l| l.starts_with("ngd: "));
    match &r.end {
        End::Exit(code) if ngd_line => Seen::now(Outcome::Refused(*code), first_line(&r.stderr)),
        End::Exit(code) => Seen::now(
            Outcome::Served(*code),
            format!(
                "{} bytes of stdout; stderr {:?}",
                r.stdout_len,
                first_line(&r.stderr)
            ),
        ),
        End::Eof => Seen::now(
            Outcome::Closed,
            format!("end of file after {} bytes of stdout", r.stdout_len),
        ),
        End::Reset(e) => Seen::now(
            Outcome::Closed,
            format!("{e} after {} bytes of stdout", r.stdout_len),
        ),
        End::Timeout => Seen::now(
            Outcome::Hung,
            format!(
                "no X and no close in time ({} bytes of stdout, stderr {:?})",
                r.stdout_len,
                first_line(&r.stderr)
            ),
        ),
        End::Enough => Seen::now(
            Outcome::Dropped,
            format!("{} bytes of stdout", r.stdout_len),
        ),
        End::Bad(e) => Seen::now(Outcome::Broken, e.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ng_testkit::frame;
    use std::io::Write as _;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    fn read(bytes: &[u8]) -> Response {
        // A socket that yields `bytes` and then end of file.
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(bytes).unwrap();
        drop(a);
        read_response(
            &mut Stream::Unix(b),
            ReadOpts {
                deadline: Instant::now() + Duration::from_secs(5),
                keep_stdout: 10,
                stop_after: None,
            },
        )
    }

    #[test]
    fn responses_are_classified() {
        let mut wire = frame(b'2', b"ngd: protocol error: nope\n");
        wire.extend(frame(b'X', b"76\n"));
        assert_eq!(classify(&read(&wire)).outcome, Outcome::Refused(76));
        assert_eq!(classify(&read(&frame(b'Q', b""))).outcome, Outcome::Broken);
    }
}
