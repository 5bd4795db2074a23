//! One ngw session as one plugin call: the command line resolved to a signature and
//! parsed, stdin turned into the call's input, the plugin's output written for a shell,
//! engine calls answered from the session, Ctrl-C relayed.
//!
//! Exit codes: 0 success; 1 the plugin reported an error (or returned an error value, or
//! a value with no shell form); 2 a usage error (Nu's parser wording); 1, or 128+N when
//! the plugin died of signal N, when the plugin failed during the call.

use crate::args::{self, Context, Parsed, Signature, Source};
use crate::host::{Event, Window};
use crate::json::J;
use crate::msg::{
    self, ByteStreamType, EngineCall, Header, LabeledError, Response, Span, StreamData,
};
use crate::nuon;
use crate::obj;
use crate::plugin::{Call, Conn, Failure, Manager};
use crate::pool;
use crate::report;
use crate::value::{self, Unprintable};
use crossbeam_channel::select;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

/// How stdin becomes the call's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputMode {
    /// A byte stream of type `Unknown`, as Nu passes an external command's output.
    Raw,
    /// A list stream of strings, one per line.
    Lines,
    /// One value parsed from JSON.
    Json,
    /// One value parsed from NUON.
    Nuon,
    /// One string value.
    String,
    /// One binary value.
    Binary,
    /// No input.
    None,
}

impl InputMode {
    /// Parses a mode name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "raw" | "stream" => InputMode::Raw,
            "lines" => InputMode::Lines,
            "json" => InputMode::Json,
            "nuon" => InputMode::Nuon,
            "string" => InputMode::String,
            "binary" => InputMode::Binary,
            "none" => InputMode::None,
            _ => return None,
        })
    }
}

/// How the result is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputMode {
    /// Strings as text (a line each), binary as bytes, other values as JSON.
    Auto,
    /// Everything as `to json` (streams collected into one list).
    Json,
    /// Everything as `to nuon`.
    Nuon,
    /// Strings and bytes exactly, without an added newline; other values as JSON.
    Raw,
}

impl OutputMode {
    /// Parses a mode name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "auto" => OutputMode::Auto,
            "json" => OutputMode::Json,
            "nuon" => OutputMode::Nuon,
            "raw" => OutputMode::Raw,
            _ => return None,
        })
    }
}

/// A command the bridge serves: its signature and the plugin that runs it.
#[derive(Debug, Clone)]
pub struct Command {
    /// The signature.
    pub sig: Signature,
    /// Index of its plugin.
    pub plugin: usize,
}

/// Everything sessions share.
#[derive(Debug)]
pub struct Bridge {
    /// Plugins, each with its manager.
    pub plugins: Vec<Arc<Manager>>,
    /// Commands, by full name.
    pub commands: Vec<Command>,
    /// Default input mode.
    pub input: InputMode,
    /// Default output mode.
    pub output: OutputMode,
    /// `GetPluginConfig`'s answer (a Nu value), if configured.
    pub plugin_config: Option<J>,
    /// Largest stdin read whole (`json`, `string`, `binary` input).
    pub max_input: usize,
}

/// The per-invocation flags the bridge takes out of the command line.
pub const INPUT_FLAG: &str = "--nu-input";
/// See [`INPUT_FLAG`].
pub const OUTPUT_FLAG: &str = "--nu-output";

impl Bridge {
    /// The first words of every command, deduplicated: what ngd routes to the bridge.
    pub fn first_words(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in &self.commands {
            let w = c.sig.name.split(' ').next().unwrap_or("").to_owned();
            if !w.is_empty() && !out.contains(&w) {
                out.push(w);
            }
        }
        out
    }

    /// The command for `words` (the longest signature name they start with) and how many
    /// words it took.
    pub fn resolve(&self, words: &[String]) -> Option<(&Command, usize)> {
        let mut best: Option<(&Command, usize)> = None;
        for c in &self.commands {
            let parts: Vec<&str> = c.sig.name.split(' ').collect();
            if parts.len() <= words.len()
                && parts.iter().zip(words).all(|(p, w)| p == w)
                && best.is_none_or(|(_, n)| parts.len() > n)
            {
                best = Some((c, parts.len()));
            }
        }
        best
    }

