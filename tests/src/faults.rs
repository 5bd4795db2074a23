//! Fault injection for `ngd`'s plugin host: misbehaving workers from
//! `tests/fixtures/faults/`, a process census, and a raw client that reads slowly, for the
//! scenarios in `tests/e2e/faults*.rs`.
//!
//! The servers are [`PluginServer`]s (see [`crate::plugins`]): `ngd` with `[[plugin]]`
//! tables, stopped and checked for leftover processes when dropped. On top of that check
//! (processes tagged with [`TAG_VAR`], `ngd`'s descendants), a [`Census`] remembers every
//! worker and session child it has seen, and at the end of a test fails if any process
//!
//! * carries `NGW_PLUGIN=<one of the test's plugins>` in `/proc/<pid>/environ` (plugin
//!   names are made unique per test by [`unique`]), or this server's tag;
//! * has the session id or the process group of a worker or session child seen earlier
//!   (a grandchild whose parent died and which lost its environment is still found);
//! * descends from `ngd`.
//!
//! Fixtures: `raw_worker.py` speaks ngw by hand (no SDK), so it can break the protocol
//! exactly where a test wants; `sdk_worker.py` uses the SDK. Both are documented in their
//! module docstrings.

use std::collections::BTreeSet;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

pub use crate::plugins::{disabled_reason, last_failure, state};
use crate::plugins::{python, repo_root, Plugin, PluginServer, TAG_VAR};
use crate::server::Address;
use ng_testkit::procfs::{all_processes, descendants, environ_has, proc_info, send_signal};
pub use ng_testkit::procfs::{cpu_time, describe, rss_kib, running, Proc, RssProbe};
use ng_testkit::{frame, frames, take_chunk, Stream};

/// A file in `tests/fixtures/faults/`.
pub fn fixture(name: &str) -> PathBuf {
    let path = repo_root().join("tests/fixtures/faults").join(name);
    assert!(path.is_file(), "fixture {} is missing", path.display());
    path
}

/// `base` made unique within this machine's runs (`<base>-<test pid>-<n>`), so that
/// `NGW_PLUGIN=<name>` in a process's environment tells that it belongs to this test.
pub fn unique(base: &str) -> String {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    format!(
        "{base}-{}-{}",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    )
}

/// A plugin running `python3 raw_worker.py <args>` under a unique name based on `base`.
pub fn raw_plugin<S: AsRef<str>>(base: &str, args: &[S]) -> Plugin {
    let mut command = vec![
        python().to_string_lossy().into_owned(),
        fixture("raw_worker.py").to_string_lossy().into_owned(),
    ];
    command.extend(args.iter().map(|a| a.as_ref().to_string()));
    Plugin::new(&unique(base), &command)
}

/// A plugin running the SDK fixture `sdk_worker.py` under a unique name based on `base`.
pub fn sdk_plugin(base: &str) -> Plugin {
    let command = [
        python().to_string_lossy().into_owned(),
        fixture("sdk_worker.py").to_string_lossy().into_owned(),
    ];
    Plugin::new(&unique(base), &command)
}

/// What a test knows about the processes of one plugin world. See the module docs.
#[derive(Debug)]
pub struct Census {
    ngd: u32,
    tag: String,
    /// `NGW_PLUGIN=<name>` of every plugin of the test.
    plugin_entries: Vec<String>,
    /// Sessions and process groups led by workers and session children seen so far.
    leaders: Mutex<BTreeSet<u32>>,
}

impl Census {
    /// A census of `server`'s world, whose plugins are `plugins` (by name).
    pub fn new<S: AsRef<str>>(server: &PluginServer, plugins: &[S]) -> Census {
        let census = Census {
            ngd: server.pid(),
            tag: server.tag().to_string(),
            plugin_entries: plugins
                .iter()
                .map(|p| format!("NGW_PLUGIN={}", p.as_ref()))
                .collect(),
            leaders: Mutex::new(BTreeSet::new()),
        };
        census.snapshot();
        census
    }

    /// A census for a second `ngd` (pid `ngd`) serving the same plugins, e.g. after a
    /// restart; it inherits what this one has seen.
    pub fn for_ngd(&self, ngd: u32) -> Census {
        Census {
            ngd,
            tag: self.tag.clone(),
            plugin_entries: self.plugin_entries.clone(),
            leaders: Mutex::new(self.leaders.lock().unwrap().clone()),
        }
    }

