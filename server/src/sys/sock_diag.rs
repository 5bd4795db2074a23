//! Exact lookups of one TCP socket through `NETLINK_SOCK_DIAG` (`inet_diag_req_v2` without
//! `NLM_F_DUMP`), which needs no privileges for a uid.
use std::io;
use std::net::{IpAddr, SocketAddr};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const HDR: usize = 16; // struct nlmsghdr
const REQ: usize = 56; // struct inet_diag_req_v2
/// Offset of `idiag_uid` in `struct inet_diag_msg`: 4 + sockid (48) + expires, rqueue,
/// wqueue (12).
const UID_AT: usize = 64;

/// The uid of the socket whose local end is `peer` and remote end `local`, searching
/// AF_INET and then (for IPv4 peers, dual-stack sockets) AF_INET6 with mapped addresses.
pub fn peer_uid(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<u32>> {
    let fd = Fd::netlink()?;
    match (peer.ip(), local.ip()) {
        (IpAddr::V4(p), IpAddr::V4(l)) => {
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src[..4].copy_from_slice(&p.octets());
            dst[..4].copy_from_slice(&l.octets());
            if let Some(uid) = query(&fd, libc::AF_INET, src, peer.port(), dst, local.port())? {
                return Ok(Some(uid));
            }
            let src = p.to_ipv6_mapped().octets();
            let dst = l.to_ipv6_mapped().octets();
            query(&fd, libc::AF_INET6, src, peer.port(), dst, local.port())
        }
        (p, l) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                IpAddr::V6(a) => a.octets(),
            };
            query(&fd, libc::AF_INET6, v6(p), peer.port(), v6(l), local.port())
        }
    }
}

struct Fd(libc::c_int);

impl Fd {
    fn netlink() -> io::Result<Self> {
        // SAFETY: plain socket(2) call.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = Fd(fd);
        // Never wait long on the kernel.
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        // SAFETY: a live timeval of the size passed.
        unsafe {
            libc::setsockopt(
                fd.0,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
        Ok(fd)
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe {
            libc::close(self.0);
        }
    }
}

fn query(
    fd: &Fd,
    family: libc::c_int,
    src: [u8; 16],
    sport: u16,
    dst: [u8; 16],
    dport: u16,
) -> io::Result<Option<u32>> {
    let mut msg = [0u8; HDR + REQ];
    let len = (HDR + REQ) as u32;
    msg[0..4].copy_from_slice(&len.to_ne_bytes());
    msg[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    msg[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    msg[8..12].copy_from_slice(&1u32.to_ne_bytes()); // sequence
    let r = &mut msg[HDR..];
    r[0] = family as u8;
    r[1] = libc::IPPROTO_TCP as u8;
    r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
    r[8..10].copy_from_slice(&sport.to_be_bytes());
    r[10..12].copy_from_slice(&dport.to_be_bytes());
    r[12..28].copy_from_slice(&src);
    r[28..44].copy_from_slice(&dst);
    // idiag_if = 0; idiag_cookie = INET_DIAG_NOCOOKIE (all ones).
    r[48..56].copy_from_slice(&[0xff; 8]);
    // SAFETY: a zeroed sockaddr_nl addresses the kernel; the buffers are live.
    let sent = unsafe {
        let mut kernel: libc::sockaddr_nl = std::mem::zeroed();
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        libc::sendto(
            fd.0,
            msg.as_ptr().cast(),
            msg.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 1024];
    // SAFETY: the buffer is live and as long as passed.
    let n = unsafe { libc::recv(fd.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let reply = &buf[..n as usize];
    if reply.len() < HDR {
        return Err(io::Error::other("short sock_diag reply"));
    }
    let ty = u16::from_ne_bytes([reply[4], reply[5]]);
    if ty == NLMSG_ERROR {
        let errno = reply
            .get(HDR..HDR + 4)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0);
        return match -errno {
            0 | libc::ENOENT => Ok(None),
            e => Err(io::Error::from_raw_os_error(e)),
        };
    }
    if ty != SOCK_DIAG_BY_FAMILY {
        return Err(io::Error::other(format!(
            "unexpected sock_diag reply type {ty}"
        )));
    }
    let uid = reply
        .get(HDR + UID_AT..HDR + UID_AT + 4)
        .ok_or_else(|| io::Error::other("short inet_diag_msg"))?;
    Ok(Some(u32::from_ne_bytes([uid[0], uid[1], uid[2], uid[3]])))
}
