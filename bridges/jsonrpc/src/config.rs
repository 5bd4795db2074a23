//! The jsonrpc-specific keys of a `[[plugin]]` table, checked and defaulted.

use crate::frame::Framing;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// The handshake and call conventions a plugin follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// nexo's plugin contract: `initialize` → manifest + tools, `tool.invoke`, `shutdown`.
    Nexo,
    /// Model Context Protocol over stdio: `initialize`, `notifications/initialized`,
    /// `tools/list`, `tools/call`, `notifications/cancelled`.
    Mcp,
    /// StreamNook protocol v1: `initialize` with grants and directories, `initialized`,
    /// `ping`, `shutdown` → `exit`.
    Streamnook,
    /// No handshake; the configured `methods` are called directly.
    Plain,
}

impl Profile {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "nexo" => Some(Self::Nexo),
            "mcp" => Some(Self::Mcp),
            "streamnook" => Some(Self::Streamnook),
            "plain" => Some(Self::Plain),
            _ => None,
        }
    }

    /// The name used in configuration and messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nexo => "nexo",
            Self::Mcp => "mcp",
            Self::Streamnook => "streamnook",
            Self::Plain => "plain",
        }
    }

    /// The framing a plugin of this profile uses unless configured otherwise.
    pub fn default_framing(self) -> Framing {
        match self {
            Self::Streamnook => Framing::ContentLength,
            _ => Framing::Ndjson,
        }
    }

    /// The largest frame a plugin of this profile is known to accept: nexo's SDK drops
    /// frames over 1 MiB without a reply; StreamNook freezes 4 MiB.
    pub fn default_plugin_frame_limit(self) -> usize {
        match self {
            Self::Nexo => 1024 * 1024,
            _ => DEFAULT_FRAME_CAP,
        }
    }
}

/// The default cap on one frame, each direction.
pub const DEFAULT_FRAME_CAP: usize = 4 * 1024 * 1024;

/// What the user granted the plugin (StreamNook's `granted` object; the host methods also
/// gate plugin → host requests in every profile).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Granted {
    /// Events the plugin may hook.
    pub events: Vec<String>,
    /// Host methods the plugin may call.
    pub host_methods: Vec<String>,
    /// Credential kinds.
    pub credentials: Vec<String>,
    /// UI surfaces.
    pub ui: Vec<String>,
}

impl Granted {
    /// The `granted` object of StreamNook's `initialize`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "events": self.events,
            "host_methods": self.host_methods,
            "credentials": self.credentials,
            "ui": self.ui,
        })
    }
}

/// A method named in the configuration, served as a command.
#[derive(Clone, Debug, PartialEq)]
pub struct MethodDef {
    /// The command name.
    pub name: String,
    /// The JSON-RPC method called (the name by default).
    pub method: String,
    /// One line for `--help`.
    pub description: String,
    /// A JSON Schema of the params object (`{"type":"object"}` by default).
    pub input_schema: Value,
}

/// The bridge's options.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The handshake profile.
    pub profile: Profile,
    /// The framing.
    pub framing: Framing,
    /// The cap on a frame from the plugin.
    pub max_frame_bytes: usize,
    /// The largest frame the plugin accepts; a bigger request fails at the bridge.
    pub plugin_max_frame_bytes: usize,
    /// What is granted.
    pub granted: Granted,
    /// Methods served as commands (in addition to a catalog's tools).
    pub methods: Vec<MethodDef>,
    /// Calls run at once (the hello's `max_sessions`).
    pub concurrency: u32,
    /// Time allowed for the handshake.
    pub handshake_timeout_ms: u64,
    /// Ping interval while no call runs (0: never).
    pub ping_interval_ms: u64,
    /// Consecutive unanswered pings that make the plugin unhealthy.
    pub ping_misses: u32,
    /// Delays before the 1st, 2nd, 3rd... restart (the last repeats).
    pub restart_backoff_ms: Vec<u64>,
    /// Restarts allowed within `restart_window_ms`; one more disables the plugin.
    pub max_restarts: u32,
    /// The window for `max_restarts`.
    pub restart_window_ms: u64,
    /// How long `shutdown` and then `exit` may take before the plugin is killed.
    pub stop_timeout_ms: u64,
    /// The plugin id (StreamNook's `plugin_id`; checked against nexo's manifest).
    pub plugin_id: Option<String>,
    /// StreamNook's `data_dir`.
    pub data_dir: Option<PathBuf>,
    /// StreamNook's `log_dir`.
    pub log_dir: Option<PathBuf>,
    /// The protocol version offered in StreamNook's `initialize`.
    pub protocol_version: u64,
}

