//! Long-lived threads for the calls' input feeders, so a call with streamed input does not
//! start (and tear down) a thread of its own: a job goes to an idle thread when there is
//! one, else to a new one; a thread idle for [`IDLE`] exits.

use crossbeam_channel::{unbounded, Receiver, Sender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// How long a thread waits for work before it exits.
pub const IDLE: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    tx: Sender<Job>,
    rx: Receiver<Job>,
    /// Threads waiting for a job, minus jobs sent to them and not yet taken.
    idle: AtomicUsize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = unbounded();
        Pool {
            tx,
            rx,
            idle: AtomicUsize::new(0),
        }
    })
}

/// Takes one from `n` unless it is 0; whether it did.
fn claim(n: &AtomicUsize) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// Runs `job` on a pool thread (`name` names a new one); an error when no thread could be
/// started.
pub fn spawn(name: &str, job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let p = pool();
    let mut job: Job = Box::new(job);
    // A claimed idle thread is one that will take this job from the queue.
    if claim(&p.idle) {
        match p.tx.send(job) {
            Ok(()) => return Ok(()),
            Err(e) => job = e.into_inner(),
        }
    }
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            job();
            serve(p);
        })
        .map(|_| ())
}

fn serve(p: &'static Pool) {
    loop {
        p.idle.fetch_add(1, Ordering::SeqCst);
        loop {
            match p.rx.recv_timeout(IDLE) {
                Ok(job) => {
                    job();
                    break;
                }
                // Leave only when no job has been counted on this thread.
                Err(_) if claim(&p.idle) => return,
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_one_after_another_and_many_at_once() {
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..50 {
            let tx = tx.clone();
            spawn("pool-test", move || {
                let _ = tx.send((i, std::thread::current().id()));
            })
            .unwrap();
            // One at a time: each job finds the thread the last one ran on idle (or about
            // to be), so few threads serve them all.
            let _ = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        // Many at once: each gets a thread (idle or new); none waits for another.
        let mut seen = Vec::new();
        for i in 0..20 {
            let tx = tx.clone();
            spawn("pool-test", move || {
                std::thread::sleep(Duration::from_millis(5));
                let _ = tx.send((i, std::thread::current().id()));
            })
            .unwrap();
        }
        for _ in 0..20 {
            seen.push(rx.recv_timeout(Duration::from_secs(10)).unwrap().0);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
    }
}
