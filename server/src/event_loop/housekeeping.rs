//! The loop's housekeeping, done once per turn after the events: freed memory handed back
//! when the server is quiet, accepting again after running out of descriptors, the
//! binary's upgrade watch (and the newer clients it hands over to), the idle exit,
//! reloads, and the stop.
//!
//! The state these keep is in [`Housekeeping`] (two deadlines) and [`Stopping`] (the
//! phases of a stop); the methods on [`EventLoop`] act on them.

use super::{ConnClients, EventLoop};
use crate::conn::Conn;
use crate::plugin::PluginHost;
use std::time::{Duration, Instant};

/// How long to wait before accepting again after running out of file descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// After cancelling at shutdown, how long to wait for the exit codes to be written.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(2);

/// The loop's own deadlines besides connections', workers' and the stop's.
#[derive(Debug, Default)]
pub(super) struct Housekeeping {
    /// When to hand freed memory back to the kernel ([`crate::memory`]): set when a
    /// connection closes, acted on if none is open by then.
    release_memory_at: Option<Instant>,
    /// Accepting is paused until then, after running out of descriptors.
    accept_paused_until: Option<Instant>,
}

impl Housekeeping {
    /// A connection closed at `now`: memory goes back once the server has been quiet for
    /// [`crate::memory::QUIET_AFTER`].
    pub(super) fn conn_closed(&mut self, now: Instant) {
        self.release_memory_at = Some(now + crate::memory::QUIET_AFTER);
    }

    /// True when memory is to be handed back now: the quiet period is over and no
    /// connection (of `open`) is open. A due deadline is spent either way.
    pub(super) fn memory_due(&mut self, now: Instant, open: usize) -> bool {
        if self.release_memory_at.is_none_or(|t| now < t) {
            return false;
        }
        self.release_memory_at = None;
        open == 0
    }

    /// Stops accepting for [`ACCEPT_BACKOFF`].
    pub(super) fn pause_accepting(&mut self, now: Instant) {
        self.accept_paused_until = Some(now + ACCEPT_BACKOFF);
    }

    /// False while accepting is paused.
    pub(super) fn accepting(&self) -> bool {
        self.accept_paused_until.is_none()
    }

    /// True when a pause has just ended: the listeners are to be drained again.
    pub(super) fn accept_resumes(&mut self, now: Instant) -> bool {
        if self.accept_paused_until.is_none_or(|t| now < t) {
            return false;
        }
        self.accept_paused_until = None;
        true
    }

    /// The deadlines the loop's poll must wake for.
    pub(super) fn deadlines(&self) -> [Option<Instant>; 2] {
        [self.accept_paused_until, self.release_memory_at]
    }
}

/// Where a stop is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopPhase {
    /// Running commands have the grace period to finish.
    Grace,
    /// Nails were cancelled and plugin sessions sent SIGTERM; they have until
    /// `plugin_deadline` to send their `X`.
    Cancelled { plugin_deadline: Instant },
    /// Plugin sessions were answered for; connections still open at `give_up_at` are
    /// closed, and workers finish their stop escalation.
    Answered {
        plugin_deadline: Instant,
        give_up_at: Instant,
    },
}

/// What the loop is to do for a stop this turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StopStep {
    /// Nothing before the next deadline.
    Wait,
    /// The grace period is over: cancel in-process commands, refuse headers, SIGTERM
    /// plugin commands.
    Cancel,
    /// Plugin sessions did not answer in time: answer for them.
    AnswerPlugins,
    /// Close every connection; exit once the host is empty, or when its stop escalation
    /// bound after `since` has passed.
    GiveUp { since: Instant },
}

/// A stop in progress: its phases and their deadlines.
#[derive(Debug)]
pub(super) struct Stopping {
    /// End of the grace period: nails are cancelled, plugin sessions get `i SIGTERM`.
    cancel_at: Instant,
    phase: StopPhase,
}

