//! The worker SDKs ngd carries inside its binary ([`PYTHON`], [`RUBY`], [`NODE`]), so that a
//! program can be served without installing anything into its environment or keeping a
//! checkout. The Node worker's native piece is a shared library, not embeddable in an
//! executable's build: it is found beside ngd ([`node_native`]).
//!
//! The files are embedded at build time (`server/build.rs`) and written out on first use to
//! `$XDG_CACHE_HOME/ngd/<name>/<version>-<digest>/` (`~/.cache/...` when unset, else the
//! runtime directory), a directory named after their hash, so a new ngd never uses an old
//! copy and two ngd versions can run side by side. Writing is atomic: the files go to a
//! temporary sibling directory, which is renamed into place once complete; a directory that
//! exists is complete. Two ngd writing at once both succeed, one rename wins.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

mod python {
    include!(concat!(env!("OUT_DIR"), "/python_sdk.rs"));
}

mod ruby {
    include!(concat!(env!("OUT_DIR"), "/ruby_sdk.rs"));
}

/// One SDK ngd carries.
#[derive(Debug)]
pub struct Carried {
    /// The name of its directory under the cache (`python-sdk`).
    pub name: &'static str,
    /// What it is, for messages (`Python SDK`).
    pub what: &'static str,
    /// Where it comes from in the source tree (`sdk/python/src`), for messages.
    pub source: &'static str,
    /// A file that every complete copy has (relative to its directory).
    pub marker: &'static str,
    files: &'static [(&'static str, &'static [u8])],
    digest: &'static str,
}

/// The Python SDK (`sdk/python/src`: the `ngw` and `ngw_contrib` packages), for
/// `sdk = "python"`.
pub static PYTHON: Carried = Carried {
    name: "python-sdk",
    what: "Python SDK",
    source: "sdk/python/src",
    marker: "ngw/__init__.py",
    files: python::FILES,
    digest: python::DIGEST,
};

/// The Ruby worker (`sdk/ruby`: `bin/ngw-ruby` and `lib/ngw`), for `sdk = "ruby"`.
pub static RUBY: Carried = Carried {
    name: "ruby-sdk",
    what: "Ruby SDK",
    source: "sdk/ruby",
    marker: "bin/ngw-ruby",
    files: ruby::FILES,
    digest: ruby::DIGEST,
};

mod node {
    include!(concat!(env!("OUT_DIR"), "/node_sdk.rs"));
}

/// The Node worker's JavaScript (`sdk/node`: `bin/ngw-node` and `lib/`), for `sdk = "node"`.
pub static NODE: Carried = Carried {
    name: "node-sdk",
    what: "Node SDK",
    source: "sdk/node",
    marker: "bin/ngw-node",
    files: node::FILES,
    digest: node::DIGEST,
};

/// The file name of the Node worker's native piece (the crate `ngw-node-native`).
pub const NODE_NATIVE: &str = "libngw_node.so";

