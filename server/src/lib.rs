//! `ngd`'s server as a library: a persistent command server that speaks the Nailgun protocol.
//!
//! Programs that are slow to start stay warm inside `ngd`; short-lived clients (`ng`, the
//! stock Nailgun C client, `ng.py`) send argv, environment, working directory and stdin, and
//! get stdout, stderr and an exit code back. This crate is the server; the `ngd` binary (the
//! `ngd` crate, `cli/`) is its command line. Build your own server binary with your own warm
//! Rust commands ([`Nail`]s) on top of it.
//!
//! # Layout
//!
//! * [`event_loop`]: one `mio` loop for every socket; timers; graceful shutdown.
//! * [`conn`]: one connection's buffers and lifecycle state machine.
//! * [`session_io`]: what a running command shares with the loop (bounded both ways).
//! * [`passed_fds`]: the client's own descriptors (and pseudo-terminal) passed with its
//!   header, held until a command takes them.
//! * [`nail`]: the public [`Nail`] trait and its [`Context`].
//! * [`pool`]: the elastic thread pool commands run on.
//! * [`plugin`]: warm worker processes in any language, over the ngw protocol.
//! * [`registry`]: commands and aliases; [`builtins`]: `ng-version`, `ng-stats`, ...
//! * [`stats`]: per-command counters and latency percentiles.
//! * [`transport`]: TCP and Unix listeners and streams.
//! * [`security`]: the private runtime directory, socket files, peer credentials.
//! * [`config`]: the TOML configuration.
//! * [`idle`]: the idle exit of servers started on demand.
//! * [`memory`]: freed heap memory given back to the kernel once the server goes quiet.
//! * [`upgrade`]: a server notices that its own binary changed on disk.
//! * [`activation`]: systemd socket activation and readiness notification.
//! * [`carried_sdk`]: the worker SDKs carried inside the binary (Python, Ruby), for `sdk = ...`.
//! * [`python_sdk`]: how a worker of an `sdk = "python"` table finds the Python SDK.
//! * [`sys`]: the raw system calls of the server alone (the shared ones are `ng_sys`'s).
//!
//! The protocol itself (framing, session rules) is `ng-proto`'s; nothing here parses bytes.
//! The library installs no `tracing` subscriber: the program that embeds it chooses where
//! its log goes.

pub mod activation;
pub mod builtins;
pub mod carried_sdk;
pub mod config;
pub mod conn;
pub mod event_loop;
pub mod idle;
pub mod memory;
pub mod nail;
pub mod passed_fds;
pub mod plugin;
pub mod pool;
pub mod python_sdk;
pub mod registry;
pub mod security;
pub mod session_io;
pub mod stats;
pub mod sys;
pub mod transport;
pub mod upgrade;

pub use nail::{ClientFds, Context, Nail, Output, Stdin};
pub use session_io::CancelReason;

use crate::config::{ListenAddr, ServerConfig};
use crate::event_loop::EventLoop;
use crate::registry::{Entry, Registry, Target};
use crate::session_io::LoopNotifier;
use crate::stats::Stats;
use crate::transport::Listener;
use mio::{Poll, Waker};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The exit codes `ngd` itself sends (commands choose their own).
///
/// Shell conventions where a shell has one (127, 126, 128+N); `sysexits.h` otherwise.
pub mod exit_codes {
    /// The command does not exist (as a shell says for an unknown command).
    pub const UNKNOWN_COMMAND: i32 = 127;
    /// The command exists but could not be started.
    pub const CANNOT_START: i32 = 126;
    /// The command was cancelled because the server is stopping (128 + SIGTERM).
    pub const TERMINATED: i32 = 143;
    /// The client broke the protocol (`EX_PROTOCOL`).
    pub const PROTOCOL: i32 = 76;
    /// The client's user may not use this server (`EX_NOPERM`).
    pub const NOPERM: i32 = 77;
    /// The server cannot take the request now: too many connections, stopping
    /// (`EX_UNAVAILABLE`).
    pub const UNAVAILABLE: i32 = 69;
    /// A wait for a free worker timed out (`EX_TEMPFAIL`).
    pub const TEMPFAIL: i32 = 75;
}

