//! ngd's own copy of the Python SDK (`sdk/python/src`: the `ngw` and `ngw_contrib`
//! packages), carried inside the binary so that a Python program can be served without
//! installing anything into its environment.
//!
//! The files are embedded at build time (`server/build.rs`) and written out on first use to
//! `$XDG_CACHE_HOME/ngd/python-sdk/<version>-<digest>/` (`~/.cache/...` when unset, else
//! the runtime directory), a directory named after their hash, so a new ngd never uses an
//! old copy and two ngd versions can run side by side. Writing is atomic: the files go to
//! a temporary sibling directory, which is renamed into place once complete; a directory
//! that exists is complete. Two ngd writing at once both succeed, one rename wins.
//!
//! A `[[plugin]]` table with `sdk = "python"` gets this directory first on its worker's
//! `PYTHONPATH` ([`python_path`]); the runner (`python3 -m ngw`) takes it off `sys.path`
//! before the program runs, and programs see the client's environment, so neither
//! `sys.path` nor `os.environ` shows it (docs/ngw.md, "The SDK ngd carries").

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/python_sdk.rs"));
}

/// The embedded files: path relative to the SDK's directory, contents.
pub fn files() -> &'static [(&'static str, &'static [u8])] {
    embedded::FILES
}

/// The name of the directory the SDK is written to: `<version>-<digest>`.
pub fn dir_name() -> String {
    format!("{}-{}", env!("CARGO_PKG_VERSION"), embedded::DIGEST)
}

/// Where SDK copies live: `$XDG_CACHE_HOME/ngd/python-sdk`, `~/.cache/ngd/python-sdk`,
/// else the private runtime directory's `python-sdk`.
pub fn cache_root() -> PathBuf {
    let absolute = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(d) = absolute(std::env::var_os("XDG_CACHE_HOME")) {
        return d.join("ngd/python-sdk");
    }
    if let Some(h) = absolute(std::env::var_os("HOME")) {
        return h.join(".cache/ngd/python-sdk");
    }
    crate::security::RuntimeDir::default_path().join("python-sdk")
}

/// The directory holding this ngd's SDK (the `PYTHONPATH` entry that makes `ngw`
/// importable), written out under [`cache_root`] if it is not there yet.
pub fn dir() -> io::Result<PathBuf> {
    ensure_in(&cache_root())
}

/// [`dir`] under `root`.
pub fn ensure_in(root: &Path) -> io::Result<PathBuf> {
    if files().is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "this ngd was built without its Python SDK (sdk/python/src was missing)",
        ));
    }
    let target = root.join(dir_name());
    if target.join("ngw/__init__.py").is_file() {
        return Ok(target);
    }
    std::fs::create_dir_all(root)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = root.join(format!(".tmp-{}-{nanos}-{serial}", std::process::id()));
    let written = write_all(&temp);
    let result = written.and_then(|()| match std::fs::rename(&temp, &target) {
        Ok(()) => Ok(()),
        // Another ngd renamed its copy into place first: the same files.
        Err(_) if target.join("ngw/__init__.py").is_file() => Ok(()),
        Err(e) => Err(e),
    });
    if temp.exists() {
        let _ = std::fs::remove_dir_all(&temp);
    }
    result.map(|()| target)
}

fn write_all(dir: &Path) -> io::Result<()> {
    for (rel, bytes) in files() {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, bytes)?;
    }
    Ok(())
}

/// A worker's `PYTHONPATH` with `sdk` first: before the value the plugin's `env` table
/// gives, else the one ngd inherited (`inherited`), else alone.
pub fn python_path(sdk: &Path, configured: Option<&str>, inherited: Option<&OsStr>) -> OsString {
    let mut value = OsString::from(sdk);
    let rest = configured
        .map(OsString::from)
        .or_else(|| inherited.map(OsStr::to_os_string))
        .filter(|v| !v.is_empty());
    if let Some(rest) = rest {
        value.push(":");
        value.push(rest);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_is_embedded() {
        let names: Vec<&str> = files().iter().map(|(p, _)| *p).collect();
        for needed in [
            "ngw/__init__.py",
            "ngw/__main__.py",
            "ngw_contrib/__init__.py",
        ] {
            assert!(names.contains(&needed), "{needed} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("__pycache__")));
    }

    #[test]
    fn written_once_complete_and_found_again() {
        let root = tempfile::tempdir().unwrap();
        let dir = ensure_in(root.path()).unwrap();
        assert_eq!(dir, root.path().join(dir_name()));
        for (rel, bytes) in files() {
            assert_eq!(&std::fs::read(dir.join(rel)).unwrap(), bytes, "{rel}");
        }
        // No temporary directory is left; a second call finds the copy.
        let entries: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(ensure_in(root.path()).unwrap(), dir);
    }

    #[test]
    fn concurrent_writers_both_succeed() {
        let root = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let root = root.path().to_path_buf();
                std::thread::spawn(move || ensure_in(&root).unwrap())
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), root.path().join(dir_name()));
        }
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1);
    }

    #[test]
    fn python_path_puts_the_sdk_first() {
        let sdk = Path::new("/c/sdk");
        assert_eq!(python_path(sdk, None, None), "/c/sdk");
        assert_eq!(
            python_path(sdk, Some("/a:/b"), Some(OsStr::new("/x"))),
            "/c/sdk:/a:/b"
        );
        assert_eq!(python_path(sdk, None, Some(OsStr::new("/x"))), "/c/sdk:/x");
        assert_eq!(python_path(sdk, None, Some(OsStr::new(""))), "/c/sdk");
    }
}
