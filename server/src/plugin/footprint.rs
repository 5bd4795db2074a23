//! What each worker costs in memory with everything it started: its own PSS plus its
//! descendants' (a fork-mode zygote's spare and sub-zygotes, a JVM worker's spare JVMs, the
//! sessions running). PSS, not RSS, so that a zygote and its forked children, which share
//! most pages, add up to what they hold together rather than to each counting it all.
//!
//! Reading a process's PSS walks its page tables, milliseconds for a large interpreter, so
//! the readings happen on a thread of their own: the host asks for a worker's footprint
//! ([`Footprints::request`], at most once per [`MIN_INTERVAL`] per worker) and uses the
//! latest reading it has ([`Footprints::latest`]), falling back to the worker's own RSS
//! until the first one arrives. The thread starts with the first request and ends when the
//! [`Footprints`] is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};

use crate::sys::procfs;

/// The least time between two readings of one worker.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Requests waiting for the thread at most; more are dropped (the next one asks again).
const QUEUE: usize = 64;

/// How long after a request the host looks for its reading (and again while it is missing).
pub const SETTLE: Duration = Duration::from_millis(250);

/// The readings, by worker pid: bytes (`None`: the process could not be read), and when
/// the reading was taken.
type Readings = Arc<Mutex<HashMap<u32, (Option<u64>, Instant)>>>;

/// The footprint sampler of one host.
#[derive(Debug, Default)]
pub struct Footprints {
    readings: Readings,
    asked: HashMap<u32, Instant>,
    thread: Option<(Sender<u32>, JoinHandle<()>)>,
}

impl Footprints {
    /// Asks for a reading of `pid`'s tree, unless one was asked less than [`MIN_INTERVAL`]
    /// ago. Never blocks.
    pub fn request(&mut self, pid: u32, now: Instant) {
        if self
            .asked
            .get(&pid)
            .is_some_and(|at| now.saturating_duration_since(*at) < MIN_INTERVAL)
        {
            return;
        }
        let Some((tx, _)) = self.thread() else {
            return;
        };
        match tx.try_send(pid) {
            Ok(()) => {
                self.asked.insert(pid, now);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {}
        }
    }

    /// The latest reading of `pid`'s tree, in bytes.
    pub fn latest(&self, pid: u32) -> Option<u64> {
        self.readings.lock().ok()?.get(&pid)?.0
    }

    /// Whether a request has no reading yet.
    pub fn pending(&self) -> bool {
        let Ok(readings) = self.readings.lock() else {
            return false;
        };
        self.asked
            .iter()
            .any(|(pid, asked)| readings.get(pid).is_none_or(|(_, at)| at < asked))
    }

    /// Forgets a worker that is gone.
    pub fn forget(&mut self, pid: u32) {
        self.asked.remove(&pid);
        if let Ok(mut r) = self.readings.lock() {
            r.remove(&pid);
        }
    }

    /// The reading thread, started on first use; `None` if it cannot be started.
    fn thread(&mut self) -> Option<&(Sender<u32>, JoinHandle<()>)> {
        if self.thread.is_none() {
            let (tx, rx) = crossbeam_channel::bounded::<u32>(QUEUE);
            let readings = Arc::clone(&self.readings);
            let handle = std::thread::Builder::new()
                .name("ngd-footprint".into())
                .spawn(move || {
                    for pid in rx {
                        let tree = procfs::pss_bytes(pid).map(|own| {
                            procfs::descendants(pid)
                                .into_iter()
                                .filter_map(procfs::pss_bytes)
                                .fold(own, u64::saturating_add)
                        });
                        if let Ok(mut r) = readings.lock() {
                            r.insert(pid, (tree, Instant::now()));
                        }
                    }
                })
                .ok()?;
            self.thread = Some((tx, handle));
        }
        self.thread.as_ref()
    }
}

impl Drop for Footprints {
    fn drop(&mut self) {
        if let Some((tx, handle)) = self.thread.take() {
            drop(tx);
            let _ = handle.join();
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn wait_for(f: &Footprints, pid: u32) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(bytes) = f.latest(pid) {
                return bytes;
            }
            assert!(Instant::now() < deadline, "no reading of {pid}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_tree_counts_its_children_memory() {
        // A shell whose child holds 32 MiB of its own (written, so resident and private).
        let mut sh = Command::new("sh")
            .args([
                "-c",
                "python3 -c 'import time; b = bytearray(32 << 20); time.sleep(30)' & wait",
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = sh.id();
        let alone = procfs::pss_bytes(pid).unwrap();
        let mut f = Footprints::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        let tree = loop {
            f.request(pid, Instant::now());
            let bytes = wait_for(&f, pid);
            if bytes > alone + (32 << 20) || Instant::now() > deadline {
                break bytes;
            }
            std::thread::sleep(MIN_INTERVAL);
        };
        let _ = Command::new("pkill")
            .args(["-P", &pid.to_string()])
            .status();
        let _ = sh.kill();
        let _ = sh.wait();
        assert!(
            tree > alone + (32 << 20),
            "tree {tree}, shell alone {alone}"
        );
        f.forget(pid);
        assert_eq!(f.latest(pid), None);
    }

    #[test]
    fn requests_are_spaced() {
        let mut f = Footprints::default();
        let me = std::process::id();
        // Instants in the past, so that the readings come after the last request.
        let t0 = Instant::now() - 2 * MIN_INTERVAL;
        f.request(me, t0);
        let first = f.asked[&me];
        f.request(me, t0 + MIN_INTERVAL / 2);
        assert_eq!(f.asked[&me], first);
        f.request(me, t0 + MIN_INTERVAL);
        assert_eq!(f.asked[&me], t0 + MIN_INTERVAL);
        assert!(wait_for(&f, me) > 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while f.pending() {
            assert!(Instant::now() < deadline, "the reading never came");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
