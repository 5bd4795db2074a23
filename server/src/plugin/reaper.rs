//! Workers on their way out, and the orphans ngd adopts: each worker is out of service
//! once its channel is closed, and is reaped when it has exited, without the loop ever
//! waiting for it.
//!
//! The host hands the [`Reaper`] a worker that has not exited yet ([`Reaper::hold`]); on
//! SIGCHLD or at its deadline (a timer of the host's) the reaper waits for what has exited
//! and kills what is overdue ([`Reaper::reap`]): a worker that went on its own gets
//! [`REAP_GRACE`] to exit, then SIGKILL to its process group and as long again; one still
//! there after that is stuck in the kernel and waited for, so that no zombie is left. What
//! it reaped goes back to the host, which tells the worker's clients how it ended
//! ([`Ending`]) and counts the failure.
//!
//! The `ngd` binary adopts what its workers' commands leave behind
//! (`PR_SET_CHILD_SUBREAPER`, [`Reaper::new`]): each such orphan is reaped when SIGCHLD
//! says it exited ([`Reaper::reap_if_orphan`]), and those still running when ngd stops are
//! killed ([`Reaper::kill_orphans`]).

use super::machine::{Machine, Phase, WorkerEnd};
use super::worker::{self, Worker};
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// How long after its channel closes a worker may take to exit before it is killed.
pub const REAP_GRACE: Duration = Duration::from_millis(500);

/// A worker whose channel is closed, waiting to be reaped (its exit status tells its
/// clients what happened).
#[derive(Debug)]
pub struct Dying {
    /// The worker, out of service.
    pub worker: Worker,
    /// Why it ended.
    pub end: WorkerEnd,
    /// A failed start or an early death, counted when reaped; its pool starts no worker
    /// until then.
    pub failure: bool,
    deadline: Instant,
    killed: bool,
}

/// A dying worker, reaped: its exit status (`None`: it could not be waited for).
#[derive(Debug)]
pub struct Reaped {
    /// The worker as it was when it died.
    pub dying: Dying,
    /// How its process ended.
    pub status: Option<ExitStatus>,
}

/// The dying workers of one host, and its orphans.
#[derive(Debug, Default)]
pub struct Reaper {
    dying: Vec<Dying>,
    /// ngd adopts orphans (`PR_SET_CHILD_SUBREAPER`; the `ngd` binary, not embedders).
    adopts: bool,
}

impl Reaper {
    /// A reaper; with `adopts`, ngd becomes the reaper of its descendants' orphans.
    pub fn new(adopts: bool) -> Self {
        if adopts {
            worker::become_subreaper();
        }
        Self {
            dying: Vec::new(),
            adopts,
        }
    }

    /// Whether ngd adopts orphans.
    pub fn adopts(&self) -> bool {
        self.adopts
    }

    /// Reaps the exited child `pid` if it is an orphan ngd adopted rather than one of its
    /// workers (`in_service`, or dying); false for a worker, which the host ends.
    pub fn reap_if_orphan(&self, pid: u32, in_service: bool) -> bool {
        if in_service || self.holds(pid) {
            return false;
        }
        worker::reap(pid);
        true
    }