    /// Remembers `ngd`'s descendants now (their sessions and process groups); returns them.
    pub fn snapshot(&self) -> Vec<Proc> {
        let found = descendants(self.ngd);
        let own = proc_info(std::process::id());
        let mut leaders = self.leaders.lock().unwrap();
        for p in &found {
            // Workers and session children lead their own session; never count the
            // test's own session or group.
            if own
                .as_ref()
                .is_none_or(|o| o.sid != p.sid && o.pgrp != p.pgrp)
            {
                leaders.insert(p.sid);
                leaders.insert(p.pgrp);
            }
        }
        found
    }

    /// The worker pids now: `ngd`'s direct children.
    pub fn workers(&self) -> Vec<u32> {
        self.snapshot()
            .into_iter()
            .filter(|p| p.ppid == self.ngd && p.state != 'Z')
            .map(|p| p.pid)
            .collect()
    }

    /// Processes that belong to this world by any of the module docs' rules (the test
    /// process and its direct children, the clients, excepted).
    pub fn leftovers(&self) -> Vec<Proc> {
        let me = std::process::id();
        let tag = format!("{TAG_VAR}={}", self.tag);
        let leaders = self.leaders.lock().unwrap().clone();
        let under_ngd: BTreeSet<u32> = descendants(self.ngd).iter().map(|p| p.pid).collect();
        all_processes()
            .into_iter()
            .filter(|p| p.pid != me && p.ppid != me && p.pid != self.ngd)
            .filter(|p| {
                under_ngd.contains(&p.pid)
                    || leaders.contains(&p.sid)
                    || leaders.contains(&p.pgrp)
                    || environ_has(p.pid, &tag)
                    || self.plugin_entries.iter().any(|e| environ_has(p.pid, e))
            })
            .collect()
    }

