//! Where `ngd serve`'s log goes and what it looks like: the one `tracing` subscriber of the
//! `ngd` binary (the library installs none).
//!
//! * **Destination**: stderr, or a file (`ngd serve --log-file PATH`, `log_file` in the
//!   configuration), opened for appending and created with mode 0600.
//! * **Colour**: ANSI escapes only when the destination is a terminal; a file or a pipe
//!   gets plain text.
//! * **Format**: human-readable lines (`text`, the default) or one JSON object per line
//!   (`json`: `timestamp`, `level`, `fields.message` and the event's other fields), for log
//!   collectors.
//! * **Level**: a level or a `tracing` filter; unset, `RUST_LOG`, else `info`.

use std::fs::OpenOptions;
use std::io::IsTerminal as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ng_server::config::LogFormat;

/// How to log.
#[derive(Clone, Debug, Default)]
pub struct LogOptions {
    /// A level or `tracing` filter; `None`: `RUST_LOG`, else `info`.
    pub level: Option<String>,
    /// The line format.
    pub format: LogFormat,
    /// A file to append to instead of stderr.
    pub file: Option<PathBuf>,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The log file cannot be opened.
    #[error("cannot open the log file {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Opens `path` for appending (mode 0600 when created).
pub fn open_log_file(path: &Path) -> Result<std::fs::File, LogError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| LogError::Open {
            path: path.to_path_buf(),
            source,
        })
}

/// Installs the global subscriber. A second call (an embedder set up its own) does nothing.
pub fn init(options: &LogOptions) -> Result<(), LogError> {
    use tracing_subscriber::EnvFilter;
    let filter = match options.level.as_deref() {
        Some(l) => EnvFilter::new(l),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let result = match &options.file {
        Some(path) => {
            let file = open_log_file(path)?;
            let ansi = file.is_terminal();
            let writer = Mutex::new(file);
            match options.format {
                LogFormat::Text => builder.with_ansi(ansi).with_writer(writer).try_init(),
                LogFormat::Json => builder.json().with_writer(writer).try_init(),
            }
        }
        None => {
            let ansi = std::io::stderr().is_terminal();
            match options.format {
                LogFormat::Text => builder
                    .with_ansi(ansi)
                    .with_writer(std::io::stderr)
                    .try_init(),
                LogFormat::Json => builder.json().with_writer(std::io::stderr).try_init(),
            }
        }
    };
    // An error here only means a subscriber is already installed.
    let _ = result;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_file_is_private_and_appended() {
        use std::io::Write as _;
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ngd.log");
        open_log_file(&path).unwrap().write_all(b"a\n").unwrap();
        open_log_file(&path).unwrap().write_all(b"b\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"a\nb\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let err = open_log_file(&dir.path().join("missing/ngd.log")).unwrap_err();
        assert!(err.to_string().contains("missing/ngd.log"), "{err}");
    }
}
