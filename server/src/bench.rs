//! `ngd bench`: a command's start-up, cold (exec'd as the user would) against warm (through
//! `ng` and `ngd`), and the runner it shares with `ngd check`.
//!
//! ```text
//! ngd bench [--runs N] [--warmup N] [--json] [--server ADDR] [--name NAME] -- COMMAND [ARGS...]
//! ```
//!
//! * **Cold** runs `COMMAND ARGS...` directly: the program a shell finds for it, skipping
//!   links to `ng` (shims). **Warm** runs `ng NAME ARGS...` (`NAME`: the
//!   basename of `COMMAND` unless `--name`), on the server at `--server`, else where `ng`
//!   looks by default (starting one if none runs). When that server does not offer `NAME`,
//!   the command is served **ad hoc**: a private `ngd` on a temporary socket with one
//!   plugin, `PYTHON -m ngw script NAME=COMMAND`, for a Python script (its `#!` line names
//!   the interpreter; `ngw` is the SDK ngd carries, `sdk = "python"`). Other programs need
//!   a plugin in the configuration.
//! * After `--warmup` untimed runs of each, the cold, warm and floor (`/bin/true`, the cost
//!   of starting any process) runs are **interleaved**, in a rotating order, so drift in
//!   the machine's load affects all three alike. Time is wall-clock from spawn to reaped.
//! * Every run's stdout, stderr and exit code are compared with the first cold run's
//!   (the **identity check**); cold runs are compared too, so a command whose output
//!   varies by itself is reported as such rather than blamed on ngd.
//! * The report gives median, p10 and p90 of each, the ratio cold/warm and warm's distance
//!   from the floor; `--json` prints the same as one JSON object. A progress bar shows on
//!   stderr when it is a terminal. When cold and warm are identical, the medians are kept
//!   for `ngd list` (`$XDG_STATE_HOME/ngd/bench/NAME.json`).
//!
//! Exit status: 0 identical, 1 a difference was found, 64 usage, 66 the command is not
//! found, 69 it cannot be served warm (the message says why), 71 a program could not be run.

use std::ffi::{OsStr, OsString};
use std::io::{IsTerminal as _, Read as _, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::ListenAddr;

/// Exit status: a difference between cold and warm.
pub const EXIT_DIFFERENT: u8 = 1;
/// Exit status: the command does not exist (`EX_NOINPUT`).
pub const EXIT_NOT_FOUND: u8 = 66;
/// Exit status: the command cannot be served warm (`EX_UNAVAILABLE`).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Exit status: a program could not be started (`EX_OSERR`).
pub const EXIT_OSERR: u8 = 71;

/// How many differences are listed at most.
const MAX_DIFFERENCES: usize = 8;
/// How long an ad hoc server may take to become ready (it starts a Python worker).
const AD_HOC_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// `ngd bench`'s command line.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Timed runs of each (cold, warm, floor).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub runs: u32,
    /// Untimed runs of each first.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The server for warm runs (default: where `ng` looks, starting one if needed).
    #[arg(long, value_name = "ADDR")]
    pub server: Option<ListenAddr>,
    /// The command's name on the server (default: the basename of COMMAND).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The command and its arguments, run cold as given.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// One way of running the command.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Bytes fed to its stdin (`None`: `/dev/null`).
    pub stdin: Option<std::sync::Arc<Vec<u8>>>,
}

impl Spec {
    /// `program args...` with stdin from `/dev/null`.
    pub fn new(program: impl Into<PathBuf>, args: Vec<OsString>) -> Self {
        Self {
            program: program.into(),
            args,
            stdin: None,
        }
    }
}

/// What one run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
    /// The exit code as a shell reports it (128 + N for a signal).
    pub code: i32,
    /// Spawn to reaped.
    pub elapsed: Duration,
}

/// Runs `spec` once in this process's environment and directory, capturing its output.
pub fn run_once(spec: &Spec) -> std::io::Result<Outcome> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let feeder = match (&spec.stdin, child.stdin.take()) {
        (Some(bytes), Some(mut pipe)) => {
            let bytes = bytes.clone();
            // A command that does not read all of its input closes the pipe: not an error.
            Some(std::thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            }))
        }
        _ => None,
    };
    let output = child.wait_with_output()?;
    let elapsed = started.elapsed();
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let code = match (output.status.code(), output.status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => -1,
    };
    Ok(Outcome {
        stdout: output.stdout,
        stderr: output.stderr,
        code,
        elapsed,
    })
}

