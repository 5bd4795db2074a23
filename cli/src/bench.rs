//! `ngd bench`: a command's start-up, cold (exec'd as the user would) against warm (through
//! `ng` and `ngd`), on the runner of [`crate::measure`].
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

use std::ffi::OsString;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ng_server::config::ListenAddr;

use crate::measure::{
    self, find_program, is_ng, ng_binary, ng_server_args, run_once, server_commands, AdHocServer,
    Outcome, Spec, Summary, EXIT_NOT_FOUND, EXIT_OSERR, EXIT_UNAVAILABLE,
};
use crate::warm::kind::python_shebang;

/// How many differences are listed at most.
const MAX_DIFFERENCES: usize = 8;

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

/// Runs `ngd bench` and returns its exit status.
pub fn run(args: &BenchArgs) -> u8 {
    measure::conclude("ngd bench", bench(args), args.json, print_report, |r| {
        r.identical
    })
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
    let resolved = find_program(program, |p| is_ng(p, Some(&ng))).ok_or_else(|| {
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
        let s = serve_ad_hoc(&name, &resolved).map_err(|e| (EXIT_UNAVAILABLE, e))?;
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
        for d in measure::differences(&reference, outcome) {
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

/// A private `ngd` with one plugin serving `name` by running the Python script `program` in
/// fork mode (`PYTHON -m ngw script NAME=PROGRAM`, with the SDK ngd carries).
fn serve_ad_hoc(name: &str, program: &Path) -> Result<AdHocServer, String> {
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
    AdHocServer::with_config(|dir| {
        format!(
            "[[plugin]]\nname = \"bench\"\ncommand = [{}]\nsdk = \"python\"\ncommands = [{}]\nmin_workers = 1\nmax_workers = 2\nlog = {}\n",
            quoted.join(", "),
            serde_json::to_string(name).unwrap_or_default(),
            serde_json::to_string(&dir.join("plugin.log")).unwrap_or_default(),
        )
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
