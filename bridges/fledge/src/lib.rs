//! The fledge bridge: an ngw worker that hosts fledge plugins (the `fledge-v1` protocol of
//! the `fledge` CLI, 1.8.0) for ngd (`docs/ngw.md` §15.2, `docs/plugins-fledge.md`).
//!
//! One `[[plugin]]` table with `protocol = "fledge-v1"` and an empty `command` serves every
//! command of every plugin in `plugins_dir`. Each session runs one plugin process to exit,
//! as fledge does: [`protocol`] is the host's state machine, [`host`] the I/O around it,
//! [`discover`] finds plugins and grants, [`context`] computes `init` and `metadata`,
//! [`store`] and [`exec`] serve those requests, [`ui`] asks the user, [`streams`] says
//! whether a session runs on the client's own descriptors or on relayed streams, and
//! `sys` holds every raw `libc` call of the crate behind safe functions.

pub mod context;
pub mod discover;
pub mod exec;
pub mod host;
pub mod protocol;
pub mod store;
pub mod streams;
mod sys;
pub mod ui;

use serde_json::{Map, Value};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Exit status when the bridge refuses to start (bad options, nothing to serve).
pub const EXIT_CONFIG: i32 = 78;

/// The plugins directory named by the bridge's command and options.
fn plugins_dir(command: &[OsString], options: &discover::Options) -> Result<PathBuf, String> {
    let from_options = || options.resolve_plugins_dir(|k| std::env::var(k).ok());
    match command {
        [] => Ok(from_options()),
        [word] if word == "fledge" => Ok(from_options()),
        [dir] if Path::new(dir).is_dir() => {
            let dir = PathBuf::from(dir);
            match &options.plugins_dir {
                Some(p) if *p != dir => Err(format!(
                    "command names {} and plugins_dir {}: name one",
                    dir.display(),
                    p.display()
                )),
                _ => Ok(dir),
            }
        }
        _ => Err(format!(
            "command must be [\"fledge\"] (fledge's plugins directory, or `plugins_dir`) or one plugins directory; {:?} is neither",
            command
        )),
    }
}

/// Checks the protocol-specific keys of a `[[plugin]]` table; ngd calls it when it loads
/// the configuration.
pub fn validate(options: &Map<String, Value>) -> Result<(), String> {
    discover::Options::from_map(options).map(|_| ())
}

/// Runs the bridge as an ngw worker (`ngd bridge fledge-v1 -- COMMAND...`); returns the
/// process's exit status. `COMMAND` says where the plugins are: `fledge` (or nothing) for
/// `plugins_dir`, which defaults to fledge's own directory, or one directory path.
/// `--ngd-fledge-ui-helper QUESTION` runs the terminal prompt helper instead.
pub fn run(command: Vec<OsString>, config: ngw_vocab::BridgeConfig) -> i32 {
    if command.first().is_some_and(|c| c == ui::HELPER_FLAG) {
        let q = command.get(1).map(|q| q.to_string_lossy().into_owned());
        return ui::helper_main(q.as_deref().unwrap_or(""));
    }
    // Writes to a plugin that has gone must fail with EPIPE, not kill the bridge.
    sys::ignore_sigpipe();
    let channel = match ngw::Channel::from_env() {
        Ok(c) => c,
        Err(e) => ngw::exit_spawn_error(&e),
    };
    let refuse = |channel: ngw::Channel, reason: String| {
        eprintln!("ngd bridge fledge-v1: {reason}");
        let _ = channel.refuse(&reason);
        EXIT_CONFIG
    };
    let options = match discover::Options::from_map(&config.options) {
        Ok(o) => o,
        Err(e) => return refuse(channel, e),
    };
    let plugins_dir = match plugins_dir(&command, &options) {
        Ok(d) => d,
        Err(e) => return refuse(channel, e),
    };
    let (commands, skipped) = discover::scan(&plugins_dir);
    for s in &skipped {
        eprintln!("ngd bridge fledge-v1: skipped {s}");
    }
    if commands.is_empty() {
        return refuse(
            channel,
            format!("no fledge plugin commands in {}", plugins_dir.display()),
        );
    }
    // Every command runs on the client's descriptors when ngd passes them: plugin output
    // straight to the client's stdout, questions on its terminal. Relayed stdin (a plugin
    // without `protocol` reading its stdin) streams in windows.
    let hello = ngw::Hello::new(commands.keys().cloned())
        .max_sessions(options.max_sessions)
        .client_fds(true)
        .signals(true)
        .stdin_window(ngw::DEFAULT_STDIN_WINDOW)
        .runtime(format!(
            "fledge-v1 ({} commands in {})",
            commands.len(),
            plugins_dir.display()
        ));
    let bridge = std::sync::Arc::new(host::Bridge::new(options, plugins_dir, commands));
    let serving = bridge.clone();
    let served = channel.serve(hello, move |s: &mut ngw::Session| serving.session(s));
    bridge.stop_spares();
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ngd bridge fledge-v1: {e}");
            1
        }
    }
}
