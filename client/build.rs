//! Links `ng` so that starting it costs as little as possible, on Linux with glibc.
//!
//! * **The GCC unwinder, statically.** The standard library needs an unwinder (`_Unwind_*`),
//!   and on `*-linux-gnu` it takes it from the shared `libgcc_s.so.1`. Loading that one
//!   extra library is about 0.1 ms per run on the development machine. Naming the static
//!   `libgcc_eh.a` (what `gcc -static-libgcc` uses) before the standard library resolves
//!   those symbols first, and the linker's `--as-needed` then drops `libgcc_s`. Panics
//!   still unwind as usual.
//! * **The C library, statically: a static PIE.** Loading `libc.so.6` (the dynamic
//!   loader mapping and relocating it, and the page faults that follow) is most of what
//!   an exec costs; without it `ng ng-true` takes about as long as a dynamically linked
//!   `/bin/true` (docs/benchmarks.md, "Client start-up"). `main.rs` names the static
//!   `libc.a` (cfg `ng_static_libc`; the `ng` binary and its unit tests) and the
//!   binary is linked with `-static-pie`; undefined weak symbols stay out of the dynamic
//!   symbol table (`-z nodynamic-undefined-weak`), as in any static link, so nothing is left
//!   for a dynamic loader to resolve. The one part of glibc that still loads shared
//!   objects at run time is NSS, for host names that `/etc/hosts` and DNS (built into
//!   `libc.a`) do not answer, through other `hosts:` sources in `/etc/nsswitch.conf`: those
//!   need the glibc `ng` was built with, as any program built on the machine has. IP
//!   addresses and Unix sockets never use NSS. Only optimised builds are linked so (an
//!   unoptimised one needs the dynamic loader for `__tls_get_addr`); set
//!   `NG_LINK_DYNAMIC=1` when building to link the C library dynamically anyway.
//!
//! Anywhere else, or if the C compiler cannot say where an archive is, that step is left
//! out.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-env-changed=NG_LINK_DYNAMIC");
    println!("cargo::rustc-check-cfg=cfg(ng_static_libc)");
    let linux_gnu = env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    if !linux_gnu {
        return;
    }
    if let Some(dir) = archive_dir("libgcc_eh.a") {
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-lib=static=gcc_eh");
    }
    let dynamic = env::var_os("NG_LINK_DYNAMIC").is_some_and(|v| !v.is_empty() && v != "0");
    // Already static with `-C target-feature=+crt-static`; nothing to add then.
    let crt_static =
        env::var("CARGO_CFG_TARGET_FEATURE").is_ok_and(|f| f.split(',').any(|f| f == "crt-static"));
    // An unoptimised build calls `__tls_get_addr`, which only the dynamic loader defines,
    // so debug builds stay dynamic; `cargo test --release` tests the static binary.
    let optimised = env::var("OPT_LEVEL").is_ok_and(|l| l != "0");
    if dynamic || crt_static || !optimised {
        return;
    }
    if let Some(dir) = archive_dir("libc.a") {
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-cfg=ng_static_libc");
        println!("cargo:rustc-link-arg-bin=ng=-static-pie");
        println!("cargo:rustc-link-arg-bin=ng=-Wl,-z,nodynamic-undefined-weak");
    }
}

/// The directory of the C compiler's `name` (a static archive), if it has one.
fn archive_dir(name: &str) -> Option<PathBuf> {
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(cc)
        .arg(format!("-print-file-name={name}"))
        .output()
        .ok()?;
    let printed = String::from_utf8_lossy(&out.stdout);
    let archive = Path::new(printed.trim());
    // Without a full path, the compiler did not find it (it echoes the bare name back).
    if !out.status.success() || !archive.is_absolute() || !archive.exists() {
        return None;
    }
    archive.parent().map(Path::to_path_buf)
}
