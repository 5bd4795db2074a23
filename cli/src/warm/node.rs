//! Node programs for `ngd warm`: a script whose `#!` line runs `node` (`#!/usr/bin/env
//! node`, `#!/usr/bin/node`, `#!/usr/bin/env -S node --OPTION...`), such as an npm bin link
//! (`node_modules/.bin/eslint` → `../eslint/bin/eslint.js`), served by the Node worker ngd
//! carries (`sdk = "node"`, docs/ngw-node.md).
//!
//! The table names the script by the path the shell found (the link), which is what a
//! shim sends; the worker resolves it and runs each session with the node its `#!` line
//! names (the session's `PATH` for `env`), so the table's `node` only runs the worker.
//! Another project's copy is served by a pool derived from the table
//! (`ng_server::plugin::derive::recognise_node`). Nothing is written into the project.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// `node` and Debian's old name for it.
pub fn is_node(name: &str) -> bool {
    matches!(name, "node" | "nodejs")
}

/// Why a Node script cannot be served (`warm::kind` says so as its `Refusal`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unserved {
    /// Its `#!` line gives node an option the worker cannot share (the first such).
    Options(String),
    /// The node it names is not found.
    NoNode(String),
    /// This ngd has no native piece for the worker.
    NoNative,
}

/// Options on a `#!` line that make `node` something other than `node SCRIPT ARGS` (the
/// worker refuses them too).
const FOREIGN_OPTIONS: &[&str] = &[
    "--eval",
    "--print",
    "--check",
    "--interactive",
    "--test",
    "--watch",
    "--watch-path",
    "--input-type",
    "--inspect-brk",
    "--require",
    "--import",
    "--loader",
    "--experimental-loader",
];

/// The node that runs the worker for a script whose `#!` line is `words` (split on white
/// space), if they run `node`; `None` when they name another interpreter. `which` finds
/// `node` for `env`; `native` finds the worker's native piece.
pub fn recognise(
    words: &[String],
    which: impl Fn(&OsStr) -> Option<PathBuf>,
    native: impl Fn() -> Option<PathBuf>,
) -> Option<Result<PathBuf, Unserved>> {
    let (via_env, rest) = match words.first() {
        Some(first) if first.rsplit('/').next() == Some("env") => (true, &words[1..]),
        _ => (false, words),
    };
    // Without `env -S` (`split`), more words are one argument: env looks for a program
    // named so.
    let (split, rest) = match rest.first() {
        Some(s) if via_env && s == "-S" => (true, &rest[1..]),
        _ => (false, rest),
    };
    let interp = rest.first()?;
    if !is_node(interp.rsplit('/').next().unwrap_or(interp)) {
        return None;
    }
    let foreign = rest[1..].iter().find(|o| {
        let shared = split
            && o.starts_with("--")
            && !FOREIGN_OPTIONS
                .iter()
                .any(|f| o.as_str() == *f || o.starts_with(&format!("{f}=")));
        !shared
    });
    if let Some(option) = foreign {
        return Some(Err(Unserved::Options(option.clone())));
    }
    let node = if interp.contains('/') {
        Some(PathBuf::from(interp)).filter(|p| p.is_file())
    } else {
        which(OsStr::new(interp))
    };
    let Some(node) = node else {
        return Some(Err(Unserved::NoNode(interp.clone())));
    };
    if native().is_none() {
        return Some(Err(Unserved::NoNative));
    }
    Some(Ok(node))
}

/// The native piece of the ngd running now ([`ng_server::carried_sdk::node_native`]).
pub fn native_beside_ngd() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|exe| ng_server::carried_sdk::node_native(&exe))
}

/// The `[[plugin]]` table's body for a Node program served as `name`.
pub fn table(name: &str, script: &Path, node: &Path, q: impl Fn(&str) -> String) -> String {
    format!(
        "command = [{}, {}]\nsdk = \"node\"\ncommands = [{}]\n",
        q(&node.to_string_lossy()),
        q(&format!("{name}={}", script.to_string_lossy())),
        q(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    fn which(name: &OsStr) -> Option<PathBuf> {
        (name == "node").then(|| PathBuf::from("/opt/node/bin/node"))
    }

    fn rec(line: &str) -> Option<Result<PathBuf, Unserved>> {
        recognise(&words(line), which, || Some(PathBuf::from("/n.so")))
    }

    fn node(at: &str) -> Option<Result<PathBuf, Unserved>> {
        Some(Ok(PathBuf::from(at)))
    }

    #[test]
    fn node_scripts_by_their_shebang() {
        assert_eq!(rec("/usr/bin/env node"), node("/opt/node/bin/node"));
        assert_eq!(rec("/usr/bin/env -S node"), node("/opt/node/bin/node"));
        assert_eq!(
            rec("/usr/bin/env -S node --no-warnings"),
            node("/opt/node/bin/node")
        );
        // A node named by its path must exist.
        let dir = tempfile::tempdir().unwrap();
        let named = dir.path().join("node");
        std::fs::write(&named, "").unwrap();
        assert_eq!(rec(named.to_str().unwrap()), node(&named.to_string_lossy()));
        assert_eq!(
            rec("/nonexistent/node"),
            Some(Err(Unserved::NoNode("/nonexistent/node".into())))
        );
        assert_eq!(rec("/usr/bin/env python3"), None);
        assert_eq!(rec("/bin/sh"), None);
    }

    #[test]
    fn options_the_worker_cannot_share_are_refused() {
        for (line, option) in [
            ("/usr/bin/env node --no-warnings", "--no-warnings"),
            ("/usr/bin/env -S node -e 1", "-e"),
            ("/usr/bin/env -S node --eval=1", "--eval=1"),
            ("/usr/bin/env -S node --require x", "--require"),
        ] {
            assert_eq!(
                rec(line),
                Some(Err(Unserved::Options(option.into()))),
                "{line}"
            );
        }
    }

    #[test]
    fn without_the_native_piece_nothing_is_served() {
        let got = recognise(&words("/usr/bin/env node"), which, || None);
        assert_eq!(got, Some(Err(Unserved::NoNative)));
    }
}
