//! What each worker costs in memory with everything it started: its own PSS plus its
//! descendants' (a fork-mode zygote's spare and sub-zygotes, a JVM worker's spare JVMs, the
//! sessions running). PSS, not RSS, so that a zygote and its forked children, which share
//! most pages, add up to what they hold together rather than to each counting it all.
//!
//! Reading a process's PSS walks its page tables, milliseconds for a large interpreter, so
//! the readings happen on a thread of their own. The host asks for a worker's footprint
//! after something changed it ([`Footprints::request`]: a worker ready, a session ended);
//! the reading is taken [`SETTLE`] later, once what the event left behind (a session's
//! child exiting, a spare being forked) has settled, and at most once per [`MIN_INTERVAL`]
//! per worker: a request sooner than that is served by a later reading, never dropped. The
//! host uses the latest reading it has ([`Footprints::known`]). It waits for a worker's
//! first reading rather than judge by the worker's RSS, which counts every shared page in
//! full and would make the budget give way to more than it must; a worker that cannot be
//! read is counted by its RSS. The thread starts with the first request and ends when the
//! [`Footprints`] is dropped.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};

use crate::sys::procfs;

/// The least time between two readings of one worker.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Requests waiting for the thread at most; more are dropped (the next one asks again).
const QUEUE: usize = 64;

/// How long after a request its reading is taken, and the host looks for it (and again
/// while it is missing).
pub const SETTLE: Duration = Duration::from_millis(250);

/// How long the host waits for a worker's first reading, after it was due, before it
/// makes do with the worker's own RSS.
pub const FIRST_READING: Duration = Duration::from_secs(5);

/// What the host knows of a worker's footprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// Its tree holds this many bytes, as last read.
    Bytes(u64),
    /// Its first reading was asked for and is coming ([`FIRST_READING`]).
    Awaited,
    /// It cannot be read (or was never asked for): the worker's own RSS stands in.
    Unknown,
}

/// The readings, by worker pid: bytes (`None`: the process could not be read), and when
/// the reading was taken.
type Readings = Arc<Mutex<HashMap<u32, (Option<u64>, Instant)>>>;

/// A reading to take: which worker, and not before when.
type Due = (Instant, u32);

/// The footprint sampler of one host.
#[derive(Debug, Default)]
pub struct Footprints {
    readings: Readings,
    /// The latest reading asked for, per worker: when it is due.
    asked: HashMap<u32, Instant>,
    thread: Option<(Sender<Due>, JoinHandle<()>)>,
}

impl Footprints {
    /// Asks for a reading of `pid`'s tree [`SETTLE`] from `now`, or, if one was asked less
    /// than [`MIN_INTERVAL`] before that, as soon after it as the interval allows. Nothing
    /// new is asked when a reading at least that late is already due. Never blocks.
    pub fn request(&mut self, pid: u32, now: Instant) {
        let settled = now + SETTLE;
        let due = match self.asked.get(&pid) {
            Some(at) if *at >= settled => return,
            Some(at) => settled.max(*at + MIN_INTERVAL),
            None => settled,
        };
        let Some((tx, _)) = self.thread() else {
            return;
        };
        match tx.try_send((due, pid)) {
            Ok(()) => {
                self.asked.insert(pid, due);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {}
        }
    }

    /// The latest reading of `pid`'s tree, in bytes.
    pub fn latest(&self, pid: u32) -> Option<u64> {
        self.readings.lock().ok()?.get(&pid)?.0
    }

    /// What is known of `pid`'s tree at `now`.
    pub fn known(&self, pid: u32, now: Instant) -> Known {
        let reading = self.readings.lock().ok().and_then(|r| r.get(&pid).copied());
        match (reading, self.asked.get(&pid)) {
            (Some((Some(bytes), _)), _) => Known::Bytes(bytes),
            (None, Some(due)) if now.saturating_duration_since(*due) < FIRST_READING => {
                Known::Awaited
            }
            _ => Known::Unknown,
        }
    }

    /// Whether a reading asked for has not been taken yet.
    pub fn pending(&self) -> bool {
        let Ok(readings) = self.readings.lock() else {
            return false;
        };
        self.asked
            .iter()
            .any(|(pid, due)| readings.get(pid).is_none_or(|(_, at)| at < due))
    }

    /// Forgets a worker that is gone.
    pub fn forget(&mut self, pid: u32) {
        self.asked.remove(&pid);
        if let Ok(mut r) = self.readings.lock() {
            r.remove(&pid);
        }
    }

    /// The reading thread, started on first use; `None` if it cannot be started.
    fn thread(&mut self) -> Option<&(Sender<Due>, JoinHandle<()>)> {
        if self.thread.is_none() {
            let (tx, rx) = crossbeam_channel::bounded::<Due>(QUEUE);
            let readings = Arc::clone(&self.readings);
            let handle = std::thread::Builder::new()
                .name("ngd-footprint".into())
                .spawn(move || read_when_due(&rx, &readings))
                .ok()?;
            self.thread = Some((tx, handle));
        }
        self.thread.as_ref()
    }
}

/// The thread: takes each reading when it is due, until the host hangs up.
fn read_when_due(rx: &Receiver<Due>, readings: &Readings) {
    let mut due: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    loop {
        let next = match due.peek() {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(Reverse((at, _))) => rx.recv_deadline(*at),
        };
        match next {
            Ok(request) => due.push(Reverse(request)),
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        while due.peek().is_some_and(|Reverse((at, _))| *at <= now) {
            let Some(Reverse((_, pid))) = due.pop() else {
                break;
            };
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
    fn a_first_reading_is_awaited_for_a_while() {
        let mut f = Footprints::default();
        let me = std::process::id();
        let now = Instant::now();
        assert_eq!(f.known(me, now), Known::Unknown); // never asked
        f.request(me, now);
        assert_eq!(f.known(me, now), Known::Awaited);
        let late = now + SETTLE + FIRST_READING;
        assert_eq!(f.known(me, late), Known::Unknown);
        let bytes = wait_for(&f, me);
        assert_eq!(f.known(me, now), Known::Bytes(bytes));
        f.forget(me);
        assert_eq!(f.known(me, now), Known::Unknown);
    }

    #[test]
    fn requests_are_settled_and_spaced_never_dropped() {
        let mut f = Footprints::default();
        let me = std::process::id();
        // Instants in the past, so that the readings are due at once.
        let t0 = Instant::now() - 4 * MIN_INTERVAL;
        f.request(me, t0);
        assert_eq!(f.asked[&me], t0 + SETTLE);
        // Sooner than the interval allows: served by a reading one interval later.
        f.request(me, t0 + MIN_INTERVAL / 2);
        assert_eq!(f.asked[&me], t0 + SETTLE + MIN_INTERVAL);
        // That reading is late enough for this one too.
        f.request(me, t0 + MIN_INTERVAL);
        assert_eq!(f.asked[&me], t0 + SETTLE + MIN_INTERVAL);
        f.request(me, t0 + 3 * MIN_INTERVAL);
        assert_eq!(f.asked[&me], t0 + 3 * MIN_INTERVAL + SETTLE);
        assert!(wait_for(&f, me) > 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while f.pending() {
            assert!(Instant::now() < deadline, "the reading never came");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_reading_waits_until_it_is_due() {
        let mut f = Footprints::default();
        let me = std::process::id();
        let asked = Instant::now();
        f.request(me, asked);
        assert_eq!(f.known(me, asked), Known::Awaited);
        wait_for(&f, me);
        assert!(asked.elapsed() >= SETTLE);
        assert!(!f.pending());
    }
}
