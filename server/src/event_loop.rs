//! The event loop: one thread, one `mio::Poll`, every socket.
//!
//! # Tokens
//!
//! | token | what |
//! |---|---|
//! | [`WAKER`] | a command thread has news ([`crate::session_io::SessionIo`] notifications on the ready channel) |
//! | [`SIGNALS`] | SIGTERM, SIGINT or SIGHUP arrived |
//! | `FIRST_LISTENER..FIRST_CONN` | the listeners, in the order given |
//! | `FIRST_CONN + k` | the connection in slab slot `k` |
//! | [`FIRST_WORKER`]` + k` | the channel of plugin worker `k` (`WorkerChannels`, for [`crate::plugin::host`]) |
//!
//! # One turn
//!
//! [`EventLoop::run`] is dispatch only. Poll (with the earliest timer as the timeout), then
//! hand each event to its handler: accept on ready listeners; set a ready connection's
//! readiness flags and *service* it; hand worker readiness to the plugin host. Then service
//! every connection a command thread notified, fire due timers, and do the housekeeping
//! (`housekeeping`): hand freed memory back, accept again after a pause, watch the binary,
//! the idle exit, reloads, and the stop.
//!
//! Servicing a connection is `Conn::service`: the loop looks up the connection, lets it
//! move itself along, then closes it or files its next deadline. The connection knows its
//! in-process and plugin paths; the loop never looks at its state. Nothing a client sends
//! can end the loop: errors end that connection only, and are logged with its serial
//! number, peer and state (never environment values).
//!
//! # Plugins
//!
//! The plugin host ([`PluginHost`]) is a component of its own: the loop hands it worker
//! readiness, client stdin, hangups and its timers, and gives it a [`crate::plugin::Clients`]
//! view of the connections (`ConnClients`) for what sessions send back. Every timer of the
//! server, connections' and the host's, is in one set ([`timers::Timers`], keyed by
//! [`Timer`]): one entry per connection, worker or pool, however many sessions have run.

mod clients;
mod housekeeping;
mod timers;

use crate::conn::{Conn, Core, Env, ReadBudget};
use crate::plugin::{Channels, HostInit, HostTimer, PluginConfig, PluginHost};
use crate::pool::Pool;
use crate::security::PeerVerdict;
use crate::session_io::{ConnKey, LoopNotifier};
use crate::transport::{Listener, PeerAddr, Stream};
use crate::{exit_codes, ServerHandle, Settings};
use clients::ConnClients;
use crossbeam_channel::Receiver;
use housekeeping::{Housekeeping, Stopping};
use mio::event::Event;
use mio::{Events, Poll, Token};
use ng_proto::ServerSession;
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;
use slab::Slab;
use std::io::{self, ErrorKind};
use std::time::{Duration, Instant};
use timers::Timers;

/// Command threads wake the loop through this token.
pub const WAKER: Token = Token(0);
/// Signals arrive on this token.
pub const SIGNALS: Token = Token(1);
const FIRST_LISTENER: usize = 2;
const FIRST_CONN: usize = 64;
/// Plugin worker channels: token `FIRST_WORKER + slot` (connections stay below it).
pub const FIRST_WORKER: usize = 1 << 24;

/// The plugin host's worker channels, registered with the loop's poll under
/// `FIRST_WORKER + slot`.
#[derive(Debug)]
struct WorkerChannels(mio::Registry);

impl Channels for WorkerChannels {
    fn register(&self, channel: &mut mio::net::UnixStream, slot: usize) -> std::io::Result<()> {
        let interest = mio::Interest::READABLE | mio::Interest::WRITABLE;
        self.0
            .register(channel, Token(FIRST_WORKER + slot), interest)
    }

    fn deregister(&self, channel: &mut mio::net::UnixStream) {
        let _ = self.0.deregister(channel);
    }
}
/// How many listeners a server may have.
pub const MAX_LISTENERS: usize = FIRST_CONN - FIRST_LISTENER;

/// Connections over the limit still get a refusal message, up to this many more; past that
/// they are closed at once.
const REFUSAL_MARGIN: usize = 64;

