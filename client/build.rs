//! Links the GCC unwinder statically into `ng` on Linux with glibc.
//!
//! The standard library needs an unwinder (`_Unwind_*`), and on `*-linux-gnu` it takes it
//! from the shared `libgcc_s.so.1`. Loading that one extra library is about 0.1 ms per run
//! on the development machine: as much as everything else `ng` does before connecting, and
//! the whole of the difference to the reference C client's start-up. Naming the static
//! `libgcc_eh.a` (what `gcc -static-libgcc` uses) before the standard library resolves
//! those symbols first, and the linker's `--as-needed` then drops `libgcc_s`. Panics still
//! unwind as usual.
//!
//! Anywhere else, or if the C compiler cannot say where `libgcc_eh.a` is, nothing changes.

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let linux_gnu = env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    if !linux_gnu {
        return;
    }
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let Ok(out) = Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
    else {
        return;
    };
    let printed = String::from_utf8_lossy(&out.stdout);
    let archive = Path::new(printed.trim());
    // Without a full path, the compiler did not find it (it echoes the bare name back).
    if !out.status.success() || !archive.is_absolute() || !archive.exists() {
        return;
    }
    if let Some(dir) = archive.parent() {
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-lib=static=gcc_eh");
    }
}
