//! Listener security: the private runtime directory, safe Unix socket binding, and the
//! peer-uid check every accepted connection goes through.
//!
//! `ngd` runs commands with its owner's rights, so it must only ever serve its owner
//! (docs/ARCHITECTURE.md, "Security"). This module owns the three guards that make that true
//! by default:
//!
//! - [`RuntimeDir`]: the directory holding the default socket is created with mode 0700 and,
//!   when it already exists, must be a real directory (not a symlink) that we own. A wrong
//!   (too open) mode on our own directory is repaired; anything else is refused with a
//!   [`SecurityError`] that names the path and the problem.
//! - [`bind_unix`]: binds a Unix socket with mode 0600 set explicitly (never left to the
//!   umask), replaces a dead server's leftover socket file but refuses to touch a live
//!   server's socket or a file that is not a socket, and checks the `sun_path` limit up
//!   front. The returned [`SocketFileGuard`] removes the socket file on drop, but only if the
//!   path still names the very socket we created.
//! - [`PeerCheck`]: given an accepted connection, finds out which uid is on the other end
//!   (`SO_PEERCRED` for Unix sockets; on Linux, for TCP, the owner of the client's socket,
//!   asked of the kernel with `sock_diag`, else found in `/proc/net/tcp{,6}`) and decides [`PeerVerdict::Allow`] or
//!   [`PeerVerdict::Refuse`] with a message meant for the user at the other end. A peer whose
//!   uid cannot be determined is refused: the check fails closed.
//!
//! The mode bits are defence in depth; the uid check is what actually keeps other users out,
//! and it runs on every connection whatever the socket's mode or address.
//!
//! The module's parts: [`runtime_dir`] (the directory), [`socket_file`] (binding, the
//! socket file's guard, the bind lock), [`peer`] (who is at the other end: peer
//! credentials, `sock_diag`, `/proc/net/tcp`), [`policy`] (the verdict). The raw system
//! calls are in [`crate::sys`].
//!
//! The `/proc/net/tcp` parsing is a pure function over the file's text
//! ([`parse_proc_net_tcp`], [`find_socket_owner`]) so it can be tested on fixture lines.
//! Peer lookups for TCP are Linux-only; elsewhere [`peer_uid_tcp`] reports `Unsupported`
//! and loopback TCP peers are therefore refused.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ng_proto::paths;

/// Mode of the runtime directory: owner only.
pub const RUNTIME_DIR_MODE: u32 = 0o700;

/// Mode of every Unix socket file `ngd` creates: owner read/write only.
pub const SOCKET_MODE: u32 = 0o600;

/// The size of `sockaddr_un.sun_path` on this system. A path must be at most one byte
/// shorter, leaving room for the terminating NUL (std and the stock C client both insist).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub const SUN_PATH_LEN: usize = 108;
/// The size of `sockaddr_un.sun_path` on this system (104 on macOS and the BSDs).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub const SUN_PATH_LEN: usize = 104;