/// Runtime settings of the loop, derived from [`ServerConfig`].
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Per-session protocol settings (limits, timeouts).
    pub session: ng_proto::ServerConfig,
    /// Connections served at once; more are refused with a message.
    pub max_connections: usize,
    /// How long running commands get to finish when the server stops.
    pub shutdown_grace: Duration,
    /// Pool threads kept alive.
    pub min_threads: usize,
    /// Pool threads at most; past this, commands queue.
    pub max_threads: usize,
    /// Who may connect.
    pub peer_check: security::PeerCheck,
    /// Stop after this long without a connection ([`idle`]); `None`: never.
    pub idle_exit: Option<Duration>,
    /// When the binary changes on disk, hand over: exit as soon as idle ([`upgrade`]).
    pub hand_over_on_upgrade: bool,
    /// The plugins' workers' memory budget in bytes; `None`: none.
    pub memory_budget: Option<u64>,
}

/// Called once with the bound addresses when the server is ready to serve.
pub type ReadyCallback = Box<dyn FnOnce(Vec<String>) + Send>;

/// What a reload needs: where the configuration came from, and what the command line
/// overrode.
#[derive(Clone, Debug, Default)]
pub struct ReloadSource {
    /// The file (`--config` or the default path), if any.
    pub path: Option<std::path::PathBuf>,
}

impl Settings {
    /// Settings from a configuration.
    pub fn from_config(config: &ServerConfig) -> Self {
        let limits = ng_proto::Limits {
            max_chunk_len: config.max_chunk_bytes,
        };
        let millis = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
        Self {
            session: ng_proto::ServerConfig {
                limits,
                max_header_bytes: usize::try_from(config.max_header_bytes).unwrap_or(usize::MAX),
                header_timeout: millis(config.header_timeout_ms),
                heartbeat_timeout: millis(config.heartbeat_timeout_ms),
                max_output_chunk: 1 << 20,
            },
            max_connections: config.max_connections,
            shutdown_grace: Duration::from_millis(config.shutdown_grace_ms),
            min_threads: 2,
            max_threads: config.nail_threads.max(1),
            peer_check: security::PeerCheck::for_current_user().allow_remote(config.allow_remote),
            idle_exit: config.idle_exit_ms.and_then(millis),
            hand_over_on_upgrade: false,
            memory_budget: (config.memory_budget_mb > 0)
                .then(|| config.memory_budget_mb.saturating_mul(1 << 20)),
        }
    }
}

#[derive(Debug)]
struct HandleInner {
    registry: Registry,
    stats: Stats,
    plugins: std::sync::Mutex<Vec<plugin::PluginReport>>,
    reload: AtomicBool,
    stop: AtomicBool,
    waker: Arc<Waker>,
    started: Instant,
    pool_threads: AtomicUsize,
    outdated: std::sync::Mutex<Option<upgrade::Outdated>>,
}

/// A cheap, cloneable handle on a server: statistics, aliases, stop. Commands get one
/// through [`Context::server`]; embedders through [`Server::handle`].
#[derive(Clone, Debug)]
pub struct ServerHandle {
    inner: Arc<HandleInner>,
}

impl ServerHandle {
    /// The command registry (and its aliases).
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The statistics.
    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// Asks the server to stop gracefully: no new connections, running commands get the
    /// grace period, then are cancelled.
    pub fn request_stop(&self) {
        self.inner.stop.store(true, Ordering::Release);
        let _ = self.inner.waker.wake();
    }

    /// True once a stop was requested.
    pub fn stop_requested(&self) -> bool {
        self.inner.stop.load(Ordering::Acquire)
    }

