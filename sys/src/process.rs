//! This process and its children: ids, process groups, the umask, the core-dump limit, the
//! allocator's arenas, an immediate exit, a bare `fork`, a new session, watching another
//! process's end (`pidfd`) and its changes of state (`waitpid`), and what a spawned child
//! does between `fork` and `exec` ([`on_spawn`], [`on_spawn_placed`]).

use crate::check;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Caps the C allocator's arenas at `n` (glibc's `mallopt(M_ARENA_MAX)`): every thread
/// beyond them shares one, instead of glibc's default of eight per core, each keeping the
/// memory its threads freed. `false` where the C library is not glibc or refused.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn limit_malloc_arenas(n: u32) -> bool {
    let n = libc::c_int::try_from(n).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt takes two integers and only changes the allocator's settings.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, n) == 1 }
}

/// Caps the C allocator's arenas: only glibc has them.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_malloc_arenas(_n: u32) -> bool {
    false
}

/// Our real uid (`getuid`).
pub fn real_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Our effective uid (`geteuid`).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// This process's umask, read by setting it and putting it back at once.
pub fn umask() -> u32 {
    // SAFETY: umask(2) has no memory-safety preconditions and cannot fail; the old mask
    // is put back at once.
    let old = unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old
    };
    old as u32
}

/// Sets `RLIMIT_CORE` to 0: no core file is written for this process. A failure only
/// means a possible core file. Async-signal-safe.
pub fn forbid_core_dump() {
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lowering our own limit with a live rlimit.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) };
}

/// Ends the process at once with `code` (`_exit`: no destructors, no buffered output
/// flushed). Async-signal-safe.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

/// Replaces this process with the program at `path` (`execv`: argv[0] and the arguments
/// `argv`, this process's environment). Returns only on failure.
pub fn exec(path: &std::ffi::CStr, argv: &[std::ffi::CString]) -> io::Error {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: `path` and every pointer of `ptrs` are NUL-terminated strings that outlive
    // the call, and `ptrs` ends with a null pointer.
    unsafe { libc::execv(path.as_ptr(), ptrs.as_ptr()) };
    io::Error::last_os_error()
}

/// Whether this process may execute the file at `path` (`access(X_OK)`, as a shell's
/// `PATH` search asks).
pub fn may_execute(path: &std::ffi::CStr) -> bool {
    // SAFETY: `path` is a NUL-terminated string.
    unsafe { libc::access(path.as_ptr(), libc::X_OK) == 0 }
}

/// Our parent's pid (`getppid`).
pub fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions and cannot fail.
    unsafe { libc::getppid() as u32 }
}

/// Our pid (`getpid`).
pub fn pid() -> u32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() as u32 }
}

/// Puts this process in process group `pgid` of its session (0: a new group it leads).
pub fn join_group(pgid: u32) -> io::Result<()> {
    // SAFETY: setpgid on integers, for this process only.
    check(unsafe { libc::setpgid(0, pgid as libc::pid_t) }).map(drop)
}

/// Gets `SIGKILL` when the parent thread ends (Linux `PR_SET_PDEATHSIG`; elsewhere an
/// error).
pub fn die_with_parent() -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments only.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) }).map(drop)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

/// Forks this process: `Ok(None)` in the child, `Ok(Some(pid))` in the parent. Only for
/// a single-threaded process that does nothing but async-signal-safe calls afterwards.
pub fn fork() -> io::Result<Option<u32>> {
    // SAFETY: fork has no memory-safety preconditions; the contract above leaves the
    // child's use of locks and allocator to a single-threaded caller.
    let pid = check(unsafe { libc::fork() })?;
    Ok((pid != 0).then_some(pid as u32))
}

/// A descriptor that becomes readable when process `pid` ends (Linux `pidfd_open`).
pub fn watch_end(pid: u32) -> io::Result<OwnedFd> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the pidfd_open system call with integer arguments.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let fd = check(fd as libc::c_int)?;
        // SAFETY: a descriptor the kernel just made, owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

