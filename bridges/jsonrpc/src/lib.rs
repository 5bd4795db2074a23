//! The jsonrpc bridge: an ngw worker that owns a JSON-RPC 2.0 plugin process (a nexo
//! plugin, an MCP server, a StreamNook-style plugin, or any program answering configured
//! methods) and serves each of its tools as an ngd command (`docs/ngw.md` §15.2,
//! `docs/plugins-jsonrpc.md`).
//!
//! Layout: [`frame`] (ndjson and Content-Length framing), [`message`] (envelopes),
//! [`config`] (the `[[plugin]]` keys), [`profile`] (calls, results, exit codes), [`core`]
//! (the sans-I/O state machine: handshakes, correlation, grants, pings), [`restart`] (the
//! restart policy), [`args`] (command lines against JSON Schemas) and `host` (processes,
//! threads and sessions).

pub mod args;
pub mod config;
pub mod core;
pub mod frame;
mod host;
pub mod message;
pub mod profile;
pub mod restart;

use serde_json::{Map, Value};
use std::ffi::OsString;

/// Checks the protocol-specific keys of a `[[plugin]]` table; ngd calls it when it loads
/// the configuration.
pub fn validate(options: &Map<String, Value>) -> Result<(), String> {
    config::Options::from_map(options).map(|_| ())
}

/// Runs the bridge as an ngw worker (`ngd bridge jsonrpc -- COMMAND...`); returns the
/// process's exit status.
///
/// A plugin that cannot start or fails its first handshake is reported in the error hello
/// (ngd shows the reason and disables the pool). Once serving, the bridge restarts the
/// plugin itself; a plugin it disables is reported to every later session (exit 69) and
/// in the log, and the bridge keeps running so the reason stays visible until a reload.
pub fn run(command: Vec<OsString>, config: ngw::BridgeConfig) -> i32 {
    let channel = match ngw::Channel::from_env() {
        Ok(c) => c,
        Err(e) => ngw::exit_spawn_error(&e),
    };
    serve(channel, command, config)
}

/// Runs the bridge on an already connected channel (what [`run`] does after reading
/// `NGW_FD`).
pub fn serve(channel: ngw::Channel, command: Vec<OsString>, config: ngw::BridgeConfig) -> i32 {
    let opts = match config::Options::from_map(&config.options) {
        Ok(o) => o,
        Err(e) => {
            let reason = format!("bad configuration: {e}");
            eprintln!("ngd bridge jsonrpc [{}]: {reason}", config.name);
            let _ = channel.refuse(&reason);
            return 78;
        }
    };
    let concurrency = opts.concurrency;
    let bridge = host::Bridge::new(command, &config, opts);
    let hello = match bridge.start() {
        Ok(h) => h,
        Err(reason) => {
            eprintln!(
                "ngd bridge jsonrpc [{}]: cannot serve: {reason}",
                config.name
            );
            bridge.stop();
            let _ = channel.refuse(&reason);
            return 69;
        }
    };
    // The bridge sends notices (restart, disabled); the hello must name the feature for
    // ngd to take them, and it names exactly what both sides support.
    let hello = if channel.host_supports("notices") {
        let mut features = vec!["interrupt"];
        if concurrency > 1 && channel.host_supports("mux") {
            features.push("mux");
        }
        features.push("notices");
        hello.field("features", serde_json::json!(features))
    } else {
        hello
    };
    let handler = {
        let bridge = bridge.clone();
        move |s: &mut ngw::Session| bridge.session(s)
    };
    let result = channel.serve(hello, handler);
    bridge.stop();
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ngd bridge jsonrpc [{}]: {e}", config.name);
            1
        }
    }
}
