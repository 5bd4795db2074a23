//! The session driver of a protocol run: the plugin's stdout, its exit, the answers of
//! requests and the session's interrupts become [`Event`]s for [`Host`], and the
//! [`Effect`]s it returns are carried out ([`Performer`]).
//!
//! [`Run::drive`] is the loop: until the host says the run is finished, wait for what
//! wakes it ([`Wake`]), hand that to the host, perform the effects.

use super::pipes::{read_lines, PluginStderr};
use super::process::{wait_exit_code, ProcessGroup};
use super::prompt::{choose_ui, Asker};
use crate::context::{self, Client};
use crate::discover::{Options, Resolved};
use crate::protocol::{self, Effect, Event, Host, Init, Settings};
use crate::store;
use crate::streams::{Sink, Streams};
use crate::ui::ProgressView;
use crate::{exec, sys};
use crossbeam_channel::{bounded, never, unbounded, Receiver, RecvError, Sender};
use serde_json::Value;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the loop waits when the host has no deadline.
const NO_DEADLINE: Duration = Duration::from_secs(3600);

/// One protocol run.
pub(super) struct Run<'a> {
    session: &'a mut ngw::Session,
    streams: &'a mut Streams,
    resolved: &'a Resolved,
    colour: bool,
    options: &'a Options,
}

/// The plugin's stdin.
enum PluginStdin {
    /// Open: the host writes to it.
    Open(ChildStdin),
    /// Closed by the host, or after a failed write.
    Closed,
}

impl PluginStdin {
    fn write(&mut self, bytes: &[u8]) {
        if let PluginStdin::Open(w) = self {
            if w.write_all(bytes).and_then(|_| w.flush()).is_err() {
                *self = PluginStdin::Closed;
            }
        }
    }
}

/// The plugin's stdout lines, while the host reads them.
enum Lines {
    /// Read, and handed over when the host wants a line.
    Reading(Receiver<Event>),
    /// The host stopped reading: the receiver is dropped, which ends the reader, so a
    /// plugin writing more gets `EPIPE`.
    Dropped,
}

/// What woke the run.
#[derive(Debug, PartialEq)]
enum Wake {
    /// Something for the host.
    Event(Event),
    /// The host's next deadline passed.
    Deadline,
    /// Nothing the host needs (a closed channel, an interrupt that is not giving up).
    Nothing,
}

/// The plugin process as the run sees it, once attached.
struct Attached {
    stdin: PluginStdin,
    lines: Receiver<Event>,
    exit: Receiver<Event>,
    group: ProcessGroup,
    stderr: Option<Arc<PluginStderr>>,
    /// The thread copying its stderr to the client.
    stderr_copy: Option<JoinHandle<()>>,
}

/// Takes `child`'s pipes: its stdout read as lines by a thread, its stderr copied by
/// another (and drained by the run before a line of its own, so that what the plugin
/// wrote to stderr before a message comes out before what the host prints for that
/// message, as on a shared terminal), its exit reported by a waiter that reaps it by pid
/// (the `Child` handle is never waited on).
fn attach(child: &mut Child, err: &Sink) -> Attached {
    let (line_tx, lines) = bounded::<Event>(16);
    match child.stdout.take() {
        Some(o) => {
            std::thread::spawn(move || read_lines(o, line_tx));
        }
        None => {
            let _ = line_tx.send(Event::Eof);
        }
    }
    let stderr = child.stderr.take().map(|e| Arc::new(PluginStderr::new(e)));
    let stderr_copy = stderr.clone().map(|p| {
        let mut to = err.clone();
        std::thread::spawn(move || p.copy_until_eof(&mut to))
    });
    let (exit_tx, exit) = bounded::<Event>(1);
    let pid = child.id() as sys::Pid;
    std::thread::spawn(move || {
        let _ = exit_tx.send(Event::Exited(wait_exit_code(pid)));
    });
    Attached {
        stdin: child
            .stdin
            .take()
            .map_or(PluginStdin::Closed, PluginStdin::Open),
        lines,
        exit,
        group: ProcessGroup::of(child),
        stderr,
        stderr_copy,
    }
}

/// The event an interrupt ngd forwarded is for the host: a resize, a stop, a continue and
/// a signal that does nothing by default are not the user giving up.
fn interrupt_event(interrupt: Result<ngw::Interrupt, RecvError>) -> Option<Event> {
    match interrupt {
        Ok(ngw::Interrupt::WindowSize(_)) | Err(_) => None,
        Ok(ngw::Interrupt::Signal(name) | ngw::Interrupt::ProcessSignal(name))
            if name
                .signal()
                .is_some_and(|s| ngw_vocab::Effect::of(s).is_harmless()) =>
        {
            None
        }
        Ok(_) => Some(Event::Interrupt),
    }
}

/// Where the run's events come from.
struct Inbox {
    lines: Lines,
    /// Answers of requests (questions, `load`, `exec`, `metadata`).
    done: Receiver<Event>,
    exit: Receiver<Event>,
}