    /// At the very end: kills and reaps every process ngd adopted, until none is left (a
    /// killed orphan's own children are adopted in turn), within a second.
    pub fn kill_orphans(&self) {
        if !self.adopts {
            return;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while std::time::Instant::now() < deadline {
            let children = crate::sys::children();
            if children.is_empty() {
                return;
            }
            tracing::info!("killing {} leftover processes", children.len());
            for pid in &children {
                crate::sys::signal(*pid, libc::SIGKILL);
            }
            for pid in children {
                crate::sys::reap(pid, true);
            }
        }
    }

    /// Holds `worker` until it has exited; it was killed already unless it ended on its
    /// own. Returns its deadline, for the host's timers.
    pub fn hold(&mut self, worker: Worker, end: WorkerEnd, failure: bool, now: Instant) -> Instant {
        let deadline = now + REAP_GRACE;
        let killed = !end.on_its_own();
        self.dying.push(Dying {
            worker,
            end,
            failure,
            deadline,
            killed,
        });
        deadline
    }

    /// Whether no worker is dying.
    pub fn is_empty(&self) -> bool {
        self.dying.is_empty()
    }

    /// Whether the worker `pid` is dying.
    pub fn holds(&self, pid: u32) -> bool {
        self.dying.iter().any(|d| d.worker.pid() == pid)
    }

    /// How many of `pool`'s workers are dying.
    pub fn count(&self, pool: usize) -> usize {
        self.dying
            .iter()
            .filter(|d| d.worker.machine.pool == pool)
            .count()
    }

    /// Whether a failure of `pool` is waiting to be counted.
    pub fn failure_pending(&self, pool: usize) -> bool {
        self.dying
            .iter()
            .any(|d| d.failure && d.worker.machine.pool == pool)
    }

    /// Whether `at` is still the deadline of the dying worker `serial`.
    pub fn is_deadline(&self, serial: u64, at: Instant) -> bool {
        self.dying
            .iter()
            .any(|d| d.worker.serial == serial && d.deadline == at)
    }

    /// Reaps the dying workers that have exited and kills those past their deadline; each
    /// new deadline is passed to `deadline` with the worker's serial.
    pub fn reap(&mut self, now: Instant, mut deadline: impl FnMut(Instant, u64)) -> Vec<Reaped> {
        let mut reaped = Vec::new();
        let mut i = 0;
        while i < self.dying.len() {
            let d = &mut self.dying[i];
            let status = if worker::has_exited(d.worker.pid()) {
                Some(worker::finish(&mut d.worker.child))
            } else if now >= d.deadline && !d.killed {
                worker::signal_group(d.worker.pid(), libc::SIGKILL);
                d.killed = true;
                d.deadline = now + REAP_GRACE;
                deadline(d.deadline, d.worker.serial);
                None
            } else if now >= d.deadline {
                // SIGKILL cannot be ignored; a process still not gone is stuck in the
                // kernel. Waiting for it here is the only way not to leave a zombie.
                Some(worker::finish(&mut d.worker.child))
            } else {
                None
            };
            match status {
                Some(status) => reaped.push(Reaped {
                    dying: self.dying.swap_remove(i),
                    status,
                }),
                None => i += 1,
            }
        }
        reaped
    }

    /// Kills every dying worker now; the next [`Reaper::reap`] waits for them.
    pub fn kill_all(&mut self, now: Instant) {
        for d in &mut self.dying {
            worker::signal_group(d.worker.pid(), libc::SIGKILL);
            d.killed = true;
            d.deadline = now;
        }
    }
}

/// How a worker's end is told: to the clients of its sessions, as its pool's failure, and
/// in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    /// The exit code its sessions end with.
    pub code: i32,
    /// How its process ended (`exited with status 3`, `killed by signal 9`).
    pub how: String,
    /// Why it ended ([`WorkerEnd::describe`]).
    pub reason: String,
    /// The failure's reason for the pool: the reason ngd killed it for, else its exit
    /// described, with the log to look at for a failed start.
    pub full_reason: String,
}

impl Ending {
    /// The ending of the worker whose machine is `machine`, which ended for `end` with
    /// `status`; `log` is its plugin's log file.
    pub fn of(machine: &Machine, status: Option<ExitStatus>, end: &WorkerEnd, log: &Path) -> Self {
        let (code, how) = describe_exit(status);
        let reason = end.describe();
        let full_reason = match machine.phase {
            _ if !end.on_its_own() => reason.clone(),
            Phase::Starting { .. } => {
                format!("worker {how} before its hello; see {}", log.display())
            }
            _ => format!("worker {how}: {reason}"),
        };
        Self {
            code,
            how,
            reason,
            full_reason,
        }
    }

    /// Logs it for worker `pid` of `plugin`, by what the worker was doing.
    pub fn log(&self, plugin: &str, pid: u32, machine: &Machine) {
        let (how, reason) = (&self.how, &self.reason);
        match machine.phase {
            Phase::Starting { .. } => {
                tracing::warn!(plugin = %plugin, pid, "failed start: {}", self.full_reason);
            }
            Phase::Quitting { .. } if machine.sessions.is_empty() => {
                tracing::info!(plugin = %plugin, pid, "worker stopped ({how})");
            }
            _ if machine.sessions.is_empty() => {
                tracing::warn!(plugin = %plugin, pid, "idle worker {how}: {reason}");
            }
            _ => {
                tracing::warn!(plugin = %plugin, pid, "worker {how} during a session: {reason}");
            }
        }
    }
}

/// How a worker's process ended, as a client should hear it: `(exit code, description)`.
pub fn describe_exit(status: Option<ExitStatus>) -> (i32, String) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => (1, format!("exited with status {code}")),
            (None, Some(sig)) => (128 + sig, format!("killed by signal {sig}")),
            _ => (1, "ended".to_owned()),
        },
        None => (1, "status unknown".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_map_to_shell_codes() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(describe_exit(Some(ExitStatus::from_raw(9))).0, 137);
        assert_eq!(describe_exit(Some(ExitStatus::from_raw(3 << 8))).0, 1);
        assert_eq!(describe_exit(None).0, 1);
    }
}
