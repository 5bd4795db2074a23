//! The bridge's protocol state machine for one plugin process, sans I/O.
//!
//! [`Core`] is fed the plugin's stdout bytes, the calls sessions start and cancel, and the
//! time (milliseconds on a monotonic clock the caller keeps); it answers with [`Action`]s:
//! bytes to write to the plugin's stdin, replies for calls, notes for a calling client's
//! stderr, lines for the plugin log, and the handshake's and health checks' verdicts. It
//! owns the handshake of each profile, request/response correlation (replies may come in
//! any order), the plugin's requests to the host (grants), and the ping schedule.

use crate::config::{Options, Profile};
use crate::frame::{Decoder, Frame};
use crate::message::{self, Incoming, RpcError};
use crate::profile::{self, Tool};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// The MCP protocol revision the bridge asks for.
pub const MCP_PROTOCOL_VERSION: &str = "2025-06-18";

/// Facts about the host and the plugin that go into the handshake.
#[derive(Clone, Debug)]
pub struct HostInfo {
    /// The plugin's name in ngd's configuration.
    pub name: String,
    /// This bridge's version string.
    pub host_version: String,
    /// StreamNook's `data_dir`.
    pub data_dir: String,
    /// StreamNook's `log_dir`.
    pub log_dir: String,
}

/// What the core asks its I/O shell to do.
#[derive(Debug)]
pub enum Action {
    /// Write these bytes (one framed message) to the plugin's stdin.
    Send(Vec<u8>),
    /// The handshake is done; [`Core::catalog`] is the command list.
    Ready,
    /// The handshake failed. `disable` says restarting will not help (the plugin answered
    /// definitively: a version mismatch, no tools).
    Failed {
        /// Why, for the log, the error hello and `ngd status`.
        reason: String,
        /// Disable rather than restart.
        disable: bool,
    },
    /// A call has its answer.
    Reply {
        /// The call (its request id).
        call: u64,
        /// The answer.
        outcome: Outcome,
    },
    /// A line for the calling client's stderr (progress, a published event).
    Note {
        /// The call it belongs to.
        call: u64,
        /// The text, without a newline.
        text: String,
    },
    /// A line for the plugin log (the bridge's stderr), without a newline.
    Log(String),
    /// The plugin failed its health checks; restart it.
    Unhealthy(String),
    /// The plugin answered `shutdown`.
    ShutdownAnswered,
}

/// How a call ended.
#[derive(Debug)]
pub enum Outcome {
    /// The result, as the plugin's JSON text.
    Result(Box<RawValue>),
    /// A JSON-RPC error.
    Error(RpcError),
    /// The reply was lost (over the frame cap).
    Lost(String),
}

/// Why a call could not start.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The handshake is not done (or the plugin is stopping).
    #[error("the plugin is not ready")]
    NotReady,
    /// The command is not in the current catalog.
    #[error("`{0}` is not offered by the plugin (any more)")]
    UnknownTool(String),
    /// The request is larger than the plugin accepts.
    #[error("the request is {len} bytes, over the plugin's frame limit of {limit} bytes")]
    TooLarge {
        /// The framed request's size.
        len: usize,
        /// The limit.
        limit: usize,
    },
}

#[derive(Debug)]
enum Phase {
    Initializing {
        id: u64,
        deadline: u64,
    },
    Listing {
        id: u64,
        deadline: u64,
        tools: Vec<Tool>,
    },
    Ready,
    Failed,
    Stopping {
        id: Option<u64>,
    },
}

#[derive(Debug, Default)]
struct Ping {
    outstanding: Option<u64>,
    misses: u32,
    next_due: u64,
}

/// The state of one plugin process's conversation.
#[derive(Debug)]
pub struct Core {
    opts: Arc<Options>,
    host: Arc<HostInfo>,
    phase: Phase,
    decoder: Decoder,
    next_id: u64,
    calls: HashMap<u64, String>,
    ping: Ping,
    catalog: Vec<Tool>,
    runtime: String,
}

