//! The channel to ngd: the hello, the reader loop that routes chunks to sessions, and the
//! shared writer.

use crate::session::{lock, Header, Interrupt, Session, Shared};
use crate::Handler;
use bytes::BytesMut;
use ng_proto::codec::{encode, Decoder, Limits};
use ng_proto::ChunkType;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

/// The protocol version this crate speaks.
pub const PROTOCOL: u32 = 1;
/// The inbound chunk cap announced in the hello.
pub const MAX_CHUNK: u32 = 16 * 1024 * 1024;

/// What can go wrong on the channel.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `NGW_FD` is missing or malformed.
    #[error("NGW_FD is not set or not a descriptor number; this program is an ngd worker")]
    NoChannel,
    /// `NGW_VERSION` names a version this crate does not speak.
    #[error("NGW_VERSION={0} is not supported (this worker speaks {PROTOCOL})")]
    Version(String),
    /// The fd is not a stream socket.
    #[error("NGW_FD={0} is not a stream socket")]
    NotASocket(RawFd),
    /// ngd broke the protocol.
    #[error("protocol error from ngd: {0}")]
    Protocol(String),
    /// Reading or writing the channel failed.
    #[error("channel: {0}")]
    Io(#[from] io::Error),
}

/// Reports a spawn-environment error on stderr (the plugin's log) and exits 2, as
/// `docs/ngw.md` §1 asks.
pub fn exit_spawn_error(e: &Error) -> ! {
    eprintln!("ngw: {e}");
    std::process::exit(2)
}

/// The worker's hello (`docs/ngw.md` §5).
#[derive(Clone, Debug)]
pub struct Hello {
    commands: Vec<String>,
    max_sessions: u32,
    notices: bool,
    kill_grace_ms: Option<u64>,
    sdk: String,
    runtime: Option<String>,
    extra: serde_json::Map<String, Value>,
}

impl Hello {
    /// A hello serving `commands`, one session at a time.
    pub fn new<I, S>(commands: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            commands: commands.into_iter().map(Into::into).collect(),
            max_sessions: 1,
            notices: false,
            kill_grace_ms: None,
            sdk: format!("ngw-rust/{}", env!("CARGO_PKG_VERSION")),
            runtime: None,
            extra: serde_json::Map::new(),
        }
    }

    /// Runs up to `n` sessions at once (`mux`, `docs/ngw.md` §15.1); at least 1.
    pub fn max_sessions(mut self, n: u32) -> Self {
        self.max_sessions = n.clamp(1, 1024);
        self
    }

    /// How long the worker takes between a hangup and a forced end of its session.
    pub fn kill_grace_ms(mut self, ms: u64) -> Self {
        self.kill_grace_ms = Some(ms);
        self
    }

    /// The `sdk` string for logs and `ngd status`.
    pub fn sdk(mut self, sdk: impl Into<String>) -> Self {
        self.sdk = sdk.into();
        self
    }

    /// The `runtime` string (say, the bridged plugin's name and version).
    pub fn runtime(mut self, runtime: impl Into<String>) -> Self {
        self.runtime = Some(runtime.into());
        self
    }

    /// Adds a field (unknown fields are ignored by ngd).
    pub fn field(mut self, key: &str, value: Value) -> Self {
        self.extra.insert(key.to_owned(), value);
        self
    }

    /// The commands served.
    pub fn commands(&self) -> &[String] {
        &self.commands
    }

    fn to_json(&self) -> Value {
        let mut features = vec!["interrupt"];
        if self.max_sessions > 1 {
            features.push("mux");
        }
        if self.notices {
            features.push("notices");
        }
        let mut v = json!({
            "protocol": PROTOCOL,
            "pid": std::process::id(),
            "commands": self.commands,
            "features": features,
            "max_chunk": MAX_CHUNK,
            "max_sessions": self.max_sessions,
            "sdk": self.sdk,
        });
        let map = v.as_object_mut().expect("an object");
        if let Some(ms) = self.kill_grace_ms {
            map.insert("kill_grace_ms".into(), json!(ms));
        }
        if let Some(rt) = &self.runtime {
            map.insert("runtime".into(), json!(rt));
        }
        for (k, val) in &self.extra {
            map.insert(k.clone(), val.clone());
        }
        v
    }
}

