//! The `[[plugin]]` table of the configuration (`docs/ngw.md` §10 and §15.2).
//!
//! A table's `protocol` says what its program speaks. ngd itself speaks only ngw; for any
//! other protocol the keys of the table that are not ngw's own are that protocol's options,
//! collected into [`PluginConfig::options`], checked by the bridge's `validate` when the
//! configuration loads, and handed to the bridge in `NGW_BRIDGE_CONFIG`.
//!
//! A bridge that supervises its plugin has timeouts of its own (the plugin's handshake, its
//! stop), and ngd must not give up on the bridge before the bridge gives up on its plugin:
//! for such a protocol, the defaults of `handshake_timeout_ms` and `stop_timeout_ms` come
//! from the bridge ([`Protocol::ngd_timeouts`]); a value in the table always wins.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The protocol a plugin's program speaks (`protocol = "..."`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum Protocol {
    /// ngw itself: ngd runs `command` as its worker.
    #[default]
    #[serde(rename = "ngw")]
    Ngw,
    /// Nushell's plugin protocol, through `ngd bridge nu`.
    #[serde(rename = "nu")]
    Nu,
    /// JSON-RPC 2.0 over stdio, through `ngd bridge jsonrpc`.
    #[serde(rename = "jsonrpc")]
    JsonRpc,
    /// fledge-v1, through `ngd bridge fledge-v1`.
    #[serde(rename = "fledge-v1")]
    FledgeV1,
}

impl Protocol {
    /// The name used in the configuration and on the bridge's command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Ngw => "ngw",
            Protocol::Nu => "nu",
            Protocol::JsonRpc => "jsonrpc",
            Protocol::FledgeV1 => "fledge-v1",
        }
    }

    /// The protocol named `name` on `ngd bridge`'s command line.
    pub fn from_name(name: &str) -> Option<Protocol> {
        [
            Protocol::Ngw,
            Protocol::Nu,
            Protocol::JsonRpc,
            Protocol::FledgeV1,
        ]
        .into_iter()
        .find(|p| p.as_str() == name)
    }

    /// Checks a bridged protocol's options (the bridge crate's own rules).
    fn validate(self, options: &Map<String, Value>) -> Result<(), String> {
        match self {
            Protocol::Ngw => match options.keys().next() {
                Some(key) => Err(format!(
                    "unknown field `{key}`, expected one of {}",
                    NGW_KEYS.join(", ")
                )),
                None => Ok(()),
            },
            #[cfg(feature = "bridge-nu")]
            Protocol::Nu => ng_bridge_nu::validate(options),
            #[cfg(feature = "bridge-jsonrpc")]
            Protocol::JsonRpc => ng_bridge_jsonrpc::validate(options),
            #[cfg(feature = "bridge-fledge")]
            Protocol::FledgeV1 => ng_bridge_fledge::validate(options),
            #[allow(unreachable_patterns)]
            _ => Err(self.not_built().unwrap_or_default()),
        }
    }

    /// Why this ngd cannot run the protocol's bridge: it was built without it (the
    /// `bridge-*` features of `ng-server`). `None` for a protocol it can run.
    pub fn not_built(self) -> Option<String> {
        let (built, bridge) = match self {
            Protocol::Ngw => (true, ""),
            Protocol::Nu => (cfg!(feature = "bridge-nu"), "nu"),
            Protocol::JsonRpc => (cfg!(feature = "bridge-jsonrpc"), "jsonrpc"),
            Protocol::FledgeV1 => (cfg!(feature = "bridge-fledge"), "fledge"),
        };
        (!built).then(|| format!("this ngd was built without the {bridge} bridge"))
    }

    /// ngd's `(handshake_timeout_ms, stop_timeout_ms)` defaults for this protocol's
    /// bridge, given its options: above the bridge's own plugin timeouts where it has them.
    pub fn ngd_timeouts(self, options: &Map<String, Value>) -> (u64, u64) {
        match self {
            #[cfg(feature = "bridge-jsonrpc")]
            Protocol::JsonRpc => {
                let t = ng_bridge_jsonrpc::ngd_timeouts(options);
                (t.handshake_timeout_ms, t.stop_timeout_ms)
            }
            _ => {
                let _ = options;
                (ten_s(), five_s())
            }
        }
    }
}

