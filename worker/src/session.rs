//! One session as a handler sees it: the client's request, its stdin and output, and the
//! interrupts ngd forwards.

use crate::channel::Writer;
use crossbeam_channel::{Receiver, Sender};
use ng_proto::ChunkType;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

/// The largest output chunk a session sends.
pub const MAX_OUTPUT_CHUNK: usize = 64 * 1024;

/// An interrupt ngd forwarded for a session (`docs/ngw.md` §8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// The client is gone: stdin has ended and output is discarded.
    Hangup,
    /// A signal the client received, by name (`SIGINT`, `SIGTERM`, `SIGWINCH`, ...).
    Signal(String),
}

/// The stdin state shared by the channel reader and the session's [`Stdin`].
#[derive(Debug, Default)]
pub(crate) struct StdinState {
    /// Chunks received and not yet read.
    pub(crate) queue: VecDeque<Vec<u8>>,
    /// An `S` is outstanding.
    pub(crate) credit: bool,
    /// `.` arrived, or the client hung up.
    pub(crate) eof: bool,
}

/// What the channel's reader thread and a session's handler share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) stdin: Mutex<StdinState>,
    pub(crate) stdin_ready: Condvar,
    pub(crate) hung_up: std::sync::atomic::AtomicBool,
    pub(crate) interrupts: Sender<Interrupt>,
}

impl Shared {
    pub(crate) fn new() -> (Arc<Self>, Receiver<Interrupt>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Self {
            stdin: Mutex::new(StdinState::default()),
            stdin_ready: Condvar::new(),
            hung_up: std::sync::atomic::AtomicBool::new(false),
            interrupts: tx,
        });
        (shared, rx)
    }

    /// A `0` chunk arrived.
    pub(crate) fn push_stdin(&self, data: Vec<u8>) {
        let mut st = lock(&self.stdin);
        st.credit = false;
        if !st.eof && !data.is_empty() {
            st.queue.push_back(data);
        }
        self.stdin_ready.notify_all();
    }

    /// A `.` arrived.
    pub(crate) fn stdin_eof(&self) {
        let mut st = lock(&self.stdin);
        st.credit = false;
        st.eof = true;
        self.stdin_ready.notify_all();
    }

    /// The client is gone (`i hangup`, or the channel closed).
    pub(crate) fn hang_up(&self) {
        self.hung_up
            .store(true, std::sync::atomic::Ordering::SeqCst);
        {
            let mut st = lock(&self.stdin);
            st.eof = true;
            st.queue.clear();
            self.stdin_ready.notify_all();
        }
        let _ = self.interrupts.send(Interrupt::Hangup);
    }

    /// The session has ended: a stdin still read (say, by a thread the handler left
    /// behind) reads end of file and never asks for more.
    pub(crate) fn end(&self) {
        let mut st = lock(&self.stdin);
        st.eof = true;
        st.queue.clear();
        self.stdin_ready.notify_all();
    }

    pub(crate) fn is_hung_up(&self) -> bool {
        self.hung_up.load(std::sync::atomic::Ordering::SeqCst)
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One client's command, as the worker runs it.
#[derive(Debug)]
pub struct Session {
    /// ngd's session id (`NGW_SESSION`).
    pub id: u64,
    /// The command name (after ngd's alias resolution).
    pub command: String,
    /// The arguments after the command name, as raw bytes.
    pub args: Vec<OsString>,
    /// The client's environment in its order, without ngd's `NGW_*` metadata.
    pub env: Vec<(OsString, OsString)>,
    /// The client's working directory.
    pub cwd: PathBuf,
    /// The client's umask (`NGW_UMASK`).
    pub umask: Option<u32>,
    /// The client's pid (`NGW_CLIENT_PID`), when ngd knows it.
    pub client_pid: Option<u32>,
    pub(crate) stdin: Stdin,
    pub(crate) stdout: Output,
    pub(crate) stderr: Output,
    pub(crate) interrupts: Receiver<Interrupt>,
    pub(crate) shared: Arc<Shared>,
}

/// A session's header as it arrives, before `C`.
#[derive(Debug, Default)]
pub(crate) struct Header {
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) umask: Option<u32>,
    pub(crate) client_pid: Option<u32>,
    pub(crate) ngw_session: Option<u64>,
}

impl Header {
    /// Adds an `E` entry: `NGW_*` metadata is taken out, entries with no `=` or an empty
    /// name are dropped, and a repeated name replaces the earlier value.
    pub(crate) fn add_env(&mut self, entry: &[u8]) {
        let Some(eq) = entry.iter().position(|&b| b == b'=') else {
            return;
        };
        if eq == 0 || entry.contains(&0) {
            return;
        }
        let (name, value) = (&entry[..eq], &entry[eq + 1..]);
        if let Some(meta) = name.strip_prefix(b"NGW_") {
            let text = std::str::from_utf8(value).unwrap_or("");
            match meta {
                b"UMASK" => self.umask = u32::from_str_radix(text, 8).ok(),
                b"CLIENT_PID" => self.client_pid = text.parse().ok(),
                b"SESSION" => self.ngw_session = text.parse().ok(),
                _ => {}
            }
            return;
        }
        let name = OsStr::from_bytes(name).to_owned();
        let value = OsStr::from_bytes(value).to_owned();
        if let Some(slot) = self.env.iter_mut().find(|(n, _)| *n == name) {
            slot.1 = value;
        } else {
            self.env.push((name, value));
        }
    }
}

