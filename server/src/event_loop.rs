//! The event loop: one thread, one `mio::Poll`, every socket.
//!
//! # Tokens
//!
//! | token | what |
//! |---|---|
//! | [`WAKER`] | a command thread has news ([`SessionIo`] notifications on the ready channel) |
//! | [`SIGNALS`] | SIGTERM, SIGINT or SIGHUP arrived |
//! | `FIRST_LISTENER..FIRST_CONN` | the listeners, in the order given |
//! | `FIRST_CONN + k` | the connection in slab slot `k` |
//! | `FIRST_WORKER + k` | the channel of plugin worker `k` ([`crate::plugin::host`]) |
//!
//! # One turn
//!
//! Poll (with the earliest timer as the timeout), then: accept on ready listeners; for each
//! ready connection set its readiness flags and *service* it; service every connection a
//! command thread notified; fire due timers; advance a pending shutdown.
//!
//! Servicing a connection is always the same steps, so every path converges: take what its
//! command produced, read and decode what the client sent (until `WouldBlock`, unless its
//! stdin backlog is over the high-water mark), act on the session's events, write until
//! `WouldBlock`, then move the lifecycle on (see [`crate::conn`]). Nothing a client sends can
//! end the loop: errors end that connection only, and are logged with its serial number,
//! peer and state (never environment values).
//!
//! # Plugins
//!
//! The plugin host ([`PluginHost`]) is a component of its own: the loop hands it worker
//! readiness, client stdin, hangups and its timers, and gives it a [`Clients`] view of the
//! connections ([`ConnClients`]) for what sessions send back. Every timer of the server,
//! connections' and the host's, is in one heap ([`Timer`]).

use crate::conn::{Conn, ConnState, PluginState, Running};
use crate::nail::Context;
use crate::plugin::{
    session::FdOffer, Bound, Clients, HostInit, HostTimer, PluginConfig, PluginHost, Queued,
    WorkerKey, FIRST_WORKER,
};
use crate::pool::Pool;
use crate::registry::Target;
use crate::security::PeerVerdict;
use crate::session_io::{
    CancelReason, ConnKey, LoopNotifier, SessionIo, OUTPUT_HIGH_WATER, OUTPUT_LOW_WATER,
    STDIN_HIGH_WATER, STDIN_PREFETCH,
};
use crate::transport::{Listener, PeerAddr, Stream};
use crate::{exit_codes, ServerHandle, Settings};
use bytes::Buf;
use crossbeam_channel::Receiver;
use mio::{Events, Poll, Token};
use ng_proto::ext::Features;
use ng_proto::{ExtensionEvent, ProtocolError, ServerEvent, ServerSession};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use slab::Slab;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, ErrorKind, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Command threads wake the loop through this token.
pub const WAKER: Token = Token(0);
/// Signals arrive on this token.
pub const SIGNALS: Token = Token(1);
const FIRST_LISTENER: usize = 2;
const FIRST_CONN: usize = 64;
/// How many listeners a server may have.
pub const MAX_LISTENERS: usize = FIRST_CONN - FIRST_LISTENER;

/// Connections over the limit still get a refusal message, up to this many more; past that
/// they are closed at once.
const REFUSAL_MARGIN: usize = 64;
/// How long a connection may stay open after its `X` waiting for the client to close.
const DRAIN_LINGER: Duration = Duration::from_secs(2);
/// After cancelling at shutdown, how long to wait for the exit codes to be written.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(2);
/// At most this much is read from one connection per loop turn; the rest waits for the next
/// turn, so one busy client (a huge header, junk after its exit code) cannot delay others.
const READ_BUDGET: usize = 1 << 20;
/// How long to wait before accepting again after running out of file descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// An entry of the server's one timer heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// A connection's earliest deadline (slot, serial).
    Conn(usize, u64),
    /// A plugin host deadline.
    Host(HostTimer),
}

/// Things the per-connection functions need besides the connection itself.
pub(crate) struct Core {
    pub(crate) handle: ServerHandle,
    pool: Pool,
    notifier: LoopNotifier,
    settings: Settings,
}

#[derive(Debug)]
struct Stopping {
    /// End of the grace period: nails are cancelled, plugin sessions get `i SIGTERM`.
    cancel_at: Instant,
    /// Plugin sessions that have not sent their `X` by then are answered by ngd.
    plugin_deadline: Option<Instant>,
    /// Connections still open then are closed; workers finish their stop escalation.
    give_up_at: Option<Instant>,
}

/// Everything [`EventLoop::new`] takes.
pub(crate) struct LoopInit {
    pub(crate) poll: Poll,
    pub(crate) listeners: Vec<Listener>,
    pub(crate) handle: ServerHandle,
    pub(crate) notifier: LoopNotifier,
    pub(crate) ready: Receiver<ConnKey>,
    pub(crate) settings: Settings,
    pub(crate) handle_signals: bool,
    pub(crate) plugins: Vec<PluginConfig>,
    pub(crate) bridge_exe: Option<std::path::PathBuf>,
    pub(crate) reload: crate::ReloadSource,
}

