//! A protocol plugin's output pipes: its stdout read as bounded lines ([`read_lines`]),
//! its stderr copied to the client ([`PluginStderr`]).

use crate::protocol::{self, Event};
use crate::sys;
use crossbeam_channel::Sender;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

/// The line being read from the plugin's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    /// Within [`protocol::MAX_LINE`]: its bytes so far.
    Within(Vec<u8>),
    /// Longer than [`protocol::MAX_LINE`]: its bytes are dropped up to its `\n`.
    TooLong,
}

impl Pending {
    fn new() -> Self {
        Pending::Within(Vec::new())
    }

    /// Adds `bytes`, which contain no `\n`.
    fn extend(&mut self, bytes: &[u8]) {
        match self {
            Pending::Within(line) if line.len() + bytes.len() <= protocol::MAX_LINE => {
                line.extend_from_slice(bytes);
            }
            _ => *self = Pending::TooLong,
        }
    }

    /// The line, at its `\n`: a too long one as one invalid byte (skipped as malformed).
    fn end(&mut self) -> Vec<u8> {
        match std::mem::replace(self, Pending::new()) {
            Pending::Within(line) => line,
            Pending::TooLong => b"\xff".to_vec(),
        }
    }

    /// The unterminated last line at end of file, when there is one within bounds.
    fn rest(self) -> Option<Vec<u8>> {
        match self {
            Pending::Within(line) if !line.is_empty() => Some(line),
            _ => None,
        }
    }
}

/// Lines from the plugin's stdout, each at most [`protocol::MAX_LINE`] long (a longer one
/// arrives as one invalid line and is skipped as malformed), then [`Event::Eof`].
pub(super) fn read_lines(out: impl Read, tx: Sender<Event>) {
    let mut r = BufReader::with_capacity(64 * 1024, out);
    let mut line = Pending::new();
    loop {
        let (used, end) = match r.fill_buf() {
            Ok([]) => break,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    line.extend(&buf[..i]);
                    (i + 1, true)
                }
                None => {
                    line.extend(buf);
                    (buf.len(), false)
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        r.consume(used);
        if end && tx.send(Event::Line(line.end())).is_err() {
            return;
        }
    }
    if let Some(rest) = line.rest() {
        let _ = tx.send(Event::Line(rest));
    }
    let _ = tx.send(Event::Eof);
}

/// The plugin's stderr pipe, non-blocking, read under a lock by the copying thread and by
/// the run's loop.
#[derive(Debug)]
pub(super) struct PluginStderr {
    pipe: File,
    /// Held while reading, so that one reader copies a chunk whole.
    reading: Mutex<()>,
}

impl PluginStderr {
    pub fn new(pipe: std::process::ChildStderr) -> Self {
        let pipe = File::from(OwnedFd::from(pipe));
        let _ = sys::set_nonblocking(pipe.as_fd());
        Self {
            pipe,
            reading: Mutex::new(()),
        }
    }

    /// Copies what is available now; `false` at end of file or on an error.
    pub fn drain(&self, to: &mut impl Write) -> bool {
        let _reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        let mut buf = [0u8; 16 * 1024];
        loop {
            match (&self.pipe).read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => {
                    let _ = to.write_all(&buf[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    /// Copies everything until end of file (or an error).
    pub fn copy_until_eof(&self, to: &mut impl Write) {
        while sys::wait_readable(self.pipe.as_fd()).is_ok() {
            if !self.drain(to) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    fn lines(input: &[u8]) -> Vec<Event> {
        let (tx, rx) = unbounded();
        read_lines(input, tx);
        rx.try_iter().collect()
    }

    #[test]
    fn pending_line_steps() {
        let mut p = Pending::new();
        p.extend(b"ab");
        p.extend(b"c");
        assert_eq!(p.end(), b"abc");
        assert_eq!(p, Pending::new());
        p.extend(&vec![b'x'; protocol::MAX_LINE + 1]);
        assert_eq!(p, Pending::TooLong);
        p.extend(b"more");
        assert_eq!(p, Pending::TooLong);
        assert_eq!(p.end(), b"\xff");
        assert_eq!(p.clone().rest(), None);
        p.extend(b"tail");
        assert_eq!(p.rest(), Some(b"tail".to_vec()));
        let mut full = Pending::new();
        full.extend(&vec![b'x'; protocol::MAX_LINE]);
        assert!(matches!(full, Pending::Within(ref l) if l.len() == protocol::MAX_LINE));
    }

    #[test]
    fn lines_split_bound_and_end_with_eof() {
        let mut input = b"one\ntwo\n".to_vec();
        input.extend(vec![b'y'; protocol::MAX_LINE + 1]);
        input.extend(b"\nlast");
        assert_eq!(
            lines(&input),
            vec![
                Event::Line(b"one".to_vec()),
                Event::Line(b"two".to_vec()),
                Event::Line(b"\xff".to_vec()),
                Event::Line(b"last".to_vec()),
                Event::Eof,
            ]
        );
        let too_long_last = vec![b'z'; protocol::MAX_LINE + 1];
        assert_eq!(lines(&too_long_last), vec![Event::Eof]);
    }
}
