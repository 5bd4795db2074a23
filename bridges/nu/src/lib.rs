//! The nu bridge: an ngw worker that owns Nushell plugin processes and serves their
//! commands as ordinary shell commands (`docs/ngw.md` §15.2, `docs/plugins-nu.md`).
//!
//! # Layout
//! * [`codec`]: the encoding preamble and message framing (JSON, msgpack), sans I/O.
//! * [`json`]: the ordered value every message is handled as.
//! * [`msg`]: the protocol's messages, typed envelopes around Nu values.
//! * [`host`]: the engine side of one connection (handshake, call and stream routing,
//!   flow-control windows), sans I/O.
//! * [`args`]: a command line parsed against a signature, as Nu's parser would.
//! * [`value`]: Nu values to and from JSON, and to NUON.
//! * [`nuon`]: NUON text read into Nu values.
//! * [`report`]: errors rendered as nu renders them.
//! * [`plugin`]: the plugin process, its reader thread, and the warm-process manager.
//! * [`session`]: one ngw session as one plugin call.
//! * [`pool`]: reused threads for the calls' input feeders.

// Errors carry a whole `LabeledError` (message, labels, help) to the client; they are the
// cold path, so their size does not matter.
#![allow(clippy::result_large_err)]

pub mod args;
pub mod codec;
pub mod host;
pub mod json;
pub mod msg;
pub mod nuon;
pub mod plugin;
pub mod pool;
pub mod report;
pub mod session;
pub mod value;

use crate::args::Signature;
use crate::json::J;
use crate::msg::{Response, Span};
use crate::plugin::{Conn, Failure, Gc, Manager, Spec};
use crate::session::{Bridge, Command, InputMode, OutputMode};
use serde_json::{Map, Value};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The options a `[[plugin]]` table with `protocol = "nu"` may have.
pub const OPTIONS: &[&str] = &[
    "gc_ms",
    "input",
    "output",
    "plugin_config",
    "max_sessions",
    "max_message_mb",
];

/// Checks the protocol-specific keys of a `[[plugin]]` table; ngd calls it when it loads
/// the configuration.
pub fn validate(options: &Map<String, Value>) -> Result<(), String> {
    Options::from_map(options).map(|_| ())
}

/// The bridge's options, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// When idle plugins stop.
    pub gc: Gc,
    /// Default input mode.
    pub input: InputMode,
    /// Default output mode.
    pub output: OutputMode,
    /// `GetPluginConfig`'s answer (as JSON).
    pub plugin_config: Option<J>,
    /// Sessions served at once.
    pub max_sessions: u32,
    /// Largest message from a plugin, and largest stdin read whole, in bytes.
    pub max_message: usize,
}

impl Options {
    /// Reads and checks the options.
    pub fn from_map(options: &Map<String, Value>) -> Result<Options, String> {
        let mut o = Options {
            gc: Gc::After(Duration::from_secs(10)),
            input: InputMode::Raw,
            output: OutputMode::Auto,
            plugin_config: None,
            max_sessions: 32,
            max_message: codec::DEFAULT_MAX_MESSAGE,
        };
        for (key, v) in options {
            match key.as_str() {
                "gc_ms" => {
                    o.gc = match v {
                        Value::Bool(false) => Gc::Never,
                        v => match v.as_u64() {
                            Some(ms) => Gc::After(Duration::from_millis(ms)),
                            None => {
                                return Err(format!(
                                    "`gc_ms` must be a number of milliseconds (0 or more) or false, not {v}"
                                ))
                            }
                        },
                    }
                }
                "input" => {
                    o.input = v.as_str().and_then(InputMode::parse).ok_or_else(|| {
                        format!("`input` must be one of raw, lines, json, nuon, string, binary, none; not {v}")
                    })?
                }
                "output" => {
                    o.output = v.as_str().and_then(OutputMode::parse).ok_or_else(|| {
                        format!("`output` must be one of auto, json, nuon, raw; not {v}")
                    })?
                }
                "plugin_config" => {
                    if !v.is_object() {
                        return Err(format!("`plugin_config` must be a table, not {v}"));
                    }
                    o.plugin_config = J::parse(v.to_string().as_bytes()).ok();
                }
                "max_sessions" => {
                    o.max_sessions = v
                        .as_u64()
                        .filter(|n| (1..=1024).contains(n))
                        .map(|n| n as u32)
                        .ok_or_else(|| format!("`max_sessions` must be 1 to 1024, not {v}"))?
                }
                "max_message_mb" => {
                    o.max_message = v
                        .as_u64()
                        .filter(|n| (1..=1024).contains(n))
                        .map(|n| n as usize * 1024 * 1024)
                        .ok_or_else(|| format!("`max_message_mb` must be 1 to 1024, not {v}"))?
                }
                other => {
                    return Err(format!(
                        "unknown key `{other}` for protocol \"nu\" (expected one of {})",
                        OPTIONS.join(", ")
                    ))
                }
            }
        }
        Ok(o)
    }
}

