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
    /// `NGW_ANCHOR`: the `ng` binary, which a command that leads its own session runs as
    /// its job's anchor (`docs/ngw.md` §15.7); `None` if there is none.
    pub anchor: Option<&'a std::path::Path>,
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
    cmd.envs(&plugin.env);
    match plugin.sdk {
        Some(super::config::Sdk::Python) => {
            let sdk = crate::python_sdk::dir()
                .map_err(|e| io::Error::new(e.kind(), format!("ngd's Python SDK: {e}")))?;
            cmd.env(
                "PYTHONPATH",
                crate::python_sdk::python_path(
                    &sdk,
                    plugin.env.get("PYTHONPATH").map(String::as_str),
                    std::env::var_os("PYTHONPATH").as_deref(),
                ),
            );
        }
        None => {}
    }
    cmd.env("NGW_FD", CHANNEL_FD.to_string())
        .env("NGW_VERSION", "1")
        .env("NGW_PLUGIN", &plugin.name)
        .env("NGW_HOST_FEATURES", launch.host_features)
        .env("NGW_COMMANDS", plugin.commands.join(","));
    if let Some(ng) = launch.anchor {
        cmd.env("NGW_ANCHOR", ng);
    }
    cmd.stdin(Stdio::null()).stdout(log).stderr(log_err);
    if let Some(cwd) = &plugin.cwd {
        cmd.current_dir(cwd);
    }
    let fd = theirs.as_raw_fd();
    crate::sys::worker_child_setup(&mut cmd, fd, CHANNEL_FD);
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

pub use crate::sys::{become_subreaper, exited_child, has_exited, rss_bytes, signal_group};

/// Kills what is left of an exited worker's process group, then reaps the worker.
pub fn finish(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    signal_group(child.id(), libc::SIGKILL);
    child.wait().ok()
}

/// Reaps one child that is known to have exited.
pub fn reap(pid: u32) {
    crate::sys::reap(pid, false);
}

/// At the very end: kills and reaps every process ngd adopted, until none is left (a
/// killed orphan's own children are adopted in turn), within a second.
pub fn kill_orphans() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        let children = crate::sys::children();
        if children.is_empty() {
            return;
        }
        tracing::info!("killing {} leftover processes", children.len());
        for pid in &children {
            crate::sys::signal(*pid, libc::SIGKILL);
        }
        for pid in children {
            crate::sys::reap(pid, true);
        }
    }
}

/// A worker's hello (`docs/ngw.md` §5), as the vocabulary defines it.
pub use ngw_vocab::Hello;