/// The write half, shared by the reader (pongs) and every session.
#[derive(Debug)]
pub(crate) struct Writer {
    inner: Mutex<WriterState>,
}

#[derive(Debug)]
struct WriterState {
    stream: UnixStream,
    mux: bool,
    notices: bool,
    selected: Option<u64>,
    buf: BytesMut,
}

impl Writer {
    /// Sends a session chunk, selecting the session first on a `mux` channel.
    pub(crate) fn send(&self, session: u64, ty: ChunkType, payload: &[u8]) -> io::Result<()> {
        let mut w = lock(&self.inner);
        let w = &mut *w;
        w.buf.clear();
        if w.mux && w.selected != Some(session) {
            encode(
                ChunkType::WORKER_SELECT,
                session.to_string().as_bytes(),
                &mut w.buf,
            );
            w.selected = Some(session);
        }
        encode(ty, payload, &mut w.buf);
        w.stream.write_all(&w.buf)
    }

    /// Sends a notice (`docs/ngw.md` §15.3) when the host takes them; otherwise writes it
    /// to stderr, the plugin's log.
    pub(crate) fn notice(&self, kind: &str, message: &str, session: Option<u64>) {
        let notices = lock(&self.inner).notices;
        if !notices {
            eprintln!("ngw: {kind}: {message}");
            return;
        }
        let mut v = json!({"kind": kind, "message": message});
        if let Some(id) = session {
            v["session"] = json!(id);
        }
        let _ = self.send_control(ChunkType::WORKER_NOTICE, v.to_string().as_bytes());
    }

    /// Sends a chunk that belongs to no session (hello, pong).
    fn send_control(&self, ty: ChunkType, payload: &[u8]) -> io::Result<()> {
        let mut w = lock(&self.inner);
        let w = &mut *w;
        w.buf.clear();
        encode(ty, payload, &mut w.buf);
        w.stream.write_all(&w.buf)
    }

    fn shutdown(&self) {
        let w = lock(&self.inner);
        let _ = w.stream.shutdown(std::net::Shutdown::Write);
    }
}

/// The channel to ngd.
#[derive(Debug)]
pub struct Channel {
    stream: UnixStream,
    /// What ngd supports (`NGW_HOST_FEATURES`).
    host_features: Vec<String>,
}

