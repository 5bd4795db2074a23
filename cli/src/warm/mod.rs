//! `ngd warm NAME...`, `ngd unwarm NAME...`, `ngd list` and `ngd shims`: one command makes
//! a program warm.
//!
//! `ngd warm NAME` finds `NAME` as a shell would (skipping shims), identifies what it is
//! ([`kind::identify`]: a Python, Ruby or Node script by its `#!` interpreter ([`node`]),
//! a `nu_plugin_*`, a JVM program, a shell launcher's `java` command line learned by
//! [`launcher`]; else a fledge plugin's command by name; MCP servers come from `--mcp
//! CONFIG.json`), writes one drop-in file `conf.d/NAME.toml` with its `[[plugin]]` table
//! and a `[warm]` record, places a shim `NAME` (a symbolic link to `ng`) in the shims
//! directory, and has the running server reload (or starts one). The commands of a plugin that learns them from its
//! program (Nushell, MCP) get their shims once the server reports them.
//!
//! Nothing is half-written ([`store`]): the whole change happens under a lock, after the
//! configuration with the new table has been validated as the server will read it, and
//! every file is renamed into place; a shim that cannot be made takes its table back out.
//! What the server serves is read from its typed report ([`PluginReport`], `ng-stats
//! --json`).
//! With `--check`, the program runs cold and warm (on a private server with only the new
//! table) before anything is written, and a difference refuses it.
//!
//! Exit status ([`Exit`]): 0 done, 1 `--check` found a difference, 64 usage, 66 not found,
//! 69 cannot be served (the message says why), 73 a file cannot be written, 78 the
//! configuration has an error (nothing changed).

pub mod kind;
pub mod launcher;
pub mod node;
pub mod stand_in;
pub mod store;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ng_server::config::{Fragment, ServerConfig};
use ng_server::plugin::pool::{PoolStatus, Residency};
use ng_server::plugin::PluginReport;
use serde::{Deserialize, Serialize};

use crate::measure::{self, Spec};
use kind::{Kind, Program, Record};
use store::Layout;

/// The exit statuses of `ngd warm`, `unwarm`, `list` and `shims`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exit {
    /// Done.
    Ok = 0,
    /// `--check`: the warm run differs from the cold one.
    Different = 1,
    /// Bad usage (`EX_USAGE`).
    Usage = 64,
    /// No such program (`EX_NOINPUT`).
    NotFound = 66,
    /// It cannot be served, or no server can be reached (`EX_UNAVAILABLE`).
    Unavailable = 69,
    /// A file cannot be written (`EX_CANTCREAT`).
    CantCreate = 73,
    /// The configuration has an error (`EX_CONFIG`).
    Config = 78,
}

/// A failure: its exit status and what to tell the user.
type Failure = (Exit, String);

/// `ngd warm`'s command line.
#[derive(clap::Args, Debug, Clone)]
pub struct WarmArgs {
    /// Run each program cold and warm first (its `--version`, or the ARGS after `--`) and
    /// refuse it if the runs differ.
    #[arg(long)]
    pub check: bool,
    /// Make each server of this MCP client configuration (its `mcpServers`) warm.
    #[arg(long, value_name = "CONFIG.json")]
    pub mcp: Option<PathBuf>,
    /// The programs, by the name a shell runs them with.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// With --check: the arguments to compare with (default: --version).
    #[arg(last = true, value_name = "ARGS")]
    pub check_args: Vec<OsString>,
}

/// `ngd unwarm`'s command line.
#[derive(clap::Args, Debug, Clone)]
pub struct UnwarmArgs {
    /// The programs (the names given to `ngd warm`).
    #[arg(value_name = "NAME", required = true)]
    pub names: Vec<String>,
}

/// `ngd list`'s command line.
#[derive(clap::Args, Debug, Clone)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ngd shims`'s command line.
#[derive(clap::Args, Debug, Clone)]
pub struct ShimsArgs {
    /// Print only the line that puts the shims directory first on PATH (for a shell's rc
    /// file: `eval "$(ngd shims --path)"`).
    #[arg(long)]
    pub path: bool,
}

fn layout() -> Result<Layout, Failure> {
    Layout::from_env().ok_or((
        Exit::Config,
        "neither XDG_CONFIG_HOME nor HOME is set: no place for the configuration".to_owned(),
    ))
}

fn lock(layout: &Layout) -> Result<store::Lock, Failure> {
    layout.lock().map_err(|e| {
        (
            Exit::CantCreate,
            format!("{}: {e}", layout.conf_d.display()),
        )
    })
}

fn ng() -> Result<PathBuf, Failure> {
    measure::ng_binary().ok_or((
        Exit::Unavailable,
        "cannot find the ng client (next to ngd, or on PATH)".to_owned(),
    ))
}