    /// Runs one session.
    pub fn handle(&self, s: &mut ngw::Session) -> i32 {
        let mut words = vec![s.command.clone()];
        words.extend(s.args_lossy());
        let mut err = s.stderr();
        let Some((cmd, used)) = self.resolve(&words) else {
            let subs: Vec<String> = self
                .commands
                .iter()
                .filter(|c| c.sig.name.starts_with(&format!("{} ", s.command)))
                .map(|c| format!("  {} - {}", c.sig.name, c.sig.description))
                .collect();
            let text = if subs.is_empty() {
                format!("nu bridge: no plugin command named `{}`\n", s.command)
            } else if words.len() > 1 && !words[1].starts_with('-') {
                format!(
                    "Error: nu::parser::unknown_command\n\n  x `{} {}` is not a command.\n  help: Subcommands:\n{}\n",
                    s.command,
                    words[1],
                    subs.join("\n")
                )
            } else {
                format!(
                    "Usage:\n  > {} <subcommand>\n\nSubcommands:\n{}\n",
                    s.command,
                    subs.join("\n")
                )
            };
            let _ = err.write_all(text.as_bytes());
            return 2;
        };
        let mut rest: Vec<String> = words[used..].to_vec();
        let (input_mode, output_mode) = match self.take_modes(&mut rest) {
            Ok(m) => m,
            Err(text) => {
                let _ = err.write_all(text.as_bytes());
                return 2;
            }
        };
        let src = Source::new(&cmd.sig.name, &rest);
        let ctx = Context {
            cwd: s.cwd.clone(),
            home: s.var("HOME").map(PathBuf::from),
        };
        let call = match args::parse(&cmd.sig, &src, &rest, &ctx) {
            Ok(Parsed::Call(c)) => c,
            Ok(Parsed::Help) => {
                let _ = s
                    .stdout()
                    .write_all(format!("{}\n", cmd.sig.help()).as_bytes());
                return 0;
            }
            Err(e) => {
                let _ = err.write_all(report::render(&e, &src.text).as_bytes());
                return 2;
            }
        };
        let input_mode = if s.is_tty(0) == Some(true)
            && matches!(input_mode, InputMode::Raw | InputMode::Lines)
        {
            InputMode::None
        } else {
            input_mode
        };
        let manager = &self.plugins[cmd.plugin];
        let conn = match manager.acquire() {
            Ok(c) => c,
            Err(f) => {
                let _ = writeln!(err, "nu bridge: {}", f.reason);
                return f.code;
            }
        };
        let run = Run {
            bridge: self,
            sig: &cmd.sig,
            src: &src,
            conn: &conn,
            output: output_mode,
            // Moved out, not copied: only engine calls read it, as text, when they come.
            env: std::mem::take(&mut s.env),
            cwd: s.cwd.clone(),
        };
        let code = run.go(s, call, input_mode);
        manager.release();
        code
    }

    /// Takes `--nu-input X` / `--nu-output X` (or `=X`) out of the arguments (before `--`).
    fn take_modes(&self, rest: &mut Vec<String>) -> Result<(InputMode, OutputMode), String> {
        let (mut input, mut output) = (self.input, self.output);
        let mut i = 0;
        while i < rest.len() {
            if rest[i] == "--" {
                break;
            }
            let (flag, inline) = match rest[i].split_once('=') {
                Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
                None => (rest[i].clone(), None),
            };
            if flag != INPUT_FLAG && flag != OUTPUT_FLAG {
                i += 1;
                continue;
            }
            let value = match inline {
                Some(v) => {
                    rest.remove(i);
                    v
                }
                None if i + 1 < rest.len() => {
                    rest.remove(i);
                    rest.remove(i)
                }
                None => return Err(format!("nu bridge: {flag} needs a value\n")),
            };
            if flag == INPUT_FLAG {
                input = InputMode::parse(&value).ok_or_else(|| {
                    format!("nu bridge: {flag} {value}: expected raw, lines, json, nuon, string, binary or none\n")
                })?;
            } else {
                output = OutputMode::parse(&value).ok_or_else(|| {
                    format!("nu bridge: {flag} {value}: expected auto, json, nuon or raw\n")
                })?;
            }
        }
        Ok((input, output))
    }
}

