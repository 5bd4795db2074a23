//! Where a run reads and writes: the client's own descriptors when the session came with
//! them (`fds`, `docs/ngw.md` §15.4), else the streams ngd relays.
//!
//! With the client's descriptors a run is what fledge's is on its own terminal: `output`
//! goes to the client's fd 1, logs, warnings and progress to its fd 2, questions are
//! asked on its terminal, and whether each fd is a terminal (and how wide) is asked of the
//! descriptor itself. Without them, the session's `1`/`2` chunks carry everything and the
//! client's `NAILGUN_TTY_n` and `COLUMNS` describe its terminal.

use crate::sys;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// One output stream of a run.
#[derive(Clone, Debug)]
pub enum Sink {
    /// A stream ngd relays (`1` or `2` chunks).
    Relayed(ngw::Output),
    /// One of the client's own descriptors.
    Fd(Arc<File>),
    /// The client's descriptor was closed: writes are discarded.
    Closed,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Relayed(o) => o.write(buf),
            Sink::Fd(f) => (&**f).write(buf),
            Sink::Closed => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Relayed(o) => o.flush(),
            Sink::Fd(f) => (&**f).flush(),
            Sink::Closed => Ok(()),
        }
    }
}

/// A session's streams, as a run uses them.
#[derive(Debug)]
pub struct Streams {
    /// The client's descriptors, when the session took them.
    pub client: Option<ngw::ClientFds>,
    /// Where `output` goes.
    pub out: Sink,
    /// Where logs, warnings, errors and progress go.
    pub err: Sink,
    /// Whether the client's fds 0, 1, 2 are terminals.
    pub tty: [bool; 3],
    /// The width of the terminal on fd 2 (80 when unknown).
    pub width: u16,
}

impl Streams {
    /// The session's streams: its client's descriptors when it took them.
    pub fn of(session: &mut ngw::Session) -> Self {
        let columns = session
            .var("COLUMNS")
            .and_then(|c| c.to_str()?.parse().ok());
        match session.take_client_fds() {
            Some(fds) => {
                let sink = |n: usize| match fds.dup(n) {
                    Some(Ok(fd)) => Sink::Fd(Arc::new(File::from(fd))),
                    _ => Sink::Closed,
                };
                let tty = [fds.is_tty(0), fds.is_tty(1), fds.is_tty(2)];
                let width = fds
                    .dup(2)
                    .and_then(Result::ok)
                    .and_then(|fd| sys::terminal_width(fd.as_fd()))
                    .or(columns)
                    .unwrap_or(80);
                Self {
                    out: sink(1),
                    err: sink(2),
                    client: Some(fds),
                    tty,
                    width,
                }
            }
            None => Self {
                out: Sink::Relayed(session.stdout()),
                err: Sink::Relayed(session.stderr()),
                client: None,
                tty: [0, 1, 2].map(|n| session.is_tty(n) == Some(true)),
                width: columns.unwrap_or(80),
            },
        }
    }

    /// A new descriptor for the client's fd `n`, when the session took them and it is open.
    pub fn dup(&self, n: usize) -> Option<OwnedFd> {
        self.client.as_ref()?.dup(n)?.ok()
    }

    /// Whether the run is on the client's own descriptors.
    pub fn on_client(&self) -> bool {
        self.client.is_some()
    }
}
