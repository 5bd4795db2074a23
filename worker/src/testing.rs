//! A test driver that plays ngd's side of the channel: spawn a worker (or take a stream),
//! read its hello, run sessions one at a time or concurrently (`mux`), and collect each
//! session's stdout, stderr and exit code. It speaks the extensions of `docs/ngw.md` §15:
//! a request may pass descriptors (`fds`, sent with `SCM_RIGHTS` on the header's first
//! byte), stdin answers windowed `S` (`stdin-window`), and an [`Outcome`] records the `t`
//! answer, the `z` stops and the raw `X` payload (`signals`). Blocking, with a timeout on
//! every wait; meant for tests of workers and bridges, not for production.

use bytes::BytesMut;
use ng_proto::codec::{encode, Decoder, Limits};
use ng_proto::ChunkType;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One session to run.
#[derive(Clone, Debug)]
pub struct Request {
    /// The command name.
    pub command: String,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// The client's environment.
    pub env: Vec<(OsString, OsString)>,
    /// The client's working directory.
    pub cwd: PathBuf,
    /// The client's stdin, given in pieces of at most 64 KiB, one per `S`, then `.`.
    pub stdin: Vec<u8>,
    /// Never answer `S` (for interrupt tests): the session waits for input.
    pub hold_stdin: bool,
    /// Descriptors passed with the header and their `NGW_CLIENT_FDS` map.
    pub fds: Option<(Arc<Vec<OwnedFd>>, String)>,
}

impl Request {
    /// A request for `command` with `args`, an empty environment, the current directory
    /// and empty stdin.
    pub fn new<I, S>(command: &str, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Self {
            command: command.to_owned(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            stdin: Vec::new(),
            hold_stdin: false,
            fds: None,
        }
    }

    /// Passes `fds` with the header, as ngd passes the client's (`docs/ngw.md` §15.4), with
    /// `NGW_CLIENT_FDS=<map>` (e.g. `0,1,2`; the map is sent as given, so tests can send a
    /// wrong one).
    pub fn fds(mut self, fds: Vec<OwnedFd>, map: &str) -> Self {
        self.fds = Some((Arc::new(fds), map.to_owned()));
        self
    }

    /// Never answers `S` until [`Driver::release_stdin`].
    pub fn hold_stdin(mut self) -> Self {
        self.hold_stdin = true;
        self
    }

    /// Sets stdin.
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = data.into();
        self
    }

    /// Adds an environment entry.
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = dir.into();
        self
    }
}

/// What a session produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Its stdout.
    pub stdout: Vec<u8>,
    /// Its stderr.
    pub stderr: Vec<u8>,
    /// Its exit code (the `X` payload's number).
    pub code: i32,
    /// The raw `X` payload (`"130\n"`, `"137 SIGKILL\n"`).
    pub exit: Vec<u8>,
    /// The `t` answer: `Some(true)` taken, `Some(false)` declined (`relay`), `None` none.
    pub taken: Option<bool>,
    /// The `z` payloads (stops), in order.
    pub stops: Vec<String>,
    /// Chunks the session sent before its `t`, when it sent a `t` late (a protocol error
    /// the tests look for).
    pub before_taken: usize,
}

impl Outcome {
    /// Stdout as lossy UTF-8.
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as lossy UTF-8.
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

#[derive(Debug, Default)]
struct Running {
    stdin: VecDeque<Vec<u8>>,
    hold: bool,
    eof_sent: bool,
    /// A classic `S` is unanswered (held).
    asked: bool,
    /// Windowed credit not yet used.
    grant: u64,
    /// Chunks seen so far.
    chunks: usize,
    out: Outcome,
    done: bool,
}

/// ngd's side of one worker channel.
#[derive(Debug)]
pub struct Driver {
    stream: UnixStream,
    child: Option<Child>,
    hello: Value,
    decoder: Decoder,
    buf: BytesMut,
    mux: bool,
    /// The session selected by the worker's last `s`.
    selected_in: Option<u64>,
    /// The session selected by our last `s`.
    selected_out: Option<u64>,
    next_id: u64,
    sessions: HashMap<u64, Running>,
    /// Notices received (`n` payloads).
    pub notices: Vec<Value>,
    /// How long any wait may take.
    pub timeout: Duration,
}

/// The host features the driver announces.
pub const HOST_FEATURES: &str = "mux,notices,fds,signals,stdin-window";

impl Driver {
    /// Spawns `cmd` as a worker (channel on fd 3, `NGW_FD`, `NGW_VERSION`,
    /// `NGW_HOST_FEATURES` = [`HOST_FEATURES`]) and reads its hello.
    pub fn spawn(cmd: Command) -> io::Result<Self> {
        Self::spawn_with(cmd, HOST_FEATURES)
    }

