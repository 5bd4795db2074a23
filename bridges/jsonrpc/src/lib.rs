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

use ngw::{WorkerFeature, WorkerFeatures};
use serde_json::{Map, Value};
use std::ffi::OsString;

/// Checks the protocol-specific keys of a `[[plugin]]` table; ngd calls it when it loads
/// the configuration.
pub fn validate(options: &Map<String, Value>) -> Result<(), String> {
    config::Options::from_map(options).map(|_| ())
}

/// What ngd's own timeouts for the bridge process must at least be, for the bridge's
/// plugin timeouts to be the ones that fire (ngd's `handshake_timeout_ms` and
/// `stop_timeout_ms` default to these for a jsonrpc plugin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgdTimeouts {
    /// Spawn to hello: the bridge says hello after the plugin's handshake, whose every
    /// step may take `plugin_handshake_timeout_ms`.
    pub handshake_timeout_ms: u64,
    /// `q` to SIGTERM: the bridge stops the plugin with `shutdown`, then `exit` or a closed
    /// stdin, waiting up to `plugin_stop_timeout_ms` for each.
    pub stop_timeout_ms: u64,
}

/// Room for starting the bridge and the plugin process, and for reaping it.
const NGD_TIMEOUT_MARGIN_MS: u64 = 5_000;

/// [`NgdTimeouts`] for the options of a `[[plugin]]` table: the plugin's timeouts times
/// the steps of its profile that wait for them, plus a margin, and never below ngd's own
/// defaults (10 s, 5 s). Options that do not validate (the configuration is refused then)
/// get the timeouts of the longest profile with the default plugin timeouts.
pub fn ngd_timeouts(options: &Map<String, Value>) -> NgdTimeouts {
    let (profile, handshake, stop) = match config::Options::from_map(options) {
        Ok(o) => (o.profile, o.handshake_timeout_ms, o.stop_timeout_ms),
        Err(_) => (config::Profile::Mcp, 10_000, 5_000),
    };
    // Handshake requests before the hello: MCP's `initialize` and its first `tools/list`
    // page (a catalog of several pages takes a step more per page), the others' one
    // `initialize`, none for plain methods.
    let handshake_steps = match profile {
        config::Profile::Mcp => 2,
        config::Profile::Nexo | config::Profile::Streamnook => 1,
        config::Profile::Plain => 0,
    };
    // `shutdown` is awaited for nexo and StreamNook; the process's exit for every profile.
    let stop_steps = match profile {
        config::Profile::Nexo | config::Profile::Streamnook => 2,
        config::Profile::Mcp | config::Profile::Plain => 1,
    };
    NgdTimeouts {
        handshake_timeout_ms: handshake
            .saturating_mul(handshake_steps)
            .saturating_add(NGD_TIMEOUT_MARGIN_MS)
            .max(10_000),
        stop_timeout_ms: stop
            .saturating_mul(stop_steps)
            .saturating_add(NGD_TIMEOUT_MARGIN_MS)
            .max(5_000),
    }
}

/// Runs the bridge as an ngw worker (`ngd bridge jsonrpc -- COMMAND...`); returns the
/// process's exit status.
///
/// A plugin that cannot start or fails its first handshake is reported in the error hello
/// (ngd shows the reason and disables the pool). Once serving, the bridge restarts the
/// plugin itself; a plugin it disables is reported to ngd in a `disabled` notice (ngd then
/// disables the pool with that reason until a reload), to every session that reaches the
/// bridge (exit 126) and in the log. The bridge keeps running rather than exit, so that ngd
/// does not start it, and the plugin, again with a fresh restart budget.
pub fn run(command: Vec<OsString>, config: ngw_vocab::BridgeConfig) -> i32 {
    let channel = match ngw::Channel::from_env() {
        Ok(c) => c,
        Err(e) => ngw::exit_spawn_error(&e),
    };
    serve(channel, command, config)
}

/// Runs the bridge on an already connected channel (what [`run`] does after reading
/// `NGW_FD`).
pub fn serve(
    channel: ngw::Channel,
    command: Vec<OsString>,
    config: ngw_vocab::BridgeConfig,
) -> i32 {
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
    let hello = if channel.host_supports(WorkerFeature::Notices) {
        let mut features = WorkerFeatures::of(&[WorkerFeature::Interrupt, WorkerFeature::Notices]);
        if concurrency > 1 && channel.host_supports(WorkerFeature::Mux) {
            features.insert(WorkerFeature::Mux);
        }
        hello.field("features", serde_json::json!(features.names()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn timeouts(v: Value) -> (u64, u64) {
        let t = ngd_timeouts(v.as_object().unwrap());
        (t.handshake_timeout_ms, t.stop_timeout_ms)
    }

    #[test]
    fn ngd_timeouts_exceed_what_the_plugin_steps_may_take() {
        assert_eq!(timeouts(json!({"profile": "nexo"})), (15_000, 15_000));
        assert_eq!(
            timeouts(json!({"profile": "streamnook", "methods": ["a"]})),
            (15_000, 15_000)
        );
        assert_eq!(timeouts(json!({"profile": "mcp"})), (25_000, 10_000));
        assert_eq!(timeouts(json!({"methods": ["a"]})), (10_000, 10_000));
        assert_eq!(
            timeouts(
                json!({"profile": "mcp", "plugin_handshake_timeout_ms": 30_000,
                            "plugin_stop_timeout_ms": 500})
            ),
            (65_000, 5_500)
        );
        assert_eq!(
            timeouts(json!({"profile": "nexo", "plugin_handshake_timeout_ms": 1,
                            "plugin_stop_timeout_ms": 1})),
            (10_000, 5_002)
        );
        // Options that do not validate: the longest profile's defaults.
        assert_eq!(timeouts(json!({"profile": "soap"})), (25_000, 10_000));
    }
}
