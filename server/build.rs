//! Embeds ngd's own copies of the worker SDKs it carries into the binary, so that ngd can
//! start their workers wherever ngd was installed from (`src/carried_sdk.rs` writes them
//! out): the Python SDK (`sdk/python/src`: the `ngw` and `ngw_contrib` packages, `.py`
//! files), the Ruby worker (`sdk/ruby`: `bin/ngw-ruby` and the `.rb` files of `lib/`) and
//! the Node worker's JavaScript (`sdk/node`: `bin/ngw-node` and the `.js` files of `lib/`;
//! its native piece is a shared library of its own, found beside ngd).
//!
//! Generates `$OUT_DIR/python_sdk.rs`, `ruby_sdk.rs` and `node_sdk.rs`: `FILES`, each file's path
//! relative to the SDK's directory and its bytes (`include_bytes!`), and `DIGEST`, a hash
//! of them all that names the directory they are written to.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let python = manifest.join("../sdk/python/src");
    let mut files = Vec::new();
    watch(&python);
    if python.is_dir() {
        collect(&python, &python, ".py", &mut files);
    }
    generate(&python, files, "python_sdk.rs");

    let ruby = manifest.join("../sdk/ruby");
    let mut files = Vec::new();
    watch(&ruby.join("bin"));
    watch(&ruby.join("lib"));
    if ruby.join("bin/ngw-ruby").is_file() {
        files.push("bin/ngw-ruby".to_owned());
    }
    let lib = ruby.join("lib");
    if lib.is_dir() {
        collect(&ruby, &lib, ".rb", &mut files);
    }
    generate(&ruby, files, "ruby_sdk.rs");

    let node = manifest.join("../sdk/node");
    let mut files = Vec::new();
    watch(&node.join("bin"));
    watch(&node.join("lib"));
    if node.join("bin/ngw-node").is_file() {
        files.push("bin/ngw-node".to_owned());
    }
    let lib = node.join("lib");
    if lib.is_dir() {
        collect(&node, &lib, ".js", &mut files);
    }
    generate(&node, files, "node_sdk.rs");
}

fn watch(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

/// Writes `$OUT_DIR/<name>`: `FILES` (the `files` under `src`) and their `DIGEST`.
fn generate(src: &Path, mut files: Vec<String>, name: &str) {
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
        watch(&path);
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
    std::fs::write(dest.join(name), out).expect("write the SDK's file list");
}

/// The files ending in `ext` under `dir`, as paths relative to `root` with `/` separators.
fn collect(root: &Path, dir: &Path, ext: &str, files: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if name != "__pycache__" && !name.starts_with('.') && !name.ends_with(".egg-info") {
                watch(&path);
                collect(root, &path, ext, files);
            }
        } else if name.ends_with(ext) {
            if let Ok(rel) = path.strip_prefix(root) {
                files.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
}
