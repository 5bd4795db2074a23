//! Test helpers: a scriptable fake Nailgun server and a way to run the `ng` binary.
//!
//! The fake server is a plain listener (TCP on IPv4 or IPv6, or a Unix socket) whose
//! accepted connection is driven step by step by the test: read the client's chunks,
//! assert on them, send `1`/`2`/`S`/`X` or anything else. Every blocking step has a
//! timeout, so a misbehaving client fails the test instead of hanging it.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long any single step may take before the test fails.
pub const STEP: Duration = Duration::from_secs(10);

/// A chunk as the fake server sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub ty: u8,
    pub payload: Vec<u8>,
}

impl Chunk {
    pub fn new(ty: u8, payload: &[u8]) -> Chunk {
        Chunk {
            ty,
            payload: payload.to_vec(),
        }
    }
}

/// The wire bytes of one chunk.
pub fn frame(ty: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.push(ty);
    out.extend_from_slice(payload);
    out
}

/// The `ng` binary under test, with an empty environment and no stdin.
pub fn ng() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ng"));
    cmd.env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A running `ng` whose stdout and stderr (if piped) are being drained by threads, so it
/// never blocks on a full pipe while the test is busy being its server.
pub struct Running {
    pub child: Child,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
}

impl Running {
    /// Starts draining `child`'s piped stdout and stderr.
    pub fn new(mut child: Child) -> Running {
        fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                buf
            })
        }
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        Running {
            child,
            stdout,
            stderr,
        }
    }

    /// Waits for the exit (killing `ng` after [`STEP`]) and collects the output.
    pub fn finish(mut self) -> Output {
        let deadline = Instant::now() + STEP;
        let status = loop {
            match self.child.try_wait().expect("try_wait") {
                Some(status) => break status,
                None if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    let stderr = self.stderr.take().map(|h| h.join().unwrap());
                    panic!(
                        "ng did not exit in time; stderr: {}",
                        String::from_utf8_lossy(&stderr.unwrap_or_default())
                    );
                }
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        let join =
            |h: Option<JoinHandle<Vec<u8>>>| h.map(|h| h.join().unwrap()).unwrap_or_default();
        Output {
            status,
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
        }
    }
}

/// Waits for `child` to exit (killing it after [`STEP`]) and collects its output.
pub fn finish(child: Child) -> Output {
    Running::new(child).finish()
}

/// The exit code, failing the test if the process was killed by a signal.
pub fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("ng died by a signal: {:?}", out.status))
}

/// A fresh, empty directory under the system temp dir (canonical, so it equals `getcwd`).
pub fn temp_dir(tag: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("ng-client-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir.canonicalize().expect("canonicalize temp dir")
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// A listening fake server.
pub struct Server {
    listener: Listener,
    /// The `ng` arguments that name this server.
    pub args: Vec<String>,
}

impl Server {
    /// On 127.0.0.1, a free port.
    pub fn tcp() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        Server {
            listener: Listener::Tcp(listener),
            args: vec!["--nailgun-port".into(), port.to_string()],
        }
    }

    /// On ::1, a free port; `server` is how `ng` is told the host.
    pub fn tcp6(server: &str) -> Server {
        let listener = TcpListener::bind("[::1]:0").expect("bind [::1]");
        let port = listener.local_addr().unwrap().port();
        Server {
            listener: Listener::Tcp(listener),
            args: vec![
                "--nailgun-server".into(),
                server.into(),
                "--nailgun-port".into(),
                port.to_string(),
            ],
        }
    }

    /// On a Unix socket at `path`; `args` name it as `local:<path>`.
    pub fn unix(path: &Path) -> Server {
        let listener = UnixListener::bind(path).expect("bind unix socket");
        Server {
            listener: Listener::Unix(listener),
            args: vec![
                "--nailgun-server".into(),
                format!("local:{}", path.display()),
            ],
        }
    }

    /// The TCP port, for servers named through the environment.
    pub fn port(&self) -> u16 {
        match &self.listener {
            Listener::Tcp(l) => l.local_addr().unwrap().port(),
            Listener::Unix(_) => panic!("not a TCP server"),
        }
    }

    /// `ng` pointed at this server.
    pub fn ng(&self) -> Command {
        let mut cmd = ng();
        cmd.args(&self.args);
        cmd
    }

    /// Accepts the client's connection, waiting at most [`STEP`].
    pub fn accept(&self) -> Peer {
        self.try_accept(STEP).expect("ng did not connect")
    }

    /// Accepts a connection if one arrives within `timeout`.
    pub fn try_accept(&self, timeout: Duration) -> Option<Peer> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            let accepted = match &self.listener {
                Listener::Tcp(l) => {
                    l.set_nonblocking(true).unwrap();
                    l.accept().map(|(s, _)| Stream::Tcp(s))
                }
                Listener::Unix(l) => {
                    l.set_nonblocking(true).unwrap();
                    l.accept().map(|(s, _)| Stream::Unix(s))
                }
            };
            match accepted {
                Ok(s) => break s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        stream.set_nonblocking(false);
        Some(Peer {
            stream,
            buf: Vec::new(),
        })
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn set_nonblocking(&self, on: bool) {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on).unwrap(),
            Stream::Unix(s) => s.set_nonblocking(on).unwrap(),
        }
    }

    fn set_read_timeout(&self, t: Duration) {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(Some(t)).unwrap(),
            Stream::Unix(s) => s.set_read_timeout(Some(t)).unwrap(),
        }
    }

    fn shutdown_write(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        };
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(buf),
            Stream::Unix(s) => s.write_all(buf),
        }
    }
}