/// An SDK ngd carries and makes importable to a plugin's workers (`sdk = "..."`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum Sdk {
    /// The Python SDK (`ngw`, `ngw_contrib`): its directory goes first on the worker's
    /// `PYTHONPATH` ([`crate::python_sdk`]).
    #[serde(rename = "python")]
    Python,
    /// The Ruby worker (`ngw-ruby`): the command is a Ruby interpreter and the worker's
    /// arguments, and ngd runs `INTERPRETER <sdk>/bin/ngw-ruby ARGS...`
    /// ([`crate::carried_sdk::RUBY`]).
    #[serde(rename = "ruby")]
    Ruby,
    /// The Node worker (`ngw-node`): the command is a `node` and the worker's arguments, and
    /// ngd runs `NODE <sdk>/bin/ngw-node ARGS...` with the native piece found beside ngd
    /// ([`crate::carried_sdk::NODE`], [`crate::carried_sdk::node_native`]).
    #[serde(rename = "node")]
    Node,
}

impl Sdk {
    /// Its name in a `[[plugin]]` table.
    pub fn as_str(self) -> &'static str {
        match self {
            Sdk::Python => "python",
            Sdk::Ruby => "ruby",
            Sdk::Node => "node",
        }
    }
}

/// The keys of a `[[plugin]]` table that are ngw's own (every protocol has them).
const NGW_KEYS: &[&str] = &[
    "name",
    "protocol",
    "command",
    "env",
    "sdk",
    "cwd",
    "program",
    "launcher",
    "commands",
    "class_names",
    "min_workers",
    "max_workers",
    "queue",
    "queue_timeout_ms",
    "recycle_after",
    "max_memory_mb",
    "idle_timeout_ms",
    "idle_to_zero_ms",
    "handshake_timeout_ms",
    "interrupt_grace_ms",
    "ping_interval_ms",
    "ping_timeout_ms",
    "stop_timeout_ms",
    "restart_backoff_ms",
    "max_restarts",
    "log",
];

/// One plugin: a program kept warm in a pool of worker processes.
///
/// Deserialized in two steps (serde's `remote = "Self"`): the derived field rules, then
/// the protocol's defaults for the timeouts left unset (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(remote = "Self")]
pub struct PluginConfig {
    /// Unique name; `NGW_PLUGIN`; names the log file.
    pub name: String,
    /// What `command` speaks: `ngw` (the default) or a protocol ngd bridges.
    #[serde(default)]
    pub protocol: Protocol,
    /// Program and arguments of the worker.
    pub command: Vec<String>,
    /// Added to ngd's environment for the worker (commands get the client's environment).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// An SDK of ngd's own made importable to the worker (`"python"`); unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdk: Option<Sdk>,
    /// The worker's working directory; relative to the config file's directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The program this table serves, for shims: a shim that finds another program of
    /// its name on `PATH` gets a pool derived from this table, or runs that program
    /// directly ([`super::derive`]). Unset: shims run this table's program, whatever they
    /// find.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<PathBuf>,
    /// `program` is a launcher, and `command` the `java` command line it was seen to run
    /// (written by `ngd warm`): a shim's session from a directory and environment not
    /// seen yet has it learned again there, and is served by the pool of what it learns
    /// ([`super::derive`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub launcher: bool,
    /// Commands routed to this plugin; empty: learned from the first worker's hello.
    #[serde(default)]
    pub commands: Vec<String>,
    /// Also route every command name shaped like a Java class name (`a.b.C`) that nothing
    /// else claims (a JVM worker serving nails by class name); one plugin at most.
    #[serde(default)]
    pub class_names: bool,
    /// Workers kept running even when idle.
    #[serde(default = "one")]
    pub min_workers: usize,
    /// Workers at most; unset: 2 for ngw, 1 for a bridge (see [`PluginConfig::max_workers`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_workers: Option<usize>,
    /// Sessions that may wait for a worker; 0 refuses at once when all are busy.
    #[serde(default = "sixty_four")]
    pub queue: usize,
    /// How long a queued session waits before it is refused.
    #[serde(default = "thirty_s")]
    pub queue_timeout_ms: u64,
    /// Replace a worker after this many sessions (0: never).
    #[serde(default)]
    pub recycle_after: u64,
    /// Replace a worker whose RSS exceeds this after a session (0: no cap).
    #[serde(default)]
    pub max_memory_mb: u64,
    /// Stop workers above `min_workers` idle this long (0: never).
    #[serde(default = "five_min")]
    pub idle_timeout_ms: u64,
    /// No session for this long: keep no worker until the next session (0: never).
    #[serde(default = "thirty_min")]
    pub idle_to_zero_ms: u64,
    /// Spawn to hello; default 10 s, or the bridge's ([`Protocol::ngd_timeouts`]).
    #[serde(default = "unset")]
    pub handshake_timeout_ms: u64,
    /// `i hangup` to forced kill.
    #[serde(default = "five_s")]
    pub interrupt_grace_ms: u64,
    /// Ping idle workers this often (0: never).
    #[serde(default = "thirty_s")]
    pub ping_interval_ms: u64,
    /// A pong must arrive within this.
    #[serde(default = "five_s")]
    pub ping_timeout_ms: u64,
    /// `q` to SIGTERM when stopping a worker; default 5 s, or the bridge's.
    #[serde(default = "unset")]
    pub stop_timeout_ms: u64,
    /// First restart delay after a failure; doubles per consecutive failure, up to 30 s.
    #[serde(default = "hundred_ms")]
    pub restart_backoff_ms: u64,
    /// Consecutive failures after which the plugin is disabled.
    #[serde(default = "five")]
    pub max_restarts: u32,
    /// The workers' stdout/stderr; default `<state dir>/plugins/<name>.log`.
    #[serde(default)]
    pub log: Option<PathBuf>,
    /// Every other key of the table: the bridged protocol's options (for `ngw`, any key
    /// here is an unknown field).
    #[serde(flatten)]
    pub options: Map<String, Value>,
}

