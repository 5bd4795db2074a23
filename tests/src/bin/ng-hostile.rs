//! `ng-hostile`: fires every hostile-client attack at a running `ngd` and prints the matrix.
//!
//! ```text
//! ng-hostile --server ADDR [--server ADDR]... --pid PID [--config FILE]
//!            [--rounds N] [--concurrency C] [--kinds K,K...] [--markdown] [--list]
//!            [--slack-ms MS] [--rss-tolerance-kib KIB]
//!            [--header-timeout-ms MS] [--heartbeat-timeout-ms MS] [--max-connections N]
//!            [--max-chunk-bytes N] [--max-header-bytes N]
//! ```
//!
//! ADDR is `127.0.0.1:PORT`, `[::1]:PORT` or `local:/path/to.sock`; give both the TCP and
//! the Unix address to attack both (attempts alternate). PID is the server's, for
//! `/proc/PID/{fd,status,stat}`. The server's limits decide what each attack must get:
//! `--config` reads them from the server's `ngd.toml`, the `--header-timeout-ms`... options
//! override them, and `ngd`'s defaults fill in the rest. `tests/hostile-run` builds, starts a
//! server and runs this. The library is `ng_tests::hostile`.
//!
//! Exit status: 0 if every kind passed, 1 if any failed (the details follow the matrix), 2
//! for bad usage.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ng_tests::hostile::{self, Kind, Limits, Plan, Target};
use ng_tests::Address;

const USAGE: &str = "usage: ng-hostile --server ADDR [--server ADDR]... --pid PID \
[--config FILE] [--rounds N] [--concurrency C] [--kinds K,K...] [--markdown] [--list] \
[--slack-ms MS] [--rss-tolerance-kib KIB] [--header-timeout-ms MS] [--heartbeat-timeout-ms MS] \
[--max-connections N] [--max-chunk-bytes N] [--max-header-bytes N]";

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("ng-hostile: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn parse_address(s: &str) -> Result<Address, String> {
    match s.strip_prefix("local:") {
        Some(path) => Ok(Address::Unix(path.into())),
        None => s
            .parse()
            .map(Address::Tcp)
            .map_err(|_| format!("not an address: {s:?} (127.0.0.1:PORT, [::1]:PORT, local:PATH)")),
    }
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag} wants a number, not {value:?}"))
}

