//! The I/O shell around [`Core`]: the plugin process, its pipes, the supervisor thread
//! (handshake deadline, pings, restarts with backoff, disabling) and the ngw sessions.
//!
//! Threads: per plugin process a reader (stdout → core; at end of file it reaps the
//! process) and a writer (framed messages → stdin); one supervisor (ticks the core every
//! 50 ms, handles exits and restarts); ngw's threads run the sessions. Everything shared is
//! under one mutex; nothing blocks while holding it except queueing to channels.

use crate::args::{self, Parsed};
use crate::config::Options;
use crate::core::{Action, CallError, Core, HostInfo, Outcome};
use crate::profile::{self, exit, Tool};
use crate::restart::{Decision, RestartPolicy};
use crossbeam_channel::{select, Receiver, Sender};
use ngw::Signal;
use ngw_vocab::NoticeKind;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What a waiting session hears about its call.
#[derive(Debug)]
enum CallMsg {
    Note(String),
    Done(Outcome),
    Lost(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Status {
    Starting,
    Ready,
    Backoff { until: u64 },
    Disabled(String),
    Stopping,
}

#[derive(Debug)]
struct Proc {
    pid: i32,
    writer: Sender<Option<Vec<u8>>>,
    exited: bool,
}

#[derive(Debug)]
struct State {
    status: Status,
    generation: u64,
    proc: Option<Proc>,
    core: Option<Core>,
    calls: HashMap<(u64, u64), Sender<CallMsg>>,
    policy: RestartPolicy,
    catalog: Vec<Tool>,
    runtime: String,
    failure: Option<(String, bool)>,
    last_failure: String,
    shutdown_answered: bool,
    supervisor_started: bool,
    supervisor_done: bool,
    /// The disabling has been reported to ngd in a notice.
    disabled_noticed: bool,
}

/// One bridge: the plugin command, its options and the shared state.
#[derive(Debug)]
pub struct Bridge {
    name: String,
    command: Vec<OsString>,
    cwd: Option<std::path::PathBuf>,
    opts: Arc<Options>,
    host: Arc<HostInfo>,
    state: Mutex<State>,
    changed: Condvar,
    epoch: Instant,
    events: Sender<u64>,
    event_rx: Receiver<u64>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Bridge {
    /// A bridge for `command` (not started).
    pub fn new(
        command: Vec<OsString>,
        config: &ngw_vocab::BridgeConfig,
        opts: Options,
    ) -> Arc<Self> {
        let state_dir = std::env::var_os("XDG_STATE_HOME")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".local/state"))
            })
            .unwrap_or_else(std::env::temp_dir)
            .join("ngd/plugins")
            .join(&config.name);
        let data_dir = opts
            .data_dir
            .clone()
            .unwrap_or_else(|| state_dir.join("data"));
        let log_dir = opts
            .log_dir
            .clone()
            .unwrap_or_else(|| state_dir.join("log"));
        let host = HostInfo {
            name: config.name.clone(),
            host_version: format!("ngd/{}", env!("CARGO_PKG_VERSION")),
            data_dir: data_dir.to_string_lossy().into_owned(),
            log_dir: log_dir.to_string_lossy().into_owned(),
        };
        let policy = RestartPolicy::new(
            opts.restart_backoff_ms.clone(),
            opts.max_restarts,
            opts.restart_window_ms,
        );
        let (events, event_rx) = crossbeam_channel::unbounded();
        Arc::new(Self {
            name: config.name.clone(),
            command,
            cwd: config.cwd.clone(),
            opts: Arc::new(opts),
            host: Arc::new(host),
            state: Mutex::new(State {
                status: Status::Starting,
                generation: 0,
                proc: None,
                core: None,
                calls: HashMap::new(),
                policy,
                catalog: Vec::new(),
                runtime: String::new(),
                failure: None,
                last_failure: String::new(),
                shutdown_answered: false,
                supervisor_started: false,
                supervisor_done: false,
                disabled_noticed: false,
            }),
            changed: Condvar::new(),
            epoch: Instant::now(),
            events,
            event_rx,
        })
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn log(&self, line: &str) {
        eprintln!("ngd bridge jsonrpc [{}]: {line}", self.name);
    }

