//! Asking the user, behind [`Ui`], and showing progress, behind [`ProgressView`].
//!
//! * [`LineUi`]: plain line prompts written to the client's stderr and answered from its
//!   stdin, one line per answer; at end of input the default is taken, or, for a prompt
//!   without one, the run fails with a clear error. This is what sessions use today.
//! * [`TermUi`]: the prompts fledge shows (dialoguer's `ColorfulTheme`, arrow keys, the
//!   same validators), drawn on a terminal the bridge holds a descriptor for. console reads
//!   keys from the process's own stdin or `/dev/tty`, so each question runs in a short-lived
//!   helper process ([`helper_main`]) whose stdin, stdout and stderr are that terminal; the
//!   helper can be killed when the question is abandoned (Ctrl-C elsewhere, a timeout, the
//!   plugin exiting), which no thread blocked in a read could be.
//! * Progress is an `indicatif` bar or spinner, fledge's templates, drawn on the client's
//!   stderr when it is a terminal ([`ProgressView::on_output`]) or on the held terminal;
//!   nothing is drawn otherwise, as indicatif draws nothing on a pipe.

use crate::protocol::{Progress, Question, Validator};
use crate::sys;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The argument that makes [`crate::run`] act as the terminal prompt helper.
pub const HELPER_FLAG: &str = "--ngd-fledge-ui-helper";

/// Why a question got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UiError {
    /// The user pressed Ctrl-C at the prompt.
    #[error("interrupted")]
    Interrupted,
    /// It cannot be answered (no input and no default, no terminal...): the run fails.
    #[error("{0}")]
    Failed(String),
}

/// Something that asks the user.
pub trait Ui: Send {
    /// Asks `question`; the answer as the response's `value`.
    fn ask(&mut self, question: &Question) -> Result<Value, UiError>;
    /// A handle that abandons the question being asked, from another thread.
    fn aborter(&self) -> Arc<dyn Fn() + Send + Sync> {
        Arc::new(|| {})
    }
}

/// Line prompts on a writer (stderr), answers from a reader (stdin).
pub struct LineUi<R, W> {
    input: R,
    output: W,
    /// Whether the input is a terminal (the typed answer is already echoed there).
    input_is_tty: bool,
    /// Where relative paths are checked (`path_exists`).
    cwd: PathBuf,
}

impl<R, W> std::fmt::Debug for LineUi<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineUi").finish_non_exhaustive()
    }
}

impl<R: BufRead + Send, W: Write + Send> LineUi<R, W> {
    /// A line UI.
    pub fn new(input: R, output: W, input_is_tty: bool, cwd: PathBuf) -> Self {
        Self {
            input,
            output,
            input_is_tty,
            cwd,
        }
    }

    /// One line of input; `None` at end of input.
    fn line(&mut self, prompt: &str) -> Option<String> {
        let _ = self.output.write_all(prompt.as_bytes());
        let _ = self.output.flush();
        let mut buf = String::new();
        match self.input.read_line(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = self.output.write_all(b"\n");
                None
            }
            Ok(_) => {
                let answer = buf.trim_end_matches(['\n', '\r']).to_owned();
                if !self.input_is_tty {
                    let _ = writeln!(self.output, "{answer}");
                }
                Some(answer)
            }
        }
    }

    fn complain(&mut self, text: &str) {
        let _ = writeln!(self.output, "  ✘ {text}");
    }

    fn list(&mut self, options: &[String], marks: Option<&[usize]>) {
        for (i, o) in options.iter().enumerate() {
            let mark = match marks {
                Some(m) if m.contains(&i) => "[x] ",
                Some(_) => "[ ] ",
                None => "",
            };
            let _ = writeln!(self.output, "  {}) {mark}{o}", i + 1);
        }
    }
}

/// The question with a colon unless it ends in punctuation already.
fn label(message: &str) -> String {
    if message.ends_with([':', '?', '!', '.']) {
        message.to_owned()
    } else {
        format!("{message}:")
    }
}

