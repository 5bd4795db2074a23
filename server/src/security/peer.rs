//! Who is at the other end of a connection: the peer's uid from its credentials (Unix
//! sockets) or from the kernel's socket tables (loopback TCP: an exact `sock_diag` lookup,
//! `/proc/net/tcp{,6}` as the fallback), and the pure parsing of those tables.

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------------
// Peer credentials
// ---------------------------------------------------------------------------------------

/// The effective uid of the process at the other end of a connected Unix socket.
///
/// Linux uses `SO_PEERCRED` (the credentials at `connect` time); macOS and the BSDs use
/// `getpeereid`. Elsewhere this returns an `Unsupported` error, which the peer check treats
/// as "unknown" and refuses. Accepts a socket or a bare `RawFd`.
pub fn peer_uid_unix(sock: &impl AsRawFd) -> io::Result<u32> {
    crate::sys::peer_uid(sock.as_raw_fd())
}

/// The uid owning the client end of a TCP connection we accepted, when it is on this host.
///
/// `local` is our address on the connection and `peer` the client's. The client's socket is
/// the one whose local address is `peer` and whose remote address is `local`: asked of the
/// kernel over netlink (`sock_diag`), else the row of `/proc/net/tcp` (or `tcp6`) that says so. Returns `Ok(None)` when no such live row exists (the client is on
/// another machine, in another network namespace, or already gone), and an error when the
/// tables cannot be read. Linux only: elsewhere the error is `Unsupported`.
pub fn peer_uid_tcp(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<u32>> {
    peer_uid_tcp_impl(local, peer)
}

#[cfg(target_os = "linux")]
fn peer_uid_tcp_impl(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<u32>> {
    // The fast path: ask the kernel for exactly this socket over netlink (sock_diag). It
    // costs tens of microseconds whatever the number of sockets, where producing
    // /proc/net/tcp walks the whole connection table (milliseconds with a few thousand
    // TIME_WAIT entries). The tables stay as the fallback when netlink is unavailable.
    match crate::sys::sock_diag::peer_uid(canonical(local), canonical(peer)) {
        Ok(found) => return Ok(found),
        Err(e) => tracing::debug!("sock_diag lookup failed, reading /proc/net/tcp: {e}"),
    }
    let peer = canonical(peer);
    // An IPv4 client may own an AF_INET socket (in `tcp`) or a dual-stack AF_INET6 socket
    // talking to a v4-mapped address (in `tcp6`); an IPv6 client only the latter.
    let tables: &[&str] = if peer.is_ipv4() {
        &["/proc/net/tcp", "/proc/net/tcp6"]
    } else {
        &["/proc/net/tcp6"]
    };
    for table in tables {
        let text = match fs::read_to_string(table) {
            Ok(t) => t,
            // No IPv6 in this kernel or namespace.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{table}: {e}"))),
        };
        if let Some(uid) = find_socket_owner(&text, peer, local) {
            return Ok(Some(uid));
        }
    }
    Ok(None)
}

#[cfg(not(target_os = "linux"))]
fn peer_uid_tcp_impl(_local: SocketAddr, _peer: SocketAddr) -> io::Result<Option<u32>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "looking up the owner of a TCP connection is only implemented on Linux",
    ))
}

/// One row of `/proc/net/tcp` or `/proc/net/tcp6`, the fields the peer check needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcTcpEntry {
    /// The socket's own address (`local_address`), v4-mapped addresses kept as written.
    pub local: SocketAddr,
    /// The address it is connected to (`rem_address`).
    pub remote: SocketAddr,
    /// The TCP state (`st`): 0x01 established, 0x06 time-wait, 0x0A listen, ...
    pub state: u8,
    /// The owning uid.
    pub uid: u32,
    /// The socket inode; 0 for sockets no process holds (time-wait, orphans).
    pub inode: u64,
}

/// `st` values of rows that cannot be a client's live socket.
const TCP_TIME_WAIT: u8 = 0x06;
pub(crate) const TCP_LISTEN: u8 = 0x0A;
const TCP_NEW_SYN_RECV: u8 = 0x0C;