const KEYS: &[&str] = &[
    "profile",
    "framing",
    "max_frame_bytes",
    "plugin_max_frame_bytes",
    "granted",
    "grants",
    "methods",
    "concurrency",
    "plugin_handshake_timeout_ms",
    "plugin_ping_interval_ms",
    "plugin_ping_misses",
    "plugin_restart_backoff_ms",
    "plugin_max_restarts",
    "plugin_restart_window_ms",
    "plugin_stop_timeout_ms",
    "plugin_id",
    "data_dir",
    "log_dir",
    "protocol_version",
];

impl Options {
    /// Checks and reads the options.
    pub fn from_map(map: &Map<String, Value>) -> Result<Self, String> {
        for key in map.keys() {
            if !KEYS.contains(&key.as_str()) {
                return Err(format!(
                    "unknown key `{key}` for protocol \"jsonrpc\" (known: {})",
                    KEYS.join(", ")
                ));
            }
        }
        let profile = match map.get("profile") {
            None => Profile::Plain,
            Some(Value::String(s)) => Profile::parse(s).ok_or_else(|| {
                format!("profile = {s:?}: expected \"nexo\", \"mcp\", \"streamnook\" or \"plain\"")
            })?,
            Some(v) => return Err(format!("profile = {v}: expected a string")),
        };
        let framing = match map.get("framing") {
            None => profile.default_framing(),
            Some(Value::String(s)) => Framing::parse(s).ok_or_else(|| {
                format!("framing = {s:?}: expected \"ndjson\" or \"content-length\"")
            })?,
            Some(v) => return Err(format!("framing = {v}: expected a string")),
        };
        let max_frame_bytes = size(map, "max_frame_bytes", DEFAULT_FRAME_CAP)?;
        let plugin_max_frame_bytes = size(
            map,
            "plugin_max_frame_bytes",
            profile.default_plugin_frame_limit(),
        )?;
        if map.contains_key("granted") && map.contains_key("grants") {
            return Err("both `granted` and `grants`: use one".into());
        }
        let granted = match map.get("granted").or_else(|| map.get("grants")) {
            None => Granted {
                host_methods: vec!["log".into()],
                ..Granted::default()
            },
            Some(v) => granted(v)?,
        };
        let methods = match map.get("methods") {
            None => Vec::new(),
            Some(v) => methods(v)?,
        };
        if profile == Profile::Plain && methods.is_empty() {
            return Err(
                "no commands: set profile = \"nexo\", \"mcp\" or \"streamnook\", or list `methods`"
                    .into(),
            );
        }
        if profile == Profile::Streamnook && methods.is_empty() {
            return Err("profile \"streamnook\" has no tool catalog: list the `methods` to serve as commands".into());
        }
        let concurrency = int(map, "concurrency", 16)?;
        if !(1..=1024).contains(&concurrency) {
            return Err(format!("concurrency = {concurrency}: expected 1 to 1024"));
        }
        let backoff = match map.get("plugin_restart_backoff_ms") {
            None => vec![1000, 5000, 25000],
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|v| {
                    v.as_u64().ok_or_else(|| {
                        format!("plugin_restart_backoff_ms: {v} is not a whole number")
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(format!(
                    "plugin_restart_backoff_ms = {v}: expected a non-empty list of milliseconds"
                ))
            }
        };
        let ping_misses = int(map, "plugin_ping_misses", 3)?;
        if ping_misses == 0 {
            return Err("plugin_ping_misses = 0: expected at least 1".into());
        }
        let handshake_timeout_ms = int(map, "plugin_handshake_timeout_ms", 10_000)?;
        if handshake_timeout_ms == 0 {
            return Err("plugin_handshake_timeout_ms = 0: expected at least 1".into());
        }
        Ok(Self {
            profile,
            framing,
            max_frame_bytes,
            plugin_max_frame_bytes,
            granted,
            methods,
            concurrency: concurrency as u32,
            handshake_timeout_ms,
            ping_interval_ms: int(map, "plugin_ping_interval_ms", 30_000)?,
            ping_misses: ping_misses as u32,
            restart_backoff_ms: backoff,
            max_restarts: int(map, "plugin_max_restarts", 3)? as u32,
            restart_window_ms: int(map, "plugin_restart_window_ms", 600_000)?,
            stop_timeout_ms: int(map, "plugin_stop_timeout_ms", 5_000)?,
            plugin_id: string(map, "plugin_id")?,
            data_dir: string(map, "data_dir")?.map(PathBuf::from),
            log_dir: string(map, "log_dir")?.map(PathBuf::from),
            protocol_version: int(map, "protocol_version", 1)?,
        })
    }
}

fn int(map: &Map<String, Value>, key: &str, default: u64) -> Result<u64, String> {
    match map.get(key) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .filter(|n| *n <= u64::from(u32::MAX) * 1000)
            .ok_or_else(|| format!("{key} = {v}: expected a whole number")),
    }
}

fn size(map: &Map<String, Value>, key: &str, default: usize) -> Result<usize, String> {
    let n = int(map, key, default as u64)?;
    if !(64..=(1u64 << 30)).contains(&n) {
        return Err(format!("{key} = {n}: expected 64 bytes to 1 GiB"));
    }
    Ok(n as usize)
}

fn string(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(v) => Err(format!("{key} = {v}: expected a non-empty string")),
    }
}

