//! The server-under-test seam: what a scenario needs to know about a server.
//!
//! Scenarios take `&dyn Server`. A server is reachable at an [`Address`] (TCP or a Unix
//! socket), provides the logical test [`Nail`]s under command names of its own, and can
//! be killed in the middle of a command. [`crate::JavaServer`] implements it with the
//! reference Nailgun 0.9.3 server and the Java nails in `tests/java/`;
//! [`crate::NgdServer`] with `ngd`'s built-ins, or with the equivalent Rust nails of
//! `ngd-testbed`.

use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Where a server listens, in the two forms Nailgun clients understand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// A TCP socket: `--nailgun-server <ip> --nailgun-port <port>`.
    Tcp(SocketAddr),
    /// A Unix domain socket: `--nailgun-server local:<path>`.
    Unix(PathBuf),
}

impl Address {
    /// The value for `--nailgun-server` or `NAILGUN_SERVER`.
    ///
    /// IPv6 addresses are written bare (`::1`), the form `getaddrinfo` takes.
    pub fn server(&self) -> OsString {
        match self {
            Address::Tcp(addr) => OsString::from(addr.ip().to_string()),
            Address::Unix(path) => {
                let mut value = OsString::from("local:");
                value.push(path);
                value
            }
        }
    }

    /// The value for `--nailgun-port` or `NAILGUN_PORT`, if the address has one.
    pub fn port(&self) -> Option<u16> {
        match self {
            Address::Tcp(addr) => Some(addr.port()),
            Address::Unix(_) => None,
        }
    }

    /// The client options that name this address:
    /// `--nailgun-server <server> [--nailgun-port <port>]`.
    pub fn client_args(&self) -> Vec<OsString> {
        let mut args = vec![OsString::from("--nailgun-server"), self.server()];
        if let Some(port) = self.port() {
            args.push(OsString::from("--nailgun-port"));
            args.push(OsString::from(port.to_string()));
        }
        args
    }

    /// The transport this address uses.
    pub fn transport(&self) -> Transport {
        match self {
            Address::Tcp(_) => Transport::Tcp,
            Address::Unix(_) => Transport::Unix,
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(addr) => write!(f, "{addr}"),
            Address::Unix(path) => write!(f, "local:{}", path.display()),
        }
    }
}

/// How a client reaches a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Loopback TCP.
    Tcp,
    /// A Unix domain socket in a private temporary directory.
    Unix,
}

impl Transport {
    /// Both transports, TCP first.
    pub const ALL: [Transport; 2] = [Transport::Tcp, Transport::Unix];
}

/// The nails the scenarios run. Every server under test provides all of them.
///
/// The reference implementations are `tests/java/ngtest/*.java`; their docs are the
/// contract an equivalent nail on another server must meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Nail {
    /// The server's version built-in (`ng-version`).
    Version,
    /// Copies stdin to stdout, binary safe, until end of input; exit 0.
    Echo,
    /// Prints args, env and cwd as the server received them; see [`crate::Dump`].
    Dump,
    /// `Exit <n>`: prints `exit <n>` on stdout and `exiting with <n>` on stderr, then
    /// exits with `n`.
    Exit,
    /// `Sleep <ms>`: prints `sleeping <ms>`, sleeps, then prints
    /// `slept, client connected: <true|false>` (whether the server still thought the
    /// client connected, e.g. because heartbeats kept arriving).
    Sleep,
}

/// A running server that scenarios can target.
pub trait Server: Send + Sync {
    /// A short description for failure messages, e.g. `java-0.9.3 local:/tmp/x/ng.sock`.
    fn describe(&self) -> String;

    /// Where the server listens.
    fn address(&self) -> &Address;

    /// The command name under which this server provides `nail`.
    fn command(&self, nail: Nail) -> String;

    /// What [`Nail::Version`] prints on stdout.
    fn version_output(&self) -> String;

    /// Kills the server at once (`SIGKILL`), as a crash would, and reaps it.
    fn kill(&self);

    /// The server's log so far (its stdout and stderr), for failure messages.
    fn log(&self) -> String;
}