/// One call in progress.
struct Run<'a> {
    bridge: &'a Bridge,
    sig: &'a Signature,
    src: &'a Source,
    conn: &'a Arc<Conn>,
    output: OutputMode,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    cwd: PathBuf,
}

/// What the output side has collected (for `json`/`nuon` output of streams).
enum Collect {
    None,
    List(Vec<J>),
    Bytes(Vec<u8>, ByteStreamType),
}

impl Run<'_> {
    fn go(&self, s: &mut ngw::Session, call: msg::EvaluatedCall, mode: InputMode) -> i32 {
        let mut err = s.stderr();
        // Inputs read whole come first, so a bad document never reaches the plugin.
        let header = match mode {
            InputMode::Raw => Header::ByteStream(0, ByteStreamType::Unknown),
            InputMode::Lines => Header::ListStream(0),
            InputMode::None => Header::Empty,
            InputMode::Json | InputMode::Nuon | InputMode::String | InputMode::Binary => {
                let mut data = Vec::new();
                let limit = self.bridge.max_input as u64;
                if let Err(e) = s.stdin().take(limit + 1).read_to_end(&mut data) {
                    let _ = writeln!(err, "nu bridge: reading stdin: {e}");
                    return 1;
                }
                if data.len() as u64 > limit {
                    let _ = writeln!(err, "nu bridge: stdin is larger than {limit} bytes");
                    return 1;
                }
                let span = Span::new(0, 0);
                match mode {
                    InputMode::Json => match J::parse(&data) {
                        Ok(v) => Header::Value(value::from_json(&v, span)),
                        Err(e) => {
                            let _ = writeln!(err, "nu bridge: stdin is not JSON: {e}");
                            return 1;
                        }
                    },
                    InputMode::Nuon => {
                        match std::str::from_utf8(&data)
                            .map_err(|_| "it is not UTF-8 text".to_owned())
                            .and_then(|t| nuon::parse(t, span).map_err(|e| e.to_string()))
                        {
                            Ok(v) => Header::Value(v),
                            Err(e) => {
                                let _ = writeln!(err, "nu bridge: stdin is not NUON: {e}");
                                return 1;
                            }
                        }
                    }
                    InputMode::String => match String::from_utf8(data) {
                        Ok(t) => Header::Value(
                            obj! {"String" => obj! {"val" => t, "span" => span.to_value()}},
                        ),
                        Err(_) => {
                            let _ = writeln!(err, "nu bridge: stdin is not UTF-8 text");
                            return 1;
                        }
                    },
                    _ => Header::Value(obj! {"Binary" => obj! {
                    "val" => J::Arr(data.into_iter().map(J::from).collect()),
                    "span" => span.to_value()}}),
                }
            }
        };
        let streaming = matches!(header, Header::ByteStream(..) | Header::ListStream(_));
        let c = match self.conn.start_call(streaming) {
            Ok(c) => c,
            Err(f) => return self.failed(&mut err, &f),
        };
        let header = match (&header, &c.input) {
            (Header::ByteStream(_, t), Some((sid, _))) => Header::ByteStream(*sid, *t),
            (Header::ListStream(_), Some((sid, _))) => Header::ListStream(*sid),
            _ => header,
        };
        let code = self.drive(s, &c, call, header, mode);
        self.conn.finish(c.id);
        code
    }

    fn failed(&self, err: &mut ngw::Output, f: &Failure) -> i32 {
        let _ = writeln!(err, "nu bridge: {} during `{}`", f.reason, self.sig.name);
        f.code
    }

    fn drive(
        &self,
        s: &mut ngw::Session,
        c: &Call,
        call: msg::EvaluatedCall,
        header: Header,
        mode: InputMode,
    ) -> i32 {
        let mut out = s.stdout();
        let mut err = s.stderr();
        let run = msg::call_run(c.id, &self.sig.name, &call, &header.to_value(self.src.head));
        if let Err(f) = self.conn.send(&run) {
            return self.failed(&mut err, &f);
        }
        // The input feeder: stdin to the plugin with Nu's flow-control windows.
        // It runs on a pooled thread; it ends once stdin ends, the plugin drops the stream
        // or fails.
        if let (Some((sid, acks)), Header::ByteStream(..) | Header::ListStream(_)) =
            (&c.input, &header)
        {
            let stdin = s.take_stdin();
            let (conn, sid, acks) = (self.conn.clone(), *sid, acks.clone());
            let lines = mode == InputMode::Lines;
            let span = self.src.head;
            if let Err(e) = pool::spawn("nu-input", move || {
                feed(stdin, &conn, sid, &acks, lines, span)
            }) {
                let _ = self.conn.send(&msg::end(sid));
                let _ = self.conn.send(&msg::drop_stream(sid));
                return self.failed(
                    &mut err,
                    &Failure {
                        reason: format!("cannot start a thread for the input: {e}"),
                        code: 1,
                    },
                );
            }
        }
        let mut env_overlay: Vec<(String, J)> = Vec::new();
        let mut collect = Collect::None;
        let mut out_stream: Option<u64> = None;
        let code = loop {
            let ev = select! {
                recv(c.events) -> ev => match ev {
                    Ok(ev) => ev,
                    Err(_) => break self.failed(&mut err, &Failure { reason: "the call's channel closed".into(), code: 1 }),
                },
                recv(s.interrupts()) -> i => {
                    match i {
                        Ok(ngw::Interrupt::Signal(_) | ngw::Interrupt::ProcessSignal(_)) => {
                            self.conn.interrupt()
                        }
                        Ok(ngw::Interrupt::WindowSize(_)) => {}
                        Ok(ngw::Interrupt::Hangup) | Err(_) => {
                            self.conn.interrupt();
                            if let Some(sid) = out_stream {
                                let _ = self.conn.send(&msg::drop_stream(sid));
                            }
                            break 129;
                        }
                    }
                    continue;
                }
            };
            match ev {
                Event::Response(Response::PipelineData(h)) => match h {
                    Header::Empty => break 0,
                    Header::Value(v) => break self.emit_value(&v, &mut out, &mut err),
                    Header::ListStream(sid) => {
                        out_stream = Some(sid);
                        if matches!(self.output, OutputMode::Json | OutputMode::Nuon) {
                            collect = Collect::List(Vec::new());
                        }
                    }
                    Header::ByteStream(sid, ty) => {
                        out_stream = Some(sid);
                        if matches!(self.output, OutputMode::Json | OutputMode::Nuon) {
                            collect = Collect::Bytes(Vec::new(), ty);
                        }
                    }
                },
                Event::Response(Response::Error(e)) => {
                    let _ = err.write_all(report::render(&e, &self.src.text).as_bytes());
                    break 1;
                }
                Event::Response(other) => {
                    let _ = writeln!(err, "nu bridge: unexpected response to a run: {other:?}");
                    break 1;
                }
                Event::Data(sid, data) => {
                    let code = self.emit_item(data, &mut collect, &mut out, &mut err);
                    let _ = self.conn.send(&msg::ack(sid));
                    if let Some(code) = code {
                        let _ = self.conn.send(&msg::drop_stream(sid));
                        break code;
                    }
                }
                Event::End(sid) => {
                    let _ = self.conn.send(&msg::drop_stream(sid));
                    break self.emit_collected(collect, &mut out, &mut err);
                }
                Event::EngineCall(id, ec) => {
                    let body = self.answer(ec, &mut env_overlay);
                    let _ = self.conn.send(&msg::engine_response(id, body));
                }
                Event::Ack | Event::Drop => {}
                Event::Failed(reason, code) => {
                    break self.failed(&mut err, &Failure { reason, code })
                }
            }
        };
        code
    }

    fn emit_value(&self, v: &J, out: &mut ngw::Output, err: &mut ngw::Output) -> i32 {
        match self.value_text(v) {
            Ok(bytes) => {
                let _ = out.write_all(&bytes);
                0
            }
            Err(u) => {
                let _ = err.write_all(report::render(&u.into_error(), &self.src.text).as_bytes());
                1
            }
        }
    }

    /// A whole value's output.
    fn value_text(&self, v: &J) -> Result<Vec<u8>, Unprintable> {
        if let Some(e) = value::error_of(v) {
            return Err(Unprintable::Error(e));
        }
        Ok(match self.output {
            OutputMode::Json => {
                let mut t = value::value_json_text(v)?;
                t.push('\n');
                t.into_bytes()
            }
            OutputMode::Nuon => {
                let mut t = value::nuon_text(v)?;
                t.push('\n');
                t.into_bytes()
            }
            OutputMode::Auto | OutputMode::Raw => {
                if value::is_nothing(v) {
                    return Ok(Vec::new());
                }
                if let Some(mut b) = value::raw_bytes(v) {
                    if self.output == OutputMode::Auto && matches!(v.single(), Some(("String", _)))
                    {
                        b.push(b'\n');
                    }
                    return Ok(b);
                }
                let mut t = value::value_json_text(v)?;
                t.push('\n');
                t.into_bytes()
            }
        })
    }

    /// One stream item; `Some(code)` ends the call.
    fn emit_item(
        &self,
        data: StreamData,
        collect: &mut Collect,
        out: &mut ngw::Output,
        err: &mut ngw::Output,
    ) -> Option<i32> {
        match (data, collect) {
            (StreamData::List(v), Collect::List(items)) => {
                if let Some(e) = value::error_of(&v) {
                    let _ = err.write_all(report::render(&e, &self.src.text).as_bytes());
                    return Some(1);
                }
                items.push(v);
                None
            }
            (StreamData::Raw(b), Collect::Bytes(buf, _)) => {
                if buf.len() + b.len() > self.bridge.max_input {
                    let _ = writeln!(
                        err,
                        "nu bridge: the output stream is larger than {} bytes; use --nu-output raw",
                        self.bridge.max_input
                    );
                    return Some(1);
                }
                buf.extend_from_slice(&b);
                None
            }
            (StreamData::List(v), _) => {
                let line = match self.output {
                    OutputMode::Raw | OutputMode::Auto => match value::raw_bytes(&v) {
                        Some(mut b) => {
                            if matches!(v.single(), Some(("String", _))) {
                                b.push(b'\n');
                            }
                            Ok(b)
                        }
                        None if value::is_nothing(&v) => Ok(b"null\n".to_vec()),
                        None => value::to_plain(&v).map(|p| {
                            let mut t = value::json_line(&p);
                            t.push('\n');
                            t.into_bytes()
                        }),
                    },
                    _ => self.value_text(&v),
                };
                match line {
                    Ok(b) => {
                        let _ = out.write_all(&b);
                        None
                    }
                    Err(u) => {
                        let _ = err
                            .write_all(report::render(&u.into_error(), &self.src.text).as_bytes());
                        Some(1)
                    }
                }
            }
            (StreamData::Raw(b), _) => {
                let _ = out.write_all(&b);
                None
            }
            (StreamData::RawErr(e), _) => {
                let _ = err.write_all(report::render(&e, &self.src.text).as_bytes());
                Some(1)
            }
        }
    }

    fn emit_collected(
        &self,
        collect: Collect,
        out: &mut ngw::Output,
        err: &mut ngw::Output,
    ) -> i32 {
        let span = self.src.head.to_value();
        let v = match collect {
            Collect::None => return 0,
            Collect::List(items) => obj! {"List" => obj! {"vals" => J::Arr(items), "span" => span}},
            Collect::Bytes(b, ty) => match (ty, String::from_utf8(b)) {
                (ByteStreamType::Binary, Ok(t)) => {
                    obj! {"Binary" => obj! {"val" => J::Arr(t.into_bytes().into_iter().map(J::from).collect()), "span" => span}}
                }
                (_, Ok(t)) => obj! {"String" => obj! {"val" => t, "span" => span}},
                (_, Err(e)) => {
                    obj! {"Binary" => obj! {"val" => J::Arr(e.into_bytes().into_iter().map(J::from).collect()), "span" => span}}
                }
            },
        };
        self.emit_value(&v, out, err)
    }

    /// Answers an engine call from the session.
    fn answer(&self, call: EngineCall, overlay: &mut Vec<(String, J)>) -> J {
        let span = Span::new(0, 0);
        let string = |t: String| obj! {"PipelineData" => Header::Value(obj! {"String" => obj! {"val" => t, "span" => span.to_value()}}).to_value(span)};
        let error = |t: String| obj! {"Error" => LabeledError::msg(t).to_value()};
        let env_value = |v: &str| obj! {"String" => obj! {"val" => v, "span" => span.to_value()}};
        match call {
            EngineCall::GetCurrentDir => string(self.cwd.to_string_lossy().into_owned()),
            EngineCall::GetHelp => string(self.sig.help()),
            EngineCall::GetEnvVar(name) => {
                let v = overlay
                    .iter()
                    .rev()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.clone())
                    .or_else(|| {
                        self.env
                            .iter()
                            .find(|(k, _)| k.to_string_lossy() == name)
                            .map(|(_, v)| env_value(&v.to_string_lossy()))
                    });
                let h = v.map_or(Header::Empty, Header::Value);
                obj! {"PipelineData" => h.to_value(span)}
            }
            EngineCall::GetEnvVars => {
                let mut pairs: Vec<(String, J)> = self
                    .env
                    .iter()
                    .map(|(k, v)| (k.to_string_lossy().into_owned(), env_value(&v.to_string_lossy())))
                    .collect();
                for (k, v) in overlay.iter() {
                    match pairs.iter_mut().find(|(pk, _)| pk == k) {
                        Some(slot) => slot.1 = v.clone(),
                        None => pairs.push((k.clone(), v.clone())),
                    }
                }
                obj! {"ValueMap" => J::Obj(pairs)}
            }
            EngineCall::AddEnvVar(name, v) => {
                overlay.push((name, v));
                obj! {"PipelineData" => Header::Empty.to_value(span)}
            }
            EngineCall::GetPluginConfig => {
                let h = self.bridge.plugin_config.clone().map_or(Header::Empty, Header::Value);
                obj! {"PipelineData" => h.to_value(span)}
            }
            EngineCall::GetSpanContents(sp) => obj! {"PipelineData" => Header::Value(obj! {"Binary" => obj! {
                "val" => J::Arr(self.src.contents(sp).iter().map(|&b| J::from(b)).collect()),
                "span" => sp.to_value()}}).to_value(span)},
            EngineCall::LeaveForeground => obj! {"PipelineData" => Header::Empty.to_value(span)},
            EngineCall::EnterForeground => error("The ngd bridge cannot give a plugin the terminal: its stdin and stdout are the protocol.".into()),
            EngineCall::GetConfig => error("The ngd bridge runs plugins outside Nu and has no Nu configuration to give (GetConfig).".into()),
            EngineCall::NeedsEngine(name) => error(format!(
                "`{name}` needs a Nu engine; the ngd bridge runs plugins outside Nu and cannot evaluate Nu code."
            )),
        }
    }
}

