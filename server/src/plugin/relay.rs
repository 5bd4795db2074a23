//! The loop's side of the plugin host: spawning, the handshake, relaying sessions between
//! a client connection and a worker channel, health checks, failures and stopping.
//!
//! Relaying follows `docs/ngw.md` §7: the header goes to the worker in one write (client
//! `E` entries named `NGW_*` are dropped; `NGW_UMASK` and `NGW_SESSION` are added); the
//! worker's `1 2` become the client's output, its `S` asks the client for one chunk (or is
//! answered with `.` by ngd when the client's stdin has ended or the client is gone), its `X`
//! ends the session. The worker's channel is read only while the client's write buffer is
//! under the output high-water mark, so a fast worker never grows ngd's memory.

use super::worker::{self, Hello};
use super::{
    describe_exit, Busy, PluginConfig, PluginHost, PoolStatus, Queued, WorkerState, EARLY_DEATH,
    TERM_TO_KILL,
};
use crate::conn::{Conn, ConnState, PluginConn};
use crate::event_loop::{EventLoop, FIRST_WORKER};
use crate::exit_codes;
use crate::session_io::{ConnKey, OUTPUT_HIGH_WATER};
use bytes::{Bytes, BytesMut};
use mio::{Interest, Token};
use ng_proto::codec::encode;
use ng_proto::{exit, ChunkType, Decoder, Limits, Request};
use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

/// The reason given when a worker's channel reaches end of file.
const CLOSED: &str = "closed its channel";

/// How long after its channel closes a worker may take to exit before it is killed.
const REAP_GRACE: Duration = Duration::from_millis(500);

#[allow(clippy::too_many_arguments)]
/// Queues a plugin command's session; the pool assigns a worker at the end of the turn.
/// When every worker is busy and `queue` sessions already wait, the client is told at once
/// (exit code 75) rather than left hanging.
pub(crate) fn queue_session(
    conn: &mut Conn,
    host: &mut PluginHost,
    key: ConnKey,
    pool: usize,
    command: String,
    request: Request,
    umask: Option<u32>,
    now: Instant,
) {
    let p = &host.pools[pool];
    let waiting = p.queue.len();
    if waiting >= p.idle.len() + p.config.queue && p.status == PoolStatus::Active {
        tracing::info!(conn = conn.serial, command = %command, "busy: {waiting} queued");
        conn.session.write_stderr(
            format!("ngd: '{command}' is busy ({waiting} queued); try again later\n").as_bytes(),
        );
        conn.session.exit(exit_codes::TEMPFAIL);
        conn.state = ConnState::Finishing;
        return;
    }
    conn.state = ConnState::Plugin(PluginConn {
        pool,
        command,
        request: Some(request),
        umask,
        early_stdin: Default::default(),
        early_stdin_bytes: 0,
        early_stdin_eof: false,
    });
    host.pools[pool].queue.push_back(Queued {
        conn: key,
        since: now,
    });
    host.dirty.push(pool);
}

fn busy_of(
    host: &mut PluginHost,
    relay: Option<(usize, u64)>,
) -> Option<(usize, &mut super::Worker)> {
    let (slot, serial) = relay?;
    let w = host.workers.get_mut(slot)?;
    (w.serial == serial && matches!(w.state, WorkerState::Busy(_))).then_some((slot, w))
}

/// Client stdin for the worker: forwarded if the worker has credit, else held (in the
/// connection until a worker is bound, then in the session).
pub(crate) fn conn_stdin(conn: &mut Conn, host: &mut PluginHost, data: Bytes) {
    if conn.relay.is_none() {
        if let ConnState::Plugin(p) = &mut conn.state {
            if p.request.is_some() {
                p.early_stdin_bytes += data.len();
                p.early_stdin.push_back(data);
                conn.stdin_backlog = p.early_stdin_bytes;
            }
        }
        return;
    }
    let Some((slot, w)) = busy_of(host, conn.relay) else {
        return;
    };
    let WorkerState::Busy(b) = &mut w.state else {
        return;
    };
    if b.credit {
        b.credit = false;
        encode(ChunkType::STDIN, &data, &mut w.bufs.wbuf);
        host.dirty_workers.push(slot);
    } else {
        b.stdin_pending_bytes += data.len();
        b.stdin_pending.push_back(data);
        conn.stdin_backlog = b.stdin_pending_bytes;
    }
}