/// Runs the bridge as an ngw worker (`ngd bridge nu -- COMMAND...`); returns the
/// process's exit status: 0 after ngd's quit, 2 for a bad channel, 78 when it refused to
/// start (the reason is in its error hello and in the log).
pub fn run(command: Vec<OsString>, config: ngw_vocab::BridgeConfig) -> i32 {
    let channel = match ngw::Channel::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ngd bridge nu: {e}");
            return 2;
        }
    };
    serve(channel, command, &config)
}

/// Serves on an open channel (what [`run`] does after opening it; tests call it directly).
pub fn serve(
    channel: ngw::Channel,
    command: Vec<OsString>,
    config: &ngw_vocab::BridgeConfig,
) -> i32 {
    let refuse = |channel: ngw::Channel, reason: String| {
        eprintln!("ngd bridge nu: {reason}");
        let _ = channel.refuse(&reason);
        78
    };
    let opts = match Options::from_map(&config.options) {
        Ok(o) => o,
        Err(e) => return refuse(channel, e),
    };
    let bridge = match start(&command, config, &opts) {
        Ok(b) => b,
        Err(e) => return refuse(channel, e),
    };
    let commands = bridge.first_words();
    let runtime = bridge
        .plugins
        .iter()
        .map(|m| m.spec().name())
        .collect::<Vec<_>>()
        .join(",");
    let hello = ngw::Hello::new(commands)
        .max_sessions(opts.max_sessions)
        .sdk(format!("ngd-bridge-nu/{}", env!("CARGO_PKG_VERSION")))
        .runtime(format!("nu-plugin {} ({runtime})", msg::ENGINE_VERSION));
    let bridge = Arc::new(bridge);
    let handler_bridge = bridge.clone();
    let result = channel.serve(hello, move |s: &mut ngw::Session| handler_bridge.handle(s));
    for m in &bridge.plugins {
        m.stop();
    }
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ngd bridge nu: {e}");
            2
        }
    }
}

/// Finds the plugins, starts each, learns their signatures.
fn start(
    command: &[OsString],
    config: &ngw_vocab::BridgeConfig,
    opts: &Options,
) -> Result<Bridge, String> {
    let base = config
        .cwd
        .clone()
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("/"));
    // (path, found in a directory or registry): a plugin named by itself must start; one
    // of many found is skipped with a log line when it cannot.
    let mut paths: Vec<(PathBuf, bool)> = Vec::new();
    for item in command {
        let found = discover(Path::new(item), &base)?;
        let many =
            found.len() != 1 || found.first().map(|p| p.as_os_str()) != Some(item.as_os_str());
        paths.extend(found.into_iter().map(|p| (p, many)));
    }
    if paths.is_empty() {
        return Err(
            "no nu plugin to serve: `command` names no plugin file, directory or registry".into(),
        );
    }
    let mut plugins = Vec::new();
    let mut commands: Vec<Command> = Vec::new();
    let mut skipped = Vec::new();
    for (path, optional) in paths {
        let spec = Spec {
            path,
            max_message: opts.max_message,
        };
        let started = Conn::spawn(&spec).and_then(|conn| {
            let sigs = signatures(&conn).map_err(|f| Failure {
                reason: format!("{}: {}", spec.name(), f.reason),
                code: f.code,
            });
            if sigs.is_err() {
                conn.kill();
            }
            sigs.map(|s| (conn, s))
        });
        let (conn, sigs) = match started {
            Ok(x) => x,
            Err(f) if optional => {
                eprintln!(
                    "ngd bridge nu: skipping {}: {}",
                    spec.path.display(),
                    f.reason
                );
                skipped.push(f.reason);
                continue;
            }
            Err(f) => return Err(f.reason),
        };
        let index = plugins.len();
        for sig in sigs {
            if let Some(other) = commands.iter().find(|c| c.sig.name == sig.name) {
                eprintln!(
                    "ngd bridge nu: `{}` of {} is already served by {}; ignored",
                    sig.name,
                    spec.name(),
                    plugins
                        .get(other.plugin)
                        .map(|m: &Arc<Manager>| m.spec().name())
                        .unwrap_or_default()
                );
                continue;
            }
            commands.push(Command { sig, plugin: index });
        }
        plugins.push(Manager::new(spec, opts.gc, Some(conn)));
    }
    if plugins.is_empty() {
        return Err(format!(
            "no nu plugin could be started: {}",
            skipped.join("; ")
        ));
    }
    let plugin_config = opts
        .plugin_config
        .as_ref()
        .map(|c| value::from_json(c, Span::default()));
    Ok(Bridge {
        plugins,
        commands,
        input: opts.input,
        output: opts.output,
        plugin_config,
        max_input: opts.max_message,
    })
}