/// Feeds stdin to the plugin as stream `sid`: raw chunks (at most 50 unacknowledged) or
/// lines as string values (at most 100), then `End`.
fn feed(
    mut stdin: ngw::Stdin,
    conn: &Conn,
    sid: u64,
    acks: &crossbeam_channel::Receiver<Event>,
    lines: bool,
    span: Span,
) {
    let mut window = Window::new(lines);
    let mut buf = vec![0u8; 64 * 1024];
    let mut partial: Vec<u8> = Vec::new();
    let mut eof = false;
    let mut queue: std::collections::VecDeque<StreamData> = Default::default();
    loop {
        // Take what flow control says, without blocking when we can send.
        while let Ok(ev) = acks.try_recv() {
            match ev {
                Event::Ack => window.ack(),
                Event::Drop => window.drop_stream(),
                Event::Failed(..) => return,
                _ => {}
            }
        }
        if window.dropped() {
            break;
        }
        if let Some(item) = queue.front() {
            if window.can_send() {
                if conn.send(&msg::data(sid, item)).is_err() {
                    return;
                }
                window.sent();
                queue.pop_front();
                continue;
            }
            match acks.recv() {
                Ok(Event::Ack) => window.ack(),
                Ok(Event::Drop) => window.drop_stream(),
                Ok(Event::Failed(..)) | Err(_) => return,
                Ok(_) => {}
            }
            continue;
        }
        if eof {
            break;
        }
        let n = match stdin.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        if n == 0 {
            eof = true;
            if lines && !partial.is_empty() {
                queue.push_back(line_item(std::mem::take(&mut partial), span));
            }
            continue;
        }
        if lines {
            partial.extend_from_slice(&buf[..n]);
            while let Some(pos) = partial.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = partial.drain(..=pos).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                queue.push_back(line_item(line, span));
            }
        } else {
            queue.push_back(StreamData::Raw(buf[..n].to_vec()));
        }
    }
    let _ = conn.send(&msg::end(sid));
}

