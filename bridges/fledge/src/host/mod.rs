//! The I/O shell: one ngw session runs one fledge plugin process to exit, as fledge does.
//!
//! A protocol plugin gets `init` on its stdin and is then driven by [`crate::protocol::Host`];
//! its stderr is the client's stderr (never captured, as the spec says). A plugin without
//! `protocol` runs with its arguments on the command line and the client's stdin, stdout
//! and stderr. When the session took the client's descriptors ([`Streams`]) those are
//! used directly: the plugin's stderr (and a plugin without `protocol`'s stdio) is the
//! client's own descriptor, and questions are asked on the client's terminal; otherwise
//! they are copied to and from the streams ngd relays.
//!
//! The next process for each command is started ahead (a spare, waiting for `init`). A run
//! whose stderr is the client's terminal starts its own process (the spare's stderr is a
//! pipe).
//!
//! # Layout
//!
//! * this module: [`Bridge`], a session from its command to its exit code
//!   ([`Bridge::session`]: `plan`, then `protocol` or `relay::relay`).
//! * `run`: the session driver of a protocol run (`Run::drive`, the effects performed).
//! * `spares`: spare processes (`SparePool`), when one serves a run and why not.
//! * `process`: starting, signalling and waiting for plugin processes.
//! * `relay`: plugins without the protocol.
//! * `prompt`: which UI a run's questions are asked on, and the thread asking them.
//! * `pipes`: a protocol plugin's stdout as bounded lines, its stderr copied.

mod pipes;
mod process;
mod prompt;
mod relay;
mod run;
mod spares;

use crate::context::{self, Client};
use crate::discover::{self, Options, Resolved};
use crate::protocol::{self, Init, PluginInfo};
use crate::streams::{Sink, Streams};
use process::{spawn_plugin, Launch, PluginStdio};
use run::Run;
use spares::{SpareKey, SparePool};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::Child;

/// Exit code when the command's plugin cannot be found or its program is missing.
pub const EXIT_NOT_FOUND: i32 = 127;
/// Exit code when the plugin's program cannot be started.
pub const EXIT_CANNOT_RUN: i32 = 126;
/// Exit code for host-side failures fledge also reports with 1 (an unsupported protocol
/// version, a question that could not be answered, a WASM plugin).
pub const EXIT_HOST: i32 = 1;

/// The bridge: options, the commands found, the spares.
#[derive(Debug)]
pub struct Bridge {
    options: Options,
    plugins_dir: PathBuf,
    commands: BTreeMap<String, PathBuf>,
    spares: SparePool,
}

/// How a session's command runs.
#[derive(Debug)]
enum Plan {
    /// A plugin without `protocol`.
    Relay(Resolved),
    /// A `fledge-v1` plugin.
    Protocol(Resolved),
}

/// Why a session's command does not run: its exit code and error line.
#[derive(Debug)]
struct Refusal {
    code: i32,
    message: String,
}

impl Refusal {
    fn new(code: i32, message: String) -> Self {
        Self { code, message }
    }
}

/// Where a protocol run's process comes from.
#[derive(Debug)]
enum Origin {
    /// Its stderr is the client's terminal: a process of its own.
    OwnTerminal,
    /// Pipes: the spare when it serves, and the next spare is started after the run.
    Pooled,
}

/// Whether stderr lines are styled: console's rule, applied to the client's stderr and
/// environment.
fn colour(session: &ngw::Session, stderr_tty: bool) -> bool {
    let var = |n: &str| session.var(n).map(|v| v.to_string_lossy().into_owned());
    let forced = var("CLICOLOR_FORCE").is_some_and(|v| v != "0");
    let term = var("TERM").is_some_and(|t| t != "dumb");
    (stderr_tty && term && var("NO_COLOR").is_none() && var("CLICOLOR").is_none_or(|v| v != "0"))
        || forced
}

/// Writes `error: <text>` on `err`, `error:` styled when `colour`.
fn error_line(err: &mut Sink, colour: bool, text: &str) {
    let _ = err.write_all(
        format!(
            "{} {text}\n",
            console::style("error:").red().bold().force_styling(colour)
        )
        .as_bytes(),
    );
}

fn sorted_env(env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    let mut e = env.to_vec();
    e.sort();
    e
}

impl Bridge {
    /// A bridge over `plugins_dir`'s `commands`.
    pub fn new(
        options: Options,
        plugins_dir: PathBuf,
        commands: BTreeMap<String, PathBuf>,
    ) -> Self {
        Self {
            spares: SparePool::new(options.spare),
            options,
            plugins_dir,
            commands,
        }
    }

    /// Stops every spare process (the bridge is ending): those waiting, and those being
    /// started, once they are; returns when none is left.
    pub fn stop_spares(&self) {
        self.spares.stop_all();
    }