impl Stopping {
    /// A stop begun at `now` with `grace` for running commands.
    pub(super) fn new(now: Instant, grace: Duration) -> Self {
        Self {
            cancel_at: now + grace,
            phase: StopPhase::Grace,
        }
    }

    /// Moves the stop on at `now`, and says what the loop is to do.
    pub(super) fn step(&mut self, now: Instant) -> StopStep {
        match self.phase {
            StopPhase::Answered { give_up_at, .. } if now < give_up_at => StopStep::Wait,
            StopPhase::Answered { give_up_at, .. } => StopStep::GiveUp { since: give_up_at },
            StopPhase::Cancelled { plugin_deadline } if now < plugin_deadline => StopStep::Wait,
            StopPhase::Cancelled { plugin_deadline } => {
                self.phase = StopPhase::Answered {
                    plugin_deadline,
                    give_up_at: now + SHUTDOWN_FLUSH,
                };
                StopStep::AnswerPlugins
            }
            StopPhase::Grace if now < self.cancel_at => StopStep::Wait,
            StopPhase::Grace => {
                self.phase = StopPhase::Cancelled {
                    plugin_deadline: now + SHUTDOWN_FLUSH,
                };
                StopStep::Cancel
            }
        }
    }

    /// The deadline the loop's poll must wake for at `now`: the current phase's end, and
    /// once the stop gave up, the end of the workers' stop escalation (`max_stop_time`
    /// after giving up). Deadlines of phases already left are not waited for again.
    pub(super) fn deadline(&self, now: Instant, max_stop_time: Duration) -> Instant {
        match self.phase {
            StopPhase::Grace => self.cancel_at,
            StopPhase::Cancelled { plugin_deadline } => plugin_deadline,
            StopPhase::Answered { give_up_at, .. } if now < give_up_at => give_up_at,
            StopPhase::Answered { give_up_at, .. } => give_up_at + max_stop_time,
        }
    }
}

impl EventLoop {
    /// Hands freed memory back to the kernel once the server has been quiet.
    pub(super) fn trim_memory(&mut self, now: Instant) {
        if self.housekeeping.memory_due(now, self.conns.len()) {
            let released = crate::memory::release_free_memory();
            tracing::debug!(released, "quiet: freed memory handed back");
        }
    }

    /// Accepts on every listener again once a pause for lack of descriptors is over.
    pub(super) fn resume_accepting(&mut self, now: Instant) {
        if self.housekeeping.accept_resumes(now) {
            for i in 0..self.listeners.len() {
                self.accept_all(i, now);
            }
        }
    }

    /// Looks at the binary when due: once it changed, the server is outdated (`ng-stats`
    /// says so) and, when it hands over on upgrades, exits as soon as it is idle.
    pub(super) fn upgrade_tick(&mut self, now: Instant) {
        let Some(watch) = self.upgrade.as_mut().filter(|w| w.due(now)) else {
            return;
        };
        let seen = crate::upgrade::stamp_of(watch.path());
        if !watch.observe(seen, now) {
            return;
        }
        self.core
            .handle
            .set_outdated(crate::upgrade::Outdated::Changed);
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
        self.hand_over(now);
    }

    /// Goes through the idle exit at once, as soon as no client is connected.
    fn hand_over(&mut self, now: Instant) {
        self.idle
            .get_or_insert_with(|| crate::idle::IdleExit::new(Duration::ZERO, now))
            .hurry();
    }