/// The Node worker's native piece for the ngd at `exe`: beside it (where cargo builds both)
/// or in `../lib/ngd/` (an installed prefix); `None` when neither exists.
pub fn node_native(exe: &Path) -> Option<PathBuf> {
    let dir = exe.parent()?;
    [
        dir.join(NODE_NATIVE),
        dir.join("../lib/ngd").join(NODE_NATIVE),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

impl Carried {
    /// The embedded files: path relative to the SDK's directory, contents.
    pub fn files(&self) -> &'static [(&'static str, &'static [u8])] {
        self.files
    }

    /// The name of the directory the SDK is written to: `<version>-<digest>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", env!("CARGO_PKG_VERSION"), self.digest)
    }

    /// Where copies of this SDK live: `$XDG_CACHE_HOME/ngd/<name>`,
    /// `~/.cache/ngd/<name>`, else the private runtime directory's `<name>`.
    pub fn cache_root(&self) -> PathBuf {
        let absolute = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
        if let Some(d) = absolute(std::env::var_os("XDG_CACHE_HOME")) {
            return d.join("ngd").join(self.name);
        }
        if let Some(h) = absolute(std::env::var_os("HOME")) {
            return h.join(".cache/ngd").join(self.name);
        }
        crate::security::RuntimeDir::default_path().join(self.name)
    }

    /// The directory holding this ngd's copy, written out under [`Carried::cache_root`] if
    /// it is not there yet.
    pub fn dir(&self) -> io::Result<PathBuf> {
        self.ensure_in(&self.cache_root())
    }

    /// [`Carried::dir`] under `root`.
    pub fn ensure_in(&self, root: &Path) -> io::Result<PathBuf> {
        if self.files.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "this ngd was built without its {} ({} was missing)",
                    self.what, self.source
                ),
            ));
        }
        let target = root.join(self.dir_name());
        if target.join(self.marker).is_file() {
            return Ok(target);
        }
        std::fs::create_dir_all(root)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temp = root.join(format!(".tmp-{}-{nanos}-{serial}", std::process::id()));
        let written = self.write_all(&temp);
        let result = written.and_then(|()| match std::fs::rename(&temp, &target) {
            Ok(()) => Ok(()),
            // Another ngd renamed its copy into place first: the same files.
            Err(_) if target.join(self.marker).is_file() => Ok(()),
            Err(e) => Err(e),
        });
        if temp.exists() {
            let _ = std::fs::remove_dir_all(&temp);
        }
        result.map(|()| target)
    }

    fn write_all(&self, dir: &Path) -> io::Result<()> {
        for (rel, bytes) in self.files {
            let path = dir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sdk_is_embedded() {
        let names = |sdk: &Carried| -> Vec<&str> { sdk.files().iter().map(|(p, _)| *p).collect() };
        let python = names(&PYTHON);
        for needed in [
            "ngw/__init__.py",
            "ngw/__main__.py",
            "ngw_contrib/__init__.py",
        ] {
            assert!(python.contains(&needed), "{needed} missing from {python:?}");
        }
        assert!(!python.iter().any(|n| n.contains("__pycache__")));
        let ruby = names(&RUBY);
        for needed in ["bin/ngw-ruby", "lib/ngw/worker.rb", "lib/ngw/child.rb"] {
            assert!(ruby.contains(&needed), "{needed} missing from {ruby:?}");
        }
        // The worker, not its tests.
        assert!(ruby
            .iter()
            .all(|n| n.starts_with("bin/") || n.starts_with("lib/")));
        assert_ne!(PYTHON.dir_name(), RUBY.dir_name());
        let node = names(&NODE);
        for needed in [
            "bin/ngw-node",
            "lib/worker.js",
            "lib/spare.js",
            "lib/native.js",
        ] {
            assert!(node.contains(&needed), "{needed} missing from {node:?}");
        }
        assert!(node
            .iter()
            .all(|n| n.starts_with("bin/") || n.starts_with("lib/")));
    }

    #[test]
    fn written_once_complete_and_found_again() {
        for sdk in [&PYTHON, &RUBY, &NODE] {
            let root = tempfile::tempdir().unwrap();
            let dir = sdk.ensure_in(root.path()).unwrap();
            assert_eq!(dir, root.path().join(sdk.dir_name()));
            for (rel, bytes) in sdk.files() {
                assert_eq!(&std::fs::read(dir.join(rel)).unwrap(), bytes, "{rel}");
            }
            // No temporary directory is left; a second call finds the copy.
            let entries: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
            assert_eq!(entries.len(), 1);
            assert_eq!(sdk.ensure_in(root.path()).unwrap(), dir);
        }
    }

    #[test]
    fn concurrent_writers_both_succeed() {
        let root = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let root = root.path().to_path_buf();
                std::thread::spawn(move || RUBY.ensure_in(&root).unwrap())
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), root.path().join(RUBY.dir_name()));
        }
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1);
    }
}

#[cfg(test)]
mod native_tests {
    use super::*;

    #[test]
    fn the_native_piece_is_found_beside_ngd_or_in_its_prefix() {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("ngd");
        assert_eq!(node_native(&exe), None);
        let lib = root.path().join("lib/ngd");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join(NODE_NATIVE), b"").unwrap();
        assert_eq!(
            node_native(&exe),
            Some(bin.join("../lib/ngd").join(NODE_NATIVE))
        );
        std::fs::write(bin.join(NODE_NATIVE), b"").unwrap();
        assert_eq!(node_native(&exe), Some(bin.join(NODE_NATIVE)));
    }
}