/// Parses the text of `/proc/net/tcp` or `/proc/net/tcp6`, skipping the header and any
/// line that does not have the expected shape.
///
/// Addresses are hex in the kernel's in-memory order: each 32-bit word of the address is
/// printed as a host-endian integer (so `127.0.0.1` is `0100007F` on little-endian
/// machines), and ports are plain hex numbers.
pub fn parse_proc_net_tcp(text: &str) -> impl Iterator<Item = ProcTcpEntry> + '_ {
    text.lines().filter_map(parse_proc_net_tcp_line)
}

pub(crate) fn parse_proc_net_tcp_line(line: &str) -> Option<ProcTcpEntry> {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
    let mut fields = line.split_whitespace();
    let slot = fields.next()?;
    if !slot.ends_with(':') {
        return None;
    }
    let local = parse_hex_sockaddr(fields.next()?)?;
    let remote = parse_hex_sockaddr(fields.next()?)?;
    let state = u8::from_str_radix(hex_digits(fields.next()?)?, 16).ok()?;
    let _queues = fields.next()?;
    let _timer = fields.next()?;
    let _retransmits = fields.next()?;
    let uid = fields.next()?.parse::<u32>().ok()?;
    let _timeout = fields.next()?;
    let inode = fields.next()?.parse::<u64>().ok()?;
    Some(ProcTcpEntry {
        local,
        remote,
        state,
        uid,
        inode,
    })
}

/// `s` if it is non-empty and all hex digits (`from_str_radix` would also take a sign).
fn hex_digits(s: &str) -> Option<&str> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())).then_some(s)
}

/// Parses `ADDR:PORT` as printed by the kernel: 8 hex digits for IPv4, 32 for IPv6.
pub(crate) fn parse_hex_sockaddr(field: &str) -> Option<SocketAddr> {
    let (addr, port) = field.split_once(':')?;
    if port.len() != 4 {
        return None;
    }
    let port = u16::from_str_radix(hex_digits(port)?, 16).ok()?;
    let word = |hex: &str| -> Option<[u8; 4]> {
        Some(
            u32::from_str_radix(hex_digits(hex)?, 16)
                .ok()?
                .to_ne_bytes(),
        )
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(addr)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(addr.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The uid owning the live socket whose local address is `local` and whose remote address
/// is `remote`, in the text of a `/proc/net/tcp{,6}` file.
///
/// Addresses compare by IP and port after unmapping IPv4-mapped IPv6 addresses, so an
/// AF_INET6 socket talking to `::ffff:127.0.0.1` matches `127.0.0.1`. Rows no process holds
/// (inode 0: time-wait and orphaned sockets, which report uid 0) and listening or
/// half-open rows are ignored. If several rows match with different uids, the answer is
/// `None`: ambiguity must not resolve to a guess.
pub fn find_socket_owner(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let (local, remote) = (canonical(local), canonical(remote));
    let mut owner = None;
    for entry in parse_proc_net_tcp(table) {
        if entry.inode == 0
            || matches!(entry.state, TCP_TIME_WAIT | TCP_LISTEN | TCP_NEW_SYN_RECV)
            || !same_endpoint(canonical(entry.local), local)
            || !same_endpoint(canonical(entry.remote), remote)
        {
            continue;
        }
        match owner {
            None => owner = Some(entry.uid),
            Some(uid) if uid == entry.uid => {}
            Some(_) => return None,
        }
    }
    owner
}

/// Unmaps `::ffff:a.b.c.d` to `a.b.c.d`; other addresses are returned unchanged.
pub(crate) fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, v6.port())),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

/// Same IP and port (IPv6 flow info and scope are not in the tables).
fn same_endpoint(a: SocketAddr, b: SocketAddr) -> bool {
    a.ip() == b.ip() && a.port() == b.port()
}

/// Whether `ip` is a loopback address (127.0.0.0/8, `::1`, or `::ffff:127.x.y.z`).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.is_loopback(),
            None => v6.is_loopback(),
        },
    }
}
