//! The raw system calls of the server alone, each behind a small safe function; the ones
//! the other crates use too are in `ng_sys`, some re-exported here.
//!
//! Contract: every function here is a thin wrapper over one system facility, takes and
//! returns plain values (pids as `u32`, descriptors as `RawFd`), never panics, and reports
//! failure as `io::Result` or `Option` where the caller can act on it. Nothing here holds
//! state or decides policy; the callers (`plugin::worker`, `plugin::host`, `security`)
//! decide. Functions marked *async-signal-safe* may be called between `fork` and `exec`.
//! Platform differences end here: Linux-only facilities (`prctl`, `sock_diag`, `/proc`)
//! have a stated fallback elsewhere.

pub mod procfs;
#[cfg(target_os = "linux")]
pub mod sock_diag;

use std::io;
use std::os::fd::RawFd;

pub use ng_sys::fd::{lock_exclusive, try_lock_exclusive};
pub use ng_sys::process::effective_uid;
pub use ng_sys::socket::tcp_quickack;

/// This process's umask.
pub fn current_umask() -> u32 {
    ng_sys::process::umask()
}

/// Returns whole free pages of every heap arena to the kernel (glibc `malloc_trim`); true
/// if any was returned.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn malloc_trim() -> bool {
    // SAFETY: a plain glibc call without pointers; glibc locks each arena while it walks
    // it, so it is safe while other threads allocate.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// What the allocator holds: glibc's `mallinfo2`, summed over every arena.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HeapInfo {
    /// Bytes in chunks handed out and not freed (the live heap, plus the chunks glibc
    /// keeps in each thread's cache, which it counts as in use).
    pub in_use: u64,
    /// Bytes the allocator got from the kernel for its arenas (`sbrk` and arena maps).
    pub arena: u64,
    /// Bytes in blocks mapped on their own (large allocations).
    pub mapped: u64,
    /// Free bytes the allocator keeps.
    pub free: u64,
}

/// The allocator's statistics (`None` where the C library is not glibc).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn heap_info() -> Option<HeapInfo> {
    // SAFETY: a plain glibc call that returns a struct by value; glibc locks each arena
    // while it walks it, so it is safe while other threads allocate.
    let m = unsafe { libc::mallinfo2() };
    let n = |v: usize| v as u64;
    Some(HeapInfo {
        in_use: n(m.uordblks) + n(m.hblkhd),
        arena: n(m.arena),
        mapped: n(m.hblkhd),
        free: n(m.fordblks),
    })
}

/// The allocator's statistics (`None` where the C library is not glibc).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap_info() -> Option<HeapInfo> {
    None
}

// -- Peer credentials -----------------------------------------------------------------------

/// The effective uid of the process at the other end of a connected Unix socket: Linux
/// `SO_PEERCRED` (the credentials at `connect` time), `getpeereid` on macOS and the BSDs,
/// `Unsupported` elsewhere.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_uid(fd: RawFd) -> io::Result<u32> {
    peer_cred(fd).map(|c| c.uid)
}

/// The pid of the process at the other end of a connected Unix socket, as it was at
/// `connect` time (Linux `SO_PEERCRED`); `Unsupported` elsewhere.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_pid(fd: RawFd) -> io::Result<u32> {
    let pid = peer_cred(fd)?.pid;
    u32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the peer has no pid here"))
}

/// The pid of a Unix socket's peer: not offered on this system.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn peer_pid(_fd: RawFd) -> io::Result<u32> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this system offers no way to read a Unix socket peer's pid",
    ))
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn peer_cred(fd: RawFd) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are live locals; the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<libc::ucred>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "SO_PEERCRED returned a short credentials structure",
        ));
    }
    Ok(cred)
}

#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
))]
pub fn peer_uid(fd: RawFd) -> io::Result<u32> {
    let mut uid: libc::uid_t = 0;
    let mut gid: libc::gid_t = 0;
    // SAFETY: both out-pointers are live locals.
    let rc = unsafe { libc::getpeereid(fd, &mut uid, &mut gid) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(uid)
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
)))]
pub fn peer_uid(_fd: RawFd) -> io::Result<u32> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this system offers no way to read a Unix socket peer's uid",
    ))
}