fn finish(what: &str, result: Result<Exit, Failure>) -> u8 {
    match result {
        Ok(code) => code as u8,
        Err((code, message)) => {
            eprintln!("{what}: {message}");
            code as u8
        }
    }
}

/// One program to make warm.
#[derive(Debug)]
struct Plan {
    name: String,
    program: Program,
}

/// Runs `ngd warm` and returns its exit status.
pub fn warm(args: &WarmArgs) -> u8 {
    finish("ngd warm", warm_all(args))
}

fn warm_all(args: &WarmArgs) -> Result<Exit, Failure> {
    if args.names.is_empty() && args.mcp.is_none() {
        return Err((
            Exit::Usage,
            "name a program (ngd warm NAME...) or an MCP configuration (--mcp FILE)".to_owned(),
        ));
    }
    if !args.check_args.is_empty() && !args.check {
        return Err((Exit::Usage, "arguments after -- go with --check".to_owned()));
    }
    let layout = layout()?;
    let ng = ng()?;
    let lock = lock(&layout)?;
    let loaded = ServerConfig::load(None).map_err(|e| {
        (
            Exit::Config,
            format!("the configuration has an error; fix it first (nothing was changed): {e}"),
        )
    })?;
    let mut config = loaded.config;
    let mut plans = Vec::new();
    let mut worst = Exit::Ok;
    let fail = |worst: &mut Exit, (code, message): Failure| {
        eprintln!("ngd warm: {message}");
        *worst = (*worst).max(code);
    };
    for name in &args.names {
        match find(name, &layout) {
            Ok(program) => plans.push(Plan {
                name: name.clone(),
                program,
            }),
            Err(f) => fail(&mut worst, f),
        }
    }
    if let Some(file) = &args.mcp {
        match kind::mcp_servers(file) {
            Ok(servers) => plans.extend(servers.into_iter().map(|(name, program)| Plan {
                name: format!("mcp-{name}"),
                program,
            })),
            Err(e) => fail(&mut worst, (Exit::Usage, e.to_string())),
        }
    }
    let mut changed = Vec::new();
    for plan in &plans {
        match install(plan, args, &layout, &mut config, &ng) {
            Ok(Installed::Already) => println!("{} is already warm", plan.name),
            Ok(Installed::Written) => changed.push(plan),
            Err(f) => fail(&mut worst, f),
        }
    }
    drop(lock);
    if !changed.is_empty() {
        if let Err(f) = reload(&ng, true) {
            fail(&mut worst, f);
        } else {
            for plan in changed {
                match settle(plan, &layout, &ng) {
                    Ok(shims) => println!(
                        "{} is warm ({}): {}",
                        plan.name,
                        plan.program.kind().as_str(),
                        shims.join(" ")
                    ),
                    Err(f) => fail(&mut worst, f),
                }
            }
        }
    }
    if worst == Exit::Ok || !plans.is_empty() {
        path_hint(&layout.shims);
    }
    Ok(worst)
}

/// Finds and recognises `name`: on `PATH` (not its shims), else a fledge plugin's command.
fn find(name: &str, layout: &Layout) -> Result<Program, Failure> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err((
            Exit::Usage,
            format!("{name:?}: give a command name, as a shell runs it (no '/')"),
        ));
    }
    let shims = std::fs::canonicalize(&layout.shims).ok();
    let found = measure::find_program(OsStr::new(name), |p| {
        store::is_shim(p)
            || p.parent()
                .and_then(|d| std::fs::canonicalize(d).ok())
                .is_some_and(|d| Some(d) == shims)
    });
    let Some(path) = found else {
        if let Some(p) = kind::fledge_plugins_dir().and_then(|d| kind::fledge_plugin(&d, name)) {
            return Ok(p);
        }
        return Err((
            Exit::NotFound,
            format!("{name}: not found on PATH (nor as a fledge plugin's command)"),
        ));
    };
    kind::identify(name, &path, kind::find_tool).map_err(|refusal| match refusal {
        kind::Refusal::Unreadable { .. } => (Exit::NotFound, refusal.to_string()),
        _ => (
            Exit::Unavailable,
            format!("{name}: {refusal}; no shim made"),
        ),
    })
}

/// What [`install`] did.
#[derive(Debug)]
enum Installed {
    /// The same table and its shims were there.
    Already,
    /// The table was written (shims for known commands too).
    Written,
}

