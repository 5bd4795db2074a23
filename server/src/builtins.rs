//! The built-in commands.
//!
//! | command | does |
//! |---|---|
//! | `ng-version` | prints `NailGun server version <v> (ngd)` |
//! | `ng-stats [--json]` | per-command runs, running, failures, latency percentiles |
//! | `ng-stop` | answers `X 0`, then stops the server gracefully |
//! | `ng-reload` | re-reads the configuration file (as SIGHUP does) |
//! | `ng-alias [NAME COMMAND]` | lists aliases, or adds one |
//! | `ng-commands` | what can be run, one line each |
//! | `ng-true` | exits 0 at once: a latency probe |
//! | `ng-cat` | copies stdin to stdout: a throughput probe |
//! | `ng-yes BYTES` | writes that many bytes of `y\n`: an output probe |
//!
//! Usage errors exit 64 (`EX_USAGE`) with a one-line message on stderr.

use crate::registry::{Entry, Registry, Target};
use crate::{Context, Nail};
use std::io::{Read, Write};
use std::sync::Arc;

/// Exit code for a command used wrongly (`EX_USAGE` from sysexits.h).
pub const EX_USAGE: i32 = 64;

/// The version this crate was built as. What the server reports is the version in the
/// binary's marker ([`ng_proto::version::current_text`]), the same unless rewritten.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How a built-in runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// On the event loop: never blocks, never reads stdin.
    Inline,
    /// On the nail pool, with relayed stdio.
    Pool,
    /// On the nail pool, on the client's own descriptors when it passed them.
    ClientFds,
}

fn add(registry: &mut Registry, name: &str, description: &str, mode: Mode, nail: impl Nail) {
    registry.insert(
        name,
        Entry {
            target: Target::Nail {
                nail: Arc::new(nail),
                inline: mode == Mode::Inline,
                client_fds: mode == Mode::ClientFds,
            },
            description: description.to_owned(),
        },
    );
}

/// Registers every built-in command.
pub fn register(registry: &mut Registry) {
    type Builtin = (&'static str, &'static str, Mode, fn(&mut Context) -> i32);
    const BUILTINS: &[Builtin] = &[
        (
            "ng-version",
            "Prints the server version",
            Mode::Inline,
            version,
        ),
        (
            "ng-stats",
            "Per-command and plugin statistics (--json for JSON)",
            Mode::Inline,
            stats,
        ),
        ("ng-stop", "Stops the server gracefully", Mode::Inline, stop),
        (
            "ng-reload",
            "Re-reads the configuration file (plugins, aliases)",
            Mode::Inline,
            reload,
        ),
        (
            "ng-alias",
            "Lists aliases, or adds one: ng-alias NAME COMMAND",
            Mode::Inline,
            alias,
        ),
        (
            "ng-commands",
            "Lists the commands that can be run",
            Mode::Inline,
            commands,
        ),
        (
            "ng-true",
            "Exits 0 at once (latency probe)",
            Mode::Inline,
            true_,
        ),
        (
            "ng-cat",
            "Copies stdin to stdout (throughput probe)",
            Mode::ClientFds,
            cat,
        ),
        (
            "ng-yes",
            "Writes BYTES bytes of 'y\\n' (output probe): ng-yes 64M",
            Mode::Pool,
            yes,
        ),
    ];
    for (name, description, mode, run) in BUILTINS {
        add(registry, name, description, *mode, *run);
    }
}

fn true_(_: &mut Context) -> i32 {
    0
}

fn version(ctx: &mut Context) -> i32 {
    let version = ng_proto::version::current_text();
    let _ = writeln!(ctx.stdout(), "NailGun server version {version} (ngd)");
    0
}

fn usage(ctx: &mut Context, text: &str) -> i32 {
    let _ = writeln!(ctx.stderr(), "usage: {text}");
    EX_USAGE
}

