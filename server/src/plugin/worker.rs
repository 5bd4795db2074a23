//! Spawning one worker process and owning its channel.
//!
//! `docs/ngw.md` §1: a `socketpair(AF_UNIX, SOCK_STREAM)`; our end non-blocking and
//! close-on-exec, the worker's end on fd 3 (`NGW_FD=3`); stdin `/dev/null`; stdout and
//! stderr appended to the plugin's log; a new session (`setsid`) so the whole process group
//! can be signalled; `PR_SET_PDEATHSIG(SIGKILL)` on Linux so a worker never outlives an
//! `ngd` killed with SIGKILL.

use super::config::{PluginConfig, Protocol};
use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// The fd number the worker finds its channel on.
pub const CHANNEL_FD: i32 = 3;

/// A spawned worker: the process and our end of its channel.
#[derive(Debug)]
pub struct Spawned {
    /// The process (its pid is also its process group).
    pub child: Child,
    /// Our end of the channel, non-blocking.
    pub channel: mio::net::UnixStream,
}

/// How ngd starts a plugin's workers.
#[derive(Clone, Debug)]
pub struct Launch<'a> {
    /// The `ngd` executable that runs bridges (`ngd bridge <protocol> -- <command...>`).
    pub bridge_exe: &'a std::path::Path,
    /// `NGW_HOST_FEATURES`: the ngw extensions this host supports (`docs/ngw.md` §15).
    pub host_features: &'a str,
}

/// Starts a worker for `plugin`: its `command` for an ngw plugin, else the bridge for its
/// protocol with `command` as the bridge's arguments and `NGW_BRIDGE_CONFIG` set.
pub fn spawn(plugin: &PluginConfig, launch: &Launch<'_>) -> io::Result<Spawned> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    let log_path = plugin.log_path();
    if let Some(dir) = log_path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode_private()
            .create(dir)?;
    }
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)?;
    let log_err = log.try_clone()?;
    let mut cmd = match plugin.protocol {
        Protocol::Ngw => {
            let mut cmd = Command::new(&plugin.command[0]);
            cmd.args(&plugin.command[1..]);
            cmd
        }
        protocol => {
            let mut cmd = Command::new(launch.bridge_exe);
            cmd.args(["bridge", protocol.as_str(), "--"])
                .args(&plugin.command)
                .env("NGW_BRIDGE_CONFIG", plugin.bridge_config().to_json());
            cmd
        }
    };
    cmd.envs(&plugin.env)
        .env("NGW_FD", CHANNEL_FD.to_string())
        .env("NGW_VERSION", "1")
        .env("NGW_PLUGIN", &plugin.name)
        .env("NGW_HOST_FEATURES", launch.host_features)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    if let Some(cwd) = &plugin.cwd {
        cmd.current_dir(cwd);
    }
    let fd = theirs.as_raw_fd();
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            #[cfg(target_os = "linux")]
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                return Err(io::Error::last_os_error());
            }
            // dup2 clears FD_CLOEXEC on the new descriptor; if the socket already is fd 3,
            // clear it by hand.
            if fd == CHANNEL_FD {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(fd, CHANNEL_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(theirs);
    Ok(Spawned {
        child,
        channel: mio::net::UnixStream::from_std(ours),
    })
}

trait PrivateDir {
    fn mode_private(&mut self) -> &mut Self;
}

impl PrivateDir for std::fs::DirBuilder {
    fn mode_private(&mut self) -> &mut Self {
        use std::os::unix::fs::DirBuilderExt;
        self.mode(0o700)
    }
}

/// Sends `signal` to the worker's whole process group (it leads its own session).
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

/// Has the worker exited? Checked with `waitid(WNOWAIT)`, which leaves the zombie in
/// place, so its process group id stays reserved until [`finish`] reaps it: the group can
/// then be killed without any risk of hitting a reused id.
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

/// Kills what is left of an exited worker's process group, then reaps the worker.
pub fn finish(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    signal_group(child.id(), libc::SIGKILL);
    child.wait().ok()
}

/// Makes this process adopt the orphaned descendants of its children (Linux
/// `PR_SET_CHILD_SUBREAPER`), so that nothing a worker's commands leave behind escapes ngd:
/// ngd reaps them as they exit and kills those still running when it stops.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
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

/// Reaps one child that is known to have exited.
pub fn reap(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: waitpid on a specific, exited child; the status is discarded.
        unsafe {
            let mut status = 0;
            libc::waitpid(pid, &mut status, libc::WNOHANG);
        }
    }
}

/// The pids of this process's children, from `/proc` (every thread's children).
pub fn children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for task in tasks.flatten() {
        let path = task.path().join("children");
        if let Ok(text) = std::fs::read_to_string(path) {
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

/// At the very end: kills and reaps every process ngd adopted, until none is left (a
/// killed orphan's own children are adopted in turn), within a second.
pub fn kill_orphans() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        let children = children();
        if children.is_empty() {
            return;
        }
        tracing::info!("killing {} leftover processes", children.len());
        for pid in &children {
            if let Ok(pid) = i32::try_from(*pid) {
                // SAFETY: kill(2) on our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        for pid in children {
            if let Ok(pid) = i32::try_from(pid) {
                // SAFETY: waitpid on our own child, which was just killed.
                unsafe {
                    let mut status = 0;
                    libc::waitpid(pid, &mut status, 0);
                }
            }
        }
    }
}

/// The resident set size of a process, in bytes (`/proc/<pid>/statm`).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// The fields of a worker's hello that ngd uses (`docs/ngw.md` §5).
#[derive(Clone, Debug, Default, serde::Deserialize, PartialEq, Eq)]
pub struct Hello {
    /// Must be 1.
    pub protocol: Option<i64>,
    /// The worker's pid.
    pub pid: Option<u32>,
    /// Commands it serves.
    #[serde(default)]
    pub commands: Vec<String>,
    /// `interrupt`, `fork`, ...
    #[serde(default)]
    pub features: Vec<String>,
    /// Its inbound payload cap.
    pub max_chunk: Option<u64>,
    /// Its hangup-to-kill delay.
    pub kill_grace_ms: Option<u64>,
    /// With `mux`: how many sessions it runs at once.
    pub max_sessions: Option<u64>,
    /// SDK name, for status.
    pub sdk: Option<String>,
    /// A refusal to start.
    pub error: Option<String>,
}