/// How `warm` differs from `reference`, one line per stream that differs.
pub fn differences(reference: &Outcome, other: &Outcome) -> Vec<String> {
    let mut out = Vec::new();
    for (stream, a, b) in [
        ("stdout", &reference.stdout, &other.stdout),
        ("stderr", &reference.stderr, &other.stderr),
    ] {
        if a != b {
            out.push(describe_difference(stream, a, b));
        }
    }
    if reference.code != other.code {
        out.push(format!(
            "exit code: {} against {}",
            reference.code, other.code
        ));
    }
    out
}

/// `stream: N bytes against M; first difference at line L: "..." against "..."`.
fn describe_difference(stream: &str, a: &[u8], b: &[u8]) -> String {
    let at = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let line = a[..at].iter().filter(|&&c| c == b'\n').count() + 1;
    let line_start = a[..at]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |p| p + 1);
    let excerpt = |s: &[u8]| {
        let rest = &s[line_start.min(s.len())..];
        let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
        let text = String::from_utf8_lossy(&rest[..end.min(120)]).into_owned();
        format!("{text:?}")
    };
    format!(
        "{stream}: {} bytes against {}; first difference on line {line}: {} against {}",
        a.len(),
        b.len(),
        excerpt(a),
        excerpt(b)
    )
}

/// Median and spread of some durations, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    /// The median.
    pub median_ms: f64,
    /// 10th percentile (nearest rank).
    pub p10_ms: f64,
    /// 90th percentile (nearest rank).
    pub p90_ms: f64,
    /// The fastest.
    pub min_ms: f64,
    /// The slowest.
    pub max_ms: f64,
}

impl Summary {
    /// The summary of `samples` (at least one).
    pub fn of(samples: &[Duration]) -> Self {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        ms.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            if ms.is_empty() {
                return 0.0;
            }
            let i = ((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1;
            ms[i]
        };
        let median = if ms.is_empty() {
            0.0
        } else if ms.len() % 2 == 1 {
            ms[ms.len() / 2]
        } else {
            (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
        };
        Self {
            median_ms: median,
            p10_ms: rank(0.10),
            p90_ms: rank(0.90),
            min_ms: ms.first().copied().unwrap_or(0.0),
            max_ms: ms.last().copied().unwrap_or(0.0),
        }
    }
}

/// Finds `name` as a shell would: a path if it has a slash, else the first executable in
/// `PATH`; `skip` excludes candidates (`ng` symlinks, for `ngd check`).
pub fn find_program(name: &OsStr, skip: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.as_bytes().contains(&b'/') {
        let p = PathBuf::from(name);
        return executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| executable(p) && !skip(p))
}

/// The `ng` client: next to this `ngd`, else on `PATH`.
pub fn ng_binary() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("ng")))
        .filter(|p| p.is_file());
    beside.or_else(|| find_program(OsStr::new("ng"), |_| false))
}

/// The arguments naming `server` for `ng`.
pub fn ng_server_args(server: Option<&ListenAddr>) -> Vec<OsString> {
    match server {
        None => Vec::new(),
        Some(ListenAddr::Unix(p)) => {
            let mut v = OsString::from("local:");
            v.push(p);
            vec!["--nailgun-server".into(), v]
        }
        Some(ListenAddr::Tcp(a)) => vec![
            "--nailgun-server".into(),
            a.ip().to_string().into(),
            "--nailgun-port".into(),
            a.port().to_string().into(),
        ],
    }
}