fn run() -> Result<bool, String> {
    let mut addresses = Vec::new();
    let mut pid = None;
    let mut config = None;
    let mut plan = Plan::full();
    let mut kinds: Vec<Kind> = Kind::ALL.to_vec();
    let mut markdown = false;
    let mut overrides: Vec<(String, u64)> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--markdown" {
            markdown = true;
            continue;
        }
        if flag == "--list" {
            for k in Kind::ALL {
                println!("{:<22} {}", k.name(), k.what());
            }
            return Ok(true);
        }
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            return Ok(true);
        }
        let value = args.next().ok_or_else(|| format!("{flag} wants a value"))?;
        match flag.as_str() {
            "--server" => addresses.push(parse_address(&value)?),
            "--pid" => pid = Some(number::<u32>(&flag, &value)?),
            "--config" => config = Some(value),
            "--rounds" => plan.rounds = number(&flag, &value)?,
            "--concurrency" => plan.concurrency = number(&flag, &value)?,
            "--slack-ms" => plan.slack = Duration::from_millis(number(&flag, &value)?),
            "--rss-tolerance-kib" => plan.rss_tolerance_kib = number(&flag, &value)?,
            "--kinds" => {
                kinds = value
                    .split(',')
                    .filter(|k| !k.is_empty())
                    .map(|k| Kind::from_name(k).ok_or_else(|| format!("no kind {k:?} (--list)")))
                    .collect::<Result<_, _>>()?;
            }
            "--header-timeout-ms"
            | "--heartbeat-timeout-ms"
            | "--max-connections"
            | "--max-chunk-bytes"
            | "--max-header-bytes" => overrides.push((flag.clone(), number(&flag, &value)?)),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if addresses.is_empty() {
        return Err("no --server".into());
    }
    let pid = pid.ok_or("no --pid")?;
    if plan.rounds == 0 || plan.concurrency == 0 {
        return Err("--rounds and --concurrency must be at least 1".into());
    }
    let mut limits = match &config {
        Some(path) => {
            let c = ng_server::config::ServerConfig::from_file(path.as_ref())
                .map_err(|e| format!("{path}: {e}"))?;
            Limits::from_config(&c).ok_or_else(|| {
                format!("{path}: header_timeout_ms and heartbeat_timeout_ms must not be 0")
            })?
        }
        None => Limits::ngd_defaults(),
    };
    for (flag, v) in overrides {
        match flag.as_str() {
            "--header-timeout-ms" => limits.header_timeout = Duration::from_millis(v),
            "--heartbeat-timeout-ms" => limits.heartbeat_timeout = Duration::from_millis(v),
            "--max-connections" => limits.max_connections = v as usize,
            "--max-chunk-bytes" => limits.max_chunk_bytes = v as u32,
            _ => limits.max_header_bytes = v,
        }
    }
    if limits.header_timeout.is_zero() || limits.heartbeat_timeout.is_zero() {
        return Err("the header and heartbeat timeouts must not be 0".into());
    }
    if plan.concurrency + 2 > limits.max_connections {
        return Err(format!(
            "--concurrency {} leaves no room under max_connections {} for the ng-true probe",
            plan.concurrency, limits.max_connections
        ));
    }
    if !ng_testkit::procfs::running(pid) {
        return Err(format!("no process {pid}"));
    }
    if !hostile::allocator_pinned(pid) {
        let env: Vec<String> = hostile::MALLOC_ENV
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        eprintln!(
            "ng-hostile: warning: the server does not run with {}: glibc keeps freed buffers \
             resident, so the RSS checks may fail without a leak (tests/hostile-run sets it)",
            env.join(" ")
        );
    }
    hostile::raise_fd_limit();
    let target = Target {
        addresses,
        pid,
        limits,
    };
    let listed: Vec<String> = target.addresses.iter().map(|a| a.to_string()).collect();
    eprintln!(
        "ng-hostile: {} kinds × {} rounds × {} at once against pid {pid} at {}",
        kinds.len(),
        plan.rounds,
        plan.concurrency,
        listed.join(", ")
    );
    eprintln!(
        "ng-hostile: limits: header timeout {:?}, heartbeat timeout {:?}, max_connections {}, \
         max_chunk_bytes {}, max_header_bytes {}; slack {:?}, RSS tolerance {} KiB",
        limits.header_timeout,
        limits.heartbeat_timeout,
        limits.max_connections,
        limits.max_chunk_bytes,
        limits.max_header_bytes,
        plan.slack,
        plan.rss_tolerance_kib
    );
    let started = Instant::now();
    let baseline = hostile::warm_up(&target, &plan)?;
    eprintln!(
        "ng-hostile: warmed up: {} descriptors, RSS {} KiB",
        baseline.fds, baseline.rss_kib
    );
    let mut reports = Vec::new();
    for kind in kinds {
        let report = hostile::run_kind(&target, kind, &plan, &baseline);
        eprintln!(
            "ng-hostile: {:<22} {:>5} attempts  {:<44} {:>7.2?}  {}",
            kind.name(),
            report.count,
            report.outcome_summary(),
            report.elapsed,
            if report.passed() { "ok" } else { "FAIL" }
        );
        reports.push(report);
        if !ng_testkit::procfs::running(pid) {
            eprintln!("ng-hostile: the server died; stopping");
            break;
        }
    }
    let passed = reports.iter().all(|r| r.passed());
    print!("{}", hostile::matrix(&reports, markdown));
    println!();
    println!(
        "{} kinds, {} attempts, {:.0?} in all; {}",
        reports.len(),
        reports.iter().map(|r| r.count).sum::<usize>(),
        started.elapsed(),
        if passed {
            "every kind passed".to_string()
        } else {
            format!(
                "{} kinds FAILED",
                reports.iter().filter(|r| !r.passed()).count()
            )
        }
    );
    if !passed {
        println!();
        print!("{}", hostile::failure_details(&reports));
    }
    Ok(passed)
}