impl Core {
    /// A core for a freshly started plugin; the actions hold its first handshake message.
    pub fn new(opts: Arc<Options>, host: Arc<HostInfo>, now: u64) -> (Self, Vec<Action>) {
        let mut core = Self {
            decoder: Decoder::new(opts.framing, opts.max_frame_bytes),
            phase: Phase::Failed,
            next_id: 1,
            calls: HashMap::new(),
            ping: Ping {
                next_due: now + opts.ping_interval_ms,
                ..Ping::default()
            },
            catalog: Vec::new(),
            runtime: opts.profile.name().to_owned(),
            opts,
            host,
        };
        let mut out = Vec::new();
        let deadline = now + core.opts.handshake_timeout_ms;
        let params = match core.opts.profile {
            Profile::Nexo => Some(json!({"host_version": core.host.host_version})),
            Profile::Mcp => Some(json!({
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "ngd", "version": core.host.host_version},
            })),
            Profile::Streamnook => Some(json!({
                "protocol_version": core.opts.protocol_version,
                "host_version": core.host.host_version,
                "plugin_id": core.opts.plugin_id.clone().unwrap_or_else(|| core.host.name.clone()),
                "granted": core.opts.granted.to_json(),
                "data_dir": core.host.data_dir,
                "log_dir": core.host.log_dir,
            })),
            Profile::Plain => None,
        };
        match params {
            Some(p) => {
                let id = core.send_request("initialize", Some(&p), &mut out);
                core.phase = Phase::Initializing { id, deadline };
            }
            None => core.become_ready(Vec::new(), &mut out),
        }
        (core, out)
    }

    /// The commands of the finished handshake.
    pub fn catalog(&self) -> &[Tool] {
        &self.catalog
    }

    /// A short description of the plugin (for the hello's `runtime`).
    pub fn runtime(&self) -> &str {
        &self.runtime
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> Vec<u64> {
        self.calls.keys().copied().collect()
    }

    /// Whether the decoder holds part of a frame.
    pub fn has_partial_frame(&self) -> bool {
        self.decoder.has_partial()
    }

    /// Bytes from the plugin's stdout.
    pub fn on_bytes(&mut self, data: &[u8], now: u64) -> Vec<Action> {
        let mut out = Vec::new();
        for frame in self.decoder.feed(data) {
            match frame {
                Frame::Message(body) => match message::parse(&body) {
                    Ok(m) => self.on_message(m, now, &mut out),
                    Err(e) => match recover(&body) {
                        Some((skipped, m)) => {
                            out.push(Action::Log(format!(
                                "stray output skipped before a message: {}",
                                preview(&body[..skipped])
                            )));
                            self.on_message(m, now, &mut out);
                        }
                        None => out.push(Action::Log(format!(
                            "malformed message skipped ({e}): {}",
                            preview(&body)
                        ))),
                    },
                },
                Frame::Garbage(text) => out.push(Action::Log(format!(
                    "stray output skipped: {}",
                    preview(text.as_bytes())
                ))),
                Frame::Oversized { len, id } => {
                    let limit = self.opts.max_frame_bytes;
                    let what = format!(
                        "a {len}-byte message from the plugin is over the {limit}-byte frame cap"
                    );
                    out.push(Action::Log(format!("{what}; skipped")));
                    match id.and_then(|i| i.parse::<u64>().ok()) {
                        Some(id) if self.calls.remove(&id).is_some() => out.push(Action::Reply {
                            call: id,
                            outcome: Outcome::Lost(format!("{what} (raise max_frame_bytes)")),
                        }),
                        Some(id) if self.handshake_id() == Some(id) => {
                            self.phase = Phase::Failed;
                            out.push(Action::Failed {
                                reason: format!("handshake reply lost: {what}"),
                                disable: true,
                            });
                        }
                        _ => {}
                    }
                }
            }
        }
        out
    }

    /// Starts a call to the command `name`; the actions send it.
    pub fn start_call(
        &mut self,
        name: &str,
        args: &Map<String, Value>,
        now: u64,
    ) -> Result<(u64, Vec<Action>), CallError> {
        if !matches!(self.phase, Phase::Ready) {
            return Err(CallError::NotReady);
        }
        let tool = self
            .catalog
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| CallError::UnknownTool(name.to_owned()))?;
        let id = self.next_id;
        let (method, params) = profile::call(self.opts.profile, tool, args, id);
        let body = message::request_raw(id, &method, Some(&params));
        let len = self.opts.framing.framed_len(body.len());
        let limit = self.opts.plugin_max_frame_bytes;
        if len > limit {
            return Err(CallError::TooLarge { len, limit });
        }
        self.next_id += 1;
        self.calls.insert(id, name.to_owned());
        self.ping.next_due = self.ping.next_due.max(now + self.opts.ping_interval_ms);
        Ok((id, vec![Action::Send(self.opts.framing.encode(&body))]))
    }

    /// The client of `call` went away or interrupted it: its result will be discarded.
    /// MCP servers are told with `notifications/cancelled`.
    pub fn cancel(&mut self, call: u64, reason: &str) -> Vec<Action> {
        if self.calls.remove(&call).is_none() {
            return Vec::new();
        }
        let mut out = vec![Action::Log(format!(
            "call {call} cancelled ({reason}); its result will be discarded"
        ))];
        if self.opts.profile == Profile::Mcp {
            self.send_notification(
                "notifications/cancelled",
                Some(&json!({"requestId": call, "reason": reason})),
                &mut out,
            );
        }
        out
    }

    /// Time passes: the handshake deadline and the ping schedule.
    pub fn tick(&mut self, now: u64) -> Vec<Action> {
        let mut out = Vec::new();
        match &self.phase {
            Phase::Initializing { deadline, .. } | Phase::Listing { deadline, .. }
                if now >= *deadline =>
            {
                let step = match self.phase {
                    Phase::Listing { .. } => "tools/list",
                    _ => "initialize",
                };
                self.phase = Phase::Failed;
                out.push(Action::Failed {
                    reason: format!(
                        "no answer to `{step}` within {} ms",
                        self.opts.handshake_timeout_ms
                    ),
                    disable: false,
                });
            }
            Phase::Ready
                if self.opts.ping_interval_ms > 0
                    && self.calls.is_empty()
                    && now >= self.ping.next_due =>
            {
                if self.ping.outstanding.take().is_some() {
                    self.ping.misses += 1;
                }
                if self.ping.misses >= self.opts.ping_misses {
                    out.push(Action::Unhealthy(format!(
                        "no answer to {} pings in a row ({} ms apart)",
                        self.ping.misses, self.opts.ping_interval_ms
                    )));
                    self.phase = Phase::Failed;
                    return out;
                }
                let id = self.send_request("ping", None, &mut out);
                self.ping.outstanding = Some(id);
                self.ping.next_due = now + self.opts.ping_interval_ms;
            }
            _ => {}
        }
        out
    }

    /// Begins an orderly stop: `shutdown` for nexo and StreamNook (answered with
    /// [`Action::ShutdownAnswered`]); nothing for the others, whose stop is closing stdin.
    pub fn shutdown(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        let id = match self.opts.profile {
            Profile::Nexo | Profile::Streamnook if matches!(self.phase, Phase::Ready) => {
                Some(self.send_request("shutdown", None, &mut out))
            }
            _ => None,
        };
        self.phase = Phase::Stopping { id };
        if id.is_none() {
            out.push(Action::ShutdownAnswered);
        }
        out
    }

    /// What follows an answered `shutdown`: StreamNook's `exit` notification.
    pub fn exit(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        if self.opts.profile == Profile::Streamnook {
            self.send_notification("exit", None, &mut out);
        }
        out
    }

    fn handshake_id(&self) -> Option<u64> {
        match self.phase {
            Phase::Initializing { id, .. } | Phase::Listing { id, .. } => Some(id),
            _ => None,
        }
    }

    fn send_request(&mut self, method: &str, params: Option<&Value>, out: &mut Vec<Action>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        out.push(Action::Send(
            self.opts
                .framing
                .encode(&message::request(id, method, params)),
        ));
        id
    }

    fn send_notification(&self, method: &str, params: Option<&Value>, out: &mut Vec<Action>) {
        out.push(Action::Send(
            self.opts
                .framing
                .encode(&message::notification(method, params)),
        ));
    }

    fn on_message(&mut self, m: Incoming, now: u64, out: &mut Vec<Action>) {
        match m {
            Incoming::Response {
                id: Some(id),
                outcome,
                ..
            } => self.on_response(id, outcome, now, out),
            Incoming::Response { raw_id, .. } => out.push(Action::Log(format!(
                "a reply with id {raw_id}, which the bridge never sent, discarded"
            ))),
            Incoming::Request { id, method, params } => {
                self.on_host_request(&id, &method, &params, out)
            }
            Incoming::Notification { method, params } => {
                self.on_notification(&method, &params, out)
            }
        }
    }

    fn on_response(
        &mut self,
        id: u64,
        outcome: Result<Box<RawValue>, RpcError>,
        now: u64,
        out: &mut Vec<Action>,
    ) {
        if self.ping.outstanding == Some(id) {
            // Any answer, even "method not found" (nexo has no `ping`), shows it is alive.
            self.ping.outstanding = None;
            self.ping.misses = 0;
            return;
        }
        if let Some(_name) = self.calls.remove(&id) {
            let outcome = match outcome {
                Ok(raw) => Outcome::Result(raw),
                Err(e) => Outcome::Error(e),
            };
            self.ping.next_due = self.ping.next_due.max(now + self.opts.ping_interval_ms);
            out.push(Action::Reply { call: id, outcome });
            return;
        }
        match &mut self.phase {
            Phase::Initializing { id: hs, .. } if *hs == id => {
                self.on_initialized(outcome, now, out)
            }
            Phase::Listing { id: hs, .. } if *hs == id => self.on_tools_list(outcome, now, out),
            Phase::Stopping { id: Some(s) } if *s == id => out.push(Action::ShutdownAnswered),
            _ => out.push(Action::Log(format!(
                "a reply to request {id} discarded (cancelled, timed out, or never sent)"
            ))),
        }
    }

    fn on_initialized(
        &mut self,
        outcome: Result<Box<RawValue>, RpcError>,
        now: u64,
        out: &mut Vec<Action>,
    ) {
        let result = match outcome {
            Ok(raw) => serde_json::from_str::<Value>(raw.get()).unwrap_or(Value::Null),
            Err(e) => {
                let reason = if e.code == -32600 && self.opts.profile == Profile::Streamnook {
                    format!(
                        "protocol version mismatch: the plugin refused protocol_version {} ({}: {})",
                        self.opts.protocol_version, e.code, e.message
                    )
                } else {
                    format!("`initialize` failed: {} ({})", e.message, e.code)
                };
                self.phase = Phase::Failed;
                out.push(Action::Failed {
                    reason,
                    disable: true,
                });
                return;
            }
        };
        match self.opts.profile {
            Profile::Nexo => {
                let plugin = &result["manifest"]["plugin"];
                let id = plugin["id"].as_str().unwrap_or("");
                if let Some(want) = &self.opts.plugin_id {
                    if want != id {
                        self.fail(
                            format!("the plugin's manifest id is {id:?}, not {want:?}"),
                            out,
                        );
                        return;
                    }
                }
                self.runtime = format!("nexo {} {}", id, plugin["version"].as_str().unwrap_or("?"));
                let tools = match result.get("tools") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(a)) => {
                        match a.iter().map(profile::tool_from_json).collect() {
                            Ok(t) => t,
                            Err(e) => return self.fail(e, out),
                        }
                    }
                    Some(v) => return self.fail(format!("`tools` is not a list: {v}"), out),
                };
                self.become_ready(tools, out);
            }
            Profile::Mcp => {
                let info = &result["serverInfo"];
                self.runtime = format!(
                    "mcp {} {} (protocol {})",
                    info["name"].as_str().unwrap_or("?"),
                    info["version"].as_str().unwrap_or("?"),
                    result["protocolVersion"].as_str().unwrap_or("?"),
                );
                self.send_notification("notifications/initialized", None, out);
                let id = self.send_request("tools/list", None, out);
                self.phase = Phase::Listing {
                    id,
                    deadline: now + self.opts.handshake_timeout_ms,
                    tools: Vec::new(),
                };
            }
            Profile::Streamnook => {
                if let Some(v) = result.get("protocol_version") {
                    if v.as_u64() != Some(self.opts.protocol_version) {
                        self.fail(
                            format!(
                                "protocol version mismatch: the plugin speaks {v}, the bridge {}",
                                self.opts.protocol_version
                            ),
                            out,
                        );
                        return;
                    }
                }
                if let Some(hooks) = result["hooks"].as_array() {
                    for h in hooks.iter().filter_map(Value::as_str) {
                        if !self.opts.granted.events.iter().any(|e| e == h) {
                            out.push(Action::Log(format!(
                                "hook `{h}` is not among the granted events; ignored"
                            )));
                        }
                    }
                }
                self.runtime = format!(
                    "streamnook {} {}",
                    self.opts.plugin_id.as_deref().unwrap_or(&self.host.name),
                    result["plugin_version"].as_str().unwrap_or("?")
                );
                self.send_notification("initialized", None, out);
                self.become_ready(Vec::new(), out);
            }
            Profile::Plain => self.become_ready(Vec::new(), out),
        }
    }

    fn on_tools_list(
        &mut self,
        outcome: Result<Box<RawValue>, RpcError>,
        now: u64,
        out: &mut Vec<Action>,
    ) {
        let result = match outcome {
            Ok(raw) => serde_json::from_str::<Value>(raw.get()).unwrap_or(Value::Null),
            Err(e) => {
                return self.fail(
                    format!("`tools/list` failed: {} ({})", e.message, e.code),
                    out,
                )
            }
        };
        let mut page = match result["tools"].as_array() {
            Some(a) => match a
                .iter()
                .map(profile::tool_from_json)
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(t) => t,
                Err(e) => return self.fail(e, out),
            },
            None => {
                return self.fail(
                    format!("`tools/list` returned no `tools` list: {result}"),
                    out,
                )
            }
        };
        let Phase::Listing { tools, .. } = &mut self.phase else {
            return;
        };
        let mut tools = std::mem::take(tools);
        tools.append(&mut page);
        if tools.len() > 10_000 {
            return self.fail("more than 10000 tools".into(), out);
        }
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(cursor) => {
                let id = self.send_request("tools/list", Some(&json!({"cursor": cursor})), out);
                self.phase = Phase::Listing {
                    id,
                    deadline: now + self.opts.handshake_timeout_ms,
                    tools,
                };
            }
            None => self.become_ready(tools, out),
        }
    }

    fn fail(&mut self, reason: String, out: &mut Vec<Action>) {
        self.phase = Phase::Failed;
        out.push(Action::Failed {
            reason,
            disable: true,
        });
    }

    fn become_ready(&mut self, mut tools: Vec<Tool>, out: &mut Vec<Action>) {
        for m in &self.opts.methods {
            if let Some(i) = tools.iter().position(|t| t.name == m.name) {
                out.push(Action::Log(format!(
                    "configured method `{}` replaces the plugin's tool of that name",
                    m.name
                )));
                tools.remove(i);
            }
            tools.push(m.into());
        }
        let mut seen = std::collections::HashSet::new();
        tools.retain(|t| {
            let first = seen.insert(t.name.clone());
            if !first {
                out.push(Action::Log(format!(
                    "tool `{}` listed twice; the first kept",
                    t.name
                )));
            }
            first
        });
        if tools.is_empty() {
            return self.fail("the plugin offers no tools".into(), out);
        }
        self.catalog = tools;
        self.phase = Phase::Ready;
        out.push(Action::Ready);
    }

    fn on_host_request(
        &mut self,
        id: &RawValue,
        method: &str,
        params: &Value,
        out: &mut Vec<Action>,
    ) {
        let granted = self.opts.granted.host_methods.iter().any(|m| m == method);
        let known = KNOWN_HOST_METHODS.contains(&method)
            || match self.opts.profile {
                Profile::Nexo => NEXO_HOST_METHODS.contains(&method),
                Profile::Mcp => MCP_HOST_METHODS.contains(&method),
                Profile::Streamnook => STREAMNOOK_HOST_METHODS.contains(&method),
                Profile::Plain => false,
            };
        let reply = match method {
            "ping" => message::reply(id, &json!({})),
            "log" if granted => {
                out.push(Action::Log(format!("plugin: {}", log_text(params))));
                message::reply(id, &json!({}))
            }
            "notify" if granted => {
                let text = log_text(params);
                match self.sole_call() {
                    Some(call) => out.push(Action::Note { call, text }),
                    None => out.push(Action::Log(format!("plugin notice: {text}"))),
                }
                message::reply(id, &json!({}))
            }
            _ if !granted && known => {
                out.push(Action::Log(format!(
                    "denied the plugin's `{method}`: not granted"
                )));
                message::reply_error(
                    id,
                    -32000,
                    &format!("capability_denied: `{method}` is not granted"),
                    Some(&json!({"name": "capability_denied", "retry_after_ms": null})),
                )
            }
            _ if granted => message::reply_error(
                id,
                -32601,
                &format!("method not found: ngd does not provide `{method}`"),
                None,
            ),
            _ => message::reply_error(id, -32601, "method not found", None),
        };
        out.push(Action::Send(self.opts.framing.encode(&reply)));
    }

    fn on_notification(&mut self, method: &str, params: &Value, out: &mut Vec<Action>) {
        match method {
            "notifications/progress" => {
                let call = params["progressToken"]
                    .as_u64()
                    .filter(|c| self.calls.contains_key(c));
                let mut text = format!("progress {}", number(&params["progress"]));
                if let Some(total) = params.get("total").filter(|t| !t.is_null()) {
                    text.push_str(&format!("/{}", number(total)));
                }
                if let Some(m) = params["message"].as_str() {
                    text.push_str(&format!(": {m}"));
                }
                self.note_or_log(call, text, out);
            }
            "progress" => {
                let call = ["id", "request_id", "call_id"]
                    .iter()
                    .find_map(|k| params[*k].as_u64())
                    .filter(|c| self.calls.contains_key(c))
                    .or_else(|| self.sole_call());
                self.note_or_log(call, format!("progress {}", compact(params)), out);
            }
            "broker.publish" | "llm.complete.delta" => {
                let call = self.sole_call();
                let text = match method {
                    "broker.publish" => format!(
                        "broker.publish {}: {}",
                        params["topic"].as_str().unwrap_or("?"),
                        compact(&params["event"]["payload"])
                    ),
                    _ => format!("{method} {}", compact(params)),
                };
                self.note_or_log(call, text, out);
            }
            "notifications/message" | "log" => {
                out.push(Action::Log(format!("plugin: {}", log_text(params))));
            }
            _ => out.push(Action::Log(format!(
                "notification `{method}` ignored: {}",
                preview(compact(params).as_bytes())
            ))),
        }
    }

    fn note_or_log(&self, call: Option<u64>, text: String, out: &mut Vec<Action>) {
        match call {
            Some(call) => out.push(Action::Note { call, text }),
            None => out.push(Action::Log(format!("plugin (no call): {text}"))),
        }
    }

    fn sole_call(&self) -> Option<u64> {
        match self.calls.len() {
            1 => self.calls.keys().next().copied(),
            _ => None,
        }
    }
}