fn line_item(line: Vec<u8>, span: Span) -> StreamData {
    StreamData::List(obj! {"String" => obj! {
    "val" => String::from_utf8_lossy(&line).into_owned(), "span" => span.to_value()}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(name: &str) -> Signature {
        let text = format!(
            r#"{{"sig":{{"name":"{name}","description":"d","required_positional":[],"optional_positional":[],"rest_positional":null,"named":[]}},"examples":[]}}"#
        );
        Signature::from_value(&J::parse(text.as_bytes()).unwrap()).unwrap()
    }

    fn bridge(names: &[&str]) -> Bridge {
        Bridge {
            plugins: Vec::new(),
            commands: names
                .iter()
                .map(|n| Command {
                    sig: sig(n),
                    plugin: 0,
                })
                .collect(),
            input: InputMode::Raw,
            output: OutputMode::Auto,
            plugin_config: None,
            max_input: 1 << 20,
        }
    }

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn multi_word_commands_resolve_to_the_longest_name() {
        let b = bridge(&["query", "query json", "from ini", "from eml", "inc"]);
        assert_eq!(b.first_words(), ["query", "from", "inc"]);
        let (c, n) = b.resolve(&words(&["query", "json", "a.b"])).unwrap();
        assert_eq!((c.sig.name.as_str(), n), ("query json", 2));
        let (c, n) = b.resolve(&words(&["query", "xml"])).unwrap();
        assert_eq!((c.sig.name.as_str(), n), ("query", 1));
        assert!(b.resolve(&words(&["from", "csv"])).is_none());
    }

    #[test]
    fn bridge_flags_are_taken_out_before_double_dash() {
        let b = bridge(&["inc"]);
        let mut rest = words(&[
            "--nu-input",
            "json",
            "v",
            "--nu-output=nuon",
            "--",
            "--nu-input",
        ]);
        assert_eq!(
            b.take_modes(&mut rest),
            Ok((InputMode::Json, OutputMode::Nuon))
        );
        assert_eq!(rest, words(&["v", "--", "--nu-input"]));
        assert!(b.take_modes(&mut words(&["--nu-input", "xml"])).is_err());
        assert!(b.take_modes(&mut words(&["--nu-output"])).is_err());
    }
}