/// Closes every descriptor from `first` up (`close_range`, else one by one up to the
/// descriptor limit).
pub fn close_from(first: RawFd) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: close_range on integers; the caller gives up every descriptor from
        // `first` on.
        let rc = unsafe { libc::syscall(libc::SYS_close_range, first as libc::c_uint, !0u32, 0) };
        if rc == 0 {
            return;
        }
    }
    // SAFETY: sysconf has no preconditions.
    let max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) }.clamp(0, 1 << 20) as RawFd;
    for fd in first..max {
        // SAFETY: closing descriptors the caller gave up; EBADF is harmless.
        unsafe { libc::close(fd) };
    }
}

/// Waits for child `pid` to end; its raw wait status (`waitpid`).
pub fn wait_end(pid: u32) -> io::Result<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into a live integer.
        match check(unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) }) {
            Ok(_) => return Ok(status),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Closes descriptor `fd` (`close`); an error (not open) is ignored.
pub fn close(fd: RawFd) {
    // SAFETY: closing a descriptor the caller gives up.
    unsafe { libc::close(fd) };
}

/// Waits for any signal not ignored (`pause`).
pub fn pause() {
    // SAFETY: pause has no preconditions.
    unsafe { libc::pause() };
}

/// What a child does between `fork` and `exec`, in this order.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChildSetup {
    /// Starts a new session (`setsid`): the child leads it and its process group.
    pub new_session: bool,
    /// Gets `SIGKILL` when the parent dies (Linux `PR_SET_PDEATHSIG`; nothing elsewhere).
    pub die_with_parent: bool,
    /// Gives `SIGPIPE` its default action back.
    pub default_sigpipe: bool,
    /// Puts descriptor `.0` on `.1`, without close-on-exec (`dup2`, or clearing the flag
    /// when they are the same).
    pub pass_fd: Option<(RawFd, RawFd)>,
}

/// Makes `cmd`'s child do `setup` before it runs the program; a failing step fails the
/// spawn with its error.
pub fn on_spawn(cmd: &mut Command, setup: ChildSetup) {
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls (setsid, prctl, signal, fcntl, dup2) on integers; it
    // allocates nothing and touches no lock.
    unsafe {
        cmd.pre_exec(move || child_steps(setup));
    }
}

/// The steps of [`on_spawn`]. Async-signal-safe.
fn child_steps(setup: ChildSetup) -> io::Result<()> {
    if setup.new_session {
        // SAFETY: setsid has no preconditions.
        check(unsafe { libc::setsid() })?;
    }
    #[cfg(target_os = "linux")]
    if setup.die_with_parent {
        // SAFETY: prctl with integer arguments only.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) })?;
    }
    if setup.default_sigpipe {
        crate::signal::set_default(libc::SIGPIPE);
    }
    if let Some((fd, target)) = setup.pass_fd {
        // dup2 clears FD_CLOEXEC on the new descriptor; if `fd` already is `target`, the
        // flag is cleared by hand.
        if fd == target {
            crate::fd::clear_cloexec(fd)?;
        } else {
            // SAFETY: dup2 on integer descriptors; `target` is the child's to replace.
            check(unsafe { libc::dup2(fd, target) })?;
        }
    }
    Ok(())
}

/// Sets this process's umask to `mask`; the previous one.
pub fn set_umask(mask: u32) -> u32 {
    // SAFETY: umask(2) has no memory-safety preconditions and cannot fail.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// Makes this process the leader of a new session and process group, without a
/// controlling terminal (`setsid`); fails for a process that already leads a group.
pub fn new_session() -> io::Result<()> {
    // SAFETY: setsid has no preconditions.
    check(unsafe { libc::setsid() }).map(drop)
}

/// What [`wait_change`] saw of a child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// It exited with this status.
    Exited(i32),
    /// A signal killed it; `true` if it dumped core.
    Killed(i32, bool),
    /// A signal stopped it.
    Stopped(i32),
    /// It was continued.
    Continued,
}

