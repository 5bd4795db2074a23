//! Upgrades: a server notices that it runs old code, and hands over.
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
//! Two installs (npm's and pip's, say) share the default socket, so a server may serve
//! the clients of another install, of another version. Each `ng` announces its version
//! (`NGD_CLIENT_VERSION`). A client newer than the server ([`Watch::wants`]) names, through
//! its pid, its own `ngd` ([`sibling_ngd`]): when that is an executable file, it is the
//! newest `ngd` known. The loop records it in the runtime directory ([`write_record`],
//! read back by `ng`'s auto-start) and the server is outdated exactly as above
//! ([`Watch::newer`]), so the next `ng` of either install starts the newer `ngd`. Versions
//! only go up: the record is replaced only by a newer one (or once its file changed), and
//! an older client is served as before.
//!
//! A binary that disappeared (uninstalled, or being replaced right now) is not a change:
//! the next `ng` could not start anything from that path. This module is the decision and
//! the record's file; the loop reads the binary and the client's credentials.

use ng_proto::handover::NewestNgd;
use ng_proto::version::Version;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use ng_proto::handover::Stamp;

/// How often the binary is looked at.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// This binary's version ([`ng_proto::version::current`]), read once.
pub fn ours() -> &'static Version {
    static OURS: std::sync::OnceLock<Version> = std::sync::OnceLock::new();
    OURS.get_or_init(ng_proto::version::current)
}

/// The identity of the file at `path` (following links), if it exists.
pub fn stamp_of(path: &Path) -> Option<Stamp> {
    std::fs::metadata(path).ok().map(|m| Stamp::of_metadata(&m))
}

/// Whether the running code is the newest known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Binary {
    /// The file is the one the server started from, and no newer `ngd` was seen.
    Current,
    /// This server runs old code, for good.
    Outdated(Outdated),
}

/// Why a server is outdated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outdated {
    /// The file it was started from changed.
    Changed,
    /// A newer client's own `ngd` is installed: the server hands over to it.
    Newer(NewestNgd),
}

/// Watches one binary.
#[derive(Clone, Debug)]
pub struct Watch {
    path: PathBuf,
    stamp: Stamp,
    next: Instant,
    state: Binary,
    /// Recording a newer `ngd` failed once already (said once, tried again each time).
    unrecorded: bool,
}

impl Watch {
    /// Watches `path`, whose identity now is `stamp`.
    pub fn new(path: PathBuf, stamp: Stamp, now: Instant) -> Self {
        Self {
            path,
            stamp,
            next: now + CHECK_INTERVAL,
            state: Binary::Current,
            unrecorded: false,
        }
    }

    /// This process's own executable, if it can be found.
    pub fn current_exe(now: Instant) -> Option<Self> {
        let path = std::env::current_exe().ok()?;
        let stamp = stamp_of(&path)?;
        Some(Self::new(path, stamp, now))
    }

    /// The file watched.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where it stands.
    pub fn state(&self) -> &Binary {
        &self.state
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
        match (&self.state, seen) {
            (Binary::Current, Some(s)) if s != self.stamp => {
                self.state = Binary::Outdated(Outdated::Changed);
                true
            }
            _ => false,
        }
    }

    /// Whether a client of `version` is newer than this server (`ours`) and worth
    /// looking for its own `ngd`: only while the server is current.
    pub fn wants(&self, version: &Version, ours: &Version) -> bool {
        self.state == Binary::Current && version.is_newer_than(ours)
    }

    /// Recording a newer `ngd` failed: true the first time, so it is said once.
    pub fn unrecorded(&mut self) -> bool {
        !std::mem::replace(&mut self.unrecorded, true)
    }

    /// A newer client's own `ngd` was found: the server is outdated for good.
    pub fn newer(&mut self, found: NewestNgd) {
        if self.state == Binary::Current {
            self.state = Binary::Outdated(Outdated::Newer(found));
        }
    }
}

/// The client's own `ngd`, next to its executable `client_exe`, when it is a regular file
/// that can be executed: its path and identity.
pub fn sibling_ngd(client_exe: &Path) -> Option<(PathBuf, Stamp)> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = client_exe.parent()?.join("ngd");
    let meta = std::fs::metadata(&path).ok()?;
    let executable = meta.is_file() && meta.permissions().mode() & 0o111 != 0;
    executable.then(|| (path, Stamp::of_metadata(&meta)))
}