impl Channel {
    /// The channel named by `NGW_FD`; removes `NGW_FD` and `NGW_VERSION` from the
    /// environment and marks the fd close-on-exec, so subprocesses inherit neither.
    pub fn from_env() -> Result<Self, Error> {
        if let Some(v) = std::env::var_os("NGW_VERSION") {
            if v != "1" {
                return Err(Error::Version(v.to_string_lossy().into_owned()));
            }
        }
        let fd: RawFd = std::env::var("NGW_FD")
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|fd| *fd >= 0)
            .ok_or(Error::NoChannel)?;
        // SAFETY: plain fcntl/getsockopt calls on an integer descriptor.
        unsafe {
            let mut ty: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            let rc = libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_TYPE,
                (&mut ty as *mut libc::c_int).cast(),
                &mut len,
            );
            if rc != 0 || ty != libc::SOCK_STREAM {
                return Err(Error::NotASocket(fd));
            }
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        let host_features = std::env::var("NGW_HOST_FEATURES").unwrap_or_default();
        std::env::remove_var("NGW_FD");
        std::env::remove_var("NGW_VERSION");
        std::env::remove_var("NGW_HOST_FEATURES");
        // SAFETY: the descriptor was inherited for us and nothing else owns it.
        let stream = unsafe { UnixStream::from_raw_fd(fd) };
        Ok(Self::from_stream(stream).host_features(&host_features))
    }

    /// A channel over an already connected stream (tests, embedding), with no host
    /// features until [`Channel::host_features`] says otherwise.
    pub fn from_stream(stream: UnixStream) -> Self {
        Self {
            stream,
            host_features: Vec::new(),
        }
    }

    /// Sets what the host supports, as `NGW_HOST_FEATURES` lists it (comma-separated).
    pub fn host_features(mut self, list: &str) -> Self {
        self.host_features = list
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect();
        self
    }

    /// Whether the host supports `feature`.
    pub fn host_supports(&self, feature: &str) -> bool {
        self.host_features.iter().any(|f| f == feature)
    }

    /// Says the worker cannot start (an error hello, `docs/ngw.md` §5) and closes.
    pub fn refuse(mut self, reason: &str) -> Result<(), Error> {
        let hello = json!({"protocol": PROTOCOL, "pid": std::process::id(), "error": reason});
        let mut buf = BytesMut::new();
        encode(
            ChunkType::WORKER_HELLO,
            hello.to_string().as_bytes(),
            &mut buf,
        );
        self.stream.write_all(&buf)?;
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        Ok(())
    }

    /// Says hello and serves sessions until ngd says quit or closes the channel; returns
    /// once every session has ended.
    ///
    /// Sessions run one at a time unless both the hello asks for more and the host supports
    /// `mux`.
    pub fn serve<H: Handler>(self, mut hello: Hello, handler: H) -> Result<(), Error> {
        if !self.host_supports("mux") {
            hello.max_sessions = 1;
        }
        hello.notices = self.host_supports("notices");
        let handler = Arc::new(handler);
        let writer = Arc::new(Writer {
            inner: Mutex::new(WriterState {
                stream: self.stream.try_clone()?,
                mux: hello.max_sessions > 1,
                notices: self.host_supports("notices"),
                selected: None,
                buf: BytesMut::new(),
            }),
        });
        writer.send_control(
            ChunkType::WORKER_HELLO,
            hello.to_json().to_string().as_bytes(),
        )?;
        let mut reader = Reader {
            stream: self.stream,
            decoder: Decoder::new(Limits {
                max_chunk_len: MAX_CHUNK,
            }),
            buf: BytesMut::with_capacity(64 * 1024),
            mux: hello.max_sessions > 1,
            selected: None,
            headers: HashMap::new(),
            running: Arc::new(Running::default()),
            writer,
            quitting: false,
        };
        let result = reader.run(&handler);
        // End of stream or quit: hang up what still runs, then wait for it.
        if result.is_err() || !reader.quitting {
            reader.running.hang_up_all();
        }
        reader.running.wait_empty();
        reader.writer.shutdown();
        result
    }
}

/// Sessions whose handler runs. A session leaves the map before its `X` is sent (so the
/// next header on a plain channel, which may reuse its id, never meets it) and the thread
/// count drops after (so the channel is not closed before the `X`).
#[derive(Debug, Default)]
struct Running {
    sessions: Mutex<HashMap<u64, Arc<Shared>>>,
    threads: Mutex<usize>,
    emptied: Condvar,
}

impl Running {
    fn get(&self, id: u64) -> Option<Arc<Shared>> {
        lock(&self.sessions).get(&id).cloned()
    }

    fn hang_up_all(&self) {
        for s in lock(&self.sessions).values() {
            s.hang_up();
        }
    }

