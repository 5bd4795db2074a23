//! The plugin host: the pools and their workers, wired together around the state machines
//! of [`super::pool`] and [`super::machine`].
//!
//! The event loop calls the host through a narrow interface (the methods below) and hands
//! it a [`Clients`] for what sessions send to their clients; the host never sees a
//! connection, nor the loop's poll: it has its workers' channels watched through
//! [`Channels`], by slot. Its deadlines go into the loop's one timer heap as [`HostTimer`]
//! entries ([`PluginHost::take_timers`]); nothing is scanned per loop turn.
//!
//! Where things happen:
//! * a worker is spawned in [`PluginHost::maintain_pool`] (`spawn_worker`, with
//!   [`super::worker::Launcher`]), when the pool says so
//!   ([`super::pool::Pool::spawns_wanted`]); its channel is written and read by
//!   [`super::worker::Worker`];
//! * it ends in [`PluginHost::end_worker`]: out of service at once, reaped when it has
//!   exited ([`super::reaper`], never blocking), then [`PluginHost::worker_reaped`] tells
//!   its clients and counts the failure, after which the pool's next `maintain_pool`
//!   restarts it when its backoff has passed;
//! * sessions are bound in `maintain_pool` to the ready worker with the most free slots
//!   taken first by the fewest sessions (`bind`);
//! * the memory budget is kept by [`super::budget`], which the host asks after a worker's
//!   hello, after each session and when the footprints come in; the pools it names give
//!   way.

use super::budget::{Budget, Held, Tenant};
use super::config::PluginConfig;
use super::derive;
use super::launcher;
use super::machine::{Due, Event, Machine, WorkerEnd, WorkerKey};
use super::pool::{Census, Notice, Pool, PoolStatus, Refusal, Reload};
use super::reaper::{Ending, Reaper};
use super::worker::{self, Fill, Worker};
use super::{Bound, Channels, Clients, PluginReport, HOST_FEATURES};
use crate::session_io::ConnKey;
use crate::ServerHandle;
use bytes::Bytes;
use ng_proto::{ChunkType, Decoder, Limits};
use ngw_vocab::{NoticeKind, WorkerFeatures};
use slab::Slab;
use std::os::unix::ffi::OsStrExt as _;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// A host deadline in the loop's timer heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostTimer {
    /// A worker's handshake, ping, idle, hangup or stop deadline.
    Worker(WorkerKey),
    /// A pool's queue timeout or backoff.
    Pool(usize),
    /// A dying worker's reap deadline (by serial).
    Dying(u64),
    /// Time to use the workers' new footprints (the memory budget).
    Footprint,
}

/// The pools and their workers. See the module docs.
#[derive(Debug)]
pub struct PluginHost {
    workers: Slab<Worker>,
    /// The pools, in configuration order. Indices are stable for the life of the process
    /// (a reload retires a pool and appends a new one).
    pools: Vec<Pool>,
    /// Workers out of service, until they are reaped.
    reaper: Reaper,
    next_serial: u64,
    next_session: u64,
    /// ngd's umask, sent as `NGW_UMASK` when the client does not report its own.
    umask: u32,
    stopping: bool,
    /// How workers are started.
    launcher: worker::Launcher,
    /// Where the workers' channels are watched (the event loop's poll).
    channels: Box<dyn Channels>,
    handle: ServerHandle,
    dirty_workers: Vec<usize>,
    dirty_pools: Vec<usize>,
    timers: Vec<(Instant, HostTimer)>,
    changed: bool,
    scratch: Vec<u8>,
    /// The memory budget and the workers' footprints.
    budget: Budget,
    /// The programs shims found, and the pools that serve them.
    routes: derive::Routes,
    /// Numbers the derived pools' names.
    next_derived: u64,
}

/// What [`PluginHost::new`] takes.
#[derive(Debug)]
pub struct HostInit {
    /// The `[[plugin]]` tables.
    pub plugins: Vec<PluginConfig>,
    /// For routes and statistics.
    pub handle: ServerHandle,
    /// Where worker channels are watched for readiness.
    pub channels: Box<dyn Channels>,
    /// The executable that runs bridges (default: this process's).
    pub bridge_exe: Option<std::path::PathBuf>,
    /// Adopt and reap orphans.
    pub subreaper: bool,
    /// The memory budget of all workers, in bytes (`None`: none).
    pub memory_budget: Option<u64>,
}

impl PluginHost {
    /// A host for these plugins (workers start on the first [`PluginHost::settle`]).
    pub fn new(init: HostInit) -> Self {
        let umask = crate::sys::current_umask();
        let mut host = Self {
            workers: Slab::new(),
            pools: Vec::new(),
            reaper: Reaper::new(init.subreaper),
            next_serial: 0,
            next_session: 0,
            umask,
            stopping: false,
            launcher: worker::Launcher::new(init.bridge_exe),
            channels: init.channels,
            handle: init.handle,
            dirty_workers: Vec::new(),
            dirty_pools: Vec::new(),
            timers: Vec::new(),
            changed: true,
            scratch: vec![0; 64 << 10],
            budget: Budget::new(init.memory_budget),
            routes: derive::Routes::default(),
            next_derived: 0,
        };
        for config in init.plugins {
            host.add_pool(Pool::new(config));
        }
        host.publish();
        host
    }

