//! Child processes owned by the test process, and capture of their output.
//!
//! [`Capture`] collects what a child writes to one pipe, on a thread of its own so the
//! child never blocks on a full pipe, and lets a test wait until some text has appeared
//! (a server's banner, a nail's first line).
//!
//! [`spawn_owned`] starts long-lived children (servers) so that they die with the test
//! process even when nothing drops their guard: shared servers live in statics, which
//! Rust never drops. On Linux the child asks the kernel for `SIGKILL` when its parent
//! goes away (`PR_SET_PDEATHSIG`). That signal follows the *thread* that forked, and
//! libtest ends a test's thread when the test ends, so every owned child is forked by one
//! spawner thread that lives as long as the process.

use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Bytes read so far from one pipe of a child, shared with the thread reading it.
#[derive(Debug, Default)]
pub struct Capture {
    state: Mutex<CaptureState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct CaptureState {
    bytes: Vec<u8>,
    /// The pipe reached end of file (or failed): nothing more will arrive.
    closed: bool,
}

impl Capture {
    /// Starts a thread that copies `pipe` into a new capture until end of file.
    pub fn start<R: Read + Send + 'static>(mut pipe: R) -> (Arc<Capture>, JoinHandle<()>) {
        let capture = Arc::new(Capture::default());
        let sink = Arc::clone(&capture);
        let reader = thread::spawn(move || {
            let mut buf = vec![0; 64 * 1024];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => sink.append(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            sink.state.lock().unwrap().closed = true;
            sink.changed.notify_all();
        });
        (capture, reader)
    }

    fn append(&self, bytes: &[u8]) {
        self.state.lock().unwrap().bytes.extend_from_slice(bytes);
        self.changed.notify_all();
    }

    /// A copy of everything captured so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.state.lock().unwrap().bytes.clone()
    }

    /// Everything captured so far, decoded lossily.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.state.lock().unwrap().bytes).into_owned()
    }

    /// Waits until the captured bytes contain `needle`, for at most `timeout`.
    ///
    /// Returns `false` on timeout, or when the pipe closed without it.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock().unwrap();
        loop {
            if contains(&state.bytes, needle.as_bytes()) {
                return true;
            }
            let now = Instant::now();
            if state.closed || now >= deadline {
                return false;
            }
            state = self.changed.wait_timeout(state, deadline - now).unwrap().0;
        }
    }
}

impl Capture {
    /// Waits until the pipe has closed (end of file), for at most `timeout`.
    pub fn wait_closed(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock().unwrap();
        loop {
            let now = Instant::now();
            if state.closed || now >= deadline {
                return state.closed;
            }
            state = self.changed.wait_timeout(state, deadline - now).unwrap().0;
        }
    }
}

/// Whether `haystack` contains `needle` as a contiguous run of bytes.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` from the process-lifetime spawner thread, so that on Linux the child is
/// killed when the test process exits, whatever happens to its guard.
pub fn spawn_owned(mut cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    die_with_parent(&mut cmd);
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        thread::Builder::new()
            .name("ng-tests-spawner".into())
            .spawn(move || {
                // Runs until the process exits: the sender lives in a static.
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("start the spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap()
        .send((cmd, reply_tx))
        .expect("the spawner thread is alive");
    reply_rx.recv().expect("the spawner thread replies")
}

/// A long-lived child (a server under test) started with [`spawn_owned`], both output
/// streams captured; killed and reaped when dropped.
#[derive(Debug)]
pub struct OwnedChild {
    /// `None` once reaped.
    child: Mutex<Option<Child>>,
    /// How it ended, once reaped.
    status: Mutex<Option<ExitStatus>>,
    pid: u32,
    /// What it wrote on stdout so far.
    pub stdout: Arc<Capture>,
    /// What it wrote on stderr so far.
    pub stderr: Arc<Capture>,
    /// The threads draining its pipes; joined on drop.
    readers: Mutex<Vec<JoinHandle<()>>>,
}

impl OwnedChild {
    /// Starts `cmd` with its stdout and stderr piped into captures.
    pub fn start(mut cmd: Command) -> io::Result<OwnedChild> {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = spawn_owned(cmd)?;
        let (stdout, out_reader) = Capture::start(child.stdout.take().expect("piped stdout"));
        let (stderr, err_reader) = Capture::start(child.stderr.take().expect("piped stderr"));
        Ok(OwnedChild {
            pid: child.id(),
            child: Mutex::new(Some(child)),
            status: Mutex::new(None),
            stdout,
            stderr,
            readers: Mutex::new(vec![out_reader, err_reader]),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Kills it at once (`SIGKILL`) and reaps it, if it is still there.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            if let Ok(status) = child.wait() {
                *self.status.lock().unwrap() = Some(status);
            }
        }
    }

    /// Waits for it to exit on its own, for at most `timeout`, and returns how it ended;
    /// `None` if it is still running.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let mut child = self.child.lock().unwrap();
                match child.as_mut() {
                    None => return *self.status.lock().unwrap(),
                    Some(c) => {
                        if let Some(status) = c.try_wait().expect("wait for the child") {
                            *self.status.lock().unwrap() = Some(status);
                            *child = None;
                            return Some(status);
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Both output streams so far, headed by `what`, for failure messages.
    pub fn log(&self, what: &str) -> String {
        format!(
            "--- {what} stdout ---\n{}\n--- stderr ---\n{}\n--- end of server log ---",
            self.stdout.text(),
            self.stderr.text()
        )
    }
}

impl Drop for OwnedChild {
    fn drop(&mut self) {
        self.kill();
        for reader in self.readers.lock().unwrap().drain(..) {
            let _ = reader.join();
        }
    }
}

#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    let parent = libc::pid_t::try_from(std::process::id()).expect("a pid fits pid_t");
    // SAFETY: prctl and getppid are async-signal-safe, and the closure touches no memory
    // shared with the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl: then we are already orphaned.
            if libc::getppid() != parent {
                return Err(io::Error::other("the test process is gone"));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {
    // Elsewhere, guards still kill their child on drop; only shared servers may outlive
    // the test process.
}
