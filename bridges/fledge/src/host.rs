//! The I/O shell: one ngw session runs one fledge plugin process to exit, as fledge does.
//!
//! A protocol plugin gets `init` on its stdin and is then driven by [`crate::protocol::Host`];
//! its stderr is the client's stderr (never captured, as the spec says). A plugin without
//! `protocol` runs with its arguments on the command line and the client's stdin, stdout
//! and stderr. When the session took the client's descriptors ([`Streams`]) those are
//! used directly: the plugin's stderr (and a plugin without `protocol`'s stdio) is the
//! client's own descriptor, and questions are asked on the client's terminal; otherwise
//! they are copied to and from the streams ngd relays.
//!
//! The next process for each command is started ahead (the spare, waiting for `init` on
//! its stdin) and used only when the invocation's environment, working directory, umask
//! and ignored signals equal those it was started with and neither the program nor
//! `plugin.toml` changed since; otherwise it is stopped and a process is started as usual.
//! A run whose stderr is the client's terminal starts its own process (the spare's stderr
//! is a pipe). Spares are started by a thread of their own once a run has ended, so the
//! run's exit is reported without waiting for the next process; a run arriving while its
//! spare is being started waits for it, and the bridge's end stops spares being started
//! as well as those waiting.

use crate::context::{self, Client};
use crate::discover::{self, Options, Resolved};
use crate::protocol::{self, Effect, Event, Host, Init, PluginInfo, Settings};
use crate::streams::{Sink, Streams};
use crate::ui::{Helper, LineUi, ProgressView, TermUi, Ui, UiError};
use crate::{exec, store};
use crossbeam_channel::{bounded, never, unbounded, Sender};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

/// Exit code when the command's plugin cannot be found or its program is missing.
pub const EXIT_NOT_FOUND: i32 = 127;
/// Exit code when the plugin's program cannot be started.
pub const EXIT_CANNOT_RUN: i32 = 126;
/// Exit code for host-side failures fledge also reports with 1 (an unsupported protocol
/// version, a question that could not be answered, a WASM plugin).
pub const EXIT_HOST: i32 = 1;

/// How long the spare starter waits after a run ends before starting the next process,
/// so that the run's exit reaches ngd first (the exit is sent right after the run's
/// handler returns, well within this).
const SPARE_SETTLE: std::time::Duration = std::time::Duration::from_millis(1);

