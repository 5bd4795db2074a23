//! When to start a failed process again, and when to give up: [`RestartPolicy`], without
//! I/O. The caller says when a failure (or a success) happened, on its own clock, and the
//! policy answers with the delay before the next start or with giving up.
//!
//! ngd's worker pools double a base delay after each failure in a row and give up after a
//! number of them; the JSON-RPC bridge walks a list of delays and gives up after too many
//! restarts within a window; the Nushell bridge starts its plugin again at once, always.
//! Each is a [`Backoff`] and a [`GiveUp`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A point in time on the caller's clock: an [`Instant`], or milliseconds (`u64`) since an
/// origin the caller chose.
pub trait Moment: Copy {
    /// How long after `earlier` this is (zero if it is not after).
    fn since(self, earlier: Self) -> Duration;
}

impl Moment for Instant {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl Moment for u64 {
    fn since(self, earlier: Self) -> Duration {
        Duration::from_millis(self.saturating_sub(earlier))
    }
}

/// The delay before a restart, by the failure's number `n` (1 for the first one counted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backoff {
    /// No delay.
    Immediate,
    /// `base · 2^(n-1)`, at most `max` (the exponent stops growing at 20).
    Doubling {
        /// The first delay.
        base: Duration,
        /// The longest delay.
        max: Duration,
    },
    /// The `n`-th delay of the list; the last one for every later failure (none: no delay).
    Steps(Vec<Duration>),
}

impl Backoff {
    /// The delay after failure number `n` (0 reads as 1).
    pub fn delay(&self, n: u32) -> Duration {
        let i = n.saturating_sub(1);
        match self {
            Backoff::Immediate => Duration::ZERO,
            Backoff::Doubling { base, max } => base.saturating_mul(1 << i.min(20)).min(*max),
            Backoff::Steps(steps) => steps
                .get(i as usize)
                .or(steps.last())
                .copied()
                .unwrap_or_default(),
        }
    }
}

/// When to stop restarting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// Never.
    Never,
    /// At the `n`-th failure in a row (at least 1); a success starts the count over.
    InARow(u32),
    /// At a failure that comes when `max` restarts were made within the last `window`.
    TooManyWithin {
        /// The restarts allowed within the window.
        max: u32,
        /// How far back restarts count.
        window: Duration,
    },
}

/// What to do after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start again after this delay.
    RestartAfter(Duration),
    /// Stop trying; `failures` is the count the rule reached (failures in a row, or
    /// restarts within the window).
    GiveUp {
        /// Failures in a row ([`GiveUp::InARow`]) or restarts within the window
        /// ([`GiveUp::TooManyWithin`]).
        failures: u32,
    },
}

/// A backoff schedule and a give-up rule, with the failures counted so far.
#[derive(Clone, Debug)]
pub struct RestartPolicy<T: Moment = Instant> {
    backoff: Backoff,
    give_up: GiveUp,
    /// Failures since the last success ([`GiveUp::Never`], [`GiveUp::InARow`]).
    in_a_row: u32,
    /// When the restarts within the window were decided ([`GiveUp::TooManyWithin`]),
    /// oldest first; never more than `max`.
    recent: VecDeque<T>,
}

impl<T: Moment> RestartPolicy<T> {
    /// A policy with no failure counted yet.
    pub fn new(backoff: Backoff, give_up: GiveUp) -> Self {
        Self {
            backoff,
            give_up,
            in_a_row: 0,
            recent: VecDeque::new(),
        }
    }

    /// The failures the give-up rule counts now: in a row, or restarts within the window
    /// as of the last failure.
    pub fn failures(&self) -> u32 {
        match self.give_up {
            GiveUp::Never | GiveUp::InARow(_) => self.in_a_row,
            GiveUp::TooManyWithin { .. } => self.recent.len() as u32,
        }
    }

    /// The delay after failure number `n` by the schedule.
    pub fn delay(&self, n: u32) -> Duration {
        self.backoff.delay(n)
    }