/// One `waitpid` for child `pid` that reports stops and continues too (`WUNTRACED`,
/// `WCONTINUED`); without `block`, `Ok(None)` while nothing changed (`WNOHANG`). Retried
/// after a signal.
pub fn wait_change(pid: u32, block: bool) -> io::Result<Option<Change>> {
    let mut flags = libc::WUNTRACED | libc::WCONTINUED;
    if !block {
        flags |= libc::WNOHANG;
    }
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into a live integer.
        match check(unsafe { libc::waitpid(pid as libc::pid_t, &mut status, flags) }) {
            Ok(0) => return Ok(None),
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(if libc::WIFEXITED(status) {
        Change::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Change::Killed(libc::WTERMSIG(status), libc::WCOREDUMP(status))
    } else if libc::WIFSTOPPED(status) {
        Change::Stopped(libc::WSTOPSIG(status))
    } else {
        Change::Continued
    }))
}

/// The most descriptors [`Placement`] puts and signals it ignores.
pub const MAX_PLACED: usize = 16;

/// Where a spawned child's descriptors go and what it starts with, for
/// [`on_spawn_placed`]. Built by the parent, read by the child without allocating.
#[derive(Clone, Copy, Debug, Default)]
pub struct Placement {
    fds: [(RawFd, RawFd); MAX_PLACED],
    nfds: usize,
    ignored: [libc::c_int; MAX_PLACED],
    nignored: usize,
    /// Starts a new session (`setsid`).
    pub new_session: bool,
    /// Gets `SIGKILL` when the parent thread ends (Linux `PR_SET_PDEATHSIG`).
    pub die_with_parent: bool,
    /// The umask it starts with, if not the parent's.
    pub umask: Option<u32>,
    /// The child's descriptor (after placing) that becomes its controlling terminal
    /// (`TIOCSCTTY`; needs `new_session`). The terminal's foreground group is then the
    /// child's.
    pub controlling: Option<RawFd>,
}

impl Placement {
    /// Puts the parent's descriptor `fd` on the child's `target`; `false` when full.
    pub fn put(&mut self, fd: RawFd, target: RawFd) -> bool {
        if self.nfds == MAX_PLACED {
            return false;
        }
        self.fds[self.nfds] = (fd, target);
        self.nfds += 1;
        true
    }

    /// Starts the child with signal `signo` ignored (every other one at its default);
    /// `false` when full.
    pub fn ignore(&mut self, signo: libc::c_int) -> bool {
        if self.nignored == MAX_PLACED {
            return false;
        }
        self.ignored[self.nignored] = signo;
        self.nignored += 1;
        true
    }
}

/// Makes `cmd`'s child do `placement` before it runs the program: a new session, death
/// with its parent, every signal at its default but those it names ignored, the umask,
/// and each descriptor on its target (all moved out of the way first, so that one
/// target cannot clobber another's source). A failing step fails the spawn.
pub fn on_spawn_placed(cmd: &mut Command, placement: Placement) {
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls (setsid, prctl, sigaction, umask, fcntl, dup2, ioctl) on integers
    // and a copy of `placement`; it allocates nothing and touches no lock.
    unsafe {
        cmd.pre_exec(move || placed_steps(&placement));
    }
}

