//! One session as a handler sees it: the client's request, its stdin and output (or the
//! client's own descriptors), the interrupts ngd forwards, and how it ends.

use crate::fds::ClientFds;
use crate::feature::Negotiated;
use crate::writer::{lock, Writer};
use crossbeam_channel::{Receiver, Sender};
use ng_proto::ext::{ExitReport, FdMap, SignalName, WinSize};
use ng_proto::ChunkType;
use ng_proto::Signal;
use ngw_vocab::NoticeKind;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

/// The largest output chunk a session sends.
pub const MAX_OUTPUT_CHUNK: usize = 64 * 1024;

/// An interrupt ngd forwarded for a session (`docs/ngw.md` §8, §15.5).
#[derive(Clone, PartialEq, Eq)]
pub enum Interrupt {
    /// The client is gone: stdin has ended and output is discarded.
    Hangup,
    /// A signal the client received (`SIGINT`, `SIGTERM`, `SIGWINCH`, ...), for the
    /// command's process group (`i SIGNAME`). Any well-formed name: [`SignalName::signal`]
    /// is the [`ng_proto::Signal`] it stands for when this system knows it.
    Signal(SignalName),
    /// A signal for the command's own process only (`i "SIGNAME process"`, `signals`).
    ProcessSignal(SignalName),
    /// The client's terminal was resized (`i "winsize <cols> <rows> <xp> <yp>"`,
    /// `signals`): a command on the client's terminal gets SIGWINCH, an emulated terminal
    /// takes the new size.
    WindowSize(WinSize),
}

impl std::fmt::Debug for Interrupt {
    /// Signal names show as strings: `Signal("SIGINT")`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Interrupt::Hangup => f.write_str("Hangup"),
            Interrupt::Signal(name) => f.debug_tuple("Signal").field(&name.as_str()).finish(),
            Interrupt::ProcessSignal(name) => f
                .debug_tuple("ProcessSignal")
                .field(&name.as_str())
                .finish(),
            Interrupt::WindowSize(size) => f.debug_tuple("WindowSize").field(size).finish(),
        }
    }
}

