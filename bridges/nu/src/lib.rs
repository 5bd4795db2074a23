//! The nu bridge: an ngw worker that owns a nu plugin process and translates between
//! ngw sessions and the plugin's protocol (`docs/ngw.md` §15.2, `docs/plugins-nu.md`).

pub mod codec;
pub mod host;
pub mod json;
pub mod msg;

use serde_json::{Map, Value};
use std::ffi::OsString;

/// Checks the protocol-specific keys of a `[[plugin]]` table; ngd calls it when it loads
/// the configuration.
pub fn validate(options: &Map<String, Value>) -> Result<(), String> {
    match options.keys().next() {
        Some(key) => Err(format!("unknown key `{key}`")),
        None => Ok(()),
    }
}

/// Runs the bridge as an ngw worker (`ngd bridge nu -- COMMAND...`); returns the
/// process's exit status.
pub fn run(command: Vec<OsString>, config: ngw::BridgeConfig) -> i32 {
    let _ = (command, config);
    eprintln!("ngd bridge nu: not built yet");
    78
}