    /// Starts the plugin and the supervisor and waits for the first handshake; returns the
    /// hello to send, or the reason the plugin cannot serve.
    pub fn start(self: &Arc<Self>) -> Result<ngw::Hello, String> {
        if self.opts.profile == crate::config::Profile::Streamnook {
            for d in [&self.host.data_dir, &self.host.log_dir] {
                std::fs::create_dir_all(d).map_err(|e| format!("cannot create {d}: {e}"))?;
            }
        }
        {
            let mut st = lock(&self.state);
            self.spawn(&mut st)?;
        }
        let me = self.clone();
        std::thread::Builder::new()
            .name("jsonrpc-supervisor".into())
            .spawn(move || me.supervise())
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        lock(&self.state).supervisor_started = true;
        let mut st = lock(&self.state);
        loop {
            match &st.status {
                Status::Ready => {
                    let names: Vec<String> = st.catalog.iter().map(|t| t.name.clone()).collect();
                    return Ok(ngw::Hello::new(names)
                        .max_sessions(self.opts.concurrency)
                        .runtime(st.runtime.clone()));
                }
                // ngd disables the pool with this reason; it restarts the bridge itself.
                Status::Disabled(_) | Status::Backoff { .. } => {
                    return Err(st.last_failure.clone())
                }
                _ => st = self.wait(st, Duration::from_millis(200)),
            }
        }
    }

