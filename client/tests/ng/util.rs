//! Test helpers: a way to run the `ng` binary, and the workspace's fake Nailgun server
//! ([`ng_testkit::fake`]) with the `ng` options that name it.
//!
//! The fake server is a plain listener (TCP on IPv4 or IPv6, or a Unix socket) whose
//! accepted connection is driven step by step by the test: read the client's chunks,
//! assert on them, send `1`/`2`/`S`/`X` or anything else. Every blocking step has a
//! timeout, so a misbehaving client fails the test instead of hanging it.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use ng_testkit::fake::{env_of, env_value, Got, Peer, STEP};
use ng_testkit::FakeServer;
pub use ng_testkit::{frame, Chunk};

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

/// A listening fake server (see [`ng_testkit::fake`]) and the `ng` options that name it.
pub struct Server {
    fake: FakeServer,
    /// The `ng` arguments that name this server.
    pub args: Vec<String>,
}

impl Server {
    /// On 127.0.0.1, a free port.
    pub fn tcp() -> Server {
        let fake = FakeServer::tcp("127.0.0.1:0".parse().unwrap()).expect("bind 127.0.0.1");
        let port = fake.address().port().unwrap();
        Server {
            fake,
            args: vec!["--nailgun-port".into(), port.to_string()],
        }
    }

    /// On ::1, a free port; `server` is how `ng` is told the host.
    pub fn tcp6(server: &str) -> Server {
        let fake = FakeServer::tcp("[::1]:0".parse().unwrap()).expect("bind [::1]");
        let port = fake.address().port().unwrap();
        Server {
            fake,
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
        Server {
            fake: FakeServer::unix(path).expect("bind unix socket"),
            args: vec![
                "--nailgun-server".into(),
                format!("local:{}", path.display()),
            ],
        }
    }

    /// The TCP port, for servers named through the environment.
    pub fn port(&self) -> u16 {
        self.fake.address().port().expect("a TCP server")
    }

    /// `ng` pointed at this server.
    pub fn ng(&self) -> Command {
        let mut cmd = ng();
        cmd.args(&self.args);
        cmd
    }

    /// Accepts the client's connection, waiting at most [`STEP`].
    #[track_caller]
    pub fn accept(&self) -> Peer {
        self.fake.accept()
    }

    /// Accepts a connection if one arrives within `timeout`.
    pub fn try_accept(&self, timeout: Duration) -> Option<Peer> {
        self.fake.try_accept(timeout)
    }
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