/// Writes `plan`'s table and known shims, after validating the configuration with it and,
/// with `--check`, comparing a cold and a warm run. `config` is the configuration as the
/// server will read it, kept up to date.
fn install(
    plan: &Plan,
    args: &WarmArgs,
    layout: &Layout,
    config: &mut ServerConfig,
    ng: &Path,
) -> Result<Installed, Failure> {
    let name = &plan.name;
    let table_path = layout.table(name);
    let known_shims: Vec<String> = if plan.program.commands_known() {
        vec![name.clone()]
    } else {
        Vec::new()
    };
    let text = plan.program.fragment(name, &known_shims);
    let previous = std::fs::read_to_string(&table_path).ok();
    let previous_record = previous
        .as_deref()
        .and_then(|t| Fragment::parse(t, &table_path).ok())
        .and_then(|f| Record::of(&f));
    if previous.is_some() && previous_record.is_none() {
        return Err((
            Exit::Config,
            format!(
                "{} exists and was not written by ngd warm: not replacing it",
                table_path.display()
            ),
        ));
    }
    if let Some(record) = &previous_record {
        let shims_there = known_shims.iter().all(|s| store::is_shim(&layout.shim(s)));
        if record.describes(&plan.program)
            && shims_there
            && previous.as_deref() == Some(text.as_str())
        {
            return Ok(Installed::Already);
        }
    }
    // Who else serves the name (a table of the configuration file, another drop-in).
    if let Some(other) = config
        .plugins
        .iter()
        .find(|p| p.name != *name && p.commands.iter().any(|c| c == name))
    {
        return Err((
            Exit::Unavailable,
            format!(
                "{name} is already served by plugin '{}' of the configuration; make its shim \
                 by hand (ln -s \"$(command -v ng)\" {})",
                other.name,
                layout.shim(name).display()
            ),
        ));
    }
    let fragment = Fragment::parse(&text, &table_path)
        .map_err(|e| (Exit::Config, format!("the table for {name}: {e}")))?;
    let mut candidate = config.clone();
    candidate.plugins.retain(|p| p.name != *name);
    candidate.plugins.extend(fragment.plugins.iter().cloned());
    candidate.validate().map_err(|e| {
        (
            Exit::Config,
            format!("{name}: the configuration would not be valid: {e}"),
        )
    })?;
    if args.check {
        check(plan, &args.check_args, ng)?;
    }
    std::fs::create_dir_all(&layout.conf_d)
        .and_then(|()| store::write_atomic(&table_path, &text))
        .map_err(|e| (Exit::CantCreate, format!("{}: {e}", table_path.display())))?;
    if let Err(e) = place_shims(layout, &known_shims, ng) {
        // Take the table back out: no half-made warm program.
        let undo = match &previous {
            Some(old) => store::write_atomic(&table_path, old),
            None => store::remove_if_present(&table_path).map(drop),
        };
        if let Err(u) = undo {
            eprintln!("ngd warm: {}: {u}", table_path.display());
        }
        return Err((
            Exit::CantCreate,
            format!("{name}: cannot make its shim: {e}; nothing was changed"),
        ));
    }
    *config = candidate;
    Ok(Installed::Written)
}

/// Makes the shims `names` (links to `ng`), creating the shims directory.
fn place_shims(layout: &Layout, names: &[String], ng: &Path) -> Result<(), String> {
    if names.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(&layout.shims)
        .map_err(|e| format!("{}: {e}", layout.shims.display()))?;
    let mut made = Vec::new();
    for name in names {
        let shim = layout.shim(name);
        if shim.symlink_metadata().is_ok() && !store::is_shim(&shim) {
            undo_shims(&made);
            return Err(format!(
                "{} exists and is not a link to ng: not replacing it",
                shim.display()
            ));
        }
        if let Err(e) = store::symlink_atomic(ng, &shim) {
            undo_shims(&made);
            return Err(format!("{}: {e}", shim.display()));
        }
        made.push(shim);
    }
    Ok(())
}

fn undo_shims(made: &[PathBuf]) {
    for shim in made {
        let _ = store::remove_if_present(shim);
    }
}

/// `--check`: the program cold against the new table on a private server.
fn check(plan: &Plan, args: &[OsString], ng: &Path) -> Result<(), Failure> {
    let Some(script) = plan.program.cold_program() else {
        return Err((
            Exit::Usage,
            format!(
                "{}: --check compares a program with its own cold run, and a {} plugin has \
                 none; warm it without --check",
                plan.name,
                plan.program.kind().as_str()
            ),
        ));
    };
    let args: Vec<OsString> = if args.is_empty() {
        vec!["--version".into()]
    } else {
        args.to_vec()
    };
    // The same table, its log kept with the private server (which leaves nothing behind).
    let table = plan.program.plugin_table(&plan.name);
    let server = measure::AdHocServer::with_config(|dir| {
        format!(
            "{table}log = {}\n",
            toml::Value::String(dir.join("plugin.log").to_string_lossy().into_owned())
        )
    })
    .map_err(|e| (Exit::Unavailable, e))?;
    let mut warm_args = measure::ng_server_args(Some(&server.address()));
    warm_args.push(plan.name.clone().into());
    warm_args.extend(args.iter().cloned());
    let run = |spec: &Spec| {
        measure::run_once(spec).map_err(|e| {
            (
                Exit::Unavailable,
                format!("cannot run {}: {e}", spec.program.display()),
            )
        })
    };
    let cold = run(&Spec::new(script, args.clone()))?;
    let warm = run(&Spec::new(ng, warm_args))?;
    let differences = measure::differences(&cold, &warm);
    if differences.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    Err((
        Exit::Different,
        format!(
            "{}: refused: `{} {}` warm differs from cold ({}); nothing was changed",
            plan.name,
            plan.name,
            shown.join(" "),
            differences.join("; ")
        ),
    ))
}