/// Asks a started plugin for its metadata and signatures.
fn signatures(conn: &Conn) -> Result<Vec<Signature>, Failure> {
    let fail = |reason: String| Failure { reason, code: 1 };
    let ask = |body: J| -> Result<Response, Failure> {
        let call = conn.start_call(false)?;
        let msg = match body {
            J::Str(s) if s == "Metadata" => msg::call_metadata(call.id),
            _ => msg::call_signature(call.id),
        };
        conn.send(&msg)?;
        let ev = call
            .events
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| fail("no answer to a Signature call within 30 s".into()));
        conn.finish(call.id);
        match ev? {
            host::Event::Response(r) => Ok(r),
            host::Event::Failed(reason, code) => Err(Failure { reason, code }),
            other => Err(fail(format!("unexpected answer {other:?}"))),
        }
    };
    ask(J::from("Metadata"))?;
    match ask(J::from("Signature"))? {
        Response::Signature(list) => list
            .iter()
            .map(Signature::from_value)
            .collect::<Result<Vec<_>, String>>()
            .map_err(fail),
        Response::Error(e) => Err(fail(format!("the Signature call failed: {}", e.msg))),
        other => Err(fail(format!("unexpected answer to Signature: {other:?}"))),
    }
}

/// The plugin files an item of `command` stands for: a plugin file (by path, or by name on
/// `PATH`), a directory (every `nu_plugin_*` executable in it), or a Nu plugin registry
/// (`plugin.msgpackz`: every plugin it lists).
pub fn discover(item: &Path, base: &Path) -> Result<Vec<PathBuf>, String> {
    let text = item.to_string_lossy();
    let expanded = match text.strip_prefix("~/") {
        Some(rest) => {
            std::env::var_os("HOME").map_or(item.to_path_buf(), |h| PathBuf::from(h).join(rest))
        }
        None => item.to_path_buf(),
    };
    let path = if expanded.components().count() == 1 && !expanded.exists() {
        which(&expanded).ok_or_else(|| format!("no plugin `{}` on PATH", expanded.display()))?
    } else if expanded.is_relative() {
        base.join(&expanded)
    } else {
        expanded
    };
    if path.is_dir() {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("nu_plugin_"))
                    && is_executable(p)
            })
            .collect();
        found.sort();
        return Ok(found);
    }
    if path.extension().is_some_and(|e| e == "msgpackz") {
        return registry(&path);
    }
    if !is_executable(&path) {
        return Err(format!("{} is not an executable plugin", path.display()));
    }
    Ok(vec![path])
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn which(name: &Path) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// The plugin files a Nu plugin registry lists (brotli-compressed msgpack:
/// `{nushell_version, plugins: [{name, filename, shell, data}]}`).
pub fn registry(path: &Path) -> Result<Vec<PathBuf>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut data = Vec::new();
    let mut reader = brotli_decompressor::Decompressor::new(file, 64 * 1024);
    std::io::Read::read_to_end(
        &mut std::io::Read::take(&mut reader, 256 * 1024 * 1024),
        &mut data,
    )
    .map_err(|e| format!("{}: not a Nu plugin registry (brotli): {e}", path.display()))?;
    let v = codec::decode_msgpack(&data).map_err(|e| format!("{}: {e}", path.display()))?;
    let plugins = v["plugins"]
        .as_array()
        .ok_or_else(|| format!("{}: no `plugins` list in the registry", path.display()))?;
    Ok(plugins
        .iter()
        .filter_map(|p| p["filename"].as_str().map(PathBuf::from))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn options_are_checked() {
        assert!(validate(&map("{}")).is_ok());
        assert!(validate(&map(
            r#"{"gc_ms":0,"input":"json","output":"nuon","plugin_config":{"a":1},"max_sessions":8}"#
        ))
        .is_ok());
        assert_eq!(
            Options::from_map(&map(r#"{"gc_ms":false}"#)).unwrap().gc,
            Gc::Never
        );
        for bad in [
            r#"{"gc_ms":-1}"#,
            r#"{"input":"xml"}"#,
            r#"{"output":1}"#,
            r#"{"plugin_config":3}"#,
            r#"{"max_sessions":0}"#,
            r#"{"nope":1}"#,
        ] {
            assert!(validate(&map(bad)).is_err(), "{bad}");
        }
    }
}
