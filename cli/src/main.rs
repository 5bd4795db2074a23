//! The `ngd` binary: `ngd serve`, `ngd status`, `ngd reload`, `ngd stop`, and the tools
//! around them: `ngd warm`, `ngd unwarm`, `ngd list`, `ngd shims`, `ngd bench`, `ngd check`,
//! `ngd completions`, `ngd man`. The server itself is the `ng-server` library; this crate is
//! its command line, its logging set-up, and the tools.
//!
//! `ngd bridge <protocol> -- <command...>` (hidden) is how ngd runs a plugin that speaks
//! another protocol than ngw (`docs/ngw.md` §15.2): the bridge is an ngw worker that owns
//! the plugin's process. It reads `NGW_BRIDGE_CONFIG` and runs the protocol's bridge crate;
//! nothing of the server (logging, signals, sockets) is set up in that process.
//!
//! `serve` runs the server in the foreground and prints one line saying where it listens
//! once it accepts connections (and notifies `NOTIFY_SOCKET`, when set, with `READY=1`);
//! it serves on sockets passed by systemd socket activation when there are any. `status`,
//! `reload` and `stop` talk to a running server ([`remote`]).
//!
//! # Layout
//!
//! * [`remote`]: `status`, `reload` and `stop`, built-in commands run over the protocol.
//! * [`logging`]: where the log goes (stderr or a file), text or JSON, colour on terminals.
//! * [`measure`]: running a program and comparing runs, for [`bench`], [`check`] and
//!   `ngd warm --check`.
//! * [`bench`], [`check`]: `ngd bench` and `ngd check`, cold against warm runs.
//! * [`warm`]: `ngd warm`, `unwarm`, `list` and `shims`.
//! * [`cli_docs`]: completions and man pages.

mod bench;
mod check;
mod cli_docs;
mod logging;
mod measure;
mod remote;
mod warm;

