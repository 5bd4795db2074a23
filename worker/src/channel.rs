//! The channel to ngd: the hello and the extensions it negotiates, the reader loop that
//! routes chunks (and passed descriptors) to sessions, and the shared writer.

use crate::fds::{self, Batches, ClientFds};
use crate::feature::Negotiated;
use crate::session::{Header, Interrupt, Session, Shared};
use crate::writer::{lock, Writer};
use crate::Handler;
use bytes::BytesMut;
use ng_proto::codec::{encode, Decoder, Limits};
use ng_proto::ext::{SignalName, WinSize};
use ng_proto::ChunkType;
use ngw_vocab::{WorkerFeature, WorkerFeatures, PROTOCOL};
use serde_json::Value;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

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

/// The stdin window a worker asks for when it opts into `stdin-window` without a size.
pub const DEFAULT_STDIN_WINDOW: u32 = 256 * 1024;

/// Which commands take the client's descriptors (`fds`); decided from the command name
/// alone, because the answer (`t`) goes out as soon as the header is read.
#[derive(Clone)]
pub struct FdPolicy(Arc<dyn Fn(&str) -> bool + Send + Sync>);

impl std::fmt::Debug for FdPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FdPolicy(..)")
    }
}

/// The worker's hello (`docs/ngw.md` §5).
#[derive(Clone, Debug)]
pub struct Hello {
    commands: Vec<String>,
    max_sessions: u32,
    client_fds: Option<FdPolicy>,
    signals: bool,
    stdin_window: Option<u32>,
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
            client_fds: None,
            signals: false,
            stdin_window: None,
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

    /// Takes the client's descriptors (`fds`, `docs/ngw.md` §15.4) for every command
    /// (`true`) or none (`false`). Sessions that take them get
    /// [`Session::take_client_fds`]; ngd then relays no stdin for them.
    pub fn client_fds(self, take: bool) -> Self {
        self.client_fds_when(move |_| take)
    }

    /// Takes the client's descriptors for the commands `take` accepts (by name).
    pub fn client_fds_when(mut self, take: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.client_fds = Some(FdPolicy(Arc::new(take)));
        self
    }

    /// Understands forwarded signals, window sizes, stops and deaths by signal
    /// (`signals`, `docs/ngw.md` §15.5): [`Interrupt::ProcessSignal`],
    /// [`Interrupt::WindowSize`], [`Session::stopped`], [`Session::exit_by_signal`].
    pub fn signals(mut self, on: bool) -> Self {
        self.signals = on;
        self
    }

    /// Asks for stdin in windows of `bytes` (`stdin-window`, `docs/ngw.md` §15.6; 1 byte
    /// to 64 MiB, [`DEFAULT_STDIN_WINDOW`] is a good size).
    pub fn stdin_window(mut self, bytes: u32) -> Self {
        self.stdin_window = Some(bytes.clamp(1, ng_proto::ext::MAX_STDIN_GRANT));
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

    /// What this hello asks for, given what the host supports.
    fn negotiate(&self, host: &Channel) -> Negotiated {
        let host = host.host_features;
        Negotiated {
            mux: self.max_sessions > 1 && host.contains(WorkerFeature::Mux),
            notices: host.contains(WorkerFeature::Notices),
            fds: self.client_fds.is_some() && host.contains(WorkerFeature::Fds),
            signals: self.signals && host.contains(WorkerFeature::Signals),
            stdin_window: self
                .stdin_window
                .filter(|_| host.contains(WorkerFeature::StdinWindow)),
        }
    }

    fn to_json(&self, n: &Negotiated) -> Value {
        let hello = ngw_vocab::Hello {
            protocol: Some(PROTOCOL.into()),
            pid: Some(std::process::id()),
            commands: self.commands.clone(),
            features: n.features(),
            max_chunk: Some(MAX_CHUNK.into()),
            kill_grace_ms: self.kill_grace_ms,
            max_sessions: Some(if n.mux { self.max_sessions } else { 1 }.into()),
            sdk: Some(self.sdk.clone()),
            runtime: self.runtime.clone(),
            ..ngw_vocab::Hello::default()
        };
        let mut map = hello.to_json();
        for (k, val) in &self.extra {
            map.insert(k.clone(), val.clone());
        }
        Value::Object(map)
    }
}

/// The channel to ngd.
#[derive(Debug)]
pub struct Channel {
    stream: UnixStream,
    /// What ngd supports (`NGW_HOST_FEATURES`).
    host_features: WorkerFeatures,
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
        match ng_sys::socket::int_option(fd, libc::SOL_SOCKET, libc::SO_TYPE) {
            Ok(libc::SOCK_STREAM) => {}
            _ => return Err(Error::NotASocket(fd)),
        }
        let _ = ng_sys::fd::set_cloexec(fd);
        let host_features = std::env::var("NGW_HOST_FEATURES").unwrap_or_default();
        std::env::remove_var("NGW_FD");
        std::env::remove_var("NGW_VERSION");
        std::env::remove_var("NGW_HOST_FEATURES");
        // The descriptor was inherited for us and nothing else owns it.
        let stream =
            UnixStream::from(ng_sys::fd::claim_inherited(fd).map_err(|_| Error::NotASocket(fd))?);
        Ok(Self::from_stream(stream).host_features(&host_features))
    }