/// The loop. Built by [`crate::ServerBuilder::build`], driven by [`crate::Server::run`].
pub struct EventLoop {
    poll: Poll,
    listeners: Vec<Listener>,
    conns: Slab<Conn>,
    core: Core,
    ready: Receiver<ConnKey>,
    timers: BinaryHeap<Reverse<(Instant, Timer)>>,
    signals: Option<Signals>,
    stopping: Option<Stopping>,
    next_serial: u64,
    accept_paused_until: Option<Instant>,
    scratch: Vec<u8>,
    /// The plugin pools and their workers.
    host: PluginHost,
    /// Connections to service again before the turn ends (a worker wrote to them).
    dirty_conns: Vec<usize>,
    /// Connections that used their read budget: serviced again next turn.
    revisit: Vec<usize>,
    /// Where to re-read the configuration from.
    reload: crate::ReloadSource,
    /// When to hand freed memory back to the kernel ([`crate::memory`]): set when a
    /// connection closes, acted on if none is open by then.
    release_memory_at: Option<Instant>,
    /// Called once the server is ready: listening, and every plugin that learns its
    /// commands from its worker's hello has heard it (or failed).
    pub(crate) on_ready: Option<crate::ReadyCallback>,
    /// Idle exit ([`crate::idle`]), when configured.
    idle: Option<crate::idle::IdleExit>,
    /// The binary's file, watched for upgrades ([`crate::upgrade`]); the `ngd` binary only.
    upgrade: Option<crate::upgrade::Watch>,
}

impl std::fmt::Debug for EventLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLoop")
            .field("listeners", &self.listeners.len())
            .field("conns", &self.conns.len())
            .finish_non_exhaustive()
    }
}

impl EventLoop {
    pub(crate) fn new(init: LoopInit) -> io::Result<Self> {
        let LoopInit {
            poll,
            mut listeners,
            handle,
            notifier,
            ready,
            settings,
            handle_signals,
            plugins,
            bridge_exe,
            reload,
        } = init;
        for (i, l) in listeners.iter_mut().enumerate() {
            l.register(poll.registry(), Token(FIRST_LISTENER + i))?;
        }
        let signals = if handle_signals {
            let mut s = Signals::new([SIGTERM, SIGINT, SIGHUP, SIGCHLD])?;
            poll.registry()
                .register(&mut s, SIGNALS, mio::Interest::READABLE)?;
            Some(s)
        } else {
            None
        };
        let pool = Pool::new(settings.min_threads, settings.max_threads);
        let idle = settings
            .idle_exit
            .map(|after| crate::idle::IdleExit::new(after, Instant::now()));
        let upgrade = if handle_signals {
            crate::upgrade::Watch::current_exe(Instant::now())
        } else {
            None
        };
        let host = PluginHost::new(HostInit {
            plugins,
            handle: handle.clone(),
            registry: poll.registry().try_clone()?,
            bridge_exe,
            // The binary owns its process tree: adopt what workers' commands leave behind,
            // and reap it on SIGCHLD. (An embedding program keeps its own tree.)
            subreaper: handle_signals,
            memory_budget: settings.memory_budget,
        });
        let event_loop = Self {
            poll,
            listeners,
            conns: Slab::new(),
            core: Core {
                handle,
                pool,
                notifier,
                settings,
            },
            ready,
            timers: BinaryHeap::new(),
            signals,
            stopping: None,
            next_serial: 0,
            accept_paused_until: None,
            scratch: vec![0; 64 << 10],
            host,
            dirty_conns: Vec::new(),
            revisit: Vec::new(),
            reload,
            release_memory_at: None,
            on_ready: None,
            idle,
            upgrade,
        };
        Ok(event_loop)
    }

    /// What the listeners are bound to.
    pub fn listening(&self) -> Vec<String> {
        self.listeners.iter().map(Listener::describe).collect()
    }