/// The client's stdin ended.
pub(crate) fn conn_stdin_eof(conn: &mut Conn, host: &mut PluginHost) {
    if conn.relay.is_none() {
        if let ConnState::Plugin(p) = &mut conn.state {
            p.early_stdin_eof = true;
        }
        return;
    }
    let Some((slot, w)) = busy_of(host, conn.relay) else {
        return;
    };
    let WorkerState::Busy(b) = &mut w.state else {
        return;
    };
    b.stdin_eof = true;
    if b.credit && b.stdin_pending.is_empty() {
        b.credit = false;
        b.eof_sent = true;
        encode(ChunkType::STDIN_EOF, b"", &mut w.bufs.wbuf);
        host.dirty_workers.push(slot);
    }
}

/// The client is gone: answer an outstanding `S` with `.`, send `i hangup`, and give the
/// worker its grace to send `X`.
pub(crate) fn hangup(host: &mut PluginHost, relay: (usize, u64), now: Instant) {
    let (slot, serial) = relay;
    let Some(w) = host.workers.get_mut(slot) else {
        return;
    };
    if w.serial != serial {
        return;
    }
    let grace = w.interrupt_grace(&host.pools[w.pool].config);
    let interrupt = w.has_feature("interrupt");
    let WorkerState::Busy(b) = &mut w.state else {
        return;
    };
    if b.conn.is_none() {
        return;
    }
    b.conn = None;
    b.stdin_pending.clear();
    b.stdin_eof = true;
    if b.credit {
        b.credit = false;
        b.eof_sent = true;
        encode(ChunkType::STDIN_EOF, b"", &mut w.bufs.wbuf);
    }
    if interrupt {
        encode(ChunkType::WORKER_INTERRUPT, b"hangup", &mut w.bufs.wbuf);
    }
    b.hangup_deadline = Some(now + grace);
    tracing::debug!(worker = w.pid(), "client gone; hangup sent");
    host.dirty_workers.push(slot);
}

/// Forwards a signal to a busy worker's command (`i <SIGNAME>`), if the worker acts on
/// interrupts.
pub(crate) fn interrupt(host: &mut PluginHost, relay: (usize, u64), signal: &str) {
    let (slot, serial) = relay;
    let Some(w) = host.workers.get_mut(slot) else {
        return;
    };
    if w.serial != serial || !matches!(w.state, WorkerState::Busy(_)) {
        return;
    }
    if w.has_feature("interrupt") {
        encode(
            ChunkType::WORKER_INTERRUPT,
            signal.as_bytes(),
            &mut w.bufs.wbuf,
        );
        host.dirty_workers.push(slot);
    }
}

impl EventLoop {
    /// Registers `pool`'s commands (configured ones at once).
    pub(crate) fn publish_routes(&mut self, pool: usize) {
        let p = &self.host.pools[pool];
        let clashes =
            self.core
                .handle
                .registry()
                .set_plugin_commands(pool, &p.commands, &p.config.name);
        if !clashes.is_empty() {
            let reason = format!(
                "command name(s) {} already taken by another command",
                clashes.join(", ")
            );
            self.host.disable(pool, reason);
        }
    }

    /// Publishes every pool's state for `ng-stats`.
    pub(crate) fn publish_plugins(&self) {
        self.core.handle.set_plugins(self.host.reports());
    }

    fn spawn_worker(&mut self, pool: usize, now: Instant) {
        let config = self.host.pools[pool].config.clone();
        let bridge_exe = match &self.host.bridge_exe {
            Some(p) => Ok(p.clone()),
            None => std::env::current_exe(),
        };
        let features = super::HOST_FEATURES.join(",");
        let spawned = match bridge_exe.and_then(|exe| {
            let launch = worker::Launch {
                bridge_exe: &exe,
                host_features: &features,
            };
            worker::spawn(&config, &launch)
        }) {
            Ok(s) => s,
            Err(e) => {
                let reason = format!("cannot start {:?}: {e}", config.command[0]);
                self.host.record_failure(pool, reason, now);
                return;
            }
        };
        let serial = self.host.next_worker_serial;
        self.host.next_worker_serial += 1;
        let entry = self.host.workers.vacant_entry();
        let slot = entry.key();
        let mut channel = spawned.channel;
        if let Err(e) = self.poll.registry().register(
            &mut channel,
            Token(FIRST_WORKER + slot),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::error!(plugin = %config.name, "register worker channel: {e}");
            let mut child = spawned.child;
            worker::signal_group(child.id(), libc::SIGKILL);
            let _ = child.wait();
            return;
        }
        tracing::info!(plugin = %config.name, pid = spawned.child.id(), "worker started");
        entry.insert(super::Worker {
            serial,
            pool,
            child: spawned.child,
            channel,
            bufs: worker::ChannelBufs {
                readable: true,
                writable: true,
                ..Default::default()
            },
            state: WorkerState::Starting {
                deadline: now + PluginConfig::ms(config.handshake_timeout_ms),
            },
            hello: None,
            sessions: 0,
            spawned_at: now,
            ready_at: None,
        });
        self.host.pools[pool].workers.push(slot);
        self.host.dirty_workers.push(slot);
    }