    /// A channel over an already connected stream (tests, embedding), with no host
    /// features until [`Channel::host_features`] says otherwise.
    pub fn from_stream(stream: UnixStream) -> Self {
        Self {
            stream,
            host_features: WorkerFeatures::NONE,
        }
    }

    /// Sets what the host supports, as `NGW_HOST_FEATURES` lists it (comma-separated).
    pub fn host_features(mut self, list: &str) -> Self {
        self.host_features = WorkerFeatures::parse_list(list);
        self
    }

    /// Whether the host supports `feature`.
    pub fn host_supports(&self, feature: WorkerFeature) -> bool {
        self.host_features.contains(feature)
    }

    /// Says the worker cannot start (an error hello, `docs/ngw.md` §5) and closes.
    pub fn refuse(mut self, reason: &str) -> Result<(), Error> {
        let hello = Value::Object(
            ngw_vocab::Hello {
                protocol: Some(PROTOCOL.into()),
                pid: Some(std::process::id()),
                error: Some(reason.to_owned()),
                ..ngw_vocab::Hello::default()
            }
            .to_json(),
        );
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
    pub fn serve<H: Handler>(self, hello: Hello, handler: H) -> Result<(), Error> {
        let negotiated = hello.negotiate(&self);
        let handler = Arc::new(handler);
        let writer = Arc::new(Writer::new(self.stream.try_clone()?, negotiated));
        writer.send_control(
            ChunkType::WORKER_HELLO,
            hello.to_json(&negotiated).to_string().as_bytes(),
        )?;
        let mut reader = Reader {
            stream: self.stream,
            decoder: Decoder::new(Limits {
                max_chunk_len: MAX_CHUNK,
            }),
            buf: BytesMut::with_capacity(64 * 1024),
            consumed: 0,
            batches: Batches::default(),
            mux: negotiated.mux,
            take_fds: hello.client_fds.clone(),
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
    /// Stream offset of `buf`'s first byte (bytes decoded so far).
    consumed: u64,
    /// Descriptors waiting for their session.
    batches: Batches,
    mux: bool,
    /// Which commands take the client's descriptors (`None`: the worker never does).
    take_fds: Option<FdPolicy>,
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

/// Parses an `i` payload other than `hangup` (`docs/ngw.md` §8, §15.5).
pub(crate) fn parse_interrupt(payload: &[u8]) -> Option<Interrupt> {
    if let Some(size) = payload.strip_prefix(b"winsize ") {
        return WinSize::parse(size).map(Interrupt::WindowSize);
    }
    if let Some(name) = payload.strip_suffix(b" process") {
        return SignalName::new(name).map(Interrupt::ProcessSignal);
    }
    SignalName::new(payload).map(Interrupt::Signal)
}

impl Reader {
    fn run<H: Handler>(&mut self, handler: &Arc<H>) -> Result<(), Error> {
        let mut scratch = vec![0u8; 64 * 1024];
        loop {
            loop {
                let before = self.buf.len();
                let Some(chunk) = self
                    .decoder
                    .decode(&mut self.buf)
                    .map_err(|e| Error::Protocol(e.to_string()))?
                else {
                    break;
                };
                let start = self.consumed;
                self.consumed += (before - self.buf.len()) as u64;
                self.on_chunk(start, chunk.ty, chunk.payload.to_vec(), handler)?;
                if self.quitting && self.headers.is_empty() {
                    return Ok(());
                }
            }
            // Every byte before `consumed` is decoded: batches whose read is all decoded
            // and that no header still being received claims are closed now.
            self.settle_batches(self.consumed, None);
            let got = match fds::recv_with_fds(self.stream.as_raw_fd(), &mut scratch) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if got.len == 0 {
                return Ok(());
            }
            let start = self.consumed + self.buf.len() as u64;
            if got.truncated {
                // Some of the descriptors were lost: none of them can be used.
                eprintln!("ngw: descriptors from ngd arrived truncated; closed them");
                drop(got.fds);
            } else {
                self.batches.arrived(start, start + got.len as u64, got.fds);
            }
            self.buf.extend_from_slice(&scratch[..got.len]);
        }
    }

    /// Tells the descriptor batches a chunk starts at `at` (starting session `starts`). A
    /// claimed batch waits while its session's header is being received (with `mux`, from
    /// its `s` on).
    fn settle_batches(&mut self, at: u64, starts: Option<u64>) {
        let (headers, running, selected, mux) =
            (&self.headers, &self.running, self.selected, self.mux);
        self.batches.chunk_at(at, starts, |id| {
            headers.contains_key(&id) || (mux && selected == Some(id) && running.get(id).is_none())
        });
    }

    fn current(&self) -> Result<u64, Error> {
        if self.mux {
            self.selected
                .ok_or_else(|| Error::Protocol("session chunk before any `s`".into()))
        } else {
            Ok(PLAIN)
        }
    }

    /// The session a chunk starts, for the descriptor batches: an `s` naming a session
    /// that is not running yet, or on a plain channel the first chunk of a header.
    fn starts_session(&self, ty: ChunkType, payload: &[u8]) -> Option<u64> {
        match ty {
            ChunkType::WORKER_SELECT if self.mux => {
                let id = std::str::from_utf8(payload).ok()?.parse().ok()?;
                self.running.get(id).is_none().then_some(id)
            }
            ChunkType::ARGUMENT
            | ChunkType::ENVIRONMENT
            | ChunkType::WORKING_DIR
            | ChunkType::COMMAND
                if !self.mux && !self.headers.contains_key(&PLAIN) =>
            {
                Some(PLAIN)
            }
            _ => None,
        }
    }

    fn on_chunk<H: Handler>(
        &mut self,
        start: u64,
        ty: ChunkType,
        payload: Vec<u8>,
        handler: &Arc<H>,
    ) -> Result<(), Error> {
        let starts = self.starts_session(ty, &payload);
        if starts == Some(PLAIN) {
            self.header(PLAIN);
        }
        self.settle_batches(start, starts);
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
                let end = start + 5 + payload.len() as u64;
                let passed = self.batches.header_done(id, end);
                let header = self.headers.remove(&id).unwrap_or_default();
                self.start(id, payload, header, passed, handler);
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
                    } else if let Some(i) = parse_interrupt(&payload) {
                        let _ = s.interrupts.send(i);
                    } else {
                        eprintln!(
                            "ngw: ignored an unknown interrupt {:?}",
                            String::from_utf8_lossy(&payload)
                        );
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

    /// Decides about the descriptors a header came with (`docs/ngw.md` §15.4): the
    /// session's [`ClientFds`] when they match `NGW_CLIENT_FDS` and the worker takes them
    /// for `command`; otherwise they are closed. Sends `t` for every session that came
    /// with descriptors (or whose header says it did).
    fn client_fds(
        &self,
        id: u64,
        command: &str,
        header: &Header,
        passed: Option<Vec<OwnedFd>>,
    ) -> Option<ClientFds> {
        if !self.writer.negotiated.fds {
            if passed.is_some() {
                eprintln!("ngw: descriptors from ngd without `fds`; closed them");
            }
            return None;
        }
        if passed.is_none() && header.client_fds.is_none() {
            return None;
        }
        let map = header.client_fds.and_then(|m| m);
        let fds = match (map, passed) {
            (Some(map), Some(fds)) if fds.len() == map.count() => Some((map, fds)),
            (map, fds) => {
                eprintln!(
                    "ngw: session {command}: NGW_CLIENT_FDS {} but {} descriptors arrived; closed them",
                    map.map(|m| m.to_value()).unwrap_or_else(|| "absent or malformed".into()),
                    fds.map_or(0, |f| f.len())
                );
                None
            }
        };
        let take = fds.is_some() && self.take_fds.as_ref().is_some_and(|p| (p.0)(command));
        let answer: &[u8] = if take { b"" } else { b"relay" };
        let _ = self.writer.send(id, ChunkType::WORKER_TAKEN, answer);
        let (map, fds) = fds.filter(|_| take)?;
        let mut slots: [Option<OwnedFd>; 3] = [None, None, None];
        for (fd, n) in fds.into_iter().zip(map.fds()) {
            slots[n] = Some(fd);
        }
        Some(ClientFds::new(slots))
    }

    fn start<H: Handler>(
        &mut self,
        id: u64,
        command: Vec<u8>,
        header: Header,
        passed: Option<Vec<OwnedFd>>,
        handler: &Arc<H>,
    ) {
        let (shared, interrupts) = Shared::new();
        let public_id = if id == PLAIN {
            header.ngw_session.unwrap_or(0)
        } else {
            id
        };
        let name = String::from_utf8_lossy(&command).into_owned();
        let client_fds = self.client_fds(id, &name, &header, passed);
        if client_fds.is_some() {
            // ngd relays no stdin for a session that took the descriptors.
            shared.stdin_eof();
        }
        lock(&self.running.sessions).insert(id, shared.clone());
        *lock(&self.running.threads) += 1;
        let mut session = Session::new(
            public_id,
            id,
            name,
            header,
            self.writer.clone(),
            shared,
            interrupts,
        );
        session.took_fds = client_fds.is_some();
        session.client_fds = client_fds;
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
                let payload = session.exit_payload(code);
                let shared = session.shared.clone();
                drop(session);
                shared.end();
                lock(&running.sessions).remove(&id);
                let _ = writer.send(id, ChunkType::EXIT, &payload);
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

#[cfg(test)]
mod tests {
    use super::*;
    use ng_proto::Signal;

    #[test]
    fn interrupts_parse_every_form() {
        assert_eq!(
            parse_interrupt(b"SIGINT"),
            Some(Interrupt::Signal(Signal::Int.into()))
        );
        assert_eq!(
            parse_interrupt(b"SIGTERM process"),
            Some(Interrupt::ProcessSignal(Signal::Term.into()))
        );
        assert_eq!(
            parse_interrupt(b"winsize 120 40 0 0"),
            Some(Interrupt::WindowSize(WinSize {
                cols: 120,
                rows: 40,
                xpixel: 0,
                ypixel: 0
            }))
        );
        for bad in [
            &b"sigint"[..],
            b"SIG",
            b"SIGINT group",
            b"winsize 1 2 3",
            b"winsize 1 2 3 99999999",
            b"",
            b"\xff",
        ] {
            assert_eq!(parse_interrupt(bad), None, "{bad:?}");
        }
    }
}