/// What a read from the client came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Got {
    Chunk(Chunk),
    /// The client closed (or reset) the connection.
    Closed,
    /// Nothing complete arrived in time.
    Timeout,
}

/// The server's end of one accepted connection.
pub struct Peer {
    stream: Stream,
    /// Bytes received but not yet returned as a chunk (survives timeouts).
    buf: Vec<u8>,
}

impl Peer {
    /// The next chunk, waiting at most `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Got {
        let deadline = Instant::now() + timeout;
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                if self.buf.len() >= 5 + len {
                    let ty = self.buf[4];
                    let payload = self.buf[5..5 + len].to_vec();
                    self.buf.drain(..5 + len);
                    return Got::Chunk(Chunk { ty, payload });
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Got::Timeout;
            }
            self.stream
                .set_read_timeout(left.max(Duration::from_millis(1)));
            let mut tmp = [0u8; 64 * 1024];
            match self.stream.read(&mut tmp) {
                Ok(0) => return Got::Closed,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Got::Timeout
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Got::Closed,
            }
        }
    }

    /// The next chunk other than a heartbeat, within `timeout`.
    pub fn next_data(&mut self, timeout: Duration) -> Got {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left) {
                Got::Chunk(c) if c.ty == b'H' => continue,
                other => return other,
            }
        }
    }

    /// The first read of a Unix connection, with `recvmsg`: the header's first bytes and
    /// the descriptors that ride with them (`SCM_RIGHTS`). Call before anything else.
    pub fn recv_fds(&mut self) -> Vec<OwnedFd> {
        let Stream::Unix(s) = &self.stream else {
            panic!("descriptors need a Unix socket");
        };
        s.set_read_timeout(Some(STEP)).unwrap();
        let mut data = vec![0u8; 64 * 1024];
        let mut control = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: an all-zero msghdr is valid; the buffers outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: as above.
        let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        assert!(n > 0, "recvmsg: {}", io::Error::last_os_error());
        self.buf.extend_from_slice(&data[..n as usize]);
        let mut fds = Vec::new();
        // SAFETY: walking the control messages the kernel wrote.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
                    for i in 0..len / 4 {
                        fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        fds
    }

    /// The next chunk, which must arrive within [`STEP`].
    pub fn chunk(&mut self) -> Chunk {
        match self.next(STEP) {
            Got::Chunk(c) => c,
            other => panic!("expected a chunk, got {other:?}"),
        }
    }

    /// Every chunk up to and including `C`.
    pub fn header(&mut self) -> Vec<Chunk> {
        let mut chunks = Vec::new();
        loop {
            let c = self.chunk();
            let done = c.ty == b'C';
            chunks.push(c);
            if done {
                return chunks;
            }
        }
    }

    /// The raw bytes of the header, up to and including the `C` chunk.
    pub fn raw_header(&mut self) -> Vec<u8> {
        self.header()
            .iter()
            .flat_map(|c| frame(c.ty, &c.payload))
            .collect()
    }

    /// Sends one chunk.
    pub fn send(&mut self, ty: u8, payload: &[u8]) {
        self.send_raw(&frame(ty, payload));
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send to ng");
    }

    /// Sends `X` with this payload.
    pub fn exit(&mut self, payload: &str) {
        self.send(b'X', payload.as_bytes());
    }

    /// Closes our sending side (the client reads end of stream), keeping the connection
    /// open for reading, so nothing we sent is lost to a reset.
    pub fn shutdown_write(&mut self) {
        self.stream.shutdown_write();
    }

    /// Waits until the client closes the connection (skipping whatever it sends).
    pub fn expect_closed(&mut self) {
        let deadline = Instant::now() + STEP;
        loop {
            match self.next(deadline.saturating_duration_since(Instant::now())) {
                Got::Chunk(_) => continue,
                Got::Closed => return,
                Got::Timeout => panic!("ng did not close the connection"),
            }
        }
    }
}

/// The environment entries (`E` payloads) of a header, in order.
pub fn env_of(header: &[Chunk]) -> Vec<Vec<u8>> {
    header
        .iter()
        .filter(|c| c.ty == b'E')
        .map(|c| c.payload.clone())
        .collect()
}

/// The value of `name` in a header's environment (the last one, as the server keeps).
pub fn env_value(header: &[Chunk], name: &str) -> Option<Vec<u8>> {
    let prefix = format!("{name}=");
    env_of(header)
        .into_iter()
        .rev()
        .find(|e| e.starts_with(prefix.as_bytes()))
        .map(|e| e[prefix.len()..].to_vec())
}

/// Runs `ng` with `args` against a fresh TCP fake server that answers the header with
/// `reply` (raw bytes) and then closes; returns the header and the client's output.
pub fn exchange<S: AsRef<OsStr>>(args: &[S], reply: &[u8]) -> (Vec<Chunk>, Output) {
    let server = Server::tcp();
    let child = server.ng().args(args).spawn().expect("spawn ng");
    let mut peer = server.accept();
    let header = peer.header();
    peer.send_raw(reply);
    peer.shutdown_write();
    peer.expect_closed();
    (header, finish(child))
}
