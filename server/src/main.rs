//! The `ngd` binary: `ngd serve`, `ngd status`, `ngd reload`, `ngd stop`.
//!
//! `serve` runs the server in the foreground and prints one line saying where it listens
//! once it accepts connections. `status`, `reload` and `stop` talk to a running server over
//! the Nailgun protocol (they run its `ng-stats`, `ng-reload` and `ng-stop` commands), on `--server ADDR` or
//! the default Unix socket, then `127.0.0.1:2113`.

use clap::{Parser, Subcommand};
use ng_proto::{ClientConfig, ClientEvent, ClientSession, Header};
use ng_server::config::{ListenAddr, ServerConfig};
use ng_server::Server;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "ngd",
    version,
    about = "A persistent command server speaking Nailgun"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the server in the foreground.
    Serve {
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
    },
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            listen,
            config,
            log_level,
            allow_remote,
        } => serve(listen, config, log_level, allow_remote),
        Command::Status { json, server } => {
            let args: &[&str] = if json { &["--json"] } else { &[] };
            remote(server, "ng-stats", args)
        }
        Command::Reload { server } => remote(server, "ng-reload", &[]),
        Command::Stop { server } => remote(server, "ng-stop", &[]),
    }
}

fn serve(
    listen: Vec<ListenAddr>,
    config_path: Option<PathBuf>,
    log_level: Option<String>,
    allow_remote: bool,
) -> ExitCode {
    let (mut config, loaded_from) = match ServerConfig::load(config_path.as_deref()) {
        Ok(loaded) => (loaded.config, loaded.path),
        Err(e) => {
            eprintln!("ngd: {e}");
            return ExitCode::from(78); // EX_CONFIG
        }
    };
    ng_server::init_logging(log_level.as_deref().or(config.log_level.as_deref()));
    if !listen.is_empty() {
        config.listen = listen;
    }
    config.allow_remote |= allow_remote;
    let mut builder = Server::builder();
    builder
        .config(config)
        .config_path(loaded_from.or(config_path))
        .handle_signals(true);
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
    let ready = |addrs: Vec<String>| {
        println!(
            "ngd {} listening on {}",
            env!("CARGO_PKG_VERSION"),
            addrs.join(", ")
        );
        let _ = std::io::stdout().flush();
    };
    match server.run_with_ready(ready) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ngd: {e}");
            ExitCode::from(1)
        }
    }
}

/// A blocking connection to a running server, split into read and write halves.
type Halves = (Box<dyn Read>, Box<dyn Write>);

fn connect(addr: &ListenAddr) -> std::io::Result<Halves> {
    match addr {
        ListenAddr::Tcp(a) => {
            let s = std::net::TcpStream::connect(a)?;
            s.set_nodelay(true)?;
            Ok((Box::new(s.try_clone()?), Box::new(s)))
        }
        ListenAddr::Unix(p) => {
            let s = std::os::unix::net::UnixStream::connect(p)?;
            Ok((Box::new(s.try_clone()?), Box::new(s)))
        }
    }
}

/// Runs one built-in command on a running server and relays its output.
fn remote(server: Option<ListenAddr>, command: &str, args: &[&str]) -> ExitCode {
    let candidates = match server {
        Some(a) => vec![a],
        None => ServerConfig::default().listen_addrs(),
    };
    let mut conn = None;
    let mut errors = Vec::new();
    for addr in &candidates {
        match connect(addr) {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            Err(e) => errors.push(format!("{addr}: {e}")),
        }
    }
    let Some((mut reader, mut writer)) = conn else {
        eprintln!("ngd: no server is running ({})", errors.join("; "));
        return ExitCode::from(1);
    };
    let now = Instant::now();
    let mut session = ClientSession::new(ClientConfig::default(), now);
    let header = Header {
        command: command.as_bytes().to_vec(),
        args: args
            .iter()
            .map(|a| ng_proto::HeaderArg::Plain(a.as_bytes().to_vec()))
            .collect(),
        env: Vec::new(),
        cwd: std::env::current_dir()
            .map(|p| p.into_os_string().into_encoded_bytes())
            .unwrap_or_default(),
    };
    session.send_header(&header, now);
    if let Err(e) = writer.write_all(&session.take_transmit()) {
        eprintln!("ngd: send: {e}");
        return ExitCode::from(1);
    }
    let mut buf = bytes::BytesMut::with_capacity(64 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("ngd: recv: {e}");
                return ExitCode::from(1);
            }
        };
        if n == 0 {
            eprintln!("ngd: the server closed the connection early");
            return ExitCode::from(1);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Err(e) = session.handle_bytes(&mut buf) {
            eprintln!("ngd: {e}");
            return ExitCode::from(1);
        }
        while let Some(event) = session.poll_event() {
            match event {
                ClientEvent::Stdout(b) => {
                    let _ = std::io::stdout().write_all(&b);
                }
                ClientEvent::Stderr(b) => {
                    let _ = std::io::stderr().write_all(&b);
                }
                ClientEvent::StdinRequested => {
                    session.send_stdin_eof(Instant::now());
                    let _ = writer.write_all(&session.take_transmit());
                }
                ClientEvent::Exit(code) | ClientEvent::ExitBySignal { code, .. } => {
                    let _ = std::io::stdout().flush();
                    return ExitCode::from(ng_proto::exit::status(code));
                }
                // This client announces no extensions, so these never come.
                ClientEvent::Extensions(_) | ClientEvent::Stopped(_) => {}
            }
        }
    }
}