    /// Queue expiry, assignments, spawns and retirements for one pool.
    pub(crate) fn maintain_pool(&mut self, pool: usize, now: Instant) {
        // Sessions that cannot be served.
        loop {
            let p = &self.host.pools[pool];
            let Some(q) = p.queue.front().copied() else {
                break;
            };
            let refusal = match &p.status {
                PoolStatus::Disabled { reason } => Some((
                    Refusal::CannotStart(reason.clone()),
                    exit_codes::CANNOT_START,
                )),
                _ if self.host.stopping => Some((Refusal::Stopping, exit_codes::UNAVAILABLE)),
                _ if now >= q.since + PluginConfig::ms(p.config.queue_timeout_ms) => {
                    Some((Refusal::TimedOut, exit_codes::TEMPFAIL))
                }
                _ => None,
            };
            let Some((message, code)) = refusal else {
                break;
            };
            self.host.pools[pool].queue.pop_front();
            self.refuse_queued(q.conn, &message, code, now);
        }
        // Idle workers take queued sessions, oldest first.
        while !self.host.pools[pool].queue.is_empty() && !self.host.pools[pool].idle.is_empty() {
            let Some(q) = self.host.pools[pool].queue.pop_front() else {
                break;
            };
            if !self.is_waiting(q.conn) {
                continue;
            }
            let Some(slot) = self.host.pools[pool].idle.pop_front() else {
                break;
            };
            self.bind(slot, q.conn, now);
        }
        // Start workers: up to min, plus one per queued session not covered by a starting
        // one, within max, outside backoff.
        let p = &self.host.pools[pool];
        if p.status == PoolStatus::Active && !self.host.stopping {
            let starting = p
                .workers
                .iter()
                .filter(|w| matches!(self.host.workers[**w].state, WorkerState::Starting { .. }))
                .count();
            let alive = p
                .workers
                .iter()
                .filter(|w| !matches!(self.host.workers[**w].state, WorkerState::Quitting { .. }))
                .count();
            let want_for_queue = p.queue.len().saturating_sub(starting);
            let want = p
                .config
                .min_workers
                .saturating_sub(alive)
                .max(want_for_queue);
            let room = p.config.max_workers().saturating_sub(alive);
            let failure_pending = self
                .host
                .dying
                .iter()
                .any(|d| d.failure && d.worker.pool == pool);
            let backoff_over = p.next_spawn.is_none_or(|t| now >= t) && !failure_pending;
            if backoff_over {
                // A passed backoff is over whether or not a worker is wanted now.
                self.host.pools[pool].next_spawn = None;
                for _ in 0..want.min(room) {
                    self.spawn_worker(pool, now);
                    let p = &self.host.pools[pool];
                    if p.status != PoolStatus::Active || p.next_spawn.is_some() {
                        break;
                    }
                }
            }
        }
        // A disabled pool with queued sessions refuses them on the next pass.
        if !matches!(self.host.pools[pool].status, PoolStatus::Active)
            && !self.host.pools[pool].queue.is_empty()
        {
            self.host.dirty.push(pool);
        }
    }

    fn is_waiting(&self, key: ConnKey) -> bool {
        self.conns.get(key.slot).is_some_and(|c| {
            c.serial == key.serial
                && matches!(&c.state, ConnState::Plugin(p) if p.request.is_some())
        })
    }

    fn refuse_queued(&mut self, key: ConnKey, refusal: &Refusal, code: i32, now: Instant) {
        if !self.is_waiting(key) {
            return;
        }
        let conn = &mut self.conns[key.slot];
        let ConnState::Plugin(p) = &conn.state else {
            return;
        };
        let command = &p.command;
        let message = match refusal {
            Refusal::CannotStart(reason) => {
                format!("ngd: command '{command}' could not start: {reason}")
            }
            Refusal::Stopping => {
                format!("ngd: command '{command}' cancelled: the server is shutting down")
            }
            Refusal::TimedOut => format!("ngd: '{command}' timed out waiting for a worker"),
        };
        tracing::info!(conn = conn.serial, "{message}");
        conn.session.write_stderr(format!("{message}\n").as_bytes());
        conn.session.exit(code);
        conn.state = ConnState::Finishing;
        self.dirty_conns.push(key.slot);
        let _ = now;
    }