    /// Asks the server to re-read its configuration file (as SIGHUP does).
    pub fn request_reload(&self) {
        self.inner.reload.store(true, Ordering::Release);
        let _ = self.inner.waker.wake();
    }

    fn take_reload(&self) -> bool {
        self.inner.reload.swap(false, Ordering::AcqRel)
    }

    /// The plugins' state, as of the last change.
    pub fn plugins(&self) -> Vec<plugin::PluginReport> {
        self.inner
            .plugins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_plugins(&self, reports: Vec<plugin::PluginReport>) {
        *self.inner.plugins.lock().unwrap_or_else(|p| p.into_inner()) = reports;
    }

    /// Time since the server was built.
    pub fn uptime(&self) -> Duration {
        self.inner.started.elapsed()
    }

    /// Whether the server runs old code: its binary changed on disk since it started, or a
    /// newer client's own `ngd` is installed ([`upgrade`]).
    pub fn outdated(&self) -> bool {
        self.outdated_by().is_some()
    }

    /// Why the server is outdated, if it is ([`upgrade`]).
    pub fn outdated_by(&self) -> Option<upgrade::Outdated> {
        self.inner
            .outdated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_outdated(&self, why: upgrade::Outdated) {
        *self
            .inner
            .outdated
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    /// Command threads alive now.
    pub fn nail_threads(&self) -> usize {
        self.inner.pool_threads.load(Ordering::Relaxed)
    }

    fn set_pool_threads(&self, n: usize) {
        self.inner.pool_threads.store(n, Ordering::Relaxed);
    }
}

/// Errors building a server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listener could not be set up.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A non-loopback address without `allow_remote`.
    #[error(
        "refusing to listen on {0}: it is not a loopback address; anyone who can reach it \
         could run commands as you (set allow_remote = true to do it anyway)"
    )]
    NotLoopback(String),
    /// The runtime directory or socket file is unsafe or in use.
    #[error(transparent)]
    Security(#[from] security::SecurityError),
    /// An alias in the configuration names no command.
    #[error("alias '{alias}': {source}")]
    Alias {
        /// The alias.
        alias: String,
        /// Why.
        source: registry::AliasError,
    },
    /// Too many listeners.
    #[error("at most {max} listen addresses are supported")]
    TooManyListeners {
        /// The maximum.
        max: usize,
    },
    /// The event loop could not be created.
    #[error("event loop: {0}")]
    Poll(#[from] std::io::Error),
}

/// Builds a [`Server`]: configuration, commands, listeners.
#[derive(Debug)]
pub struct ServerBuilder {
    registry: Registry,
    config: ServerConfig,
    prebound: Vec<Listener>,
    handle_signals: bool,
    reload: ReloadSource,
    bridge_exe: Option<std::path::PathBuf>,
    hand_over_on_upgrade: bool,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        let mut registry = Registry::default();
        builtins::register(&mut registry);
        Self {
            registry,
            config: ServerConfig::default(),
            prebound: Vec::new(),
            handle_signals: false,
            reload: ReloadSource::default(),
            bridge_exe: None,
            hand_over_on_upgrade: false,
        }
    }
}

impl ServerBuilder {
    /// Uses this configuration (listen addresses, limits, timeouts, aliases).
    pub fn config(&mut self, config: ServerConfig) -> &mut Self {
        self.config = config;
        self
    }

    /// Registers a command that runs on the thread pool.
    pub fn nail(&mut self, name: &str, description: &str, nail: impl Nail) -> &mut Self {
        self.registry.insert(
            name,
            Entry {
                target: Target::Nail {
                    nail: Arc::new(nail),
                    inline: false,
                    client_fds: false,
                },
                description: description.to_owned(),
            },
        );
        self
    }

