//! The verdict on a connection: loopback-only TCP, and the peer's uid must be ours; a peer
//! whose uid cannot be told is refused (the check fails closed).

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------------
// Policy
// ---------------------------------------------------------------------------------------

/// Who is at the other end of a connection, as far as we could tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerIdentity {
    /// The peer's effective uid is known (Unix socket credentials, or the owner of a TCP
    /// client socket on this host).
    Uid(u32),
    /// A peer on this host whose uid could not be determined; `why` says what went wrong.
    Unknown {
        /// A short explanation for the refusal message, e.g. the lookup error.
        why: String,
    },
    /// A TCP peer on another machine (its socket is not in this host's tables).
    Remote {
        /// The client's address.
        peer: SocketAddr,
    },
}

impl PeerIdentity {
    /// Identifies the peer of an accepted Unix socket through its credentials.
    pub fn of_unix(sock: &impl AsRawFd) -> Self {
        match peer_uid_unix(sock) {
            Ok(uid) => PeerIdentity::Uid(uid),
            Err(e) => PeerIdentity::Unknown {
                why: format!("reading the Unix socket peer's credentials failed: {e}"),
            },
        }
    }

    /// Identifies the peer of an accepted TCP connection (`local` is our side).
    ///
    /// A peer absent from the host's tables is [`PeerIdentity::Remote`] only if its address
    /// is neither loopback nor our own address on the connection; otherwise it is on this
    /// host and merely unattributable, which is [`PeerIdentity::Unknown`].
    pub fn of_tcp(local: SocketAddr, peer: SocketAddr) -> Self {
        let on_this_host = is_loopback(peer.ip()) || canonical(peer).ip() == canonical(local).ip();
        match peer_uid_tcp(local, peer) {
            Ok(Some(uid)) => PeerIdentity::Uid(uid),
            Ok(None) if !on_this_host => PeerIdentity::Remote { peer },
            Ok(None) => PeerIdentity::Unknown {
                why: format!("no live socket for {peer} in /proc/net/tcp or /proc/net/tcp6"),
            },
            Err(e) => PeerIdentity::Unknown {
                why: format!("looking up the owner of {peer} failed: {e}"),
            },
        }
    }
}

/// The outcome of a [`PeerCheck`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerVerdict {
    /// Serve the connection.
    Allow,
    /// Close it after telling the peer why.
    Refuse {
        /// One line for the user at the other end (no trailing newline), starting
        /// `ngd: connection refused: `.
        reason: String,
    },
}

impl PeerVerdict {
    /// Whether this is [`PeerVerdict::Allow`].
    pub fn is_allowed(&self) -> bool {
        matches!(self, PeerVerdict::Allow)
    }
}

/// The server's peer policy: only its owner is served.
///
/// A peer with another uid is refused, a local peer whose uid cannot be established is
/// refused (fail closed), and a peer on another machine is served only when remote access
/// was explicitly enabled (`allow_remote` in the config). Root gets no exception: a server
/// runs commands as its owner, and root can become that owner when it really wants to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCheck {
    /// The uid allowed in: the server's effective uid.
    owner_uid: u32,
    /// Whether peers on other machines (uid unknowable) are served.
    allow_remote: bool,
}

impl PeerCheck {
    /// A policy serving `owner_uid` only, with remote peers refused.
    pub fn new(owner_uid: u32) -> Self {
        Self {
            owner_uid,
            allow_remote: false,
        }
    }

    /// A policy serving this process's effective uid only.
    pub fn for_current_user() -> Self {
        Self::new(current_uid())
    }

    /// Also serve TCP peers on other machines (whose uid cannot be known).
    pub fn allow_remote(mut self, allow: bool) -> Self {
        self.allow_remote = allow;
        self
    }

    /// The uid this server serves.
    pub fn owner_uid(&self) -> u32 {
        self.owner_uid
    }

    /// Decides about a peer already identified.
    pub fn decide(&self, peer: &PeerIdentity) -> PeerVerdict {
        match peer {
            PeerIdentity::Uid(uid) if *uid == self.owner_uid => PeerVerdict::Allow,
            PeerIdentity::Uid(uid) => PeerVerdict::Refuse {
                reason: format!(
                    "ngd: connection refused: this server belongs to uid {}, you are uid {uid}",
                    self.owner_uid
                ),
            },
            PeerIdentity::Unknown { why } => PeerVerdict::Refuse {
                reason: format!(
                    "ngd: connection refused: cannot tell which user opened this connection \
                     ({why}); this server only serves uid {}",
                    self.owner_uid
                ),
            },
            PeerIdentity::Remote { .. } if self.allow_remote => PeerVerdict::Allow,
            PeerIdentity::Remote { peer } => PeerVerdict::Refuse {
                reason: format!(
                    "ngd: connection refused: {peer} is not on this machine and this server \
                     does not accept remote connections (allow_remote = false)"
                ),
            },
        }
    }

    /// Identifies and judges the peer of an accepted Unix socket.
    pub fn check_unix(&self, sock: &impl AsRawFd) -> PeerVerdict {
        self.decide(&PeerIdentity::of_unix(sock))
    }

    /// Identifies and judges the peer of an accepted TCP connection (`local` is our side).
    pub fn check_tcp(&self, local: SocketAddr, peer: SocketAddr) -> PeerVerdict {
        self.decide(&PeerIdentity::of_tcp(local, peer))
    }
}