use clap::{CommandFactory as _, Parser, Subcommand};
use ng_server::config::{ListenAddr, LogFormat, ServerConfig};
use ng_server::plugin::config::Protocol;
use ng_server::Server;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "ngd",
    version = ng_proto::version::current_text(),
    about = "A persistent command server speaking Nailgun"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the server in the foreground.
    Serve(ServeOptions),
    /// Show a running server's statistics.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The server's address (default: the private Unix socket, then 127.0.0.1:2113).
        #[arg(long, value_name = "ADDR")]
        server: Option<ListenAddr>,
    },
    /// Make a running server re-read its configuration file (plugins, aliases).
    Reload {
        /// The server's address (default: the private Unix socket, then 127.0.0.1:2113).
        #[arg(long, value_name = "ADDR")]
        server: Option<ListenAddr>,
    },
    /// Stop a running server gracefully.
    Stop {
        /// The server's address (default: the private Unix socket, then 127.0.0.1:2113).
        #[arg(long, value_name = "ADDR")]
        server: Option<ListenAddr>,
    },
    /// Run a bridge worker (started by ngd itself for `protocol = "..."` plugins).
    #[command(hide = true)]
    Bridge {
        /// The plugin's protocol: nu, jsonrpc or fledge-v1.
        protocol: String,
        /// The plugin's program and arguments.
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
    /// Measure a command's start-up: cold (exec) against warm (through ngd).
    Bench(bench::BenchArgs),
    /// Run a configured command cold and warm and report any difference.
    Check(check::CheckArgs),
    /// Make programs warm: a drop-in table, a shim, the server reloaded.
    Warm(warm::WarmArgs),
    /// Undo `ngd warm`: remove the table and the shims, reload.
    Unwarm(warm::UnwarmArgs),
    /// Show what is warm: kind, state, workers, last bench figures.
    List(warm::ListArgs),
    /// Show the shims directory (and `--path`: the line that puts it first on PATH).
    Shims(warm::ShimsArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages of ng and ngd (ng.1, ngd.1, ngd-serve.1, ...) into DIR.
    Man {
        /// The directory (created if missing).
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.writes_only_stdout() {
        // As other Unix tools: `ngd list | head` ends quietly when head does, rather than
        // failing on the broken pipe (Rust ignores SIGPIPE by default).
        ng_sys::signal::set_default(libc::SIGPIPE);
    }
    match cli.command {
        Command::Serve(options) => serve(options),
        Command::Status { json, server } => {
            let args: &[&str] = if json { &["--json"] } else { &[] };
            remote::run(server, "ng-stats", args)
        }
        Command::Reload { server } => remote::run(server, "ng-reload", &[]),
        Command::Stop { server } => remote::run(server, "ng-stop", &[]),
        Command::Bridge { protocol, command } => bridge(&protocol, command),
        Command::Bench(args) => ExitCode::from(bench::run(&args)),
        Command::Check(args) => ExitCode::from(check::run(&args)),
        Command::Warm(args) => ExitCode::from(warm::warm(&args)),
        Command::Unwarm(args) => ExitCode::from(warm::unwarm(&args)),
        Command::List(args) => ExitCode::from(warm::list(&args)),
        Command::Shims(args) => ExitCode::from(warm::shims(&args)),
        Command::Completions { shell } => {
            cli_docs::completions(shell, Cli::command(), &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { dir } => match cli_docs::write_man_pages(&dir, Cli::command()) {
            Ok(files) => {
                for f in files {
                    println!("{}", f.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("ngd: {e}");
                ExitCode::from(73) // EX_CANTCREAT
            }
        },
    }
}

impl Command {
    /// Whether the command's only pipe is its stdout: no socket to a server, no pipe to a
    /// child it feeds. Those can die of SIGPIPE as other Unix tools do; the others handle
    /// `EPIPE` themselves.
    fn writes_only_stdout(&self) -> bool {
        matches!(
            self,
            Command::Warm(_)
                | Command::Unwarm(_)
                | Command::List(_)
                | Command::Shims(_)
                | Command::Completions { .. }
                | Command::Man { .. }
        )
    }
}

/// `ngd bridge <protocol> -- <command...>`: runs the protocol's bridge as an ngw worker and
/// exits with its status (2 for a bad invocation, as for a bad worker environment).
fn bridge(protocol: &str, command: Vec<OsString>) -> ExitCode {
    let config = match ngw_vocab::BridgeConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ngd bridge {protocol}: {e}");
            return ExitCode::from(2);
        }
    };
    let status = match Protocol::from_name(protocol) {
        #[cfg(feature = "bridge-nu")]
        Some(Protocol::Nu) => ng_bridge_nu::run(command, config),
        #[cfg(feature = "bridge-jsonrpc")]
        Some(Protocol::JsonRpc) => ng_bridge_jsonrpc::run(command, config),
        #[cfg(feature = "bridge-fledge")]
        Some(Protocol::FledgeV1) => ng_bridge_fledge::run(command, config),
        Some(Protocol::Ngw) | None => {
            eprintln!("ngd bridge: no bridge for protocol {protocol:?} (nu, jsonrpc, fledge-v1)");
            2
        }
        #[allow(unreachable_patterns)]
        Some(other) => {
            let _ = (command, config);
            eprintln!("ngd bridge: {}", other.not_built().unwrap_or_default());
            2
        }
    };
    ExitCode::from(u8::try_from(status & 0xff).unwrap_or(1))
}

// `ngd serve`'s command line.
#[derive(clap::Args, Debug)]
struct ServeOptions {
    /// Where to listen: 127.0.0.1:2113, `[::1]:2113` or local:/path.sock (repeatable;
    /// default: the private Unix socket and 127.0.0.1:2113).
    #[arg(long = "listen", value_name = "ADDR")]
    listen: Vec<ListenAddr>,
    /// The configuration file (default: $XDG_CONFIG_HOME/ngd/ngd.toml, if present).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log level or filter (error, warn, info, debug, trace); RUST_LOG also works.
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Allow listening on non-loopback addresses.
    #[arg(long)]
    allow_remote: bool,
    /// Append the log to FILE instead of writing it to stderr.
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
    /// Log line format: text, or json (one object per line).
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<LogFormat>,
    /// Stop after MS milliseconds without any connection (0: never; default: never,
    /// or 15 minutes for a server started by ng's auto-start).
    #[arg(long, value_name = "MS")]
    idle_exit: Option<u64>,
    /// Started on demand by ng: the idle exit defaults to 15 minutes.
    #[arg(long, hide = true)]
    autostarted: bool,
}

/// The C allocator's arenas for `ngd serve`: the loop thread's and one for every nail
/// thread. Each arena keeps what its threads freed; glibc's default (eight per core) let
/// ngd's RSS settle about 3 MiB higher under a soak, with the same live heap.
const MALLOC_ARENAS: u32 = 2;

fn serve(options: ServeOptions) -> ExitCode {
    // A user's MALLOC_ARENA_MAX (or glibc tunable) is theirs to set.
    let user_set = std::env::var_os("MALLOC_ARENA_MAX").is_some()
        || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("arena_max"));
    if !user_set {
        ng_sys::process::limit_malloc_arenas(MALLOC_ARENAS);
    }
    // Both change the environment: before any thread starts.
    let notifier = std::sync::Arc::new(ng_server::activation::Notifier::from_env());
    let activated = ng_server::activation::take_listeners();
    let ServeOptions {
        listen,
        config: config_path,
        log_level,
        allow_remote,
        log_file,
        log_format,
        idle_exit,
        autostarted,
    } = options;
    let (mut config, loaded_from) = match ServerConfig::load(config_path.as_deref()) {
        Ok(loaded) => (loaded.config, loaded.path),
        Err(e) => {
            eprintln!("ngd: {e}");
            return ExitCode::from(78); // EX_CONFIG
        }
    };
    let log = logging::LogOptions {
        level: log_level.or_else(|| config.log_level.clone()),
        format: log_format.unwrap_or(config.log_format),
        file: log_file.or_else(|| config.log_file.clone()),
    };
    if let Err(e) = logging::init(&log) {
        eprintln!("ngd: {e}");
        return ExitCode::from(73); // EX_CANTCREAT
    }
    let activated = match activated {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ngd: {e}");
            return ExitCode::from(71); // EX_OSERR
        }
    };
    if !listen.is_empty() {
        config.listen = listen;
    }
    config.allow_remote |= allow_remote;
    config.idle_exit_ms = match (idle_exit, config.idle_exit_ms) {
        (Some(ms), _) => Some(ms),
        (None, Some(ms)) => Some(ms),
        (None, None) if autostarted => Some(ServerConfig::DEFAULT_AUTOSTART_IDLE_EXIT_MS),
        (None, None) => None,
    };
    if let Some(ms) = config.idle_exit_ms.filter(|&ms| ms > 0) {
        tracing::info!(
            "will stop after {:.1}s without a connection",
            ms as f64 / 1000.0
        );
    }
    let mut builder = Server::builder();
    builder
        .config(config)
        .config_path(loaded_from.or(config_path))
        .handle_signals(true)
        .hand_over_on_upgrade(autostarted);
    if !activated.is_empty() {
        tracing::info!(
            "socket activation: {} listening sockets passed",
            activated.len()
        );
        if let Err(e) = builder.activated_listeners(activated) {
            eprintln!("ngd: socket activation: {e}");
            return ExitCode::from(71); // EX_OSERR
        }
    }
    let server = match builder.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ngd: {e}");
            let config_problem = matches!(
                e,
                ng_server::ServeError::NotLoopback(_) | ng_server::ServeError::Alias { .. }
            );
            // EX_CONFIG for a configuration that cannot work; 1 when listening failed.
            return ExitCode::from(if config_problem { 78 } else { 1 });
        }
    };
    let ready_notifier = notifier.clone();
    let ready = move |addrs: Vec<String>| {
        let addrs = addrs.join(", ");
        println!(
            "ngd {} listening on {addrs}",
            ng_proto::version::current_text()
        );
        let _ = std::io::stdout().flush();
        ready_notifier.notify(&format!(
            "READY=1\nMAINPID={}\nSTATUS=listening on {addrs}",
            std::process::id()
        ));
    };
    let result = server.run_with_ready(ready);
    notifier.notify("STOPPING=1");
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ngd: {e}");
            ExitCode::from(1)
        }
    }
}
