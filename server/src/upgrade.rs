//! Upgrades: a server notices that its own binary changed on disk.
//!
//! After `pip install -U ngd` (or any new `ngd` at the same path), a running server still
//! runs the old code. The `ngd` binary watches the file it was started from: every
//! [`CHECK_INTERVAL`] the event loop compares the file's identity ([`Stamp`]: device,
//! inode, size, modification time) with the one at start. Once it differs the server is
//! **outdated** for good ([`Watch::observe`]), which `ngd status` says; a server that `ng`
//! auto-started then hands over: it goes through the idle exit at once ([`crate::idle`]:
//! socket files removed, connections already made served, then stop), so the next `ng`
//! finds no server and starts the new binary. A server started by hand keeps running and
//! is only told.
//!
//! A binary that disappeared (uninstalled, or being replaced right now) is not a change:
//! the next `ng` could not start anything from that path. This module is the decision; the
//! loop reads the file.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the binary is looked at.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A file's identity: replaced (a new inode) or rewritten in place (size, time) changes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl Stamp {
    /// The identity of the file at `path` (following links), if it exists.
    pub fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

/// Whether the running code is the binary's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    /// The file is the one the server started from.
    Current,
    /// The file changed since: this server runs old code.
    Outdated,
}

/// Watches one binary.
#[derive(Clone, Debug)]
pub struct Watch {
    path: PathBuf,
    stamp: Stamp,
    next: Instant,
    state: Binary,
}

impl Watch {
    /// Watches `path`, whose identity now is `stamp`.
    pub fn new(path: PathBuf, stamp: Stamp, now: Instant) -> Self {
        Self {
            path,
            stamp,
            next: now + CHECK_INTERVAL,
            state: Binary::Current,
        }
    }

    /// This process's own executable, if it can be found.
    pub fn current_exe(now: Instant) -> Option<Self> {
        let path = std::env::current_exe().ok()?;
        let stamp = Stamp::of(&path)?;
        Some(Self::new(path, stamp, now))
    }

    /// The file watched.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where it stands.
    pub fn state(&self) -> Binary {
        self.state
    }

    /// When to look at the file next; `None` once outdated (nothing more to learn).
    pub fn deadline(&self) -> Option<Instant> {
        (self.state == Binary::Current).then_some(self.next)
    }

    /// Whether the file should be looked at now.
    pub fn due(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|t| now >= t)
    }

    /// What the file's identity is at `now` (`None`: it is missing). True when this makes
    /// the server outdated (once).
    pub fn observe(&mut self, seen: Option<Stamp>, now: Instant) -> bool {
        self.next = now + CHECK_INTERVAL;
        match (self.state, seen) {
            (Binary::Current, Some(s)) if s != self.stamp => {
                self.state = Binary::Outdated;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_binary_makes_the_server_outdated_once() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("ngd");
        std::fs::write(&exe, "one").unwrap();
        let t0 = Instant::now();
        let mut w = Watch::new(exe.clone(), Stamp::of(&exe).unwrap(), t0);
        assert_eq!(w.deadline(), Some(t0 + CHECK_INTERVAL));
        assert!(!w.due(t0));
        assert!(w.due(t0 + CHECK_INTERVAL));
        // Unchanged, then missing (being replaced): still current.
        assert!(!w.observe(Stamp::of(&exe), t0 + CHECK_INTERVAL));
        assert_eq!(w.deadline(), Some(t0 + CHECK_INTERVAL * 2));
        assert!(!w.observe(None, t0 + CHECK_INTERVAL * 2));
        assert_eq!(w.state(), Binary::Current);
        // A new file at the path (a new inode, as pip and `install` make).
        let new = dir.path().join("ngd.new");
        std::fs::write(&new, "two!").unwrap();
        std::fs::rename(&new, &exe).unwrap();
        assert!(w.observe(Stamp::of(&exe), t0 + CHECK_INTERVAL * 3));
        assert_eq!(w.state(), Binary::Outdated);
        assert_eq!(w.deadline(), None);
        assert!(!w.observe(Stamp::of(&exe), t0 + CHECK_INTERVAL * 4));
    }

    #[test]
    fn a_binary_rewritten_in_place_is_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("ngd");
        std::fs::write(&exe, "one").unwrap();
        let t0 = Instant::now();
        let mut w = Watch::new(exe.clone(), Stamp::of(&exe).unwrap(), t0);
        std::fs::write(&exe, "one, longer").unwrap();
        assert!(w.observe(Stamp::of(&exe), t0 + CHECK_INTERVAL));
    }
}