    /// Runs until the server is stopped and every connection is done.
    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        self.core.handle.set_pool_threads(self.core.pool.threads());
        self.settle(Instant::now());
        loop {
            self.prune_timers();
            if self.on_ready.is_some() && self.host.is_warm() {
                if let Some(ready) = self.on_ready.take() {
                    ready(self.listening());
                }
            }
            let timeout = self.next_timeout(Instant::now());
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            for event in events.iter() {
                match event.token() {
                    WAKER => {}
                    SIGNALS => self.on_signals(),
                    Token(t) if (FIRST_LISTENER..FIRST_CONN).contains(&t) => {
                        self.accept_all(t - FIRST_LISTENER, now)
                    }
                    Token(t) if t >= FIRST_WORKER => {
                        let readable =
                            event.is_readable() || event.is_read_closed() || event.is_error();
                        let writable =
                            event.is_writable() || event.is_write_closed() || event.is_error();
                        let mut clients = ConnClients {
                            conns: &mut self.conns,
                            dirty: &mut self.dirty_conns,
                        };
                        self.host
                            .on_ready(t - FIRST_WORKER, readable, writable, &mut clients, now);
                    }
                    Token(t) => {
                        let slot = t - FIRST_CONN;
                        if let Some(conn) = self.conns.get_mut(slot) {
                            if event.is_readable() || event.is_read_closed() || event.is_error() {
                                conn.readable = true;
                            }
                            if event.is_writable() || event.is_write_closed() || event.is_error() {
                                conn.writable = true;
                            }
                            self.service(slot, now);
                        }
                    }
                }
            }
            for slot in std::mem::take(&mut self.revisit) {
                self.service(slot, now);
            }
            while let Ok(key) = self.ready.try_recv() {
                if self
                    .conns
                    .get(key.slot)
                    .is_some_and(|c| c.serial == key.serial)
                {
                    self.service(key.slot, now);
                }
            }
            self.fire_timers(now);
            if self.release_memory_at.is_some_and(|t| now >= t) {
                self.release_memory_at = None;
                if self.conns.is_empty() {
                    let released = crate::memory::release_free_memory();
                    tracing::debug!(released, "quiet: freed memory handed back");
                }
            }
            self.settle(now);
            if self.accept_paused_until.is_some_and(|t| now >= t) {
                self.accept_paused_until = None;
                for i in 0..self.listeners.len() {
                    self.accept_all(i, now);
                }
            }
            self.upgrade_tick(now);
            self.idle_tick(now);
            if self.core.handle.take_reload() && self.stopping.is_none() {
                self.reload(now);
                self.settle(now);
            }
            if self.core.handle.stop_requested() && self.stopping.is_none() {
                self.begin_stop(now);
            }
            if self.stopping.is_some() && self.advance_stop(now) {
                let mut clients = ConnClients {
                    conns: &mut self.conns,
                    dirty: &mut self.dirty_conns,
                };
                self.host.kill_all(&mut clients, now);
                tracing::info!("stopped");
                return Ok(());
            }
            self.core.handle.set_pool_threads(self.core.pool.threads());
        }
    }

    /// Works off everything a turn left for later: workers to read or write, connections a
    /// worker wrote to, pools with sessions to assign or workers to start; then files the
    /// host's new deadlines into the timer heap.
    fn settle(&mut self, now: Instant) {
        loop {
            let mut clients = ConnClients {
                conns: &mut self.conns,
                dirty: &mut self.dirty_conns,
            };
            self.host.settle(&mut clients, now);
            let mut conns = std::mem::take(&mut self.dirty_conns);
            if conns.is_empty() && !self.host.has_work() {
                break;
            }
            conns.sort_unstable();
            conns.dedup();
            for c in conns {
                self.service(c, now);
            }
        }
        for (at, timer) in self.host.take_timers() {
            self.timers.push(Reverse((at, Timer::Host(timer))));
        }
        self.host.publish();
    }

    /// Re-reads the configuration: plugins whose table changed (or that were disabled) are
    /// replaced by fresh pools, removed ones retire after their running sessions, new ones
    /// start; aliases are added. Running sessions are never dropped. Listen addresses and
    /// limits need a restart.
    fn reload(&mut self, now: Instant) {
        let loaded = match crate::config::ServerConfig::load(self.reload.path.as_deref()) {
            Ok(l) => l.config,
            Err(e) => {
                tracing::error!("reload failed, keeping the running configuration: {e}");
                return;
            }
        };
        let (kept, started) = self.host.reload(&loaded.plugins, now);
        for (alias, command) in &loaded.aliases {
            if let Err(e) = self.core.handle.registry().add_alias(alias, command) {
                tracing::warn!("reload: alias '{alias}': {e}");
            }
        }
        tracing::info!("configuration reloaded: {kept} plugins kept, {started} (re)started");
    }

    fn next_timeout(&self, now: Instant) -> Option<Duration> {
        if !self.revisit.is_empty() {
            return Some(Duration::ZERO);
        }
        let mut next = self.timers.peek().map(|Reverse((t, _))| *t);
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        consider(self.accept_paused_until);
        consider(self.release_memory_at);
        consider(self.idle.as_ref().and_then(crate::idle::IdleExit::deadline));
        consider(
            self.upgrade
                .as_ref()
                .and_then(crate::upgrade::Watch::deadline),
        );
        if let Some(s) = &self.stopping {
            consider(Some(s.cancel_at));
            consider(s.plugin_deadline);
            consider(s.give_up_at);
            consider(s.give_up_at.map(|t| t + self.host.max_stop_time()));
        }
        next.map(|t| t.saturating_duration_since(now))
    }

    /// Looks at the binary when due: once it changed, the server is outdated (`ng-stats`
    /// says so) and, when it hands over on upgrades, exits as soon as it is idle.
    fn upgrade_tick(&mut self, now: Instant) {
        let Some(watch) = self.upgrade.as_mut().filter(|w| w.due(now)) else {
            return;
        };
        let seen = crate::upgrade::Stamp::of(watch.path());
        if !watch.observe(seen, now) {
            return;
        }
        self.core.handle.set_outdated();
        if !self.core.settings.hand_over_on_upgrade {
            tracing::warn!(
                "{} changed on disk: this server runs the old version until restarted",
                watch.path().display()
            );
            return;
        }
        tracing::info!(
            "{} changed on disk: handing over to it once no client is connected",
            watch.path().display()
        );
        self.idle
            .get_or_insert_with(|| crate::idle::IdleExit::new(Duration::ZERO, now))
            .hurry();
    }

    /// Advances the idle exit: removes the socket files, then stops, once nobody has been
    /// connected for the configured period.
    fn idle_tick(&mut self, now: Instant) {
        let Some(idle) = self.idle.as_mut().filter(|_| self.stopping.is_none()) else {
            return;
        };
        match idle.update(self.conns.len(), now) {
            crate::idle::IdleAction::None => {}
            crate::idle::IdleAction::Retire => {
                tracing::info!(
                    "idle for {:.1}s: no longer accepting new clients",
                    idle.after().as_secs_f64()
                );
                for l in &self.listeners {
                    l.unlink_socket_file();
                }
            }
            crate::idle::IdleAction::Stop => {
                tracing::info!("idle: stopping");
                self.core.handle.request_stop();
            }
        }
    }

    fn on_signals(&mut self) {
        let Some(signals) = self.signals.as_mut() else {
            return;
        };
        let pending: Vec<i32> = signals.pending().collect();
        for signal in pending {
            match signal {
                SIGCHLD => {
                    let mut clients = ConnClients {
                        conns: &mut self.conns,
                        dirty: &mut self.dirty_conns,
                    };
                    self.host.reap(&mut clients, Instant::now());
                }
                SIGHUP => self.core.handle.request_reload(),
                _ => {
                    tracing::info!("signal {signal}: stopping");
                    self.core.handle.request_stop();
                }
            }
        }
    }

    fn accept_all(&mut self, index: usize, now: Instant) {
        while self.accept_paused_until.is_none() {
            let Some(listener) = self.listeners.get(index) else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => self.on_accept(stream, peer, now),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if is_out_of_resources(&e) => {
                    tracing::warn!("accept: {e}; pausing new connections briefly");
                    self.accept_paused_until = Some(now + ACCEPT_BACKOFF);
                }
                Err(e) => tracing::debug!("accept: {e}"),
            }
        }
    }

    fn on_accept(&mut self, mut stream: Stream, peer: PeerAddr, now: Instant) {
        self.core.handle.stats().accepted();
        if self.conns.len() >= self.core.settings.max_connections + REFUSAL_MARGIN {
            self.core.handle.stats().refused();
            tracing::warn!(%peer, "connection limit exceeded; closing at once");
            return;
        }
        let refusal = self.refusal(&stream, &peer);
        let serial = self.next_serial;
        self.next_serial += 1;
        let entry = self.conns.vacant_entry();
        let slot = entry.key();
        if let Err(e) = stream.register(self.poll.registry(), Token(FIRST_CONN + slot)) {
            tracing::warn!(%peer, "register: {e}");
            return;
        }
        let session = ServerSession::new(self.core.settings.session, now);
        let mut conn = Conn::new(serial, stream, peer, session, now);
        conn.readable = true;
        conn.writable = true;
        if let Some((message, code)) = refusal {
            self.core.handle.stats().refused();
            tracing::info!(conn = serial, peer = %conn.peer, "refused: {message}");
            conn.finish(code, &message);
        } else {
            tracing::debug!(conn = serial, peer = %conn.peer, "accepted");
        }
        entry.insert(conn);
        self.service(slot, now);
    }

    /// Why this connection must be refused (the whole message line) and the exit code to
    /// send, if it must.
    fn refusal(&self, stream: &Stream, peer: &PeerAddr) -> Option<(String, i32)> {
        let policy = self.core.settings.peer_check;
        let verdict = match peer {
            PeerAddr::Tcp { peer, local } => policy.check_tcp(*local, *peer),
            PeerAddr::Unix => policy.check_unix(stream),
        };
        if let PeerVerdict::Refuse { reason } = verdict {
            return Some((reason, exit_codes::NOPERM));
        }
        if self.conns.len() >= self.core.settings.max_connections {
            let limit = self.core.settings.max_connections;
            return Some((
                format!("ngd: too many connections (the limit is {limit}); try again later"),
                exit_codes::UNAVAILABLE,
            ));
        }
        None
    }

    /// Moves one connection along as far as it can go now. See the module docs.
    fn service(&mut self, slot: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let key = ConnKey {
            slot,
            serial: conn.serial,
        };
        let core = &self.core;
        let host = &mut self.host;
        let bound_before = conn.bound().cloned();
        pull_io(conn);
        let budget_left = read_input(conn, core, host, key, &mut self.scratch, now);
        pull_io(conn);
        flush(conn);
        if !budget_left && !self.revisit.contains(&slot) {
            self.revisit.push(slot);
        }
        if matches!(conn.state, ConnState::Finishing)
            && conn.wbuf.is_empty()
            && conn.session.transmit().is_empty()
        {
            // Our last byte is out: FIN now, then wait for the client to close.
            let _ = conn.stream.shutdown_write();
            conn.state = ConnState::Draining {
                until: now + DRAIN_LINGER,
            };
            // The client may already have closed; look once more.
            if !read_input(conn, core, host, key, &mut self.scratch, now)
                && !self.revisit.contains(&slot)
            {
                self.revisit.push(slot);
            }
        }
        // A session stays bound only while the connection is in that state: any other way
        // out (its `X`, a protocol error, a close) hangs the worker's session up, which is a
        // no-op once the session has ended.
        if let Some(bound) = bound_before {
            if conn.bound() != Some(&bound) {
                host.hang_up(&bound, now);
            } else if conn.wbuf.len() < OUTPUT_LOW_WATER {
                // The client drained: read the worker again.
                host.client_drained(&bound);
            }
        }
        if matches!(conn.state, ConnState::Closed) {
            self.close(slot);
        } else {
            self.schedule(slot);
        }
    }

    fn close(&mut self, slot: usize) {
        if !self.conns.contains(slot) {
            return;
        }
        let mut conn = self.conns.remove(slot);
        if let Some(io) = conn.io() {
            io.cancel(CancelReason::ClientGone);
        }
        if let Some(bound) = conn.bound() {
            self.host.hang_up(bound, Instant::now());
        }
        let _ = conn.stream.deregister(self.poll.registry());
        tracing::debug!(conn = conn.serial, peer = %conn.peer, "closed");
        self.release_memory_at = Some(Instant::now() + crate::memory::QUIET_AFTER);
    }

    fn schedule(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        if let Some(deadline) = conn.deadline() {
            if conn.timer_at.is_none_or(|t| deadline < t) {
                conn.timer_at = Some(deadline);
                self.timers
                    .push(Reverse((deadline, Timer::Conn(slot, conn.serial))));
            }
        }
    }

    /// Drops timer entries at the head of the heap that are no longer the earliest deadline
    /// of what they name, so that closed connections and ended workers never wake the loop.
    fn prune_timers(&mut self) {
        while let Some(Reverse((at, timer))) = self.timers.peek().copied() {
            let live = match timer {
                Timer::Conn(slot, serial) => self
                    .conns
                    .get(slot)
                    .is_some_and(|c| c.serial == serial && c.timer_at == Some(at)),
                Timer::Host(t) => self.host.timer_live(t, at),
            };
            if live {
                return;
            }
            self.timers.pop();
        }
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some(Reverse((at, timer))) = self.timers.peek().copied() {
            if at > now {
                return;
            }
            self.timers.pop();
            let (slot, serial) = match timer {
                Timer::Conn(slot, serial) => (slot, serial),
                Timer::Host(t) => {
                    if self.host.timer_live(t, at) {
                        let mut clients = ConnClients {
                            conns: &mut self.conns,
                            dirty: &mut self.dirty_conns,
                        };
                        self.host.on_timer(t, &mut clients, now);
                    }
                    continue;
                }
            };
            let Some(conn) = self.conns.get_mut(slot) else {
                continue;
            };
            if conn.serial != serial {
                continue;
            }
            if conn.timer_at == Some(at) {
                conn.timer_at = None;
            }
            let key = ConnKey { slot, serial };
            match conn.state {
                ConnState::Draining { until } if now >= until => {
                    conn.state = ConnState::Closed;
                }
                ConnState::Finishing if now >= conn.last_write + conn.write_timeout() => {
                    tracing::debug!(conn = conn.serial, peer = %conn.peer, "the client stopped reading its output");
                    conn.state = ConnState::Closed;
                }
                ConnState::Header | ConnState::Running(_) | ConnState::Plugin(_) => {
                    match conn.session.handle_timeout(now) {
                        Ok(()) => handle_events(conn, &self.core, &mut self.host, key, now),
                        Err(e) => protocol_error(conn, &self.core, e),
                    }
                }
                _ => {}
            }
            self.service(slot, now);
        }
    }

    fn begin_stop(&mut self, now: Instant) {
        let grace = self.core.settings.shutdown_grace;
        let running = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.state, ConnState::Running(_) | ConnState::Plugin(_)))
            .count();
        tracing::info!(
            "stopping: no new connections; {running} running commands get {:.1}s to finish",
            grace.as_secs_f64()
        );
        for l in &mut self.listeners {
            let _ = l.deregister(self.poll.registry());
        }
        // Dropping the listeners closes them and removes their socket files.
        self.listeners.clear();
        self.host.stop(now);
        self.stopping = Some(Stopping {
            cancel_at: now + grace,
            plugin_deadline: None,
            give_up_at: None,
        });
    }

    /// True when the server may exit.
    fn advance_stop(&mut self, now: Instant) -> bool {
        if self.conns.is_empty() && self.host.is_empty() {
            return true;
        }
        let Some(stopping) = self.stopping.as_mut() else {
            return false;
        };
        if let Some(give_up) = stopping.give_up_at {
            if now < give_up {
                return false;
            }
            // Clients have had their exit codes; workers finish their stop escalation
            // (q, SIGTERM after stop_timeout_ms, SIGKILL 2 s later), within a bound.
            let slots: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
            for slot in slots {
                self.close(slot);
            }
            let bound = give_up + self.host.max_stop_time();
            return self.host.is_empty() || now >= bound;
        }
        if let Some(deadline) = stopping.plugin_deadline {
            if now < deadline {
                return false;
            }
            // Plugin sessions that did not answer SIGTERM: answer for them; the worker is
            // hung up as the relay ends.
            stopping.give_up_at = Some(now + SHUTDOWN_FLUSH);
            let slots: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
            for slot in slots {
                let conn = &mut self.conns[slot];
                if matches!(conn.state, ConnState::Plugin(_)) {
                    tracing::info!(conn = conn.serial, "plugin command cancelled by shutdown");
                    conn.finish(
                        exit_codes::TERMINATED,
                        "ngd: command cancelled: the server is shutting down",
                    );
                }
                self.service(slot, now);
            }
            self.settle(now);
            return self.conns.is_empty() && self.host.is_empty();
        }
        if now < stopping.cancel_at {
            return false;
        }
        stopping.plugin_deadline = Some(now + SHUTDOWN_FLUSH);
        let slots: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for slot in slots {
            let conn = &mut self.conns[slot];
            match &conn.state {
                ConnState::Running(r) => {
                    tracing::info!(conn = conn.serial, command = %r.command, "cancelled by shutdown");
                    r.io.cancel(CancelReason::Shutdown);
                    conn.finish(
                        exit_codes::TERMINATED,
                        "ngd: command cancelled: the server is shutting down",
                    );
                }
                ConnState::Header => {
                    conn.finish(exit_codes::UNAVAILABLE, "ngd: the server is shutting down");
                }
                // The worker forwards SIGTERM to the command, whose own exit code (143
                // for most programs) then reaches the client.
                ConnState::Plugin(PluginState::Bound(bound)) => {
                    if let Some(term) = ng_proto::ext::SignalName::new(b"SIGTERM") {
                        self.host.signal(bound, &term);
                    }
                }
                _ => {}
            }
            self.service(slot, now);
        }
        self.settle(now);
        self.conns.is_empty() && self.host.is_empty()
    }
}