// -- Processes ------------------------------------------------------------------------------

/// Sends `signal` to the process group led by `pid` (our workers lead their own session).
pub fn signal_group(pid: u32, signal: i32) {
    ng_sys::signal::kill_group(pid, signal);
}

/// Sends `signal` to one process.
pub fn signal(pid: u32, signal: i32) {
    ng_sys::signal::kill(pid, signal);
}

/// Has child `pid` exited? `waitid(WNOWAIT)`, which leaves the zombie in place, so its
/// process group id stays reserved until it is reaped.
pub fn has_exited(pid: u32) -> bool {
    let pid: libc::id_t = pid;
    // SAFETY: `info` is a live, zeroed siginfo_t that waitid fills.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        rc == 0 && info.si_pid() != 0
    }
}

/// The pid of one exited child of this process, without reaping it (`waitid(WNOWAIT)`).
pub fn exited_child() -> Option<u32> {
    // SAFETY: `info` is a live, zeroed siginfo_t that waitid fills.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        (rc == 0 && info.si_pid() > 0).then(|| info.si_pid() as u32)
    }
}

/// Reaps child `pid`: at once if it has exited (`WNOHANG`), else only if `block`.
pub fn reap(pid: u32, block: bool) {
    if let Ok(pid) = i32::try_from(pid) {
        let flags = if block { 0 } else { libc::WNOHANG };
        // SAFETY: waitpid on a specific child; the status is discarded.
        unsafe {
            let mut status = 0;
            libc::waitpid(pid, &mut status, flags);
        }
    }
}

/// Makes this process adopt the orphaned descendants of its children (Linux
/// `PR_SET_CHILD_SUBREAPER`; elsewhere nothing: orphans go to init).
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// Makes `cmd`'s child, between fork and exec, start a new session, get SIGKILL when the
/// parent dies (Linux `PR_SET_PDEATHSIG`), and have `fd` on `target` without
/// close-on-exec.
pub fn worker_child_setup(cmd: &mut std::process::Command, fd: RawFd, target: RawFd) {
    ng_sys::process::on_spawn(
        cmd,
        ng_sys::process::ChildSetup {
            new_session: true,
            die_with_parent: true,
            default_sigpipe: false,
            pass_fd: Some((fd, target)),
        },
    );
}

/// The pids of this process's children, from `/proc` (every thread's children; Linux, empty
/// elsewhere).
pub fn children() -> Vec<u32> {
    let me = std::process::id();
    let mut pids = procfs::children_of(me);
    pids.retain(|p| *p != me);
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The resident set size of a process in bytes (`/proc/<pid>/statm`; `None` elsewhere).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// The most descriptors one [`recv_with_fds`] accepts; more means a truncated message.
pub const MAX_PASSED_FDS: usize = ng_proto::MAX_PASSED_FDS;

pub use ng_sys::scm::Received;

/// `recvmsg` on a stream socket expecting at most [`MAX_PASSED_FDS`] descriptors (extras
/// are closed and reported as truncated); never blocks if the socket is non-blocking.
pub fn recv_with_fds(fd: RawFd, buf: &mut [u8]) -> io::Result<Received> {
    ng_sys::scm::recv_with_fds(fd, buf, MAX_PASSED_FDS)
}

/// `sendmsg` of `data` with `fds` attached to its first byte (`SCM_RIGHTS`, at most
/// [`MAX_PASSED_FDS`]); returns the bytes written (the descriptors went with the first).
pub fn send_with_fds(fd: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    if fds.is_empty() || fds.len() > MAX_PASSED_FDS || data.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "between 1 and 3 descriptors, and data to carry them",
        ));
    }
    ng_sys::scm::send_with_fds(fd, data, fds)
}
