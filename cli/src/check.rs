//! `ngd check NAME [ARGS...]`: runs a command cold and warm with the same argv,
//! environment, directory and stdin, and reports any difference, with both timings, on the
//! runner of [`crate::measure`].
//!
//! The tool to run before trusting a program to ngd. **Cold** is the program a shell would
//! find for `NAME` on `PATH` (skipping symbolic links to `ng` itself, which is how warm
//! commands are usually installed), or `--cold PROGRAM`. **Warm** is `ng NAME ARGS...` on
//! the server at `--server`, else where `ng` looks by default. Both inherit this process's
//! environment and working directory; stdin, when it is not a terminal, is read once (at
//! most [`MAX_STDIN`]) and fed to every run, otherwise both get `/dev/null`.
//!
//! Each of `--runs` rounds runs cold then warm (after one untimed warm run, so a worker
//! that starts on demand is not timed), compares stdout, stderr and exit code with the
//! first cold run, and reports each stream as identical or how it differs.
//!
//! Before any run, the server is asked what it offers (`ng-commands`): a server that does
//! not offer `NAME` would answer every warm run with 127 (unknown command), which says
//! nothing about the program, so `ngd check` stops there with "no server offers NAME".
//!
//! Exit status: 0 identical, 1 different, 64 usage, 66 no cold program, 69 no server
//! offers the command (or none can be reached), 71 a program could not be run.

use std::ffi::OsString;
use std::io::{IsTerminal as _, Read as _};
use std::path::PathBuf;
use std::sync::Arc;

use ng_server::config::ListenAddr;

use crate::measure::{self, is_ng, Outcome, Spec, Summary};

/// Most bytes of stdin `ngd check` reads to feed both runs.
pub const MAX_STDIN: u64 = 64 << 20;

/// `ngd check`'s command line.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// The server for the warm runs (default: where `ng` looks, starting one if needed).
    #[arg(long, value_name = "ADDR")]
    pub server: Option<ListenAddr>,
    /// The program run cold (default: NAME on PATH, skipping links to ng).
    #[arg(long, value_name = "PROGRAM")]
    pub cold: Option<PathBuf>,
    /// Rounds of one cold and one warm run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub runs: u32,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// The command's name (as `ng NAME` runs it).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Its arguments.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// How one stream (or the exit code) compares.
#[derive(Debug, serde::Serialize)]
pub struct StreamReport {
    /// `stdout`, `stderr` or `exit code`.
    pub what: &'static str,
    /// Whether every run matched the first cold run.
    pub identical: bool,
    /// The first difference, described.
    pub difference: Option<String>,
}

/// `ngd check`'s result, as `--json` prints it.
#[derive(Debug, serde::Serialize)]
pub struct CheckReport {
    /// The command name.
    pub name: String,
    /// The program run cold.
    pub cold_program: String,
    /// Cold timings.
    pub cold: Summary,
    /// Warm timings.
    pub warm: Summary,
    /// Exit code of the first cold run.
    pub cold_exit_code: i32,
    /// Exit code of the first warm run.
    pub warm_exit_code: i32,
    /// Per stream.
    pub streams: Vec<StreamReport>,
    /// All identical.
    pub identical: bool,
}

/// Runs `ngd check` and returns its exit status.
pub fn run(args: &CheckArgs) -> u8 {
    measure::conclude("ngd check", check(args), args.json, print_report, |r| {
        r.identical
    })
}

