//! The embeddable command API: the [`Nail`] trait and the [`Context`] a command runs with.
//!
//! A nail is warm Rust code that `ngd` runs for a client. It gets the client's arguments,
//! environment and working directory, blocking [`Read`]/[`Write`] handles for stdin, stdout
//! and stderr (reading stdin asks the client for input with `S`; writing blocks while the
//! client is slower than the command), and a cancellation signal that fires when the client
//! disconnects or stops heartbeating, or the server stops. Its return value is the exit code.
//!
//! ```no_run
//! use ng_server::{Context, Server};
//! use std::io::Write;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let mut server = Server::builder();
//!     server.nail("hello", "Greets its arguments", |ctx: &mut Context| {
//!         let names: Vec<String> = ctx.args_lossy();
//!         let _ = writeln!(ctx.stdout(), "hello, {}", names.join(" "));
//!         0
//!     });
//!     server.build()?.run()?;
//!     Ok(())
//! }
//! ```
//!
//! Nails run on a pool of threads, never on the event loop, so a nail may block.

use crate::session_io::{CancelReason, SessionIo};
use crate::ServerHandle;
use bytes::Bytes;
use ng_proto::{ChunkType, Request};
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A command `ngd` can run. Implemented for closures `Fn(&mut Context) -> i32`.
pub trait Nail: Send + Sync + 'static {
    /// Runs the command and returns its exit code.
    fn run(&self, ctx: &mut Context) -> i32;
}

impl<F> Nail for F
where
    F: Fn(&mut Context) -> i32 + Send + Sync + 'static,
{
    fn run(&self, ctx: &mut Context) -> i32 {
        self(ctx)
    }
}

/// Everything one invocation of a nail sees. See the module docs.
#[derive(Debug)]
pub struct Context {
    request: Request,
    stdin: Stdin,
    stdout: Output,
    stderr: Output,
    io: Arc<SessionIo>,
    server: ServerHandle,
    client_fds: Option<ClientFds>,
}

/// The client's own descriptors 0, 1, 2 as the command's (`None`: closed for it, as the
/// client's was).
pub type ClientFds = [Option<std::os::fd::OwnedFd>; 3];

impl Context {
    pub(crate) fn new(request: Request, io: Arc<SessionIo>, server: ServerHandle) -> Self {
        Self {
            request,
            stdin: Stdin { io: io.clone() },
            stdout: Output {
                io: io.clone(),
                ty: ChunkType::STDOUT,
            },
            stderr: Output {
                io: io.clone(),
                ty: ChunkType::STDERR,
            },
            io,
            server,
            client_fds: None,
        }
    }

    /// Gives the command the client's descriptors (when it may take them and they came).
    pub(crate) fn with_client_fds(mut self, fds: Option<ClientFds>) -> Self {
        self.client_fds = fds;
        self
    }

    /// The client's own stdin, stdout and stderr, for a command registered to take them
    /// ([`crate::ServerBuilder::nail_with_client_fds`]) when our `ng` passed them over the
    /// Unix socket. Taken at most once. The command then reads and writes them directly
    /// (a terminal is the user's real terminal; a write to a closed pipe fails with
    /// `EPIPE`), and nothing is relayed for it: `stdin()` sees end of file and what it
    /// writes to `stdout()`/`stderr()` still reaches the client through ngd. `None` for a
    /// stock client, TCP, or a second call.
    pub fn take_client_fds(&mut self) -> Option<ClientFds> {
        self.client_fds.take()
    }

    /// True while the command has the client's descriptors to take.
    pub fn has_client_fds(&self) -> bool {
        self.client_fds.is_some()
    }

    /// The command name the client asked for (before alias resolution).
    pub fn command(&self) -> &[u8] {
        &self.request.command
    }

    /// The arguments as raw bytes.
    pub fn args(&self) -> &[Bytes] {
        &self.request.args
    }

    /// The arguments as OS strings.
    pub fn args_os(&self) -> impl Iterator<Item = &OsStr> {
        self.request.args.iter().map(|a| OsStr::from_bytes(a))
    }

    /// The arguments as strings, with invalid UTF-8 replaced.
    pub fn args_lossy(&self) -> Vec<String> {
        self.request
            .args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    /// The client's environment, in the order sent (later duplicates win).
    pub fn env(&self) -> &[(Bytes, Bytes)] {
        &self.request.env
    }

    /// One environment variable of the client's.
    pub fn env_var(&self, name: &str) -> Option<&OsStr> {
        self.request
            .env_var(name.as_bytes())
            .map(|v| OsStr::from_bytes(v))
    }

    /// The client's working directory, if it sent one.
    pub fn cwd(&self) -> Option<&Path> {
        self.request
            .cwd
            .as_ref()
            .map(|c| Path::new(OsStr::from_bytes(c)))
    }

    /// The whole request as received.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The client's stdin. The first read asks the client for input.
    pub fn stdin(&mut self) -> &mut Stdin {
        &mut self.stdin
    }

    /// The client's stdout.
    pub fn stdout(&mut self) -> &mut Output {
        &mut self.stdout
    }

    /// The client's stderr.
    pub fn stderr(&mut self) -> &mut Output {
        &mut self.stderr
    }

    /// Why the command should stop, if it should.
    pub fn cancelled(&self) -> Option<CancelReason> {
        self.io.cancelled()
    }

    /// Sleeps up to `timeout`, waking early on cancellation; true if cancelled.
    pub fn wait_cancelled(&self, timeout: Duration) -> bool {
        self.io.wait_cancelled(timeout)
    }

    /// The server this command runs in (statistics, aliases, stop).
    pub fn server(&self) -> &ServerHandle {
        &self.server
    }
}

/// A command's stdin: blocking reads, end of file when the client's stdin ends or the
/// command is cancelled.
#[derive(Debug)]
pub struct Stdin {
    io: Arc<SessionIo>,
}

impl Read for Stdin {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(self.io.read(buf))
    }
}

/// A command's stdout or stderr. Each `write` becomes chunks on the wire; writes block while
/// the client lags far behind, and fail with `BrokenPipe` once the command is cancelled.
#[derive(Debug)]
pub struct Output {
    io: Arc<SessionIo>,
    ty: ChunkType,
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.io.write(self.ty, buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.io.write(self.ty, buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Formats the whole text first, so one `write!` is one chunk on the wire rather than
    /// one per formatted piece.
    fn write_fmt(&mut self, args: std::fmt::Arguments<'_>) -> io::Result<()> {
        match args.as_str() {
            Some(s) => self.io.write(self.ty, s.as_bytes()),
            None => self.io.write(self.ty, std::fmt::format(args).as_bytes()),
        }
    }
}