    /// A client newer than this server was served: its own `ngd` (next to its executable)
    /// is the newest known. It is recorded in the runtime directory for `ng`'s auto-start,
    /// and this server is outdated and hands over as on an upgrade. A client without an
    /// executable `ngd` beside it changes nothing; nor does one when the record cannot be
    /// written, since the next `ng` of this server's install would then start this version
    /// again.
    pub(super) fn newer_client(&mut self, client: crate::conn::NewerClient, now: Instant) {
        let Some(watch) = self.upgrade.as_mut() else {
            return;
        };
        let version = *client.version;
        if !watch.wants(&version, crate::upgrade::ours()) {
            return;
        }
        let Some(exe) = client.exe else {
            tracing::debug!(%version, "a newer client, whose executable cannot be read");
            return;
        };
        let Some((path, stamp)) = crate::upgrade::sibling_ngd(&exe) else {
            tracing::debug!(%version, client = %exe.display(), "a newer client, with no ngd beside it");
            return;
        };
        let found = ng_proto::handover::NewestNgd {
            version: version.clone(),
            path,
            stamp,
        };
        let runtime = crate::security::RuntimeDir::default_path();
        if let Err(e) = crate::upgrade::write_record(&runtime, &found) {
            if !watch.unrecorded() {
                return;
            }
            tracing::warn!(
                "ngd {version} ({}) is newer than this server, but recording it in {} failed: {e}; \
                 not handing over",
                found.path.display(),
                runtime.display()
            );
            return;
        }
        watch.newer(found.clone());
        let handing_over = self.core.settings.hand_over_on_upgrade;
        tracing::info!(
            "a client of ngd {version} connected, whose ngd ({}) is newer than this server ({}): {}",
            found.path.display(),
            crate::upgrade::ours(),
            if handing_over {
                "handing over to it once no client is connected"
            } else {
                "this server runs the old version until restarted"
            }
        );
        self.core
            .handle
            .set_outdated(crate::upgrade::Outdated::Newer(found));
        if handing_over {
            self.hand_over(now);
        }
    }