/// The key of an entry in the server's one timer set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Timer {
    /// A connection's earliest deadline (slot, serial).
    Conn(usize, u64),
    /// A plugin host deadline.
    Host(HostTimer),
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
    timers: Timers<Timer>,
    signals: Option<Signals>,
    stopping: Option<Stopping>,
    next_serial: u64,
    scratch: Vec<u8>,
    /// The plugin pools and their workers.
    host: PluginHost,
    /// Connections to service again before the turn ends (a worker wrote to them).
    dirty_conns: Vec<usize>,
    /// Connections that used their read budget: serviced again next turn.
    revisit: Vec<usize>,
    /// Where to re-read the configuration from.
    reload: crate::ReloadSource,
    /// When to hand freed memory back to the kernel and to accept again after a pause.
    housekeeping: Housekeeping,
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
            channels: Box::new(WorkerChannels(poll.registry().try_clone()?)),
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
            timers: Timers::default(),
            signals,
            stopping: None,
            next_serial: 0,
            scratch: vec![0; 64 << 10],
            host,
            dirty_conns: Vec::new(),
            revisit: Vec::new(),
            reload,
            housekeeping: Housekeeping::default(),
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
            self.announce_ready();
            self.wait(&mut events)?;
            let now = Instant::now();
            for event in events.iter() {
                self.on_event(event, now);
            }
            self.service_pending(now);
            self.fire_timers(now);
            self.trim_memory(now);
            self.settle(now);
            self.resume_accepting(now);
            self.upgrade_tick(now);
            self.idle_tick(now);
            self.reload_if_asked(now);
            if self.stop_tick(now) {
                self.finish_stop(now);
                return Ok(());
            }
            self.core.handle.set_pool_threads(self.core.pool.threads());
        }
    }

    /// Calls the ready callback once the plugins that learn their commands are warm.
    fn announce_ready(&mut self) {
        if self.on_ready.is_some() && self.host.is_warm() {
            if let Some(ready) = self.on_ready.take() {
                ready(self.listening());
            }
        }
    }

    /// Polls until an event or the earliest deadline; a signal's interruption is a turn
    /// like any other.
    fn wait(&mut self, events: &mut Events) -> io::Result<()> {
        let timeout = self.next_timeout(Instant::now());
        match self.poll.poll(events, timeout) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Hands one readiness event to its handler, by token.
    fn on_event(&mut self, event: &Event, now: Instant) {
        let readable = event.is_readable() || event.is_read_closed() || event.is_error();
        let writable = event.is_writable() || event.is_write_closed() || event.is_error();
        match event.token() {
            WAKER => {}
            SIGNALS => self.on_signals(),
            Token(t) if (FIRST_LISTENER..FIRST_CONN).contains(&t) => {
                self.accept_all(t - FIRST_LISTENER, now)
            }
            Token(t) if t >= FIRST_WORKER => {
                let mut clients = ConnClients::new(&mut self.conns, &mut self.dirty_conns);
                self.host
                    .on_ready(t - FIRST_WORKER, readable, writable, &mut clients, now);
            }
            Token(t) => self.on_conn_ready(t - FIRST_CONN, readable, writable, now),
        }
    }

    /// A client connection's socket is ready: its flags are set (edge-triggered: cleared
    /// only on `WouldBlock`), then it is serviced.
    fn on_conn_ready(&mut self, slot: usize, readable: bool, writable: bool, now: Instant) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        if readable {
            conn.readable = true;
        }
        if writable {
            conn.writable = true;
        }
        self.service(slot, now);
    }

    /// Services the connections that used their read budget last turn, then those a
    /// command thread notified (a late notification for a closed connection is dropped).
    fn service_pending(&mut self, now: Instant) {
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
    }

    /// Works off everything a turn left for later: workers to read or write, connections a
    /// worker wrote to, pools with sessions to assign or workers to start; then files the
    /// host's new deadlines into the timer heap.
    fn settle(&mut self, now: Instant) {
        loop {
            let mut clients = ConnClients::new(&mut self.conns, &mut self.dirty_conns);
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
            self.timers.set(Timer::Host(timer), at);
        }
        self.host.publish();
    }

    fn next_timeout(&self, now: Instant) -> Option<Duration> {
        if !self.revisit.is_empty() {
            return Some(Duration::ZERO);
        }
        let mut next = self.timers.next_deadline();
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        self.housekeeping
            .deadlines()
            .into_iter()
            .for_each(&mut consider);
        consider(self.idle.as_ref().and_then(crate::idle::IdleExit::deadline));
        consider(
            self.upgrade
                .as_ref()
                .and_then(crate::upgrade::Watch::deadline),
        );
        if let Some(s) = &self.stopping {
            consider(Some(s.deadline(now, self.host.max_stop_time())));
        }
        next.map(|t| t.saturating_duration_since(now))
    }

    fn on_signals(&mut self) {
        let Some(signals) = self.signals.as_mut() else {
            return;
        };
        let pending: Vec<i32> = signals.pending().collect();
        for signal in pending {
            match signal {
                SIGCHLD => {
                    let mut clients = ConnClients::new(&mut self.conns, &mut self.dirty_conns);
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
        while self.housekeeping.accepting() {
            let Some(listener) = self.listeners.get(index) else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => self.on_accept(stream, peer, now),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if is_out_of_resources(&e) => {
                    tracing::warn!("accept: {e}; pausing new connections briefly");
                    self.housekeeping.pause_accepting(now);
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

    /// Moves one connection along as far as it can go now (`Conn::service`), then
    /// closes it or files its next deadline.
    fn service(&mut self, slot: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let mut env = Env {
            core: &self.core,
            host: &mut self.host,
            scratch: &mut self.scratch,
            key: ConnKey {
                slot,
                serial: conn.serial,
            },
            now,
        };
        if conn.service(&mut env) == ReadBudget::Spent && !self.revisit.contains(&slot) {
            self.revisit.push(slot);
        }
        let newer = conn.newer_client.take();
        if conn.is_closed() {
            self.close(slot);
        } else {
            self.schedule(slot);
        }
        if let Some(client) = newer {
            self.newer_client(client, now);
        }
    }

    fn close(&mut self, slot: usize) {
        if !self.conns.contains(slot) {
            return;
        }
        let conn = self.conns.remove(slot);
        self.timers.cancel(Timer::Conn(slot, conn.serial));
        conn.release(&mut self.host, self.poll.registry());
        self.housekeeping.conn_closed(Instant::now());
    }

    fn schedule(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        if let Some(deadline) = conn.deadline() {
            if conn.timer_at.is_none_or(|t| deadline < t) {
                conn.timer_at = Some(deadline);
                self.timers.set(Timer::Conn(slot, conn.serial), deadline);
            }
        }
    }

    /// Drops timer entries at the head of the set that are no longer the earliest deadline
    /// of what they name, so that ended workers never wake the loop.
    fn prune_timers(&mut self) {
        while let Some((at, timer)) = self.timers.first() {
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

    /// Fires the due timers: a connection's deadline goes to `Conn::on_timer` (then the
    /// connection is serviced), the host's to [`PluginHost::on_timer`].
    fn fire_timers(&mut self, now: Instant) {
        while let Some((at, timer)) = self.timers.pop_due(now) {
            match timer {
                Timer::Conn(slot, serial) => self.on_conn_timer(slot, serial, at, now),
                Timer::Host(t) => {
                    if self.host.timer_live(t, at) {
                        let mut clients = ConnClients::new(&mut self.conns, &mut self.dirty_conns);
                        self.host.on_timer(t, &mut clients, now);
                    }
                }
            }
        }
    }

    /// A connection's timer filed for `at` is due; a stale one (another connection in the
    /// slot) is dropped.
    fn on_conn_timer(&mut self, slot: usize, serial: u64, at: Instant, now: Instant) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        if conn.serial != serial {
            return;
        }
        if conn.timer_at == Some(at) {
            conn.timer_at = None;
        }
        let mut env = Env {
            core: &self.core,
            host: &mut self.host,
            scratch: &mut self.scratch,
            key: ConnKey { slot, serial },
            now,
        };
        conn.on_timer(&mut env);
        self.service(slot, now);
    }
}

fn is_out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}
