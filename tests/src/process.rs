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
use std::process::{Child, Command};
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