/// Parses a 1-based choice (a number or an option's exact text).
fn choice(answer: &str, options: &[String]) -> Option<usize> {
    let a = answer.trim();
    if let Ok(n) = a.parse::<usize>() {
        return (1..=options.len()).contains(&n).then(|| n - 1);
    }
    options.iter().position(|o| o == a)
}

impl<R: BufRead + Send, W: Write + Send> Ui for LineUi<R, W> {
    fn ask(&mut self, question: &Question) -> Result<Value, UiError> {
        self.ask_line(question).map_err(UiError::Failed)
    }
}

impl<R: BufRead + Send, W: Write + Send> LineUi<R, W> {
    fn ask_line(&mut self, question: &Question) -> Result<Value, String> {
        match question {
            Question::Prompt {
                message,
                default,
                validate,
            } => loop {
                let prompt = match default {
                    Some(d) => format!("? {} [{d}] ", label(message)),
                    None => format!("? {} ", label(message)),
                };
                let answer = match self.line(&prompt) {
                    Some(a) if a.is_empty() && default.is_some() => default.clone().unwrap_or_default(),
                    Some(a) => a,
                    None => {
                        return default.clone().map(Value::String).ok_or_else(|| {
                            format!(
                                "Plugin requested input '{message}' but no input was given and no default was provided."
                            )
                        })
                    }
                };
                let cwd = self.cwd.clone();
                match validate.map(|v| v.check(&answer, |p| cwd.join(p).exists())) {
                    Some(Err(e)) => self.complain(e),
                    _ => return Ok(Value::String(answer)),
                }
            },
            Question::Confirm { message, default } => loop {
                let hint = if *default { "Y/n" } else { "y/N" };
                match self.line(&format!("? {} [{hint}] ", label(message))) {
                    None => return Ok(Value::Bool(*default)),
                    Some(a) => match a.trim().to_lowercase().as_str() {
                        "" => return Ok(Value::Bool(*default)),
                        "y" | "yes" => return Ok(Value::Bool(true)),
                        "n" | "no" => return Ok(Value::Bool(false)),
                        _ => self.complain("Answer y or n"),
                    },
                }
            },
            Question::Select {
                message,
                options,
                default,
            } => {
                let d = default.unwrap_or(0);
                if options.is_empty() || d >= options.len() {
                    return Err(format!(
                        "Plugin requested selection '{message}' with no valid option to choose."
                    ));
                }
                let _ = writeln!(self.output, "? {message}");
                self.list(options, None);
                loop {
                    match self.line(&format!("  Choose 1-{} [{}]: ", options.len(), d + 1)) {
                        None => return Ok(Value::String(options[d].clone())),
                        Some(a) if a.trim().is_empty() => {
                            return Ok(Value::String(options[d].clone()))
                        }
                        Some(a) => match choice(&a, options) {
                            Some(i) => return Ok(Value::String(options[i].clone())),
                            None => self.complain("Not one of the choices"),
                        },
                    }
                }
            }
            Question::MultiSelect {
                message,
                options,
                defaults,
            } => {
                let defaults: Vec<usize> = defaults
                    .iter()
                    .copied()
                    .filter(|&i| i < options.len())
                    .collect();
                let chosen = |idx: &[usize]| {
                    let mut idx = idx.to_vec();
                    idx.sort_unstable();
                    idx.dedup();
                    Value::Array(
                        idx.into_iter()
                            .map(|i| Value::String(options[i].clone()))
                            .collect(),
                    )
                };
                let _ = writeln!(self.output, "? {message}");
                self.list(options, Some(&defaults));
                let shown: Vec<String> = defaults.iter().map(|i| (i + 1).to_string()).collect();
                loop {
                    let prompt = format!(
                        "  Choose numbers separated by spaces or commas [{}]: ",
                        shown.join(",")
                    );
                    match self.line(&prompt) {
                        None => return Ok(chosen(&defaults)),
                        Some(a) if a.trim().is_empty() => return Ok(chosen(&defaults)),
                        Some(a) if a.trim() == "-" => return Ok(chosen(&[])),
                        Some(a) => {
                            let picks: Option<Vec<usize>> = a
                                .split([',', ' '])
                                .filter(|s| !s.is_empty())
                                .map(|s| choice(s, options))
                                .collect();
                            match picks {
                                Some(p) => return Ok(chosen(&p)),
                                None => self.complain("Not one of the choices"),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// How to start the prompt helper: a program and the arguments before the question.
#[derive(Debug, Clone)]
pub struct Helper {
    /// The program (ngd itself in production).
    pub program: PathBuf,
    /// Arguments before [`HELPER_FLAG`] (`bridge fledge-v1 --` for ngd).
    pub args: Vec<OsString>,
}

impl Helper {
    /// The running executable, invoked the way ngd starts the bridge.
    pub fn current() -> Option<Self> {
        Some(Self {
            program: std::env::current_exe().ok()?,
            args: ["bridge", "fledge-v1", "--"].map(OsString::from).to_vec(),
        })
    }
}

/// Prompts drawn by dialoguer on a terminal the bridge holds.
#[derive(Debug)]
pub struct TermUi {
    /// Where keys are read (the helper's stdin).
    tty: OwnedFd,
    /// Where the prompt is drawn (the helper's stdout and stderr); `tty` when `None`.
    output: Option<OwnedFd>,
    helper: Helper,
    cwd: PathBuf,
    /// The client's values of the variables that decide how the prompt is drawn, when
    /// known.
    terminal_env: Option<Vec<(OsString, OsString)>>,
    running: Arc<Mutex<Option<u32>>>,
}

/// The variables console and dialoguer read to decide colours and characters: the helper
/// gets the client's values (or none), not the bridge's, so the prompt looks as it would
/// under fledge in the client's shell.
pub const TERMINAL_VARS: [&str; 8] = [
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
];

impl TermUi {
    /// A terminal UI on `tty` (a descriptor for the client's terminal).
    pub fn new(tty: OwnedFd, helper: Helper, cwd: PathBuf) -> Self {
        Self {
            tty,
            output: None,
            helper,
            cwd,
            terminal_env: None,
            running: Arc::new(Mutex::new(None)),
        }
    }

    /// A terminal UI reading keys from `input` and drawing on `output` (the client's fds
    /// 0 and 2, which are both the terminal in an interactive shell).
    pub fn split(input: OwnedFd, output: OwnedFd, helper: Helper, cwd: PathBuf) -> Self {
        Self {
            tty: input,
            output: Some(output),
            helper,
            cwd,
            terminal_env: None,
            running: Arc::new(Mutex::new(None)),
        }
    }

    /// Draws prompts as the client's environment `env` says (its [`TERMINAL_VARS`]);
    /// without this the helper keeps the bridge's own values.
    pub fn client_env(mut self, env: &[(OsString, OsString)]) -> Self {
        self.terminal_env = Some(
            env.iter()
                .filter(|(k, _)| TERMINAL_VARS.iter().any(|v| k == v))
                .cloned()
                .collect(),
        );
        self
    }

    fn output(&self) -> &OwnedFd {
        self.output.as_ref().unwrap_or(&self.tty)
    }

    fn stdio(fd: &OwnedFd) -> Result<Stdio, String> {
        fd.try_clone()
            .map(Stdio::from)
            .map_err(|e| format!("terminal: {e}"))
    }
}

/// The question as the helper's argument.
pub fn question_json(q: &Question) -> Value {
    match q {
        Question::Prompt {
            message,
            default,
            validate,
        } => json!({"type": "prompt", "message": message, "default": default,
        "validate": validate.map(|v| match v {
            Validator::NonEmpty => "non_empty",
            Validator::Integer => "integer",
            Validator::PathExists => "path_exists",
            Validator::Url => "url",
        })}),
        Question::Confirm { message, default } => {
            json!({"type": "confirm", "message": message, "default": default})
        }
        Question::Select {
            message,
            options,
            default,
        } => json!({"type": "select", "message": message, "options": options, "default": default}),
        Question::MultiSelect {
            message,
            options,
            defaults,
        } => {
            json!({"type": "multi_select", "message": message, "options": options, "defaults": defaults})
        }
    }
}

impl Ui for TermUi {
    fn ask(&mut self, question: &Question) -> Result<Value, UiError> {
        self.ask_helper(question)
    }

    fn aborter(&self) -> Arc<dyn Fn() + Send + Sync> {
        let running = self.running.clone();
        Arc::new(move || {
            if let Some(pid) = *running.lock().unwrap_or_else(|p| p.into_inner()) {
                // The helper is our child; its slot is cleared once it is reaped, so the
                // pid cannot have been reused.
                let _ = sys::signal_process(pid as sys::Pid, libc::SIGTERM);
            }
        })
    }
}

impl TermUi {
    fn ask_helper(&mut self, question: &Question) -> Result<Value, UiError> {
        let failed = |e: String| UiError::Failed(e);
        let (read, write) = sys::pipe().map_err(|e| failed(format!("pipe: {e}")))?;
        let mut cmd = Command::new(&self.helper.program);
        if let Some(env) = &self.terminal_env {
            for v in TERMINAL_VARS {
                cmd.env_remove(v);
            }
            cmd.envs(env.iter().map(|(k, v)| (k, v)));
        }
        cmd.args(&self.helper.args)
            .arg(HELPER_FLAG)
            .arg(question_json(question).to_string())
            .current_dir(&self.cwd)
            .stdin(Self::stdio(&self.tty).map_err(failed)?)
            .stdout(Self::stdio(self.output()).map_err(failed)?)
            .stderr(Self::stdio(self.output()).map_err(failed)?);
        // The helper writes its answer to fd 3: the pipe's write end, which `cmd` holds
        // until it is dropped after the spawn.
        sys::give_fd_at_exec(&mut cmd, write, 3);
        // The terminal's modes before the question: a helper killed while it reads a key
        // (the question abandoned) leaves the terminal in raw mode, which is put back.
        let saved = sys::TermModes::read(self.tty.as_fd());
        let mut child = cmd
            .spawn()
            .map_err(|e| failed(format!("prompt helper: {e}")))?;
        drop(cmd);
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = Some(child.id());
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut std::fs::File::from(read), &mut text);
        let status = child.wait();
        // The slot is cleared after the wait: a kill from the aborter may reach a zombie,
        // never another process.
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = None;
        // Show the cursor again whatever happened (dialoguer hides it while drawing).
        if let Ok(tty) = self.output().try_clone() {
            let _ = std::fs::File::from(tty).write_all(b"\x1b[?25h");
        }
        let status = status.map_err(|e| failed(e.to_string()))?;
        if let (Some(t), Some(_)) = (saved, status.signal()) {
            let _ = t.restore(self.tty.as_fd());
        }
        match serde_json::from_str::<Value>(&text) {
            Ok(v) if status.success() => Ok(v),
            _ if status.signal() == Some(libc::SIGINT) || status.code() == Some(130) => {
                Err(UiError::Interrupted)
            }
            _ => Err(failed(format!(
                "the prompt '{}' was not answered",
                question.message()
            ))),
        }
    }
}

/// The prompt helper's body: asks the question in `arg` on its own stdin/stderr terminal,
/// writes the answer as JSON to fd 3 and returns the exit status (130 when interrupted).
pub fn helper_main(arg: &str) -> i32 {
    let Ok(q) = serde_json::from_str::<Value>(arg) else {
        return 2;
    };
    let theme = dialoguer::theme::ColorfulTheme::default();
    let term = console::Term::stderr();
    let message = q["message"].as_str().unwrap_or("").to_owned();
    let options: Vec<String> = q["options"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let answer: Result<Value, dialoguer::Error> = match q["type"].as_str() {
        Some("prompt") => {
            let mut input = dialoguer::Input::<String>::with_theme(&theme).with_prompt(&message);
            if let Some(d) = q["default"].as_str() {
                input = input.default(d.to_owned());
            }
            if let Some(v) = q["validate"].as_str().and_then(Validator::from_name) {
                input = input.validate_with(move |s: &String| -> Result<(), &'static str> {
                    v.check(s, |p| Path::new(p).exists())
                });
            }
            input.interact_text_on(&term).map(Value::String)
        }
        Some("confirm") => dialoguer::Confirm::with_theme(&theme)
            .with_prompt(&message)
            .default(q["default"].as_bool().unwrap_or(false))
            .interact_on(&term)
            .map(Value::Bool),
        Some("select") => {
            let mut s = dialoguer::Select::with_theme(&theme)
                .with_prompt(&message)
                .items(&options);
            if let Some(d) = q["default"].as_u64() {
                s = s.default(d as usize);
            }
            s.interact_on(&term)
                .map(|i| Value::String(options.get(i).cloned().unwrap_or_default()))
        }
        Some("multi_select") => {
            let d: Vec<usize> = q["defaults"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_u64().map(|n| n as usize))
                        .collect()
                })
                .unwrap_or_default();
            let bools: Vec<bool> = (0..options.len()).map(|i| d.contains(&i)).collect();
            dialoguer::MultiSelect::with_theme(&theme)
                .with_prompt(&message)
                .items(&options)
                .defaults(&bools)
                .interact_on(&term)
                .map(|v| {
                    Value::Array(
                        v.into_iter()
                            .filter_map(|i| options.get(i).cloned().map(Value::String))
                            .collect(),
                    )
                })
        }
        _ => return 2,
    };
    match answer {
        Ok(v) => {
            // fd 3 is the answer pipe the bridge set up.
            if let Some(mut out) = sys::take_inherited_fd(3) {
                let _ = out.write_all(v.to_string().as_bytes());
            }
            0
        }
        Err(_) => 130,
    }
}

/// A terminal-like writer for indicatif over any `Write` (the session's stderr).
#[derive(Debug)]
pub struct WriterTerm<W> {
    out: Mutex<W>,
    width: u16,
}

impl<W: Write + Send + std::fmt::Debug> WriterTerm<W> {
    /// A terminal `width` columns wide writing to `out`.
    pub fn new(out: W, width: u16) -> Self {
        Self {
            out: Mutex::new(out),
            width,
        }
    }

    fn put(&self, s: &str) -> std::io::Result<()> {
        self.out
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(s.as_bytes())
    }
}

impl<W: Write + Send + std::fmt::Debug> indicatif::TermLike for WriterTerm<W> {
    fn width(&self) -> u16 {
        self.width
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}A"))?;
        }
        Ok(())
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}B"))?;
        }
        Ok(())
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}C"))?;
        }
        Ok(())
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.put(&format!("\x1b[{n}D"))?;
        }
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.put(&format!("{s}\n"))
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.put("\r\x1b[2K")
    }
    fn flush(&self) -> std::io::Result<()> {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

/// The progress display of one run.
pub struct ProgressView {
    target: Option<Box<dyn Fn() -> ProgressDrawTarget + Send>>,
    colour: bool,
    bar: Option<(ProgressBar, bool)>,
}

impl std::fmt::Debug for ProgressView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressView")
            .field("shown", &self.bar.is_some())
            .finish()
    }
}