    /// Registers a command that runs on the thread pool and may run on the client's own
    /// descriptors: when our `ng` passed them over the Unix socket,
    /// [`Context::take_client_fds`] gives them (the command reads and writes them
    /// directly: real terminal, pipes, files); otherwise it is relayed as any command.
    pub fn nail_with_client_fds(
        &mut self,
        name: &str,
        description: &str,
        nail: impl Nail,
    ) -> &mut Self {
        self.registry.insert(
            name,
            Entry {
                target: Target::Nail {
                    nail: Arc::new(nail),
                    inline: false,
                    client_fds: true,
                },
                description: description.to_owned(),
            },
        );
        self
    }

    /// Serves on an already-bound TCP listener (e.g. port 0 in tests) instead of the
    /// configured addresses.
    pub fn tcp_listener(&mut self, listener: std::net::TcpListener) -> std::io::Result<&mut Self> {
        listener.set_nonblocking(true)?;
        self.prebound
            .push(Listener::Tcp(mio::net::TcpListener::from_std(listener)));
        Ok(self)
    }

    /// Serves on a Unix socket at `path` (bound now, removed when the server stops) instead
    /// of the configured addresses.
    pub fn unix_listener(&mut self, path: &std::path::Path) -> Result<&mut Self, ServeError> {
        let (l, guard) = security::bind_unix(path)?;
        l.set_nonblocking(true)
            .map_err(|source| ServeError::Listen {
                addr: path.display().to_string(),
                source,
            })?;
        self.prebound
            .push(Listener::Unix(mio::net::UnixListener::from_std(l), guard));
        Ok(self)
    }

    /// Serves on listening sockets passed by a service manager ([`activation`]), in
    /// addition to any other pre-bound listener; with any, the configured addresses are not
    /// bound.
    pub fn activated_listeners(
        &mut self,
        listeners: Vec<activation::Activated>,
    ) -> std::io::Result<&mut Self> {
        for l in listeners {
            match l {
                activation::Activated::Tcp(l) => {
                    self.tcp_listener(l)?;
                }
                activation::Activated::Unix(l, path) => {
                    l.set_nonblocking(true)?;
                    self.prebound.push(Listener::UnixInherited(
                        mio::net::UnixListener::from_std(l),
                        path,
                    ));
                }
            }
        }
        Ok(self)
    }

    /// Where the configuration came from, for reloads (SIGHUP, `ngd reload`).
    pub fn config_path(&mut self, path: Option<std::path::PathBuf>) -> &mut Self {
        self.reload.path = path;
        self
    }

    /// When the binary changes on disk, exit as soon as no client is connected, so that the
    /// next `ng` starts the new one (for a server `ng` auto-started; [`upgrade`]). Every
    /// server that handles signals says in `ng-stats` when it is outdated.
    pub fn hand_over_on_upgrade(&mut self, yes: bool) -> &mut Self {
        self.hand_over_on_upgrade = yes;
        self
    }

    /// Stops on SIGTERM/SIGINT (for the `ngd` binary; off for embedded servers and tests).
    pub fn handle_signals(&mut self, yes: bool) -> &mut Self {
        self.handle_signals = yes;
        self
    }

    /// The executable that runs bridges for plugins that speak another protocol than ngw
    /// (`<exe> bridge <protocol> -- <command...>`, `docs/ngw.md` §15.2). Default: this
    /// process's own executable, which is right for the `ngd` binary; a program embedding
    /// the server names an `ngd` binary here.
    pub fn bridge_exe(&mut self, path: impl Into<std::path::PathBuf>) -> &mut Self {
        self.bridge_exe = Some(path.into());
        self
    }