fn strings(v: &Value, what: &str) -> Result<Vec<String>, String> {
    match v {
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{what}: {x} is not a string"))
            })
            .collect(),
        _ => Err(format!("{what} = {v}: expected a list of strings")),
    }
}

fn granted(v: &Value) -> Result<Granted, String> {
    match v {
        Value::Array(_) => Ok(Granted {
            host_methods: strings(v, "granted")?,
            ..Granted::default()
        }),
        Value::Object(m) => {
            let mut g = Granted::default();
            for (k, val) in m {
                let list = strings(val, &format!("granted.{k}"))?;
                match k.as_str() {
                    "events" => g.events = list,
                    "host_methods" => g.host_methods = list,
                    "credentials" => g.credentials = list,
                    "ui" => g.ui = list,
                    _ => {
                        return Err(format!(
                            "granted.{k}: unknown (expected events, host_methods, credentials, ui)"
                        ))
                    }
                }
            }
            Ok(g)
        }
        _ => Err(format!(
            "granted = {v}: expected a list of host methods or a table of lists"
        )),
    }
}

fn methods(v: &Value) -> Result<Vec<MethodDef>, String> {
    let Value::Array(items) = v else {
        return Err(format!("methods = {v}: expected a list"));
    };
    let mut out: Vec<MethodDef> = Vec::new();
    for item in items {
        let def = match item {
            Value::String(s) => MethodDef {
                name: s.clone(),
                method: s.clone(),
                description: String::new(),
                input_schema: serde_json::json!({"type": "object"}),
            },
            Value::Object(m) => {
                for k in m.keys() {
                    if !["name", "method", "description", "input_schema"].contains(&k.as_str()) {
                        return Err(format!(
                            "methods: unknown key `{k}` (expected name, method, description, input_schema)"
                        ));
                    }
                }
                let name = m
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or("methods: each table needs a string `name`")?
                    .to_owned();
                let method = match m.get("method") {
                    None => name.clone(),
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => {
                        return Err(format!("methods.{name}.method = {v}: expected a string"))
                    }
                };
                let description = match m.get("description") {
                    None => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => {
                        return Err(format!(
                            "methods.{name}.description = {v}: expected a string"
                        ))
                    }
                };
                let input_schema = match m.get("input_schema") {
                    None => serde_json::json!({"type": "object"}),
                    Some(s @ Value::Object(_)) => s.clone(),
                    Some(v) => {
                        return Err(format!(
                            "methods.{name}.input_schema = {v}: expected a table (a JSON Schema)"
                        ))
                    }
                };
                MethodDef {
                    name,
                    method,
                    description,
                    input_schema,
                }
            }
            other => return Err(format!("methods: {other} is neither a name nor a table")),
        };
        if def.name.is_empty() || def.name.contains(['/', '\0']) {
            return Err(format!(
                "methods: {:?} is not a usable command name",
                def.name
            ));
        }
        if out.iter().any(|d| d.name == def.name) {
            return Err(format!("methods: `{}` is listed twice", def.name));
        }
        out.push(def);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn opts(v: Value) -> Result<Options, String> {
        Options::from_map(v.as_object().unwrap())
    }

    #[test]
    fn defaults_per_profile() {
        let o = opts(json!({"profile": "nexo"})).unwrap();
        assert_eq!(o.framing, Framing::Ndjson);
        assert_eq!(o.plugin_max_frame_bytes, 1 << 20);
        assert_eq!(o.max_frame_bytes, 4 << 20);
        assert_eq!(o.restart_backoff_ms, [1000, 5000, 25000]);
        assert_eq!(o.granted.host_methods, ["log"]);
        let o = opts(json!({"profile": "streamnook", "methods": ["greet"]})).unwrap();
        assert_eq!(o.framing, Framing::ContentLength);
        assert_eq!(o.plugin_max_frame_bytes, 4 << 20);
    }

    #[test]
    fn rejects_bad_values() {
        for (v, needle) in [
            (json!({"profile": "lsp"}), "profile"),
            (json!({"profile": "mcp", "framing": "xml"}), "framing"),
            (json!({"profile": "mcp", "bogus": 1}), "unknown key `bogus`"),
            (json!({}), "no commands"),
            (json!({"profile": "streamnook"}), "methods"),
            (json!({"profile": "mcp", "concurrency": 0}), "concurrency"),
            (
                json!({"profile": "mcp", "max_frame_bytes": 1}),
                "max_frame_bytes",
            ),
            (json!({"profile": "mcp", "granted": 3}), "granted"),
            (json!({"profile": "mcp", "granted": {"x": []}}), "granted.x"),
            (
                json!({"profile": "mcp", "granted": [], "grants": []}),
                "both",
            ),
            (
                json!({"profile": "mcp", "plugin_restart_backoff_ms": []}),
                "plugin_restart_backoff_ms",
            ),
            (
                json!({"profile": "mcp", "methods": [{"name": "a"}, "a"]}),
                "twice",
            ),
            (
                json!({"profile": "mcp", "methods": [{"name": "a", "x": 1}]}),
                "unknown key `x`",
            ),
            (
                json!({"profile": "mcp", "plugin_handshake_timeout_ms": -1}),
                "plugin_handshake_timeout_ms",
            ),
        ] {
            let e = opts(v.clone()).unwrap_err();
            assert!(e.contains(needle), "{v}: {e}");
        }
    }

    #[test]
    fn granted_forms_and_methods() {
        let o = opts(json!({
            "profile": "plain",
            "grants": {"host_methods": ["log", "notify"], "events": ["on_watch_tick"]},
            "methods": ["a", {"name": "b", "method": "x.b", "description": "B",
                              "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}],
        }))
        .unwrap();
        assert_eq!(o.granted.host_methods, ["log", "notify"]);
        assert_eq!(o.granted.events, ["on_watch_tick"]);
        assert_eq!(o.methods[1].method, "x.b");
        assert_eq!(o.methods[0].method, "a");
        let o = opts(json!({"profile": "mcp", "granted": ["roots/list"]})).unwrap();
        assert_eq!(o.granted.host_methods, ["roots/list"]);
    }
}