impl ProgressView {
    /// Draws nothing (stderr is not a terminal).
    pub fn hidden() -> Self {
        Self {
            target: None,
            colour: false,
            bar: None,
        }
    }

    /// Draws on `out`, a terminal `width` columns wide.
    pub fn on_output<W>(out: W, width: u16, colour: bool) -> Self
    where
        W: Write + Send + Sync + Clone + std::fmt::Debug + 'static,
    {
        Self {
            target: Some(Box::new(move || {
                ProgressDrawTarget::term_like(Box::new(WriterTerm::new(out.clone(), width)))
            })),
            colour,
            bar: None,
        }
    }

    /// Shows `p` (fledge's templates; a bar becomes a spinner and back as fledge's does not:
    /// fledge keeps the first kind until `done`, and so does this).
    pub fn show(&mut self, p: &Progress) {
        let Some(target) = &self.target else {
            return;
        };
        let arrow = console::style("▶").cyan().bold().force_styling(self.colour);
        match p {
            Progress::Clear => {
                if let Some((bar, _)) = self.bar.take() {
                    bar.finish_and_clear();
                }
            }
            Progress::Bar {
                message,
                current,
                total,
            } => {
                let (bar, _) = self.bar.get_or_insert_with(|| {
                    let pb = ProgressBar::with_draw_target(Some(*total), target());
                    if let Ok(style) = ProgressStyle::default_bar()
                        .template(&format!("  {arrow} {{msg}} [{{bar:30}}] {{pos}}/{{len}}"))
                    {
                        pb.set_style(style.progress_chars("==>  "));
                    }
                    (pb, true)
                });
                bar.set_length(*total);
                bar.set_position(*current);
                bar.set_message(message.clone());
            }
            Progress::Spinner { message } => {
                let (bar, _) = self.bar.get_or_insert_with(|| {
                    let pb = ProgressBar::with_draw_target(None, target());
                    if let Ok(style) = ProgressStyle::default_spinner()
                        .template(&format!("  {arrow} {{msg}} {{spinner}}"))
                    {
                        pb.set_style(style);
                    }
                    pb.enable_steady_tick(Duration::from_millis(100));
                    (pb, false)
                });
                bar.set_message(message.clone());
            }
        }
    }
}

