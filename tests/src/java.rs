//! The Java test nails in `tests/java/`, compiled once per test run.
//!
//! [`nails_dir`] compiles every `.java` file under `tests/java/` with
//! `javac -cp nailgun-server.jar` into `target/<profile>/ng-tests/nails-<hash>/`, where
//! the hash covers the sources and the jar, so an unchanged tree reuses the classes of an
//! earlier run and an edited nail is recompiled. Within a process a `OnceLock` compiles at
//! most once; across processes (several test binaries, or runs at the same time) each
//! compiles into a private temporary directory and renames it into place, and a loser of
//! that race simply uses the winner's directory, which holds the same classes.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::bins;

/// Where the nail sources live.
pub fn sources_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("java")
}

/// The package of the test nails: `ngtest.Echo`, `ngtest.Dump`, ...
pub const PACKAGE: &str = "ngtest";

/// The directory holding the compiled nails (a classpath entry), compiling if needed.
pub fn nails_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(compile)
}

fn compile() -> PathBuf {
    let jar = bins::nailgun_jar();
    let sources = java_sources(&sources_dir());
    assert!(
        !sources.is_empty(),
        "no .java files under {}",
        sources_dir().display()
    );

    let mut hash = Fnv64::new();
    hash.write(jar.as_os_str().as_encoded_bytes());
    hash.write(
        &fs::metadata(&jar)
            .map(|m| m.len())
            .unwrap_or(0)
            .to_be_bytes(),
    );
    for source in &sources {
        let name = source.strip_prefix(sources_dir()).unwrap_or(source);
        hash.write(name.as_os_str().as_encoded_bytes());
        hash.write(&[0]);
        hash.write(&fs::read(source).expect("read a nail source"));
    }
    let cache = bins::profile_dir().join("ng-tests");
    let dir = cache.join(format!("nails-{:016x}", hash.finish()));
    if dir.is_dir() {
        return dir;
    }

    fs::create_dir_all(&cache).expect("create the nails cache directory");
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = cache.join(format!(".tmp-nails-{}-{nanos}", std::process::id()));
    fs::create_dir_all(&tmp).expect("create a temporary nails directory");
    let output = Command::new(bins::javac())
        .arg("-nowarn")
        .args(["-encoding", "UTF-8", "-Xlint:none"])
        .arg("-cp")
        .arg(&jar)
        .arg("-d")
        .arg(&tmp)
        .args(&sources)
        .output()
        .expect("run javac");
    assert!(
        output.status.success(),
        "javac failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    if fs::rename(&tmp, &dir).is_err() {
        // Another process won the race; its classes are the same.
        let _ = fs::remove_dir_all(&tmp);
        assert!(
            dir.is_dir(),
            "could not move compiled nails to {}",
            dir.display()
        );
    }
    dir
}

fn java_sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).expect("list tests/java") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "java") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// 64-bit FNV-1a: stable across Rust versions, unlike `DefaultHasher`, so the cache key
/// only changes when the inputs do.
struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