fn is_out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Takes what the running command produced: output into the write buffer, the stdin
/// backlog, requests for stdin, and its exit code.
fn pull_io(conn: &mut Conn) {
    let ConnState::Running(running) = &conn.state else {
        return;
    };
    let io = running.io.clone();
    let mut st = io.lock();
    st.notified = false;
    if !st.out.is_empty() {
        let n = st.out.len();
        if conn.wbuf.is_empty() {
            std::mem::swap(&mut conn.wbuf, &mut st.out);
        } else {
            conn.wbuf.extend_from_slice(&st.out);
            st.out.clear();
        }
        st.unsent += n;
    }
    conn.stdin_backlog = st.stdin_bytes;
    let wants_stdin = !st.stdin_eof
        && (st.reader_waiting || (st.stdin_started && st.stdin_bytes < STDIN_PREFETCH));
    let finished = st.finished;
    drop(st);
    if wants_stdin {
        conn.session.request_stdin();
    }
    if let Some(code) = finished {
        match running.interrupted.clone() {
            Some((signal, number)) => conn.finish_by_signal(&signal, number),
            None => {
                conn.session.exit(code);
                conn.state = ConnState::Finishing;
            }
        }
    }
}

/// Reads and decodes until `WouldBlock`, end of file, stdin backpressure, or the read
/// budget; false when the budget ran out with more to read (come back next turn).
fn read_input(
    conn: &mut Conn,
    core: &Core,
    host: &mut PluginHost,
    key: ConnKey,
    scratch: &mut [u8],
    now: Instant,
) -> bool {
    let mut budget = READ_BUDGET;
    while conn.readable && !matches!(conn.state, ConnState::Closed) {
        if budget == 0 {
            return false;
        }
        if conn.stdin_backlog > STDIN_HIGH_WATER {
            // Resumed when the command reads (it notifies the loop).
            return true;
        }
        let read = if conn.session.in_header() && matches!(conn.stream, Stream::Unix(_)) {
            read_header(conn, scratch)
        } else {
            conn.stream.read(scratch)
        };
        match read {
            Ok(0) => {
                conn.readable = false;
                on_eof(conn, core, host, key, now);
                return true;
            }
            Ok(n) => {
                budget = budget.saturating_sub(n);
                conn.stream.quickack();
                if conn.session.is_exited() {
                    continue; // draining: discard
                }
                conn.rbuf.extend_from_slice(&scratch[..n]);
                let result = conn.session.handle_bytes(&mut conn.rbuf, now);
                handle_events(conn, core, host, key, now);
                handle_extensions(conn, host);
                if let Err(e) = result {
                    protocol_error(conn, core, e);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => conn.readable = false,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(conn = conn.serial, peer = %conn.peer, state = conn.state.name(), "read: {e}");
                conn.readable = false;
                close_conn(conn, CancelReason::ClientGone);
            }
        }
    }
    true
}

/// Reads a Unix connection's header with `recvmsg`: the client's descriptors ride with
/// its first byte (`fds`, docs/protocol.md). Descriptors the session cannot use (too many,
/// truncated, after `C`) are closed at once; the rest wait for the launch.
fn read_header(conn: &mut Conn, scratch: &mut [u8]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let received = crate::sys::recv_with_fds(conn.stream.as_raw_fd(), scratch)?;
    if received.truncated {
        // More than a client may pass: none of them is used.
        conn.session
            .handle_passed_fds(crate::sys::MAX_PASSED_FDS + 1);
        conn.client_fds.clear();
    } else if !received.fds.is_empty() && conn.session.handle_passed_fds(received.fds.len()) {
        conn.client_fds.extend(received.fds);
    }
    Ok(received.len)
}

/// Acts on the client's extension chunks (`K`, `W`) the session decoded.
fn handle_extensions(conn: &mut Conn, host: &mut PluginHost) {
    while let Some(event) = conn.session.poll_extension() {
        match event {
            ExtensionEvent::Signal(name) => {
                let kills = crate::sys::terminating_signal(name.as_bytes());
                match &mut conn.state {
                    // A worker that ignores interrupts: the command is cancelled as if
                    // the client had gone.
                    ConnState::Plugin(PluginState::Bound(b))
                        if !host.signal(b, &name) && kills.is_some() =>
                    {
                        host.hang_up(b, Instant::now());
                    }
                    ConnState::Plugin(PluginState::Queued(_)) => {
                        // The command has not started: as cold, the signal ends the run.
                        if let Some(number) = kills {
                            tracing::debug!(
                                conn = conn.serial,
                                signal = name.as_str(),
                                "signalled while queued"
                            );
                            conn.finish_by_signal(&name, number);
                        }
                    }
                    ConnState::Running(r) => {
                        // An in-process command cannot catch a signal: it is cancelled, and
                        // the session ends as the signal ends a command that does not
                        // handle it.
                        if let Some(number) = kills {
                            r.interrupted.get_or_insert((name, number));
                            r.io.cancel(CancelReason::Interrupted);
                        }
                    }
                    _ => {}
                }
            }
            ExtensionEvent::WindowSize(size) => match &mut conn.state {
                ConnState::Plugin(PluginState::Bound(b)) => host.window_size(b, size),
                ConnState::Plugin(PluginState::Queued(q)) => q.request.client.winsize = Some(size),
                _ => {}
            },
        }
    }
}

fn on_eof(conn: &mut Conn, core: &Core, host: &mut PluginHost, key: ConnKey, now: Instant) {
    match conn.state {
        ConnState::Header => {
            tracing::debug!(conn = conn.serial, peer = %conn.peer, "closed before the command");
            conn.state = ConnState::Closed;
        }
        ConnState::Running(_) | ConnState::Plugin(_) => {
            if let Err(e) = conn.session.handle_eof() {
                protocol_error(conn, core, e);
            }
            handle_events(conn, core, host, key, now);
        }
        ConnState::Finishing | ConnState::Draining { .. } => conn.state = ConnState::Closed,
        ConnState::Closed => {}
    }
}

/// Acts on everything the session decoded.
fn handle_events(conn: &mut Conn, core: &Core, host: &mut PluginHost, key: ConnKey, now: Instant) {
    while let Some(event) = conn.session.poll_event() {
        match event {
            ServerEvent::Launch(request) => launch(conn, core, host, key, request, now),
            // Every state a connection can be in when stdin arrives: a plugin session keeps
            // it while queued and hands it to its worker once bound; a running nail takes
            // it; in `Header` the session cannot produce it; after the command it is
            // dropped, as the protocol says.
            ServerEvent::Stdin(data) => match &mut conn.state {
                ConnState::Plugin(PluginState::Queued(q)) => {
                    q.stdin.push(data);
                    conn.stdin_backlog = q.stdin.bytes();
                }
                ConnState::Plugin(PluginState::Bound(b)) => {
                    let (backlog, more) = host.stdin(b, data);
                    conn.stdin_backlog = backlog;
                    if more {
                        conn.session.request_stdin();
                    }
                }
                _ => {
                    if let Some(io) = conn.io() {
                        let mut st = io.lock();
                        st.stdin_bytes += data.len();
                        st.stdin.push_back(data);
                        let backlog = st.stdin_bytes;
                        drop(st);
                        io.wake_command();
                        conn.stdin_backlog = backlog;
                    }
                }
            },
            ServerEvent::StdinEof => match &mut conn.state {
                ConnState::Plugin(PluginState::Queued(q)) => q.stdin.set_eof(),
                ConnState::Plugin(PluginState::Bound(b)) => host.stdin_eof(b),
                _ => {
                    if let Some(io) = conn.io() {
                        io.lock().stdin_eof = true;
                        io.wake_command();
                    }
                }
            },
            ServerEvent::ClientGone(reason) => {
                let reason = match reason {
                    ng_proto::DisconnectReason::Eof => CancelReason::ClientGone,
                    ng_proto::DisconnectReason::HeartbeatTimeout => CancelReason::HeartbeatTimeout,
                };
                tracing::debug!(conn = conn.serial, peer = %conn.peer, state = conn.state.name(), "{}", reason.describe());
                close_conn(conn, reason);
            }
        }
    }
}

fn close_conn(conn: &mut Conn, reason: CancelReason) {
    if let Some(io) = conn.io() {
        io.cancel(reason);
    }
    conn.state = ConnState::Closed;
}

fn protocol_error(conn: &mut Conn, core: &Core, e: ProtocolError) {
    core.handle.stats().protocol_error();
    tracing::info!(conn = conn.serial, peer = %conn.peer, state = conn.state.name(), "protocol error: {e}");
    if let Some(io) = conn.io() {
        io.cancel(CancelReason::ProtocolError);
    }
    if matches!(e, ProtocolError::EofBeforeCommand) || conn.session.is_exited() {
        conn.state = ConnState::Closed;
        return;
    }
    conn.finish(exit_codes::PROTOCOL, &format!("ngd: protocol error: {e}"));
}

fn launch(
    conn: &mut Conn,
    core: &Core,
    host: &mut PluginHost,
    key: ConnKey,
    mut request: ng_proto::Request,
    now: Instant,
) {
    let handle = &core.handle;
    let client_umask = take_client_umask(&mut request);
    let fds = std::mem::take(&mut conn.client_fds);
    let passed = request
        .client
        .fds
        .and_then(|map| crate::passed_fds::PassedFds::with_pty(map, request.client.pty, fds));
    let Some((name, entry)) = handle.registry().resolve(&request.command) else {
        handle.stats().unknown_command();
        let shown = String::from_utf8_lossy(&request.command);
        tracing::info!(conn = conn.serial, peer = %conn.peer, "unknown command {shown:?}");
        conn.finish(
            exit_codes::UNKNOWN_COMMAND,
            &format!("ngd: unknown command '{shown}'; run 'ng ng-commands' to list the commands"),
        );
        return;
    };
    tracing::debug!(conn = conn.serial, peer = %conn.peer, command = %name, args = request.args.len(), env = request.env.len(), "launch");
    match entry.target {
        Target::Nail {
            nail,
            inline,
            client_fds,
        } => {
            // In-process commands never make the pseudo-terminal a controlling terminal.
            let offer = passed
                .filter(|_| client_fds)
                .map(crate::passed_fds::PassedFds::without_pty);
            let server = if offer.is_some() {
                Features::ALL.without(Features::CTTY)
            } else {
                RELAYED
            };
            let accepted = conn.session.accept_extensions(server);
            // `F` goes before anything the command writes (which bypasses the session).
            let f = conn.session.take_transmit();
            conn.wbuf.extend_from_slice(&f);
            let fds = offer
                .filter(|_| accepted.contains(Features::FDS))
                .map(crate::passed_fds::PassedFds::into_slots);
            let io = SessionIo::new(key, core.notifier.clone(), inline);
            if fds.is_some() {
                // The client sends no stdin once the command has its descriptors.
                io.lock().stdin_eof = true;
            }
            handle.stats().started(&name);
            let ctx = Context::new(request, io.clone(), handle.clone()).with_client_fds(fds);
            conn.state = ConnState::Running(Running {
                io: io.clone(),
                command: name.clone(),
                interrupted: None,
            });
            let stats_handle = handle.clone();
            let job = move || run_nail(nail, ctx, io, name, stats_handle);
            if inline {
                job();
            } else {
                core.pool.execute(job);
            }
        }
        Target::Plugin { pool } => match host.queue(key, pool, now) {
            Ok(()) => {
                if passed.is_none() {
                    // Nothing waits on the worker's answer: settled now, so signals and
                    // window changes are forwarded even while the session is queued.
                    conn.session.accept_extensions(RELAYED);
                }
                conn.state = ConnState::Plugin(PluginState::Queued(Box::new(Queued {
                    pool,
                    command: name,
                    request,
                    umask: client_umask,
                    stdin: Default::default(),
                    fds: passed,
                })));
            }
            Err(refusal) => {
                let message = refusal.message(&name);
                tracing::info!(conn = conn.serial, "{message}");
                conn.finish(refusal.code(), &message);
            }
        },
    }
}

/// The client extensions ngd honours for a session whose command does not run on the
/// client's descriptors.
const RELAYED: Features = Features::SIGNALS
    .union(Features::WINSIZE)
    .union(Features::STDIN_WINDOW);

/// Removes our client's `NGD_CLIENT_UMASK` extension entry (a command never sees it) and
/// returns its value, if well-formed (octal, at most 0o7777).
fn take_client_umask(request: &mut ng_proto::Request) -> Option<u32> {
    const NAME: &[u8] = b"NGD_CLIENT_UMASK";
    let value = request.env_var(NAME).cloned();
    request.env.retain(|(name, _)| name.as_ref() != NAME);
    let value = std::str::from_utf8(value.as_deref()?).ok()?;
    u32::from_str_radix(value, 8).ok().filter(|m| *m <= 0o7777)
}

fn run_nail(
    nail: Arc<dyn crate::Nail>,
    mut ctx: Context,
    io: Arc<SessionIo>,
    name: String,
    handle: ServerHandle,
) {
    let started = Instant::now();
    let code = match catch_unwind(AssertUnwindSafe(|| nail.run(&mut ctx))) {
        Ok(code) => code,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_owned());
            tracing::error!(command = %name, "command panicked: {message}");
            let _ = writeln!(ctx.stderr(), "ngd: command '{name}' panicked: {message}");
            1
        }
    };
    handle.stats().finished(&name, code, started.elapsed());
    io.finish(code);
}

