//! The restart policy, sans I/O: backoff per restart (1 s, 5 s, 25 s by default) and the
//! limit (more than 3 restarts within 10 minutes disables the plugin), as an
//! [`ngw_vocab::RestartPolicy`] with the bridge's configuration and its words for giving up.

use ngw_vocab::restart::{self, Backoff, GiveUp};
use std::time::Duration;

/// What to do after the plugin failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start it again after this many milliseconds.
    RestartAfter(u64),
    /// Stop trying; the reason (a sentence about the plugin) is shown to clients, by
    /// `ngd status` and in the log.
    Disable(String),
}

/// The bridge's [`ngw_vocab::RestartPolicy`]: a list of delays, and a limit of restarts within a
/// sliding window, on a clock of milliseconds.
#[derive(Clone, Debug)]
pub struct RestartPolicy {
    policy: ngw_vocab::RestartPolicy<u64>,
    window: u64,
}

impl RestartPolicy {
    /// A policy with the configured backoff, limit and window (milliseconds). An empty
    /// backoff list waits a second.
    pub fn new(backoff: Vec<u64>, max: u32, window: u64) -> Self {
        let steps = if backoff.is_empty() {
            vec![1000]
        } else {
            backoff
        };
        let schedule = Backoff::Steps(steps.into_iter().map(Duration::from_millis).collect());
        let rule = GiveUp::TooManyWithin {
            max,
            window: Duration::from_millis(window),
        };
        Self {
            policy: ngw_vocab::RestartPolicy::new(schedule, rule),
            window,
        }
    }

    /// The plugin failed at `now` for `reason`.
    pub fn on_failure(&mut self, now: u64, reason: &str) -> Decision {
        match self.policy.on_failure(now) {
            restart::Decision::RestartAfter(delay) => {
                Decision::RestartAfter(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX))
            }
            restart::Decision::GiveUp { failures: n } => Decision::Disable(format!(
                "the plugin failed again after {n} restart{} within {} s (last failure: {reason})",
                if n == 1 { "" } else { "s" },
                self.window / 1000
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_then_disable_then_window_slides() {
        let mut p = RestartPolicy::new(vec![1000, 5000, 25000], 3, 600_000);
        assert_eq!(p.on_failure(0, "x"), Decision::RestartAfter(1000));
        assert_eq!(p.on_failure(2_000, "x"), Decision::RestartAfter(5000));
        assert_eq!(p.on_failure(8_000, "x"), Decision::RestartAfter(25000));
        match p.on_failure(40_000, "exited with status 3") {
            Decision::Disable(r) => assert_eq!(
                r,
                "the plugin failed again after 3 restarts within 600 s (last failure: exited with status 3)"
            ),
            other => panic!("{other:?}"),
        }
        let mut p = RestartPolicy::new(vec![10], 1, 600_000);
        assert_eq!(p.on_failure(0, "x"), Decision::RestartAfter(10));
        assert_eq!(
            p.on_failure(100, "x"),
            Decision::Disable(
                "the plugin failed again after 1 restart within 600 s (last failure: x)".into()
            )
        );
        let mut p = RestartPolicy::new(vec![1000, 5000, 25000], 3, 600_000);
        for t in [0, 10, 20] {
            p.on_failure(t, "x");
        }
        // 0 and 10 left the window; one restart remains in it.
        assert_eq!(p.on_failure(600_015, "x"), Decision::RestartAfter(5000));
    }
}
