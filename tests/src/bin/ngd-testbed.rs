//! `ngd-testbed`: an `ngd` with the end-to-end test nails built in.
//!
//! The client scenarios in `tests/e2e/` run the logical test nails (`Echo`, `Dump`,
//! `Exit`, `Sleep`) whose reference implementations are the Java classes in
//! `tests/java/ngtest/`. This binary is the `ng-server` library with the same nails as
//! embedded Rust commands, honouring exactly the output contract of the Java ones, so the
//! same scenario bodies run against `ngd`'s event loop, connection handling and built-ins:
//!
//! | command | contract (see `tests/java/ngtest/*.java`) |
//! |---|---|
//! | `ngtest-echo` | copies stdin to stdout until end of input; exit 0 |
//! | `ngtest-dump` | `A:<hex>` per argument, `E:<hex>:<hex>` per variable (sorted, later duplicates win), `D:<hex>` |
//! | `ngtest-exit N` | `exit N` on stdout, `exiting with N` on stderr, exit N |
//! | `ngtest-sleep MS` | `sleeping MS`, sleeps, `slept, client connected: <true\|false>` |
//!
//! `ngtest-sleep` wakes early when `ngd` cancels it (the client went away or stopped
//! heartbeating): `ngd` cancels where the reference server only notes the disconnect, and
//! the final line then says `false` (and is usually not delivered, the client being gone).
//!
//! Command line, as `ngd serve`'s (the `serve` word is optional):
//!
//! ```text
//! ngd-testbed [serve] [--listen ADDR]... [--config FILE] [--heartbeat-timeout-ms MS]
//! ```
//!
//! It prints `ngd-testbed <version> listening on <addresses>` once it accepts connections,
//! logs to stderr like `ngd`, and stops on `ng-stop`, SIGTERM or SIGINT.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ng_server::config::{ListenAddr, ServerConfig};
use ng_server::{Context, Server};

/// Logs to stderr as `ngd` does (the library installs no subscriber): `level`, a level or a
/// `tracing` filter, else `RUST_LOG`, else `info`; colour only on a terminal.
fn init_logging(level: Option<&str>) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::EnvFilter;
    let default = || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(level.map_or_else(default, EnvFilter::new))
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // An error only means a subscriber is already installed.
    let _ = subscriber.try_init();
}

/// The command-line options.
#[derive(Debug, Default)]
struct Options {
    listen: Vec<ListenAddr>,
    config: Option<PathBuf>,
    heartbeat_timeout_ms: Option<u64>,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options::default();
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("serve") {
        args.next();
    }
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--listen" => {
                let v = value("--listen")?;
                options
                    .listen
                    .push(v.parse().map_err(|e| format!("--listen {v}: {e}"))?);
            }
            "--config" => options.config = Some(PathBuf::from(value("--config")?)),
            "--heartbeat-timeout-ms" => {
                let v = value("--heartbeat-timeout-ms")?;
                options.heartbeat_timeout_ms = Some(
                    v.parse()
                        .map_err(|e| format!("--heartbeat-timeout-ms {v}: {e}"))?,
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "ngd-testbed: {e}\nusage: ngd-testbed [serve] [--listen ADDR]... \
                 [--config FILE] [--heartbeat-timeout-ms MS]"
            );
            return ExitCode::from(64);
        }
    };
    let mut config = match ServerConfig::load(options.config.as_deref()) {
        Ok(loaded) => loaded.config,
        Err(e) => {
            eprintln!("ngd-testbed: {e}");
            return ExitCode::from(78);
        }
    };
    init_logging(config.log_level.as_deref());
    if !options.listen.is_empty() {
        config.listen = options.listen;
    }
    if let Some(ms) = options.heartbeat_timeout_ms {
        config.heartbeat_timeout_ms = ms;
    }
    let mut builder = Server::builder();
    builder
        .config(config)
        .handle_signals(true)
        .nail("ngtest-echo", "Copies stdin to stdout (test nail)", echo)
        .nail(
            "ngtest-dump",
            "Prints args, env and cwd in hex (test nail)",
            dump,
        )
        .nail(
            "ngtest-exit",
            "ngtest-exit N: exits with N (test nail)",
            exit,
        )
        .nail("ngtest-sleep", "ngtest-sleep MS: sleeps (test nail)", sleep)
        .nail_with_client_fds(
            "ngtest-fds",
            "Describes the client descriptors it runs on (test nail)",
            fds,
        );
    let server = match builder.build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ngd-testbed: {e}");
            return ExitCode::from(1);
        }
    };
    println!(
        "ngd-testbed {} listening on {}",
        env!("CARGO_PKG_VERSION"),
        server.listening().join(", ")
    );
    let _ = std::io::stdout().flush();
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ngd-testbed: {e}");
            ExitCode::from(1)
        }
    }
}

