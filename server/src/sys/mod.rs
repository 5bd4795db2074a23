//! The raw system calls of the server, each behind a small safe function.
//!
//! Contract: every function here is a thin wrapper over one system facility, takes and
//! returns plain values (pids as `u32`, descriptors as `RawFd`), never panics, and reports
//! failure as `io::Result` or `Option` where the caller can act on it. Nothing here holds
//! state or decides policy; the callers (`plugin::worker`, `plugin::host`, `security`)
//! decide. Functions marked *async-signal-safe* may be called between `fork` and `exec`.
//! Platform differences end here: Linux-only facilities (`prctl`, `sock_diag`, `/proc`)
//! have a stated fallback elsewhere.

#[cfg(target_os = "linux")]
pub mod sock_diag;

use std::io;
use std::os::fd::RawFd;

/// Our effective uid (`geteuid`).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// This process's umask, read without changing it for longer than the two calls take.
pub fn current_umask() -> u32 {
    // SAFETY: umask(2) has no memory-safety preconditions; it is set back at once.
    let old = unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old
    };
    old as u32
}

/// Tries to take an exclusive `flock` on `fd` without blocking.
pub fn try_lock_exclusive(fd: RawFd) -> io::Result<()> {
    // SAFETY: flock on a descriptor the caller keeps open; no memory is involved.
    let rc = unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Takes an exclusive `flock` on `fd`, waiting for it (retried after a signal).
pub fn lock_exclusive(fd: RawFd) -> io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor the caller keeps open; no memory is involved.
        let rc = unsafe { libc::flock(fd, libc::LOCK_EX) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Re-arms `TCP_QUICKACK` on a TCP socket (Linux; nothing elsewhere).
pub fn tcp_quickack(fd: RawFd) {
    #[cfg(target_os = "linux")]
    {
        let one: libc::c_int = 1;
        // SAFETY: a valid fd and a pointer to a live c_int of the size passed.
        unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_QUICKACK,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = fd;
}

/// Returns whole free pages of every heap arena to the kernel (glibc `malloc_trim`); true
/// if any was returned.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn malloc_trim() -> bool {
    // SAFETY: a plain glibc call without pointers; glibc locks each arena while it walks
    // it, so it is safe while other threads allocate.
    unsafe { libc::malloc_trim(0) == 1 }
}

// -- Peer credentials -----------------------------------------------------------------------

/// The effective uid of the process at the other end of a connected Unix socket: Linux
/// `SO_PEERCRED` (the credentials at `connect` time), `getpeereid` on macOS and the BSDs,
/// `Unsupported` elsewhere.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_uid(fd: RawFd) -> io::Result<u32> {
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
    Ok(cred.uid)
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
    if let Ok(pid) = i32::try_from(pid) {
        if pid > 0 {
            // SAFETY: kill(2) with a negative pid addresses a process group; no memory is
            // involved.
            unsafe {
                libc::kill(-pid, signal);
            }
        }
    }
}

/// Sends `signal` to one process.
pub fn signal(pid: u32, signal: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        if pid > 0 {
            // SAFETY: kill(2) on a pid; no memory is involved.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }
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

/// In a forked child: a new session, SIGKILL when the parent dies (Linux
/// `PR_SET_PDEATHSIG`), and `fd` on `target` without close-on-exec. Async-signal-safe.
pub fn child_setup(fd: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: only async-signal-safe calls on descriptors and integers.
    unsafe {
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        #[cfg(target_os = "linux")]
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
            return Err(io::Error::last_os_error());
        }
        // dup2 clears FD_CLOEXEC on the new descriptor; if the socket already is `target`,
        // clear it by hand.
        if fd == target {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(io::Error::last_os_error());
            }
        } else if libc::dup2(fd, target) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The pids of this process's children, from `/proc` (every thread's children; Linux, empty
/// elsewhere).
pub fn children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
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

/// What one [`recv_with_fds`] read.
#[derive(Debug, Default)]
pub struct Received {
    /// Bytes read into the buffer (0: end of file).
    pub len: usize,
    /// Descriptors that came with them (`SCM_RIGHTS`), close-on-exec.
    pub fds: Vec<std::os::fd::OwnedFd>,
    /// The kernel dropped descriptors that did not fit (`MSG_CTRUNC`).
    pub truncated: bool,
}

/// `recvmsg` on a stream socket with room for [`MAX_PASSED_FDS`] descriptors
/// (`MSG_CMSG_CLOEXEC`); never blocks if the socket is non-blocking.
pub fn recv_with_fds(fd: RawFd, buf: &mut [u8]) -> io::Result<Received> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // Room for one SCM_RIGHTS message of MAX_PASSED_FDS ints, aligned as cmsghdr wants.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; every buffer it points to outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE((MAX_PASSED_FDS * 4) as u32) } as usize;
    msg.msg_controllen = space.min(std::mem::size_of_val(&control)) as _;
    // SAFETY: plain system call with valid buffers.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut received = Received {
        len: n as usize,
        fds: Vec::new(),
        truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
    };
    // SAFETY: walking the control messages the kernel wrote into `control`; each
    // SCM_RIGHTS descriptor is ours to own from here on.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let len = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
                for i in 0..len / std::mem::size_of::<libc::c_int>() {
                    received
                        .fds
                        .push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(received)
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
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is valid; every buffer it points to outlives the call, and
    // the control message is filled within the space CMSG_SPACE says it needs.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE((fds.len() * 4) as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN((fds.len() * 4) as u32) as _;
        let out = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
        for (i, fd) in fds.iter().enumerate() {
            out.add(i).write_unaligned(*fd);
        }
        let n = libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// The number of a signal a client may forward whose default action ends a process
/// (`SIGINT`, `SIGTERM`, ...); `None` for others (`SIGWINCH`, `SIGCONT`, `SIGTSTP`, ...).
pub fn terminating_signal(name: &[u8]) -> Option<i32> {
    use ng_proto::Signal;
    match Signal::from_name(name)? {
        signal @ (Signal::Hup
        | Signal::Int
        | Signal::Quit
        | Signal::Term
        | Signal::Usr1
        | Signal::Usr2
        | Signal::Pipe
        | Signal::Alrm) => Some(signal.number()),
        _ => None,
    }
}