    fn add_pool(&mut self, mut new: Pool) -> usize {
        new.touch(Instant::now());
        let pool = self.pools.len();
        self.pools.push(new);
        self.publish_routes(pool);
        self.dirty_pools.push(pool);
        pool
    }

    /// Registers `pool`'s commands; a name already taken disables the pool.
    fn publish_routes(&mut self, pool: usize) {
        let p = &self.pools[pool];
        if p.derived_from.is_some() {
            return;
        }
        let class_names = p.config.class_names || p.class_names;
        let registry = self.handle.registry();
        let unrouted = registry.route_plugin(pool, &p.config.name, &p.commands, class_names);
        if unrouted.class_names {
            tracing::warn!(
                plugin = %p.config.name,
                "class names are already routed to another plugin; this one serves its commands only"
            );
        }
        if !unrouted.commands.is_empty() {
            let taken = unrouted.commands.join(", ");
            self.disable(
                pool,
                format!("command name(s) {taken} already taken by another command"),
            );
        }
    }

    fn disable(&mut self, pool: usize, reason: String) {
        tracing::error!(plugin = %self.pools[pool].config.name, "disabled: {reason}");
        self.pools[pool].disable(reason);
        self.dirty_pools.push(pool);
    }

    /// Publishes every pool's state for `ng-stats`, if it changed.
    pub fn publish(&mut self) {
        if std::mem::take(&mut self.changed) {
            self.handle.set_plugins(self.reports());
        }
    }

    /// Snapshots of every pool that is not fully retired.
    pub fn reports(&self) -> Vec<PluginReport> {
        self.pools
            .iter()
            .enumerate()
            .filter(|(i, p)| !(p.status == PoolStatus::Retiring && self.pool_workers(*i) == 0))
            .map(|(i, p)| {
                let mut r = PluginReport::of(p);
                for (_, w) in self.workers_of(i) {
                    r.count(&w.machine, self.budget.shown(w.pid(), w.rss));
                }
                r
            })
            .collect()
    }

    /// The workers of `pool` in service, with their slots.
    fn workers_of(&self, pool: usize) -> impl Iterator<Item = (usize, &Worker)> {
        self.workers
            .iter()
            .filter(move |(_, w)| w.machine.pool == pool)
    }

    fn pool_workers(&self, pool: usize) -> usize {
        self.workers_of(pool).count() + self.reaper.count(pool)
    }

    /// True when every active pool knows its commands (configured, or from a hello), or
    /// serves class names.
    pub fn is_warm(&self) -> bool {
        self.pools.iter().all(|p| {
            p.status != PoolStatus::Active
                || !p.commands.is_empty()
                || p.class_names
                || p.config.class_names
        })
    }