/// Writes until `WouldBlock` or done; a dead client ends the connection.
fn flush(conn: &mut Conn) {
    let tx = conn.session.take_transmit();
    if !tx.is_empty() {
        if conn.wbuf.is_empty() {
            conn.wbuf = tx;
        } else {
            conn.wbuf.extend_from_slice(&tx);
        }
    }
    let mut wrote = false;
    while conn.writable && !conn.wbuf.is_empty() {
        match conn.stream.write(&conn.wbuf) {
            Ok(0) => {
                close_conn(conn, CancelReason::ClientGone);
                return;
            }
            Ok(n) => {
                conn.wbuf.advance(n);
                wrote = true;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => conn.writable = false,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(conn = conn.serial, peer = %conn.peer, state = conn.state.name(), "write: {e}");
                close_conn(conn, CancelReason::ClientGone);
                return;
            }
        }
    }
    if wrote {
        conn.last_write = Instant::now();
        if let Some(io) = conn.io() {
            let mut st = io.lock();
            st.unsent = conn.wbuf.len();
            if st.writer_waiting && st.out.len() + st.unsent < OUTPUT_LOW_WATER {
                st.writer_waiting = false;
                drop(st);
                io.wake_command();
            }
        }
    }
}

/// The host's view of the connections ([`Clients`]): what a worker's session sends reaches
/// its connection, which is then serviced before the turn ends.
struct ConnClients<'a> {
    conns: &'a mut Slab<Conn>,
    dirty: &'a mut Vec<usize>,
}