/// The record in `runtime`, if it parses and its file is still the one it names.
pub fn read_record(runtime: &Path) -> Option<NewestNgd> {
    use std::io::Read as _;
    let file = std::fs::File::open(runtime.join(ng_proto::handover::RECORD_NAME)).ok()?;
    let mut bytes = Vec::new();
    file.take(ng_proto::handover::MAX_RECORD_LEN as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    NewestNgd::parse(&bytes).filter(|r| stamp_of(&r.path) == Some(r.stamp))
}

/// Records `found` in `runtime`, atomically (a private file renamed over the record),
/// unless the record there already names an `ngd` at least as new whose file is
/// unchanged: the record's version only goes up.
pub fn write_record(runtime: &Path, found: &NewestNgd) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if read_record(runtime).is_some_and(|r| !found.version.is_newer_than(&r.version)) {
        return Ok(());
    }
    let bytes = found.to_bytes().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path cannot be recorded (not absolute, or holds a newline)",
        )
    })?;
    let target = runtime.join(ng_proto::handover::RECORD_NAME);
    let tmp = runtime.join(format!(
        ".{}.{}",
        ng_proto::handover::RECORD_NAME,
        std::process::id()
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes))
        .and_then(|()| std::fs::rename(&tmp, &target));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
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
        let mut w = Watch::new(exe.clone(), stamp_of(&exe).unwrap(), t0);
        assert_eq!(w.deadline(), Some(t0 + CHECK_INTERVAL));
        assert!(!w.due(t0));
        assert!(w.due(t0 + CHECK_INTERVAL));
        // Unchanged, then missing (being replaced): still current.
        assert!(!w.observe(stamp_of(&exe), t0 + CHECK_INTERVAL));
        assert_eq!(w.deadline(), Some(t0 + CHECK_INTERVAL * 2));
        assert!(!w.observe(None, t0 + CHECK_INTERVAL * 2));
        assert_eq!(w.state(), &Binary::Current);
        // A new file at the path (a new inode, as pip and `install` make).
        let new = dir.path().join("ngd.new");
        std::fs::write(&new, "two!").unwrap();
        std::fs::rename(&new, &exe).unwrap();
        assert!(w.observe(stamp_of(&exe), t0 + CHECK_INTERVAL * 3));
        assert_eq!(w.state(), &Binary::Outdated(Outdated::Changed));
        assert_eq!(w.deadline(), None);
        assert!(!w.observe(stamp_of(&exe), t0 + CHECK_INTERVAL * 4));
    }

    fn found(dir: &Path, version: &str) -> NewestNgd {
        let path = dir.join(format!("ngd-{version}"));
        std::fs::write(&path, version).unwrap();
        NewestNgd {
            version: Version::parse(version.as_bytes()).unwrap(),
            stamp: stamp_of(&path).unwrap(),
            path,
        }
    }

    #[test]
    fn a_newer_client_outdates_a_current_server_once() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("ngd");
        std::fs::write(&exe, "one").unwrap();
        let t0 = Instant::now();
        let mut w = Watch::new(exe.clone(), stamp_of(&exe).unwrap(), t0);
        let ours = Version::parse(b"0.3.0").unwrap();
        let v = |s: &str| Version::parse(s.as_bytes()).unwrap();
        assert!(!w.wants(&v("0.3.0"), &ours));
        assert!(!w.wants(&v("0.2.9"), &ours));
        assert!(!w.wants(&v("0.3.0+other"), &ours));
        assert!(w.wants(&v("0.4.0-rc.1"), &ours));
        let newer = found(dir.path(), "0.4.0-rc.1");
        w.newer(newer.clone());
        assert_eq!(w.state(), &Binary::Outdated(Outdated::Newer(newer.clone())));
        assert_eq!(w.deadline(), None);
        assert!(!w.wants(&v("0.5.0"), &ours));
        w.newer(found(dir.path(), "0.5.0"));
        assert_eq!(w.state(), &Binary::Outdated(Outdated::Newer(newer)));
    }

    #[test]
    fn the_record_only_goes_up_and_is_dropped_once_its_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path();
        assert_eq!(read_record(runtime), None);
        let four = found(runtime, "0.4.0");
        write_record(runtime, &four).unwrap();
        assert_eq!(read_record(runtime), Some(four.clone()));
        // An older or equal one leaves it; a newer one replaces it.
        write_record(runtime, &found(runtime, "0.3.0")).unwrap();
        assert_eq!(read_record(runtime), Some(four.clone()));
        let five = found(runtime, "0.5.0");
        write_record(runtime, &five).unwrap();
        assert_eq!(read_record(runtime), Some(five.clone()));
        let mode = std::fs::metadata(runtime.join(ng_proto::handover::RECORD_NAME))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        // Its file rewritten (another version installed there): the record no longer
        // holds, and an older version may be recorded again.
        std::fs::write(&five.path, "0.5.0, reinstalled").unwrap();
        assert_eq!(read_record(runtime), None);
        write_record(runtime, &four).unwrap();
        assert_eq!(read_record(runtime), Some(four));
        // Only the record is left in the directory.
        let names: Vec<_> = std::fs::read_dir(runtime)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().contains("newest"))
            .collect();
        assert_eq!(names, [ng_proto::handover::RECORD_NAME]);
    }

    #[test]
    fn a_sibling_ngd_must_be_an_executable_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let ng = dir.path().join("ng");
        assert_eq!(sibling_ngd(&ng), None);
        let ngd = dir.path().join("ngd");
        std::fs::write(&ngd, "x").unwrap();
        std::fs::set_permissions(&ngd, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(sibling_ngd(&ng), None);
        std::fs::set_permissions(&ngd, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            sibling_ngd(&ng),
            Some((ngd.clone(), stamp_of(&ngd).unwrap()))
        );
    }

    #[test]
    fn a_binary_rewritten_in_place_is_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("ngd");
        std::fs::write(&exe, "one").unwrap();
        let t0 = Instant::now();
        let mut w = Watch::new(exe.clone(), stamp_of(&exe).unwrap(), t0);
        std::fs::write(&exe, "one, longer").unwrap();
        assert!(w.observe(stamp_of(&exe), t0 + CHECK_INTERVAL));
    }
}