fn stats(ctx: &mut Context) -> i32 {
    let json = match ctx.args_lossy().as_slice() {
        [] => false,
        [flag] if flag == "--json" => true,
        _ => return usage(ctx, "ng-stats [--json]"),
    };
    let server = ctx.server().clone();
    let commands = server.stats().commands();
    let counters = server.stats().counters();
    let plugins = server.plugins();
    let mut out = Vec::new();
    let version = ng_proto::version::current_text();
    let outdated = server.outdated_by();
    let newer = match &outdated {
        Some(crate::upgrade::Outdated::Newer(found)) => Some(found),
        _ => None,
    };
    if json {
        let doc = serde_json::json!({
            "version": version,
            "pid": std::process::id(),
            "uptime_s": server.uptime().as_secs_f64(),
            "nail_threads": server.nail_threads(),
            "connections": counters,
            "commands": commands,
            "plugins": plugins,
            "outdated": outdated.is_some(),
            "newer_ngd": newer.map(|n| serde_json::json!({
                "version": n.version.as_str(),
                "path": n.path.to_string_lossy(),
            })),
            "memory": {
                "rss_bytes": crate::sys::rss_bytes(std::process::id()),
                "heap": crate::sys::heap_info(),
            },
        });
        let _ = writeln!(out, "{doc}");
    } else {
        let _ = writeln!(
            out,
            "ngd {version}, pid {}, up {:.0}s; connections: {} accepted, {} refused; \
             {} protocol errors, {} unknown commands",
            std::process::id(),
            server.uptime().as_secs_f64(),
            counters.accepted,
            counters.refused,
            counters.protocol_errors,
            counters.unknown_commands,
        );
        let rss = crate::sys::rss_bytes(std::process::id());
        if let (Some(rss), Some(heap)) = (rss, crate::sys::heap_info()) {
            let _ = writeln!(
                out,
                "memory: {:.1} MiB resident; heap {} KiB in use, {} KiB free",
                rss as f64 / f64::from(1 << 20),
                heap.in_use >> 10,
                heap.free >> 10,
            );
        }
        match &outdated {
            None => {}
            Some(crate::upgrade::Outdated::Changed) => {
                let _ = writeln!(
                    out,
                    "outdated: ngd's binary changed on disk since this server started; restart \
                     it (ngd stop, then ngd serve, or the next ng starts the new one)"
                );
            }
            Some(crate::upgrade::Outdated::Newer(found)) => {
                let _ = writeln!(
                    out,
                    "outdated: a newer ngd ({}, {}) is installed beside a client of this \
                     server; restart it (ngd stop, then ngd serve, or the next ng starts the \
                     newer one)",
                    found.version,
                    found.path.display()
                );
            }
        }
        let width = commands
            .iter()
            .map(|c| c.command.len())
            .max()
            .unwrap_or(7)
            .max(7);
        let _ = writeln!(
            out,
            "{:width$}  {:>8}  {:>7}  {:>8}  {:>9}  {:>9}  {:>9}  {:>9}",
            "command", "runs", "running", "failures", "p50_ms", "p90_ms", "p99_ms", "max_ms"
        );
        for c in &commands {
            let _ = writeln!(
                out,
                "{:width$}  {:>8}  {:>7}  {:>8}  {:>9.3}  {:>9.3}  {:>9.3}  {:>9.3}",
                c.command, c.runs, c.running, c.failures, c.p50_ms, c.p90_ms, c.p99_ms, c.max_ms
            );
        }
        for p in &plugins {
            let state = match &p.status {
                crate::plugin::PoolStatus::Active => "active".to_owned(),
                crate::plugin::PoolStatus::Retiring => "retiring".to_owned(),
                crate::plugin::PoolStatus::Disabled { reason } => format!("DISABLED: {reason}"),
            };
            let _ = writeln!(
                out,
                "plugin {}: {state}; workers {} idle, {} busy, {} starting, {} quitting; \
                 {}; {:.1} MiB; {} queued; {} sessions; {} restarts; commands: {}; log: {}",
                p.name,
                p.idle,
                p.busy,
                p.starting,
                p.quitting,
                match p.residency {
                    crate::plugin::pool::Residency::Awake => "awake",
                    crate::plugin::pool::Residency::Asleep => "asleep",
                    crate::plugin::pool::Residency::Evicted => "evicted",
                },
                p.memory_bytes as f64 / f64::from(1 << 20),
                p.queued,
                p.sessions,
                p.restarts,
                p.commands.join(" "),
                p.log
            );
            if let Some(why) = &p.last_failure {
                let _ = writeln!(out, "plugin {}: last failure: {why}", p.name);
            }
            if !p.counters.is_empty() {
                let counts: Vec<String> = p
                    .counters
                    .iter()
                    .map(|(name, n)| format!("{name} {n}"))
                    .collect();
                let _ = writeln!(out, "plugin {}: counters: {}", p.name, counts.join(", "));
            }
            if !p.notice_counts.is_empty() {
                let counts: Vec<String> = p
                    .notice_counts
                    .iter()
                    .map(|(kind, n)| format!("{kind} {n}"))
                    .collect();
                let _ = writeln!(out, "plugin {}: notices: {}", p.name, counts.join(", "));
                for n in &p.notices {
                    let _ = writeln!(
                        out,
                        "plugin {}: notice [{}] from pid {}: {}",
                        p.name, n.kind, n.pid, n.message
                    );
                }
            }
        }
    }
    let _ = ctx.stdout().write_all(&out);
    0
}

fn stop(ctx: &mut Context) -> i32 {
    ctx.server().request_stop();
    0
}