/// Asks the running server to reload, or starts one (`ng` starts it) when `start`.
fn reload(ng: &Path, start: bool) -> Result<(), Failure> {
    let mut cmd = std::process::Command::new(ng);
    cmd.arg("ng-reload")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if !start {
        cmd.env("NG_NO_AUTOSTART", "1");
    }
    let out = cmd.output().map_err(|e| {
        (
            Exit::Unavailable,
            format!("cannot run {}: {e}", ng.display()),
        )
    })?;
    match out.status.code() {
        Some(0) => Ok(()),
        _ if !start => Ok(()),
        code => Err((
            Exit::Unavailable,
            format!(
                "the table is written, but the server could not be reloaded or started \
                 ({}): {}",
                code.map_or("killed".to_owned(), |c| format!("exit {c}")),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        )),
    }
}

/// How long to wait for a reloaded server to offer a new plugin's commands.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// After the reload: waits until the server offers the plugin's commands and a worker is
/// ready (so the first call is warm), makes the shims
/// of commands learned from the plugin (and records them), and returns the shims.
fn settle(plan: &Plan, layout: &Layout, ng: &Path) -> Result<Vec<String>, Failure> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let commands = loop {
        let report = plugin_reports(ng)?
            .into_iter()
            .find(|p| p.name == plan.name);
        match report.as_ref().map(readiness) {
            Some(Readiness::Disabled(reason)) => {
                return Err((
                    Exit::Unavailable,
                    format!(
                        "{}: the server cannot start it: {reason} (ngd unwarm {} removes it)",
                        plan.name, plan.name
                    ),
                ));
            }
            Some(Readiness::Ready(commands)) => break commands,
            Some(Readiness::Waiting) | None => {}
        }
        if Instant::now() > deadline {
            return Err((
                Exit::Unavailable,
                match report {
                    None => format!(
                        "{}: the running server did not load {} (was it started with \
                         --config naming another file? `ngd stop`, and the next call starts \
                         one that reads it)",
                        plan.name,
                        layout.table(&plan.name).display()
                    ),
                    Some(_) => format!(
                        "{}: its plugin has no ready worker after {}s (see ngd status)",
                        plan.name,
                        SETTLE_TIMEOUT.as_secs()
                    ),
                },
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if plan.program.commands_known() {
        return Ok(vec![plan.name.clone()]);
    }
    let _lock = lock(layout)?;
    place_shims(layout, &commands, ng).map_err(|e| (Exit::CantCreate, e))?;
    let table = layout.table(&plan.name);
    store::write_atomic(&table, &plan.program.fragment(&plan.name, &commands))
        .map_err(|e| (Exit::CantCreate, format!("{}: {e}", table.display())))?;
    Ok(commands)
}

/// How far a plugin a reload added has come, by its report.
#[derive(Debug, PartialEq, Eq)]
enum Readiness {
    /// The server gave up on it, for this reason.
    Disabled(String),
    /// It offers these commands, and a worker is ready for the first call.
    Ready(Vec<String>),
    /// Not yet: no commands learned, or no worker ready.
    Waiting,
}

fn readiness(report: &PluginReport) -> Readiness {
    if let PoolStatus::Disabled { reason } = &report.status {
        return Readiness::Disabled(reason.clone());
    }
    if !report.commands.is_empty() && report.idle + report.busy > 0 {
        Readiness::Ready(report.commands.clone())
    } else {
        Readiness::Waiting
    }
}

/// The running server's plugins (`ng-stats --json`'s `plugins`); empty with no server.
fn plugin_reports(ng: &Path) -> Result<Vec<PluginReport>, Failure> {
    let out = std::process::Command::new(ng)
        .args(["ng-stats", "--json"])
        .env("NG_NO_AUTOSTART", "1")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            (
                Exit::Unavailable,
                format!("cannot run {}: {e}", ng.display()),
            )
        })?;
    if !out.status.success() {
        return Ok(Vec::new());
    }
    Ok(parse_plugins(&out.stdout))
}

/// The `plugins` of `ng-stats --json`'s document; none when it is not one.
fn parse_plugins(stats: &[u8]) -> Vec<PluginReport> {
    #[derive(Deserialize)]
    struct Stats {
        #[serde(default)]
        plugins: Vec<PluginReport>,
    }
    serde_json::from_slice::<Stats>(stats).map_or_else(|_| Vec::new(), |s| s.plugins)
}

/// Says how to put the shims first on `PATH` when they are not.
fn path_hint(shims: &Path) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let first = std::env::split_paths(&path).next();
    let same = |p: &Path| {
        std::fs::canonicalize(p)
            .ok()
            .is_some_and(|c| Some(c) == std::fs::canonicalize(shims).ok())
            || p == shims
    };
    if first.as_deref().is_some_and(same) {
        return;
    }
    println!(
        "The shims take effect once their directory is first on PATH; add this line to your \
         shell's rc file (`ngd shims --path` prints it):\n{}",
        path_line(shims)
    );
}

/// `export PATH="DIR:$PATH"`.
pub fn path_line(shims: &Path) -> String {
    format!("export PATH=\"{}:$PATH\"", shims.display())
}

/// Runs `ngd unwarm` and returns its exit status.
pub fn unwarm(args: &UnwarmArgs) -> u8 {
    finish("ngd unwarm", unwarm_all(args))
}

fn unwarm_all(args: &UnwarmArgs) -> Result<Exit, Failure> {
    let layout = layout()?;
    let ng = ng()?;
    let lock = lock(&layout)?;
    let (worst, changed) = remove(&layout, &args.names);
    drop(lock);
    if changed {
        reload(&ng, false)?;
    }
    Ok(worst)
}

/// Removes the tables `ngd warm` wrote for `names`, and their shims; says what it did for
/// each. Returns the worst exit status and whether a table was removed (the server must
/// reload).
fn remove(layout: &Layout, names: &[String]) -> (Exit, bool) {
    let mut worst = Exit::Ok;
    let mut changed = false;
    for name in names {
        let table = layout.table(name);
        let text = std::fs::read_to_string(&table).ok();
        let record = text
            .as_deref()
            .and_then(|t| Fragment::parse(t, &table).ok())
            .and_then(|f| Record::of(&f));
        let written_by_warm = record.is_some() || text.as_deref().is_some_and(Record::is_in);
        if text.is_some() && !written_by_warm {
            eprintln!(
                "ngd unwarm: {} was not written by ngd warm: leaving it",
                table.display()
            );
            worst = worst.max(Exit::Config);
            continue;
        }
        let mut shims = record.map(|r| r.shims).unwrap_or_default();
        if !shims.contains(name) {
            shims.push(name.clone());
        }
        let mut removed = Vec::new();
        for shim in &shims {
            let path = layout.shim(shim);
            if store::is_shim(&path) {
                match store::remove_if_present(&path) {
                    Ok(true) => removed.push(shim.clone()),
                    Ok(false) => {}
                    Err(e) => {
                        eprintln!("ngd unwarm: {}: {e}", path.display());
                        worst = worst.max(Exit::CantCreate);
                    }
                }
            }
        }
        let had_table = match store::remove_if_present(&table) {
            Ok(had) => had,
            Err(e) => {
                eprintln!("ngd unwarm: {}: {e}", table.display());
                worst = worst.max(Exit::CantCreate);
                false
            }
        };
        changed |= had_table;
        if had_table || !removed.is_empty() {
            println!("{name} is no longer warm");
        } else {
            println!("{name} is not warm");
        }
    }
    (worst, changed)
}

/// One row of `ngd list`.
#[derive(Debug, Serialize)]
pub struct Row {
    /// The name given to `ngd warm`.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// The program.
    pub program: PathBuf,
    /// Its shims.
    pub shims: Vec<String>,
    /// `active` (with `, asleep` or `, evicted` when it keeps no worker), `disabled:
    /// REASON`, `retiring`, `not loaded` (the server has not read it) or `no server`.
    pub state: String,
    /// Workers running (starting, idle or busy).
    pub workers: u64,
    /// Their memory with what they started (summed PSS), in bytes, as the server last read it.
    pub memory_bytes: u64,
    /// The last `ngd bench` medians, cold and warm, in milliseconds.
    pub bench: Option<BenchRecord>,
}

/// What `ngd bench` keeps of its last run of a command, for `ngd list`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct BenchRecord {
    /// Cold median.
    pub cold_ms: f64,
    /// Warm median.
    pub warm_ms: f64,
}