    /// Waits up to `timeout` for [`leftovers`](Census::leftovers) to be empty; otherwise
    /// kills them (by pid) and fails the test, naming them.
    #[track_caller]
    pub fn assert_nothing_left(&self, timeout: Duration, context: &str) {
        let deadline = Instant::now() + timeout;
        loop {
            let left: Vec<Proc> = self
                .leftovers()
                .into_iter()
                .filter(|p| p.state != 'Z')
                .collect();
            if left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                for p in &left {
                    send_signal(p.pid, libc::SIGKILL);
                }
                panic!(
                    "{context}: processes started by ngd are still running {timeout:?} later \
                     (killed now):\n{}",
                    describe(&left)
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Stops `server` (SIGTERM; the guard checks its tagged processes) and then checks the
/// census: nothing `ngd` started is left.
#[track_caller]
pub fn stop_and_check(server: &PluginServer, census: &Census) {
    census.snapshot();
    server.stop();
    census.assert_nothing_left(Duration::from_secs(3), "after ngd stopped");
}

/// The pids on the line `<word><pid> <pid>...` that a fixture command printed.
#[track_caller]
pub fn pids(out: &str, word: &str) -> Vec<u32> {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(word))
        .unwrap_or_else(|| panic!("no {word:?} line in {out:?}"));
    line.split_whitespace()
        .map(|p| p.parse().unwrap_or_else(|_| panic!("bad pid in {line:?}")))
        .collect()
}

/// Polls `f` every 20 ms until it returns `Some`, for at most `timeout`.
pub fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `ngd`'s log (its stderr) contains `needle`; fails the test after `timeout`.
#[track_caller]
pub fn wait_log(server: &PluginServer, needle: &str, timeout: Duration) -> String {
    poll(timeout, || {
        let log = server.ngd().stderr_text();
        log.contains(needle).then_some(log)
    })
    .unwrap_or_else(|| {
        panic!(
            "ngd's log does not say {needle:?} within {timeout:?}\n{}",
            server.log()
        )
    })
}

/// The starts a `raw_worker.py --starts FILE` recorded: `(pid, CLOCK_MONOTONIC ns)`.
pub fn starts(path: &Path) -> Vec<(u32, u64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect()
}

/// The share of one CPU that process `pid` uses over the next `window` (0.0 to 1.0).
pub fn cpu_share(pid: u32, window: Duration) -> f64 {
    let before = cpu_time(pid).expect("the process's CPU time");
    let start = Instant::now();
    thread::sleep(window);
    let used = cpu_time(pid).expect("the process's CPU time") - before;
    used.as_secs_f64() / start.elapsed().as_secs_f64()
}

/// A bare Nailgun client on a raw socket that reads only when told to, so a test can be
/// a slow client, a stalled one, or one that vanishes mid-stream. It sends a heartbeat
/// (`H`) whenever it has been quiet for 500 ms while the test drives it, and answers `S`
/// with `.`.
#[derive(Debug)]
pub struct RawClient {
    stream: Stream,
    last_sent: Instant,
    /// Bytes read, not yet decoded.
    buf: Vec<u8>,
    /// Output bytes received so far, by stream: stdout, stderr.
    pub received: [u64; 2],
    /// The first bytes of stdout and of stderr (up to 64 KiB each), for checks.
    pub heads: [Vec<u8>; 2],
    /// The exit code, once `X` arrived.
    pub exit: Option<i32>,
}

impl RawClient {
    /// Connects to `address` and sends a header running `command args` in `/`, with
    /// `TAG_VAR=<tag>` in the environment.
    pub fn start(address: &Address, tag: &str, command: &str, args: &[&str]) -> RawClient {
        let mut stream =
            Stream::connect(address).unwrap_or_else(|e| panic!("connect to {address}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut header: Vec<u8> = args
            .iter()
            .flat_map(|a| frame(b'A', a.as_bytes()))
            .collect();
        let tag = format!("{TAG_VAR}={tag}");
        header.extend(frames(&[
            (b'E', tag.as_bytes()),
            (b'D', b"/"),
            (b'C', command.as_bytes()),
        ]));
        stream.write_all(&header).expect("send the header");
        RawClient {
            stream,
            last_sent: Instant::now(),
            buf: Vec::new(),
            received: [0, 0],
            heads: [Vec::new(), Vec::new()],
            exit: None,
        }
    }

    fn heartbeat(&mut self) {
        if self.last_sent.elapsed() >= Duration::from_millis(500) {
            let _ = self.stream.write_all(&frame(b'H', b""));
            self.last_sent = Instant::now();
        }
    }

    /// Heartbeats, without reading, for `d`.
    pub fn stall(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            self.heartbeat();
            thread::sleep(Duration::from_millis(50).min(left));
        }
    }

    /// Takes the whole chunks out of the buffer; `false` once `X` was seen.
    fn decode(&mut self) -> io::Result<bool> {
        while let Some(chunk) = take_chunk(&mut self.buf) {
            match chunk.ty {
                b'1' | b'2' => {
                    let i = usize::from(chunk.ty == b'2');
                    let len = chunk.payload.len();
                    self.received[i] += len as u64;
                    let room = (64usize << 10).saturating_sub(self.heads[i].len());
                    self.heads[i].extend_from_slice(&chunk.payload[..room.min(len)]);
                }
                b'S' => {
                    self.stream.write_all(&frame(b'.', b""))?;
                    self.last_sent = Instant::now();
                }
                b'X' => {
                    self.exit = String::from_utf8_lossy(&chunk.payload).trim().parse().ok();
                    return Ok(false);
                }
                _ => {}
            }
        }
        Ok(true)
    }

    /// Reads at most `max` bytes from the socket and handles the chunks completed;
    /// `Ok(false)` at the session's end (`X`, or end of stream).
    pub fn step(&mut self, max: usize) -> io::Result<bool> {
        self.heartbeat();
        let mut chunk = vec![0u8; max];
        match self.stream.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        self.decode()
    }

    /// Reads until `received` totals `bytes`, `every` bytes at a time with `pause` between
    /// reads (a slow reader); fails the test after `timeout`.
    #[track_caller]
    pub fn read_slowly(&mut self, bytes: u64, every: usize, pause: Duration, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.total() < bytes {
            assert!(
                Instant::now() < deadline,
                "only {} of {bytes} bytes within {timeout:?}",
                self.total()
            );
            match self.step(every) {
                Ok(true) => {}
                Ok(false) => panic!("the session ended after {} bytes", self.total()),
                Err(e) => panic!("reading failed after {} bytes: {e}", self.total()),
            }
            thread::sleep(pause);
        }
    }

    /// Reads to the end of the session and returns its exit code; fails the test after
    /// `timeout`.
    #[track_caller]
    pub fn finish(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            assert!(
                Instant::now() < deadline,
                "no X within {timeout:?} ({} bytes)",
                self.total()
            );
            match self.step(1 << 20) {
                Ok(true) => {}
                Ok(false) => return self.exit,
                Err(e) => panic!("reading failed after {} bytes: {e}", self.total()),
            }
        }
    }

    /// Output bytes received so far.
    pub fn total(&self) -> u64 {
        self.received[0] + self.received[1]
    }
}