/// Host methods the bridge knows in every profile.
const KNOWN_HOST_METHODS: &[&str] = &["log", "notify"];
/// nexo's host requests.
const NEXO_HOST_METHODS: &[&str] = &["memory.recall", "llm.complete"];
/// MCP's client requests.
const MCP_HOST_METHODS: &[&str] = &["sampling/createMessage", "roots/list", "elicitation/create"];
/// StreamNook's host methods named in the protocol text.
const STREAMNOOK_HOST_METHODS: &[&str] = &["get_followed_live"];

fn log_text(params: &Value) -> String {
    match params {
        Value::String(s) => s.clone(),
        Value::Object(m) => {
            let level = m.get("level").and_then(Value::as_str);
            let text = ["message", "msg", "text", "data"]
                .iter()
                .find_map(|k| m.get(*k))
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .unwrap_or_else(|| params.to_string());
            match level {
                Some(l) => format!("[{l}] {text}"),
                None => text,
            }
        }
        other => other.to_string(),
    }
}

fn number(v: &Value) -> String {
    match v {
        Value::Null => "?".into(),
        other => other.to_string(),
    }
}

fn compact(v: &Value) -> String {
    v.to_string()
}

/// A line that is not a message may be stray output the plugin wrote without a newline,
/// followed by a real message (a partial line completed by the next reply). Finds the
/// first `{` (of at most 64) from which the rest of the line is a whole message.
fn recover(body: &[u8]) -> Option<(usize, Incoming)> {
    body.iter()
        .enumerate()
        .skip(1)
        .filter(|(_, b)| **b == b'{')
        .take(64)
        .find_map(|(i, _)| message::parse(&body[i..]).ok().map(|m| (i, m)))
}

/// At most 200 characters of a skipped message, for the log.
fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut s: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests;