impl Drop for ProgressView {
    fn drop(&mut self) {
        if let Some((bar, _)) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn ask(input: &str, q: Question) -> (Result<Value, UiError>, String) {
        let mut out = Vec::new();
        let r = {
            let mut ui = LineUi::new(
                Cursor::new(input.as_bytes().to_vec()),
                &mut out,
                false,
                "/".into(),
            );
            ui.ask(&q)
        };
        (r, String::from_utf8(out).unwrap())
    }

    #[test]
    fn line_prompts_take_answers_defaults_and_fail_clearly() {
        let p = |d: Option<&str>, v| Question::Prompt {
            message: "Deploy target:".into(),
            default: d.map(String::from),
            validate: v,
        };
        let (r, out) = ask("production\n", p(Some("staging"), None));
        assert_eq!(r, Ok(json!("production")));
        assert_eq!(out, "? Deploy target: [staging] production\n");
        assert_eq!(ask("\n", p(Some("staging"), None)).0, Ok(json!("staging")));
        assert_eq!(ask("", p(Some("staging"), None)).0, Ok(json!("staging")));
        assert!(ask("", p(None, None))
            .0
            .unwrap_err()
            .to_string()
            .contains("no default"));
        let (r, out) = ask("abc\n42\n", p(None, Some(Validator::Integer)));
        assert_eq!(r, Ok(json!("42")));
        assert!(out.contains("  ✘ Must be an integer\n"));
    }

    #[test]
    fn line_confirm_select_multi() {
        let c = Question::Confirm {
            message: "Sure?".into(),
            default: false,
        };
        assert_eq!(ask("y\n", c.clone()).0, Ok(json!(true)));
        assert_eq!(ask("", c).0, Ok(json!(false)));
        let opts: Vec<String> = ["dev", "staging", "production"].map(String::from).to_vec();
        let s = Question::Select {
            message: "Env:".into(),
            options: opts.clone(),
            default: Some(1),
        };
        assert_eq!(ask("3\n", s.clone()).0, Ok(json!("production")));
        assert_eq!(ask("dev\n", s.clone()).0, Ok(json!("dev")));
        assert_eq!(ask("", s).0, Ok(json!("staging")));
        let m = Question::MultiSelect {
            message: "Regions:".into(),
            options: opts,
            defaults: vec![0, 1, 9],
        };
        assert_eq!(ask("", m.clone()).0, Ok(json!(["dev", "staging"])));
        assert_eq!(ask("3, 1\n", m.clone()).0, Ok(json!(["dev", "production"])));
        assert_eq!(ask("-\n", m).0, Ok(json!([])));
    }
}