/// `$XDG_STATE_HOME/ngd/bench/NAME.json`.
pub fn bench_record_path(name: &str) -> PathBuf {
    ng_server::plugin::config::state_dir()
        .join("bench")
        .join(format!("{name}.json"))
}

/// Keeps `record` for `ngd list` (best effort: a failure only loses the figures).
pub fn save_bench_record(name: &str, record: &BenchRecord) {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return;
    }
    let path = bench_record_path(name);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(text) = serde_json::to_string(record) {
        let _ = store::write_atomic(&path, &text);
    }
}

/// Runs `ngd list` and returns its exit status.
pub fn list(args: &ListArgs) -> u8 {
    finish(
        "ngd list",
        list_rows().map(|rows| {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&rows).unwrap_or_default()
                );
            } else {
                print_rows(&rows);
            }
            Exit::Ok
        }),
    )
}

fn list_rows() -> Result<Vec<Row>, Failure> {
    let layout = layout()?;
    let reports = match measure::ng_binary() {
        Some(ng) => Some(plugin_reports(&ng)?).filter(|r| !r.is_empty() || server_running(&ng)),
        None => None,
    };
    Ok(rows(&layout, reports.as_deref()))
}

/// The rows of the drop-in files `ngd warm` wrote, with the running server's `reports`
/// (`None`: no server runs).
fn rows(layout: &Layout, reports: Option<&[PluginReport]>) -> Vec<Row> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&layout.conf_d)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    let mut rows = Vec::new();
    for file in files {
        let Some(name) = file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".toml"))
            .filter(|n| !n.starts_with('.'))
        else {
            continue;
        };
        let Some(record) = Fragment::from_file(&file).ok().and_then(|f| Record::of(&f)) else {
            continue;
        };
        let report = reports.and_then(|r| r.iter().find(|p| p.name == name));
        let state = row_state(reports.is_some(), report);
        let workers = report.map_or(0, |r| (r.starting + r.idle + r.busy) as u64);
        let memory_bytes = report.map_or(0, |r| r.memory_bytes);
        let bench = std::fs::read_to_string(bench_record_path(name))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let kind = record.kind;
        rows.push(Row {
            name: name.to_owned(),
            kind,
            program: record.program,
            shims: record.shims,
            state,
            workers,
            memory_bytes,
            bench,
        });
        // The pools derived from it for other programs its shims found.
        for derived in reports
            .into_iter()
            .flatten()
            .filter(|r| r.derived_from.as_deref() == Some(name))
        {
            rows.push(Row {
                name: derived.name.clone(),
                kind,
                program: derived.program.clone().unwrap_or_default(),
                shims: Vec::new(),
                state: row_state(true, Some(derived)),
                workers: (derived.starting + derived.idle + derived.busy) as u64,
                memory_bytes: derived.memory_bytes,
                bench: None,
            });
        }
    }
    rows
}

