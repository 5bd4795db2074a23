//! The wheel's build script, two jobs:
//!
//! * **`ng` linked as the client's own build links it** (`client/build.rs`: a static PIE
//!   for optimised builds), so the `ng` a wheel installs starts as fast as one built by
//!   `cargo install`.
//! * **The JVM worker's jars in the wheel's data directory** (`dist/wheel-data`,
//!   `[tool.maturin] data` in the root `pyproject.toml`), so that one `pip install` gives the
//!   JVM worker too. The launcher is in git as `wheel-data/scripts/ngw-java` (a link to
//!   `sdk/java/bin/ngw-java`) and is installed next to `ng` and `ngd`, where `ngd warm` looks
//!   for it first; this script builds the jars with `sdk/java/build` (the JDK's own tools)
//!   into `wheel-data/data/share/ngd/java/`, which installs under the environment's prefix
//!   (`bin/../share/ngd/java`), where the launcher looks for them. Without a JDK or JNA,
//!   or with `NGD_WHEEL_NO_JAVA` set, the wheel is built without the jars and a warning says
//!   so; the launcher then tells its user that `ngw-java.jar` is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs, io};

#[path = "../client/build.rs"]
mod ng_link;

fn main() {
    println!("cargo:rerun-if-changed=../client/build.rs");
    ng_link::main();

    let dist = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let java = dist.join("../sdk/java");
    for watched in ["src", "build", "build.manifest"] {
        println!("cargo:rerun-if-changed={}", java.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=JAVA_HOME");
    println!("cargo:rerun-if-env-changed=NGW_JNA_JAR");
    println!("cargo:rerun-if-env-changed=NGD_WHEEL_NO_JAVA");

    let jars = dist.join("wheel-data/data/share/ngd/java");
    if let Err(e) = fill(&java, &jars) {
        // No stale jars in the wheel, and a word to the builder.
        let _ = fs::remove_dir_all(dist.join("wheel-data/data"));
        println!("cargo:warning=the wheel is built without the JVM worker's jars: {e}");
    }
}

/// Builds the jars and copies them into `jars`, replacing what was there.
fn fill(java: &Path, jars: &Path) -> Result<(), String> {
    if env::var_os("NGD_WHEEL_NO_JAVA").is_some() {
        return Err("NGD_WHEEL_NO_JAVA is set".into());
    }
    let built = Command::new(java.join("build"))
        .output()
        .map_err(|e| format!("cannot run sdk/java/build: {e}"))?;
    if !built.status.success() {
        return Err(String::from_utf8_lossy(&built.stderr).trim().to_string());
    }
    let target = PathBuf::from(String::from_utf8_lossy(&built.stdout).trim());
    let copy = || -> io::Result<()> {
        fs::create_dir_all(jars)?;
        for jar in ["ngw-java.jar", "ngw-boot.jar"] {
            fs::copy(target.join(jar), jars.join(jar))?;
        }
        Ok(())
    };
    copy().map_err(|e| format!("cannot copy the jars into {}: {e}", jars.display()))
}
