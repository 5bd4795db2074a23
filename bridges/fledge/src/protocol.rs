//! The fledge-v1 host as a sans-I/O state machine.
//!
//! [`Host`] takes what happens (a line from the plugin's stdout, a finished request, an
//! interrupt, the passing of time, the plugin's exit) and returns [`Effect`]s for the I/O
//! shell to perform: bytes for the plugin's stdin, text for the client's stdout and stderr,
//! questions for the UI, storage and exec work, signals. It holds no sockets, processes or
//! clocks; time is passed in.
//!
//! It follows the real fledge 1.8.0 host where it and the seed text differ: messages are
//! handled one at a time in order (a request is answered before the next line is read),
//! unknown types and requests without an `id` are reported as "malformed JSON, skipping",
//! denied capabilities answer as fledge's do. Where fledge has no behaviour (it never sends
//! `cancel`), the seed text is followed: Ctrl-C or an unanswered prompt sends one `cancel`
//! that answers every request in flight, then SIGTERM 5 s later and SIGKILL 10 s later.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The protocol name a plugin declares in `plugin.toml` and the host sends in `init`.
pub const PROTOCOL: &str = "fledge-v1";
/// The longest line read from a plugin; a longer one is skipped as malformed.
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// After a `cancel`, how long before the plugin's process group gets SIGTERM.
pub const TERM_AFTER: Duration = Duration::from_secs(5);
/// After a `cancel`, how long before the plugin's process group gets SIGKILL.
pub const KILL_AFTER: Duration = Duration::from_secs(10);
/// The default and the largest `exec` timeout, in seconds (fledge's values).
pub const EXEC_TIMEOUT_DEFAULT: u64 = 30;
/// See [`EXEC_TIMEOUT_DEFAULT`].
pub const EXEC_TIMEOUT_MAX: u64 = 300;

/// A message the plugin writes, exactly as fledge 1.8.0 accepts it (fields it requires are
/// required here; unknown fields are ignored).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Outbound {
    /// Ask for text.
    Prompt {
        /// Request id.
        id: String,
        /// The question.
        message: String,
        /// The pre-filled answer.
        #[serde(default)]
        default: Option<String>,
        /// A built-in validator name.
        #[serde(default)]
        validate: Option<String>,
    },
    /// Ask yes or no.
    Confirm {
        /// Request id.
        id: String,
        /// The question.
        message: String,
        /// The answer on Enter (false when absent).
        #[serde(default)]
        default: Option<bool>,
    },
    /// Choose one option.
    Select {
        /// Request id.
        id: String,
        /// The question.
        message: String,
        /// The choices.
        options: Vec<String>,
        /// Index of the default choice.
        #[serde(default)]
        default: Option<usize>,
    },
    /// Choose any number of options.
    MultiSelect {
        /// Request id.
        id: String,
        /// The question.
        message: String,
        /// The choices.
        options: Vec<String>,
        /// Indices chosen in advance.
        #[serde(default)]
        defaults: Option<Vec<usize>>,
    },
    /// Show or clear progress.
    Progress {
        /// What is happening.
        #[serde(default)]
        message: Option<String>,
        /// Position.
        #[serde(default)]
        current: Option<u64>,
        /// Length; with `current`, a bar, otherwise a spinner.
        #[serde(default)]
        total: Option<u64>,
        /// Clears the display.
        #[serde(default)]
        done: Option<bool>,
    },
    /// A log line.
    Log {
        /// `debug`, `info`, `warn`, `error` (anything else is shown dimmed).
        level: String,
        /// The text.
        message: String,
    },
    /// Text for stdout, verbatim.
    Output {
        /// The text.
        text: String,
    },
    /// Keep a value.
    Store {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Read a value back.
    Load {
        /// Request id.
        id: String,
        /// The key.
        key: String,
    },
    /// Run a shell command.
    Exec {
        /// Request id.
        id: String,
        /// The command for `sh -c`.
        command: String,
        /// Directory relative to the project root.
        #[serde(default)]
        cwd: Option<String>,
        /// Seconds before the command's process group is killed.
        #[serde(default)]
        timeout: Option<u64>,
    },
    /// Ask for project metadata.
    Metadata {
        /// Request id.
        id: String,
        /// The keys wanted.
        keys: Vec<String>,
    },
}

impl Outbound {
    /// Parses one line; `None` for anything fledge would skip as malformed.
    pub fn parse(line: &[u8]) -> Option<Self> {
        serde_json::from_slice(line).ok()
    }
}

/// Capabilities granted to a plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// `exec` requests run.
    #[serde(default)]
    pub exec: bool,
    /// `store`/`load` reach `state.json`.
    #[serde(default)]
    pub store: bool,
    /// `metadata` requests are answered.
    #[serde(default)]
    pub metadata: bool,
    /// Declared filesystem scope (reported in `init` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<String>,
    /// Declared network use (reported in `init` only when true).
    #[serde(default, skip_serializing_if = "is_false")]
    pub network: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The `init` message, with fledge's field order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Init {
    #[serde(rename = "type")]
    ty: &'static str,
    protocol: &'static str,
    /// Arguments after the command name.
    pub args: Vec<String>,
    /// The project, detected from the client's working directory.
    pub project: Option<Project>,
    /// The plugin's own metadata.
    pub plugin: PluginInfo,
    /// The host's version.
    pub fledge: HostInfo,
    /// Granted capabilities.
    pub capabilities: Capabilities,
}