    /// Binds every listener and prepares the loop.
    pub fn build(self) -> Result<Server, ServeError> {
        let ServerBuilder {
            registry,
            config,
            prebound,
            handle_signals,
            reload,
            bridge_exe,
            hand_over_on_upgrade,
        } = self;
        let mut listeners = prebound;
        if listeners.is_empty() {
            for addr in &config.listen_addrs() {
                listeners.push(bind(addr, config.allow_remote)?);
            }
        }
        if listeners.len() > event_loop::MAX_LISTENERS {
            return Err(ServeError::TooManyListeners {
                max: event_loop::MAX_LISTENERS,
            });
        }
        for (alias, command) in &config.aliases {
            registry
                .add_alias(alias, command)
                .map_err(|source| ServeError::Alias {
                    alias: alias.clone(),
                    source,
                })?;
        }
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), event_loop::WAKER)?);
        let (ready_tx, ready_rx) = crossbeam_channel::unbounded();
        let handle = ServerHandle {
            inner: Arc::new(HandleInner {
                registry,
                stats: Stats::default(),
                plugins: std::sync::Mutex::new(Vec::new()),
                reload: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                waker: waker.clone(),
                started: Instant::now(),
                pool_threads: AtomicUsize::new(0),
                outdated: std::sync::Mutex::new(None),
            }),
        };
        let notifier = LoopNotifier {
            ready: ready_tx,
            waker,
        };
        let mut settings = Settings::from_config(&config);
        settings.hand_over_on_upgrade = hand_over_on_upgrade;
        let event_loop = EventLoop::new(event_loop::LoopInit {
            poll,
            listeners,
            handle: handle.clone(),
            notifier,
            ready: ready_rx,
            settings,
            handle_signals,
            plugins: config.plugins.clone(),
            bridge_exe,
            reload,
        })?;
        Ok(Server { event_loop, handle })
    }
}

fn bind(addr: &ListenAddr, allow_remote: bool) -> Result<Listener, ServeError> {
    match addr {
        ListenAddr::Tcp(sock) => {
            if !security::is_loopback(sock.ip()) {
                if !allow_remote {
                    return Err(ServeError::NotLoopback(sock.to_string()));
                }
                tracing::warn!(
                    "listening on non-loopback {sock}: anyone who can reach it can run commands"
                );
            }
            let l = mio::net::TcpListener::bind(*sock).map_err(|source| ServeError::Listen {
                addr: sock.to_string(),
                source,
            })?;
            Ok(Listener::Tcp(l))
        }
        ListenAddr::Unix(path) => {
            let runtime_dir = security::RuntimeDir::default_path();
            if path.parent() == Some(runtime_dir.as_path()) {
                // The default socket: create (or check) the private directory first.
                security::RuntimeDir::open(runtime_dir)?;
            }
            let (l, guard) = security::bind_unix(path)?;
            l.set_nonblocking(true)
                .map_err(|source| ServeError::Listen {
                    addr: path.display().to_string(),
                    source,
                })?;
            Ok(Listener::Unix(mio::net::UnixListener::from_std(l), guard))
        }
    }
}

/// A built server, ready to run.
#[derive(Debug)]
pub struct Server {
    event_loop: EventLoop,
    handle: ServerHandle,
}

impl Server {
    /// A builder with the built-in commands registered.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// A handle to stop the server or read its statistics from another thread.
    pub fn handle(&self) -> ServerHandle {
        self.handle.clone()
    }

    /// The bound addresses, as `127.0.0.1:2113` or `local:/path`.
    pub fn listening(&self) -> Vec<String> {
        self.event_loop.listening()
    }

    /// Serves until stopped (`ng-stop`, [`ServerHandle::request_stop`], or a signal when
    /// enabled).
    pub fn run(self) -> std::io::Result<()> {
        self.event_loop.run()
    }

    /// Like [`Server::run`], calling `ready` with the bound addresses once the server can
    /// serve every configured command (plugins that learn their commands from their
    /// worker's hello have heard it, or failed).
    pub fn run_with_ready(
        mut self,
        ready: impl FnOnce(Vec<String>) + Send + 'static,
    ) -> std::io::Result<()> {
        self.event_loop.on_ready = Some(Box::new(ready));
        self.event_loop.run()
    }
}
