//! The loop's timers: one deadline per thing that has one.
//!
//! Every deadline of the server (a connection's, a plugin worker's, a pool's, a dying
//! worker's, the footprint check's) is filed here under its key, and filing a key again
//! replaces its entry. So the set holds at most one entry per key: its size is bounded by
//! the live connections, workers and pools (plus ended workers' entries until they come
//! due), never by how many sessions the server has run.
//!
//! An entry may still be stale when it comes due (its owner moved its deadline without
//! filing it, or is gone); the loop asks the owner before acting on it, and drops stale
//! entries at the head so that they never wake it.
//!
//! Sans I/O: time is passed in.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::time::Instant;

/// Deadlines by key, earliest first.
#[derive(Debug)]
pub struct Timers<K> {
    /// The entries in deadline order (ties by key).
    by_time: BTreeSet<(Instant, K)>,
    /// Each key's one entry.
    by_key: HashMap<K, Instant>,
}

impl<K: Copy + Ord + Hash> Default for Timers<K> {
    fn default() -> Self {
        Self {
            by_time: BTreeSet::new(),
            by_key: HashMap::new(),
        }
    }
}

impl<K: Copy + Ord + Hash> Timers<K> {
    /// Files `key` for `at`, replacing its previous entry.
    pub fn set(&mut self, key: K, at: Instant) {
        if let Some(old) = self.by_key.insert(key, at) {
            self.by_time.remove(&(old, key));
        }
        self.by_time.insert((at, key));
    }

    /// Removes `key`'s entry, if it has one.
    pub fn cancel(&mut self, key: K) {
        if let Some(at) = self.by_key.remove(&key) {
            self.by_time.remove(&(at, key));
        }
    }

    /// The earliest entry.
    pub fn first(&self) -> Option<(Instant, K)> {
        self.by_time.first().copied()
    }

    /// The earliest entry's deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.first().map(|(at, _)| at)
    }

    /// Removes and returns the earliest entry.
    pub fn pop(&mut self) -> Option<(Instant, K)> {
        let (at, key) = self.by_time.pop_first()?;
        self.by_key.remove(&key);
        Some((at, key))
    }

    /// Removes and returns the earliest entry if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(Instant, K)> {
        match self.first() {
            Some((at, _)) if at <= now => self.pop(),
            _ => None,
        }
    }

    /// How many entries are filed.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Nothing is filed.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(base: Instant, n: u64) -> Instant {
        base + Duration::from_millis(n)
    }

    #[test]
    fn earliest_first_ties_by_key() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        timers.set(3u32, ms(t0, 30));
        timers.set(2, ms(t0, 10));
        timers.set(1, ms(t0, 10));
        assert_eq!(timers.pop(), Some((ms(t0, 10), 1)));
        assert_eq!(timers.pop(), Some((ms(t0, 10), 2)));
        assert_eq!(timers.pop(), Some((ms(t0, 30), 3)));
        assert_eq!(timers.pop(), None);
        assert!(timers.is_empty());
    }

    #[test]
    fn filing_a_key_again_replaces_its_entry() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        timers.set(7u32, ms(t0, 50));
        timers.set(7, ms(t0, 20));
        assert_eq!(timers.len(), 1);
        assert_eq!(timers.next_deadline(), Some(ms(t0, 20)));
        timers.set(7, ms(t0, 90));
        assert_eq!(timers.len(), 1);
        assert_eq!(timers.pop(), Some((ms(t0, 90), 7)));
        assert_eq!(timers.pop(), None);
    }

    #[test]
    fn cancel_removes_the_entry_and_nothing_else() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        timers.set(1u32, ms(t0, 10));
        timers.set(2, ms(t0, 20));
        timers.cancel(1);
        timers.cancel(1);
        timers.cancel(9);
        assert_eq!(timers.len(), 1);
        assert_eq!(timers.first(), Some((ms(t0, 20), 2)));
    }

    #[test]
    fn pop_due_takes_only_what_is_due() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        timers.set(1u32, ms(t0, 10));
        timers.set(2, ms(t0, 20));
        assert_eq!(timers.pop_due(ms(t0, 5)), None);
        assert_eq!(timers.pop_due(ms(t0, 10)), Some((ms(t0, 10), 1)));
        assert_eq!(timers.pop_due(ms(t0, 15)), None);
        assert_eq!(timers.len(), 1);
    }

    /// A key refiled once per session, later each time (a pool's sleep deadline moves
    /// with its last use): the set stays at one entry however many sessions run.
    #[test]
    fn refiling_keys_never_grows_the_set() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        for session in 0..100_000u64 {
            timers.set(("pool", 0u64), ms(t0, 1_800_000 + session));
            timers.set(("conn", session % 64), ms(t0, 10_000 + session));
            if session % 3 == 0 {
                timers.cancel(("conn", session % 64));
            }
        }
        assert!(timers.len() <= 65, "{} entries", timers.len());
        assert_eq!(timers.by_time.len(), timers.by_key.len());
    }
}