impl Init {
    /// An `init` message.
    pub fn new(
        args: Vec<String>,
        project: Option<Project>,
        plugin: PluginInfo,
        host_version: String,
        capabilities: Capabilities,
    ) -> Self {
        Self {
            ty: "init",
            protocol: PROTOCOL,
            args,
            project,
            plugin,
            fledge: HostInfo {
                version: host_version,
            },
            capabilities,
        }
    }
}

/// `init.project`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Project {
    /// The directory's name.
    pub name: String,
    /// The client's working directory.
    pub root: String,
    /// `rust`, `node`, ..., `generic`.
    pub language: String,
    /// Git state, when the directory is in a repository.
    pub git: Option<Git>,
}

/// `init.project.git`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Git {
    /// `git rev-parse --abbrev-ref HEAD`.
    pub branch: String,
    /// Whether `git status --porcelain` printed anything.
    pub dirty: bool,
    /// The first remote (`origin` when none).
    pub remote: String,
    /// Its URL without credentials (empty when none).
    pub remote_url: String,
}

/// `init.plugin`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginInfo {
    /// `[plugin] name`.
    pub name: String,
    /// `[plugin] version`.
    pub version: String,
    /// The plugin's directory.
    pub dir: String,
}

/// `init.fledge`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostInfo {
    /// The version announced.
    pub version: String,
}

/// The result of an `exec`, in the field order fledge's answer has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecResult {
    /// Exit code (1 when killed by a signal, 124 on timeout, 126 when denied).
    pub code: i32,
    /// Captured stderr (lossy UTF-8).
    pub stderr: String,
    /// Captured stdout (lossy UTF-8).
    pub stdout: String,
}

#[derive(Serialize)]
struct Response<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    id: &'a str,
    value: &'a Value,
}

/// Why a `cancel` is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// Ctrl-C, or the client went away.
    UserInterrupt,
    /// A prompt stayed unanswered too long.
    Timeout,
}

impl CancelReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UserInterrupt => "user_interrupt",
            Self::Timeout => "timeout",
        }
    }
}

/// A line for the plugin's stdin: a `response`.
pub fn response_line(id: &str, value: &Value) -> Vec<u8> {
    let mut v = serde_json::to_vec(&Response {
        ty: "response",
        id,
        value,
    })
    .unwrap_or_default();
    v.push(b'\n');
    v
}

/// A line for the plugin's stdin: a `cancel`.
pub fn cancel_line(reason: CancelReason) -> Vec<u8> {
    format!(
        "{{\"type\":\"cancel\",\"reason\":\"{}\"}}\n",
        reason.as_str()
    )
    .into_bytes()
}

/// A line for the plugin's stdin: the `init`.
pub fn init_line(init: &Init) -> Vec<u8> {
    let mut v = serde_json::to_vec(init).unwrap_or_default();
    v.push(b'\n');
    v
}

/// A question for the user.
#[derive(Debug, Clone, PartialEq)]
pub enum Question {
    /// Text, with an optional default and validator.
    Prompt {
        /// The question.
        message: String,
        /// The answer on empty input.
        default: Option<String>,
        /// The validator.
        validate: Option<Validator>,
    },
    /// Yes or no.
    Confirm {
        /// The question.
        message: String,
        /// The answer on empty input.
        default: bool,
    },
    /// One of `options`.
    Select {
        /// The question.
        message: String,
        /// The choices.
        options: Vec<String>,
        /// Index of the default.
        default: Option<usize>,
    },
    /// Any of `options`.
    MultiSelect {
        /// The question.
        message: String,
        /// The choices.
        options: Vec<String>,
        /// Indices chosen in advance.
        defaults: Vec<usize>,
    },
}

impl Question {
    /// The question's text.
    pub fn message(&self) -> &str {
        match self {
            Self::Prompt { message, .. }
            | Self::Confirm { message, .. }
            | Self::Select { message, .. }
            | Self::MultiSelect { message, .. } => message,
        }
    }
}

/// A built-in `prompt` validator (fledge ignores unknown names, and so does this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validator {
    /// Not only whitespace.
    NonEmpty,
    /// Parses as a 64-bit integer.
    Integer,
    /// Names an existing path (relative to the client's directory).
    PathExists,
    /// Starts with `http://` or `https://`.
    Url,
}