    /// A failure at `now`: the delay before the next start, or giving up.
    pub fn on_failure(&mut self, now: T) -> Decision {
        match self.give_up {
            GiveUp::Never => {
                self.in_a_row = self.in_a_row.saturating_add(1);
                Decision::RestartAfter(self.delay(self.in_a_row))
            }
            GiveUp::InARow(max) => {
                self.in_a_row = self.in_a_row.saturating_add(1);
                if self.in_a_row >= max.max(1) {
                    return Decision::GiveUp {
                        failures: self.in_a_row,
                    };
                }
                Decision::RestartAfter(self.delay(self.in_a_row))
            }
            GiveUp::TooManyWithin { max, window } => {
                while self.recent.front().is_some_and(|&t| now.since(t) >= window) {
                    self.recent.pop_front();
                }
                let made = self.recent.len() as u32;
                if made >= max {
                    return Decision::GiveUp { failures: made };
                }
                self.recent.push_back(now);
                Decision::RestartAfter(self.delay(made + 1))
            }
        }
    }

    /// A success: the failures in a row start over (restarts within a window are
    /// forgotten only as the window moves on).
    pub fn on_success(&mut self) {
        self.in_a_row = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn after(n: u64) -> Decision {
        Decision::RestartAfter(ms(n))
    }

    #[test]
    fn doubling_in_a_row_gives_up_at_the_nth_and_a_success_starts_over() {
        let doubling = Backoff::Doubling {
            base: ms(1000),
            max: ms(30_000),
        };
        let mut p = RestartPolicy::new(doubling, GiveUp::InARow(8));
        let delays: Vec<Decision> = (0..7).map(|t| p.on_failure(t)).collect();
        assert_eq!(
            delays,
            [1000, 2000, 4000, 8000, 16_000, 30_000, 30_000].map(after)
        );
        assert_eq!(p.on_failure(8), Decision::GiveUp { failures: 8 });
        assert_eq!(p.failures(), 8);
        p.on_success();
        assert_eq!((p.failures(), p.delay(p.failures())), (0, ms(1000)));
        assert_eq!(p.on_failure(9), after(1000));
    }

    #[test]
    fn in_a_row_of_zero_gives_up_at_the_first_failure() {
        let mut p = RestartPolicy::new(Backoff::Immediate, GiveUp::InARow(0));
        assert_eq!(p.on_failure(0u64), Decision::GiveUp { failures: 1 });
    }

    #[test]
    fn steps_within_a_window_give_up_then_the_window_slides() {
        let steps = Backoff::Steps(vec![ms(1000), ms(5000), ms(25_000)]);
        let rule = GiveUp::TooManyWithin {
            max: 3,
            window: ms(600_000),
        };
        let mut p = RestartPolicy::new(steps, rule);
        assert_eq!(p.on_failure(0u64), after(1000));
        assert_eq!(p.on_failure(2_000), after(5000));
        assert_eq!(p.on_failure(8_000), after(25_000));
        assert_eq!(p.on_failure(40_000), Decision::GiveUp { failures: 3 });
        // 0 left the window: two restarts remain in it, the third step is next.
        assert_eq!(p.on_failure(600_000), after(25_000));
        // Beyond the list, the last step repeats.
        let mut p = RestartPolicy::new(Backoff::Steps(vec![ms(10)]), rule);
        assert_eq!(
            [p.on_failure(0u64), p.on_failure(1)],
            [after(10), after(10)]
        );
    }

    #[test]
    fn immediate_and_never_restarts_at_once_forever() {
        let mut p = RestartPolicy::new(Backoff::Immediate, GiveUp::Never);
        let t0 = Instant::now();
        for _ in 0..100 {
            assert_eq!(p.on_failure(t0), Decision::RestartAfter(Duration::ZERO));
        }
        assert_eq!(Backoff::Steps(Vec::new()).delay(3), Duration::ZERO);
    }
}
