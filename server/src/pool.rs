//! An elastic thread pool for nails.
//!
//! Nails may block (on stdin, on a slow client, on their own work), so a fixed pool would let
//! a few slow commands starve quick ones. This pool keeps idle threads for reuse and starts a
//! new one whenever a job arrives and no idle thread is free, up to a maximum; past it, jobs
//! queue. Threads idle for a minute beyond the minimum exit.
//!
//! The counts live under one small mutex: `idle` is the number of idle threads not yet
//! *claimed* by a submitter, and `backlog` the number of jobs queued with no thread claimed
//! for them. A submitter claims an idle thread, or starts a new one carrying the job, or
//! (at the maximum) adds to the backlog; a thread that finishes a job first serves the
//! backlog, and only then makes itself available. So a job never waits behind a blocked one
//! while the pool is under its maximum.

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long a surplus idle thread waits for work before exiting.
const IDLE_EXIT: Duration = Duration::from_secs(60);

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Debug, Default)]
struct Counts {
    idle: usize,
    total: usize,
    backlog: usize,
}

#[derive(Debug)]
struct Shared {
    counts: Mutex<Counts>,
    min: usize,
    max: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Pool {
    tx: Sender<Job>,
    rx: Receiver<Job>,
    shared: Arc<Shared>,
}

impl Pool {
    /// A pool that keeps `min` threads and grows to `max`.
    pub fn new(min: usize, max: usize) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        let pool = Self {
            tx,
            rx,
            shared: Arc::new(Shared {
                counts: Mutex::new(Counts::default()),
                min,
                max: max.max(1),
            }),
        };
        for _ in 0..min {
            pool.shared.lock().total += 1;
            if pool.spawn_thread(None).is_err() {
                pool.shared.lock().total -= 1;
            }
        }
        pool
    }

    /// Runs `job` on a pool thread.
    pub fn execute(&self, job: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(job);
        let mut c = self.shared.lock();
        if c.idle > 0 {
            c.idle -= 1;
        } else if c.total < self.shared.max {
            c.total += 1;
            drop(c);
            match self.spawn_thread(Some(job)) {
                Ok(()) => return,
                Err(job) => {
                    // No thread could be started: queue it for the next free one.
                    let mut c = self.shared.lock();
                    c.total -= 1;
                    c.backlog += 1;
                    drop(c);
                    if let Some(job) = job {
                        let _ = self.tx.send(job);
                    }
                    return;
                }
            }
        } else {
            c.backlog += 1;
        }
        drop(c);
        // The pool holds a receiver, so the channel never disconnects.
        let _ = self.tx.send(job);
    }

    /// Threads alive now.
    pub fn threads(&self) -> usize {
        self.shared.lock().total
    }

    fn spawn_thread(&self, first: Option<Job>) -> Result<(), Option<Job>> {
        let rx = self.rx.clone();
        let shared = self.shared.clone();
        // The job travels in a slot so that it can be recovered if the spawn fails.
        let slot = Arc::new(Mutex::new(first));
        let theirs = slot.clone();
        let spawned = std::thread::Builder::new()
            .name("ngd-nail".into())
            .spawn(move || {
                let first = theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
                worker(first, &rx, &shared)
            });
        match spawned {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::error!("cannot start a nail thread: {e}");
                Err(slot.lock().unwrap_or_else(|p| p.into_inner()).take())
            }
        }
    }
}

fn worker(first: Option<Job>, rx: &Receiver<Job>, shared: &Shared) {
    if let Some(job) = first {
        job();
    }
    loop {
        let mut c = shared.lock();
        if c.backlog > 0 {
            // A queued job has no thread: it is ours (it is in the channel, or about to be).
            c.backlog -= 1;
            drop(c);
            match rx.recv() {
                Ok(job) => job(),
                Err(_) => return,
            }
            continue;
        }
        c.idle += 1;
        drop(c);
        loop {
            match rx.recv_timeout(IDLE_EXIT) {
                Ok(job) => {
                    job();
                    break;
                }
                Err(RecvTimeoutError::Timeout) => {
                    // Retire a surplus thread, unless every idle thread is claimed (then a
                    // job is on its way to one of us).
                    let mut c = shared.lock();
                    if c.total > shared.min && c.idle > 0 {
                        c.idle -= 1;
                        c.total -= 1;
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    shared.lock().total -= 1;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn blocking_jobs_do_not_starve_new_ones() {
        let pool = Pool::new(0, 64);
        let barrier = Arc::new(Barrier::new(9));
        for _ in 0..8 {
            let b = barrier.clone();
            pool.execute(move || {
                b.wait();
            });
        }
        // All eight jobs wait on the barrier at once: only possible with eight threads.
        barrier.wait();
        assert!(pool.threads() >= 8);
    }

    #[test]
    fn threads_are_reused_when_idle() {
        let pool = Pool::new(0, 64);
        for _ in 0..100 {
            let (tx, rx) = crossbeam_channel::bounded(1);
            pool.execute(move || tx.send(()).unwrap());
            rx.recv().unwrap();
            // Let the thread mark itself available again.
            while pool.shared.lock().idle == 0 {
                std::thread::yield_now();
            }
        }
        assert_eq!(pool.threads(), 1);
    }

    #[test]
    fn past_the_maximum_jobs_queue() {
        let pool = Pool::new(0, 2);
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..10 {
            let tx = tx.clone();
            pool.execute(move || {
                std::thread::sleep(Duration::from_millis(5));
                tx.send(i).unwrap();
            });
        }
        let mut got: Vec<i32> = (0..10).map(|_| rx.recv().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert!(pool.threads() <= 2);
    }
}