    /// Runs one session; returns its exit code.
    pub fn session(&self, s: &mut ngw::Session) -> i32 {
        let mut streams = Streams::of(s);
        let colour = colour(s, streams.tty[2]);
        let mut err = streams.err.clone();
        let (code, name) = match self.plan(s) {
            Err(refusal) => {
                error_line(&mut err, colour, &refusal.message);
                return refusal.code;
            }
            Ok(Plan::Relay(r)) => (relay::relay(s, &mut streams, &r), r.command),
            Ok(Plan::Protocol(r)) => (self.protocol(s, &mut streams, &r, colour), r.plugin_name),
        };
        if code != 0 {
            let text = format!("Plugin '{name}' exited with code {code}");
            error_line(&mut err, colour, &text);
        }
        code
    }

    /// How the session's command runs, or why it does not.
    fn plan(&self, s: &ngw::Session) -> Result<Plan, Refusal> {
        let Some(dir) = self.commands.get(&s.command) else {
            let text = format!("unrecognized fledge plugin command '{}'", s.command);
            return Err(Refusal::new(EXIT_NOT_FOUND, text));
        };
        let r = discover::resolve(&s.command, dir, &self.plugins_dir, &self.options)
            .map_err(|e| Refusal::new(EXIT_NOT_FOUND, e.to_string()))?;
        if !r.binary.exists() {
            let text = format!(
                "Plugin '{}' references binary '{}' which does not exist.",
                r.plugin_name,
                r.binary.display()
            );
            return Err(Refusal::new(EXIT_NOT_FOUND, text));
        }
        if r.runtime.as_deref() == Some("wasm") {
            let text = format!(
                "Plugin '{}' requires the WASM runtime, which ngd's fledge bridge does not have.",
                r.plugin_name
            );
            return Err(Refusal::new(EXIT_HOST, text));
        }
        match r.protocol.as_deref() {
            None => Ok(Plan::Relay(r)),
            Some(protocol::PROTOCOL) => Ok(Plan::Protocol(r)),
            Some(other) => Err(Refusal::new(
                EXIT_HOST,
                format!(
                    "Plugin '{}' requires protocol '{other}' which is not supported by this version of ngd's fledge bridge (it speaks {}).\n  Upgrade ngd to use this plugin.",
                    r.plugin_name,
                    protocol::PROTOCOL
                ),
            )),
        }
    }

    /// A `fledge-v1` run: its process, `init`, the run driven to its end, then the next
    /// spare started.
    fn protocol(
        &self,
        s: &mut ngw::Session,
        streams: &mut Streams,
        r: &Resolved,
        colour: bool,
    ) -> i32 {
        let key = SpareKey {
            launch: Launch::new(r.binary.clone(), sorted_env(&s.env), s),
            stamp: spares::stamp(r),
        };
        let (origin, spawned) = self.start_process(s, streams, &key, r);
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(
                    streams.err,
                    "error: spawning plugin '{}': {e}",
                    r.plugin_name
                );
                return EXIT_CANNOT_RUN;
            }
        };
        let init = self.init(s, r);
        let code = Run::new(s, streams, r, colour, &self.options).drive(&mut child, &init);
        // The next process starts once this run is over, so its start-up does not compete
        // with the run for the CPU, and off the session's thread, so the run's exit is
        // reported without waiting for it.
        if let Origin::Pooled = origin {
            self.spares
                .start_next(key, r.command.clone(), r.dir.clone());
        }
        code
    }

    /// The run's process. On the client's terminal the plugin's stderr is that terminal,
    /// as under fledge (a plugin may style what it writes there). A spare was started
    /// with a pipe for its stderr, so such a run starts its own process and leaves the
    /// spare for the next run that can use it.
    fn start_process(
        &self,
        s: &ngw::Session,
        streams: &Streams,
        key: &SpareKey,
        r: &Resolved,
    ) -> (Origin, std::io::Result<Child>) {
        match streams.tty[2].then(|| streams.dup(2)).flatten() {
            Some(fd) => {
                let stdio = PluginStdio {
                    stderr: Some(fd),
                    ..PluginStdio::piped()
                };
                let spawned = spawn_plugin(&key.launch, &[], Some(&r.dir), stdio);
                (Origin::OwnTerminal, spawned)
            }
            None => (
                Origin::Pooled,
                self.spares.process(s, key, &r.command, &r.dir),
            ),
        }
    }

    /// The `init` message of a run of `r` for session `s`.
    fn init(&self, s: &ngw::Session, r: &Resolved) -> Init {
        Init::new(
            s.args_lossy(),
            Some(context::project(&Client {
                cwd: &s.cwd,
                env: &s.env,
            })),
            PluginInfo {
                name: r.plugin_name.clone(),
                version: r.plugin_version.clone(),
                dir: r.dir.to_string_lossy().into_owned(),
            },
            self.options.fledge_version.clone(),
            r.capabilities.clone(),
        )
    }
}