impl Validator {
    /// The validator named `name`, if fledge knows it.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "non_empty" => Some(Self::NonEmpty),
            "integer" => Some(Self::Integer),
            "path_exists" => Some(Self::PathExists),
            "url" => Some(Self::Url),
            _ => None,
        }
    }

    /// Checks `input`; `exists` answers whether a path exists. The error texts are fledge's.
    pub fn check(self, input: &str, exists: impl Fn(&str) -> bool) -> Result<(), &'static str> {
        match self {
            Self::NonEmpty if input.trim().is_empty() => Err("Input cannot be empty"),
            Self::Integer if input.parse::<i64>().is_err() => Err("Must be an integer"),
            Self::PathExists if !exists(input) => Err("Path does not exist"),
            Self::Url if !(input.starts_with("http://") || input.starts_with("https://")) => {
                Err("Must be a valid URL (http:// or https://)")
            }
            _ => Ok(()),
        }
    }
}

/// What the progress display should show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// A bar at `current` of `total`, labelled `message (plugin)`.
    Bar {
        /// The label.
        message: String,
        /// Position.
        current: u64,
        /// Length.
        total: u64,
    },
    /// A spinner labelled `message (plugin)`.
    Spinner {
        /// The label.
        message: String,
    },
    /// Nothing (the display is cleared).
    Clear,
}

/// Work the host wants done, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Bytes for the plugin's stdin.
    ToPlugin(Vec<u8>),
    /// Text for the client's stdout.
    Stdout(String),
    /// A line for the client's stderr (terminated, already styled).
    Stderr(String),
    /// Update the progress display.
    Progress(Progress),
    /// Ask the user; answer with [`Event::Done`] for `id`.
    Ask {
        /// Request id.
        id: String,
        /// The question.
        question: Question,
    },
    /// Write `key` in `state.json`.
    Store {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Read `key`; answer with [`Event::Done`].
    Load {
        /// Request id.
        id: String,
        /// The key.
        key: String,
    },
    /// Run a command; answer with [`Event::Done`].
    Exec {
        /// Request id.
        id: String,
        /// The command.
        command: String,
        /// Relative directory.
        cwd: Option<String>,
        /// Seconds, already defaulted and capped.
        timeout_secs: u64,
    },
    /// Collect metadata; answer with [`Event::Done`].
    Metadata {
        /// Request id.
        id: String,
        /// The keys.
        keys: Vec<String>,
    },
    /// Abandon the request in flight (its answer, if any, will be ignored).
    Abandon,
    /// Close the plugin's stdin (after a host error).
    CloseStdin,
    /// Send SIGTERM to the plugin's process group.
    Terminate,
    /// Send SIGKILL to the plugin's process group.
    Kill,
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A line from the plugin's stdout, without its `\n`.
    Line(Vec<u8>),
    /// A request finished: its value, or an error that ends the run (fledge's behaviour
    /// for a prompt that cannot be asked).
    Done {
        /// Request id.
        id: String,
        /// The answer.
        result: Result<Value, String>,
    },
    /// The user pressed Ctrl-C, or the client went away.
    Interrupt,
    /// The plugin's stdout reached end of file.
    Eof,
    /// The plugin exited with this exit code (128+N for signal N).
    Exited(i32),
}

/// The kinds of requests, for bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ui,
    Work,
}

/// The run's state.
#[derive(Debug, Clone, PartialEq)]
enum State {
    /// Lines are read and handled.
    Running,
    /// A request is in flight; lines wait.
    Waiting {
        id: String,
        kind: Kind,
        /// For UI requests: when it times out.
        deadline: Option<Instant>,
    },
}

/// How the run is ending.
#[derive(Debug, Clone, PartialEq)]
enum Ending {
    None,
    /// `cancel` was sent.
    Cancelled(CancelReason),
    /// The host failed (a question could not be answered): exit 1 once the plugin ends.
    Failed,
}

/// The SIGTERM/SIGKILL escalation after a cancel or a host failure.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Escalation {
    at: Instant,
    termed: bool,
    killed: bool,
}

/// Host settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The plugin's name (log prefixes).
    pub plugin_name: String,
    /// Granted capabilities.
    pub capabilities: Capabilities,
    /// Whether stderr lines carry colour.
    pub colour: bool,
    /// How long a question may stay unanswered.
    pub prompt_timeout: Duration,
}

/// The fledge-v1 host for one plugin run.
#[derive(Debug)]
pub struct Host {
    settings: Settings,
    state: State,
    ending: Ending,
    escalation: Option<Escalation>,
    eof: bool,
    exit: Option<i32>,
    progress_shown: bool,
}