fn check(args: &CheckArgs) -> Result<CheckReport, (u8, String)> {
    let ng = measure::ng_binary().ok_or((
        measure::EXIT_UNAVAILABLE,
        "cannot find the ng client (next to ngd, or on PATH)".to_owned(),
    ))?;
    let cold_program = match &args.cold {
        Some(p) => p.clone(),
        None => {
            measure::find_program(args.name.as_ref(), |p| is_ng(p, Some(&ng))).ok_or_else(|| {
                (
                    measure::EXIT_NOT_FOUND,
                    format!(
                        "no program '{}' on PATH to run cold (links to ng do not count); \
                         name one with --cold",
                        args.name
                    ),
                )
            })?
        }
    };
    let offered = measure::server_commands(&ng, args.server.as_ref())
        .map_err(|e| (measure::EXIT_UNAVAILABLE, e))?;
    if !offered.contains(&args.name) {
        return Err((measure::EXIT_UNAVAILABLE, no_server_offers(&args.name)));
    }
    let stdin = if std::io::stdin().is_terminal() {
        None
    } else {
        let mut buf = Vec::new();
        std::io::stdin()
            .take(MAX_STDIN + 1)
            .read_to_end(&mut buf)
            .map_err(|e| (measure::EXIT_OSERR, format!("reading stdin: {e}")))?;
        if buf.len() as u64 > MAX_STDIN {
            return Err((
                64,
                format!("stdin is larger than {MAX_STDIN} bytes, the most check compares"),
            ));
        }
        Some(Arc::new(buf))
    };
    let cold = Spec {
        program: cold_program.clone(),
        args: args.args.clone(),
        stdin: stdin.clone(),
    };
    let mut warm_args = measure::ng_server_args(args.server.as_ref());
    warm_args.push(args.name.clone().into());
    warm_args.extend(args.args.iter().cloned());
    let warm = Spec {
        program: ng,
        args: warm_args,
        stdin,
    };
    let run = |spec: &Spec| {
        measure::run_once(spec).map_err(|e| {
            (
                measure::EXIT_OSERR,
                format!("cannot run {}: {e}", spec.program.display()),
            )
        })
    };
    // Untimed: starts the server or a worker if needed.
    run(&warm)?;
    let mut colds: Vec<Outcome> = Vec::new();
    let mut warms: Vec<Outcome> = Vec::new();
    for _ in 0..args.runs {
        colds.push(run(&cold)?);
        warms.push(run(&warm)?);
    }
    let reference = &colds[0];
    let mut streams = Vec::new();
    for (what, get) in [
        (
            "stdout",
            (|o: &Outcome| o.stdout.clone()) as fn(&Outcome) -> Vec<u8>,
        ),
        ("stderr", |o: &Outcome| o.stderr.clone()),
        ("exit code", |o: &Outcome| o.code.to_string().into_bytes()),
    ] {
        let difference = colds
            .iter()
            .skip(1)
            .map(|o| ("cold (varies by itself)", o))
            .chain(warms.iter().map(|o| ("warm", o)))
            .find_map(|(kind, o)| {
                (get(o) != get(reference)).then(|| {
                    let d = measure::differences(reference, o);
                    let line = d
                        .into_iter()
                        .find(|l| l.starts_with(what))
                        .unwrap_or_default();
                    format!("{kind}: {line}")
                })
            });
        streams.push(StreamReport {
            what,
            identical: difference.is_none(),
            difference,
        });
    }
    let times = |v: &[Outcome]| Summary::of(&v.iter().map(|o| o.elapsed).collect::<Vec<_>>());
    Ok(CheckReport {
        name: args.name.clone(),
        cold_program: cold_program.display().to_string(),
        cold: times(&colds),
        warm: times(&warms),
        cold_exit_code: reference.code,
        warm_exit_code: warms[0].code,
        identical: streams.iter().all(|s| s.identical),
        streams,
    })
}

/// The message for a command no server offers.
fn no_server_offers(name: &str) -> String {
    format!(
        "no server offers '{name}' (`ng ng-commands` lists what it offers): \
         `ngd warm {name}` serves it, or add a [[plugin]] for it to the configuration"
    )
}

fn print_report(r: &CheckReport) {
    println!("check {}   (cold: {})", r.name, r.cold_program);
    println!(
        "  cold: exit {}, {:.2} ms",
        r.cold_exit_code, r.cold.median_ms
    );
    println!(
        "  warm: exit {}, {:.2} ms",
        r.warm_exit_code, r.warm.median_ms
    );
    for s in &r.streams {
        match &s.difference {
            None => println!("  {}: identical", s.what),
            Some(d) => println!("  {}: DIFFERENT: {d}", s.what),
        }
    }
    println!(
        "{}",
        if r.identical {
            "result: identical"
        } else {
            "result: DIFFERENT"
        }
    );
}
