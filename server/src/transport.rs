//! Listening sockets and accepted streams, TCP or Unix, behind one type each.
//!
//! Accepted TCP streams get `TCP_NODELAY`, and `TCP_QUICKACK` is re-armed after every read
//! (Linux clears it): the stock C client sends each chunk's header and payload in two
//! `send()`s without `TCP_NODELAY`, so its second send waits for our ACK; acknowledging at
//! once turns a 40 ms stall per stdin chunk into a round trip.

use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{event::Source, Interest, Registry, Token};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsRawFd;

/// A listening socket registered with the loop.
#[derive(Debug)]
pub enum Listener {
    /// Loopback (or explicitly allowed) TCP.
    Tcp(TcpListener),
    /// A Unix socket; the guard removes the socket file when the listener goes.
    Unix(UnixListener, crate::security::SocketFileGuard),
    /// A Unix socket bound by someone else (a service manager's socket activation), and
    /// its path: the socket file is theirs and stays.
    UnixInherited(UnixListener, std::path::PathBuf),
}

/// Where an accepted stream came from, for the peer check and logs.
#[derive(Clone, Debug)]
pub enum PeerAddr {
    /// A TCP peer, with our local address (needed to find the peer's socket owner).
    Tcp {
        /// The client's address.
        peer: SocketAddr,
        /// Our address on that connection.
        local: SocketAddr,
    },
    /// A Unix-socket peer.
    Unix,
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerAddr::Tcp { peer, .. } => write!(f, "{peer}"),
            PeerAddr::Unix => write!(f, "unix"),
        }
    }
}

impl Listener {
    /// Accepts one connection; `WouldBlock` when none is pending.
    pub fn accept(&self) -> io::Result<(Stream, PeerAddr)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                let local = s.local_addr()?;
                s.set_nodelay(true)?;
                Ok((Stream::Tcp(s), PeerAddr::Tcp { peer, local }))
            }
            Listener::Unix(l, _) | Listener::UnixInherited(l, _) => {
                let (s, _) = l.accept()?;
                Ok((Stream::Unix(s), PeerAddr::Unix))
            }
        }
    }

    /// Registers for readiness.
    pub fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => registry.register(l, token, Interest::READABLE),
            Listener::Unix(l, _) | Listener::UnixInherited(l, _) => {
                registry.register(l, token, Interest::READABLE)
            }
        }
    }

    /// Deregisters (before shutdown drops it).
    pub fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => registry.deregister(l),
            Listener::Unix(l, _) | Listener::UnixInherited(l, _) => registry.deregister(l),
        }
    }

    /// A description of the address, for the ready line and logs.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "tcp:?".into()),
            Listener::Unix(_, guard) => format!("local:{}", guard.path().display()),
            Listener::UnixInherited(_, path) => format!("local:{}", path.display()),
        }
    }

    /// Removes the socket file of a Unix listener this server bound (if it is still ours),
    /// so new clients no longer find this server; the listener itself keeps accepting
    /// connections already on their way. Used by the idle exit ([`crate::idle`]).
    pub fn unlink_socket_file(&self) {
        if let Listener::Unix(_, guard) = self {
            if guard.is_intact() {
                if let Err(e) = std::fs::remove_file(guard.path()) {
                    tracing::debug!(path = %guard.path().display(), error = %e, "could not remove socket file");
                }
            }
        }
    }
}

/// An accepted connection.
#[derive(Debug)]
pub enum Stream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix socket.
    Unix(UnixStream),
}

impl Stream {
    /// Closes our sending side, so the client sees end of file after our last byte.
    pub fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
        }
    }

    /// Re-arms `TCP_QUICKACK` (no-op for Unix sockets and other systems).
    pub fn quickack(&self) {
        if let Stream::Tcp(s) = self {
            crate::sys::tcp_quickack(s.as_raw_fd());
        }
    }

    fn source(&mut self) -> &mut dyn Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }

    /// Registers for both readiness kinds (edge-triggered, so never re-registered).
    pub fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(
            self.source(),
            token,
            Interest::READABLE | Interest::WRITABLE,
        )
    }

    /// Deregisters before the stream is dropped.
    pub fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        registry.deregister(self.source())
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