/// Marks a timeout the table leaves unset until the protocol's default replaces it. TOML
/// cannot write it (its integers are at most `i64::MAX`), so no table sets it.
const UNSET: u64 = u64::MAX;

fn unset() -> u64 {
    UNSET
}

impl<'de> Deserialize<'de> for PluginConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut c = PluginConfig::deserialize(deserializer)?;
        let (handshake, stop) = c.protocol.ngd_timeouts(&c.options);
        if c.handshake_timeout_ms == UNSET {
            c.handshake_timeout_ms = handshake;
        }
        if c.stop_timeout_ms == UNSET {
            c.stop_timeout_ms = stop;
        }
        Ok(c)
    }
}

impl Serialize for PluginConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        PluginConfig::serialize(self, serializer)
    }
}

fn one() -> usize {
    1
}
fn five() -> u32 {
    5
}
fn sixty_four() -> usize {
    64
}
fn hundred_ms() -> u64 {
    100
}
fn five_s() -> u64 {
    5_000
}
fn ten_s() -> u64 {
    10_000
}
fn thirty_s() -> u64 {
    30_000
}
fn five_min() -> u64 {
    300_000
}
fn thirty_min() -> u64 {
    1_800_000
}

impl PluginConfig {
    /// Workers at most, hence concurrent workers: as configured, else 2 for an ngw plugin
    /// and 1 for a bridge (one plugin process, its sessions multiplexed).
    pub fn max_workers(&self) -> usize {
        self.max_workers.unwrap_or(match self.protocol {
            Protocol::Ngw => 2,
            _ => 1,
        })
    }

    /// Checks what serde cannot, including a bridged protocol's options.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        if name.is_empty() || name.contains('/') {
            return Err(format!(
                "plugin name {name:?} must be non-empty without '/'"
            ));
        }
        if self.command.is_empty() || self.command[0].is_empty() {
            return Err(format!("plugin '{name}': command must name a program"));
        }
        if self.launcher && self.program.is_none() {
            return Err(format!(
                "plugin '{name}': launcher = true needs the launcher as program"
            ));
        }
        if self.max_workers() == 0 {
            return Err(format!("plugin '{name}': max_workers must be at least 1"));
        }
        if self.min_workers > self.max_workers() {
            return Err(format!(
                "plugin '{name}': min_workers ({}) exceeds max_workers ({})",
                self.min_workers,
                self.max_workers()
            ));
        }
        if let Some(sdk) = self.sdk {
            if self.protocol != Protocol::Ngw {
                return Err(format!(
                    "plugin '{name}': sdk = \"{}\" is for ngw workers, not protocol = \"{}\"",
                    sdk.as_str(),
                    self.protocol.as_str()
                ));
            }
        }
        self.protocol.validate(&self.options).map_err(|e| {
            format!(
                "plugin '{name}' (protocol = \"{}\"): {e}",
                self.protocol.as_str()
            )
        })
    }

    /// What a bridge is told about its plugin (`NGW_BRIDGE_CONFIG`).
    pub fn bridge_config(&self) -> ngw_vocab::BridgeConfig {
        ngw_vocab::BridgeConfig {
            name: self.name.clone(),
            cwd: self.cwd.clone(),
            env: self.env.clone(),
            options: self.options.clone(),
        }
    }

    /// Resolves relative paths against the config file's directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        let cwd = match self.cwd.take() {
            Some(c) if c.is_relative() => base.join(c),
            Some(c) => c,
            None => base.to_path_buf(),
        };
        if self.command[0].contains('/') && Path::new(&self.command[0]).is_relative() {
            self.command[0] = cwd.join(&self.command[0]).to_string_lossy().into_owned();
        }
        self.cwd = Some(cwd);
        if let Some(log) = self.log.take() {
            self.log = Some(if log.is_relative() {
                base.join(log)
            } else {
                log
            });
        }
    }

    /// The log file: configured, or `<state dir>/plugins/<name>.log`.
    pub fn log_path(&self) -> PathBuf {
        self.log.clone().unwrap_or_else(|| {
            state_dir()
                .join("plugins")
                .join(format!("{}.log", self.name))
        })
    }

    pub(crate) fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }
}

