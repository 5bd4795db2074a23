//! The client's own failures and the exit codes they map to.
//!
//! A command's exit code comes from the server's `X` chunk and passes through unchanged
//! (`code & 0xFF`). Everything that goes wrong on the client's side is one [`ClientError`],
//! and each variant maps to exactly one code. The codes are the reference C client's
//! 226–231 set (`NAILGUN_*` in `ng.c`); older copies of `ng.c` used 994–999, which the OS
//! truncates, so the set is pinned by tests here and in `tests/ng/exit_codes.rs`.
//!
//! Messages go to stderr as one line, in the reference client's words where scripts may
//! grep them: `connect: <strerror>`, `Unknown host: <host>`, `recv: <reason>`,
//! `Unexpected chunk type <n> ('<c>')`, `Socket path [<path>] too long (<n>)`.

use std::io::{self, Write as _};

/// Bad command line (missing option value, no command): usage on stderr.
pub const BAD_ARGUMENTS: u8 = 226;
/// The connection broke before `X`: the server closed or reset it, a send failed, reading
/// stdin or writing stdout/stderr failed, or a `--nailgun-filearg` file could not be read.
pub const CONNECTION_BROKEN: u8 = 227;
/// Reserved by the reference client (`NAILGUN_EXCEPTION_ON_SERVER`) and, as there, never used.
#[allow(dead_code)] // Kept so the whole set is written down and pinned by a test.
pub const EXCEPTION_ON_SERVER: u8 = 228;
/// The server sent a chunk type a client never receives.
pub const UNEXPECTED_CHUNK: u8 = 229;
/// No server could be reached: unknown host, connection refused, no socket file.
pub const CONNECT_FAILED: u8 = 230;
/// A socket could not be created, or a `local:` path does not fit in `sun_path`.
pub const SOCKET_FAILED: u8 = 231;
/// No server was running and auto-start could not start one (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: u8 = 69;
/// A shim could not run the program a shell would have run: the shell's status for a
/// program it found but cannot execute.
pub const CANNOT_EXEC: u8 = 126;
/// Our stdout (or stderr) was a pipe whose reader went away: the status a shell reports
/// for the C client, which SIGPIPE kills (128 + 13).
pub const BROKEN_PIPE: u8 = 141;

/// Something that ended the client before the command's exit code arrived.
#[derive(Debug)]
pub enum ClientError {
    /// The command line cannot be used; the reason is printed, then the usage text.
    BadArguments(String),
    /// The session broke before `X`; the message names the failing step (`recv: ...`).
    ConnectionBroken(String),
    /// The server sent this chunk type byte, which a client never accepts.
    UnexpectedChunk(u8),
    /// Connecting failed (`connect: ...` or `Unknown host: ...`).
    Connect(String),
    /// Creating or configuring the socket failed, or the socket path is too long.
    Socket(String),
    /// Our stdout or stderr pipe was closed by its reader. Ends quietly.
    BrokenPipe,
    /// Auto-start could not start a server; the message says why, with the log's end.
    Unavailable(String),
    /// A shim could not run the program it stands for ([`crate::shim::exec`]).
    Exec(String),
}

impl ClientError {
    /// The process exit status for this failure.
    pub fn code(&self) -> u8 {
        match self {
            ClientError::BadArguments(_) => BAD_ARGUMENTS,
            ClientError::ConnectionBroken(_) => CONNECTION_BROKEN,
            ClientError::UnexpectedChunk(_) => UNEXPECTED_CHUNK,
            ClientError::Connect(_) => CONNECT_FAILED,
            ClientError::Socket(_) => SOCKET_FAILED,
            ClientError::BrokenPipe => BROKEN_PIPE,
            ClientError::Unavailable(_) => UNAVAILABLE,
            ClientError::Exec(_) => CANNOT_EXEC,
        }
    }

    /// The one-line message for stderr, if this failure has one.
    pub fn message(&self) -> Option<String> {
        match self {
            ClientError::BadArguments(m)
            | ClientError::ConnectionBroken(m)
            | ClientError::Connect(m)
            | ClientError::Socket(m)
            | ClientError::Unavailable(m)
            | ClientError::Exec(m) => Some(m.clone()),
            ClientError::UnexpectedChunk(ty) => Some(format!(
                "Unexpected chunk type {ty} ('{}')",
                std::ascii::escape_default(*ty)
            )),
            ClientError::BrokenPipe => None,
        }
    }

    /// Prints the message (and for bad arguments the usage) to stderr and returns the
    /// exit status.
    pub fn report(&self) -> u8 {
        let mut err = io::stderr().lock();
        if let Some(message) = self.message() {
            // Nothing useful can be done if stderr itself is gone.
            let _ = writeln!(err, "{message}");
        }
        if let ClientError::BadArguments(_) = self {
            let _ = err.write_all(crate::usage::USAGE.as_bytes());
        }
        self.code()
    }

    /// A [`ClientError::ConnectionBroken`] for a failed step, `"<step>: <strerror>"`.
    pub fn broken(step: &str, err: &io::Error) -> Self {
        ClientError::ConnectionBroken(format!("{step}: {}", strerror(err)))
    }
}

/// The C library's text for an I/O error, without Rust's `(os error N)` suffix, so
/// messages read exactly like the reference client's `perror` output.
pub fn strerror(err: &io::Error) -> String {
    let Some(code) = err.raw_os_error() else {
        return err.to_string();
    };
    ng_sys::strerror(code).unwrap_or_else(|| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_set_is_the_reference_clients() {
        assert_eq!(BAD_ARGUMENTS, 226);
        assert_eq!(CONNECTION_BROKEN, 227);
        assert_eq!(EXCEPTION_ON_SERVER, 228);
        assert_eq!(UNEXPECTED_CHUNK, 229);
        assert_eq!(CONNECT_FAILED, 230);
        assert_eq!(SOCKET_FAILED, 231);
        assert_eq!(BROKEN_PIPE, 141);
    }

    #[test]
    fn every_error_maps_to_its_code() {
        let cases = [
            (ClientError::BadArguments("x".into()), 226),
            (ClientError::ConnectionBroken("x".into()), 227),
            (ClientError::UnexpectedChunk(b'Z'), 229),
            (ClientError::Connect("x".into()), 230),
            (ClientError::Socket("x".into()), 231),
            (ClientError::BrokenPipe, 141),
            (ClientError::Unavailable("x".into()), 69),
        ];
        for (err, code) in cases {
            assert_eq!(err.code(), code, "{err:?}");
        }
    }

    #[test]
    fn unexpected_chunk_message_matches_the_reference() {
        let msg = ClientError::UnexpectedChunk(b'Z').message().unwrap();
        assert_eq!(msg, "Unexpected chunk type 90 ('Z')");
        let msg = ClientError::UnexpectedChunk(0).message().unwrap();
        assert_eq!(msg, "Unexpected chunk type 0 ('\\x00')");
    }

    #[test]
    fn broken_pipe_is_quiet() {
        assert_eq!(ClientError::BrokenPipe.message(), None);
    }

    #[test]
    fn strerror_has_no_rust_suffix() {
        let err = io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(strerror(&err), "Connection refused");
        assert_eq!(
            ClientError::broken("recv", &io::Error::from_raw_os_error(libc::ECONNRESET))
                .message()
                .unwrap(),
            "recv: Connection reset by peer"
        );
    }
}