    fn wait<'a>(&self, st: MutexGuard<'a, State>, d: Duration) -> MutexGuard<'a, State> {
        self.changed
            .wait_timeout(st, d)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0)
    }

    /// Starts a plugin process (a new generation) and sends the first handshake message.
    fn spawn(self: &Arc<Self>, st: &mut State) -> Result<(), String> {
        let Some((program, rest)) = self.command.split_first() else {
            return Err("no plugin command (ngd bridge jsonrpc -- COMMAND...)".into());
        };
        let mut cmd = Command::new(program);
        cmd.args(rest)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        if let Some(cwd) = &self.cwd {
            cmd.current_dir(cwd);
        }
        // The plugin dies with the bridge.
        ng_sys::process::on_spawn(
            &mut cmd,
            ng_sys::process::ChildSetup {
                die_with_parent: true,
                ..Default::default()
            },
        );
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "cannot start {}: {e}",
                std::path::Path::new(program).display()
            )
        })?;
        let pid = child.id() as i32;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => {
                kill_group(pid);
                let _ = child.wait();
                return Err("the plugin's pipes could not be set up".into());
            }
        };
        st.generation += 1;
        let generation = st.generation;
        let (wtx, wrx) = crossbeam_channel::unbounded::<Option<Vec<u8>>>();
        std::thread::Builder::new()
            .name(format!("jsonrpc-writer-{generation}"))
            .spawn(move || {
                let mut stdin = stdin;
                while let Ok(Some(bytes)) = wrx.recv() {
                    if stdin.write_all(&bytes).and_then(|_| stdin.flush()).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        let me = self.clone();
        std::thread::Builder::new()
            .name(format!("jsonrpc-reader-{generation}"))
            .spawn(move || me.read_loop(generation, stdout, child))
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        st.proc = Some(Proc {
            pid,
            writer: wtx,
            exited: false,
        });
        st.status = Status::Starting;
        st.shutdown_answered = false;
        st.failure = None;
        let (core, actions) = Core::new(self.opts.clone(), self.host.clone(), self.now());
        st.core = Some(core);
        self.apply(st, actions);
        self.log(&format!("started the plugin (pid {pid})"));
        Ok(())
    }

    fn read_loop(
        self: Arc<Self>,
        generation: u64,
        mut stdout: std::process::ChildStdout,
        mut child: std::process::Child,
    ) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match stdout.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let mut st = lock(&self.state);
            if st.generation != generation {
                break;
            }
            let now = self.now();
            let actions = match st.core.as_mut() {
                Some(core) => core.on_bytes(&buf[..n], now),
                None => break,
            };
            self.apply(&mut st, actions);
        }
        drop(stdout);
        let status = match child.wait() {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(c), _) => format!("exited with status {c}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => "exited".to_owned(),
            },
            Err(e) => format!("could not be waited for: {e}"),
        };
        {
            let mut st = lock(&self.state);
            if st.generation == generation {
                if let Some(core) = &st.core {
                    if core.has_partial_frame() {
                        self.log("the plugin's output ended in the middle of a message");
                    }
                }
                if let Some(p) = st.proc.as_mut() {
                    p.exited = true;
                }
                if st.failure.is_none() {
                    st.failure = Some((format!("the plugin {status}"), false));
                }
            }
        }
        self.changed.notify_all();
        let _ = self.events.send(generation);
    }

    /// Carries out the core's actions (with the state locked).
    fn apply(&self, st: &mut State, actions: Vec<Action>) {
        let generation = st.generation;
        for a in actions {
            match a {
                Action::Send(bytes) => {
                    if let Some(p) = &st.proc {
                        let _ = p.writer.send(Some(bytes));
                    }
                }
                Action::Ready => {
                    if let Some(core) = &st.core {
                        st.catalog = core.catalog().to_vec();
                        st.runtime = core.runtime().to_owned();
                    }
                    st.status = Status::Ready;
                    self.log(&format!(
                        "ready: {} ({} commands)",
                        st.runtime,
                        st.catalog.len()
                    ));
                    self.changed.notify_all();
                }
                Action::Failed { reason, disable } => {
                    self.log(&format!("handshake failed: {reason}"));
                    st.failure = Some((reason, disable));
                    if let Some(p) = &st.proc {
                        kill_group(p.pid);
                    }
                }
                Action::Unhealthy(reason) => {
                    self.log(&format!("unhealthy: {reason}; restarting it"));
                    st.failure = Some((format!("unhealthy: {reason}"), false));
                    if let Some(p) = &st.proc {
                        kill_group(p.pid);
                    }
                }
                Action::Reply { call, outcome } => {
                    if let Some(tx) = st.calls.remove(&(generation, call)) {
                        let _ = tx.send(CallMsg::Done(outcome));
                    }
                }
                Action::Note { call, text } => {
                    if let Some(tx) = st.calls.get(&(generation, call)) {
                        let _ = tx.send(CallMsg::Note(text));
                    }
                }
                Action::Log(line) => self.log(&line),
                Action::ShutdownAnswered => {
                    st.shutdown_answered = true;
                    self.changed.notify_all();
                }
            }
        }
    }

    fn supervise(self: Arc<Self>) {
        loop {
            let exited = self.event_rx.recv_timeout(Duration::from_millis(50)).ok();
            let mut st = lock(&self.state);
            if let Some(generation) = exited {
                if generation == st.generation && st.status != Status::Stopping {
                    self.on_exit(&mut st);
                }
            }
            match st.status.clone() {
                Status::Stopping if st.proc.as_ref().is_none_or(|p| p.exited) => {
                    st.supervisor_done = true;
                    self.changed.notify_all();
                    return;
                }
                Status::Backoff { until } if self.now() >= until => {
                    if let Err(e) = self.spawn(&mut st) {
                        self.log(&e);
                        st.failure = Some((e, false));
                        self.on_exit(&mut st);
                    }
                }
                Status::Starting | Status::Ready => {
                    let now = self.now();
                    if let Some(core) = st.core.as_mut() {
                        let actions = core.tick(now);
                        self.apply(&mut st, actions);
                    }
                }
                _ => {}
            }
        }
    }

    /// The current process is gone: fail its calls, then restart or disable.
    fn on_exit(self: &Arc<Self>, st: &mut State) {
        let (reason, disable) = st
            .failure
            .take()
            .unwrap_or_else(|| ("the plugin exited".into(), false));
        let generation = st.generation;
        let lost: Vec<_> = st
            .calls
            .keys()
            .filter(|(g, _)| *g == generation)
            .copied()
            .collect();
        for key in lost {
            if let Some(tx) = st.calls.remove(&key) {
                let _ = tx.send(CallMsg::Lost(reason.clone()));
            }
        }
        if let Some(p) = st.proc.take() {
            let _ = p.writer.send(None);
            if !p.exited {
                kill_group(p.pid);
            }
        }
        st.core = None;
        st.last_failure = reason.clone();
        let now = self.now();
        st.status = if disable {
            Status::Disabled(reason.clone())
        } else {
            match st.policy.on_failure(now, &reason) {
                Decision::RestartAfter(ms) => {
                    self.log(&format!("{reason}; restarting it in {ms} ms"));
                    Status::Backoff { until: now + ms }
                }
                Decision::Disable(r) => Status::Disabled(r),
            }
        };
        if let Status::Disabled(r) = &st.status {
            self.log(&format!("disabled: {r}"));
        }
        self.changed.notify_all();
    }

    /// Runs one session: a command line becomes a call, its answer the session's output.
    pub fn session(&self, s: &mut ngw::Session) -> i32 {
        let command = s.command.clone();
        let argv = s.args_lossy();
        let tool = {
            let st = lock(&self.state);
            match st.catalog.iter().find(|t| t.name == command) {
                Some(t) => t.clone(),
                None => {
                    return fail(
                        s,
                        &format!("{command}: not offered by the plugin"),
                        exit::NOT_FOUND,
                    )
                }
            }
        };
        let parsed = match args::parse(&tool.input_schema, &argv) {
            Ok(p) => p,
            Err(e) => return fail(s, &format!("{command}: {e}"), exit::USAGE),
        };
        let (mut args, from_stdin) = match parsed {
            Parsed::Help => {
                let text = args::help(&command, &tool.description, &tool.input_schema);
                let _ = s.stdout().write_all(text.as_bytes());
                return 0;
            }
            Parsed::Call { args, stdin } => (args, stdin),
        };
        if from_stdin || (argv.is_empty() && s.is_tty(0) == Some(false)) {
            match self.read_stdin_object(s) {
                Ok(mut base) => {
                    base.extend(args);
                    args = base;
                }
                Err(e) => return fail(s, &format!("{command}: {e}"), exit::USAGE),
            }
        }
        if let Err(e) = args::check_required(&tool.input_schema, &args) {
            return fail(s, &format!("{command}: {e}"), exit::USAGE);
        }
        self.call(s, &command, &args)
    }

    /// Reports a plugin failure seen by this session to ngd (`notices`): a restart, or the
    /// disabling, whose reason `ngd status` then shows (and with which ngd refuses the
    /// calls that follow). Returns the reason when the plugin is disabled.
    fn notice_failure(&self, s: &ngw::Session, why: &str) -> Option<String> {
        let mut st = lock(&self.state);
        match &st.status {
            Status::Disabled(r) => {
                let r = r.clone();
                let first = !st.disabled_noticed;
                st.disabled_noticed = true;
                drop(st);
                if first {
                    s.notice(NoticeKind::Disabled, &r);
                }
                Some(r)
            }
            _ => {
                drop(st);
                s.notice(NoticeKind::Restart, &format!("{why}; restarting it"));
                None
            }
        }
    }

    fn read_stdin_object(&self, s: &mut ngw::Session) -> Result<Map<String, Value>, String> {
        let cap = self.opts.max_frame_bytes;
        let mut data = Vec::new();
        s.stdin()
            .take(cap as u64 + 1)
            .read_to_end(&mut data)
            .map_err(|e| format!("reading stdin: {e}"))?;
        if data.len() > cap {
            return Err(format!("the arguments on stdin are over {cap} bytes"));
        }
        if data.iter().all(u8::is_ascii_whitespace) {
            return Ok(Map::new());
        }
        match serde_json::from_slice::<Value>(&data) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(_) => Err("stdin: expected a JSON object".into()),
            Err(e) => Err(format!("stdin: not JSON: {e}")),
        }
    }

    fn call(&self, s: &mut ngw::Session, command: &str, args: &Map<String, Value>) -> i32 {
        let (tx, rx) = crossbeam_channel::unbounded();
        // Decided under the lock; reported after it is released (writing to the client
        // may block on ngd's flow control).
        let started = {
            let mut st = lock(&self.state);
            loop {
                match &st.status {
                    Status::Ready => {}
                    Status::Disabled(r) => {
                        let r = r.clone();
                        let notice = (!st.disabled_noticed).then(|| r.clone());
                        st.disabled_noticed = true;
                        break Err((
                            format!("{command}: the plugin is disabled: {r}{REVIVE}"),
                            exit::DISABLED,
                            notice,
                        ));
                    }
                    Status::Stopping => {
                        break Err((
                            format!("{command}: the plugin is stopping; retry"),
                            exit::UNAVAILABLE,
                            None,
                        ))
                    }
                    Status::Starting | Status::Backoff { .. } => {
                        if s.hung_up() {
                            break Err((String::new(), 129, None));
                        }
                        st = self.wait(st, Duration::from_millis(100));
                        continue;
                    }
                }
                let now = self.now();
                let Some(core) = st.core.as_mut() else {
                    st = self.wait(st, Duration::from_millis(100));
                    continue;
                };
                match core.start_call(command, args, now) {
                    Ok((id, actions)) => {
                        let generation = st.generation;
                        st.calls.insert((generation, id), tx);
                        self.apply(&mut st, actions);
                        break Ok((generation, id));
                    }
                    Err(CallError::NotReady) => {
                        st = self.wait(st, Duration::from_millis(100));
                    }
                    Err(e @ CallError::UnknownTool(_)) => {
                        break Err((format!("{command}: {e}"), exit::NOT_FOUND, None))
                    }
                    Err(e @ CallError::TooLarge { .. }) => {
                        break Err((format!("{command}: {e}"), exit::USAGE, None))
                    }
                }
            }
        };
        let (generation, id) = match started {
            Ok(call) => call,
            Err((message, code, notice)) => {
                if let Some(reason) = notice {
                    s.notice(NoticeKind::Disabled, &reason);
                }
                if message.is_empty() {
                    return code;
                }
                return fail(s, &message, code);
            }
        };
        let mut err = s.stderr();
        loop {
            select! {
                recv(rx) -> msg => match msg {
                    Ok(CallMsg::Note(text)) => {
                        let _ = writeln!(err, "{command}: {text}");
                    }
                    Ok(CallMsg::Done(Outcome::Result(raw))) => {
                        let r = profile::render_result(self.opts.profile, command, raw.get());
                        let _ = s.stdout().write_all(&r.stdout);
                        let _ = err.write_all(&r.stderr);
                        return r.code;
                    }
                    Ok(CallMsg::Done(Outcome::Error(e))) => {
                        let r = profile::render_error(command, &e);
                        let _ = err.write_all(&r.stderr);
                        return r.code;
                    }
                    Ok(CallMsg::Done(Outcome::Lost(why))) => {
                        return fail(s, &format!("{command}: {why}"), exit::FAILED);
                    }
                    Ok(CallMsg::Lost(why)) => {
                        if let Some(r) = self.notice_failure(s, &why) {
                            return fail(
                                s,
                                &format!("{command}: {why} during the call; the plugin is disabled: {r}{REVIVE}"),
                                exit::DISABLED,
                            );
                        }
                        return fail(
                            s,
                            &format!("{command}: {why} during the call; it is being restarted: retry"),
                            exit::UNAVAILABLE,
                        );
                    }
                    Err(_) => {
                        let why = "the plugin went away";
                        return fail(
                            s,
                            &format!("{command}: {why} during the call; it is being restarted: retry"),
                            exit::UNAVAILABLE,
                        );
                    }
                },
                recv(s.interrupts()) -> i => {
                    let (reason, code) = match i {
                        Ok(ngw::Interrupt::Hangup) | Err(_) => ("the client went away".to_owned(), 129),
                        Ok(ngw::Interrupt::WindowSize(_)) => continue,
                        Ok(ngw::Interrupt::Signal(sig) | ngw::Interrupt::ProcessSignal(sig)) => match sig.signal() {
                            Some(Signal::Int) => (sig.to_string(), 130),
                            Some(Signal::Term) => (sig.to_string(), 143),
                            Some(Signal::Hup) => (sig.to_string(), 129),
                            Some(Signal::Quit) => (sig.to_string(), 131),
                            _ => continue,
                        },
                    };
                    let mut st = lock(&self.state);
                    st.calls.remove(&(generation, id));
                    if st.generation == generation {
                        if let Some(core) = st.core.as_mut() {
                            let actions = core.cancel(id, &reason);
                            self.apply(&mut st, actions);
                        }
                    }
                    drop(st);
                    let _ = writeln!(err, "{command}: cancelled ({reason})");
                    return code;
                }
            }
        }
    }

    /// Stops the plugin: `shutdown` (nexo, StreamNook) → `exit` (StreamNook) or closing
    /// stdin → kill after `stop_timeout_ms` each; waits until the process is gone.
    pub fn stop(&self) {
        let grace = Duration::from_millis(self.opts.stop_timeout_ms);
        let mut st = lock(&self.state);
        st.status = Status::Stopping;
        self.changed.notify_all();
        if st.proc.as_ref().is_none_or(|p| p.exited) {
            drop(st);
            self.wait_supervisor();
            return;
        }
        if let Some(core) = st.core.as_mut() {
            let actions = core.shutdown();
            self.apply(&mut st, actions);
        }
        let deadline = Instant::now() + grace;
        while !st.shutdown_answered && !st.proc.as_ref().is_none_or(|p| p.exited) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.log("no answer to `shutdown`; going on");
                break;
            }
            st = self.wait(st, left.min(Duration::from_millis(100)));
        }
        if let Some(core) = st.core.as_mut() {
            let actions = core.exit();
            self.apply(&mut st, actions);
        }
        if let Some(p) = &st.proc {
            let _ = p.writer.send(None);
        }
        let deadline = Instant::now() + grace;
        while !st.proc.as_ref().is_none_or(|p| p.exited) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                if let Some(p) = &st.proc {
                    self.log(&format!(
                        "still running {} ms after exit; killing it",
                        grace.as_millis()
                    ));
                    kill_group(p.pid);
                }
                break;
            }
            st = self.wait(st, left.min(Duration::from_millis(100)));
        }
        // The process group may hold children of the plugin's.
        if let Some(p) = &st.proc {
            kill_group(p.pid);
        }
        drop(st);
        self.wait_supervisor();
    }

    fn wait_supervisor(&self) {
        let mut st = lock(&self.state);
        while st.supervisor_started && !st.supervisor_done {
            st = self.wait(st, Duration::from_millis(100));
        }
    }
}

/// Said after a disabled plugin's reason.
const REVIVE: &str = "; `ngd reload` starts it again";

fn fail(s: &ngw::Session, message: &str, code: i32) -> i32 {
    let _ = writeln!(s.stderr(), "{message}");
    code
}

fn kill_group(pid: i32) {
    // Our own child's process group.
    if let Ok(pid) = u32::try_from(pid) {
        ng_sys::signal::kill_group(pid, libc::SIGKILL);
    }
}