/// What a spare was started for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SpareKey {
    binary: PathBuf,
    env: Vec<(OsString, OsString)>,
    cwd: PathBuf,
    umask: Option<u32>,
    /// Signals the process starts with ignored (`NGW_SIGIGN`).
    ignored: Vec<libc::c_int>,
    stamp: Option<(SystemTime, SystemTime)>,
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
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: signalling the group we created for the unreaped child.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
        std::thread::spawn(move || {
            let _ = self.child.wait();
        });
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

    /// Starts the spare for `job` and keeps it, or stops it when the bridge is ending.
    fn start(&self, job: SpareJob) {
        if self.lock().stopped {
            self.lock().done_starting(&job.command);
            self.started.notify_all();
            return;
        }
        let spawned = spawn_plugin(
            &job.key.binary,
            &[],
            &job.key,
            Some(&job.dir),
            Stdio3::piped(),
        );
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

/// The bridge: options, the commands found, the spares.
#[derive(Debug)]
pub struct Bridge {
    options: Options,
    plugins_dir: PathBuf,
    commands: BTreeMap<String, PathBuf>,
    spares: Arc<Spares>,
    starter: Mutex<Option<Starter>>,
}

fn stamp(r: &Resolved) -> Option<(SystemTime, SystemTime)> {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    Some((m(&r.binary)?, m(&r.dir.join("plugin.toml"))?))
}

fn sorted_env(env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    let mut e = env.to_vec();
    e.sort();
    e
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(EXIT_HOST)
}

/// Whether stderr lines are styled: console's rule, applied to the client's stderr and
/// environment.
fn colour(session: &ngw::Session, stderr_tty: bool) -> bool {
    let var = |n: &str| session.var(n).map(|v| v.to_string_lossy().into_owned());
    let forced = var("CLICOLOR_FORCE").is_some_and(|v| v != "0");
    let term = var("TERM").is_some_and(|t| t != "dumb");
    (stderr_tty && term && var("NO_COLOR").is_none() && var("CLICOLOR").is_none_or(|v| v != "0"))
        || forced
}

/// The signals a session's process starts with ignored: those the client's parent left
/// ignored (`NGW_SIGIGN`), as a cold process would inherit them.
fn ignored_signals(session: &ngw::Session) -> Vec<libc::c_int> {
    session
        .ignored_signals
        .iter()
        .filter_map(|n| ngw::Signal::from_name(n.as_bytes()).map(ngw::Signal::number))
        .collect()
}

/// How a plugin process's stdio is set up.
struct Stdio3 {
    /// Its stdin: a pipe (protocol plugins), or the client's descriptor.
    stdin: Option<OwnedFd>,
    /// Its stdout, likewise.
    stdout: Option<OwnedFd>,
    /// Its stderr: a pipe copied to the client, or the client's descriptor.
    stderr: Option<OwnedFd>,
    /// Client descriptors that were closed: the process's fds of those numbers stay
    /// closed.
    closed: [bool; 3],
}

impl Stdio3 {
    /// Pipes for all three (copied to and from the relayed streams, or the protocol).
    fn piped() -> Self {
        Self {
            stdin: None,
            stdout: None,
            stderr: None,
            closed: [false; 3],
        }
    }
}

fn spawn_plugin(
    binary: &Path,
    args: &[OsString],
    key: &SpareKey,
    plugin_dir: Option<&Path>,
    stdio: Stdio3,
) -> std::io::Result<Child> {
    let io = |fd: Option<OwnedFd>, closed: bool| match fd {
        Some(fd) => Stdio::from(fd),
        None if closed => Stdio::null(),
        None => Stdio::piped(),
    };
    let mut cmd = Command::new(binary);
    cmd.args(args)
        .env_clear()
        .envs(key.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&key.cwd)
        .stdin(io(stdio.stdin, stdio.closed[0]))
        .stdout(io(stdio.stdout, stdio.closed[1]))
        .stderr(io(stdio.stderr, stdio.closed[2]))
        .process_group(0);
    if let Some(dir) = plugin_dir {
        cmd.env("FLEDGE_PLUGIN_DIR", dir);
    }
    let umask = key.umask;
    let ignored = key.ignored.clone();
    let closed = stdio.closed;
    // SAFETY: umask, signal and close are async-signal-safe; `ignored` was allocated
    // before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(mask) = umask {
                libc::umask(mask as libc::mode_t);
            }
            for &sig in &ignored {
                libc::signal(sig, libc::SIG_IGN);
            }
            for (fd, &c) in closed.iter().enumerate() {
                if c {
                    libc::close(fd as libc::c_int);
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

impl Bridge {
    /// A bridge over `plugins_dir`'s `commands`.
    pub fn new(
        options: Options,
        plugins_dir: PathBuf,
        commands: BTreeMap<String, PathBuf>,
    ) -> Self {
        Self {
            options,
            plugins_dir,
            commands,
            spares: Arc::new(Spares::default()),
            starter: Mutex::new(None),
        }
    }

    /// Stops every spare process (the bridge is ending): those waiting, and those being
    /// started, once they are; returns when none is left.
    pub fn stop_spares(&self) {
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

    /// Runs one session; returns its exit code.
    pub fn session(&self, s: &mut ngw::Session) -> i32 {
        let mut streams = Streams::of(s);
        let colour = colour(s, streams.tty[2]);
        let error = |err: &mut Sink, text: &str| {
            let _ = err.write_all(
                format!(
                    "{} {text}\n",
                    console::style("error:").red().bold().force_styling(colour)
                )
                .as_bytes(),
            );
        };
        let mut err = streams.err.clone();
        let Some(dir) = self.commands.get(&s.command) else {
            error(
                &mut err,
                &format!("unrecognized fledge plugin command '{}'", s.command),
            );
            return EXIT_NOT_FOUND;
        };
        let resolved = match discover::resolve(&s.command, dir, &self.plugins_dir, &self.options) {
            Ok(r) => r,
            Err(e) => {
                error(&mut err, &e.to_string());
                return EXIT_NOT_FOUND;
            }
        };
        if !resolved.binary.exists() {
            error(
                &mut err,
                &format!(
                    "Plugin '{}' references binary '{}' which does not exist.",
                    resolved.plugin_name,
                    resolved.binary.display()
                ),
            );
            return EXIT_NOT_FOUND;
        }
        if resolved.runtime.as_deref() == Some("wasm") {
            error(
                &mut err,
                &format!(
                    "Plugin '{}' requires the WASM runtime, which ngd's fledge bridge does not have.",
                    resolved.plugin_name
                ),
            );
            return EXIT_HOST;
        }
        let code = match resolved.protocol.as_deref() {
            None => self.relay(s, &mut streams, &resolved),
            Some(protocol::PROTOCOL) => self.protocol(s, &mut streams, &resolved, colour),
            Some(other) => {
                error(
                    &mut err,
                    &format!(
                        "Plugin '{}' requires protocol '{other}' which is not supported by this version of ngd's fledge bridge (it speaks {}).\n  Upgrade ngd to use this plugin.",
                        resolved.plugin_name,
                        protocol::PROTOCOL
                    ),
                );
                return EXIT_HOST;
            }
        };
        if code != 0 {
            let name = match resolved.protocol {
                Some(_) => &resolved.plugin_name,
                None => &resolved.command,
            };
            error(
                &mut err,
                &format!("Plugin '{name}' exited with code {code}"),
            );
        }
        code
    }

    /// The process for this run: the spare when it matches, else a new one.
    fn process(
        &self,
        s: &ngw::Session,
        key: &SpareKey,
        command: &str,
        dir: &Path,
    ) -> std::io::Result<Child> {
        if let Some(mut spare) = self.spares.take(command) {
            let alive = matches!(spare.child.try_wait(), Ok(None));
            if alive && spare.key == *key {
                return Ok(spare.child);
            }
            let why = if !alive {
                "the spare plugin process had exited"
            } else if spare.key.stamp != key.stamp || spare.key.binary != key.binary {
                "the plugin changed since its spare process started"
            } else if spare.key.cwd != key.cwd {
                "the working directory differs from the spare process's"
            } else if spare.key.umask != key.umask {
                "the umask differs from the spare process's"
            } else if spare.key.ignored != key.ignored {
                "the ignored signals differ from the spare process's"
            } else {
                "the environment differs from the spare process's"
            };
            s.notice(
                "fallback",
                &format!("{command}: {why}; started a new process"),
            );
            spare.stop();
        }
        spawn_plugin(&key.binary, &[], key, Some(dir), Stdio3::piped())
    }

    /// Has the next process for `command` started by the starter thread.
    fn start_spare(&self, key: SpareKey, command: String, dir: PathBuf) {
        if !self.options.spare || key.stamp.is_none() {
            return;
        }
        let mut starter = self.starter.lock().unwrap_or_else(|p| p.into_inner());
        {
            let mut state = self.spares.lock();
            if state.stopped {
                return;
            }
            *state.starting.entry(command.clone()).or_default() += 1;
        }
        if starter.is_none() {
            let (jobs, rx) = unbounded::<SpareJob>();
            let spares = self.spares.clone();
            let thread = std::thread::Builder::new()
                .name("fledge-spares".into())
                .spawn(move || {
                    for job in rx {
                        // The session that asked is reporting its exit now; let that go
                        // out before the fork and the new process take the CPU.
                        std::thread::sleep(SPARE_SETTLE);
                        spares.start(job);
                    }
                });
            match thread {
                Ok(thread) => *starter = Some(Starter { jobs, thread }),
                Err(_) => {
                    self.spares.lock().done_starting(&command);
                    self.spares.started.notify_all();
                    return;
                }
            }
        }
        if let Some(st) = starter.as_ref() {
            let job = SpareJob { command, key, dir };
            if let Err(e) = st.jobs.send(job) {
                self.spares.lock().done_starting(&e.0.command);
                self.spares.started.notify_all();
            }
        }
    }

    fn protocol(
        &self,
        s: &mut ngw::Session,
        streams: &mut Streams,
        r: &Resolved,
        colour: bool,
    ) -> i32 {
        let key = SpareKey {
            binary: r.binary.clone(),
            env: sorted_env(&s.env),
            cwd: s.cwd.clone(),
            umask: s.umask,
            ignored: ignored_signals(s),
            stamp: stamp(r),
        };
        // On the client's terminal the plugin's stderr is that terminal, as under fledge
        // (a plugin may style what it writes there). A spare was started with a pipe for
        // its stderr, so such a run starts its own process and leaves the spare for the
        // next run that can use it.
        let direct_stderr = streams.tty[2].then(|| streams.dup(2)).flatten();
        let direct = direct_stderr.is_some();
        let spawned = match direct_stderr {
            Some(fd) => spawn_plugin(
                &key.binary,
                &[],
                &key,
                Some(&r.dir),
                Stdio3 {
                    stderr: Some(fd),
                    ..Stdio3::piped()
                },
            ),
            None => self.process(s, &key, &r.command, &r.dir),
        };
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(
                    streams.err,
                    "error: spawning plugin '{}': {e}",
                    r.plugin_name
                );
                return EXIT_CANNOT_RUN;
            }
        };
        let next = key.clone();
        let init = Init::new(
            s.args_lossy(),
            Some(context::project(&Client {
                cwd: &s.cwd,
                env: &s.env,
            })),
            PluginInfo {
                name: r.plugin_name.clone(),
                version: r.plugin_version.clone(),
                dir: r.dir.to_string_lossy().into_owned(),
            },
            self.options.fledge_version.clone(),
            r.capabilities.clone(),
        );
        let code = Run::new(s, streams, r, colour, &self.options).drive(&mut child, &init);
        // The next process starts once this run is over, so its start-up does not compete
        // with the run for the CPU, and off the session's thread, so the run's exit is
        // reported without waiting for it.
        if !direct {
            self.start_spare(next, r.command.clone(), r.dir.clone());
        }
        code
    }

    /// A plugin without `protocol`: its arguments on the command line, the client's stdio.
    /// On the client's descriptors the process gets them as its own; otherwise its pipes
    /// are copied to and from the relayed streams. Signals ngd forwards reach its process
    /// group (or the process, for `SIGNAME process`); a stop is reported (`z`) and a death
    /// by signal ends the session as one (`signals`).
    fn relay(&self, s: &mut ngw::Session, streams: &mut Streams, r: &Resolved) -> i32 {
        // fledge sets FLEDGE_PLUGIN_DIR two levels above the real program.
        let dir = std::fs::canonicalize(&r.binary)
            .ok()
            .and_then(|p| p.parent()?.parent().map(Path::to_path_buf));
        let key = SpareKey {
            binary: r.binary.clone(),
            env: s.env.clone(),
            cwd: s.cwd.clone(),
            umask: s.umask,
            ignored: ignored_signals(s),
            stamp: None,
        };
        let stdio = if streams.on_client() {
            let (i, o, e) = (streams.dup(0), streams.dup(1), streams.dup(2));
            let closed = [i.is_none(), o.is_none(), e.is_none()];
            Stdio3 {
                stdin: i,
                stdout: o,
                stderr: e,
                closed,
            }
        } else {
            Stdio3::piped()
        };
        let mut child = match spawn_plugin(&r.binary, &s.args, &key, dir.as_deref(), stdio) {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(streams.err, "error: running plugin '{}': {e}", r.command);
                return EXIT_CANNOT_RUN;
            }
        };
        let pid = child.id() as libc::pid_t;
        let copy = |from: Option<Box<dyn Read + Send>>, mut to: Sink| {
            std::thread::spawn(move || {
                if let Some(mut from) = from {
                    let _ = std::io::copy(&mut from, &mut to);
                }
            })
        };
        let out = copy(
            child.stdout.take().map(|o| Box::new(o) as _),
            streams.out.clone(),
        );
        let errt = copy(
            child.stderr.take().map(|o| Box::new(o) as _),
            streams.err.clone(),
        );
        if let Some(mut stdin) = child.stdin.take() {
            let mut input = s.take_stdin();
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut input, &mut stdin);
            });
        }
        let (wait_tx, wait_rx) = unbounded();
        std::thread::spawn(move || wait_reporting_stops(pid, &wait_tx));
        // The client forwarded a stop and has not been continued: it stopped itself, so
        // the plugin's stop is not reported back (a late `z` would stop it again).
        let mut client_stopped = false;
        let status = loop {
            crossbeam_channel::select! {
                recv(wait_rx) -> w => match w {
                    // A stop the waiter saw before a SIGCONT was sent is over already.
                    Ok(Waited::Stopped(sig)) if !client_stopped && is_stopped(pid) => {
                        if let Some(name) = ngw::Signal::from_number(sig).map(ngw::Signal::name) {
                            let _ = s.stopped(name);
                        }
                    }
                    Ok(Waited::Stopped(_)) => {}
                    Ok(Waited::Exited(st)) => break Some(st),
                    Err(_) => break None,
                },
                recv(s.interrupts()) -> i => {
                    let (sig, group) = match i {
                        Ok(ngw::Interrupt::Signal(name)) => (name.number(), true),
                        Ok(ngw::Interrupt::ProcessSignal(name)) => (name.number(), false),
                        Ok(ngw::Interrupt::WindowSize(_)) => (Some(libc::SIGWINCH), true),
                        Ok(ngw::Interrupt::Hangup) => (Some(libc::SIGHUP), true),
                        Err(_) => (None, true),
                    };
                    match sig {
                        Some(libc::SIGCONT) => client_stopped = false,
                        Some(libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU | libc::SIGSTOP) => {
                            client_stopped = true;
                        }
                        _ => {}
                    }
                    // SAFETY: signalling the plugin's own group (as a terminal would) or
                    // process; it is not reaped before the waiter reports it.
                    match sig {
                        Some(sig) if group => unsafe { libc::killpg(pid, sig); },
                        Some(sig) => unsafe { libc::kill(pid, sig); },
                        None => {}
                    }
                }
            }
        };
        let _ = (out.join(), errt.join());
        match status {
            Some(st) => {
                if let Some(sig) = st.signal() {
                    if let Some(name) = ngw::Signal::from_number(sig).map(ngw::Signal::name) {
                        s.exit_by_signal(name, st.core_dumped());
                    }
                }
                exit_code(st)
            }
            None => EXIT_HOST,
        }
    }
}