fn reload(ctx: &mut Context) -> i32 {
    ctx.server().request_reload();
    let _ = writeln!(
        ctx.stdout(),
        "reload requested; see ng-stats for the plugins' state"
    );
    0
}

fn alias(ctx: &mut Context) -> i32 {
    let args = ctx.args_lossy();
    let server = ctx.server().clone();
    match args.as_slice() {
        [] => {
            let mut out = String::new();
            for (a, c) in server.registry().aliases() {
                out.push_str(&format!("{a}\t{c}\n"));
            }
            let _ = ctx.stdout().write_all(out.as_bytes());
            0
        }
        [name, command] => match server.registry().add_alias(name, command) {
            Ok(()) => 0,
            Err(e) => {
                let _ = writeln!(ctx.stderr(), "ng-alias: {e}");
                1
            }
        },
        _ => usage(ctx, "ng-alias [NAME COMMAND]"),
    }
}

fn commands(ctx: &mut Context) -> i32 {
    let server = ctx.server().clone();
    let registry = server.registry();
    let names: Vec<(String, String)> = registry
        .commands()
        .into_iter()
        .chain(
            registry
                .aliases()
                .into_iter()
                .map(|(a, c)| (a, format!("alias for {c}"))),
        )
        .collect();
    let width = names.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (name, description) in names {
        out.push_str(&format!("{name:width$}  {description}\n"));
    }
    let _ = ctx.stdout().write_all(out.as_bytes());
    0
}

fn cat(ctx: &mut Context) -> i32 {
    if let Some(fds) = ctx.take_client_fds() {
        return cat_fds(ctx, fds);
    }
    let mut buf = vec![0u8; 64 << 10];
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

/// `ng-cat` on the client's own descriptors: copies its fd 0 to its fd 1 directly, as
/// `cat` would, waking every 100 ms to notice a cancellation. A closed fd 0 reads as
/// empty; a closed fd 1 or a reader that went away ends it with 141, the code a cold `cat`
/// killed by SIGPIPE leaves.
fn cat_fds(ctx: &mut Context, fds: crate::ClientFds) -> i32 {
    use std::os::fd::AsRawFd;
    let [input, output, _] = fds;
    let Some(input) = input else {
        return 0;
    };
    let Some(output) = output else {
        return 141;
    };
    let mut buf = vec![0u8; 256 << 10];
    loop {
        if ctx.cancelled().is_some() {
            return 130;
        }
        let n = match wait_fd(input.as_raw_fd(), libc::POLLIN) {
            Ok(false) => continue,
            Ok(true) => ng_sys::fd::read(input.as_raw_fd(), &mut buf),
            Err(_) => return 1,
        };
        match n {
            Ok(0) => return 0,
            Err(e) => match e.kind() {
                std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock => continue,
                _ => return 1,
            },
            Ok(n) => {
                let mut data = &buf[..n];
                while !data.is_empty() {
                    if ctx.cancelled().is_some() {
                        return 130;
                    }
                    match wait_fd(output.as_raw_fd(), libc::POLLOUT) {
                        Ok(false) => continue,
                        Ok(true) => {}
                        Err(_) => return 1,
                    }
                    // ngd runs with SIGPIPE ignored, so a closed pipe reports EPIPE.
                    match ng_sys::fd::write(output.as_raw_fd(), data) {
                        Ok(w) => data = &data[w..],
                        Err(e) => match e.kind() {
                            std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock => {}
                            std::io::ErrorKind::BrokenPipe => return 141,
                            _ => return 1,
                        },
                    }
                }
            }
        }
    }
}

/// Waits up to 100 ms for `events` on `fd`; true when it is ready (or has hung up).
fn wait_fd(fd: std::os::fd::RawFd, events: libc::c_short) -> std::io::Result<bool> {
    let mut pfd = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    match ng_sys::fd::poll(&mut pfd, 100) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// Parses `123`, `64K`, `64M`, `1G` (binary multiples).
pub fn parse_size(s: &str) -> Option<u64> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

fn yes(ctx: &mut Context) -> i32 {
    let args = ctx.args_lossy();
    let total = match args.as_slice() {
        [n] => match parse_size(n) {
            Some(n) => n,
            None => return usage(ctx, "ng-yes BYTES (e.g. 1048576, 64K, 64M, 1G)"),
        },
        _ => return usage(ctx, "ng-yes BYTES (e.g. 1048576, 64K, 64M, 1G)"),
    };
    let block = b"y\n".repeat(64 << 10);
    let mut left = total;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        if ctx.stdout().write_all(&block[..n]).is_err() {
            return 1;
        }
        left -= n as u64;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("10"), Some(10));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("64m"), Some(64 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
    }
}
