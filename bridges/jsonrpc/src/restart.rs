//! The restart policy, sans I/O: backoff per restart (1 s, 5 s, 25 s by default) and the
//! limit (more than 3 restarts within 10 minutes disables the plugin).

use std::collections::VecDeque;

/// What to do after the plugin failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start it again after this many milliseconds.
    RestartAfter(u64),
    /// Stop trying; the reason (a sentence about the plugin) is shown to clients, by
    /// `ngd status` and in the log.
    Disable(String),
}

/// Counts restarts in a sliding window.
#[derive(Clone, Debug)]
pub struct RestartPolicy {
    backoff: Vec<u64>,
    max: u32,
    window: u64,
    restarts: VecDeque<u64>,
}

impl RestartPolicy {
    /// A policy with the configured backoff, limit and window (milliseconds).
    pub fn new(backoff: Vec<u64>, max: u32, window: u64) -> Self {
        Self {
            backoff,
            max,
            window,
            restarts: VecDeque::new(),
        }
    }

    /// The plugin failed at `now` for `reason`.
    pub fn on_failure(&mut self, now: u64, reason: &str) -> Decision {
        while let Some(&t) = self.restarts.front() {
            if now.saturating_sub(t) >= self.window {
                self.restarts.pop_front();
            } else {
                break;
            }
        }
        if self.restarts.len() >= self.max as usize {
            let n = self.restarts.len();
            return Decision::Disable(format!(
                "the plugin failed again after {n} restart{} within {} s (last failure: {reason})",
                if n == 1 { "" } else { "s" },
                self.window / 1000
            ));
        }
        let i = self
            .restarts
            .len()
            .min(self.backoff.len().saturating_sub(1));
        self.restarts.push_back(now);
        Decision::RestartAfter(self.backoff.get(i).copied().unwrap_or(1000))
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
