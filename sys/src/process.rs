//! This process and its children: ids, the umask, the core-dump limit, an immediate exit,
//! and what a spawned child does between `fork` and `exec` ([`on_spawn`]).

use crate::check;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

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
    fn reading_the_umask_keeps_it() {
        assert_eq!(umask(), umask());
    }
}