/// How long [`bind_unix`] waits for another process holding the bind lock before going on
/// without it.
const BIND_LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Why a runtime directory or socket could not be set up safely.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecurityError {
    /// `mkdir` of the runtime directory (or one of its missing parents) failed.
    #[error("cannot create runtime directory {}: {source}", .path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `lstat`/`open` of a path we had to inspect failed.
    #[error("cannot inspect {}: {source}", .path.display())]
    Inspect {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The runtime directory is a symbolic link, which could point anywhere.
    #[error(
        "refusing to use runtime directory {}: it is a symbolic link, not a directory; \
         remove it and start ngd again",
        .path.display()
    )]
    DirIsSymlink {
        /// The directory path.
        path: PathBuf,
    },
    /// The runtime directory path exists but is not a directory.
    #[error("refusing to use runtime directory {}: it exists and is not a directory", .path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// The runtime directory belongs to another user, who could read or replace our socket.
    #[error(
        "refusing to use runtime directory {}: it belongs to uid {owner}, not to uid {uid} \
         (this server's user); remove it or point XDG_RUNTIME_DIR elsewhere",
        .path.display()
    )]
    DirNotOwned {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our effective uid.
        uid: u32,
    },
    /// The runtime directory's parent lets other users rename or replace entries in it.
    #[error(
        "refusing to use runtime directory {}: its parent {} is writable by other users \
         (mode {mode:04o}, owner uid {owner}) and not sticky",
        .path.display(), .parent.display()
    )]
    UnsafeParent {
        /// The runtime directory.
        path: PathBuf,
        /// Its parent.
        parent: PathBuf,
        /// The parent's permission bits.
        mode: u32,
        /// The parent's owner.
        owner: u32,
    },
    /// The runtime directory was ours but too open, and `chmod 0700` failed.
    #[error("cannot restrict runtime directory {} to mode 0700: {source}", .path.display())]
    Chmod {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The directory changed under us between two checks (someone is racing us).
    #[error("refusing to use runtime directory {}: it was replaced while being checked", .path.display())]
    DirReplaced {
        /// The directory.
        path: PathBuf,
    },
    /// The socket path does not fit in `sockaddr_un.sun_path`.
    #[error(
        "socket path {} is {len} bytes long; Unix socket paths are limited to {max} bytes \
         on this system; choose a shorter path",
        .path.display()
    )]
    SocketPathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The longest path this system accepts.
        max: usize,
    },
    /// A live server answers on the socket path.
    #[error("another ngd is already listening on {}", .path.display())]
    AlreadyListening {
        /// The socket path.
        path: PathBuf,
    },
    /// Something that is not a socket sits where the socket should go; we never delete it.
    #[error(
        "refusing to bind {}: a file that is not a socket is in the way (not removing it)",
        .path.display()
    )]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// Probing an existing socket file failed in a way that says neither "dead" nor "live".
    #[error(
        "cannot tell whether {} belongs to a running server: {source}; remove it if no ngd \
         is running",
        .path.display()
    )]
    ProbeSocket {
        /// The socket path.
        path: PathBuf,
        /// The error from `connect`.
        source: io::Error,
    },
    /// Removing a dead server's socket file failed.
    #[error("cannot remove stale socket {}: {source}", .path.display())]
    RemoveStale {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `bind` itself failed.
    #[error("cannot bind {}: {source}", .path.display())]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `chmod 0600` on the fresh socket failed.
    #[error("cannot set mode 0600 on socket {}: {source}", .path.display())]
    SocketMode {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// Our effective uid: the owner files we create get, and what `SO_PEERCRED` reports.
pub fn current_uid() -> u32 {
    crate::sys::effective_uid()
}

mod peer;
mod policy;
mod runtime_dir;
mod socket_file;

pub use peer::*;
pub use policy::*;
pub use runtime_dir::*;
pub use socket_file::*;

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows captured on an x86-64 Linux host: a listener on 127.0.0.1:2113, a client
    /// (uid 1000) at 127.0.0.1:45678 connected to it, the server's accepted socket, and a
    /// time-wait leftover of an earlier connection from the same client port.
    const TCP4: &str = "\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0841 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 31337 1 0000000000000000 100 0 0 10 0
   1: 0100007F:B26E 0100007F:0841 01 00000000:00000000 00:00000000 00000000  1000        0 40001 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:0841 0100007F:B26E 01 00000000:00000000 00:00000000 00000000  1000        0 40002 1 0000000000000000 20 4 31 10 -1
   3: 0100007F:B26F 0100007F:0841 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000
";

    /// IPv6: a client (uid 1001) at [::1]:40000 talking to [::1]:2113, and a dual-stack
    /// socket (uid 1002) at ::ffff:127.0.0.1:40001 talking to ::ffff:127.0.0.1:2113.
    const TCP6: &str = "\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:9C40 00000000000000000000000001000000:0841 01 00000000:00000000 00:00000000 00000000  1001        0 50001 1 0000000000000000 20 4 30 10 -1
   1: 0000000000000000FFFF00000100007F:9C41 0000000000000000FFFF00000100007F:0841 01 00000000:00000000 00:00000000 00000000  1002        0 50002 1 0000000000000000 20 4 30 10 -1
";

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn parse_proc_net_tcp_reads_v4_rows_and_skips_the_header() {
        let rows: Vec<_> = parse_proc_net_tcp(TCP4).collect();
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows[1],
            ProcTcpEntry {
                local: sa("127.0.0.1:45678"),
                remote: sa("127.0.0.1:2113"),
                state: 0x01,
                uid: 1000,
                inode: 40001,
            }
        );
        assert_eq!(rows[0].state, TCP_LISTEN);
        assert_eq!(rows[0].remote, sa("0.0.0.0:0"));
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn find_socket_owner_picks_the_client_row() {
        // Client at :45678, our side at :2113 → the client's socket is row 1.
        assert_eq!(
            find_socket_owner(TCP4, sa("127.0.0.1:45678"), sa("127.0.0.1:2113")),
            Some(1000)
        );
        // The time-wait row (uid 0, inode 0) never answers.
        assert_eq!(
            find_socket_owner(TCP4, sa("127.0.0.1:45679"), sa("127.0.0.1:2113")),
            None
        );
        // No such connection.
        assert_eq!(
            find_socket_owner(TCP4, sa("127.0.0.1:1"), sa("127.0.0.1:2113")),
            None
        );
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn find_socket_owner_reads_v6_and_v4_mapped_rows() {
        assert_eq!(
            find_socket_owner(TCP6, sa("[::1]:40000"), sa("[::1]:2113")),
            Some(1001)
        );
        // The mapped row matches both plain IPv4 and mapped spellings.
        assert_eq!(
            find_socket_owner(TCP6, sa("127.0.0.1:40001"), sa("127.0.0.1:2113")),
            Some(1002)
        );
        assert_eq!(
            find_socket_owner(
                TCP6,
                sa("[::ffff:127.0.0.1]:40001"),
                sa("[::ffff:127.0.0.1]:2113")
            ),
            Some(1002)
        );
        let rows: Vec<_> = parse_proc_net_tcp(TCP6).collect();
        assert_eq!(rows[1].local, sa("[::ffff:127.0.0.1]:40001"));
    }

    #[test]
    fn find_socket_owner_refuses_to_guess_between_owners() {
        let a = "   0: 0100007F:B26E 0100007F:0841 01 00000000:00000000 00:00000000 00000000  1000        0 7 1";
        let b = "   1: 0100007F:B26E 0100007F:0841 01 00000000:00000000 00:00000000 00000000  2000        0 8 1";
        let table = format!("{a}\n{b}\n");
        let local = parse_proc_net_tcp_line(a).unwrap().local;
        let remote = parse_proc_net_tcp_line(a).unwrap().remote;
        assert_eq!(find_socket_owner(&table, local, remote), None);
        assert_eq!(find_socket_owner(a, local, remote), Some(1000));
    }

    #[test]
    fn parse_proc_net_tcp_skips_malformed_lines() {
        let junk = "\
garbage
   0:
   0: 0100007F:0841
   0: 0100007F:0841 00000000:0000 ZZ 00000000:00000000 00:00000000 00000000 1000 0 1
   0: 0100007F:+841 00000000:0000 01 00000000:00000000 00:00000000 00000000 1000 0 1
   0: +100007F:0841 00000000:0000 01 00000000:00000000 00:00000000 00000000 1000 0 1
   0: 0100007F0:0841 00000000:0000 01 00000000:00000000 00:00000000 00000000 1000 0 1
   0: 0100007F:0841 00000000:0000 01 00000000:00000000 00:00000000 00000000 -1 0 1
   0: 0100007F:0841 00000000:0000 01 00000000:00000000 00:00000000 00000000 1000 0
   0: 0000000000000000000000000100000:0841 00000000:0000 01 0:0 0:0 0 1000 0 1
   \u{e9}: \u{e9}\u{e9}\u{e9}\u{e9}:0841 x y z w 1 2 3
";
        assert_eq!(parse_proc_net_tcp(junk).count(), 0);
        // And one good line among them is still found.
        let good = "   0: 0100007F:0841 00000000:0000 01 0:0 0:0 0 1000 0 1";
        let text = format!("{junk}{good}\n");
        assert_eq!(parse_proc_net_tcp(&text).count(), 1);
    }

    #[test]
    fn hex_addresses_use_host_order_words() {
        let word = u32::from_ne_bytes([127, 0, 0, 1]);
        let field = format!("{word:08X}:0841");
        assert_eq!(parse_hex_sockaddr(&field), Some(sa("127.0.0.1:2113")));
    }

    #[test]
    fn is_loopback_covers_v4_v6_and_mapped() {
        assert!(is_loopback("127.0.0.1".parse().unwrap()));
        assert!(is_loopback("127.8.9.10".parse().unwrap()));
        assert!(is_loopback("::1".parse().unwrap()));
        assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!is_loopback("0.0.0.0".parse().unwrap()));
        assert!(!is_loopback("::".parse().unwrap()));
        assert!(!is_loopback("192.168.1.5".parse().unwrap()));
        assert!(!is_loopback("::ffff:10.0.0.1".parse().unwrap()));
        // `::0.0.0.1`-style compatible addresses are not loopback.
        assert!(!is_loopback("::7f00:1".parse().unwrap()));
    }

    #[test]
    fn peer_check_allows_only_the_owner() {
        let check = PeerCheck::new(1000);
        assert_eq!(check.decide(&PeerIdentity::Uid(1000)), PeerVerdict::Allow);
        assert_eq!(
            check.decide(&PeerIdentity::Uid(65534)),
            PeerVerdict::Refuse {
                reason:
                    "ngd: connection refused: this server belongs to uid 1000, you are uid 65534"
                        .into()
            }
        );
        // Root is not special.
        assert!(!check.decide(&PeerIdentity::Uid(0)).is_allowed());
    }

    #[test]
    fn peer_check_fails_closed_on_unknown_peers() {
        let check = PeerCheck::new(1000).allow_remote(true);
        let verdict = check.decide(&PeerIdentity::Unknown {
            why: "no live socket for 127.0.0.1:5 in /proc/net/tcp".into(),
        });
        match verdict {
            PeerVerdict::Refuse { reason } => {
                assert!(reason.starts_with("ngd: connection refused: cannot tell which user"));
                assert!(reason.contains("/proc/net/tcp"), "{reason}");
                assert!(reason.contains("only serves uid 1000"), "{reason}");
            }
            PeerVerdict::Allow => panic!("an unknown peer was allowed"),
        }
    }

    #[test]
    fn peer_check_serves_remote_peers_only_when_allowed() {
        let remote = PeerIdentity::Remote {
            peer: sa("192.0.2.7:50000"),
        };
        match PeerCheck::new(1).decide(&remote) {
            PeerVerdict::Refuse { reason } => {
                assert!(reason.contains("192.0.2.7:50000"), "{reason}");
                assert!(reason.contains("allow_remote"), "{reason}");
            }
            PeerVerdict::Allow => panic!("a remote peer was allowed by default"),
        }
        assert!(PeerCheck::new(1)
            .allow_remote(true)
            .decide(&remote)
            .is_allowed());
        // allow_remote never lets another local user in.
        assert!(!PeerCheck::new(1)
            .allow_remote(true)
            .decide(&PeerIdentity::Uid(2))
            .is_allowed());
    }

    #[test]
    fn socket_path_length_limit() {
        let max = SUN_PATH_LEN - 1;
        let ok = PathBuf::from(format!("/{}", "a".repeat(max - 1)));
        assert!(check_socket_path_len(&ok).is_ok());
        let long = PathBuf::from(format!("/{}", "a".repeat(max)));
        let err = check_socket_path_len(&long).unwrap_err();
        assert!(
            matches!(err, SecurityError::SocketPathTooLong { len, max: m, .. } if len == max + 1 && m == max)
        );
        assert!(err.to_string().contains("limited to"), "{err}");
    }
}
