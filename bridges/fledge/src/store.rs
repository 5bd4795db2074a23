//! Plugin storage: `<plugin dir>/state.json`, the same file fledge 1.8.0 uses, under the
//! same `state.json.lock` (an exclusive `flock` to write, a shared one to read), written to
//! `state.json.tmp` and renamed over, so both hosts see each other's values and a reader
//! never sees half a file. fledge's limits apply. Values are kept exactly (JSON strings).

use crate::sys::{self, LockMode};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::path::Path;

/// The longest key, in bytes.
pub const MAX_KEY: usize = 256;
/// The longest value, in bytes.
pub const MAX_VALUE: usize = 64 * 1024;
/// The largest `state.json`, in bytes.
pub const MAX_TOTAL: usize = 1024 * 1024;
/// The most keys.
pub const MAX_KEYS: usize = 256;

/// Why a store was refused (the texts are fledge's, where fledge has one).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Empty key.
    #[error("store key must not be empty")]
    EmptyKey,
    /// Key too long.
    #[error("store key exceeds maximum size of {MAX_KEY} bytes")]
    KeyTooLong,
    /// Control characters.
    #[error("store key contains control characters")]
    ControlKey,
    /// Value too long.
    #[error("store value exceeds maximum size of {MAX_VALUE} bytes")]
    ValueTooLong,
    /// Too many keys.
    #[error("plugin state exceeds maximum of {MAX_KEYS} keys")]
    TooManyKeys,
    /// File too large.
    #[error("plugin state exceeds maximum total size of {MAX_TOTAL} bytes")]
    TooLarge,
    /// The existing file is not an object of strings; it is left as it is.
    #[error("state.json is not a JSON object of strings; left unchanged")]
    Corrupt,
    /// I/O.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

struct Lock(File);

impl Lock {
    fn take(dir: &Path, exclusive: bool) -> std::io::Result<Self> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("state.json.lock"))?;
        let mode = if exclusive {
            LockMode::Exclusive
        } else {
            LockMode::Shared
        };
        sys::lock_file(&f, mode)?;
        Ok(Self(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = sys::unlock_file(&self.0);
    }
}

fn read(dir: &Path) -> Result<Option<BTreeMap<String, String>>, StoreError> {
    match fs::read(dir.join("state.json")) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|_| StoreError::Corrupt),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Keeps `key = value`.
pub fn store(dir: &Path, key: &str, value: &str) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    if key.len() > MAX_KEY {
        return Err(StoreError::KeyTooLong);
    }
    if key.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(StoreError::ControlKey);
    }
    if value.len() > MAX_VALUE {
        return Err(StoreError::ValueTooLong);
    }
    fs::create_dir_all(dir)?;
    let _lock = Lock::take(dir, true)?;
    let mut state = read(dir)?.unwrap_or_default();
    if !state.contains_key(key) && state.len() >= MAX_KEYS {
        return Err(StoreError::TooManyKeys);
    }
    state.insert(key.to_owned(), value.to_owned());
    let json = serde_json::to_string_pretty(&state).map_err(std::io::Error::other)?;
    if json.len() > MAX_TOTAL {
        return Err(StoreError::TooLarge);
    }
    let tmp = dir.join("state.json.tmp");
    fs::write(&tmp, &json)?;
    fs::rename(&tmp, dir.join("state.json"))?;
    Ok(())
}

/// Reads `key` back (`None` when absent or when there is no readable state).
pub fn load(dir: &Path, key: &str) -> Result<Option<String>, StoreError> {
    if !dir.join("state.json").exists() {
        return Ok(None);
    }
    let _lock = Lock::take(dir, false)?;
    Ok(read(dir)?.and_then(|mut s| s.remove(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_exactly_and_limits_hold() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        assert_eq!(load(d, "k").unwrap(), None);
        let odd = "line1\nline2\t\"quoted\" ünïcødé \u{0}";
        store(d, "k", odd).unwrap();
        store(d, "j", "").unwrap();
        assert_eq!(load(d, "k").unwrap().as_deref(), Some(odd));
        assert_eq!(load(d, "j").unwrap().as_deref(), Some(""));
        let file: BTreeMap<String, String> =
            serde_json::from_slice(&fs::read(d.join("state.json")).unwrap()).unwrap();
        assert_eq!(file.len(), 2);
        assert!(matches!(store(d, "", "v"), Err(StoreError::EmptyKey)));
        assert!(matches!(store(d, "a\nb", "v"), Err(StoreError::ControlKey)));
        assert!(matches!(
            store(d, "k", &"x".repeat(MAX_VALUE + 1)),
            Err(StoreError::ValueTooLong)
        ));
        fs::write(d.join("state.json"), "[1,2]").unwrap();
        assert!(matches!(store(d, "k", "v"), Err(StoreError::Corrupt)));
        assert_eq!(fs::read_to_string(d.join("state.json")).unwrap(), "[1,2]");
    }
}