    fn wait_empty(&self) {
        let mut threads = lock(&self.threads);
        while *threads > 0 {
            threads = self
                .emptied
                .wait(threads)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    fn thread_ended(&self) {
        *lock(&self.threads) -= 1;
        self.emptied.notify_all();
    }
}

struct Reader {
    stream: UnixStream,
    decoder: Decoder,
    buf: BytesMut,
    mux: bool,
    /// The session selected by ngd's last `s` (always `Some(0)`-like on a plain channel).
    selected: Option<u64>,
    /// Headers being received.
    headers: HashMap<u64, Header>,
    running: Arc<Running>,
    writer: Arc<Writer>,
    quitting: bool,
}

/// The session id used on a channel without `mux`; ngd's `NGW_SESSION` replaces it in
/// [`Session::id`] when present.
const PLAIN: u64 = u64::MAX;

impl Reader {
    fn run<H: Handler>(&mut self, handler: &Arc<H>) -> Result<(), Error> {
        let mut scratch = vec![0u8; 64 * 1024];
        loop {
            while let Some(chunk) = self
                .decoder
                .decode(&mut self.buf)
                .map_err(|e| Error::Protocol(e.to_string()))?
            {
                self.on_chunk(chunk.ty, chunk.payload.to_vec(), handler)?;
                if self.quitting && self.headers.is_empty() {
                    return Ok(());
                }
            }
            let n = match self.stream.read(&mut scratch) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            self.buf.extend_from_slice(&scratch[..n]);
        }
    }

    fn current(&self) -> Result<u64, Error> {
        if self.mux {
            self.selected
                .ok_or_else(|| Error::Protocol("session chunk before any `s`".into()))
        } else {
            Ok(PLAIN)
        }
    }

    fn on_chunk<H: Handler>(
        &mut self,
        ty: ChunkType,
        payload: Vec<u8>,
        handler: &Arc<H>,
    ) -> Result<(), Error> {
        match ty {
            ChunkType::WORKER_PING => {
                self.writer.send_control(ChunkType::WORKER_PONG, &payload)?;
            }
            ChunkType::WORKER_QUIT => {
                self.quitting = true;
            }
            ChunkType::WORKER_SELECT => {
                let id = std::str::from_utf8(&payload)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| Error::Protocol("`s` without a session id".into()))?;
                self.selected = Some(id);
            }
            ChunkType::ARGUMENT => {
                let id = self.current()?;
                self.header(id).args.push(OsString::from_vec(payload));
            }
            ChunkType::ENVIRONMENT => {
                let id = self.current()?;
                self.header(id).add_env(&payload);
            }
            ChunkType::WORKING_DIR => {
                let id = self.current()?;
                self.header(id).cwd = Some(PathBuf::from(OsString::from_vec(payload)));
            }
            ChunkType::COMMAND => {
                let id = self.current()?;
                let header = self.headers.remove(&id).unwrap_or_default();
                self.start(id, payload, header, handler);
            }
            ChunkType::STDIN => {
                if let Some(s) = self.session(self.current()?) {
                    s.push_stdin(payload);
                }
            }
            ChunkType::STDIN_EOF => {
                if let Some(s) = self.session(self.current()?) {
                    s.stdin_eof();
                }
            }
            ChunkType::WORKER_INTERRUPT => {
                if let Some(s) = self.session(self.current()?) {
                    if payload == b"hangup" {
                        s.hang_up();
                    } else {
                        let name = String::from_utf8_lossy(&payload).into_owned();
                        let _ = s.interrupts.send(Interrupt::Signal(name));
                    }
                }
            }
            // Heartbeats, long arguments and unknown types are ignored (§3).
            _ => {}
        }
        Ok(())
    }

    fn header(&mut self, id: u64) -> &mut Header {
        self.headers.entry(id).or_default()
    }

    fn session(&self, id: u64) -> Option<Arc<Shared>> {
        self.running.get(id)
    }

    fn start<H: Handler>(&mut self, id: u64, command: Vec<u8>, header: Header, handler: &Arc<H>) {
        let (shared, interrupts) = Shared::new();
        let public_id = if id == PLAIN {
            header.ngw_session.unwrap_or(0)
        } else {
            id
        };
        lock(&self.running.sessions).insert(id, shared.clone());
        *lock(&self.running.threads) += 1;
        let mut session = Session::new(
            public_id,
            command,
            header,
            self.writer.clone(),
            shared,
            interrupts,
        );
        let handler = handler.clone();
        let running = self.running.clone();
        let writer = self.writer.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("ngw-session-{public_id}"))
            .spawn(move || {
                let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    handler.run(&mut session)
                }))
                .unwrap_or_else(|_| {
                    let _ = session.stderr().write_all(b"ngw: the command panicked\n");
                    1
                });
                let shared = session.shared.clone();
                drop(session);
                shared.end();
                let code = code.clamp(0, 255);
                lock(&running.sessions).remove(&id);
                let _ = writer.send(id, ChunkType::EXIT, format!("{code}\n").as_bytes());
                running.thread_ended();
            });
        if spawned.is_err() {
            lock(&self.running.sessions).remove(&id);
            let _ = self
                .writer
                .send(id, ChunkType::STDERR, b"ngw: cannot start a thread\n");
            let _ = self.writer.send(id, ChunkType::EXIT, b"1\n");
            self.running.thread_ended();
        }
    }
}