impl Host {
    /// A host; the caller sends [`init_line`] first.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            state: State::Running,
            ending: Ending::None,
            escalation: None,
            eof: false,
            exit: None,
            progress_shown: false,
        }
    }

    /// Whether the shell should hand over the next line of plugin output.
    pub fn wants_line(&self) -> bool {
        self.state == State::Running && !self.eof
    }

    /// Whether the host will read no more lines (end of file, or a failed run).
    pub fn stopped_reading(&self) -> bool {
        self.eof
    }

    /// The next instant at which [`Host::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let mut next = match &self.state {
            State::Waiting {
                deadline: Some(d), ..
            } => Some(*d),
            _ => None,
        };
        if let Some(Escalation { at, termed, killed }) = self.escalation {
            let t = if !termed {
                Some(at + TERM_AFTER)
            } else if !killed {
                Some(at + KILL_AFTER)
            } else {
                None
            };
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        }
        if self.exit.is_some() {
            return None;
        }
        next
    }

    /// The run is over: the exit code for the client.
    pub fn finished(&self) -> Option<i32> {
        let code = self.exit?;
        if !self.eof {
            return None;
        }
        Some(match self.ending {
            Ending::Failed => 1,
            _ => code,
        })
    }

    /// Handles an event at `now`.
    pub fn handle(&mut self, event: Event, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        match event {
            Event::Line(line) => self.on_line(&line, now, &mut out),
            Event::Done { id, result } => self.on_done(id, result, now, &mut out),
            Event::Interrupt => self.cancel(CancelReason::UserInterrupt, now, &mut out),
            Event::Eof => {
                self.eof = true;
                self.clear_progress(&mut out);
            }
            Event::Exited(code) => {
                self.exit = Some(code);
                if matches!(self.state, State::Waiting { .. }) {
                    // Nobody is left to answer.
                    self.state = State::Running;
                    out.push(Effect::Abandon);
                }
            }
        }
        out
    }

    /// Lets time pass: prompt timeouts and the SIGTERM/SIGKILL escalation.
    pub fn tick(&mut self, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        if let State::Waiting {
            deadline: Some(d), ..
        } = &self.state
        {
            if now >= *d {
                self.cancel(CancelReason::Timeout, now, &mut out);
            }
        }
        if self.exit.is_none() {
            if let Some(Escalation { at, termed, killed }) = &mut self.escalation {
                if !*termed && now >= *at + TERM_AFTER {
                    *termed = true;
                    out.push(Effect::Terminate);
                }
                if !*killed && now >= *at + KILL_AFTER {
                    *killed = true;
                    out.push(Effect::Kill);
                }
            }
        }
        out
    }

    fn cancel(&mut self, reason: CancelReason, now: Instant, out: &mut Vec<Effect>) {
        if self.exit.is_some() {
            return;
        }
        if self.ending != Ending::None {
            return;
        }
        if matches!(self.state, State::Waiting { .. }) {
            out.push(Effect::Abandon);
            self.state = State::Running;
        }
        self.clear_progress(out);
        out.push(Effect::ToPlugin(cancel_line(reason)));
        self.ending = Ending::Cancelled(reason);
        self.escalate(now);
    }

    fn escalate(&mut self, now: Instant) {
        if self.escalation.is_none() {
            self.escalation = Some(Escalation {
                at: now,
                termed: false,
                killed: false,
            });
        }
    }

    fn warn(&self, text: &str) -> String {
        let c = self.settings.colour;
        format!(
            "  {} {}: {text}\n",
            console::style("⚠").yellow().force_styling(c),
            console::style(&self.settings.plugin_name)
                .dim()
                .force_styling(c)
        )
    }

    fn blocked(&self, what: &str) -> String {
        let c = self.settings.colour;
        format!(
            "  {} [{}] {what} blocked — capability not granted\n",
            console::style("WARN").yellow().force_styling(c),
            console::style(&self.settings.plugin_name)
                .dim()
                .force_styling(c)
        )
    }

    /// The styled `log` line, as fledge prints it.
    pub fn log_line(&self, level: &str, message: &str) -> String {
        let c = self.settings.colour;
        let prefix = match level {
            "debug" => console::style("DEBUG").dim(),
            "info" => console::style("INFO").cyan(),
            "warn" => console::style("WARN").yellow(),
            "error" => console::style("ERROR").red().bold(),
            other => console::style(other).dim(),
        }
        .force_styling(c);
        format!(
            "  {} [{}] {}\n",
            prefix,
            console::style(&self.settings.plugin_name)
                .dim()
                .force_styling(c),
            message
        )
    }

    /// The styled line for a store that could not be kept.
    pub fn store_rejected_line(&self, reason: &str) -> String {
        let c = self.settings.colour;
        format!(
            "  {} [{}] store rejected: {reason}\n",
            console::style("⚠️").yellow().force_styling(c),
            self.settings.plugin_name
        )
    }

    /// The styled `error:` line for a failed run.
    pub fn error_line(&self, text: &str) -> String {
        format!(
            "{} {text}\n",
            console::style("error:")
                .red()
                .bold()
                .force_styling(self.settings.colour)
        )
    }

    fn clear_progress(&mut self, out: &mut Vec<Effect>) {
        if self.progress_shown {
            self.progress_shown = false;
            out.push(Effect::Progress(Progress::Clear));
        }
    }

    fn respond(&self, id: &str, value: Value, out: &mut Vec<Effect>) {
        out.push(Effect::ToPlugin(response_line(id, &value)));
    }

    fn on_line(&mut self, line: &[u8], now: Instant, out: &mut Vec<Effect>) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let Some(msg) = Outbound::parse(line) else {
            out.push(Effect::Stderr(self.warn("malformed JSON, skipping")));
            return;
        };
        let caps = self.settings.capabilities.clone();
        let cancelled = match self.ending {
            Ending::Cancelled(reason) => Some(reason),
            _ => None,
        };
        match msg {
            Outbound::Prompt {
                id,
                message,
                default,
                validate,
            } => self.ask(
                id,
                Question::Prompt {
                    message,
                    default,
                    validate: validate.as_deref().and_then(Validator::from_name),
                },
                cancelled,
                now,
                out,
            ),
            Outbound::Confirm {
                id,
                message,
                default,
            } => self.ask(
                id,
                Question::Confirm {
                    message,
                    default: default.unwrap_or(false),
                },
                cancelled,
                now,
                out,
            ),
            Outbound::Select {
                id,
                message,
                options,
                default,
            } => self.ask(
                id,
                Question::Select {
                    message,
                    options,
                    default,
                },
                cancelled,
                now,
                out,
            ),
            Outbound::MultiSelect {
                id,
                message,
                options,
                defaults,
            } => self.ask(
                id,
                Question::MultiSelect {
                    message,
                    options,
                    defaults: defaults.unwrap_or_default(),
                },
                cancelled,
                now,
                out,
            ),
            Outbound::Progress {
                message,
                current,
                total,
                done,
            } => {
                if done.unwrap_or(false) {
                    self.clear_progress(out);
                    return;
                }
                let label = format!(
                    "{} ({})",
                    message.as_deref().unwrap_or("Working"),
                    self.settings.plugin_name
                );
                self.progress_shown = true;
                out.push(Effect::Progress(match (current, total) {
                    (Some(current), Some(total)) => Progress::Bar {
                        message: label,
                        current,
                        total,
                    },
                    _ => Progress::Spinner { message: label },
                }));
            }
            Outbound::Log { level, message } => {
                self.clear_progress(out);
                out.push(Effect::Stderr(self.log_line(&level, &message)));
            }
            Outbound::Output { text } => {
                self.clear_progress(out);
                out.push(Effect::Stdout(text));
            }
            Outbound::Store { key, value } => {
                if caps.store {
                    out.push(Effect::Store { key, value });
                }
            }
            Outbound::Load { id, key } => {
                if caps.store {
                    self.wait(id.clone(), Kind::Work, None);
                    out.push(Effect::Load { id, key });
                } else {
                    self.respond(&id, Value::Null, out);
                }
            }
            Outbound::Exec {
                id,
                command,
                cwd,
                timeout,
            } => {
                if caps.exec {
                    self.wait(id.clone(), Kind::Work, None);
                    out.push(Effect::Exec {
                        id,
                        command,
                        cwd,
                        timeout_secs: timeout
                            .unwrap_or(EXEC_TIMEOUT_DEFAULT)
                            .min(EXEC_TIMEOUT_MAX),
                    });
                } else {
                    out.push(Effect::Stderr(self.blocked("exec")));
                    let denied = ExecResult {
                        code: 126,
                        stderr: "exec capability not granted".into(),
                        stdout: String::new(),
                    };
                    self.respond(&id, exec_value(&denied), out);
                }
            }
            Outbound::Metadata { id, keys } => {
                if caps.metadata {
                    self.wait(id.clone(), Kind::Work, None);
                    out.push(Effect::Metadata { id, keys });
                } else {
                    out.push(Effect::Stderr(self.blocked("metadata")));
                    self.respond(&id, Value::Object(serde_json::Map::new()), out);
                }
            }
        }
    }

    fn wait(&mut self, id: String, kind: Kind, deadline: Option<Instant>) {
        self.state = State::Waiting { id, kind, deadline };
    }

    fn ask(
        &mut self,
        id: String,
        question: Question,
        cancelled: Option<CancelReason>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        if let Some(reason) = cancelled {
            // The run is being cancelled: the question is answered with a cancel at once.
            out.push(Effect::ToPlugin(cancel_line(reason)));
            return;
        }
        if matches!(self.ending, Ending::Failed) {
            return;
        }
        self.clear_progress(out);
        self.wait(
            id.clone(),
            Kind::Ui,
            Some(now + self.settings.prompt_timeout),
        );
        out.push(Effect::Ask { id, question });
    }

    fn on_done(
        &mut self,
        id: String,
        result: Result<Value, String>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let State::Waiting { id: pending, .. } = &self.state else {
            return;
        };
        if *pending != id {
            return;
        }
        self.state = State::Running;
        match result {
            Ok(value) => self.respond(&id, value, out),
            Err(text) => {
                out.push(Effect::Stderr(self.error_line(&text)));
                out.push(Effect::CloseStdin);
                self.ending = Ending::Failed;
                // fledge stops reading the plugin's output after such an error; a plugin
                // that does not exit when its stdin closes is stopped as after a cancel.
                self.eof = true;
                self.escalate(now);
            }
        }
    }
}

