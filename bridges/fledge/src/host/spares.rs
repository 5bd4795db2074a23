//! Spare processes: the next process for each command, started ahead and waiting for
//! `init` on its stdin.
//!
//! A spare is used only when the run's [`SpareKey`] equals the one it was started with
//! (same program and `plugin.toml`, environment, working directory, umask and ignored
//! signals); otherwise it is stopped, the session is told why ([`Fallback`]), and a
//! process is started as usual. Spares are started by a thread of their own once a run has
//! ended ([`SparePool::start_next`]), so the run's exit is reported without waiting for
//! the next process; a run arriving while its spare is being started waits for it, and
//! [`SparePool::stop_all`] stops spares being started as well as those waiting.

use super::process::{spawn_plugin, Launch, PluginStdio, ProcessGroup};
use crate::discover::Resolved;
use crossbeam_channel::{unbounded, Sender};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::SystemTime;

/// How long the spare starter waits after a run ends before starting the next process,
/// so that the run's exit reaches ngd first (the exit is sent right after the run's
/// handler returns, well within this).
const SPARE_SETTLE: std::time::Duration = std::time::Duration::from_millis(1);

/// The modification times of a plugin's program and `plugin.toml`.
pub(super) type Stamp = (SystemTime, SystemTime);

/// The stamp of `r`, when both files can be read.
pub(super) fn stamp(r: &Resolved) -> Option<Stamp> {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((m(&r.binary)?, m(&r.dir.join("plugin.toml"))?))
}

/// What a spare was started for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SpareKey {
    pub launch: Launch,
    pub stamp: Option<Stamp>,
}

/// Why a spare was not used for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fallback {
    /// Its process had exited.
    Exited,
    /// The program or `plugin.toml` changed.
    Changed,
    /// Another working directory.
    Cwd,
    /// Another umask.
    Umask,
    /// Other ignored signals.
    Ignored,
    /// Another environment.
    Env,
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fallback::Exited => "the spare plugin process had exited",
            Fallback::Changed => "the plugin changed since its spare process started",
            Fallback::Cwd => "the working directory differs from the spare process's",
            Fallback::Umask => "the umask differs from the spare process's",
            Fallback::Ignored => "the ignored signals differ from the spare process's",
            Fallback::Env => "the environment differs from the spare process's",
        })
    }
}

impl SpareKey {
    /// Why a spare started for `self` does not serve a run of `run`; `None` when it does.
    pub fn fallback(&self, run: &SpareKey) -> Option<Fallback> {
        let (a, b) = (&self.launch, &run.launch);
        if self == run {
            None
        } else if self.stamp != run.stamp || a.binary != b.binary {
            Some(Fallback::Changed)
        } else if a.cwd != b.cwd {
            Some(Fallback::Cwd)
        } else if a.umask != b.umask {
            Some(Fallback::Umask)
        } else if a.ignored != b.ignored {
            Some(Fallback::Ignored)
        } else {
            Some(Fallback::Env)
        }
    }
}

#[derive(Debug)]
struct Spare {
    key: SpareKey,
    child: Child,
}

impl Spare {
    /// Kills the spare's process group. It never received `init`, so nothing of the
    /// plugin's logic has run; closing its stdin first would make it read end of file as
    /// if the host had gone, which a plugin may act on.
    fn stop(mut self) {
        ProcessGroup::of(&self.child).signal(libc::SIGKILL);
        std::thread::spawn(move || {
            let _ = self.child.wait();
        });
    }

    /// Why it cannot serve a run of `key`, its process being checked first.
    fn fallback(&mut self, key: &SpareKey) -> Option<Fallback> {
        match self.child.try_wait() {
            Ok(None) => self.key.fallback(key),
            _ => Some(Fallback::Exited),
        }
    }
}

/// A spare to start: for `command`, with `key`, its plugin directory `dir`.
#[derive(Debug)]
struct SpareJob {
    command: String,
    key: SpareKey,
    dir: PathBuf,
}

/// The spares: those waiting for a run, those being started, and whether the bridge is
/// ending (then a spare that finishes starting is stopped at once).
#[derive(Debug, Default)]
struct SparesState {
    ready: HashMap<String, Spare>,
    /// How many are being started, by command.
    starting: HashMap<String, usize>,
    stopped: bool,
}