    /// [`Driver::spawn`] announcing `features` instead.
    pub fn spawn_with(mut cmd: Command, features: &str) -> io::Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        let fd = theirs.as_raw_fd();
        cmd.env("NGW_FD", "3")
            .env("NGW_VERSION", "1")
            .env("NGW_HOST_FEATURES", features);
        ng_sys::process::on_spawn(
            &mut cmd,
            ng_sys::process::ChildSetup {
                pass_fd: Some((fd, 3)),
                ..Default::default()
            },
        );
        let child = cmd.spawn()?;
        drop(theirs);
        let mut d = Self::new(ours);
        d.child = Some(child);
        d.read_hello()?;
        Ok(d)
    }

    /// Drives a worker already connected on `stream` (for in-process tests); reads its
    /// hello.
    pub fn over(stream: UnixStream) -> io::Result<Self> {
        let mut d = Self::new(stream);
        d.read_hello()?;
        Ok(d)
    }

    fn new(stream: UnixStream) -> Self {
        Self {
            stream,
            child: None,
            hello: Value::Null,
            decoder: Decoder::new(Limits::default()),
            buf: BytesMut::new(),
            mux: false,
            selected_in: None,
            selected_out: None,
            next_id: 1,
            sessions: HashMap::new(),
            notices: Vec::new(),
            timeout: Duration::from_secs(30),
        }
    }

