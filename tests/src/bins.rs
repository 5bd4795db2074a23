//! Locations of the binaries under test and of the reference peers.
//!
//! Our binaries are found the ripgrep way: an environment variable if set (`NG_BIN`,
//! `NGD_BIN`, `NGD_TESTBED_BIN`), else next to the test executable. Cargo puts integration
//! tests in `target/<profile>/deps/` and binaries in `target/<profile>/`, and
//! `CARGO_BIN_EXE_*` only exists for a package's own binaries, so `scripts/test` builds the
//! workspace's binaries before running the tests (`cargo test -p ng-tests` builds this
//! package's own `ngd-testbed`).
//!
//! The reference peers come from Debian's `nailgun` package (`scripts/install-peers`):
//! the C client `ng-nailgun` on `PATH` (override: `NG_C_CLIENT`), the server jar
//! (`NAILGUN_JAR`), JNA for its Unix sockets (`JNA_JAR`), and `java`/`javac` (`JAVA`,
//! `JAVAC`).
//!
//! A missing binary is a test failure with instructions, never a skip.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Our client, `ng`.
pub fn ng() -> PathBuf {
    our_binary("ng", "NG_BIN", "cargo build -p ng-client")
}

/// Our server, `ngd`.
pub fn ngd() -> PathBuf {
    our_binary("ngd", "NGD_BIN", "cargo build -p ngd")
}

/// The test-bed server, `ngd-testbed` (this package's binary: `ngd` with the test nails).
pub fn ngd_testbed() -> PathBuf {
    our_binary("ngd-testbed", "NGD_TESTBED_BIN", "cargo build -p ng-tests")
}

/// The reference C client (Debian renames it `ng-nailgun`).
pub fn c_client() -> PathBuf {
    if let Some(path) = env::var_os("NG_C_CLIENT") {
        return PathBuf::from(path);
    }
    find_on_path("ng-nailgun").unwrap_or_else(|| {
        panic!("the reference C client `ng-nailgun` is not on PATH: run scripts/install-peers")
    })
}

/// The reference Java server's jar (Nailgun 0.9.3).
pub fn nailgun_jar() -> PathBuf {
    existing_file("NAILGUN_JAR", "/usr/share/java/nailgun-server.jar")
}

/// JNA, which the Java server needs for Unix domain sockets.
pub fn jna_jar() -> PathBuf {
    existing_file("JNA_JAR", "/usr/share/java/jna.jar")
}

/// The `java` launcher.
pub fn java() -> PathBuf {
    tool("JAVA", "java")
}

/// The `javac` compiler.
pub fn javac() -> PathBuf {
    tool("JAVAC", "javac")
}

/// Cargo's profile directory (`target/debug`), derived from the running test executable.
///
/// Harness caches (the compiled Java nails) live under it, so `cargo clean` removes them.
pub fn profile_dir() -> PathBuf {
    let exe = env::current_exe().expect("the test executable's path");
    let dir = exe.parent().expect("the test executable's directory");
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir.parent().expect("the profile directory").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

fn our_binary(name: &str, var: &str, build: &str) -> PathBuf {
    if let Some(path) = env::var_os(var) {
        return PathBuf::from(path);
    }
    let path = profile_dir().join(name);
    assert!(
        path.is_file(),
        "{} not found: build it first (`{build}`, or `cargo build --workspace --bins` as \
         scripts/test does), or point {var} at it",
        path.display(),
    );
    path
}

fn existing_file(var: &str, default: &str) -> PathBuf {
    let path = env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        path.is_file(),
        "{} not found: run scripts/install-peers, or point {var} at it",
        path.display(),
    );
    path
}

fn tool(var: &str, name: &str) -> PathBuf {
    if let Some(path) = env::var_os(var) {
        return PathBuf::from(path);
    }
    find_on_path(name)
        .unwrap_or_else(|| panic!("`{name}` is not on PATH: run scripts/install-peers"))
}

/// The first executable file called `name` in the directories of `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}