/// The steps of [`on_spawn_placed`]. Async-signal-safe.
fn placed_steps(p: &Placement) -> io::Result<()> {
    if p.new_session {
        new_session()?;
    }
    #[cfg(target_os = "linux")]
    if p.die_with_parent {
        die_with_parent()?;
    }
    for signo in 1..32 {
        if signo != libc::SIGKILL && signo != libc::SIGSTOP {
            crate::signal::set_default(signo);
        }
    }
    for &signo in &p.ignored[..p.nignored] {
        crate::signal::ignore(signo);
    }
    if let Some(mask) = p.umask {
        set_umask(mask);
    }
    let mut moved = [0 as RawFd; MAX_PLACED];
    for (i, &(fd, _)) in p.fds[..p.nfds].iter().enumerate() {
        // SAFETY: fcntl F_DUPFD_CLOEXEC on an integer descriptor: a copy above the
        // targets that the exec closes.
        moved[i] = check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 64) })?;
    }
    for (i, &(_, target)) in p.fds[..p.nfds].iter().enumerate() {
        crate::fd::put_on(moved[i], target)?;
    }
    if let Some(fd) = p.controlling {
        crate::term::take_controlling(fd)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_placed_child_gets_its_descriptors_and_its_stops_are_seen() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (r, w) = crate::fd::pipe().unwrap();
        let mut cmd = Command::new("sh");
        // fd 4 and fd 5 swap places with each other's source, which the placement must
        // survive; the shell stops itself once, then reports its umask.
        cmd.args(["-c", "kill -STOP $$; umask >&5; echo x >&4"]);
        let mut p = Placement::default();
        assert!(p.put(theirs.as_raw_fd(), 5));
        assert!(p.put(w.as_raw_fd(), 4));
        p.new_session = true;
        p.umask = Some(0o027);
        on_spawn_placed(&mut cmd, p);
        let child = cmd.spawn().unwrap();
        drop(theirs);
        drop(w);
        assert!(matches!(
            wait_change(child.id(), true).unwrap(),
            Some(Change::Stopped(libc::SIGSTOP))
        ));
        crate::signal::kill(child.id(), libc::SIGCONT);
        let mut change = wait_change(child.id(), true).unwrap();
        if change == Some(Change::Continued) {
            change = wait_change(child.id(), true).unwrap();
        }
        assert_eq!(change, Some(Change::Exited(0)));
        std::mem::forget(child); // reaped above
        assert_eq!(std::io::read_to_string(ours).unwrap().trim(), "0027");
        let mut buf = [0u8; 8];
        assert_eq!(crate::fd::read(r.as_raw_fd(), &mut buf).unwrap(), 2);
    }

    #[test]
    fn a_child_gets_its_session_and_descriptor() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "ps -o sid= -p $$ >&5; echo $$ >&5"]);
        on_spawn(
            &mut cmd,
            ChildSetup {
                new_session: true,
                die_with_parent: true,
                default_sigpipe: true,
                pass_fd: Some((theirs.as_raw_fd(), 5)),
            },
        );
        let status = cmd.status().unwrap();
        assert!(status.success());
        drop(theirs);
        let text = std::io::read_to_string(ours).unwrap();
        let words: Vec<&str> = text.split_whitespace().collect();
        // A session leader: its session id is its pid.
        assert_eq!(words.len(), 2, "{text:?}");
        assert_eq!(words[0], words[1]);
    }

    #[test]
    fn a_watch_sees_a_process_end_and_a_wait_its_status() {
        use std::os::fd::AsRawFd;
        #[allow(clippy::zombie_processes)] // reaped by wait_end, the function under test
        let child = Command::new("sh")
            .args(["-c", "sleep 0.2; exit 3"])
            .spawn()
            .unwrap();
        let watch = watch_end(child.id()).unwrap();
        let mut fds = [libc::pollfd {
            fd: watch.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(crate::fd::poll(&mut fds, 0).unwrap(), 0); // still running
        assert_eq!(crate::fd::poll(&mut fds, 10_000).unwrap(), 1);
        let status = wait_end(child.id()).unwrap();
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 3);
        assert!(wait_end(child.id()).is_err()); // reaped
        std::mem::forget(child); // reaped above: its handle has nothing left to wait for
    }

    #[test]
    fn reading_the_umask_keeps_it() {
        assert_eq!(umask(), umask());
    }
}