/// `$XDG_STATE_HOME/ngd`, else `~/.local/state/ngd`, else the runtime directory.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from) {
        if d.is_absolute() {
            return d.join("ngd");
        }
    }
    if let Some(h) = std::env::var_os("HOME").map(PathBuf::from) {
        if h.is_absolute() {
            return h.join(".local/state/ngd");
        }
    }
    crate::security::RuntimeDir::default_path()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;

    fn parse(table: &str) -> Result<PluginConfig, String> {
        let text = format!("[[plugin]]\nname = \"p\"\ncommand = [\"prog\", \"-x\"]\n{table}");
        ServerConfig::from_toml_str(&text)
            .map(|mut c| c.plugins.remove(0))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_sdks_ngd_carries_are_for_ngw_workers() {
        assert_eq!(parse("sdk = \"python\"").unwrap().sdk, Some(Sdk::Python));
        assert_eq!(parse("sdk = \"ruby\"").unwrap().sdk, Some(Sdk::Ruby));
        assert_eq!(parse("sdk = \"node\"").unwrap().sdk, Some(Sdk::Node));
        assert!(parse("sdk = \"perl\"").is_err());
        let e = parse("sdk = \"ruby\"\nprotocol = \"nu\"").unwrap_err();
        assert!(e.contains("sdk = \"ruby\" is for ngw workers"), "{e}");
    }

    #[test]
    fn protocol_defaults_to_ngw_with_two_workers() {
        let c = parse("").unwrap();
        assert_eq!(c.protocol, Protocol::Ngw);
        assert_eq!(c.max_workers(), 2);
        assert!(c.options.is_empty());
    }

    #[test]
    fn every_protocol_name_parses_and_round_trips() {
        for (name, protocol) in [
            ("ngw", Protocol::Ngw),
            ("nu", Protocol::Nu),
            ("jsonrpc", Protocol::JsonRpc),
            ("fledge-v1", Protocol::FledgeV1),
        ] {
            // Parsed only: whether a bridge needs options of its own is its business.
            let text =
                format!("[[plugin]]\nname = \"p\"\nprotocol = \"{name}\"\ncommand = [\"x\"]\n");
            let c = toml::from_str::<ServerConfig>(&text)
                .unwrap()
                .plugins
                .remove(0);
            assert_eq!(c.protocol, protocol);
            assert_eq!(protocol.as_str(), name);
            assert_eq!(Protocol::from_name(name), Some(protocol));
        }
        let msg = parse("protocol = \"grpc\"\n").unwrap_err();
        assert!(msg.contains("grpc"), "{msg}");
    }

    #[cfg(not(feature = "bridge-nu"))]
    #[test]
    fn a_bridge_left_out_of_the_build_is_a_clear_error() {
        let msg = parse("protocol = \"nu\"\n").unwrap_err();
        assert!(
            msg.contains("this ngd was built without the nu bridge"),
            "{msg}"
        );
    }

    #[cfg(feature = "bridges")]
    #[test]
    fn a_bridge_defaults_to_one_worker_unless_set() {
        assert_eq!(parse("protocol = \"nu\"\n").unwrap().max_workers(), 1);
        let c = parse("protocol = \"nu\"\nmax_workers = 3\n").unwrap();
        assert_eq!(c.max_workers(), 3);
        let msg = parse("protocol = \"nu\"\nmin_workers = 2\n").unwrap_err();
        assert!(
            msg.contains("min_workers (2) exceeds max_workers (1)"),
            "{msg}"
        );
    }

    #[test]
    fn unknown_keys_are_an_error_for_ngw_naming_the_key() {
        let msg = parse("workerz = 3\n").unwrap_err();
        assert!(msg.contains("plugin 'p'"), "{msg}");
        assert!(msg.contains("unknown field `workerz`"), "{msg}");
    }

    #[cfg(feature = "bridges")]
    #[test]
    fn a_bridged_protocol_checks_its_own_keys_and_names_the_plugin() {
        // The bridges accept no key they do not know; the message names plugin and protocol.
        for name in ["nu", "jsonrpc", "fledge-v1"] {
            let msg = parse(&format!("protocol = \"{name}\"\nbogus_key = 1\n")).unwrap_err();
            assert!(msg.contains("plugin 'p'"), "{msg}");
            assert!(msg.contains(&format!("protocol = \"{name}\"")), "{msg}");
            assert!(msg.contains("bogus_key"), "{msg}");
        }
    }

    #[test]
    fn protocol_keys_are_collected_as_json_for_the_bridge() {
        // Collected whatever the bridge then says about them.
        let text = "[[plugin]]\nname = \"p\"\nprotocol = \"jsonrpc\"\ncommand = [\"x\"]\n\
                    env = { A = \"1\" }\ncwd = \"/srv\"\nframing = \"ndjson\"\ngc_ms = 10\n\
                    grants = [\"a\", \"b\"]\n";
        let c: ServerConfig = toml::from_str(text).unwrap();
        let p = &c.plugins[0];
        assert_eq!(p.options.len(), 3);
        assert_eq!(p.options["framing"], Value::from("ndjson"));
        assert_eq!(p.options["gc_ms"], Value::from(10));
        assert_eq!(p.options["grants"], serde_json::json!(["a", "b"]));
        let bridge = p.bridge_config();
        assert_eq!(bridge.name, "p");
        assert_eq!(bridge.env.get("A").map(String::as_str), Some("1"));
        let back = ngw_vocab::BridgeConfig::from_json(&bridge.to_json()).unwrap();
        assert_eq!(back, bridge);
    }

    #[cfg(feature = "bridges")]
    #[test]
    fn a_jsonrpc_bridge_gets_handshake_and_stop_timeouts_above_its_plugins() {
        // ngw and the other bridges: ngd's own defaults.
        for protocol in ["ngw", "nu"] {
            let c = parse(&format!("protocol = \"{protocol}\"\n")).unwrap();
            assert_eq!((c.handshake_timeout_ms, c.stop_timeout_ms), (10_000, 5_000));
        }
        // The bridge waits up to 10 s per handshake step (one for nexo) before its hello,
        // and 5 s for `shutdown`, 5 s more for the exit, before it kills the plugin.
        let c = parse("protocol = \"jsonrpc\"\nprofile = \"nexo\"\n").unwrap();
        assert_eq!(
            (c.handshake_timeout_ms, c.stop_timeout_ms),
            (15_000, 15_000)
        );
        // MCP: `initialize`, then `tools/list`; no `shutdown`.
        let c = parse("protocol = \"jsonrpc\"\nprofile = \"mcp\"\n").unwrap();
        assert_eq!(
            (c.handshake_timeout_ms, c.stop_timeout_ms),
            (25_000, 10_000)
        );
        // They follow the plugin's timeouts...
        let c = parse(
            "protocol = \"jsonrpc\"\nprofile = \"nexo\"\nplugin_handshake_timeout_ms = 60000\n\
             plugin_stop_timeout_ms = 20000\n",
        )
        .unwrap();
        assert_eq!(
            (c.handshake_timeout_ms, c.stop_timeout_ms),
            (65_000, 45_000)
        );
        // ...and a value in the table wins.
        let c = parse(
            "protocol = \"jsonrpc\"\nprofile = \"nexo\"\nhandshake_timeout_ms = 3000\n\
             stop_timeout_ms = 4000\n",
        )
        .unwrap();
        assert_eq!((c.handshake_timeout_ms, c.stop_timeout_ms), (3_000, 4_000));
        // Serialized with the values in effect, and read back the same.
        let c = parse("protocol = \"jsonrpc\"\nprofile = \"mcp\"\n").unwrap();
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("handshake_timeout_ms = 25000"), "{text}");
        assert_eq!(toml::from_str::<PluginConfig>(&text).unwrap(), c);
    }

    #[cfg(feature = "bridges")]
    #[test]
    fn known_keys_never_become_options() {
        let c = parse("protocol = \"nu\"\nqueue = 3\nrestart_backoff_ms = 7\n");
        // The nu bridge refuses unknown keys, so reaching Ok means none were passed on.
        let c = c.unwrap();
        assert!(c.options.is_empty());
        assert_eq!((c.queue, c.restart_backoff_ms), (3, 7));
    }
}