    /// True when no worker is left (for the end of a shutdown).
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty() && self.reaper.is_empty()
    }

    /// The longest a worker's stop escalation can take, plus a margin for reaping.
    pub fn max_stop_time(&self) -> Duration {
        let longest = self
            .pools
            .iter()
            .map(|p| PluginConfig::ms(p.config.stop_timeout_ms))
            .max()
            .unwrap_or_default();
        longest + super::machine::TERM_TO_KILL + Duration::from_secs(1)
    }

    /// Work left for [`PluginHost::settle`].
    pub fn has_work(&self) -> bool {
        !self.dirty_workers.is_empty() || !self.dirty_pools.is_empty()
    }

    /// Deadlines to put into the loop's timer heap.
    pub fn take_timers(&mut self) -> Vec<(Instant, HostTimer)> {
        std::mem::take(&mut self.timers)
    }

    /// Whether a heap entry is still the earliest deadline of what it names (stale entries
    /// are dropped without waking the loop).
    pub fn timer_live(&self, timer: HostTimer, at: Instant) -> bool {
        match timer {
            HostTimer::Worker(k) => self.worker(k).is_some_and(|w| w.timer_at == Some(at)),
            HostTimer::Pool(p) => self.pools.get(p).is_some_and(|p| p.deadline() == Some(at)),
            HostTimer::Dying(serial) => self.reaper.is_deadline(serial, at),
            HostTimer::Footprint => self.budget.is_check_at(at),
        }
    }

    fn worker(&self, key: WorkerKey) -> Option<&Worker> {
        self.workers
            .get(key.slot)
            .filter(|w| w.serial == key.serial)
    }

    fn worker_mut(&mut self, key: WorkerKey) -> Option<&mut Worker> {
        self.workers
            .get_mut(key.slot)
            .filter(|w| w.serial == key.serial)
    }

    /// Whether a session of `pool` may take the client's pseudo-terminal (`ctty`): its
    /// workers' hello lists it, or no worker has said hello yet.
    pub fn may_take_ctty(&self, pool: usize) -> bool {
        self.pools
            .get(pool)
            .is_some_and(|p| p.takes_ctty != Some(false))
    }

    /// Queues a plugin command's session (the connection holds its request meanwhile);
    /// a worker is bound when the host settles. Refused at once when `queue` sessions
    /// already wait.
    pub fn queue(&mut self, conn: ConnKey, pool: usize, now: Instant) -> Result<(), Refusal> {
        let free = self.free_slots(pool);
        let p = &mut self.pools[pool];
        p.admit(conn, free, now)?;
        if p.queue.len() == 1 {
            self.timers
                .extend(p.deadline().map(|t| (t, HostTimer::Pool(pool))));
        }
        self.dirty_pools.push(pool);
        self.changed = true;
        Ok(())
    }

    fn free_slots(&self, pool: usize) -> usize {
        self.workers_of(pool)
            .map(|(_, w)| w.machine.free_slots())
            .sum()
    }

    /// Client stdin for a bound session; returns the bytes held for the worker and whether
    /// the worker wants more than the client was asked for (a classic client sends one
    /// chunk per `S`; a worker's window may want many).
    pub fn stdin(&mut self, bound: &Bound, data: Bytes) -> (usize, bool) {
        let Some(w) = self.worker_mut(bound.worker) else {
            return (0, false);
        };
        let backlog = w.machine.client_stdin(bound.session, data);
        self.dirty_workers.push(bound.worker.slot);
        self.schedule(bound.worker.slot);
        backlog
    }

    /// The client of a bound session ended its stdin.
    pub fn stdin_eof(&mut self, bound: &Bound) {
        if let Some(w) = self.worker_mut(bound.worker) {
            w.machine.client_eof(bound.session);
            self.dirty_workers.push(bound.worker.slot);
        }
    }

    /// The client of a bound session is gone (or its connection left the session).
    pub fn hang_up(&mut self, bound: &Bound, now: Instant) {
        let key = bound.worker;
        let Some(w) = self
            .workers
            .get_mut(key.slot)
            .filter(|w| w.serial == key.serial)
        else {
            return;
        };
        let config = &self.pools[w.machine.pool].config;
        w.machine.hang_up(bound.session, config, now);
        tracing::debug!(
            worker = w.pid(),
            session = bound.session,
            "client gone; hung up"
        );
        self.dirty_workers.push(bound.worker.slot);
        self.schedule(bound.worker.slot);
    }

    /// Forwards a signal to a bound session's command; false if its worker does not act on
    /// interrupts.
    pub fn signal(&mut self, bound: &Bound, name: &ng_proto::ext::SignalName) -> bool {
        let Some(w) = self.worker_mut(bound.worker) else {
            return true;
        };
        let delivered = w.machine.signal(bound.session, name);
        self.dirty_workers.push(bound.worker.slot);
        delivered
    }

    /// The client of a bound session reports a new terminal size.
    pub fn window_size(&mut self, bound: &Bound, size: ng_proto::ext::WinSize) {
        if let Some(w) = self.worker_mut(bound.worker) {
            w.machine.window_size(bound.session, size);
            self.dirty_workers.push(bound.worker.slot);
        }
    }

    /// The client of a bound session drained its output: read its worker again.
    pub fn client_drained(&mut self, bound: &Bound) {
        if self.worker(bound.worker).is_some_and(|w| w.readable) {
            self.dirty_workers.push(bound.worker.slot);
        }
    }

    /// Readiness of the channel of the worker in `slot` ([`Channels::register`]).
    pub fn on_ready(
        &mut self,
        slot: usize,
        readable: bool,
        writable: bool,
        clients: &mut dyn Clients,
        now: Instant,
    ) {
        if let Some(w) = self.workers.get_mut(slot) {
            w.readable |= readable;
            w.writable |= writable;
            self.service_worker(slot, clients, now);
        }
    }

    /// Works off what is pending: workers to read or write, pools with sessions to bind or
    /// workers to start. True if there was anything.
    pub fn settle(&mut self, clients: &mut dyn Clients, now: Instant) -> bool {
        let mut any = false;
        while self.has_work() {
            any = true;
            let mut workers = std::mem::take(&mut self.dirty_workers);
            let mut pools = std::mem::take(&mut self.dirty_pools);
            workers.sort_unstable();
            workers.dedup();
            pools.sort_unstable();
            pools.dedup();
            for w in workers {
                self.service_worker(w, clients, now);
            }
            for p in pools {
                self.maintain_pool(p, clients, now);
            }
        }
        if any {
            self.changed = true;
        }
        any
    }

    /// A timer from the heap fired.
    pub fn on_timer(&mut self, timer: HostTimer, clients: &mut dyn Clients, now: Instant) {
        match timer {
            HostTimer::Worker(key) => {
                let Some(w) = self.worker_mut(key) else {
                    return;
                };
                w.timer_at = None;
                self.worker_due(key.slot, clients, now);
            }
            HostTimer::Pool(pool) => self.dirty_pools.push(pool),
            HostTimer::Dying(_) => self.reap_dying(clients, now),
            HostTimer::Footprint => {
                self.budget.fired();
                self.enforce_budget(now);
                if let Some(at) = self.budget.again(now) {
                    self.timers.push((at, HostTimer::Footprint));
                }
            }
        }
        self.changed = true;
    }

    fn worker_due(&mut self, slot: usize, clients: &mut dyn Clients, now: Instant) {
        let Some(w) = self.workers.get_mut(slot) else {
            return;
        };
        let pool = w.machine.pool;
        let surplus = self.surplus(pool);
        let w = &mut self.workers[slot];
        let config = &self.pools[pool].config;
        match w.machine.due(config, surplus, now) {
            Some(Due::End(end)) => {
                self.end_worker(slot, end, clients, now);
                return;
            }
            Some(Due::Term) => worker::signal_group(w.pid(), libc::SIGTERM),
            Some(Due::IdleTimeout) => {
                tracing::info!(pid = w.pid(), "idle timeout");
                w.machine.quit(config, now);
                self.dirty_pools.push(pool);
            }
            None => {}
        }
        self.dirty_workers.push(slot);
        self.schedule(slot);
    }

    fn surplus(&self, pool: usize) -> bool {
        self.workers_of(pool).count() > self.pools[pool].min_workers()
    }

    /// Stops `pool`'s ready workers that have no session (it fell asleep or gave way).
    fn quit_idle(&mut self, pool: usize, now: Instant) {
        let idle: Vec<usize> = self
            .workers_of(pool)
            .filter(|(_, w)| {
                w.machine.sessions.is_empty()
                    && !w.machine.is_starting()
                    && !w.machine.is_quitting()
            })
            .map(|(slot, _)| slot)
            .collect();
        let config = &self.pools[pool].config;
        for slot in idle {
            self.workers[slot].machine.quit(config, now);
            self.dirty_workers.push(slot);
        }
        for slot in self.dirty_workers.clone() {
            self.schedule(slot);
        }
        self.changed = true;
    }

    /// Keeps the workers' memory within the budget ([`super::budget`]): pools give way,
    /// their idle workers quit.
    fn enforce_budget(&mut self, now: Instant) {
        if !self.budget.is_set() {
            return;
        }
        let tenants: Vec<Tenant> = self
            .pools
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Tenant::of(i, p))
            .collect();
        let workers: Vec<Held> = self
            .workers
            .iter()
            .filter_map(|(_, w)| Held::of(w))
            .collect();
        let Some(eviction) = self.budget.evictions(&tenants, &workers, now) else {
            return;
        };
        for pool in eviction.pools {
            tracing::info!(
                plugin = %self.pools[pool].config.name,
                "gives way: the workers hold {} MiB, over the memory budget of {} MiB; it \
                 is the least recently used",
                eviction.total >> 20,
                eviction.limit >> 20
            );
            self.pools[pool].evict();
            self.quit_idle(pool, now);
        }
    }

    /// Asks for worker `pid`'s footprint, and for the budget's look at it.
    fn measure(&mut self, pid: u32, now: Instant) {
        if let Some(at) = self.budget.measure(pid, now) {
            self.timers.push((at, HostTimer::Footprint));
        }
    }

    /// Puts a worker's next deadline into the heap if it is earlier than the one there.
    fn schedule(&mut self, slot: usize) {
        let Some(w) = self.workers.get(slot) else {
            return;
        };
        let pool = w.machine.pool;
        let surplus = self.surplus(pool);
        let w = &mut self.workers[slot];
        let Some(at) = w.machine.deadline(&self.pools[pool].config, surplus) else {
            return;
        };
        if w.timer_at.is_none_or(|t| at < t) {
            w.timer_at = Some(at);
            let key = WorkerKey {
                slot,
                serial: w.serial,
            };
            self.timers.push((at, HostTimer::Worker(key)));
        }
    }

    /// Starts a worker for `pool`; `why` is said in the log line.
    fn spawn_worker(&mut self, pool: usize, why: &str, now: Instant) {
        let config = self.pools[pool].config.clone();
        let features = WorkerFeatures::of(&HOST_FEATURES).to_list();
        let spawned = match self.launcher.spawn(&config, &features) {
            Ok(s) => s,
            Err(e) => {
                let reason = format!("cannot start {:?}: {e}", config.command[0]);
                self.record_failure(pool, reason, now);
                return;
            }
        };
        let serial = self.next_serial;
        self.next_serial += 1;
        let entry = self.workers.vacant_entry();
        let slot = entry.key();
        let mut channel = spawned.channel;
        if let Err(e) = self.channels.register(&mut channel, slot) {
            tracing::error!(plugin = %config.name, "register worker channel: {e}");
            let mut child = spawned.child;
            worker::finish(&mut child);
            return;
        }
        tracing::info!(plugin = %config.name, pid = spawned.child.id(), "worker started: {why}");
        let machine = Machine::new(pool, &config, WorkerFeatures::of(&HOST_FEATURES), now);
        entry.insert(Worker::new(serial, machine, spawned.child, channel));
        self.dirty_workers.push(slot);
        // The pool may now have a surplus: its idle workers' idle timeouts start to count.
        let slots: Vec<usize> = self.workers_of(pool).map(|(k, _)| k).collect();
        for slot in slots {
            self.schedule(slot);
        }
    }

    fn record_failure(&mut self, pool: usize, reason: String, now: Instant) {
        let p = &mut self.pools[pool];
        let disabled = p.record_failure(reason.clone(), now);
        tracing::warn!(plugin = %p.config.name, failures = p.failures, "worker failed: {reason}");
        if disabled {
            tracing::error!(
                plugin = %p.config.name,
                "disabled after {} consecutive failures: {reason}",
                p.failures
            );
        }
        self.timers
            .extend(p.deadline().map(|t| (t, HostTimer::Pool(pool))));
        self.dirty_pools.push(pool);
    }

    /// Refusals, bindings and spawns for one pool.
    fn maintain_pool(&mut self, pool: usize, clients: &mut dyn Clients, now: Instant) {
        let running: usize = self
            .workers_of(pool)
            .map(|(_, w)| w.machine.sessions.len())
            .sum();
        if self.pools[pool].maybe_sleep(now, running) {
            tracing::info!(
                plugin = %self.pools[pool].config.name,
                "no session for {:.0}s: keeping no worker until the next one",
                self.pools[pool].config.idle_to_zero_ms as f64 / 1000.0
            );
            self.quit_idle(pool, now);
        }
        for (conn, refusal) in self.pools[pool].expire(now, self.stopping) {
            if let Some(q) = clients.take_queued(conn) {
                let message = refusal.message(&q.command);
                tracing::info!(conn = conn.serial, "{message}");
                clients.finish(conn, refusal.code(), &message);
            }
        }
        // Queued sessions go, oldest first, to the ready worker with the fewest sessions
        // that has room (`docs/ngw.md` §15.1).
        while !self.pools[pool].queue.is_empty() {
            let best = self
                .workers_of(pool)
                .filter(|(_, w)| w.machine.free_slots() > 0)
                .min_by_key(|(_, w)| w.machine.sessions.len())
                .map(|(k, _)| k);
            let Some(slot) = best else {
                break;
            };
            let Some(waiting) = self.pools[pool].queue.pop_front() else {
                break;
            };
            self.bind(slot, waiting.conn, clients, now);
        }
        let census = Census {
            starting: self
                .workers_of(pool)
                .filter(|(_, w)| w.machine.is_starting())
                .count(),
            alive: self
                .workers_of(pool)
                .filter(|(_, w)| !w.machine.is_quitting())
                .count(),
            failure_pending: self.reaper.failure_pending(pool),
        };
        let spawns = self.pools[pool].spawns_wanted(now, census, self.stopping);
        for _ in 0..spawns {
            let why = self.pools[pool].spawn_reason(census.alive);
            self.spawn_worker(pool, &why, now);
            let p = &self.pools[pool];
            if p.status != PoolStatus::Active || p.next_spawn.is_some() {
                break;
            }
        }
        let p = &self.pools[pool];
        if p.status != PoolStatus::Active && !p.queue.is_empty() {
            // A disabled pool refuses what is still queued on the next pass.
            self.dirty_pools.push(pool);
        }
        self.timers
            .extend(p.deadline().map(|t| (t, HostTimer::Pool(pool))));
    }

    /// Gives the session of `conn` to worker `slot`.
    fn bind(&mut self, slot: usize, conn: ConnKey, clients: &mut dyn Clients, now: Instant) {
        let session = self.next_session;
        let w = &mut self.workers[slot];
        let key = WorkerKey {
            slot,
            serial: w.serial,
        };
        let Some(queued) = clients.bind(conn, key, session) else {
            return; // The client left while it waited.
        };
        self.next_session += 1;
        let umask = queued.umask.unwrap_or(self.umask);
        tracing::debug!(conn = conn.serial, worker = w.pid(), session, command = %queued.command, "session bound");
        self.handle.stats().started(&queued.command);
        let offered = w.machine.bind(
            session,
            conn,
            queued.command,
            &queued.request,
            umask,
            queued.stdin,
            queued.fds,
            now,
        );
        if !offered {
            // Without descriptors on the worker's side the session is relayed: the client
            // learns it now (a no-op when its extensions were settled at launch).
            clients.settle(conn, super::session::FdOffer::None);
        }
        self.dirty_workers.push(slot);
        self.schedule(slot);
    }

    /// Writes what a worker is owed, then reads and acts on what it sent, as fast as its
    /// client drains.
    fn service_worker(&mut self, slot: usize, clients: &mut dyn Clients, now: Instant) {
        let Some(w) = self.workers.get_mut(slot) else {
            return;
        };
        // Write first: headers and stdin go out before we wait for answers.
        if let Err(end) = w.flush() {
            self.end_worker(slot, end, clients, now);
            return;
        }
        let mut decoder = Decoder::new(Limits::default());
        loop {
            let Some(w) = self.workers.get_mut(slot) else {
                return;
            };
            if reader_blocked(&w.machine, clients) {
                return;
            }
            match decoder.decode(&mut w.rbuf) {
                Ok(Some(chunk)) => {
                    if let Err(end) = self.on_chunk(slot, chunk.ty, chunk.payload, clients, now) {
                        self.end_worker(slot, end, clients, now);
                        return;
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    let end = WorkerEnd::Protocol(format!("protocol error: {e}"));
                    self.end_worker(slot, end, clients, now);
                    return;
                }
            }
            let Some(w) = self.workers.get_mut(slot) else {
                return;
            };
            match w.fill(&mut self.scratch) {
                Ok(Fill::More) => {}
                Ok(Fill::Drained) => return,
                Err(end) => {
                    self.end_worker(slot, end, clients, now);
                    return;
                }
            }
        }
    }

    fn on_chunk(
        &mut self,
        slot: usize,
        ty: ChunkType,
        payload: Bytes,
        clients: &mut dyn Clients,
        now: Instant,
    ) -> Result<(), WorkerEnd> {
        let w = &mut self.workers[slot];
        let pool = w.machine.pool;
        let pid = w.pid();
        let event = w
            .machine
            .on_chunk(ty, &payload, &self.pools[pool].config, clients, now)?;
        if !w.machine.wbuf.is_empty() {
            self.dirty_workers.push(slot);
        }
        match event {
            Event::None => {}
            Event::Hello(hello) => self.on_hello(slot, &hello, now)?,
            Event::SessionEnded {
                command,
                code,
                elapsed,
            } => {
                self.handle.stats().finished(&command, code, elapsed);
                self.pools[pool].session_completed();
                self.session_ended(slot, now);
            }
            Event::Notice {
                kind,
                message,
                session,
            } => {
                let name = &self.pools[pool].config.name;
                let kind = NoticeKind::from_name(&kind);
                if kind == NoticeKind::Count {
                    tracing::debug!(plugin = %name, pid, session, "counter: {message}");
                } else {
                    tracing::info!(plugin = %name, pid, kind = %kind, session, "notice: {message}");
                }
                if kind == NoticeKind::Retire {
                    // A recycle, not a failure: no new session; replaced when its
                    // sessions are done.
                    self.workers[slot].machine.retired = true;
                    self.session_ended(slot, now);
                }
                self.pools[pool].notice(Notice::received(kind, message, session, pid));
                self.changed = true;
            }
        }
        self.schedule(slot);
        Ok(())
    }

    fn on_hello(
        &mut self,
        slot: usize,
        hello: &ngw_vocab::Hello,
        now: Instant,
    ) -> Result<(), WorkerEnd> {
        let pool = self.workers[slot].machine.pool;
        if let Some(reason) = Pool::unspoken(hello) {
            // Retrying would only repeat it: disable the plugin, and let the worker go as
            // any stopped worker does (q, then SIGTERM, then SIGKILL).
            self.disable(pool, reason);
            let config = &self.pools[pool].config;
            self.workers[slot].machine.quit(config, now);
            return Ok(());
        }
        let takes_ctty = self.workers[slot].machine.takes_ctty();
        let learned = self.pools[pool].learn(hello, takes_ctty);
        if learned.reroute {
            self.publish_routes(pool);
        }
        if let Some(fault) = learned.fault {
            return Err(WorkerEnd::Protocol(fault));
        }
        let w = &self.workers[slot];
        tracing::info!(
            plugin = %self.pools[pool].config.name,
            pid = w.pid(),
            sdk = hello.sdk.as_deref().unwrap_or("?"),
            sessions = w.machine.max_sessions(),
            "worker ready in {:.0} ms",
            now.saturating_duration_since(w.machine.spawned_at).as_secs_f64() * 1000.0
        );
        let (pid, rss) = (w.pid(), worker::rss_bytes(w.pid()).unwrap_or(0));
        self.workers[slot].rss = rss;
        self.measure(pid, now);
        self.dirty_pools.push(pool);
        self.enforce_budget(now);
        Ok(())
    }

    /// After an `X` (or a retire): recycle, retire or wait for the next session.
    fn session_ended(&mut self, slot: usize, now: Instant) {
        let pool = self.workers[slot].machine.pool;
        self.pools[pool].session_ended(now);
        let w = &mut self.workers[slot];
        self.dirty_pools.push(pool);
        w.rss = worker::rss_bytes(w.pid()).unwrap_or(w.rss);
        let pid = w.pid();
        let p = &self.pools[pool];
        let config = &p.config;
        match p.why_quit(&w.machine, w.rss, self.stopping) {
            Some(why) => {
                // A mux worker finishes its other sessions first; none are bound meanwhile.
                w.machine.retired = true;
                if w.machine.sessions.is_empty() {
                    tracing::info!(plugin = %config.name, pid = w.pid(), "{why}");
                    w.machine.quit(config, now);
                    self.dirty_workers.push(slot);
                }
            }
            None => w.machine.idle_again(config, now),
        }
        self.schedule(slot);
        self.measure(pid, now);
        self.enforce_budget(now);
    }

    /// A worker is gone or must go: out of service now, reaped (then its clients told and
    /// its failure counted) as soon as it has exited, without ever blocking the loop.
    fn end_worker(&mut self, slot: usize, end: WorkerEnd, clients: &mut dyn Clients, now: Instant) {
        if !self.workers.contains(slot) {
            return;
        }
        let mut w = self.workers.remove(slot);
        self.budget.forget(w.pid());
        self.channels.deregister(&mut w.channel);
        let pool = w.machine.pool;
        self.dirty_pools.push(pool);
        self.changed = true;
        let failure = w.machine.dies_early(now);
        if !end.on_its_own() && !w.machine.is_quitting() {
            // It broke the protocol or missed a deadline: no grace.
            worker::signal_group(w.pid(), libc::SIGKILL);
        }
        if worker::has_exited(w.pid()) {
            let status = worker::finish(&mut w.child);
            self.worker_reaped(w, status, end, failure, clients, now);
        } else {
            let serial = w.serial;
            let deadline = self.reaper.hold(w, end, failure, now);
            self.timers.push((deadline, HostTimer::Dying(serial)));
        }
    }

    /// Reaps dying workers that have exited; kills those past their deadline.
    fn reap_dying(&mut self, clients: &mut dyn Clients, now: Instant) {
        let timers = &mut self.timers;
        let reaped = self.reaper.reap(now, |at, serial| {
            timers.push((at, HostTimer::Dying(serial)))
        });
        for r in reaped {
            let d = r.dying;
            self.worker_reaped(d.worker, r.status, d.end, d.failure, clients, now);
        }
    }

    /// A worker is gone: count the failure, tell its clients, log it. A worker ngd killed
    /// keeps the reason it was killed for; one that went on its own is described by its
    /// exit status.
    fn worker_reaped(
        &mut self,
        w: Worker,
        status: Option<ExitStatus>,
        end: WorkerEnd,
        failure: bool,
        clients: &mut dyn Clients,
        now: Instant,
    ) {
        let pool = w.machine.pool;
        let config = &self.pools[pool].config;
        let ending = Ending::of(&w.machine, status, &end, &config.log_path());
        if !w.machine.is_quitting() {
            self.pools[pool].restarts += 1;
        }
        if failure {
            self.record_failure(pool, ending.full_reason.clone(), now);
        }
        ending.log(&self.pools[pool].config.name, w.pid(), &w.machine);
        let Ending {
            code, how, reason, ..
        } = ending;
        for s in w.machine.sessions.into_values() {
            if let Some(conn) = s.conn {
                let message = format!(
                    "ngd: worker for '{}' died during the command ({how}; {reason})",
                    s.command
                );
                clients.finish(conn, code, &message);
            }
            let elapsed = now.saturating_duration_since(s.started);
            self.handle.stats().finished(&s.command, code, elapsed);
        }
        self.dirty_pools.push(pool);
        self.changed = true;
    }

    /// SIGCHLD: workers that exited without closing their channel, dying workers, and
    /// adopted orphans.
    pub fn reap(&mut self, clients: &mut dyn Clients, now: Instant) {
        let exited: Vec<(usize, u32)> = self
            .workers
            .iter()
            .filter_map(|(k, w)| worker::has_exited(w.pid()).then_some((k, w.pid())))
            .collect();
        for (slot, pid) in exited {
            self.end_exited(slot, pid, clients, now);
        }
        self.reap_dying(clients, now);
        if self.reaper.adopts() {
            self.reap_orphans(clients, now);
        }
    }

    fn reap_orphans(&mut self, clients: &mut dyn Clients, now: Instant) {
        for _ in 0..4096 {
            let Some(pid) = worker::exited_child() else {
                return;
            };
            let slot = self.workers.iter().find(|(_, w)| w.pid() == pid);
            let slot = slot.map(|(k, _)| k);
            if self.reaper.reap_if_orphan(pid, slot.is_some()) {
                continue;
            }
            match slot {
                Some(slot) => self.end_exited(slot, pid, clients, now),
                None => self.reap_dying(clients, now),
            }
        }
    }

    /// The worker `pid` in `slot` has exited. What it wrote before it went (the `X` of the
    /// session it finished, a notice) is still in its channel, and SIGCHLD can come before
    /// the channel reads as ready: that is read first, so a session it ended is not
    /// reported as lost; then the worker ends, unless its channel's end already ended it.
    fn end_exited(&mut self, slot: usize, pid: u32, clients: &mut dyn Clients, now: Instant) {
        self.on_ready(slot, true, false, clients, now);
        if self.workers.get(slot).is_some_and(|w| w.pid() == pid) {
            self.end_worker(slot, WorkerEnd::Exited, clients, now);
        }
    }

    /// The pool that serves a session of `pool` whose shim found `program`
    /// ([`derive`]); `Err` with the reason when the client is to run it itself. The first
    /// time a derivable program is seen again after it was recognised, its pool is made
    /// (it starts its workers as any new pool) and this session still runs directly.
    /// `context` gives the session's directory and environment, which a launcher's table
    /// is routed by too (`None`: the client sent no directory); the session gets the
    /// variables returned with the pool on top of the client's environment.
    pub fn route_program(
        &mut self,
        pool: usize,
        program: &[u8],
        context: impl FnOnce() -> Option<launcher::Context>,
    ) -> Result<(usize, derive::SessionEnv), String> {
        let context = if self.pools[pool].config.launcher {
            match context() {
                Some(c) => Some(c),
                None => {
                    let reason = "the client sent no directory to learn its launcher in";
                    return Err(self.ran_directly(pool, program, reason.to_owned()));
                }
            }
        } else {
            None
        };
        let key = derive::Key {
            pool,
            program: program.to_vec(),
            context,
        };
        let pools = &self.pools;
        let route = self.routes.route(&key, &pools[pool].config, |p| {
            pools.get(p).is_some_and(|p| p.status == PoolStatus::Active)
        });
        let (command, env, session_env) = match route {
            derive::Route::Pool(p) => return Ok((p, self.routes.session_env(&key).to_vec())),
            derive::Route::Exec(reason) => return Err(self.ran_directly(pool, program, reason)),
            derive::Route::Derive {
                command,
                env,
                session_env,
            } => (command, env, session_env),
        };
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(program));
        let parent = &self.pools[pool].config;
        // Another directory or environment that learned the same command line: its pool.
        let same = self.pools.iter().position(|p| {
            p.status == PoolStatus::Active
                && p.derived_from.as_deref() == Some(parent.name.as_str())
                && p.config.command == command
                && p.config.env == env
                && p.config.program.as_deref() == Some(path)
        });
        if let Some(index) = same {
            self.routes.derived(&key, index, session_env.clone());
            return Ok((index, session_env));
        }
        self.next_derived += 1;
        let config = derive::derived_config(parent, path, command, env, self.next_derived);
        if let Err(e) = config.validate() {
            self.routes.refuse(&key, e.clone());
            return Err(e);
        }
        tracing::info!(
            plugin = %parent.name,
            derived = %config.name,
            program = %path.display(),
            "a pool derived for a shim's program"
        );
        let mut derived = Pool::new(config);
        derived.derived_from = Some(parent.name.clone());
        let index = self.add_pool(derived);
        self.routes.derived(&key, index, session_env);
        self.changed = true;
        let reason = "its derived pool is starting".to_owned();
        Err(self.ran_directly(pool, program, reason))
    }

    /// Records on `pool` that its shim runs `program` directly, and why (a `fallback`
    /// notice, as for any session that is not served warm); returns the reason.
    fn ran_directly(&mut self, pool: usize, program: &[u8], reason: String) -> String {
        let message = format!(
            "a shim runs {} directly: {reason}",
            String::from_utf8_lossy(program)
        );
        let notice = Notice::received(NoticeKind::Fallback, message, None, std::process::id());
        self.pools[pool].notice(notice);
        self.changed = true;
        reason
    }

    /// Re-reads the plugin tables: pools whose table changed (or that were disabled) are
    /// replaced by fresh ones, removed ones retire after their running sessions, new ones
    /// start. A replaced pool's successor takes over its queue and learned commands.
    pub fn reload(&mut self, plugins: &[PluginConfig], now: Instant) -> (usize, usize) {
        let plan = Reload::plan(&self.pools, plugins);
        // Pools derived for shims' programs are not tables: they retire with the rest, and
        // are derived again on use.
        self.routes.clear();
        for &pool in &plan.retire {
            self.retire_pool(pool, now);
        }
        for config in plan.start {
            let mut next = Pool::new(config.clone());
            for old in self
                .pools
                .iter_mut()
                .filter(|p| p.status == PoolStatus::Retiring && p.config.name == config.name)
            {
                next.take_over(old);
            }
            self.add_pool(next);
        }
        self.changed = true;
        (plan.kept, plugins.len() - plan.kept)
    }

    fn retire_pool(&mut self, pool: usize, now: Instant) {
        tracing::info!(plugin = %self.pools[pool].config.name, "retiring");
        self.pools[pool].status = PoolStatus::Retiring;
        self.handle.registry().unroute_plugin(pool);
        self.retire_workers(Some(pool), now);
    }

    /// Retires the workers of `pool` (of every pool: `None`): they take no new session,
    /// and those without one quit now.
    fn retire_workers(&mut self, pool: Option<usize>, now: Instant) {
        for (slot, w) in self.workers.iter_mut() {
            if pool.is_some_and(|p| p != w.machine.pool) {
                continue;
            }
            w.machine.retired = true;
            if w.machine.sessions.is_empty() {
                w.machine.quit(&self.pools[w.machine.pool].config, now);
                self.dirty_workers.push(slot);
            }
        }
        let slots: Vec<usize> = self.workers.iter().map(|(k, _)| k).collect();
        for slot in slots {
            self.schedule(slot);
        }
    }

    /// Shutdown: no new workers or sessions; idle and starting workers stop now, busy ones
    /// after their sessions.
    pub fn stop(&mut self, now: Instant) {
        self.stopping = true;
        self.retire_workers(None, now);
        self.dirty_pools.extend(0..self.pools.len());
    }

    /// Shutdown gave up (or finished): kill and reap whatever is left, synchronously, so
    /// that no process outlives the server.
    pub fn kill_all(&mut self, clients: &mut dyn Clients, now: Instant) {
        let slots: Vec<usize> = self.workers.iter().map(|(k, _)| k).collect();
        for slot in slots {
            self.end_worker(slot, WorkerEnd::ServerStopped, clients, now);
        }
        self.reaper.kill_all(now);
        self.reap_dying(clients, now);
        self.reaper.kill_orphans();
    }
}

/// A busy worker's channel is read only while the client of the session it last wrote
/// for keeps up (backpressure; `docs/ngw.md` §7.5, §15.1).
fn reader_blocked(machine: &Machine, clients: &dyn Clients) -> bool {
    let conn = if machine.is_mux() {
        machine.reading_for()
    } else {
        machine.sessions.values().next().and_then(|s| s.conn)
    };
    conn.is_some_and(|c| clients.output_full(c))
}
