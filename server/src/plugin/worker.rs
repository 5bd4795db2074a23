//! Spawning one worker process and owning its channel: [`spawn`], then a [`Worker`]
//! writes what its machine owes the channel and reads what arrives, without blocking.
//!
//! `docs/ngw.md` §1: a `socketpair(AF_UNIX, SOCK_STREAM)`; our end non-blocking and
//! close-on-exec, the worker's end on fd 3 (`NGW_FD=3`); stdin `/dev/null`; stdout and
//! stderr appended to the plugin's log; a new session (`setsid`) so the whole process group
//! can be signalled; `PR_SET_PDEATHSIG(SIGKILL)` on Linux so a worker never outlives an
//! `ngd` killed with SIGKILL.

use super::config::{PluginConfig, Protocol};
use super::machine::{Machine, WorkerEnd};
use bytes::{Buf, BytesMut};
use std::fs::OpenOptions;
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

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

/// One worker process and its channel, as the host keeps it.
#[derive(Debug)]
pub struct Worker {
    /// Unique per spawned worker (slots are reused; serials are not).
    pub serial: u64,
    /// Its protocol, sessions and timers.
    pub machine: Machine,
    /// The process (its pid is also its process group).
    pub child: Child,
    /// Our end of its channel, registered for readiness.
    pub channel: mio::net::UnixStream,
    /// Bytes read and not yet decoded.
    pub rbuf: BytesMut,
    /// The channel may have bytes to read (edge-triggered: set by readiness, cleared at
    /// `WouldBlock`).
    pub readable: bool,
    /// The channel may take bytes.
    pub writable: bool,
    /// Its deadline in the loop's timer heap, if one is there.
    pub timer_at: Option<Instant>,
    /// Its own resident memory, as last measured (when ready, after each session): what
    /// `max_memory_mb` caps, and its footprint until the budget has one.
    pub rss: u64,
}

/// What reading a worker's channel left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Bytes may be waiting to be decoded: decode, then read again.
    More,
    /// Nothing more to read until the channel is ready again.
    Drained,
}

impl Worker {
    /// A worker just spawned, its channel registered.
    pub fn new(serial: u64, machine: Machine, child: Child, channel: mio::net::UnixStream) -> Self {
        Self {
            serial,
            machine,
            child,
            channel,
            rbuf: BytesMut::new(),
            readable: true,
            writable: true,
            timer_at: None,
            rss: 0,
        }
    }

    /// Its pid, which is also its process group.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes what its machine owes the channel until it would block. A client's
    /// descriptors go with the first byte of their session's header (one `sendmsg`).
    pub fn flush(&mut self) -> Result<(), WorkerEnd> {
        while self.writable && !self.machine.wbuf.is_empty() {
            let (len, fds) = self.machine.next_write();
            let data = &self.machine.wbuf[..len];
            let result = match fds {
                Some(passed) => {
                    crate::sys::send_with_fds(self.channel.as_raw_fd(), data, &passed.raw())
                }
                None => self.channel.write(data),
            };
            match result {
                Ok(n) => {
                    self.machine.wbuf.advance(n);
                    self.machine.wrote(n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.writable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(WorkerEnd::ChannelFailed(e.to_string())),
            }
        }
        Ok(())
    }

    /// Reads once from the channel into `rbuf`, through `scratch`; the end of the channel
    /// ends the worker.
    pub fn fill(&mut self, scratch: &mut [u8]) -> Result<Fill, WorkerEnd> {
        if !self.readable {
            return Ok(Fill::Drained);
        }
        match self.channel.read(scratch) {
            Ok(0) => {
                self.readable = false;
                Err(WorkerEnd::Closed)
            }
            Ok(n) => {
                self.rbuf.extend_from_slice(&scratch[..n]);
                Ok(Fill::More)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                self.readable = false;
                Ok(Fill::Drained)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(Fill::More),
            Err(e) => Err(WorkerEnd::ChannelFailed(e.to_string())),
        }
    }
}

/// What every worker of a host is started with: the executable that runs bridges and the
/// `ng` beside ngd.
#[derive(Debug, Default)]
pub struct Launcher {
    /// The executable that runs bridges (default: this process's).
    bridge_exe: Option<PathBuf>,
    /// The `ng` beside ngd, looked for once: workers' `NGW_ANCHOR` (not one on `PATH`,
    /// which could be another program of that name).
    anchor: OnceLock<Option<PathBuf>>,
}

impl Launcher {
    /// A launcher whose bridges run as `bridge_exe` (`None`: this process's executable).
    pub fn new(bridge_exe: Option<PathBuf>) -> Self {
        Self {
            bridge_exe,
            anchor: OnceLock::new(),
        }
    }

    /// Starts a worker for `plugin`, announcing `host_features` (`NGW_HOST_FEATURES`).
    pub fn spawn(&self, plugin: &PluginConfig, host_features: &str) -> io::Result<Spawned> {
        let bridge_exe = match &self.bridge_exe {
            Some(p) => p.clone(),
            None => std::env::current_exe()?,
        };
        let anchor = self.anchor.get_or_init(|| {
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.join("ng")).filter(|p| p.is_file())
        });
        let launch = Launch {
            bridge_exe: &bridge_exe,
            host_features,
            anchor: anchor.as_deref(),
        };
        spawn(plugin, &launch)
    }
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
            if plugin.sdk == Some(super::config::Sdk::Ruby) {
                let sdk = crate::carried_sdk::RUBY
                    .dir()
                    .map_err(|e| io::Error::new(e.kind(), format!("ngd's Ruby SDK: {e}")))?;
                cmd.arg(sdk.join("bin/ngw-ruby"));
            }
            if plugin.sdk == Some(super::config::Sdk::Node) {
                let sdk = crate::carried_sdk::NODE
                    .dir()
                    .map_err(|e| io::Error::new(e.kind(), format!("ngd's Node SDK: {e}")))?;
                cmd.arg(sdk.join("bin/ngw-node"));
                // The native piece, unless the table names one.
                if !plugin.env.contains_key("NGW_NODE_NATIVE") {
                    let native = std::env::current_exe()
                        .ok()
                        .and_then(|exe| crate::carried_sdk::node_native(&exe))
                        .ok_or_else(|| {
                            io::Error::new(
                                io::ErrorKind::NotFound,
                                format!(
                                    "ngd's Node SDK: its native piece {} is neither beside ngd \
                                     nor in ../lib/ngd (cargo build -p ngw-node-native)",
                                    crate::carried_sdk::NODE_NATIVE
                                ),
                            )
                        })?;
                    cmd.env("NGW_NODE_NATIVE", native);
                }
            }
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
    // Where workers keep what they make for the next start (learned preloads, the JVM
    // worker's class-data caches); the plugin's own `env` may name another.
    cmd.env("NGW_STATE_DIR", super::config::state_dir().join("workers"));
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
        Some(super::config::Sdk::Ruby | super::config::Sdk::Node) | None => {}
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