/// An [`ExecResult`] as the `value` of a response.
pub fn exec_value(r: &ExecResult) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(caps: Capabilities) -> Settings {
        Settings {
            plugin_name: "fledge-demo".into(),
            capabilities: caps,
            colour: false,
            prompt_timeout: Duration::from_secs(300),
        }
    }

    fn all_caps() -> Capabilities {
        Capabilities {
            exec: true,
            store: true,
            metadata: false,
            ..Capabilities::default()
        }
    }

    fn plugin_bytes(effects: &[Effect]) -> Vec<u8> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::ToPlugin(b) => Some(b.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The `init` of the capture, byte for byte.
    #[test]
    fn init_matches_the_capture() {
        let init = Init::new(
            vec!["3".into(), "extra".into()],
            Some(Project {
                name: "gitrepo".into(),
                root: "/tmp/research/gitrepo".into(),
                language: "generic".into(),
                git: Some(Git {
                    branch: "master".into(),
                    dirty: true,
                    remote: "origin".into(),
                    remote_url: String::new(),
                }),
            }),
            PluginInfo {
                name: "fledge-demo".into(),
                version: "0.1.0".into(),
                dir: "/tmp/research/fledge/xdg/fledge/plugins/fledge-demo".into(),
            },
            "1.8.0".into(),
            all_caps(),
        );
        let expected = concat!(
            r#"{"type":"init","protocol":"fledge-v1","args":["3","extra"],"project":{"name":"gitrepo","root":"/tmp/research/gitrepo","language":"generic","git":{"branch":"master","dirty":true,"remote":"origin","remote_url":""}},"plugin":{"name":"fledge-demo","version":"0.1.0","dir":"/tmp/research/fledge/xdg/fledge/plugins/fledge-demo"},"fledge":{"version":"1.8.0"},"capabilities":{"exec":true,"store":true,"metadata":false}}"#,
            "\n"
        );
        assert_eq!(String::from_utf8(init_line(&init)).unwrap(), expected);
    }

    #[test]
    fn init_carries_filesystem_and_network_only_when_declared() {
        let caps = Capabilities {
            filesystem: Some("project".into()),
            network: true,
            ..Capabilities::default()
        };
        let init = Init::new(
            vec![],
            None,
            PluginInfo {
                name: "p".into(),
                version: "1".into(),
                dir: "/d".into(),
            },
            "1.8.0".into(),
            caps,
        );
        let text = String::from_utf8(init_line(&init)).unwrap();
        assert!(text.contains(r#""project":null"#));
        assert!(text.ends_with(
            r#""capabilities":{"exec":false,"store":false,"metadata":false,"filesystem":"project","network":true}}
"#
        ));
    }

    /// The capture's exchange after `init`, with the work done as fledge did it.
    #[test]
    fn capture_exchange_is_byte_exact() {
        let now = Instant::now();
        let mut host = Host::new(settings(all_caps()));
        let mut to_plugin = Vec::new();
        let mut stderr = String::new();
        let mut stdout = String::new();
        let lines: &[&str] = &[
            r#"{"type": "log", "level": "info", "message": "args=['3', 'extra']"}"#,
            r#"{"type": "output", "text": "hello from demo, FLEDGE_PLUGIN_DIR=/tmp/research/fledge/xdg/fledge/plugins/fledge-demo\n"}"#,
            r#"{"type": "bogus_type", "x": 1}"#,
            r#"{"type": "store", "key": "k", "value": "v1"}"#,
            r#"{"type": "load", "id": "1", "key": "k"}"#,
            r#"{"type": "exec", "id": "2", "command": "echo hi; exit 3", "timeout": 5}"#,
            r#"{"type": "metadata", "id": "3", "keys": ["git_status"]}"#,
        ];
        let mut stored = None;
        for line in lines {
            assert!(host.wants_line());
            let effects = host.handle(Event::Line(line.as_bytes().to_vec()), now);
            for e in &effects {
                match e {
                    Effect::Stderr(s) => stderr.push_str(s),
                    Effect::Stdout(s) => stdout.push_str(s),
                    Effect::Store { key, value } => stored = Some((key.clone(), value.clone())),
                    _ => {}
                }
            }
            to_plugin.extend(plugin_bytes(&effects));
            for e in effects {
                let done = match e {
                    Effect::Load { id, key } => {
                        assert_eq!(key, "k");
                        Some((id, json!(stored.as_ref().unwrap().1)))
                    }
                    Effect::Exec {
                        id,
                        command,
                        timeout_secs,
                        cwd,
                    } => {
                        assert_eq!(
                            (command.as_str(), timeout_secs, cwd),
                            ("echo hi; exit 3", 5, None)
                        );
                        let r = ExecResult {
                            code: 3,
                            stderr: String::new(),
                            stdout: "hi\n".into(),
                        };
                        Some((id, exec_value(&r)))
                    }
                    _ => None,
                };
                if let Some((id, value)) = done {
                    assert!(!host.wants_line());
                    let effects = host.handle(
                        Event::Done {
                            id,
                            result: Ok(value),
                        },
                        now,
                    );
                    to_plugin.extend(plugin_bytes(&effects));
                }
            }
        }
        assert_eq!(
            String::from_utf8(to_plugin).unwrap(),
            concat!(
                r#"{"type":"response","id":"1","value":"v1"}"#,
                "\n",
                r#"{"type":"response","id":"2","value":{"code":3,"stderr":"","stdout":"hi\n"}}"#,
                "\n",
                r#"{"type":"response","id":"3","value":{}}"#,
                "\n"
            )
        );
        assert_eq!(
            stdout,
            "hello from demo, FLEDGE_PLUGIN_DIR=/tmp/research/fledge/xdg/fledge/plugins/fledge-demo\n"
        );
        assert_eq!(
            stderr,
            "  INFO [fledge-demo] args=['3', 'extra']\n  ⚠ fledge-demo: malformed JSON, skipping\n  WARN [fledge-demo] metadata blocked — capability not granted\n"
        );
        assert_eq!(stored, Some(("k".into(), "v1".into())));
        host.handle(Event::Eof, now);
        assert_eq!(host.finished(), None);
        host.handle(Event::Exited(0), now);
        assert_eq!(host.finished(), Some(0));
    }

    #[test]
    fn denied_capabilities_answer_as_fledge_does() {
        let now = Instant::now();
        let mut host = Host::new(settings(Capabilities::default()));
        let e = host.handle(
            Event::Line(br#"{"type":"exec","id":"e","command":"true"}"#.to_vec()),
            now,
        );
        assert_eq!(
            String::from_utf8(plugin_bytes(&e)).unwrap(),
            "{\"type\":\"response\",\"id\":\"e\",\"value\":{\"code\":126,\"stderr\":\"exec capability not granted\",\"stdout\":\"\"}}\n"
        );
        assert!(e.contains(&Effect::Stderr(
            "  WARN [fledge-demo] exec blocked — capability not granted\n".into()
        )));
        let e = host.handle(
            Event::Line(br#"{"type":"store","key":"k","value":"v"}"#.to_vec()),
            now,
        );
        assert!(e.is_empty());
        let e = host.handle(
            Event::Line(br#"{"type":"load","id":"l","key":"k"}"#.to_vec()),
            now,
        );
        assert_eq!(
            plugin_bytes(&e),
            b"{\"type\":\"response\",\"id\":\"l\",\"value\":null}\n"
        );
        assert!(host.wants_line());
    }

    #[test]
    fn malformed_lines_and_requests_without_id_are_skipped() {
        let now = Instant::now();
        let mut host = Host::new(settings(all_caps()));
        for line in [
            &b"not json"[..],
            br#"{"type":"prompt","message":"no id"}"#,
            br#"{"type":"load","key":"k"}"#,
            br#"{"type":"select","id":"1","message":"m"}"#,
            br#"{"no":"type"}"#,
            b"\xff\xfe",
        ] {
            let e = host.handle(Event::Line(line.to_vec()), now);
            assert_eq!(
                e,
                vec![Effect::Stderr(
                    "  ⚠ fledge-demo: malformed JSON, skipping\n".into()
                )]
            );
        }
        assert!(host.handle(Event::Line(b"   ".to_vec()), now).is_empty());
        assert!(host.wants_line());
    }

    #[test]
    fn orphaned_and_late_answers_are_ignored() {
        let now = Instant::now();
        let mut host = Host::new(settings(all_caps()));
        assert!(host
            .handle(
                Event::Done {
                    id: "9".into(),
                    result: Ok(json!(1))
                },
                now
            )
            .is_empty());
        host.handle(
            Event::Line(br#"{"type":"confirm","id":"1","message":"ok?"}"#.to_vec()),
            now,
        );
        let e = host.handle(
            Event::Done {
                id: "2".into(),
                result: Ok(json!(true)),
            },
            now,
        );
        assert!(e.is_empty());
        assert!(!host.wants_line());
        let e = host.handle(
            Event::Done {
                id: "1".into(),
                result: Ok(json!(true)),
            },
            now,
        );
        assert_eq!(
            plugin_bytes(&e),
            b"{\"type\":\"response\",\"id\":\"1\",\"value\":true}\n"
        );
    }

    #[test]
    fn prompt_timeout_cancels_then_escalates() {
        let t0 = Instant::now();
        let mut s = settings(all_caps());
        s.prompt_timeout = Duration::from_secs(60);
        let mut host = Host::new(s);
        let e = host.handle(
            Event::Line(
                br#"{"type":"prompt","id":"1","message":"Target:","default":"staging"}"#.to_vec(),
            ),
            t0,
        );
        assert_eq!(
            e,
            vec![Effect::Ask {
                id: "1".into(),
                question: Question::Prompt {
                    message: "Target:".into(),
                    default: Some("staging".into()),
                    validate: None
                }
            }]
        );
        assert_eq!(host.next_deadline(), Some(t0 + Duration::from_secs(60)));
        assert!(host.tick(t0 + Duration::from_secs(59)).is_empty());
        let t1 = t0 + Duration::from_secs(60);
        let e = host.tick(t1);
        assert_eq!(
            e,
            vec![
                Effect::Abandon,
                Effect::ToPlugin(b"{\"type\":\"cancel\",\"reason\":\"timeout\"}\n".to_vec())
            ]
        );
        // The late answer is dropped: exactly one cancel for the id.
        assert!(host
            .handle(
                Event::Done {
                    id: "1".into(),
                    result: Ok(json!("x"))
                },
                t1
            )
            .is_empty());
        assert_eq!(host.next_deadline(), Some(t1 + TERM_AFTER));
        assert_eq!(host.tick(t1 + TERM_AFTER), vec![Effect::Terminate]);
        assert_eq!(host.next_deadline(), Some(t1 + KILL_AFTER));
        assert_eq!(host.tick(t1 + KILL_AFTER), vec![Effect::Kill]);
        assert_eq!(host.next_deadline(), None);
        host.handle(Event::Exited(137), t1 + KILL_AFTER);
        host.handle(Event::Eof, t1 + KILL_AFTER);
        assert_eq!(host.finished(), Some(137));
    }

    #[test]
    fn interrupt_cancels_once_and_later_questions_get_cancel() {
        let t0 = Instant::now();
        let mut host = Host::new(settings(all_caps()));
        host.handle(
            Event::Line(br#"{"type":"progress","message":"m","current":1,"total":3}"#.to_vec()),
            t0,
        );
        host.handle(
            Event::Line(
                br#"{"type":"select","id":"s","message":"m","options":["a","b"]}"#.to_vec(),
            ),
            t0,
        );
        let e = host.handle(Event::Interrupt, t0);
        assert_eq!(
            e,
            vec![
                Effect::Abandon,
                Effect::ToPlugin(b"{\"type\":\"cancel\",\"reason\":\"user_interrupt\"}\n".to_vec())
            ]
        );
        assert!(host.handle(Event::Interrupt, t0).is_empty());
        let e = host.handle(
            Event::Line(br#"{"type":"confirm","id":"c","message":"m"}"#.to_vec()),
            t0,
        );
        assert_eq!(
            plugin_bytes(&e),
            b"{\"type\":\"cancel\",\"reason\":\"user_interrupt\"}\n"
        );
        // A plugin that exits promptly is not signalled.
        host.handle(Event::Exited(130), t0 + Duration::from_secs(1));
        assert!(host.tick(t0 + TERM_AFTER).is_empty());
        host.handle(Event::Eof, t0);
        assert_eq!(host.finished(), Some(130));
    }

    #[test]
    fn progress_is_cleared_before_other_output() {
        let t0 = Instant::now();
        let mut host = Host::new(settings(all_caps()));
        let e = host.handle(
            Event::Line(br#"{"type":"progress","message":"Deploying"}"#.to_vec()),
            t0,
        );
        assert_eq!(
            e,
            vec![Effect::Progress(Progress::Spinner {
                message: "Deploying (fledge-demo)".into()
            })]
        );
        let e = host.handle(Event::Line(br#"{"type":"output","text":"x"}"#.to_vec()), t0);
        assert_eq!(
            e,
            vec![
                Effect::Progress(Progress::Clear),
                Effect::Stdout("x".into())
            ]
        );
        let e = host.handle(
            Event::Line(br#"{"type":"progress","done":true}"#.to_vec()),
            t0,
        );
        assert!(e.is_empty());
    }

    #[test]
    fn a_question_that_cannot_be_asked_fails_the_run() {
        let t0 = Instant::now();
        let mut host = Host::new(settings(all_caps()));
        host.handle(
            Event::Line(br#"{"type":"prompt","id":"1","message":"Name:"}"#.to_vec()),
            t0,
        );
        let e = host.handle(
            Event::Done {
                id: "1".into(),
                result: Err("no answer".into()),
            },
            t0,
        );
        assert_eq!(
            e,
            vec![
                Effect::Stderr("error: no answer\n".into()),
                Effect::CloseStdin
            ]
        );
        assert!(!host.wants_line());
        assert_eq!(host.tick(t0 + TERM_AFTER), vec![Effect::Terminate]);
        host.handle(Event::Exited(143), t0);
        assert_eq!(host.finished(), Some(1));
    }

    #[test]
    fn log_levels_are_styled_when_colour_is_on() {
        let mut s = settings(all_caps());
        s.colour = true;
        let host = Host::new(s);
        assert_eq!(
            host.log_line("warn", "w"),
            "  \u{1b}[33mWARN\u{1b}[0m [\u{1b}[2mfledge-demo\u{1b}[0m] w\n"
        );
        assert_eq!(
            host.log_line("error", "e"),
            "  \u{1b}[31m\u{1b}[1mERROR\u{1b}[0m [\u{1b}[2mfledge-demo\u{1b}[0m] e\n"
        );
    }

    #[test]
    fn validators_use_fledges_rules_and_texts() {
        let no = |_: &str| false;
        assert_eq!(
            Validator::NonEmpty.check("  ", no),
            Err("Input cannot be empty")
        );
        assert_eq!(Validator::Integer.check("-12", no), Ok(()));
        assert_eq!(
            Validator::Integer.check("1.5", no),
            Err("Must be an integer")
        );
        assert_eq!(
            Validator::PathExists.check("x", no),
            Err("Path does not exist")
        );
        assert_eq!(Validator::PathExists.check("x", |_| true), Ok(()));
        assert_eq!(Validator::Url.check("https://a", no), Ok(()));
        assert!(Validator::Url.check("ftp://a", no).is_err());
        assert_eq!(Validator::from_name("other"), None);
    }
}
