//! Embeds ngd's own copy of the Python SDK (`sdk/python/src`: the `ngw` and `ngw_contrib`
//! packages) into the binary, so that ngd can make it importable to the Python workers it
//! starts wherever ngd was installed from (`src/python_sdk.rs` writes it out).
//!
//! Generates `$OUT_DIR/python_sdk.rs`: `FILES`, each file's path relative to the source
//! directory and its bytes (`include_bytes!`), and `DIGEST`, a hash of them all that names
//! the directory they are written to.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let src = manifest.join("../sdk/python/src");
    println!("cargo:rerun-if-changed={}", src.display());
    let mut files = Vec::new();
    if src.is_dir() {
        collect(&src, &src, &mut files);
    }
    files.sort();
    // FNV-1a, 64 bits: a name for this set of files, not a security measure.
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            digest ^= u64::from(b);
            digest = digest.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    let mut out = String::from("/// The SDK's files: path under the source directory, bytes.\n");
    out.push_str("pub const FILES: &[(&str, &[u8])] = &[\n");
    for rel in &files {
        let path = src.join(rel);
        let bytes = std::fs::read(&path).expect("read an SDK file");
        eat(rel.as_bytes());
        eat(&[0]);
        eat(&bytes);
        eat(&[0]);
        println!("cargo:rerun-if-changed={}", path.display());
        let _ = writeln!(
            out,
            "    ({rel:?}, include_bytes!({:?})),",
            path.canonicalize().unwrap_or(path.clone())
        );
    }
    out.push_str("];\n");
    let _ = writeln!(
        out,
        "/// A hash of [`FILES`].\npub const DIGEST: &str = \"{digest:016x}\";"
    );
    let dest = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    std::fs::write(dest.join("python_sdk.rs"), out).expect("write python_sdk.rs");
}

/// The `.py` files under `dir`, as paths relative to `root` with `/` separators.
fn collect(root: &Path, dir: &Path, files: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if name != "__pycache__" && !name.starts_with('.') && !name.ends_with(".egg-info") {
                println!("cargo:rerun-if-changed={}", path.display());
                collect(root, &path, files);
            }
        } else if name.ends_with(".py") {
            if let Ok(rel) = path.strip_prefix(root) {
                files.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
}