    fn read_hello(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + self.timeout;
        let (ty, payload) = self
            .read_chunk(deadline)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "no hello"))?;
        if ty != ChunkType::WORKER_HELLO {
            return Err(bad(format!("first chunk is {ty:?}, not a hello")));
        }
        self.hello = serde_json::from_slice(&payload).map_err(|e| bad(e.to_string()))?;
        self.mux = self.hello["features"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == crate::WorkerFeature::Mux.name()));
        Ok(())
    }

    /// The worker's hello.
    pub fn hello(&self) -> &Value {
        &self.hello
    }

    /// The worker process, when spawned by the driver.
    pub fn child(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    /// Runs one session to its end.
    pub fn run(&mut self, req: &Request) -> io::Result<Outcome> {
        let id = self.start(req)?;
        self.finish(id)
    }

    /// Starts every request at once (the worker must be `mux` for more than one to run
    /// concurrently) and returns their outcomes in order.
    pub fn run_all(&mut self, reqs: &[Request]) -> io::Result<Vec<Outcome>> {
        if !self.mux {
            return reqs.iter().map(|r| self.run(r)).collect();
        }
        let ids = reqs
            .iter()
            .map(|r| self.start(r))
            .collect::<io::Result<Vec<_>>>()?;
        ids.into_iter().map(|id| self.finish(id)).collect()
    }

    /// Sends a session's header (with the request's descriptors, if any); returns its id.
    pub fn start(&mut self, req: &Request) -> io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = BytesMut::new();
        self.select(id, &mut out);
        for a in &req.args {
            encode(ChunkType::ARGUMENT, a.as_bytes(), &mut out);
        }
        for (k, v) in &req.env {
            let mut e = k.as_bytes().to_vec();
            e.push(b'=');
            e.extend_from_slice(v.as_bytes());
            encode(ChunkType::ENVIRONMENT, &e, &mut out);
        }
        encode(ChunkType::ENVIRONMENT, b"NGW_UMASK=0022", &mut out);
        encode(
            ChunkType::ENVIRONMENT,
            format!("NGW_SESSION={id}").as_bytes(),
            &mut out,
        );
        if let Some((_, map)) = &req.fds {
            encode(
                ChunkType::ENVIRONMENT,
                format!("NGW_CLIENT_FDS={map}").as_bytes(),
                &mut out,
            );
        }
        encode(
            ChunkType::WORKING_DIR,
            req.cwd.as_os_str().as_bytes(),
            &mut out,
        );
        encode(ChunkType::COMMAND, req.command.as_bytes(), &mut out);
        let fds: Vec<RawFd> = req
            .fds
            .iter()
            .flat_map(|(f, _)| f.iter().map(AsRawFd::as_raw_fd))
            .collect();
        self.send_raw(&out, &fds)?;
        let stdin = req.stdin.chunks(64 * 1024).map(<[u8]>::to_vec).collect();
        self.sessions.insert(
            id,
            Running {
                stdin,
                hold: req.hold_stdin,
                ..Running::default()
            },
        );
        Ok(id)
    }

    /// Writes `bytes` to the channel with one `sendmsg`, `fds` riding on the first byte
    /// (`SCM_RIGHTS`), for tests of what a worker does with odd input.
    pub fn send_raw(&mut self, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
        if fds.is_empty() {
            return self.stream.write_all(bytes);
        }
        let n = ng_sys::scm::send_with_fds(self.stream.as_raw_fd(), bytes, fds)?;
        self.stream.write_all(&bytes[n..])
    }

    /// The id the next [`Driver::start`] will use.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    fn select(&mut self, id: u64, out: &mut BytesMut) {
        if self.mux && self.selected_out != Some(id) {
            encode(ChunkType::WORKER_SELECT, id.to_string().as_bytes(), out);
            self.selected_out = Some(id);
        }
    }

    /// Sends `i` with `payload` (`hangup`, `SIGINT`, `SIGTERM process`,
    /// `winsize 80 24 0 0`) to session `id`. Before a hangup, an outstanding `S` is
    /// answered with `.`, as ngd does.
    pub fn interrupt(&mut self, id: u64, payload: &str) -> io::Result<()> {
        if payload == "hangup" {
            if let Some(s) = self.sessions.get_mut(&id) {
                s.hold = false;
                s.stdin.clear();
            }
            self.answer_stdin(id)?;
        }
        let mut out = BytesMut::new();
        self.select(id, &mut out);
        encode(ChunkType::WORKER_INTERRUPT, payload.as_bytes(), &mut out);
        self.stream.write_all(&out)
    }

    /// Releases a held stdin: a pending `S` (and every later one) is answered from the
    /// rest of the request's stdin.
    pub fn release_stdin(&mut self, id: u64) -> io::Result<()> {
        if let Some(s) = self.sessions.get_mut(&id) {
            s.hold = false;
        }
        self.answer_stdin(id)
    }

    /// Answers what session `id` asked for and is not held: one chunk for a classic `S`,
    /// chunks up to the granted window for windowed ones, and `.` at the end.
    fn answer_stdin(&mut self, id: u64) -> io::Result<()> {
        let Some(s) = self.sessions.get_mut(&id) else {
            return Ok(());
        };
        if s.hold || s.done {
            return Ok(());
        }
        let mut chunks: Vec<(ChunkType, Vec<u8>)> = Vec::new();
        if s.asked {
            s.asked = false;
            match s.stdin.pop_front() {
                Some(d) if !s.eof_sent => chunks.push((ChunkType::STDIN, d)),
                _ if !s.eof_sent => {
                    s.eof_sent = true;
                    chunks.push((ChunkType::STDIN_EOF, Vec::new()));
                }
                _ => {}
            }
        }
        while s.grant > 0 && !s.eof_sent {
            match s.stdin.pop_front() {
                Some(mut d) => {
                    let n = d.len().min(usize::try_from(s.grant).unwrap_or(usize::MAX));
                    if n < d.len() {
                        s.stdin.push_front(d.split_off(n));
                    }
                    s.grant -= n as u64;
                    chunks.push((ChunkType::STDIN, d));
                }
                None => {
                    s.eof_sent = true;
                    chunks.push((ChunkType::STDIN_EOF, Vec::new()));
                }
            }
        }
        if chunks.is_empty() {
            return Ok(());
        }
        let mut out = BytesMut::new();
        self.select(id, &mut out);
        for (ty, data) in chunks {
            encode(ty, &data, &mut out);
        }
        self.stream.write_all(&out)
    }

    /// Reads until session `id` has sent its `X`; answers every session's `S` meanwhile.
    pub fn finish(&mut self, id: u64) -> io::Result<Outcome> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if self.sessions.get(&id).is_some_and(|s| s.done) {
                return Ok(self.sessions.remove(&id).map(|s| s.out).unwrap_or_default());
            }
            if !self.sessions.contains_key(&id) {
                return Err(bad(format!("no session {id}")));
            }
            self.pump(deadline)?;
        }
    }

    /// Reads (answering every session's `S` meanwhile) until what session `id` has sent so
    /// far satisfies `done` (say, a `z` arrived, or its stderr says it is ready).
    pub fn wait_until(&mut self, id: u64, done: impl Fn(&Outcome) -> bool) -> io::Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.sessions.get(&id) {
                Some(s) if done(&s.out) => return Ok(()),
                Some(s) if s.done => {
                    return Err(bad(format!("session {id} ended first: {:?}", s.out)))
                }
                Some(_) => self.pump(deadline)?,
                None => return Err(bad(format!("no session {id}"))),
            }
        }
    }

    /// Reads and handles one chunk (waiting until `deadline`).
    fn pump(&mut self, deadline: Instant) -> io::Result<()> {
        let (ty, payload) = self
            .read_chunk(deadline)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "worker closed"))?;
        match ty {
            ChunkType::WORKER_SELECT => {
                let id = std::str::from_utf8(&payload)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| bad("bad `s` payload".into()))?;
                self.selected_in = Some(id);
            }
            ChunkType::WORKER_NOTICE => {
                let v = serde_json::from_slice(&payload).map_err(|e| bad(e.to_string()))?;
                self.notices.push(v);
            }
            ChunkType::WORKER_PONG => {}
            ChunkType::STDOUT
            | ChunkType::STDERR
            | ChunkType::SEND_INPUT
            | ChunkType::EXIT
            | ChunkType::WORKER_TAKEN
            | ChunkType::WORKER_STOPPED => {
                let id = self.current_in()?;
                let s = self
                    .sessions
                    .get_mut(&id)
                    .filter(|s| !s.done)
                    .ok_or_else(|| bad(format!("{ty:?} for unknown session {id}")))?;
                s.chunks += 1;
                match ty {
                    ChunkType::STDOUT => s.out.stdout.extend_from_slice(&payload),
                    ChunkType::STDERR => s.out.stderr.extend_from_slice(&payload),
                    ChunkType::EXIT => {
                        let text = String::from_utf8_lossy(&payload);
                        let number = text.trim_end().split(' ').next().unwrap_or("");
                        s.out.code = number.parse().map_err(|_| bad(format!("bad X {text:?}")))?;
                        s.out.exit = payload;
                        s.done = true;
                    }
                    ChunkType::WORKER_TAKEN => {
                        if s.out.taken.is_some() {
                            return Err(bad(format!("a second `t` for session {id}")));
                        }
                        s.out.before_taken = s.chunks - 1;
                        s.out.taken = Some(match payload.as_slice() {
                            b"" => true,
                            b"relay" => false,
                            other => {
                                return Err(bad(format!(
                                    "bad `t` payload {:?}",
                                    String::from_utf8_lossy(other)
                                )))
                            }
                        });
                    }
                    ChunkType::WORKER_STOPPED => {
                        s.out.stops.push(String::from_utf8_lossy(&payload).into())
                    }
                    _ => {
                        if payload.is_empty() {
                            if s.asked || s.grant > 0 {
                                return Err(bad(format!("`S` with one outstanding, session {id}")));
                            }
                            s.asked = true;
                        } else {
                            let n = ng_proto::ext::parse_grant(&payload)
                                .ok_or_else(|| bad(format!("bad windowed `S` {payload:?}")))?;
                            s.grant += u64::from(n);
                        }
                        self.answer_stdin(id)?;
                    }
                }
            }
            other => return Err(bad(format!("unexpected chunk {other:?} from the worker"))),
        }
        Ok(())
    }

    fn current_in(&self) -> io::Result<u64> {
        if self.mux {
            self.selected_in
                .ok_or_else(|| bad("session chunk before `s`".into()))
        } else {
            self.sessions
                .iter()
                .find(|(_, s)| !s.done)
                .map(|(id, _)| *id)
                .ok_or_else(|| bad("session chunk with no session running".into()))
        }
    }

    /// Sends `p` and waits for the matching `o`.
    pub fn ping(&mut self, payload: &[u8]) -> io::Result<()> {
        let mut out = BytesMut::new();
        encode(ChunkType::WORKER_PING, payload, &mut out);
        self.stream.write_all(&out)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let (ty, p) = self
                .read_chunk(deadline)?
                .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "worker closed"))?;
            if ty == ChunkType::WORKER_PONG && p == payload {
                return Ok(());
            }
            if ty == ChunkType::WORKER_NOTICE {
                self.notices
                    .push(serde_json::from_slice(&p).map_err(|e| bad(e.to_string()))?);
            }
        }
    }

    /// Sends `q` and waits for the worker to close the channel and exit.
    pub fn quit(mut self) -> io::Result<Option<ExitStatus>> {
        let mut out = BytesMut::new();
        encode(ChunkType::WORKER_QUIT, b"", &mut out);
        self.stream.write_all(&out)?;
        let deadline = Instant::now() + self.timeout;
        while self.read_chunk(deadline)?.is_some() {}
        match self.child.take() {
            Some(mut c) => loop {
                if let Some(st) = c.try_wait()? {
                    return Ok(Some(st));
                }
                if Instant::now() > deadline {
                    let _ = c.kill();
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "worker did not exit",
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            },
            None => Ok(None),
        }
    }

    /// The next chunk, or `None` at end of stream.
    fn read_chunk(&mut self, deadline: Instant) -> io::Result<Option<(ChunkType, Vec<u8>)>> {
        let mut scratch = [0u8; 64 * 1024];
        loop {
            if let Some(c) = self
                .decoder
                .decode(&mut self.buf)
                .map_err(|e| bad(e.to_string()))?
            {
                return Ok(Some((c.ty, c.payload.to_vec())));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "worker too slow"));
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut scratch) {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&scratch[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "worker too slow"))
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// A binary of this workspace (`ngd`, `ng`) for end-to-end tests: the path in environment
/// variable `var` when set, else `name` beside the test executable (`target/<profile>/`).
/// Panics with how to build it when it is missing.
pub fn workspace_binary(name: &str, var: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    let mut dir = exe
        .parent()
        .expect("the test executable's directory")
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} not found: build it first (`cargo build --workspace --bins`) or set {var}",
        p.display()
    );
    p
}

/// Runs `ng` through a symlink named `name` in `dir` (created on first use) against the
/// Unix socket `sock`, as a user's shell would run the command: `args`, `stdin` written
/// then closed, and `configure` for the directory or environment. Returns stdout, stderr
/// (lossy UTF-8) and the exit code (-1 for a death by signal).
pub fn run_symlinked_ng(
    dir: &std::path::Path,
    name: &str,
    sock: &std::path::Path,
    args: &[&str],
    stdin: &[u8],
    configure: impl FnOnce(&mut Command),
) -> (String, String, i32) {
    let link = dir.join(name);
    if !link.exists() {
        std::os::unix::fs::symlink(workspace_binary("ng", "NG_BIN"), &link)
            .expect("a symlink to ng");
    }
    let mut cmd = Command::new(&link);
    cmd.arg("--nailgun-server")
        .arg(format!("local:{}", sock.display()))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    configure(&mut cmd);
    let mut child = cmd.spawn().expect("ng runs");
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin);
    }
    let o = child.wait_with_output().expect("ng's output");
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code().unwrap_or(-1),
    )
}