    /// Gives the session of `key` to idle worker `slot`: the header in one write.
    fn bind(&mut self, slot: usize, key: ConnKey, now: Instant) {
        let session_id = self.host.next_session;
        self.host.next_session += 1;
        let conn = &mut self.conns[key.slot];
        let ConnState::Plugin(p) = &mut conn.state else {
            return;
        };
        // The client's umask when it reports it (our ng does), else ngd's own.
        let umask = p.umask.unwrap_or(self.host.umask);
        let Some(request) = p.request.take() else {
            return;
        };
        let stdin_pending = std::mem::take(&mut p.early_stdin);
        let stdin_pending_bytes = std::mem::take(&mut p.early_stdin_bytes);
        let stdin_eof = p.early_stdin_eof;
        let command = p.command.clone();
        let w = &mut self.host.workers[slot];
        let wbuf = &mut w.bufs.wbuf;
        for a in &request.args {
            encode(ChunkType::ARGUMENT, a, wbuf);
        }
        let mut entry = BytesMut::new();
        for (name, value) in &request.env {
            if name.starts_with(b"NGW_") {
                continue;
            }
            entry.clear();
            entry.extend_from_slice(name);
            entry.extend_from_slice(b"=");
            entry.extend_from_slice(value);
            encode(ChunkType::ENVIRONMENT, &entry, wbuf);
        }
        encode(
            ChunkType::ENVIRONMENT,
            format!("NGW_UMASK={umask:04o}").as_bytes(),
            wbuf,
        );
        encode(
            ChunkType::ENVIRONMENT,
            format!("NGW_SESSION={session_id}").as_bytes(),
            wbuf,
        );
        if let Some(cwd) = &request.cwd {
            encode(ChunkType::WORKING_DIR, cwd, wbuf);
        }
        encode(ChunkType::COMMAND, command.as_bytes(), wbuf);
        w.state = WorkerState::Busy(Busy {
            conn: Some(key),
            command: command.clone(),
            started: now,
            credit: false,
            stdin_pending,
            stdin_pending_bytes,
            stdin_eof,
            eof_sent: false,
            hangup_deadline: None,
        });
        conn.relay = Some((slot, w.serial));
        self.core.handle.stats().started(&command);
        tracing::debug!(conn = conn.serial, worker = w.pid(), command = %command, "session bound");
        self.host.dirty_workers.push(slot);
    }

