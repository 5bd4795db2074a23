//! ngd's own copy of the Python SDK (`sdk/python/src`: the `ngw` and `ngw_contrib`
//! packages, [`crate::carried_sdk::PYTHON`]), and how a worker finds it.
//!
//! A `[[plugin]]` table with `sdk = "python"` gets the SDK's directory first on its worker's
//! `PYTHONPATH` ([`python_path`]); the runner (`python3 -m ngw`) takes it off `sys.path`
//! before the program runs, and programs see the client's environment, so neither
//! `sys.path` nor `os.environ` shows it (docs/ngw.md, "The SDK ngd carries").

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};

use crate::carried_sdk::PYTHON;

/// The directory holding this ngd's SDK (the `PYTHONPATH` entry that makes `ngw`
/// importable), written out if it is not there yet.
pub fn dir() -> io::Result<PathBuf> {
    PYTHON.dir()
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