/// `Echo.java`: stdin to stdout, one write per read, until end of input.
fn echo(ctx: &mut Context) -> i32 {
    let mut buf = vec![0u8; 16384];
    loop {
        let n = match ctx.stdin().read(&mut buf) {
            Ok(0) => return 0,
            Ok(n) => n,
            Err(_) => return 1,
        };
        if ctx.stdout().write_all(&buf[..n]).is_err() {
            return 1;
        }
    }
}

/// `Dump.java`: what the server received, every string as lowercase hex of its bytes.
fn dump(ctx: &mut Context) -> i32 {
    let mut out = String::new();
    for arg in ctx.args() {
        let _ = writeln!(out, "A:{}", hex(arg));
    }
    // Sorted by name; a later duplicate replaces an earlier one (Java's Properties).
    let env: BTreeMap<&[u8], &[u8]> = ctx
        .env()
        .iter()
        .map(|(k, v)| (k.as_ref(), v.as_ref()))
        .collect();
    for (name, value) in env {
        let _ = writeln!(out, "E:{}:{}", hex(name), hex(value));
    }
    if let Some(cwd) = &ctx.request().cwd {
        let _ = writeln!(out, "D:{}", hex(cwd));
    }
    match ctx.stdout().write_all(out.as_bytes()) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// `Exit.java`: one line on each stream, then the code from the only argument.
fn exit(ctx: &mut Context) -> i32 {
    let Some(code) = ctx.args_lossy().first().and_then(|a| a.parse::<i32>().ok()) else {
        let _ = writeln!(ctx.stderr(), "usage: ngtest-exit CODE");
        return 64;
    };
    let _ = writeln!(ctx.stdout(), "exit {code}");
    let _ = writeln!(ctx.stderr(), "exiting with {code}");
    code
}

/// Writes one line per descriptor 0, 1, 2 to the client's own stderr if it has it (else to
/// the relayed stderr): `fd N: closed` or `fd N: dev:ino tty=BOOL`, so a test can compare
/// them with what the client itself has; then `relayed` on the relayed stdout. A command
/// started without the client's descriptors writes `no descriptors` there instead.
fn fds(ctx: &mut Context) -> i32 {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let Some(fds) = ctx.take_client_fds() else {
        let _ = writeln!(ctx.stdout(), "no descriptors");
        return 0;
    };
    let mut report = String::new();
    for (n, fd) in fds.iter().enumerate() {
        match fd {
            None => report.push_str(&format!("fd {n}: closed\n")),
            Some(fd) => {
                let file = std::fs::File::from(fd.try_clone().expect("dup"));
                let meta = file.metadata().expect("fstat");
                // SAFETY: isatty on a descriptor we own.
                let tty = unsafe { libc::isatty(fd.as_raw_fd()) } == 1;
                report.push_str(&format!(
                    "fd {n}: {}:{} tty={tty}\n",
                    meta.dev(),
                    meta.ino()
                ));
            }
        }
    }
    match &fds[2] {
        Some(err) => {
            let mut err = std::fs::File::from(err.try_clone().expect("dup"));
            let _ = err.write_all(report.as_bytes());
        }
        None => {
            let _ = ctx.stderr().write_all(report.as_bytes());
        }
    }
    let _ = writeln!(ctx.stdout(), "relayed");
    0
}

/// `Sleep.java`: a line, the sleep, a line saying whether the client is still there.
fn sleep(ctx: &mut Context) -> i32 {
    let Some(millis) = ctx.args_lossy().first().and_then(|a| a.parse::<u64>().ok()) else {
        let _ = writeln!(ctx.stderr(), "usage: ngtest-sleep MILLIS");
        return 64;
    };
    let _ = writeln!(ctx.stdout(), "sleeping {millis}");
    let cancelled = ctx.wait_cancelled(Duration::from_millis(millis));
    let connected = !cancelled && ctx.cancelled().is_none();
    let _ = writeln!(ctx.stdout(), "slept, client connected: {connected}");
    0
}