impl SparesState {
    fn done_starting(&mut self, command: &str) {
        if let Some(n) = self.starting.get_mut(command) {
            *n -= 1;
            if *n == 0 {
                self.starting.remove(command);
            }
        }
    }
}

/// The spare processes, shared with the thread that starts them.
#[derive(Debug, Default)]
struct Spares {
    state: Mutex<SparesState>,
    /// Signalled when a spare finishes starting.
    started: Condvar,
}

impl Spares {
    fn lock(&self) -> MutexGuard<'_, SparesState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a spare of `command` as being started; `false` when the bridge is ending.
    fn begin_starting(&self, command: &str) -> bool {
        let mut state = self.lock();
        if state.stopped {
            return false;
        }
        *state.starting.entry(command.to_owned()).or_default() += 1;
        true
    }

    /// A spare of `command` counted as being started will not be.
    fn not_starting(&self, command: &str) {
        self.lock().done_starting(command);
        self.started.notify_all();
    }

    /// Starts the spare for `job` and keeps it, or stops it when the bridge is ending.
    fn start(&self, job: SpareJob) {
        if self.lock().stopped {
            self.not_starting(&job.command);
            return;
        }
        let spawned = spawn_plugin(&job.key.launch, &[], Some(&job.dir), PluginStdio::piped());
        let mut state = self.lock();
        state.done_starting(&job.command);
        let (stop_new, stop_old) = match spawned {
            Ok(child) => {
                let spare = Spare {
                    key: job.key,
                    child,
                };
                if state.stopped {
                    (Some(spare), None)
                } else {
                    (None, state.ready.insert(job.command, spare))
                }
            }
            Err(_) => (None, None),
        };
        drop(state);
        self.started.notify_all();
        for s in stop_new.into_iter().chain(stop_old) {
            s.stop();
        }
    }