    /// Reads, decodes and acts on what a worker sent; writes what it is owed.
    pub(crate) fn service_worker(&mut self, slot: usize, now: Instant) {
        let Some(w) = self.host.workers.get_mut(slot) else {
            return;
        };
        // Write first: headers and stdin go out before we wait for answers.
        while w.bufs.writable && !w.bufs.wbuf.is_empty() {
            match w.channel.write(&w.bufs.wbuf) {
                Ok(n) => bytes::Buf::advance(&mut w.bufs.wbuf, n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => w.bufs.writable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let reason = format!("its channel failed: {e}");
                    self.worker_died(slot, reason, now);
                    return;
                }
            }
        }
        let mut decoder = Decoder::new(Limits::default());
        loop {
            let Some(w) = self.host.workers.get_mut(slot) else {
                return;
            };
            // Backpressure: read a busy worker only while its client keeps up.
            if let WorkerState::Busy(Busy { conn: Some(k), .. }) = &w.state {
                if let Some(c) = self.conns.get(k.slot) {
                    if c.wbuf.len() + c.session.transmit().len() > OUTPUT_HIGH_WATER {
                        return;
                    }
                }
            }
            // Decode what is buffered before reading more.
            match decoder.decode(&mut w.bufs.rbuf) {
                Ok(Some(chunk)) => {
                    if let Err(reason) = self.on_worker_chunk(slot, chunk.ty, chunk.payload, now) {
                        self.worker_died(slot, reason, now);
                        return;
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    self.worker_died(slot, format!("protocol error: {e}"), now);
                    return;
                }
            }
            let Some(w) = self.host.workers.get_mut(slot) else {
                return;
            };
            if !w.bufs.readable {
                return;
            }
            match w.channel.read(&mut self.scratch) {
                Ok(0) => {
                    w.bufs.readable = false;
                    self.worker_died(slot, CLOSED.to_owned(), now);
                    return;
                }
                Ok(n) => w.bufs.rbuf.extend_from_slice(&self.scratch[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => w.bufs.readable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.worker_died(slot, format!("its channel failed: {e}"), now);
                    return;
                }
            }
        }
    }

    fn on_worker_chunk(
        &mut self,
        slot: usize,
        ty: ChunkType,
        payload: Bytes,
        now: Instant,
    ) -> Result<(), String> {
        let w = &mut self.host.workers[slot];
        let pool = w.pool;
        match (&mut w.state, ty) {
            (WorkerState::Starting { .. }, ChunkType::WORKER_HELLO) => {
                self.on_hello(slot, &payload, now)
            }
            (WorkerState::Starting { .. }, ty) => Err(format!("sent {ty} before its hello")),
            (WorkerState::Idle { ping, .. }, ChunkType::WORKER_PONG) => {
                if ping.is_some_and(|(p, _)| p.to_be_bytes()[..] == payload[..]) {
                    *ping = None;
                }
                Ok(())
            }
            (WorkerState::Busy(_) | WorkerState::Quitting { .. }, ChunkType::WORKER_PONG) => Ok(()),
            (WorkerState::Busy(b), ChunkType::STDOUT | ChunkType::STDERR) => {
                if let Some(conn) = b.conn.and_then(|k| live(&mut self.conns, k)) {
                    if ty == ChunkType::STDOUT {
                        conn.session.write_stdout(&payload);
                    } else {
                        conn.session.write_stderr(&payload);
                    }
                    self.dirty_conns.push(conn_slot(b.conn));
                }
                Ok(())
            }
            (WorkerState::Busy(b), ChunkType::SEND_INPUT) => {
                if b.credit {
                    return Err("sent S while a previous S was unanswered".to_owned());
                }
                if let Some(data) = b.stdin_pending.pop_front() {
                    b.stdin_pending_bytes -= data.len();
                    encode(ChunkType::STDIN, &data, &mut w.bufs.wbuf);
                    // Reading from the client may have paused on this backlog.
                    if let Some(conn) = b.conn.and_then(|k| live(&mut self.conns, k)) {
                        conn.stdin_backlog = b.stdin_pending_bytes;
                        self.dirty_conns.push(conn_slot(b.conn));
                    }
                } else if b.stdin_eof || b.eof_sent || b.conn.is_none() {
                    b.eof_sent = true;
                    encode(ChunkType::STDIN_EOF, b"", &mut w.bufs.wbuf);
                } else {
                    b.credit = true;
                    if let Some(conn) = b.conn.and_then(|k| live(&mut self.conns, k)) {
                        if !conn.session.request_stdin() && conn.session.stdin_ended() {
                            b.credit = false;
                            b.eof_sent = true;
                            encode(ChunkType::STDIN_EOF, b"", &mut w.bufs.wbuf);
                        }
                        conn.stdin_backlog = b.stdin_pending_bytes;
                        self.dirty_conns.push(conn_slot(b.conn));
                    }
                }
                self.host.dirty_workers.push(slot);
                Ok(())
            }
            (WorkerState::Busy(b), ChunkType::EXIT) => {
                let code = exit::parse(&payload);
                let command = b.command.clone();
                let elapsed = now.saturating_duration_since(b.started);
                if let Some(conn) = b.conn.and_then(|k| live(&mut self.conns, k)) {
                    conn.session.exit(code);
                    conn.state = ConnState::Finishing;
                    conn.relay = None;
                    conn.stdin_backlog = 0;
                    self.dirty_conns.push(conn_slot(b.conn));
                }
                self.core.handle.stats().finished(&command, code, elapsed);
                w.sessions += 1;
                let p = &mut self.host.pools[pool];
                p.sessions += 1;
                p.failures = 0;
                self.session_ended(slot, now);
                Ok(())
            }
            (WorkerState::Quitting { .. }, _) => Ok(()),
            (state, ty) => Err(format!("sent {ty} while {}", state.name())),
        }
    }

    fn on_hello(&mut self, slot: usize, payload: &[u8], now: Instant) -> Result<(), String> {
        let hello: Hello = serde_json::from_slice(payload)
            .map_err(|e| format!("sent a hello that is not valid JSON: {e}"))?;
        let w = &mut self.host.workers[slot];
        let pool = w.pool;
        if let Some(error) = &hello.error {
            return Err(format!("refused to start: {error}"));
        }
        if hello.protocol != Some(1) {
            let theirs = hello.protocol.map_or_else(
                || "no protocol version".to_owned(),
                |v| format!("protocol {v}"),
            );
            // Retrying would only repeat it: disable the plugin, and let the worker go as
            // any stopped worker does (q, then SIGTERM, then SIGKILL).
            self.host.disable(
                pool,
                format!("its worker speaks ngw {theirs}; this ngd speaks 1"),
            );
            self.quit_worker(slot, now);
            return Ok(());
        }
        let p = &mut self.host.pools[pool];
        if p.config.commands.is_empty() {
            if hello.commands.is_empty() {
                return Err("its hello lists no commands".to_owned());
            }
            if p.commands != hello.commands {
                p.commands = hello.commands.clone();
                self.publish_routes(pool);
            }
        } else if let Some(missing) = p
            .config
            .commands
            .iter()
            .find(|c| !hello.commands.contains(c))
        {
            return Err(format!("worker does not serve command '{missing}'"));
        }
        let w = &mut self.host.workers[slot];
        tracing::info!(
            plugin = %self.host.pools[pool].config.name,
            pid = w.pid(),
            sdk = hello.sdk.as_deref().unwrap_or("?"),
            "worker ready in {:.0} ms",
            now.saturating_duration_since(w.spawned_at).as_secs_f64() * 1000.0
        );
        w.hello = Some(hello);
        w.ready_at = Some(now);
        self.make_idle(slot, now);
        Ok(())
    }

    fn make_idle(&mut self, slot: usize, now: Instant) {
        let w = &mut self.host.workers[slot];
        let config = &self.host.pools[w.pool].config;
        let next_ping =
            (config.ping_interval_ms > 0).then(|| now + PluginConfig::ms(config.ping_interval_ms));
        w.state = WorkerState::Idle {
            since: now,
            next_ping,
            ping: None,
        };
        let pool = w.pool;
        self.host.pools[pool].idle.push_back(slot);
        self.host.dirty.push(pool);
    }

    /// After `X`: recycle, retire or make idle.
    fn session_ended(&mut self, slot: usize, now: Instant) {
        let w = &self.host.workers[slot];
        let p = &self.host.pools[w.pool];
        let recycle = p.config.recycle_after > 0 && w.sessions >= p.config.recycle_after;
        let too_big = p.config.max_memory_mb > 0
            && worker::rss_bytes(w.pid()).is_some_and(|rss| rss > p.config.max_memory_mb << 20);
        if recycle || too_big || self.host.stopping || p.status != PoolStatus::Active {
            let why = if recycle {
                "recycled after its session limit"
            } else if too_big {
                "recycled over its memory cap"
            } else {
                "no longer needed"
            };
            tracing::info!(plugin = %p.config.name, pid = w.pid(), "{why}");
            self.quit_worker(slot, now);
            let pool = self.host.workers[slot].pool;
            self.host.dirty.push(pool);
        } else {
            self.make_idle(slot, now);
        }
    }

    /// Sends `q` and starts the stop escalation.
    pub(crate) fn quit_worker(&mut self, slot: usize, now: Instant) {
        let w = &mut self.host.workers[slot];
        if matches!(w.state, WorkerState::Quitting { .. }) {
            return;
        }
        let pool = w.pool;
        let timeout = PluginConfig::ms(self.host.pools[pool].config.stop_timeout_ms);
        encode(ChunkType::WORKER_QUIT, b"", &mut w.bufs.wbuf);
        w.state = WorkerState::Quitting {
            term_at: now + timeout,
            kill_at: None,
        };
        self.host.pools[pool].idle.retain(|s| *s != slot);
        self.host.dirty_workers.push(slot);
    }

    /// A worker is gone or must go: take it out of service now, and reap it (then tell its
    /// client and count it) as soon as it has exited, without ever blocking the loop.
    pub(crate) fn worker_died(&mut self, slot: usize, reason: String, now: Instant) {
        if !self.host.workers.contains(slot) {
            return;
        }
        let mut w = self.host.workers.remove(slot);
        let _ = self.poll.registry().deregister(&mut w.channel);
        let pool = w.pool;
        let p = &mut self.host.pools[pool];
        p.workers.retain(|s| *s != slot);
        p.idle.retain(|s| *s != slot);
        self.host.dirty.push(pool);
        // A failure is counted once the worker is reaped (its exit status makes the reason);
        // until then the pool starts nothing (see `maintain_pool`), so the backoff always
        // applies to the next start.
        let early = match &w.state {
            WorkerState::Starting { .. } => true,
            WorkerState::Busy(_) | WorkerState::Idle { .. } => w
                .ready_at
                .is_some_and(|t| now.saturating_duration_since(t) < EARLY_DEATH),
            WorkerState::Quitting { .. } => false,
        };
        let closed = reason == CLOSED;
        if !closed && !matches!(w.state, WorkerState::Quitting { .. }) {
            // It broke the protocol or missed a deadline: no grace.
            worker::signal_group(w.pid(), libc::SIGKILL);
        }
        if worker::has_exited(w.pid()) {
            let status = worker::finish(&mut w.child);
            self.worker_reaped(w, status, reason, early, !closed, now);
        } else {
            // Exiting (it closed its channel) or being killed: reap it when it is gone
            // (SIGCHLD or the deadline), SIGKILL it if it takes too long.
            self.host.dying.push(super::Dying {
                worker: w,
                reason,
                failure: early,
                deadline: now + REAP_GRACE,
                killed: !closed,
            });
        }
    }

    /// Reaps dying workers that have exited; kills those past their deadline.
    pub(crate) fn reap_dying(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.host.dying.len() {
            let d = &mut self.host.dying[i];
            let exited = worker::has_exited(d.worker.pid());
            let status = if exited {
                Some(worker::finish(&mut d.worker.child))
            } else if now >= d.deadline && !d.killed {
                worker::signal_group(d.worker.pid(), libc::SIGKILL);
                d.killed = true;
                d.deadline = now + REAP_GRACE;
                None
            } else if now >= d.deadline {
                // SIGKILL cannot be ignored; a process still not gone is stuck in the kernel.
                // Waiting for it here is the only way not to leave a zombie.
                Some(worker::finish(&mut d.worker.child))
            } else {
                None
            };
            match status {
                Some(status) => {
                    let d = self.host.dying.swap_remove(i);
                    // `killed` here may be our deadline's SIGKILL after it closed its channel;
                    // what matters for the reason is whether we killed it at death.
                    let ours = d.reason != CLOSED;
                    self.worker_reaped(d.worker, status, d.reason, d.failure, ours, now);
                }
                None => i += 1,
            }
        }
    }

    /// A worker is gone: count the failure (if `failure`), tell its client, log it. A
    /// worker ngd killed itself (`killed_by_us`) keeps the reason it was killed for; one that
    /// went on its own is described by its exit status.
    fn worker_reaped(
        &mut self,
        w: super::Worker,
        status: Option<std::process::ExitStatus>,
        reason: String,
        failure: bool,
        killed_by_us: bool,
        now: Instant,
    ) {
        let pid = w.pid();
        let pool = w.pool;
        let (code, how) = describe_exit(status);
        let p = &self.host.pools[pool];
        let name = p.config.name.clone();
        let full_reason = match &w.state {
            _ if killed_by_us => reason.clone(),
            WorkerState::Starting { .. } => format!(
                "worker {how} before its hello; see {}",
                p.config.log_path().display()
            ),
            _ => format!("worker {how}: {reason}"),
        };
        if !matches!(w.state, WorkerState::Quitting { .. }) {
            self.host.pools[pool].restarts += 1;
        }
        if failure {
            self.host.record_failure(pool, full_reason.clone(), now);
        }
        match &w.state {
            WorkerState::Starting { .. } => {
                tracing::warn!(plugin = %name, pid, "failed start: {full_reason}");
            }
            WorkerState::Busy(b) => {
                tracing::warn!(plugin = %name, pid, "worker {how} during a session: {reason}");
                if let Some(conn) = b.conn.and_then(|k| live(&mut self.conns, k)) {
                    conn.session.write_stderr(
                        format!(
                            "ngd: worker for '{}' died during the command ({how}; {reason})\n",
                            b.command
                        )
                        .as_bytes(),
                    );
                    conn.session.exit(code);
                    conn.state = ConnState::Finishing;
                    conn.relay = None;
                    self.dirty_conns.push(conn_slot(b.conn));
                }
                let elapsed = now.saturating_duration_since(b.started);
                self.core.handle.stats().finished(&b.command, code, elapsed);
            }
            WorkerState::Idle { .. } => {
                tracing::warn!(plugin = %name, pid, "idle worker {how}: {reason}");
            }
            WorkerState::Quitting { .. } => {
                tracing::info!(plugin = %name, pid, "worker stopped ({how})");
            }
        }
        self.host.dirty.push(pool);
    }

    /// Timers: handshakes, pings, idle timeouts, hangup graces, stop escalation, queues,
    /// dying workers.
    pub(crate) fn host_tick(&mut self, now: Instant) {
        if self.host.dying.iter().any(|d| now >= d.deadline) {
            self.reap_dying(now);
        }
        let slots: Vec<usize> = self.host.workers.iter().map(|(k, _)| k).collect();
        for slot in slots {
            let Some(w) = self.host.workers.get_mut(slot) else {
                continue;
            };
            let pool = w.pool;
            let config = &self.host.pools[pool].config;
            let min = config.min_workers;
            let idle_timeout = config.idle_timeout_ms;
            let ping_timeout = PluginConfig::ms(config.ping_timeout_ms);
            let ping_interval = PluginConfig::ms(config.ping_interval_ms);
            match &mut w.state {
                WorkerState::Starting { deadline } if now >= *deadline => {
                    let ms = config.handshake_timeout_ms;
                    self.worker_died(slot, format!("no hello within {ms} ms"), now);
                }
                WorkerState::Idle {
                    since,
                    next_ping,
                    ping,
                } => {
                    if let Some((_, deadline)) = ping {
                        if now >= *deadline {
                            self.worker_died(slot, "did not answer a ping".to_owned(), now);
                            continue;
                        }
                    } else if next_ping.is_some_and(|t| now >= t) {
                        let payload = self.host.next_session ^ (slot as u64) << 32;
                        *ping = Some((payload, now + ping_timeout));
                        *next_ping = Some(now + ping_interval);
                        encode(
                            ChunkType::WORKER_PING,
                            &payload.to_be_bytes(),
                            &mut w.bufs.wbuf,
                        );
                        self.host.dirty_workers.push(slot);
                    }
                    let since = *since;
                    let alive = self.host.pools[pool].workers.len();
                    if idle_timeout > 0
                        && now >= since + PluginConfig::ms(idle_timeout)
                        && alive > min
                    {
                        tracing::info!(pid = self.host.workers[slot].pid(), "idle timeout");
                        self.quit_worker(slot, now);
                    }
                }
                WorkerState::Busy(b) if b.hangup_deadline.is_some_and(|t| now >= t) => {
                    self.worker_died(
                        slot,
                        "did not end its session after a hangup".to_owned(),
                        now,
                    );
                }
                WorkerState::Quitting { term_at, kill_at } => match kill_at {
                    Some(k) if now >= *k => {
                        self.worker_died(slot, "killed after SIGTERM".to_owned(), now);
                    }
                    None if now >= *term_at => {
                        worker::signal_group(w.child.id(), libc::SIGTERM);
                        *kill_at = Some(now + TERM_TO_KILL);
                    }
                    _ => {}
                },
                _ => {}
            }
        }
        for pool in 0..self.host.pools.len() {
            let p = &self.host.pools[pool];
            let queue_due = p
                .queue
                .front()
                .is_some_and(|q| now >= q.since + PluginConfig::ms(p.config.queue_timeout_ms));
            let spawn_due = p.next_spawn.is_some_and(|t| now >= t);
            if queue_due || spawn_due {
                self.host.dirty.push(pool);
            }
        }
    }

    /// Checks for workers that exited without closing their channel (SIGCHLD).
    pub(crate) fn reap_workers(&mut self, now: Instant) {
        let exited: Vec<usize> = self
            .host
            .workers
            .iter()
            .filter_map(|(k, w)| worker::has_exited(w.pid()).then_some(k))
            .collect();
        for slot in exited {
            self.worker_died(slot, "exited".to_owned(), now);
        }
        self.reap_dying(now);
        if self.host.subreaper {
            self.reap_orphans(now);
        }
    }

    /// Reaps adopted orphans (descendants of workers whose parents exited) that have exited.
    fn reap_orphans(&mut self, now: Instant) {
        for _ in 0..4096 {
            let Some(pid) = worker::exited_child() else {
                return;
            };
            let worker = self
                .host
                .workers
                .iter()
                .find(|(_, w)| w.pid() == pid)
                .map(|(k, _)| k);
            if let Some(slot) = worker {
                self.worker_died(slot, "exited".to_owned(), now);
            } else if self.host.dying.iter().any(|d| d.worker.pid() == pid) {
                self.reap_dying(now);
            } else {
                worker::reap(pid);
            }
        }
    }

    /// At the very end: kill and reap every process ngd adopted, until none is left (a
    /// killed orphan's own children are adopted in turn), within a second.
    pub(crate) fn kill_orphans(&mut self) {
        if !self.host.subreaper {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let children = worker::children();
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

    /// Shutdown: stop every idle or starting worker now; busy ones after their session.
    pub(crate) fn stop_plugins(&mut self, now: Instant) {
        self.host.stopping = true;
        let slots: Vec<usize> = self.host.workers.iter().map(|(k, _)| k).collect();
        for slot in slots {
            if !matches!(self.host.workers[slot].state, WorkerState::Busy(_)) {
                self.quit_worker(slot, now);
            }
        }
        self.host.dirty.extend(0..self.host.pools.len());
    }

    /// Shutdown gave up (or finished): kill and reap whatever is left, synchronously, so
    /// that no process outlives the server.
    pub(crate) fn kill_plugins(&mut self, now: Instant) {
        let slots: Vec<usize> = self.host.workers.iter().map(|(k, _)| k).collect();
        for slot in slots {
            self.worker_died(slot, "the server stopped".to_owned(), now);
        }
        for d in &mut self.host.dying {
            worker::signal_group(d.worker.pid(), libc::SIGKILL);
            d.killed = true;
            d.deadline = now;
        }
        self.reap_dying(now);
        self.kill_orphans();
    }
}

/// Why a queued session is refused.
enum Refusal {
    CannotStart(String),
    Stopping,
    TimedOut,
}

fn live(conns: &mut slab::Slab<Conn>, key: ConnKey) -> Option<&mut Conn> {
    conns.get_mut(key.slot).filter(|c| c.serial == key.serial)
}

fn conn_slot(key: Option<ConnKey>) -> usize {
    key.map_or(usize::MAX, |k| k.slot)
}