    /// Advances the idle exit: removes the socket files, then stops, once nobody has been
    /// connected for the configured period.
    pub(super) fn idle_tick(&mut self, now: Instant) {
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

    /// Reloads the configuration when asked (`SIGHUP`, `ng-reload`), unless stopping.
    pub(super) fn reload_if_asked(&mut self, now: Instant) {
        if self.core.handle.take_reload() && self.stopping.is_none() {
            self.reload(now);
            self.settle(now);
        }
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

    /// Begins a stop when one was asked for, then moves it on; true when the server may
    /// exit.
    pub(super) fn stop_tick(&mut self, now: Instant) -> bool {
        if self.core.handle.stop_requested() && self.stopping.is_none() {
            self.begin_stop(now);
        }
        self.stopping.is_some() && self.advance_stop(now)
    }

    /// The last act of a stop: workers still running are killed.
    pub(super) fn finish_stop(&mut self, now: Instant) {
        let mut clients = ConnClients::new(&mut self.conns, &mut self.dirty_conns);
        self.host.kill_all(&mut clients, now);
        tracing::info!("stopped");
    }

    fn begin_stop(&mut self, now: Instant) {
        let grace = self.core.settings.shutdown_grace;
        let running = self.conns.iter().filter(|(_, c)| c.runs_command()).count();
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
        self.stopping = Some(Stopping::new(now, grace));
    }

    /// True when the server may exit.
    fn advance_stop(&mut self, now: Instant) -> bool {
        if self.conns.is_empty() && self.host.is_empty() {
            return true;
        }
        let Some(stopping) = self.stopping.as_mut() else {
            return false;
        };
        match stopping.step(now) {
            StopStep::Wait => false,
            StopStep::Cancel => self.at_every_conn(now, |conn, host| conn.grace_over(host)),
            StopStep::AnswerPlugins => {
                self.at_every_conn(now, |conn, _| conn.answer_plugin_at_shutdown())
            }
            StopStep::GiveUp { since } => {
                // Clients have had their exit codes; workers finish their stop escalation
                // (q, SIGTERM after stop_timeout_ms, SIGKILL 2 s later), within a bound.
                let slots: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
                for slot in slots {
                    self.close(slot);
                }
                let bound = since + self.host.max_stop_time();
                self.host.is_empty() || now >= bound
            }
        }
    }

    /// A stop step for every open connection: `act`, then the connection is serviced; the
    /// host settles after them. True when the server may exit.
    fn at_every_conn(&mut self, now: Instant, act: impl Fn(&mut Conn, &mut PluginHost)) -> bool {
        let slots: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for slot in slots {
            act(&mut self.conns[slot], &mut self.host);
            self.service(slot, now);
        }
        self.settle(now);
        self.conns.is_empty() && self.host.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_released_once_quiet_and_only_without_connections() {
        let t0 = Instant::now();
        let mut h = Housekeeping::default();
        assert!(!h.memory_due(t0, 0), "nothing closed yet");
        h.conn_closed(t0);
        let due = t0 + crate::memory::QUIET_AFTER;
        assert_eq!(h.deadlines(), [None, Some(due)]);
        assert!(!h.memory_due(due - Duration::from_millis(1), 0));
        assert!(h.memory_due(due, 0));
        assert!(!h.memory_due(due, 0), "the deadline is spent");
        h.conn_closed(t0);
        assert!(!h.memory_due(due, 1), "a connection is open");
        assert_eq!(h.deadlines(), [None, None], "spent all the same");
    }

    #[test]
    fn accepting_pauses_for_the_backoff() {
        let t0 = Instant::now();
        let mut h = Housekeeping::default();
        assert!(h.accepting());
        assert!(!h.accept_resumes(t0));
        h.pause_accepting(t0);
        assert!(!h.accepting());
        assert_eq!(h.deadlines(), [Some(t0 + ACCEPT_BACKOFF), None]);
        assert!(!h.accept_resumes(t0 + ACCEPT_BACKOFF - Duration::from_millis(1)));
        assert!(!h.accepting());
        assert!(h.accept_resumes(t0 + ACCEPT_BACKOFF));
        assert!(h.accepting());
        assert!(!h.accept_resumes(t0 + ACCEPT_BACKOFF), "once");
    }

    #[test]
    fn a_stop_goes_through_its_phases_in_order() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(5);
        let max_stop = Duration::from_secs(7);
        let mut s = Stopping::new(t0, grace);
        assert_eq!(s.deadline(t0, max_stop), t0 + grace);
        assert_eq!(s.step(t0), StopStep::Wait);
        assert_eq!(
            s.step(t0 + grace - Duration::from_millis(1)),
            StopStep::Wait
        );

        let t1 = t0 + grace;
        assert_eq!(s.step(t1), StopStep::Cancel);
        let plugin_deadline = t1 + SHUTDOWN_FLUSH;
        assert_eq!(s.deadline(t1, max_stop), plugin_deadline);
        assert_eq!(s.step(t1), StopStep::Wait);

        let t2 = plugin_deadline + Duration::from_millis(3);
        assert_eq!(s.step(t2), StopStep::AnswerPlugins);
        let give_up = t2 + SHUTDOWN_FLUSH;
        assert_eq!(s.deadline(t2, max_stop), give_up);
        assert_eq!(s.step(give_up - Duration::from_millis(1)), StopStep::Wait);
        assert_eq!(s.step(give_up), StopStep::GiveUp { since: give_up });
        assert_eq!(
            s.deadline(give_up, max_stop),
            give_up + max_stop,
            "no wake-up for a deadline already passed: the loop does not spin"
        );
        assert_eq!(
            s.step(give_up + Duration::from_secs(1)),
            StopStep::GiveUp { since: give_up },
            "giving up repeats until the loop exits"
        );
    }

    #[test]
    fn a_late_turn_moves_a_stop_one_phase_only() {
        let t0 = Instant::now();
        let mut s = Stopping::new(t0, Duration::ZERO);
        let late = t0 + Duration::from_secs(60);
        assert_eq!(s.step(late), StopStep::Cancel);
        assert_eq!(s.step(late), StopStep::Wait);
    }
}
