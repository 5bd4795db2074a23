//! Where `ngd warm` keeps what it makes, and how it changes it without half-written state.
//!
//! * the drop-in directory `$XDG_CONFIG_HOME/ngd/conf.d` (next to the configuration file
//!   the server reads), one `NAME.toml` per warm program;
//! * the shims directory `$XDG_DATA_HOME/ngd/shims` (`~/.local/share/ngd/shims`), one
//!   symbolic link to `ng` per command;
//! * a lock file, `conf.d/.lock`, held for the whole of a change, so that concurrent `ngd
//!   warm` and `ngd unwarm` run one after the other.
//!
//! Every file is written to a hidden temporary name in its directory and renamed into
//! place, so a reader (the server reloading, another `ngd`) sees the old file or the new
//! one, never part of one; the server skips hidden files.

use std::io;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

/// The places `ngd warm` uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The drop-in directory.
    pub conf_d: PathBuf,
    /// The shims directory.
    pub shims: PathBuf,
}

impl Layout {
    /// The default places, from `XDG_CONFIG_HOME`, `XDG_DATA_HOME` and `HOME`; `None`
    /// without a home directory.
    pub fn from_env() -> Option<Layout> {
        let config = ng_server::config::default_config_path()?;
        let shims = shims_dir_for(
            std::env::var_os("XDG_DATA_HOME").as_deref(),
            std::env::var_os("HOME").as_deref(),
        )?;
        Some(Layout {
            conf_d: ng_server::config::conf_d_of(&config),
            shims,
        })
    }

    /// `conf.d/NAME.toml`.
    pub fn table(&self, name: &str) -> PathBuf {
        self.conf_d.join(format!("{name}.toml"))
    }

    /// `shims/NAME`.
    pub fn shim(&self, name: &str) -> PathBuf {
        self.shims.join(name)
    }

    /// Takes the lock (creating the drop-in directory), waiting for another holder.
    pub fn lock(&self) -> io::Result<Lock> {
        std::fs::create_dir_all(&self.conf_d)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.conf_d.join(".lock"))?;
        ng_sys::fd::lock_exclusive(file.as_raw_fd())?;
        Ok(Lock { _file: file })
    }
}

/// `$XDG_DATA_HOME/ngd/shims` when `XDG_DATA_HOME` is absolute, else
/// `$HOME/.local/share/ngd/shims`.
pub fn shims_dir_for(
    xdg_data_home: Option<&std::ffi::OsStr>,
    home: Option<&std::ffi::OsStr>,
) -> Option<PathBuf> {
    let base = match xdg_data_home.map(Path::new) {
        Some(dir) if dir.is_absolute() => dir.to_path_buf(),
        _ => Path::new(home.filter(|h| !h.is_empty())?).join(".local/share"),
    };
    Some(base.join("ngd/shims"))
}

/// The lock of a [`Layout`], released when dropped.
#[derive(Debug)]
pub struct Lock {
    _file: std::fs::File,
}

/// A name for a temporary sibling of `path`: hidden, unique to this process and call.
fn temp_sibling(path: &Path) -> PathBuf {
    static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}-{serial}", std::process::id()))
}

/// Writes `text` to `path` atomically (a temporary file renamed over it).
pub fn write_atomic(path: &Path, text: &str) -> io::Result<()> {
    let temp = temp_sibling(path);
    let result = std::fs::write(&temp, text).and_then(|()| std::fs::rename(&temp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Makes `link` a symbolic link to `target` atomically, replacing what is there.
pub fn symlink_atomic(target: &Path, link: &Path) -> io::Result<()> {
    let temp = temp_sibling(link);
    let result =
        std::os::unix::fs::symlink(target, &temp).and_then(|()| std::fs::rename(&temp, link));
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Whether `path` is a symbolic link to an `ng` client (its target's file name is `ng`):
/// a shim, which `ngd unwarm` may remove and `ngd warm` may replace.
pub fn is_shim(path: &Path) -> bool {
    std::fs::read_link(path).is_ok_and(|t| t.file_name().is_some_and(|n| n == "ng"))
}

/// Removes `path` if it exists; true if it did.
pub fn remove_if_present(path: &Path) -> io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn shims_dir_follows_xdg_rules() {
        assert_eq!(
            shims_dir_for(Some(OsStr::new("/d")), Some(OsStr::new("/h"))),
            Some(PathBuf::from("/d/ngd/shims"))
        );
        assert_eq!(
            shims_dir_for(Some(OsStr::new("rel")), Some(OsStr::new("/h"))),
            Some(PathBuf::from("/h/.local/share/ngd/shims"))
        );
        assert_eq!(shims_dir_for(None, None), None);
    }

    #[test]
    fn atomic_writes_leave_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.toml");
        write_atomic(&file, "one").unwrap();
        write_atomic(&file, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "two");
        let ng = dir.path().join("ng");
        std::fs::write(&ng, "").unwrap();
        let link = dir.path().join("tool");
        symlink_atomic(&ng, &link).unwrap();
        symlink_atomic(&ng, &link).unwrap();
        assert!(is_shim(&link));
        assert!(!is_shim(&file));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        // A failed write leaves nothing behind.
        let missing = dir.path().join("no/such/dir/x.toml");
        assert!(write_atomic(&missing, "x").is_err());
        assert!(remove_if_present(&file).unwrap());
        assert!(!remove_if_present(&file).unwrap());
    }
}