impl Session {
    pub(crate) fn new(
        id: u64,
        command: Vec<u8>,
        header: Header,
        writer: Arc<Writer>,
        shared: Arc<Shared>,
        interrupts: Receiver<Interrupt>,
    ) -> Self {
        let output = |ty| Output {
            writer: writer.clone(),
            session: id,
            ty,
            shared: shared.clone(),
        };
        Self {
            id,
            command: String::from_utf8_lossy(&command).into_owned(),
            args: header.args,
            env: header.env,
            cwd: header.cwd.unwrap_or_else(|| PathBuf::from("/")),
            umask: header.umask,
            client_pid: header.client_pid,
            stdin: Stdin {
                writer: writer.clone(),
                session: id,
                shared: shared.clone(),
                current: Vec::new(),
                pos: 0,
            },
            stdout: output(ChunkType::STDOUT),
            stderr: output(ChunkType::STDERR),
            interrupts,
            shared,
        }
    }

    /// The arguments as (lossy) UTF-8.
    pub fn args_lossy(&self) -> Vec<String> {
        self.args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// The value of the client's environment variable `name`.
    pub fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_os_str())
    }

    /// Whether the client's fd `n` (0, 1, 2) is a terminal, as the client reported it
    /// (`NAILGUN_TTY_n`); `None` when it did not say.
    pub fn is_tty(&self, n: u8) -> Option<bool> {
        self.var(&format!("NAILGUN_TTY_{n}"))
            .map(|v| v.as_bytes() == b"1")
    }

    /// The session's stdin (lazy: input is asked for only when a read finds none).
    pub fn stdin(&mut self) -> &mut Stdin {
        &mut self.stdin
    }

    /// The session's stdout; clones may be used from other threads.
    pub fn stdout(&self) -> Output {
        self.stdout.clone()
    }

    /// The session's stderr; clones may be used from other threads.
    pub fn stderr(&self) -> Output {
        self.stderr.clone()
    }

    /// Interrupts ngd forwarded, in order ([`Interrupt::Hangup`] when the client went).
    pub fn interrupts(&self) -> &Receiver<Interrupt> {
        &self.interrupts
    }

    /// Whether the client has gone away.
    pub fn hung_up(&self) -> bool {
        self.shared.is_hung_up()
    }

    /// Takes the stdin out, for a thread of its own (the session keeps a closed one).
    pub fn take_stdin(&mut self) -> Stdin {
        let closed = Stdin {
            writer: self.stdin.writer.clone(),
            session: self.id,
            shared: self.shared.clone(),
            current: Vec::new(),
            pos: 0,
        };
        std::mem::replace(&mut self.stdin, closed)
    }

    /// Tells ngd something about this session (`docs/ngw.md` §15.3): `kind` is
    /// `fallback`, `stale`, `retire` or an informational word.
    pub fn notice(&self, kind: &str, message: &str) {
        self.stdout.writer.notice(kind, message, Some(self.id));
    }

    /// Environment as `(String, String)` pairs, lossily decoded.
    pub fn env_lossy(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect()
    }

    /// Raw bytes of an argument list, for protocols that carry bytes.
    pub fn args_bytes(&self) -> Vec<Vec<u8>> {
        self.args.iter().map(|a| a.clone().into_vec()).collect()
    }
}

/// A session's stdin: `Read`, asking ngd for one chunk (`S`) when its buffer is empty.
#[derive(Debug)]
pub struct Stdin {
    writer: Arc<Writer>,
    session: u64,
    shared: Arc<Shared>,
    current: Vec<u8>,
    pos: usize,
}

impl Read for Stdin {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.pos < self.current.len() {
                let n = buf.len().min(self.current.len() - self.pos);
                buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            let mut st = lock(&self.shared.stdin);
            if let Some(next) = st.queue.pop_front() {
                self.current = next;
                self.pos = 0;
                continue;
            }
            if st.eof {
                return Ok(0);
            }
            if !st.credit {
                // Sent under the stdin lock: the session's end sets `eof` under the same
                // lock before its `X` goes out, so no `S` can follow the `X`.
                st.credit = true;
                if self
                    .writer
                    .send(self.session, ChunkType::SEND_INPUT, &[])
                    .is_err()
                {
                    return Ok(0);
                }
                drop(st);
                continue;
            }
            let _unused = self
                .shared
                .stdin_ready
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A session's stdout or stderr: `Write`, sending `1`/`2` chunks of at most 64 KiB.
/// After the client hangs up, writes succeed and are discarded.
#[derive(Clone, Debug)]
pub struct Output {
    writer: Arc<Writer>,
    session: u64,
    ty: ChunkType,
    shared: Arc<Shared>,
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.shared.is_hung_up() || buf.is_empty() {
            return Ok(buf.len());
        }
        let n = buf.len().min(MAX_OUTPUT_CHUNK);
        self.writer.send(self.session, self.ty, &buf[..n])?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_takes_metadata_out_and_keeps_the_last_value() {
        let mut h = Header::default();
        for e in [
            &b"A=1"[..],
            b"NGW_UMASK=0027",
            b"NGW_SESSION=41",
            b"NGW_CLIENT_PID=99",
            b"noequals",
            b"=empty",
            b"A=2",
            b"B=x=y",
        ] {
            h.add_env(e);
        }
        assert_eq!(h.umask, Some(0o027));
        assert_eq!(h.ngw_session, Some(41));
        assert_eq!(h.client_pid, Some(99));
        let env: Vec<_> = h
            .env
            .iter()
            .map(|(k, v)| (k.to_str().unwrap(), v.to_str().unwrap()))
            .collect();
        assert_eq!(env, [("A", "2"), ("B", "x=y")]);
    }
}