/// The commands a server offers (`ng-commands`), or why they cannot be listed.
pub fn server_commands(ng: &Path, server: Option<&ListenAddr>) -> Result<Vec<String>, String> {
    let mut args = ng_server_args(server);
    args.push("ng-commands".into());
    let out = run_once(&Spec::new(ng, args)).map_err(|e| format!("cannot run ng: {e}"))?;
    if out.code != 0 {
        return Err(format!(
            "`ng ng-commands` failed with {}: {}",
            out.code,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect())
}

/// A private `ngd` serving one command ad hoc, stopped on drop.
#[derive(Debug)]
pub struct AdHocServer {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
    log: PathBuf,
}

impl AdHocServer {
    /// Starts `ngd serve` on a temporary socket with one plugin serving `name` by running
    /// the Python script `program` in fork mode (`PYTHON -m ngw script NAME=PROGRAM`, with
    /// the SDK ngd carries).
    pub fn start(name: &str, program: &Path) -> Result<Self, String> {
        let interpreter = python_shebang(program).ok_or_else(|| {
            format!(
                "no server offers '{name}', and {} is not a Python script, so it cannot be \
                 served ad hoc: add a [[plugin]] for it to the configuration",
                program.display()
            )
        })?;
        let mut command: Vec<String> = interpreter
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        command.extend([
            "-m".to_owned(),
            "ngw".to_owned(),
            "script".to_owned(),
            format!("{name}={}", program.display()),
        ]);
        let quoted: Vec<String> = command
            .iter()
            .map(|s| serde_json::to_string(s).unwrap_or_default())
            .collect();
        Self::with_config(|dir| {
            format!(
                "[[plugin]]\nname = \"bench\"\ncommand = [{}]\nsdk = \"python\"\ncommands = [{}]\nmin_workers = 1\nmax_workers = 2\nlog = {}\n",
                quoted.join(", "),
                serde_json::to_string(name).unwrap_or_default(),
                serde_json::to_string(&dir.join("plugin.log")).unwrap_or_default(),
            )
        })
    }

    /// Starts `ngd serve` on a temporary socket with the configuration `config(dir)`
    /// returns, given the server's temporary directory (for its plugins' logs), and waits
    /// until it is ready.
    pub fn with_config(config: impl FnOnce(&Path) -> String) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find ngd itself: {e}"))?;
        let dir = std::env::temp_dir().join(format!(
            "ngd-bench-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let config = config(&dir);
        let config_path = dir.join("ngd.toml");
        let socket = dir.join("ngd.sock");
        let log = dir.join("ngd.log");
        std::fs::write(&config_path, config).map_err(|e| format!("{e}"))?;
        let log_file = std::fs::File::create(&log).map_err(|e| format!("{e}"))?;
        let mut child = Command::new(exe)
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .arg("--listen")
            .arg(format!("local:{}", socket.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot start ngd: {e}"))?;
        let mut stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = Vec::new();
            let mut byte = [0u8; 1];
            while let Ok(1) = stdout.read(&mut byte) {
                if byte[0] == b'\n' {
                    break;
                }
                line.push(byte[0]);
            }
            let _ = tx.send(line);
        });
        let server = Self {
            child,
            dir,
            socket,
            log,
        };
        match rx.recv_timeout(AD_HOC_READY_TIMEOUT) {
            Ok(line) if line.windows(13).any(|w| w == b" listening on") => Ok(server),
            _ => Err(format!(
                "the ad hoc server did not start: {}",
                std::fs::read_to_string(&server.log)
                    .unwrap_or_default()
                    .trim()
            )),
        }
    }

    /// Its address.
    pub fn address(&self) -> ListenAddr {
        ListenAddr::Unix(self.socket.clone())
    }
}

impl Drop for AdHocServer {
    fn drop(&mut self) {
        // Our own child, which we have not reaped yet.
        ng_sys::signal::kill(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The interpreter named by a Python script's `#!` line (with `env`, its arguments).
fn python_shebang(program: &Path) -> Option<Vec<OsString>> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&c| c == b'\n')?];
    let words: Vec<OsString> = line
        .split(|c| c.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(|w| OsStr::from_bytes(w).to_os_string())
        .collect();
    let is_python = words.iter().any(|w| {
        Path::new(w)
            .file_name()
            .is_some_and(|f| f.as_bytes().starts_with(b"python"))
    });
    (is_python && !words.is_empty()).then_some(words)
}

/// The measured result, as `--json` prints it.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// The command as run cold.
    pub command: Vec<String>,
    /// The program run cold (shims skipped).
    pub cold_program: String,
    /// Its name on the server.
    pub name: String,
    /// `configured` or `ad hoc`.
    pub mode: &'static str,
    /// Timed runs of each.
    pub runs: u32,
    /// Untimed runs of each first.
    pub warmup: u32,
    /// Cold runs.
    pub cold: Summary,
    /// Warm runs.
    pub warm: Summary,
    /// `/bin/true` runs.
    pub floor: Summary,
    /// Cold median / warm median.
    pub ratio: f64,
    /// Warm median minus floor median, in milliseconds.
    pub warm_above_floor_ms: f64,
    /// Whether every run matched the first cold run.
    pub identical: bool,
    /// The differences found (at most a few).
    pub differences: Vec<String>,
    /// The first cold run's exit code.
    pub exit_code: i32,
}

/// Runs `ngd bench` and returns its exit status.
pub fn run(args: &BenchArgs) -> u8 {
    conclude("ngd bench", bench(args), args.json, print_report, |r| {
        r.identical
    })
}

/// How `ngd bench` and `ngd check` end: the report as JSON or as text, then 0 when the cold
/// and warm runs were identical and [`EXIT_DIFFERENT`] when not; an error is said on
/// stderr and its code returned.
pub(crate) fn conclude<R: serde::Serialize>(
    name: &str,
    result: Result<R, (u8, String)>,
    json: bool,
    print: fn(&R),
    identical: fn(&R) -> bool,
) -> u8 {
    match result {
        Ok(report) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            } else {
                print(&report);
            }
            if identical(&report) {
                0
            } else {
                EXIT_DIFFERENT
            }
        }
        Err((code, message)) => {
            eprintln!("{name}: {message}");
            code
        }
    }
}

/// The floor: `/bin/true`.
const FLOOR: &str = "/bin/true";

fn bench(args: &BenchArgs) -> Result<Report, (u8, String)> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or((64, "no command given".to_owned()))?;
    let ng = ng_binary().ok_or((
        EXIT_UNAVAILABLE,
        "cannot find the ng client (next to ngd, or on PATH)".to_owned(),
    ))?;
    // A shim (a link to ng, as `ngd warm` makes) is the warm side, never the cold one.
    let resolved =
        find_program(program, |p| crate::check::is_ng(p, Some(&ng))).ok_or_else(|| {
            (
                EXIT_NOT_FOUND,
                format!("{}: command not found", program.to_string_lossy()),
            )
        })?;
    let name = match &args.name {
        Some(n) => n.clone(),
        None => Path::new(program)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let offered = server_commands(&ng, args.server.as_ref()).map_err(|e| (EXIT_UNAVAILABLE, e))?;
    let (ad_hoc, server, mode) = if offered.contains(&name) {
        (None, args.server.clone(), "configured")
    } else {
        let s = AdHocServer::start(&name, &resolved).map_err(|e| (EXIT_UNAVAILABLE, e))?;
        let addr = s.address();
        (Some(s), Some(addr), "ad hoc")
    };
    // As given (the shell's argv[0]) unless a shim came first on PATH.
    let cold_program = if find_program(program, |_| false).as_ref() == Some(&resolved) {
        PathBuf::from(program)
    } else {
        resolved.clone()
    };
    let cold = Spec::new(cold_program, rest.to_vec());
    let cold_shown = resolved.display().to_string();
    let mut warm_args = ng_server_args(server.as_ref());
    warm_args.push(name.clone().into());
    warm_args.extend(rest.iter().cloned());
    let warm = Spec::new(&ng, warm_args);
    let floor = Spec::new(FLOOR, Vec::new());
    let specs = [&cold, &warm, &floor];

    let total = u64::from(args.warmup + args.runs) * 3;
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(total)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} runs")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(format!("bench {name}"));
    let run = |spec: &Spec| {
        let r = run_once(spec).map_err(|e| {
            (
                EXIT_OSERR,
                format!("cannot run {}: {e}", spec.program.display()),
            )
        });
        bar.inc(1);
        r
    };

    let reference = run(&cold)?;
    let mut differences: Vec<String> = Vec::new();
    let mut note = |kind: &str, outcome: &Outcome| {
        for d in self::differences(&reference, outcome) {
            let line = format!("{kind}: {d}");
            if differences.len() < MAX_DIFFERENCES && !differences.contains(&line) {
                differences.push(line);
            }
        }
    };
    for i in 0..args.warmup {
        for k in 0..3 {
            let which = (i as usize + k) % 3;
            let outcome = run(specs[which])?;
            match which {
                0 if i > 0 => note("cold (varies by itself)", &outcome),
                1 => note("warm", &outcome),
                _ => {}
            }
        }
    }
    let mut times: [Vec<Duration>; 3] = Default::default();
    for i in 0..args.runs {
        for k in 0..3 {
            let which = (i as usize + k) % 3;
            let outcome = run(specs[which])?;
            match which {
                0 => note("cold (varies by itself)", &outcome),
                1 => note("warm", &outcome),
                _ => {}
            }
            times[which].push(outcome.elapsed);
        }
    }
    bar.finish_and_clear();
    drop(ad_hoc);
    let [cold_t, warm_t, floor_t] = times.map(|t| Summary::of(&t));
    if differences.is_empty() {
        crate::warm::save_bench_record(
            &name,
            &crate::warm::BenchRecord {
                cold_ms: cold_t.median_ms,
                warm_ms: warm_t.median_ms,
            },
        );
    }
    Ok(Report {
        command: args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        cold_program: cold_shown,
        name,
        mode,
        runs: args.runs,
        warmup: args.warmup,
        ratio: if warm_t.median_ms > 0.0 {
            cold_t.median_ms / warm_t.median_ms
        } else {
            0.0
        },
        warm_above_floor_ms: warm_t.median_ms - floor_t.median_ms,
        cold: cold_t,
        warm: warm_t,
        floor: floor_t,
        identical: differences.is_empty(),
        differences,
        exit_code: reference.code,
    })
}