/// The stdin state shared by the channel reader and the session's [`Stdin`].
#[derive(Debug, Default)]
pub(crate) struct StdinState {
    /// Chunks received and not yet read.
    pub(crate) queue: VecDeque<Vec<u8>>,
    /// An `S` is outstanding (classic stdin).
    pub(crate) credit: bool,
    /// Bytes granted by windowed `S` chunks and not yet received (`stdin-window`).
    pub(crate) window_left: u64,
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
        st.window_left = st.window_left.saturating_sub(data.len() as u64);
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
    /// Signals the client's parent left ignored (`NGW_SIGIGN`), which a cold command
    /// would inherit as ignored.
    pub ignored_signals: Vec<SignalName>,
    pub(crate) stdin: Stdin,
    pub(crate) stdout: Output,
    pub(crate) stderr: Output,
    pub(crate) interrupts: Receiver<Interrupt>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) client_fds: Option<ClientFds>,
    /// The session took the client's descriptors.
    pub(crate) took_fds: bool,
    /// The session's id on the channel (for chunks).
    channel_id: u64,
    /// Set by [`Session::exit_by_signal`].
    exit_signal: Option<(Signal, bool)>,
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
    /// `NGW_CLIENT_FDS`: `Some(None)` when present but malformed.
    pub(crate) client_fds: Option<Option<FdMap>>,
    /// `NGW_SIGIGN`.
    pub(crate) sigign: Vec<SignalName>,
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
                b"CLIENT_FDS" => self.client_fds = Some(FdMap::parse(value)),
                b"SIGIGN" => {
                    self.sigign = ng_proto::ext::parse_signal_list(value);
                }
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
        channel_id: u64,
        command: String,
        header: Header,
        writer: Arc<Writer>,
        shared: Arc<Shared>,
        interrupts: Receiver<Interrupt>,
    ) -> Self {
        let output = |ty| Output {
            writer: writer.clone(),
            session: channel_id,
            ty,
            shared: shared.clone(),
        };
        Self {
            id,
            command,
            args: header.args,
            env: header.env,
            cwd: header.cwd.unwrap_or_else(|| PathBuf::from("/")),
            umask: header.umask,
            client_pid: header.client_pid,
            ignored_signals: header.sigign,
            stdin: Stdin {
                writer: writer.clone(),
                session: channel_id,
                shared: shared.clone(),
                current: Vec::new(),
                pos: 0,
            },
            stdout: output(ChunkType::STDOUT),
            stderr: output(ChunkType::STDERR),
            interrupts,
            shared,
            client_fds: None,
            took_fds: false,
            channel_id,
            exit_signal: None,
        }
    }

    /// What the channel negotiated (`docs/ngw.md` §15).
    pub fn negotiated(&self) -> Negotiated {
        self.stdout.writer.negotiated
    }

    /// Whether this session took the client's descriptors (`fds`, `docs/ngw.md` §15.4);
    /// stays true after [`Session::take_client_fds`].
    pub fn has_client_fds(&self) -> bool {
        self.took_fds()
    }

    fn took_fds(&self) -> bool {
        self.took_fds
    }

    /// The client's descriptors, when the session came with them and the worker takes
    /// them ([`crate::Hello::client_fds`]); given once. The command runs on them: ngd
    /// relays no stdin ([`Session::stdin`] reads end of file), while [`Session::stdout`]
    /// and [`Session::stderr`] still reach the client, for the worker's own messages.
    pub fn take_client_fds(&mut self) -> Option<ClientFds> {
        self.client_fds.take()
    }

    /// Ends the session as a death by signal `name` (`SIGKILL`, `SIGSEGV`, ...), `core`
    /// when a core was dumped: its `X` is `"<128+N> <SIGNAME>[ core]\n"` when `signals`
    /// was negotiated, `"<128+N>\n"` otherwise, whatever the handler returns. `false`
    /// (and no effect) for a name this system does not know.
    pub fn exit_by_signal(&mut self, name: &str, core: bool) -> bool {
        match Signal::from_name(name.as_bytes()) {
            Some(signal) => {
                self.exit_signal = Some((signal, core));
                true
            }
            None => false,
        }
    }

    /// The `X` payload for a handler that returned `code`.
    pub(crate) fn exit_payload(&self, code: i32) -> Vec<u8> {
        match &self.exit_signal {
            Some((signal, core)) => {
                let code = 128 + signal.number();
                if self.negotiated().signals {
                    ExitReport::Signal {
                        code,
                        signal: signal.to_name(),
                        core: *core,
                    }
                    .to_payload()
                } else {
                    format!("{}\n", code.clamp(0, 255)).into_bytes()
                }
            }
            None => format!("{}\n", code.clamp(0, 255)).into_bytes(),
        }
    }

    /// Tells ngd the command stopped itself with signal `name` (`z`, `signals`): ngd stops
    /// the client too and continues the command with [`Interrupt::Signal`] `SIGCONT` once
    /// the client is resumed. `Ok(false)` when `signals` was not negotiated (nothing sent).
    ///
    /// Not for a stop that answers a forwarded stop signal: between an
    /// [`Interrupt::Signal`] `SIGTSTP` (`SIGTTIN`, `SIGTTOU`, `SIGSTOP`) and the next
    /// `SIGCONT` the client is stopped already, and a report that reaches it after it was
    /// continued would stop it again (`docs/ngw.md` §15.5).
    pub fn stopped(&self, name: &str) -> io::Result<bool> {
        if !self.negotiated().signals {
            return Ok(false);
        }
        let Some(n) = SignalName::new(name.as_bytes()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a signal name: {name:?}"),
            ));
        };
        self.stdout
            .writer
            .send(self.channel_id, ChunkType::WORKER_STOPPED, n.as_bytes())?;
        Ok(true)
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

    /// The session's stdin (lazy: input is asked for only when a read finds none; with
    /// `stdin-window`, a window at a time, topped up once half of it has been read). Reads
    /// end of file at once when the session took the client's descriptors.
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

    /// Tells ngd something about this session (`docs/ngw.md` §15.3).
    pub fn notice(&self, kind: NoticeKind, message: &str) {
        self.stdout.writer.notice(&kind, message, Some(self.id));
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

impl Stdin {
    /// With `stdin-window`: once half the window has arrived and been taken for reading,
    /// asks for as much again, so input streams without a round trip per chunk while at
    /// most one window is buffered or in flight.
    fn top_up(&self, st: &mut StdinState) {
        let Some(window) = self.writer.negotiated.stdin_window else {
            return;
        };
        let window = u64::from(window);
        let buffered: u64 = st.queue.iter().map(|c| c.len() as u64).sum();
        let used = window.saturating_sub(st.window_left + buffered);
        if st.eof || used < window.div_ceil(2) {
            return;
        }
        if self
            .writer
            .send(
                self.session,
                ChunkType::SEND_INPUT,
                used.to_string().as_bytes(),
            )
            .is_ok()
        {
            st.window_left += used;
        }
    }
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
                self.top_up(&mut st);
                continue;
            }
            if st.eof {
                return Ok(0);
            }
            if let Some(window) = self.writer.negotiated.stdin_window {
                if st.window_left == 0 {
                    // Sent under the stdin lock, as below.
                    st.window_left = u64::from(window);
                    if self
                        .writer
                        .send(
                            self.session,
                            ChunkType::SEND_INPUT,
                            window.to_string().as_bytes(),
                        )
                        .is_err()
                    {
                        return Ok(0);
                    }
                    drop(st);
                    continue;
                }
            } else if !st.credit {
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
    use std::os::unix::net::UnixStream;

    /// Reads one chunk (type and payload) from the peer of a writer.
    fn chunk(peer: &mut UnixStream) -> (u8, Vec<u8>) {
        let mut head = [0u8; 5];
        peer.read_exact(&mut head).unwrap();
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let mut payload = vec![0; len];
        peer.read_exact(&mut payload).unwrap();
        (head[4], payload)
    }

    #[test]
    fn windowed_stdin_asks_for_a_window_and_tops_it_up_at_half() {
        let (ours, mut peer) = UnixStream::pair().unwrap();
        let writer = Arc::new(Writer::plain(
            ours,
            Negotiated {
                stdin_window: Some(100),
                ..Negotiated::default()
            },
        ));
        let (shared, _rx) = Shared::new();
        let mut stdin = Stdin {
            writer,
            session: 0,
            shared: shared.clone(),
            current: Vec::new(),
            pos: 0,
        };
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            stdin.read_to_end(&mut all).unwrap();
            all
        });
        // The first read asks for a whole window.
        assert_eq!(chunk(&mut peer), (b'S', b"100".to_vec()));
        // Several `0` chunks answer one `S`; once 60 of the 100 bytes are taken for
        // reading, 60 more are asked for.
        shared.push_stdin(vec![b'a'; 30]);
        shared.push_stdin(vec![b'b'; 30]);
        assert_eq!(chunk(&mut peer), (b'S', b"60".to_vec()));
        shared.push_stdin(vec![b'c'; 40]);
        shared.push_stdin(vec![b'd'; 60]);
        assert_eq!(chunk(&mut peer), (b'S', b"100".to_vec()));
        shared.stdin_eof();
        let all = reader.join().unwrap();
        assert_eq!(all.len(), 160);
        assert!(all.starts_with(&[b'a'; 30]) && all.ends_with(&[b'd'; 60]));
        // Nothing more was asked for after end of file: the channel ends (the reader's
        // end dropped the writer) with no further chunk.
        assert_eq!(peer.read(&mut [0u8; 1]).unwrap(), 0);
    }

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