fn server_running(ng: &Path) -> bool {
    std::process::Command::new(ng)
        .arg("ng-version")
        .env("NG_NO_AUTOSTART", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A row's state: `no server`, `not loaded` (the server has not read its table), or its
/// plugin's status, with its residency when active and keeping no worker.
fn row_state(server: bool, report: Option<&PluginReport>) -> String {
    let Some(report) = report else {
        return if server { "not loaded" } else { "no server" }.to_owned();
    };
    match (&report.status, report.residency) {
        (PoolStatus::Disabled { reason }, _) => format!("disabled: {reason}"),
        (PoolStatus::Retiring, _) => "retiring".to_owned(),
        (PoolStatus::Active, Residency::Awake) => "active".to_owned(),
        (PoolStatus::Active, Residency::Asleep) => "active, asleep".to_owned(),
        (PoolStatus::Active, Residency::Evicted) => "active, evicted".to_owned(),
    }
}

fn print_rows(rows: &[Row]) {
    if rows.is_empty() {
        println!("nothing is warm (ngd warm NAME makes a program warm)");
        return;
    }
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    println!(
        "{:width$}  {:6}  {:16}  {:>7}  {:>6}  {:>9}  {:>9}  program",
        "name", "kind", "state", "workers", "MiB", "cold_ms", "warm_ms"
    );
    for r in rows {
        let (cold, warm) = match &r.bench {
            Some(b) => (format!("{:.1}", b.cold_ms), format!("{:.1}", b.warm_ms)),
            None => ("-".to_owned(), "-".to_owned()),
        };
        println!(
            "{:width$}  {:6}  {:16}  {:>7}  {:>6.1}  {:>9}  {:>9}  {}",
            r.name,
            r.kind.as_str(),
            r.state,
            r.workers,
            r.memory_bytes as f64 / f64::from(1 << 20),
            cold,
            warm,
            r.program.display()
        );
    }
}

/// Runs `ngd shims` and returns its exit status.
pub fn shims(args: &ShimsArgs) -> u8 {
    finish("ngd shims", shims_inner(args))
}

fn shims_inner(args: &ShimsArgs) -> Result<Exit, Failure> {
    let layout = layout()?;
    if args.path {
        println!("{}", path_line(&layout.shims));
        return Ok(Exit::Ok);
    }
    let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
    for entry in std::fs::read_dir(&layout.shims)
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = entry.path();
        if let (true, Ok(target)) = (store::is_shim(&path), std::fs::read_link(&path)) {
            names.insert(entry.file_name().to_string_lossy().into_owned(), target);
        }
    }
    println!("{}", layout.shims.display());
    for (name, target) in names {
        println!("  {name} -> {}", target.display());
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ng_server::plugin::config::Protocol;
    use ng_server::plugin::Notice;

    fn report(name: &str, status: PoolStatus) -> PluginReport {
        PluginReport {
            name: name.to_owned(),
            protocol: Protocol::Ngw,
            status,
            commands: Vec::new(),
            starting: 0,
            idle: 0,
            busy: 0,
            quitting: 0,
            running: 0,
            queued: 0,
            sessions: 0,
            restarts: 0,
            failures: 0,
            last_failure: None,
            notices: Vec::new(),
            notice_counts: BTreeMap::new(),
            counters: BTreeMap::new(),
            log: String::new(),
            residency: Residency::Awake,
            memory_bytes: 0,
            program: None,
            derived_from: None,
        }
    }

    /// A drop-in and a shims directory of its own, an `ng` to link to, and a Python script.
    struct Scratch {
        _dir: tempfile::TempDir,
        layout: Layout,
        ng: PathBuf,
        script: PathBuf,
    }

    impl Scratch {
        fn new() -> Scratch {
            let dir = tempfile::tempdir().unwrap();
            let ng = dir.path().join("bin/ng");
            let script = dir.path().join("bin/tool");
            std::fs::create_dir(dir.path().join("bin")).unwrap();
            std::fs::write(&ng, "").unwrap();
            std::fs::write(&script, "#!/usr/bin/python3\n").unwrap();
            let layout = Layout {
                conf_d: dir.path().join("conf.d"),
                shims: dir.path().join("shims"),
            };
            Scratch {
                _dir: dir,
                layout,
                ng,
                script,
            }
        }

        fn plan(&self) -> Plan {
            Plan {
                name: "tool".to_owned(),
                program: Program::Python {
                    script: self.script.clone(),
                    interpreter: "/usr/bin/python3".into(),
                },
            }
        }

        fn install(&self, config: &mut ServerConfig) -> Result<Installed, Failure> {
            let args = WarmArgs {
                check: false,
                mcp: None,
                names: vec!["tool".to_owned()],
                check_args: Vec::new(),
            };
            install(&self.plan(), &args, &self.layout, config, &self.ng)
        }

        fn record(&self) -> Option<Record> {
            let f = Fragment::from_file(&self.layout.table("tool")).ok()?;
            Record::of(&f)
        }
    }

    #[test]
    fn the_servers_reports_are_read_back_typed() {
        let mut active = report("black", PoolStatus::Active);
        active.commands = vec!["black".to_owned()];
        active.idle = 1;
        active.residency = Residency::Asleep;
        active.notices = vec![Notice {
            kind: "fallback".into(),
            message: "ran cold".to_owned(),
            session: None,
            pid: 7,
            at_ms: 1,
        }];
        active.notice_counts.insert("fallback".to_owned(), 1);
        let mut disabled = report(
            "nu",
            PoolStatus::Disabled {
                reason: "exited".to_owned(),
            },
        );
        disabled.protocol = Protocol::Nu;
        let reports = vec![active, disabled, report("old", PoolStatus::Retiring)];
        // As `ng-stats --json` writes it: the plugins beside the server's own figures.
        let doc = serde_json::json!({"uptime_ms": 5, "commands": [], "plugins": reports});
        let text = serde_json::to_vec(&doc).unwrap();
        assert_eq!(parse_plugins(&text), reports);
        assert_eq!(parse_plugins(b"{\"uptime_ms\": 5}"), []);
        assert_eq!(parse_plugins(b"no server"), []);
    }

    #[test]
    fn a_plugin_is_ready_with_its_commands_and_a_worker() {
        let mut r = report("tool", PoolStatus::Active);
        assert_eq!(readiness(&r), Readiness::Waiting);
        r.starting = 1;
        r.commands = vec!["tool".to_owned()];
        assert_eq!(readiness(&r), Readiness::Waiting);
        r.busy = 1;
        assert_eq!(readiness(&r), Readiness::Ready(vec!["tool".to_owned()]));
        r.status = PoolStatus::Disabled {
            reason: "no python".to_owned(),
        };
        assert_eq!(readiness(&r), Readiness::Disabled("no python".to_owned()));
    }

    #[test]
    fn list_states() {
        assert_eq!(row_state(false, None), "no server");
        assert_eq!(row_state(true, None), "not loaded");
        let mut r = report("tool", PoolStatus::Active);
        assert_eq!(row_state(true, Some(&r)), "active");
        r.residency = Residency::Evicted;
        assert_eq!(row_state(true, Some(&r)), "active, evicted");
        r.residency = Residency::Asleep;
        assert_eq!(row_state(true, Some(&r)), "active, asleep");
        r.status = PoolStatus::Disabled {
            reason: "gave up".to_owned(),
        };
        assert_eq!(row_state(true, Some(&r)), "disabled: gave up");
        r.status = PoolStatus::Retiring;
        assert_eq!(row_state(true, Some(&r)), "retiring");
    }

    #[test]
    fn names_are_command_names() {
        let s = Scratch::new();
        for name in ["", "a/b", ".hidden", "../x"] {
            let (code, message) = find(name, &s.layout).unwrap_err();
            assert_eq!(code, Exit::Usage, "{name}: {message}");
        }
    }

    #[test]
    fn warm_writes_a_table_and_a_shim_once_and_unwarm_removes_both() {
        let s = Scratch::new();
        let mut config = ServerConfig::default();
        assert!(matches!(s.install(&mut config), Ok(Installed::Written)));
        assert!(s.record().is_some_and(|r| r.describes(&s.plan().program)));
        assert!(store::is_shim(&s.layout.shim("tool")));
        assert_eq!(config.plugins.len(), 1);
        assert!(matches!(s.install(&mut config), Ok(Installed::Already)));

        let reports = [report("tool", PoolStatus::Active)];
        let rows = rows(&s.layout, Some(&reports));
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].kind, rows[0].state.as_str()),
            (Kind::Python, "active")
        );
        assert_eq!(rows[0].shims, ["tool"]);

        assert_eq!(remove(&s.layout, &["tool".to_owned()]), (Exit::Ok, true));
        assert!(!s.layout.table("tool").exists());
        assert!(s.layout.shim("tool").symlink_metadata().is_err());
        assert_eq!(remove(&s.layout, &["tool".to_owned()]), (Exit::Ok, false));
    }

    #[test]
    fn a_table_written_by_hand_is_neither_replaced_nor_removed() {
        let s = Scratch::new();
        std::fs::create_dir_all(&s.layout.conf_d).unwrap();
        let table = s.layout.table("tool");
        let text = "[[plugin]]\nname = \"tool\"\ncommand = [\"/bin/tool\"]\n";
        std::fs::write(&table, text).unwrap();
        let (code, message) = s.install(&mut ServerConfig::default()).unwrap_err();
        assert_eq!(code, Exit::Config, "{message}");
        assert!(message.contains("not written by ngd warm"), "{message}");
        assert_eq!(
            remove(&s.layout, &["tool".to_owned()]),
            (Exit::Config, false)
        );
        assert_eq!(std::fs::read_to_string(&table).unwrap(), text);
        assert!(rows(&s.layout, None).is_empty());
    }

    #[test]
    fn a_file_where_the_shim_goes_takes_the_table_back_out() {
        let s = Scratch::new();
        std::fs::create_dir_all(&s.layout.shims).unwrap();
        std::fs::write(s.layout.shim("tool"), "mine").unwrap();
        let (code, message) = s.install(&mut ServerConfig::default()).unwrap_err();
        assert_eq!(code, Exit::CantCreate, "{message}");
        assert!(!s.layout.table("tool").exists());
        assert_eq!(std::fs::read(s.layout.shim("tool")).unwrap(), b"mine");
    }

    #[test]
    fn a_name_another_plugin_serves_is_left_to_it() {
        let s = Scratch::new();
        let mut config = ServerConfig::from_toml_str(
            "[[plugin]]\nname = \"other\"\ncommand = [\"/bin/other\"]\ncommands = [\"tool\"]\n",
        )
        .unwrap();
        let (code, message) = s.install(&mut config).unwrap_err();
        assert_eq!(code, Exit::Unavailable, "{message}");
        assert!(message.contains("plugin 'other'"), "{message}");
        assert!(!s.layout.table("tool").exists());
    }

    #[test]
    fn the_path_line_puts_the_shims_first() {
        assert_eq!(
            path_line(Path::new("/h/.local/share/ngd/shims")),
            "export PATH=\"/h/.local/share/ngd/shims:$PATH\""
        );
    }
}