/// What the waiter of a plugin process saw.
#[derive(Debug)]
enum Waited {
    /// It stopped with this signal.
    Stopped(libc::c_int),
    /// It ended.
    Exited(std::process::ExitStatus),
}

/// Whether process `pid` is stopped now (`T` in `/proc/<pid>/stat`): a `SIGCONT` has
/// made it runnable by the time `kill` returns.
fn is_stopped(pid: libc::pid_t) -> bool {
    std::fs::read(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.iter()
            .rposition(|&b| b == b')')
            .and_then(|at| stat.get(at + 2))
            == Some(&b'T')
    })
}

/// Waits for process `pid` (our child, never waited on elsewhere), reporting stops,
/// until it ends.
fn wait_reporting_stops(pid: libc::pid_t, to: &Sender<Waited>) {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waiting for our own child by pid.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) };
        if rc == -1 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if libc::WIFSTOPPED(status) {
            let _ = to.send(Waited::Stopped(libc::WSTOPSIG(status)));
            continue;
        }
        let _ = to.send(Waited::Exited(std::process::ExitStatus::from_raw(status)));
        return;
    }
}

/// Lines from the plugin's stdout, each at most [`protocol::MAX_LINE`] long (a longer one
/// arrives as one invalid line and is skipped as malformed).
fn read_lines(out: impl Read, tx: Sender<Event>) {
    let mut r = BufReader::with_capacity(64 * 1024, out);
    let mut line = Vec::new();
    let mut overflow = false;
    loop {
        let (used, end) = match r.fill_buf() {
            Ok([]) => break,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    if !overflow && line.len() + i <= protocol::MAX_LINE {
                        line.extend_from_slice(&buf[..i]);
                    } else {
                        overflow = true;
                    }
                    (i + 1, true)
                }
                None => {
                    if !overflow && line.len() + buf.len() <= protocol::MAX_LINE {
                        line.extend_from_slice(buf);
                    } else {
                        overflow = true;
                        line.clear();
                    }
                    (buf.len(), false)
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        r.consume(used);
        if end {
            let l = if overflow {
                b"\xff".to_vec()
            } else {
                std::mem::take(&mut line)
            };
            overflow = false;
            line.clear();
            if tx.send(Event::Line(l)).is_err() {
                return;
            }
        }
    }
    if !line.is_empty() && !overflow {
        let _ = tx.send(Event::Line(line));
    }
    let _ = tx.send(Event::Eof);
}

/// The plugin's stderr pipe, non-blocking, read under a lock by the copying thread and by
/// the run's loop.
#[derive(Debug)]
struct PluginStderr {
    pipe: Mutex<std::process::ChildStderr>,
}

impl PluginStderr {
    fn new(pipe: std::process::ChildStderr) -> Self {
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let fd = pipe.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Self {
            pipe: Mutex::new(pipe),
        }
    }

    /// Copies what is available now; `false` at end of file or on an error.
    fn drain(&self, to: &mut impl Write) -> bool {
        let mut pipe = self.pipe.lock().unwrap_or_else(|p| p.into_inner());
        let mut buf = [0u8; 16 * 1024];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => {
                    let _ = to.write_all(&buf[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    fn copy_until_eof(&self, to: &mut impl Write) {
        use std::os::fd::AsRawFd;
        let fd = self
            .pipe
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_raw_fd();
        loop {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: polling one descriptor that stays open while `self` lives.
            let rc = unsafe { libc::poll(&mut pfd, 1, -1) };
            if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return;
            }
            if rc > 0 && !self.drain(to) {
                return;
            }
        }
    }
}

/// Asks the plugin's questions on a thread of its own (so a question can be abandoned),
/// started at the first question: most runs ask none.
enum Asker {
    /// No question yet: the UI, and where answers go.
    Idle(Box<dyn Ui>, Sender<Event>),
    /// The thread asking, fed questions in order.
    Asking(Sender<(String, protocol::Question)>),
    /// The thread could not be started: every question fails.
    Failed(Sender<Event>, String),
}

impl Asker {
    fn ask(&mut self, id: String, question: protocol::Question) {
        match self {
            Asker::Asking(tx) => {
                let _ = tx.send((id, question));
                return;
            }
            Asker::Failed(done, why) => {
                let _ = done.send(Event::Done {
                    id,
                    result: Err(why.clone()),
                });
                return;
            }
            Asker::Idle(..) => {}
        }
        let (tx, rx) = unbounded::<(String, protocol::Question)>();
        let placeholder = Asker::Asking(tx.clone());
        let Asker::Idle(mut ui, done) = std::mem::replace(self, placeholder) else {
            return;
        };
        let answers = done.clone();
        let started = std::thread::Builder::new()
            .name("fledge-ui".into())
            .spawn(move || {
                for (id, q) in rx {
                    let event = match ui.ask(&q) {
                        Ok(v) => Event::Done { id, result: Ok(v) },
                        Err(UiError::Interrupted) => Event::Interrupt,
                        Err(UiError::Failed(e)) => Event::Done { id, result: Err(e) },
                    };
                    if answers.send(event).is_err() {
                        return;
                    }
                }
            });
        if let Err(e) = started {
            *self = Asker::Failed(done, format!("cannot start the prompt thread: {e}"));
        }
        self.ask(id, question);
    }
}

/// One protocol run.
struct Run<'a> {
    session: &'a mut ngw::Session,
    streams: &'a mut Streams,
    resolved: &'a Resolved,
    colour: bool,
    options: &'a Options,
}

impl<'a> Run<'a> {
    fn new(
        session: &'a mut ngw::Session,
        streams: &'a mut Streams,
        resolved: &'a Resolved,
        colour: bool,
        options: &'a Options,
    ) -> Self {
        Self {
            session,
            streams,
            resolved,
            colour,
            options,
        }
    }

    /// How questions are asked. On the client's descriptors with a terminal on fd 0:
    /// fledge's own prompts on that terminal ([`TermUi`]: keys from fd 0, drawn on fd 2,
    /// or on fd 0 when fd 2 is not a terminal). On the client's descriptors without one:
    /// line prompts on fd 2 answered from fd 0. Relayed: line prompts on the session's
    /// stderr answered from its stdin (a relayed session has no terminal to draw on).
    fn ui(&mut self) -> Box<dyn Ui> {
        let cwd = self.session.cwd.clone();
        if self.streams.on_client() {
            if self.streams.tty[0] {
                let out = if self.streams.tty[2] { 2 } else { 0 };
                if let (Some(input), Some(output), Some(helper)) = (
                    self.streams.dup(0),
                    self.streams.dup(out),
                    Helper::current(),
                ) {
                    return Box::new(
                        TermUi::split(input, output, helper, cwd).client_env(&self.session.env),
                    );
                }
            }
            let input: Box<dyn BufRead + Send> = match self.streams.dup(0) {
                Some(fd) => Box::new(BufReader::new(std::fs::File::from(fd))),
                None => Box::new(std::io::empty()),
            };
            return Box::new(LineUi::new(
                input,
                self.streams.err.clone(),
                self.streams.tty[0],
                cwd,
            ));
        }
        let input = BufReader::new(self.session.take_stdin());
        Box::new(LineUi::new(
            input,
            self.streams.err.clone(),
            self.streams.tty[0],
            cwd,
        ))
    }

    fn drive(mut self, child: &mut Child, init: &Init) -> i32 {
        let pgid = child.id() as libc::pid_t;
        let mut stdin: Option<ChildStdin> = child.stdin.take();
        let mut out = self.streams.out.clone();
        let mut err = self.streams.err.clone();
        let (line_tx, line_rx) = bounded::<Event>(16);
        let mut line_rx = Some(line_rx);
        let (done_tx, done_rx) = unbounded::<Event>();
        let (exit_tx, exit_rx) = bounded::<Event>(1);
        if let Some(o) = child.stdout.take() {
            std::thread::spawn(move || read_lines(o, line_tx));
        } else {
            let _ = line_tx.send(Event::Eof);
        }
        // The plugin's stderr is copied by a thread, and drained by this loop too before it
        // writes a line of its own, so that what the plugin wrote to stderr before a
        // message comes out before what the host prints for that message (as on a shared
        // terminal).
        let plugin_err = child.stderr.take().map(|e| Arc::new(PluginStderr::new(e)));
        let err_copy = plugin_err.clone().map(|p| {
            let mut to = self.streams.err.clone();
            std::thread::spawn(move || p.copy_until_eof(&mut to))
        });
        // The waiter reaps the child by pid; the `Child` handle is never waited on.
        let pid = child.id();
        {
            std::thread::spawn(move || {
                let mut status: libc::c_int = 0;
                // SAFETY: waiting for our own child by pid; the Child handle is not waited
                // on elsewhere.
                let rc = loop {
                    let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
                    if rc == -1
                        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                    {
                        continue;
                    }
                    break rc;
                };
                let code = if rc == -1 {
                    EXIT_HOST
                } else {
                    exit_code(std::process::ExitStatus::from_raw(status))
                };
                let _ = exit_tx.send(Event::Exited(code));
            });
        }
        let settings = Settings {
            plugin_name: self.resolved.plugin_name.clone(),
            capabilities: self.resolved.capabilities.clone(),
            colour: self.colour,
            prompt_timeout: self.options.prompt_timeout,
        };
        let mut host = Host::new(settings);
        let mut progress = if self.streams.tty[2] {
            ProgressView::on_output(self.streams.err.clone(), self.streams.width, self.colour)
        } else {
            ProgressView::hidden()
        };
        let ui = self.ui();
        let abort_ui = ui.aborter();
        let mut ask_tx = Asker::Idle(ui, done_tx.clone());
        let stop_work = Arc::new(AtomicBool::new(false));
        let write = |stdin: &mut Option<ChildStdin>, bytes: &[u8]| {
            if let Some(w) = stdin.as_mut() {
                if w.write_all(bytes).and_then(|_| w.flush()).is_err() {
                    *stdin = None;
                }
            }
        };
        write(&mut stdin, &protocol::init_line(init));
        let client_env = self.session.env.clone();
        let client_cwd = self.session.cwd.clone();
        let plugin_dir = self.resolved.dir.clone();
        loop {
            if let Some(code) = host.finished() {
                drop(stdin);
                if let Some(t) = err_copy {
                    let _ = t.join();
                }
                return code;
            }
            if host.stopped_reading() {
                // Dropping the receiver ends the reader, so a plugin writing more gets EPIPE.
                line_rx = None;
            }
            let idle = never();
            let lines = match &line_rx {
                Some(rx) if host.wants_line() => rx,
                _ => &idle,
            };
            let timeout = host
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()))
                .unwrap_or(std::time::Duration::from_secs(3600));
            let event = crossbeam_channel::select! {
                recv(lines) -> e => e.unwrap_or(Event::Eof),
                recv(done_rx) -> e => match e { Ok(e) => e, Err(_) => continue },
                recv(exit_rx) -> e => match e { Ok(e) => e, Err(_) => continue },
                recv(self.session.interrupts()) -> i => match i {
                    // A resize, a stop and a continue are not the user giving up.
                    Ok(ngw::Interrupt::WindowSize(_)) => continue,
                    Ok(ngw::Interrupt::Signal(name) | ngw::Interrupt::ProcessSignal(name))
                        if matches!(name.signal(), Some(ngw::Signal::Winch | ngw::Signal::Tstp | ngw::Signal::Cont)) => continue,
                    Ok(_) => Event::Interrupt,
                    Err(_) => continue,
                },
                default(timeout) => {
                    let effects = host.tick(Instant::now());
                    self.perform(effects, &mut stdin, &write, &mut out, &mut err, &mut progress, &mut ask_tx, &abort_ui, &stop_work, pgid, &done_tx, &client_env, &client_cwd, &plugin_dir, &plugin_err);
                    continue;
                }
            };
            let effects = host.handle(event, Instant::now());
            self.perform(
                effects,
                &mut stdin,
                &write,
                &mut out,
                &mut err,
                &mut progress,
                &mut ask_tx,
                &abort_ui,
                &stop_work,
                pgid,
                &done_tx,
                &client_env,
                &client_cwd,
                &plugin_dir,
                &plugin_err,
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn perform(
        &self,
        effects: Vec<Effect>,
        stdin: &mut Option<ChildStdin>,
        write: &impl Fn(&mut Option<ChildStdin>, &[u8]),
        out: &mut Sink,
        err: &mut Sink,
        progress: &mut ProgressView,
        ask: &mut Asker,
        abort_ui: &Arc<dyn Fn() + Send + Sync>,
        stop_work: &Arc<AtomicBool>,
        pgid: libc::pid_t,
        done: &Sender<Event>,
        env: &[(OsString, OsString)],
        cwd: &Path,
        plugin_dir: &Path,
        plugin_err: &Option<Arc<PluginStderr>>,
    ) {
        for e in effects {
            match e {
                Effect::ToPlugin(bytes) => write(stdin, &bytes),
                Effect::Stdout(text) => {
                    let _ = out.write_all(text.as_bytes());
                }
                Effect::Stderr(text) => {
                    if let Some(p) = plugin_err {
                        p.drain(err);
                    }
                    let _ = err.write_all(text.as_bytes());
                }
                Effect::Progress(p) => progress.show(&p),
                Effect::Ask { id, question } => ask.ask(id, question),
                Effect::Store { key, value } => {
                    if let Err(e) = store::store(plugin_dir, &key, &value) {
                        let host_line = format!(
                            "  {} [{}] store rejected: {e}\n",
                            console::style("⚠️").yellow().force_styling(self.colour),
                            self.resolved.plugin_name
                        );
                        let _ = err.write_all(host_line.as_bytes());
                    }
                }
                Effect::Load { id, key } => {
                    let value = match store::load(plugin_dir, &key) {
                        Ok(v) => v.map(Value::String).unwrap_or(Value::Null),
                        Err(e) => {
                            let _ = writeln!(
                                err,
                                "  ⚠ {}: load failed: {e}",
                                self.resolved.plugin_name
                            );
                            Value::Null
                        }
                    };
                    let _ = done.send(Event::Done {
                        id,
                        result: Ok(value),
                    });
                }
                Effect::Exec {
                    id,
                    command,
                    cwd: dir,
                    timeout_secs,
                } => {
                    stop_work.store(false, Ordering::SeqCst);
                    let done = done.clone();
                    let stop = stop_work.clone();
                    let env = env.to_vec();
                    let root = cwd.to_path_buf();
                    let plugin_dir = plugin_dir.to_path_buf();
                    std::thread::spawn(move || {
                        let r = match exec::work_dir(&root, &plugin_dir, dir.as_deref()) {
                            Ok(wd) => exec::run(
                                &command,
                                &wd,
                                &env,
                                std::time::Duration::from_secs(timeout_secs),
                                || stop.load(Ordering::SeqCst),
                            ),
                            Err(refused) => refused,
                        };
                        let _ = done.send(Event::Done {
                            id,
                            result: Ok(protocol::exec_value(&r)),
                        });
                    });
                }
                Effect::Metadata { id, keys } => {
                    let done = done.clone();
                    let env = env.to_vec();
                    let cwd = cwd.to_path_buf();
                    std::thread::spawn(move || {
                        let v = context::metadata(
                            &Client {
                                cwd: &cwd,
                                env: &env,
                            },
                            &keys,
                        );
                        let _ = done.send(Event::Done { id, result: Ok(v) });
                    });
                }
                Effect::Abandon => {
                    abort_ui();
                    stop_work.store(true, Ordering::SeqCst);
                }
                Effect::CloseStdin => *stdin = None,
                // SAFETY: signalling the plugin's own process group.
                Effect::Terminate => unsafe {
                    libc::killpg(pgid, libc::SIGTERM);
                },
                // SAFETY: as above.
                Effect::Kill => unsafe {
                    libc::killpg(pgid, libc::SIGKILL);
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spare of `cat`, which waits on its stdin as a plugin waits for `init`.
    fn job(command: &str) -> SpareJob {
        let tmp = std::env::temp_dir();
        SpareJob {
            command: command.into(),
            key: SpareKey {
                binary: PathBuf::from("/bin/cat"),
                env: Vec::new(),
                cwd: tmp.clone(),
                umask: None,
                ignored: Vec::new(),
                stamp: None,
            },
            dir: tmp,
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
}
