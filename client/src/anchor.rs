//! `ng` as the anchor of a warm command's job: what keeps `^Z` working for a command that
//! leads its own session.
//!
//! A warm command given a controlling terminal (`ctty`) is the session leader: the
//! worker's child calls `setsid` and takes the pseudo-terminal. Its process group would
//! then be *orphaned* (no member has a parent in another group of the same session: the
//! command's parent, the worker, is in another session), and the kernel discards the
//! terminal's `SIGTSTP`, `SIGTTIN` and `SIGTTOU` for an orphaned group. Under a shell the
//! shell is that parent. The anchor stands in for it without a fork of the command:
//!
//! 1. the command spawns `ng` with argv[0] [`ARGV0`] and its own pid, and waits for it;
//! 2. that process forks the *keeper*, which starts a group of its own in the session, and
//!    the keeper forks the *member*, which joins the command's group; once it has joined,
//!    the spawned process exits, and the command's wait returns (the command is left with
//!    no child it did not start);
//! 3. the member's parent, the keeper, is in another group of the same session: the
//!    command's group is not orphaned, and `^Z` stops it as under a shell.
//!
//! The keeper and the member hold no descriptor but the keeper's watch on the command
//! (`pidfd`), ignore every signal they can (the member is in the terminal's foreground
//! group: `^C` must not end it), and end when the command does: the keeper sees it end
//! and exits, and the member dies with the keeper.
//!
//! A worker that starts the command as a new program in a new session (a cold JVM of the
//! exact mode) runs `ng` with argv[0] [`ARGV0_EXEC`] in its place, then the program and
//! its arguments: that process anchors its own job, then execs the program, which keeps
//! its pid, session and terminal.

use std::io::{Read as _, Write as _};
use std::os::unix::process::CommandExt as _;

/// argv[0] that makes `ng` an anchor; argv[1] is the command's pid. No command name can
/// contain the colon.
pub const ARGV0: &str = "ng:anchor";

/// argv[0] that makes `ng` anchor its own job and then exec argv[1..].
pub const ARGV0_EXEC: &str = "ng:anchored";

/// Anchors this process's job, then execs `argv` (program first, as its argv[0]); fds
/// 0–2 that were closed when `ng` started are closed again first. Exits 127 if the
/// program cannot be run.
pub fn run_then_exec(mut argv: std::env::ArgsOs, closed: u8) -> ! {
    let Some(program) = argv.next() else {
        ng_sys::process::exit_now(127);
    };
    let me = ng_sys::process::pid();
    match ng_sys::process::fork() {
        Ok(Some(anchor)) => {
            // Without an anchor the program still runs, as without this: only `^Z` is lost.
            let _ = ng_sys::process::wait_end(anchor);
        }
        Ok(None) => run(Some(me.to_string().into())),
        Err(_) => {}
    }
    for fd in 0..3 {
        if closed & (1 << fd) != 0 {
            ng_sys::process::close(fd);
        }
    }
    let err = std::process::Command::new(&program).args(argv).exec();
    let _ = writeln!(
        std::io::stderr(),
        "ng: cannot run {}: {err}",
        program.to_string_lossy()
    );
    ng_sys::process::exit_now(127);
}

/// Runs the anchor for the command `arg` names (its pid); exits the process.
pub fn run(arg: Option<std::ffi::OsString>) -> ! {
    let Some(command) = arg
        .and_then(|a| a.into_string().ok())
        .and_then(|a| a.parse::<u32>().ok())
        .filter(|pid| *pid > 1)
    else {
        ng_sys::process::exit_now(2);
    };
    ng_sys::process::close_from(0);
    for signo in 1..=libc::SIGRTMAX() {
        if signo != libc::SIGKILL && signo != libc::SIGSTOP {
            ng_sys::signal::ignore(signo);
        }
    }
    // Opened while the command waits for this process: it is the command's.
    let Ok(watch) = ng_sys::process::watch_end(command) else {
        ng_sys::process::exit_now(1);
    };
    let Ok((mut joined_r, mut joined_w)) = std::os::unix::net::UnixStream::pair() else {
        ng_sys::process::exit_now(1);
    };
    match ng_sys::process::fork() {
        Ok(Some(_keeper)) => {
            drop(joined_w);
            // One byte once the member has joined the command's group; none if it failed.
            let mut byte = [0u8];
            let code = match joined_r.read(&mut byte) {
                Ok(1) => 0,
                _ => 1,
            };
            ng_sys::process::exit_now(code);
        }
        Ok(None) => {}
        Err(_) => ng_sys::process::exit_now(1),
    }
    // The keeper.
    drop(joined_r);
    if ng_sys::process::join_group(0).is_err() {
        ng_sys::process::exit_now(1);
    }
    let keeper = ng_sys::process::pid();
    match ng_sys::process::fork() {
        Ok(Some(_member)) => {
            drop(joined_w);
            let mut fds = [libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&watch),
                events: libc::POLLIN,
                revents: 0,
            }];
            while !matches!(ng_sys::fd::poll(&mut fds, -1), Ok(n) if n > 0) {}
            ng_sys::process::exit_now(0);
        }
        Ok(None) => {}
        Err(_) => ng_sys::process::exit_now(1),
    }
    // The member.
    drop(watch);
    if ng_sys::process::die_with_parent().is_err()
        || ng_sys::process::parent_pid() != keeper
        || ng_sys::process::join_group(command).is_err()
    {
        ng_sys::process::exit_now(1);
    }
    let _ = joined_w.write_all(b"j");
    drop(joined_w);
    loop {
        ng_sys::process::pause();
    }
}
