//! Where `ngd` listens by default, shared by the server and the client.
//!
//! The default Unix socket lives in a private runtime directory: `$XDG_RUNTIME_DIR/ngd/`
//! when `XDG_RUNTIME_DIR` is set to an absolute path, else `/tmp/ngd-<uid>/`. The server
//! creates that directory with mode 0700 and refuses to use one it does not own. This is a
//! pure function of its inputs, so both sides compute the same path without any I/O here.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The socket file's name inside the runtime directory.
pub const SOCKET_NAME: &str = "ngd.sock";

/// The loopback TCP address `ngd` listens on by default, where stock clients look.
pub const DEFAULT_TCP_ADDR: &str = "127.0.0.1:2113";

/// The private runtime directory for user `uid`.
pub fn runtime_dir(xdg_runtime_dir: Option<&OsStr>, uid: u32) -> PathBuf {
    match xdg_runtime_dir.map(Path::new) {
        Some(dir) if dir.is_absolute() => dir.join("ngd"),
        _ => PathBuf::from(format!("/tmp/ngd-{uid}")),
    }
}

/// The default Unix socket path for user `uid`.
pub fn default_socket_path(xdg_runtime_dir: Option<&OsStr>, uid: u32) -> PathBuf {
    runtime_dir(xdg_runtime_dir, uid).join(SOCKET_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdg_runtime_dir_is_used_when_absolute() {
        let p = default_socket_path(Some(OsStr::new("/run/user/1000")), 1000);
        assert_eq!(p, PathBuf::from("/run/user/1000/ngd/ngd.sock"));
    }

    #[test]
    fn tmp_fallback_names_the_uid() {
        assert_eq!(
            default_socket_path(None, 42),
            PathBuf::from("/tmp/ngd-42/ngd.sock")
        );
        assert_eq!(
            default_socket_path(Some(OsStr::new("relative")), 42),
            PathBuf::from("/tmp/ngd-42/ngd.sock")
        );
    }
}
