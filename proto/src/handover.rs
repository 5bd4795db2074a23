//! The newest `ngd` known on this machine, as one server hands over to another install's
//! (docs/ARCHITECTURE.md, "Upgrades"): the record's format and the file identity it pins.
//!
//! A server that a newer `ng` connected to finds that client's own `ngd` and records it in
//! the runtime directory ([`RECORD_NAME`]); `ng`'s auto-start reads it back and starts the
//! recorded `ngd` instead of its own when the record is newer and the file on disk is still
//! the one recorded ([`Stamp`]). This module is the format only: the server writes the
//! file, the client reads it, each with its own I/O.
//!
//! ```text
//! ngd-newest 1
//! version 0.4.0
//! stamp <dev> <ino> <size> <mtime in ns>
//! path /abs/path/to/ngd
//! ```
//!
//! The path is the last line, its bytes as they are up to the final newline.

use crate::version::Version;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// The record's file name in the runtime directory.
pub const RECORD_NAME: &str = "newest-ngd";
/// The longest record read.
pub const MAX_RECORD_LEN: usize = 8 << 10;
const MAGIC: &[u8] = b"ngd-newest 1";

/// A file's identity: replaced (a new inode) or rewritten in place (size, time) changes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The device.
    pub dev: u64,
    /// The inode.
    pub ino: u64,
    /// The size in bytes.
    pub len: u64,
    /// The modification time, in nanoseconds since the epoch.
    pub mtime_ns: i128,
}

impl Stamp {
    /// The identity in `meta` (from `stat`, following links).
    pub fn of_metadata(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// A recorded `ngd`: its version, path and file identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewestNgd {
    /// The version its client announced.
    pub version: Version,
    /// The absolute path of the executable.
    pub path: PathBuf,
    /// The file's identity when it was recorded.
    pub stamp: Stamp,
}

impl NewestNgd {
    /// The record's bytes; `None` for a path that is not absolute or holds a newline.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        let path = self.path.as_os_str().as_bytes();
        if !self.path.is_absolute() || path.contains(&b'\n') {
            return None;
        }
        let Stamp {
            dev,
            ino,
            len,
            mtime_ns,
        } = self.stamp;
        let mut out = Vec::with_capacity(96 + path.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(
            format!(
                "\nversion {}\nstamp {dev} {ino} {len} {mtime_ns}\npath ",
                self.version
            )
            .as_bytes(),
        );
        out.extend_from_slice(path);
        out.push(b'\n');
        Some(out)
    }

    /// Reads a record; `None` for anything malformed or longer than [`MAX_RECORD_LEN`].
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() > MAX_RECORD_LEN {
            return None;
        }
        let body = bytes.strip_suffix(b"\n")?;
        let mut lines = body.splitn(4, |&b| b == b'\n');
        if lines.next()? != MAGIC {
            return None;
        }
        let version = Version::parse(lines.next()?.strip_prefix(b"version ")?)?;
        let stamp = std::str::from_utf8(lines.next()?.strip_prefix(b"stamp ")?).ok()?;
        let mut numbers = stamp.split(' ');
        let stamp = Stamp {
            dev: numbers.next()?.parse().ok()?,
            ino: numbers.next()?.parse().ok()?,
            len: numbers.next()?.parse().ok()?,
            mtime_ns: numbers.next()?.parse().ok()?,
        };
        if numbers.next().is_some() {
            return None;
        }
        let path = lines.next()?.strip_prefix(b"path ")?;
        let path = Path::new(OsStr::from_bytes(path));
        if !path.is_absolute() || path.as_os_str().as_bytes().contains(&b'\n') {
            return None;
        }
        Some(Self {
            version,
            path: path.to_path_buf(),
            stamp,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(path: &[u8]) -> NewestNgd {
        NewestNgd {
            version: Version::parse(b"0.4.0-rc.1").unwrap(),
            path: PathBuf::from(OsStr::from_bytes(path)),
            stamp: Stamp {
                dev: 2049,
                ino: 77,
                len: 1 << 20,
                mtime_ns: -5,
            },
        }
    }

    #[test]
    fn records_round_trip() {
        let r = record(b"/opt/n p m/\xff/bin/ngd");
        let bytes = r.to_bytes().unwrap();
        assert!(bytes.starts_with(b"ngd-newest 1\nversion 0.4.0-rc.1\nstamp 2049 77 1048576 -5\n"));
        assert_eq!(NewestNgd::parse(&bytes), Some(r));
        assert_eq!(record(b"bin/ngd").to_bytes(), None);
        assert_eq!(record(b"/a\nb/ngd").to_bytes(), None);
    }

    #[test]
    fn malformed_records_are_refused() {
        let good = record(b"/bin/ngd").to_bytes().unwrap();
        let text = String::from_utf8(good.clone()).unwrap();
        for bad in [
            &b""[..],
            &good[..good.len() - 1],
            text.replace("ngd-newest 1", "ngd-newest 2").as_bytes(),
            text.replace("0.4.0-rc.1", "4").as_bytes(),
            text.replace(" -5", " x").as_bytes(),
            text.replace(" -5", " -5 6").as_bytes(),
            text.replace("path /", "path ").as_bytes(),
            text.replace("path /bin/ngd", "path /bin/ngd\nmore")
                .as_bytes(),
        ] {
            assert_eq!(
                NewestNgd::parse(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut long = good;
        long.splice(good_len_before_path(&long).., vec![b'/'; MAX_RECORD_LEN]);
        long.push(b'\n');
        assert_eq!(NewestNgd::parse(&long), None);
    }

    fn good_len_before_path(bytes: &[u8]) -> usize {
        bytes.windows(5).position(|w| w == b"path ").unwrap() + 5
    }
}