impl Inbox {
    /// Waits for what wakes the run: a line only when `host` wants one, an answer, the
    /// exit, an interrupt, or the host's deadline.
    fn wait(&self, host: &Host, interrupts: &Receiver<ngw::Interrupt>) -> Wake {
        let idle = never();
        let lines = match &self.lines {
            Lines::Reading(rx) if host.wants_line() => rx,
            _ => &idle,
        };
        let timeout = host
            .next_deadline()
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(NO_DEADLINE);
        let event = |e: Result<Event, RecvError>| e.map_or(Wake::Nothing, Wake::Event);
        crossbeam_channel::select! {
            recv(lines) -> e => Wake::Event(e.unwrap_or(Event::Eof)),
            recv(self.done) -> e => event(e),
            recv(self.exit) -> e => event(e),
            recv(interrupts) -> i => interrupt_event(i).map_or(Wake::Nothing, Wake::Event),
            default(timeout) => Wake::Deadline,
        }
    }
}

impl<'a> Run<'a> {
    pub fn new(
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

    /// Runs the plugin process `child` from `init` to the end; the run's exit code.
    pub fn drive(mut self, child: &mut Child, init: &Init) -> i32 {
        let plugin = attach(child, &self.streams.err);
        let (done_tx, done) = unbounded::<Event>();
        let mut host = Host::new(self.settings());
        let mut fx = self.performer(plugin.stdin, plugin.group, plugin.stderr, done_tx);
        fx.stdin.write(&protocol::init_line(init));
        let mut inbox = Inbox {
            lines: Lines::Reading(plugin.lines),
            done,
            exit: plugin.exit,
        };
        loop {
            if let Some(code) = host.finished() {
                fx.stdin = PluginStdin::Closed;
                if let Some(t) = plugin.stderr_copy {
                    let _ = t.join();
                }
                return code;
            }
            if host.stopped_reading() {
                inbox.lines = Lines::Dropped;
            }
            let effects = match inbox.wait(&host, self.session.interrupts()) {
                Wake::Event(e) => host.handle(e, Instant::now()),
                Wake::Deadline => host.tick(Instant::now()),
                Wake::Nothing => continue,
            };
            fx.perform(effects);
        }
    }

    fn settings(&self) -> Settings {
        Settings {
            plugin_name: self.resolved.plugin_name.clone(),
            capabilities: self.resolved.capabilities.clone(),
            colour: self.colour,
            prompt_timeout: self.options.prompt_timeout,
        }
    }

    /// What carries out the host's effects for this run.
    fn performer(
        &mut self,
        stdin: PluginStdin,
        group: ProcessGroup,
        plugin_err: Option<Arc<PluginStderr>>,
        done: Sender<Event>,
    ) -> Performer {
        let progress = if self.streams.tty[2] {
            ProgressView::on_output(self.streams.err.clone(), self.streams.width, self.colour)
        } else {
            ProgressView::hidden()
        };
        let ui = choose_ui(self.session, self.streams);
        let abort_ui = ui.aborter();
        Performer {
            stdin,
            group,
            plugin_err,
            out: self.streams.out.clone(),
            err: self.streams.err.clone(),
            progress,
            asker: Asker::Idle(ui, done.clone()),
            abort_ui,
            work: Work {
                stop: Arc::new(AtomicBool::new(false)),
                done,
                env: self.session.env.clone(),
                cwd: self.session.cwd.clone(),
                plugin_dir: self.resolved.dir.clone(),
            },
            plugin_name: self.resolved.plugin_name.clone(),
            colour: self.colour,
        }
    }
}

/// Carries out the host's effects. Fields drop in order: requests in flight and the
/// asking thread go before the progress display is cleared.
struct Performer {
    work: Work,
    asker: Asker,
    abort_ui: Arc<dyn Fn() + Send + Sync>,
    progress: ProgressView,
    stdin: PluginStdin,
    group: ProcessGroup,
    plugin_err: Option<Arc<PluginStderr>>,
    out: Sink,
    err: Sink,
    plugin_name: String,
    colour: bool,
}

impl Performer {
    fn perform(&mut self, effects: Vec<Effect>) {
        for e in effects {
            self.apply(e);
        }
    }

    fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::ToPlugin(bytes) => self.stdin.write(&bytes),
            Effect::Stdout(text) => {
                let _ = self.out.write_all(text.as_bytes());
            }
            Effect::Stderr(text) => self.stderr_line(&text),
            Effect::Progress(p) => self.progress.show(&p),
            Effect::Ask { id, question } => self.asker.ask(id, question),
            Effect::Store { key, value } => self.store(&key, &value),
            Effect::Load { id, key } => self.load(id, &key),
            Effect::Exec {
                id,
                command,
                cwd,
                timeout_secs,
            } => self.work.exec(id, command, cwd, timeout_secs),
            Effect::Metadata { id, keys } => self.work.metadata(id, keys),
            Effect::Abandon => {
                (self.abort_ui)();
                self.work.stop.store(true, Ordering::SeqCst);
            }
            Effect::CloseStdin => self.stdin = PluginStdin::Closed,
            Effect::Terminate => self.group.signal(libc::SIGTERM),
            Effect::Kill => self.group.signal(libc::SIGKILL),
        }
    }

    /// A line of the host's on the client's stderr, after what the plugin wrote there.
    fn stderr_line(&mut self, text: &str) {
        if let Some(p) = &self.plugin_err {
            p.drain(&mut self.err);
        }
        let _ = self.err.write_all(text.as_bytes());
    }

    fn store(&mut self, key: &str, value: &str) {
        if let Err(e) = store::store(&self.work.plugin_dir, key, value) {
            let host_line = format!(
                "  {} [{}] store rejected: {e}\n",
                console::style("⚠️").yellow().force_styling(self.colour),
                self.plugin_name
            );
            let _ = self.err.write_all(host_line.as_bytes());
        }
    }

    fn load(&mut self, id: String, key: &str) {
        let value = match store::load(&self.work.plugin_dir, key) {
            Ok(v) => v.map(Value::String).unwrap_or(Value::Null),
            Err(e) => {
                let _ = writeln!(self.err, "  ⚠ {}: load failed: {e}", self.plugin_name);
                Value::Null
            }
        };
        let _ = self.work.done.send(Event::Done {
            id,
            result: Ok(value),
        });
    }
}

/// Requests served on threads of their own (`exec`, `metadata`), answered on `done`.
struct Work {
    /// Set to end a running `exec` early (the request was abandoned).
    stop: Arc<AtomicBool>,
    done: Sender<Event>,
    /// The client's environment and working directory.
    env: Vec<(OsString, OsString)>,
    cwd: PathBuf,
    plugin_dir: PathBuf,
}

impl Work {
    fn exec(&self, id: String, command: String, dir: Option<String>, timeout_secs: u64) {
        self.stop.store(false, Ordering::SeqCst);
        let done = self.done.clone();
        let stop = self.stop.clone();
        let env = self.env.clone();
        let root = self.cwd.clone();
        let plugin_dir = self.plugin_dir.clone();
        std::thread::spawn(move || {
            let r = match exec::work_dir(&root, &plugin_dir, dir.as_deref()) {
                Ok(wd) => exec::run(
                    &command,
                    &wd,
                    &env,
                    Duration::from_secs(timeout_secs),
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

    fn metadata(&self, id: String, keys: Vec<String>) {
        let done = self.done.clone();
        let env = self.env.clone();
        let cwd = self.cwd.clone();
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use ngw::Interrupt;

    fn host() -> Host {
        Host::new(Settings {
            plugin_name: "p".into(),
            capabilities: Default::default(),
            colour: false,
            prompt_timeout: Duration::from_secs(1),
        })
    }

    fn name(name: &str) -> ngw::SignalName {
        ngw::SignalName::new(name.as_bytes()).unwrap()
    }

    fn signal(n: &str) -> Result<Interrupt, RecvError> {
        Ok(Interrupt::Signal(name(n)))
    }

    #[test]
    fn only_giving_up_interrupts_the_run() {
        for quiet in ["SIGWINCH", "SIGTSTP", "SIGTTIN", "SIGCONT", "SIGCHLD"] {
            assert_eq!(interrupt_event(signal(quiet)), None, "{quiet}");
            assert_eq!(
                interrupt_event(Ok(Interrupt::ProcessSignal(name(quiet)))),
                None
            );
        }
        assert_eq!(interrupt_event(Err(RecvError)), None);
        for giving_up in [
            signal("SIGINT"),
            signal("SIGTERM"),
            Ok(Interrupt::ProcessSignal(name("SIGINT"))),
            Ok(Interrupt::Hangup),
        ] {
            assert_eq!(interrupt_event(giving_up), Some(Event::Interrupt));
        }
    }

    #[test]
    fn a_failed_write_closes_the_plugin_stdin() {
        let mut child = std::process::Command::new("true")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = PluginStdin::Open(child.stdin.take().unwrap());
        child.wait().unwrap();
        stdin.write(&[b'x'; 1 << 17]);
        assert!(matches!(stdin, PluginStdin::Closed));
    }

    #[test]
    fn a_host_without_deadline_wakes_on_its_inbox() {
        let (tx, done) = unbounded();
        let (_exit_tx, exit) = bounded(1);
        let (_lines_tx, lines) = bounded(1);
        let (_int_tx, interrupts) = unbounded();
        let inbox = Inbox {
            lines: Lines::Reading(lines),
            done,
            exit,
        };
        let host = host();
        tx.send(Event::Eof).unwrap();
        assert_eq!(inbox.wait(&host, &interrupts), Wake::Event(Event::Eof));
        drop(tx);
        assert_eq!(inbox.wait(&host, &interrupts), Wake::Nothing);
    }

    #[test]
    fn with_lines_dropped_the_exit_still_wakes_the_run() {
        let (tx, done) = unbounded();
        let (_exit_tx, exit) = bounded(1);
        let (_int_tx, interrupts) = unbounded();
        let inbox = Inbox {
            lines: Lines::Dropped,
            done,
            exit,
        };
        tx.send(Event::Exited(0)).unwrap();
        assert_eq!(
            inbox.wait(&host(), &interrupts),
            Wake::Event(Event::Exited(0))
        );
    }
}