fn print_report(r: &Report) {
    println!(
        "{}   (warm: {} as '{}'; {} runs each after {} warm-up runs)",
        r.command.join(" "),
        r.mode,
        r.name,
        r.runs,
        r.warmup
    );
    println!("          {:>10} {:>10} {:>10}", "median", "p10", "p90");
    for (label, s, extra) in [
        ("cold", &r.cold, ""),
        ("warm", &r.warm, ""),
        ("floor", &r.floor, "   (/bin/true)"),
    ] {
        println!(
            "{label:<8}  {:>7.2} ms {:>7.2} ms {:>7.2} ms{extra}",
            s.median_ms, s.p10_ms, s.p90_ms
        );
    }
    println!(
        "warm is {:.1}x faster than cold, {:.2} ms above the exec floor",
        r.ratio, r.warm_above_floor_ms
    );
    if r.identical {
        println!(
            "identical: stdout, stderr and exit code ({}) match in every run",
            r.exit_code
        );
    } else {
        println!("DIFFERENT from the first cold run:");
        for d in &r.differences {
            println!("  {d}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(stdout: &[u8], stderr: &[u8], code: i32) -> Outcome {
        Outcome {
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
            code,
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn summary_percentiles() {
        let samples: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        let s = Summary::of(&samples);
        assert_eq!(s.median_ms, 5.5);
        assert_eq!(s.p10_ms, 1.0);
        assert_eq!(s.p90_ms, 9.0);
        assert_eq!(s.min_ms, 1.0);
        assert_eq!(s.max_ms, 10.0);
        let one = Summary::of(&[Duration::from_millis(3)]);
        assert_eq!((one.median_ms, one.p10_ms, one.p90_ms), (3.0, 3.0, 3.0));
    }

    #[test]
    fn identical_outcomes_have_no_differences() {
        let a = outcome(b"x\n", b"", 0);
        assert!(differences(&a, &a.clone()).is_empty());
    }

    #[test]
    fn differences_name_the_stream_and_line() {
        let a = outcome(b"one\ntwo\n", b"", 0);
        let b = outcome(b"one\nTWO\n", b"warning\n", 2);
        let d = differences(&a, &b);
        assert_eq!(d.len(), 3, "{d:?}");
        assert_eq!(
            d[0],
            "stdout: 8 bytes against 8; first difference on line 2: \"two\" against \"TWO\""
        );
        assert!(d[1].starts_with("stderr: 0 bytes against 8"), "{}", d[1]);
        assert_eq!(d[2], "exit code: 0 against 2");
    }

    #[test]
    fn runner_captures_output_and_code() {
        let spec = Spec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "cat; echo err >&2; exit 3".into()],
            stdin: Some(std::sync::Arc::new(b"in".to_vec())),
        };
        let o = run_once(&spec).unwrap();
        assert_eq!(o.stdout, b"in");
        assert_eq!(o.stderr, b"err\n");
        assert_eq!(o.code, 3);
        let killed = Spec::new("/bin/sh", vec!["-c".into(), "kill -9 $$".into()]);
        assert_eq!(run_once(&killed).unwrap().code, 137);
    }

    #[test]
    fn shebangs() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        assert_eq!(
            python_shebang(&write("a", "#!/usr/bin/python3.11\nimport x\n")),
            Some(vec!["/usr/bin/python3.11".into()])
        );
        assert_eq!(
            python_shebang(&write("b", "#!/usr/bin/env python3\n")),
            Some(vec!["/usr/bin/env".into(), "python3".into()])
        );
        assert_eq!(python_shebang(&write("c", "#!/bin/sh\n")), None);
        assert_eq!(python_shebang(&write("d", "\x7fELF")), None);
    }

    #[test]
    fn server_args() {
        assert!(ng_server_args(None).is_empty());
        let unix = ListenAddr::Unix("/x/s.sock".into());
        assert_eq!(
            ng_server_args(Some(&unix)),
            vec![OsString::from("--nailgun-server"), "local:/x/s.sock".into()]
        );
        let tcp: ListenAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(ng_server_args(Some(&tcp)).len(), 4);
    }
}
