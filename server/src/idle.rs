//! Idle exit: a server that has served nobody for a while stops on its own.
//!
//! A server started on demand (by `ng`'s auto-start) should not run forever; one started by
//! hand keeps running unless told (`idle_exit_ms`, `ngd serve --idle-exit`). This module is
//! the decision, as a sans-I/O state machine: the event loop reports how many connections
//! are open and the time, and gets back what to do.
//!
//! ```text
//!            conns = 0                 idle for `after`            linger over, conns = 0
//! Active ─────────────▶ Idle{since} ────────────────────▶ Retiring ─────────────────────▶ Stop
//!    ▲                     │ conns > 0                      (socket files unlinked;
//!    └─────────────────────┘                                 late arrivals are served)
//! ```
//!
//! Retiring first removes the Unix socket files, so a client arriving from then on finds no
//! server and starts a new one, instead of connecting to a server that is about to close its
//! listener. A client whose `connect` raced with the removal is already in the listen
//! backlog: the loop keeps accepting and serving for [`LINGER`], and stops only once every
//! connection is done. A retiring server never goes back to `Active` (its socket file is
//! gone, so it could no longer be found).

use std::time::{Duration, Instant};

/// How long a retiring server keeps accepting after removing its socket files.
pub const LINGER: Duration = Duration::from_millis(100);

/// What the loop should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleAction {
    /// Nothing.
    None,
    /// Remove the Unix socket files, then keep serving whoever is already connected.
    Retire,
    /// Stop gracefully (as `ng-stop` does).
    Stop,
}

/// Where the server is on the way to an idle exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Connections are open.
    Active,
    /// No connection since `since`.
    Idle { since: Instant },
    /// Socket files removed; stop once no connection is open after `until`.
    Retiring { until: Instant },
    /// The stop was requested.
    Stopped,
}

/// The idle-exit state machine.
#[derive(Clone, Debug)]
pub struct IdleExit {
    after: Duration,
    state: State,
}

impl IdleExit {
    /// Exits after `after` without any open connection, counted from `now`.
    pub fn new(after: Duration, now: Instant) -> Self {
        Self {
            after,
            state: State::Idle { since: now },
        }
    }

    /// Exits as soon as no connection is open: a server handing over to a new binary
    /// ([`crate::upgrade`]). An idle period already running ends now.
    pub fn hurry(&mut self) {
        self.after = Duration::ZERO;
    }

    /// The configured idle period.
    pub fn after(&self) -> Duration {
        self.after
    }

    /// Advances with the number of open connections at `now`.
    pub fn update(&mut self, open_conns: usize, now: Instant) -> IdleAction {
        match self.state {
            State::Active if open_conns == 0 => {
                self.state = State::Idle { since: now };
                IdleAction::None
            }
            State::Active => IdleAction::None,
            State::Idle { .. } if open_conns > 0 => {
                self.state = State::Active;
                IdleAction::None
            }
            State::Idle { since } if now >= since + self.after => {
                self.state = State::Retiring {
                    until: now + LINGER,
                };
                IdleAction::Retire
            }
            State::Idle { .. } => IdleAction::None,
            State::Retiring { until } if open_conns == 0 && now >= until => {
                self.state = State::Stopped;
                IdleAction::Stop
            }
            State::Retiring { .. } | State::Stopped => IdleAction::None,
        }
    }

    /// When [`IdleExit::update`] next has something to do without any connection change.
    pub fn deadline(&self) -> Option<Instant> {
        match self.state {
            State::Idle { since } => Some(since + self.after),
            State::Retiring { until } => Some(until),
            State::Active | State::Stopped => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(60);

    #[test]
    fn quiet_from_the_start_retires_then_stops() {
        let t0 = Instant::now();
        let mut idle = IdleExit::new(AFTER, t0);
        assert_eq!(idle.deadline(), Some(t0 + AFTER));
        assert_eq!(idle.update(0, t0 + AFTER / 2), IdleAction::None);
        assert_eq!(idle.update(0, t0 + AFTER), IdleAction::Retire);
        assert_eq!(idle.deadline(), Some(t0 + AFTER + LINGER));
        assert_eq!(idle.update(0, t0 + AFTER), IdleAction::None);
        assert_eq!(idle.update(0, t0 + AFTER + LINGER), IdleAction::Stop);
        assert_eq!(idle.deadline(), None);
        assert_eq!(idle.update(0, t0 + AFTER * 9), IdleAction::None);
    }

    #[test]
    fn a_connection_restarts_the_count() {
        let t0 = Instant::now();
        let mut idle = IdleExit::new(AFTER, t0);
        assert_eq!(idle.update(1, t0 + AFTER / 2), IdleAction::None);
        assert_eq!(idle.deadline(), None);
        // Busy past the original deadline: nothing happens.
        assert_eq!(idle.update(3, t0 + AFTER * 2), IdleAction::None);
        let quiet = t0 + AFTER * 3;
        assert_eq!(idle.update(0, quiet), IdleAction::None);
        assert_eq!(idle.deadline(), Some(quiet + AFTER));
        assert_eq!(
            idle.update(0, quiet + AFTER - Duration::from_millis(1)),
            IdleAction::None
        );
        assert_eq!(idle.update(0, quiet + AFTER), IdleAction::Retire);
    }

    #[test]
    fn hurried_it_retires_once_no_connection_is_open() {
        let t0 = Instant::now();
        let mut idle = IdleExit::new(AFTER, t0);
        assert_eq!(idle.update(2, t0), IdleAction::None);
        idle.hurry();
        // Busy: nothing; the last connection closes: the idle exit starts at once.
        assert_eq!(idle.update(1, t0 + LINGER), IdleAction::None);
        assert_eq!(idle.update(0, t0 + LINGER * 2), IdleAction::None);
        assert_eq!(idle.deadline(), Some(t0 + LINGER * 2));
        assert_eq!(idle.update(0, t0 + LINGER * 2), IdleAction::Retire);
        // Quiet already: a hurried idle period is over.
        let mut quiet = IdleExit::new(AFTER, t0);
        quiet.hurry();
        assert_eq!(quiet.update(0, t0 + LINGER), IdleAction::Retire);
    }

    #[test]
    fn late_arrivals_while_retiring_are_served_first() {
        let t0 = Instant::now();
        let mut idle = IdleExit::new(AFTER, t0);
        assert_eq!(idle.update(0, t0 + AFTER), IdleAction::Retire);
        let later = t0 + AFTER + LINGER * 5;
        // A client that raced the socket removal is being served: no stop, no way back.
        assert_eq!(idle.update(1, later), IdleAction::None);
        assert_eq!(idle.update(1, later + AFTER * 2), IdleAction::None);
        assert_eq!(idle.update(0, later + AFTER * 2), IdleAction::Stop);
    }
}
