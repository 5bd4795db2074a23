//! Plugin processes: how one is started (its own process group, the session's
//! environment, working directory, umask and ignored signals), signalled, waited for,
//! and what its exit means as an exit code.

use super::EXIT_HOST;
use crate::sys::{self, ExecSetup, Pid, Signal, WaitStatus};
use crossbeam_channel::Sender;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// What a plugin process is started with, besides its arguments and stdio.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Launch {
    pub binary: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: PathBuf,
    pub umask: Option<u32>,
    /// Signals the process starts with ignored (`NGW_SIGIGN`).
    pub ignored: Vec<Signal>,
}

impl Launch {
    /// `binary` run for session `s` with environment `env`.
    pub fn new(binary: PathBuf, env: Vec<(OsString, OsString)>, s: &ngw::Session) -> Self {
        Self {
            binary,
            env,
            cwd: s.cwd.clone(),
            umask: s.umask,
            ignored: ignored_signals(s),
        }
    }
}

/// The signals a session's process starts with ignored: those the client's parent left
/// ignored (`NGW_SIGIGN`), as a cold process would inherit them.
fn ignored_signals(session: &ngw::Session) -> Vec<Signal> {
    session
        .ignored_signals
        .iter()
        .filter_map(ngw::SignalName::number)
        .collect()
}

/// How a plugin process's stdio is set up.
#[derive(Debug)]
pub(super) struct PluginStdio {
    /// Its stdin: a pipe (protocol plugins), or the client's descriptor.
    pub stdin: Option<OwnedFd>,
    /// Its stdout, likewise.
    pub stdout: Option<OwnedFd>,
    /// Its stderr: a pipe copied to the client, or the client's descriptor.
    pub stderr: Option<OwnedFd>,
    /// Client descriptors that were closed: the process's fds of those numbers stay
    /// closed.
    pub closed: [bool; 3],
}

impl PluginStdio {
    /// Pipes for all three (copied to and from the relayed streams, or the protocol).
    pub fn piped() -> Self {
        Self {
            stdin: None,
            stdout: None,
            stderr: None,
            closed: [false; 3],
        }
    }
}

/// Starts `launch` with `args` as the leader of a new process group; `plugin_dir` is
/// its `FLEDGE_PLUGIN_DIR`.
pub(super) fn spawn_plugin(
    launch: &Launch,
    args: &[OsString],
    plugin_dir: Option<&Path>,
    stdio: PluginStdio,
) -> std::io::Result<Child> {
    let io = |fd: Option<OwnedFd>, closed: bool| match fd {
        Some(fd) => Stdio::from(fd),
        None if closed => Stdio::null(),
        None => Stdio::piped(),
    };
    let mut cmd = Command::new(&launch.binary);
    cmd.args(args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&launch.cwd)
        .stdin(io(stdio.stdin, stdio.closed[0]))
        .stdout(io(stdio.stdout, stdio.closed[1]))
        .stderr(io(stdio.stderr, stdio.closed[2]))
        .process_group(0);
    if let Some(dir) = plugin_dir {
        cmd.env("FLEDGE_PLUGIN_DIR", dir);
    }
    sys::setup_at_exec(
        &mut cmd,
        ExecSetup {
            umask: launch.umask,
            ignored: launch.ignored.clone(),
            closed: stdio.closed,
        },
    );
    cmd.spawn()
}

/// The process group a plugin process leads (it was started with `process_group(0)`).
/// Signals are sent while the leader is unreaped, so the group id names that group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProcessGroup(Pid);

impl ProcessGroup {
    /// The group `child` leads.
    pub fn of(child: &Child) -> Self {
        Self(child.id() as Pid)
    }

    /// Sends `sig` to every process of the group.
    pub fn signal(self, sig: Signal) {
        let _ = sys::signal_group(self.0, sig);
    }
}

/// A process's exit as an exit code: its code, or 128+N for a death by signal N.
pub(super) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(EXIT_HOST)
}

/// Waits for child `pid` (never waited on elsewhere) to end; its exit code, or
/// [`EXIT_HOST`] when it cannot be waited for.
pub(super) fn wait_exit_code(pid: Pid) -> i32 {
    match sys::wait_for_exit(pid) {
        Ok(status) => exit_code(status),
        Err(_) => EXIT_HOST,
    }
}

/// What the waiter of a plugin process saw.
#[derive(Debug)]
pub(super) enum Waited {
    /// It stopped with this signal.
    Stopped(Signal),
    /// It ended.
    Exited(ExitStatus),
}

/// Whether process `pid` is stopped now (`T` in `/proc/<pid>/stat`): a `SIGCONT` has
/// made it runnable by the time `kill` returns.
pub(super) fn is_stopped(pid: Pid) -> bool {
    std::fs::read(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.iter()
            .rposition(|&b| b == b')')
            .and_then(|at| stat.get(at + 2))
            == Some(&b'T')
    })
}

/// Waits for process `pid` (our child, never waited on elsewhere), reporting stops,
/// until it ends.
pub(super) fn wait_reporting_stops(pid: Pid, to: &Sender<Waited>) {
    loop {
        match sys::wait_for_stop_or_exit(pid) {
            Ok(WaitStatus::Stopped(sig)) => {
                let _ = to.send(Waited::Stopped(sig));
            }
            Ok(WaitStatus::Ended(status)) => {
                let _ = to.send(Waited::Exited(status));
                return;
            }
            Err(_) => return,
        }
    }
}