impl ConnClients<'_> {
    fn live(&mut self, key: ConnKey) -> Option<&mut Conn> {
        let conn = self
            .conns
            .get_mut(key.slot)
            .filter(|c| c.serial == key.serial)?;
        self.dirty.push(key.slot);
        Some(conn)
    }
}

impl Clients for ConnClients<'_> {
    fn stdout(&mut self, conn: ConnKey, data: &[u8]) {
        if let Some(c) = self.live(conn) {
            c.session.write_stdout(data);
        }
    }

    fn stderr(&mut self, conn: ConnKey, data: &[u8]) {
        if let Some(c) = self.live(conn) {
            c.session.write_stderr(data);
        }
    }

    fn request_stdin(&mut self, conn: ConnKey) -> bool {
        match self.live(conn) {
            Some(c) => c.session.request_stdin() || !c.session.stdin_ended(),
            None => false,
        }
    }

    fn stdin_backlog(&mut self, conn: ConnKey, bytes: usize) {
        if let Some(c) = self.live(conn) {
            c.stdin_backlog = bytes;
        }
    }

    fn exit(&mut self, conn: ConnKey, report: &ng_proto::ext::ExitReport) {
        if let Some(c) = self.live(conn) {
            c.session.exit_with(report);
            c.state = ConnState::Finishing;
            c.stdin_backlog = 0;
        }
    }

    fn settle(&mut self, conn: ConnKey, answer: FdOffer) {
        if let Some(c) = self.live(conn) {
            let server = match answer {
                FdOffer::TakenWithCtty => Features::ALL,
                FdOffer::Taken => Features::ALL.without(Features::CTTY),
                _ => RELAYED,
            };
            c.session.accept_extensions(server);
        }
    }

    fn stopped(&mut self, conn: ConnKey, signal: &ng_proto::ext::SignalName) {
        if let Some(c) = self.live(conn) {
            c.session.stopped(signal);
        }
    }

    fn finish(&mut self, conn: ConnKey, code: i32, message: &str) {
        if let Some(c) = self.live(conn) {
            c.finish(code, message);
            c.stdin_backlog = 0;
        }
    }

    fn output_full(&self, conn: ConnKey) -> bool {
        self.conns
            .get(conn.slot)
            .filter(|c| c.serial == conn.serial)
            .is_some_and(|c| c.wbuf.len() + c.session.transmit().len() > OUTPUT_HIGH_WATER)
    }

    fn bind(&mut self, conn: ConnKey, worker: WorkerKey, session: u64) -> Option<Queued> {
        let c = self.live(conn)?;
        let ConnState::Plugin(PluginState::Queued(q)) = &c.state else {
            return None;
        };
        let bound = Bound {
            worker,
            session,
            command: q.command.clone(),
        };
        match std::mem::replace(&mut c.state, ConnState::Plugin(PluginState::Bound(bound))) {
            ConnState::Plugin(PluginState::Queued(q)) => Some(*q),
            _ => None,
        }
    }

    fn take_queued(&mut self, conn: ConnKey) -> Option<Queued> {
        let c = self.live(conn)?;
        if !matches!(c.state, ConnState::Plugin(PluginState::Queued(_))) {
            return None;
        }
        match std::mem::replace(&mut c.state, ConnState::Finishing) {
            ConnState::Plugin(PluginState::Queued(q)) => Some(*q),
            _ => None,
        }
    }
}