    /// Takes the spare for `command`, waiting for one being started (which is sooner
    /// than starting a process).
    fn take(&self, command: &str) -> Option<Spare> {
        let mut state = self.lock();
        while state.starting.contains_key(command) {
            state = self.started.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.ready.remove(command)
    }
}

/// The thread that starts spares, so that a session's exit is reported without waiting
/// for the next process to start.
#[derive(Debug)]
struct Starter {
    jobs: Sender<SpareJob>,
    thread: std::thread::JoinHandle<()>,
}

impl Starter {
    /// Starts the thread, which starts `spares`' jobs in order.
    fn spawn(spares: Arc<Spares>) -> std::io::Result<Self> {
        let (jobs, rx) = unbounded::<SpareJob>();
        let thread = std::thread::Builder::new()
            .name("fledge-spares".into())
            .spawn(move || {
                for job in rx {
                    // The session that asked is reporting its exit now; let that go
                    // out before the fork and the new process take the CPU.
                    std::thread::sleep(SPARE_SETTLE);
                    spares.start(job);
                }
            })?;
        Ok(Self { jobs, thread })
    }
}

/// The bridge's spares and the thread starting them.
#[derive(Debug)]
pub(super) struct SparePool {
    /// Whether spares are started at all (the `spare` option).
    enabled: bool,
    spares: Arc<Spares>,
    starter: Mutex<Option<Starter>>,
}

impl SparePool {
    /// A pool with no spare yet; `enabled` says whether spares are started.
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            spares: Arc::new(Spares::default()),
            starter: Mutex::new(None),
        }
    }

    /// The process for a run of `command` with `key`: the spare when it serves, else a
    /// new one (the session `s` told why).
    pub fn process(
        &self,
        s: &ngw::Session,
        key: &SpareKey,
        command: &str,
        dir: &Path,
    ) -> std::io::Result<Child> {
        if let Some(mut spare) = self.spares.take(command) {
            match spare.fallback(key) {
                None => return Ok(spare.child),
                Some(why) => {
                    s.notice(
                        ngw_vocab::NoticeKind::Fallback,
                        &format!("{command}: {why}; started a new process"),
                    );
                    spare.stop();
                }
            }
        }
        spawn_plugin(&key.launch, &[], Some(dir), PluginStdio::piped())
    }

    /// Has the next process for `command` started by the starter thread.
    pub fn start_next(&self, key: SpareKey, command: String, dir: PathBuf) {
        if !self.enabled || key.stamp.is_none() {
            return;
        }
        let mut starter = self.starter.lock().unwrap_or_else(|p| p.into_inner());
        if !self.spares.begin_starting(&command) {
            return;
        }
        if starter.is_none() {
            match Starter::spawn(self.spares.clone()) {
                Ok(st) => *starter = Some(st),
                Err(_) => {
                    self.spares.not_starting(&command);
                    return;
                }
            }
        }
        if let Some(st) = starter.as_ref() {
            let job = SpareJob { command, key, dir };
            if let Err(e) = st.jobs.send(job) {
                self.spares.not_starting(&e.0.command);
            }
        }
    }

    /// Stops every spare process (the bridge is ending): those waiting, and those being
    /// started, once they are; returns when none is left.
    pub fn stop_all(&self) {
        self.spares.lock().stopped = true;
        let starter = self
            .starter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(Starter { jobs, thread }) = starter {
            drop(jobs);
            let _ = thread.join();
        }
        let ready: Vec<Spare> = self.spares.lock().ready.drain().map(|(_, s)| s).collect();
        for s in ready {
            s.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SpareKey {
        SpareKey {
            launch: Launch {
                binary: PathBuf::from("/bin/cat"),
                env: Vec::new(),
                cwd: std::env::temp_dir(),
                umask: None,
                ignored: Vec::new(),
            },
            stamp: None,
        }
    }

    /// A spare of `cat`, which waits on its stdin as a plugin waits for `init`.
    fn job(command: &str) -> SpareJob {
        SpareJob {
            command: command.into(),
            key: key(),
            dir: std::env::temp_dir(),
        }
    }

    #[test]
    fn a_run_waits_for_the_spare_being_started() {
        let spares = Arc::new(Spares::default());
        spares.lock().starting.insert("c".into(), 1);
        let starter = {
            let spares = spares.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                spares.start(job("c"));
            })
        };
        let mut spare = spares.take("c").expect("the spare being started");
        assert!(
            matches!(spare.child.try_wait(), Ok(None)),
            "waiting for input"
        );
        spare.stop();
        starter.join().unwrap();
        assert!(spares.lock().starting.is_empty());
        assert!(spares.take("c").is_none());
    }

    #[test]
    fn no_spare_is_kept_once_the_bridge_stops() {
        let spares = Spares::default();
        spares.lock().starting.insert("c".into(), 1);
        spares.lock().stopped = true;
        spares.start(job("c"));
        let state = spares.lock();
        assert!(state.ready.is_empty() && state.starting.is_empty());
    }

    #[test]
    fn fallback_names_the_first_difference() {
        let spare = key();
        assert_eq!(spare.fallback(&key()), None);
        let mut run = key();
        run.launch.env.push(("A".into(), "1".into()));
        assert_eq!(spare.fallback(&run), Some(Fallback::Env));
        run.launch.ignored.push(libc::SIGINT);
        assert_eq!(spare.fallback(&run), Some(Fallback::Ignored));
        run.launch.umask = Some(0o22);
        assert_eq!(spare.fallback(&run), Some(Fallback::Umask));
        run.launch.cwd = PathBuf::from("/");
        assert_eq!(spare.fallback(&run), Some(Fallback::Cwd));
        run.stamp = Some((SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH));
        assert_eq!(spare.fallback(&run), Some(Fallback::Changed));
        let mut moved = key();
        moved.launch.binary = PathBuf::from("/bin/sh");
        assert_eq!(spare.fallback(&moved), Some(Fallback::Changed));
    }

    #[test]
    fn a_stopped_pool_starts_no_spare() {
        let pool = SparePool::new(true);
        pool.stop_all();
        let mut k = key();
        k.stamp = Some((SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH));
        pool.start_next(k, "c".into(), std::env::temp_dir());
        assert!(pool.spares.lock().starting.is_empty());
        assert!(pool.spares.take("c").is_none());
    }
}
