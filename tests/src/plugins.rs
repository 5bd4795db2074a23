//! `ngd` with plugins: Python ngw workers from `tests/fixtures/python/`, run by the real
//! `ngd` binary, for the plugin scenarios in `tests/e2e/plugins*.rs`.
//!
//! [`PluginServer`] is a guard around an [`NgdServer`] whose config file holds
//! `[[plugin]]` tables built with [`Plugin`]. Every plugin gets `log =
//! "<tempdir>/<name>.log"` and `env = { PYTHONPATH = "<repo>/sdk/python/src" }`, so the
//! workers import the SDK from this tree. The guard waits for the ready line (printed
//! once plugins that learn their commands from a hello are ready) and exposes the server,
//! its addresses, the plugin logs and `ng-stats --json` as parsed [`Json`].
//!
//! # No process left behind
//!
//! Every process of the plugin world is *tagged*: ngd (hence every worker, and every
//! fork-mode session child, whose `/proc/<pid>/environ` is the worker's) runs with
//! `NGD_PLUGIN_TEST=<unique tag>`, and [`PluginServer::cmd`] puts the same entry in every
//! client's environment, which commands pass on to what they spawn. [`PluginServer::processes`]
//! finds them by tag, by `ngd`'s descendants, and by the sessions and pids seen in earlier
//! scans (so a grandchild that lost both its parent and the tag is still found). When the
//! guard is dropped (or [`PluginServer::stop`] is called) it stops `ngd` with `SIGTERM`,
//! waits for it, and fails the test if any of those processes is still there, killing them
//! by pid first so that nothing leaks into the next test.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::bins;
use crate::client::{Client, ClientCmd, Output, DEFAULT_ENV};
use crate::ngd_server::{Flavor, NgdServer};
use crate::server::{Address, Transport};

use ng_testkit::procfs;
pub use ng_testkit::procfs::{describe, send_signal, Proc};

/// The environment entry that tags every process of one [`PluginServer`].
pub const TAG_VAR: &str = "NGD_PLUGIN_TEST";

/// How long `ngd` may take to exit after `SIGTERM` when a guard is dropped (its
/// `shutdown_grace_ms` is set to [`SHUTDOWN_GRACE_MS`], plus its flush and the workers'
/// `q`).
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// `shutdown_grace_ms` of every plugin server, unless a test sets its own.
pub const SHUTDOWN_GRACE_MS: u64 = 1000;

/// How long processes may take to disappear once `ngd` has exited.
const LEFTOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `sdk/python/src`, the `PYTHONPATH` of every worker.
pub fn sdk_src() -> PathBuf {
    repo_root().join("sdk/python/src")
}

/// A file in `tests/fixtures/python/`.
pub fn fixture(name: &str) -> PathBuf {
    let path = repo_root().join("tests/fixtures/python").join(name);
    assert!(path.is_file(), "fixture {} is missing", path.display());
    path
}

/// The Python interpreter the workers run: the `python3` first on the test's `PATH`,
/// resolved to its real executable (`sys.executable`, not a pyenv shim), so that workers
/// and cold runs use the same interpreter whatever `ngd`'s own `PATH` is.
pub fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run python3 (needed for the plugin tests): {e}"));
        assert!(
            out.status.success(),
            "python3 failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert!(path.is_file(), "python3 says it is {}", path.display());
        path
    })
}

/// A TOML basic string holding `s`.
pub fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML array of strings.
pub fn toml_array<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<String> = items.iter().map(|s| toml_str(s.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// One `[[plugin]]` table.
#[derive(Clone, Debug)]
pub struct Plugin {
    name: String,
    command: Vec<String>,
    commands: Vec<String>,
    env: BTreeMap<String, String>,
    /// `key = value` lines, values already in TOML syntax.
    settings: Vec<(String, String)>,
    /// The whole table as given, instead of one built from the fields (only `log` is
    /// appended).
    raw: Option<String>,
}

impl Plugin {
    /// A plugin running `command` (program and arguments).
    pub fn new<S: AsRef<str>>(name: &str, command: &[S]) -> Plugin {
        let mut env = BTreeMap::new();
        env.insert(
            "PYTHONPATH".to_string(),
            sdk_src().to_string_lossy().into_owned(),
        );
        Plugin {
            name: name.to_string(),
            command: command.iter().map(|s| s.as_ref().to_string()).collect(),
            commands: Vec::new(),
            env,
            settings: Vec::new(),
            raw: None,
        }
    }

    /// A plugin running `python3 tests/fixtures/python/<script> <args>`.
    pub fn python<S: AsRef<str>>(name: &str, script: &str, args: &[S]) -> Plugin {
        let mut command = vec![
            python().to_string_lossy().into_owned(),
            fixture(script).to_string_lossy().into_owned(),
        ];
        command.extend(args.iter().map(|s| s.as_ref().to_string()));
        Plugin::new(name, &command)
    }

    /// The standard fixture worker, `plugin_worker.py`, with `args`.
    pub fn worker<S: AsRef<str>>(name: &str, args: &[S]) -> Plugin {
        Plugin::python(name, "plugin_worker.py", args)
    }

    /// A table given verbatim (e.g. from `examples/`); the guard appends `log`.
    pub fn raw(name: &str, table: impl Into<String>) -> Plugin {
        let mut plugin = Plugin::new::<&str>(name, &[]);
        plugin.raw = Some(table.into());
        plugin
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Routes these commands without waiting for a hello (`commands = [...]`).
    pub fn commands<S: AsRef<str>>(mut self, commands: &[S]) -> Plugin {
        self.commands = commands.iter().map(|s| s.as_ref().to_string()).collect();
        self
    }

    /// Adds `name = value` to the plugin's `env`.
    pub fn env(mut self, name: &str, value: &str) -> Plugin {
        self.env.insert(name.to_string(), value.to_string());
        self
    }

    /// Sets `key = value`, where `value` is TOML (`4`, `"text"`, `[1, 2]`).
    pub fn set(mut self, key: &str, value: impl fmt::Display) -> Plugin {
        self.settings.push((key.to_string(), value.to_string()));
        self
    }

    /// The table, with its log in `log_dir`.
    fn toml(&self, log_dir: &Path) -> String {
        let log = log_path(log_dir, &self.name);
        let mut t = String::from("[[plugin]]\n");
        if let Some(raw) = &self.raw {
            t.push_str(raw.trim_end());
            let _ = writeln!(t, "\nlog = {}", toml_str(&log.to_string_lossy()));
            return t;
        }
        let _ = writeln!(t, "name = {}", toml_str(&self.name));
        let _ = writeln!(t, "command = {}", toml_array(&self.command));
        let env: Vec<String> = self
            .env
            .iter()
            .map(|(k, v)| format!("{} = {}", toml_str(k), toml_str(v)))
            .collect();
        let _ = writeln!(t, "env = {{ {} }}", env.join(", "));
        if !self.commands.is_empty() {
            let _ = writeln!(t, "commands = {}", toml_array(&self.commands));
        }
        let _ = writeln!(t, "log = {}", toml_str(&log.to_string_lossy()));
        for (k, v) in &self.settings {
            let _ = writeln!(t, "{k} = {v}");
        }
        t
    }
}

fn log_path(dir: &Path, plugin: &str) -> PathBuf {
    dir.join(format!("{plugin}.log"))
}

/// Configures and starts a [`PluginServer`].
#[derive(Debug)]
pub struct PluginServerBuilder {
    top: Vec<String>,
    plugins: Vec<Plugin>,
    env: Vec<(String, String)>,
}

impl PluginServerBuilder {
    /// Adds a plugin.
    pub fn plugin(mut self, plugin: Plugin) -> PluginServerBuilder {
        self.plugins.push(plugin);
        self
    }

    /// Adds a top-level line to the config file (before the plugin tables).
    pub fn config_line(mut self, line: impl Into<String>) -> PluginServerBuilder {
        self.top.push(line.into());
        self
    }

    /// Sets an environment variable for `ngd`, hence for its workers.
    pub fn env(mut self, name: &str, value: &str) -> PluginServerBuilder {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// Starts `ngd` on a TCP port and a Unix socket and waits for its ready line.
    #[track_caller]
    pub fn start(self) -> PluginServer {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let tag = format!(
            "{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let logs = tempfile::Builder::new()
            .prefix("ngd-plugin-logs-")
            .tempdir()
            .expect("create the plugin log directory");
        let mut top = self.top;
        if !top
            .iter()
            .any(|l| l.trim_start().starts_with("shutdown_grace_ms"))
        {
            top.push(format!("shutdown_grace_ms = {SHUTDOWN_GRACE_MS}"));
        }
        let text = config_text(&top, &self.plugins, logs.path());
        let mut builder = NgdServer::builder(Flavor::Ngd)
            .tcp()
            .unix()
            .config_line(&text)
            .env(TAG_VAR, &tag);
        for (k, v) in &self.env {
            builder = builder.env(k, v);
        }
        let ngd = builder.try_start().unwrap_or_else(|e| {
            panic!(
                "ngd with plugins did not start: {e}\nconfig:\n{text}\n{}",
                plugin_logs(logs.path())
            )
        });
        let server = PluginServer {
            ngd,
            tag,
            logs,
            top,
            plugins: Mutex::new(self.plugins),
            seen: Mutex::new(Seen::default()),
            stopped: Mutex::new(false),
        };
        server.processes();
        server
    }
}

fn config_text(top: &[String], plugins: &[Plugin], log_dir: &Path) -> String {
    let mut text = String::new();
    for line in top {
        text.push_str(line);
        text.push('\n');
    }
    for p in plugins {
        text.push('\n');
        text.push_str(&p.toml(log_dir));
    }
    text
}

/// Every `*.log` in `dir`, for failure messages.
fn plugin_logs(dir: &Path) -> String {
    let mut out = String::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = writeln!(out, "--- {} ---\n{}", path.display(), tail(&text, 4000));
    }
    out
}

fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Processes seen in earlier scans.
#[derive(Debug, Default)]
struct Seen {
    /// (pid, start time) of every process found.
    pids: BTreeSet<(u32, u64)>,
    /// Sessions led by a plugin process (never the test's own session).
    sids: BTreeSet<u32>,
}

/// A running `ngd` with plugins; stopped, and checked for leftover processes, on drop.
#[derive(Debug)]
pub struct PluginServer {
    ngd: NgdServer,
    tag: String,
    logs: TempDir,
    top: Vec<String>,
    plugins: Mutex<Vec<Plugin>>,
    seen: Mutex<Seen>,
    stopped: Mutex<bool>,
}

impl PluginServer {
    /// A builder with no plugins yet.
    pub fn builder() -> PluginServerBuilder {
        PluginServerBuilder {
            top: Vec::new(),
            plugins: Vec::new(),
            env: Vec::new(),
        }
    }

    /// A server with these plugins and the default settings.
    #[track_caller]
    pub fn start(plugins: Vec<Plugin>) -> PluginServer {
        plugins
            .into_iter()
            .fold(PluginServer::builder(), PluginServerBuilder::plugin)
            .start()
    }

    /// The `ngd` guard underneath.
    pub fn ngd(&self) -> &NgdServer {
        &self.ngd
    }

    /// `ngd`'s pid.
    pub fn pid(&self) -> u32 {
        self.ngd.pid()
    }

    /// This server's tag (the value of [`TAG_VAR`]).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The address on `transport`.
    pub fn address(&self, transport: Transport) -> &Address {
        self.ngd.address_on(transport)
    }

    /// The Unix socket's path.
    pub fn socket_path(&self) -> PathBuf {
        match self.address(Transport::Unix) {
            Address::Unix(path) => path.clone(),
            Address::Tcp(_) => unreachable!("address_on(Unix) gave a TCP address"),
        }
    }

    /// The config file `ngd` reads (and re-reads on SIGHUP).
    pub fn config_path(&self) -> PathBuf {
        let path = self.ngd.dir().join("ngd-test.toml");
        assert!(
            path.is_file(),
            "the NgdServer guard's config file is not at {}",
            path.display()
        );
        path
    }

    /// The log file of plugin `name`.
    pub fn log_path(&self, name: &str) -> PathBuf {
        log_path(self.logs.path(), name)
    }

    /// Plugin `name`'s log so far (empty if it does not exist yet).
    pub fn plugin_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }

    /// `ngd`'s output and every plugin log, for failure messages.
    pub fn log(&self) -> String {
        format!(
            "{}\n{}",
            crate::server::Server::log(&self.ngd),
            plugin_logs(self.logs.path())
        )
    }

    /// A client run naming this server on `transport`, with the tag in its environment.
    pub fn cmd_on(&self, client: Client, transport: Transport) -> ClientCmd {
        client
            .cmd()
            .server(self.address(transport))
            .env(TAG_VAR, &self.tag)
    }

    /// A client run naming this server over its Unix socket, with the tag in its environment.
    pub fn cmd(&self, client: Client) -> ClientCmd {
        self.cmd_on(client, Transport::Unix)
    }

    /// Runs `args` with `client` over the Unix socket.
    #[track_caller]
    pub fn run<S: AsRef<std::ffi::OsStr>>(&self, client: Client, args: &[S]) -> Output {
        self.cmd(client).args(args).run()
    }

    /// `ng-stats --json`, parsed.
    #[track_caller]
    pub fn stats(&self) -> Json {
        let out = self.cmd(Client::Ours).args(["ng-stats", "--json"]).run();
        assert!(
            out.code() == Some(0),
            "ng-stats --json failed\n{out:?}\n{}",
            self.log()
        );
        serde_json::from_str(&out.stdout_text())
            .unwrap_or_else(|e| panic!("ng-stats --json is not JSON: {e}\n{out:?}"))
    }

    /// Plugin `name`'s entry in `ng-stats --json`, if it is listed.
    #[track_caller]
    pub fn plugin_report(&self, name: &str) -> Option<Json> {
        let stats = self.stats();
        let plugins = stats
            .get("plugins")
            .and_then(Json::as_array)
            .unwrap_or_else(|| panic!("ng-stats --json has no plugins array: {stats}"));
        plugins
            .iter()
            .find(|p| p.get("name").and_then(Json::as_str) == Some(name))
            .cloned()
    }

    /// Waits until plugin `name`'s report satisfies `ok`, for at most `timeout`, and
    /// returns it; fails the test with the last report and the logs otherwise.
    #[track_caller]
    pub fn wait_plugin(&self, name: &str, timeout: Duration, ok: impl Fn(&Json) -> bool) -> Json {
        let deadline = Instant::now() + timeout;
        loop {
            let report = self.plugin_report(name);
            if let Some(r) = report.as_ref().filter(|r| ok(r)) {
                return r.clone();
            }
            if Instant::now() >= deadline {
                panic!(
                    "plugin {name:?} did not reach the expected state within {timeout:?}; \
                     last report: {}\n{}",
                    report.map_or_else(|| "(not listed)".to_string(), |r| r.to_string()),
                    self.log()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Rewrites the config file with `plugins` (same top-level lines) and sends `ngd`
    /// `SIGHUP`. Returns at once; see [`wait_plugin`](PluginServer::wait_plugin).
    pub fn reload(&self, plugins: Vec<Plugin>) {
        let text = config_text(&self.top, &plugins, self.logs.path());
        std::fs::write(self.config_path(), &text).expect("rewrite the config file");
        *self.plugins.lock().unwrap() = plugins;
        self.signal(libc::SIGHUP);
    }

    /// Sends `signal` to `ngd`.
    pub fn signal(&self, signal: i32) {
        send_signal(self.pid(), signal);
    }

    /// The processes of this server's plugin world now (see the module docs), `ngd`
    /// itself excluded; remembers them for later scans.
    pub fn processes(&self) -> Vec<Proc> {
        let mut seen = self.seen.lock().unwrap();
        let found = scan(self.pid(), &self.tag, &seen);
        let own_sid = procfs::proc_info(std::process::id()).map_or(0, |p| p.sid);
        for p in &found {
            seen.pids.insert((p.pid, p.start));
            if p.sid != own_sid && p.sid != 0 {
                seen.sids.insert(p.sid);
            }
        }
        found
    }

    /// Waits until no process of the plugin world is a zombie (an exited child nobody
    /// reaped); fails the test after `timeout`.
    #[track_caller]
    pub fn assert_no_zombies(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let zombies: Vec<Proc> = self
                .processes()
                .into_iter()
                .filter(|p| p.state == 'Z')
                .collect();
            if zombies.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "zombies left {timeout:?} later:\n{}\n{}",
                    describe(&zombies),
                    self.log()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops `ngd` with `SIGTERM` and checks that it exits and leaves no process behind;
    /// fails the test otherwise (after killing the leftovers).
    #[track_caller]
    pub fn stop(&self) {
        if let Err(e) = self.try_stop(true) {
            panic!("{e}");
        }
    }

    /// Waits for `ngd` to exit on its own (after `ngd stop`, `ng-stop` or a signal the
    /// test sent), then checks that no process is left; fails the test otherwise.
    #[track_caller]
    pub fn wait_stopped(&self, timeout: Duration) -> std::process::ExitStatus {
        self.processes();
        let status = self.ngd.wait_exit(timeout);
        let result = self.try_stop(false);
        match (status, result) {
            (Some(status), Ok(())) => status,
            (None, result) => panic!(
                "ngd did not exit within {timeout:?}\n{}",
                result.err().unwrap_or_else(|| self.log())
            ),
            (Some(_), Err(e)) => panic!("{e}"),
        }
    }

    fn try_stop(&self, term: bool) -> Result<(), String> {
        {
            let mut stopped = self.stopped.lock().unwrap();
            if *stopped {
                return Ok(());
            }
            *stopped = true;
        }
        let before = self.processes();
        let mut problems = Vec::new();
        if self.ngd.is_running() {
            if term {
                self.signal(libc::SIGTERM);
            }
            if self.ngd.wait_exit(STOP_TIMEOUT).is_none() {
                problems.push(format!(
                    "ngd did not exit within {STOP_TIMEOUT:?} of SIGTERM; killed it"
                ));
                crate::server::Server::kill(&self.ngd);
            }
        }
        // Everything ngd started must go with it: workers, session children, grandchildren.
        let deadline = Instant::now() + LEFTOVER_TIMEOUT;
        let mut left = self.processes();
        while !left.is_empty() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
            left = self.processes();
        }
        if !left.is_empty() {
            problems.push(format!(
                "processes left {LEFTOVER_TIMEOUT:?} after ngd exited (killed now):\n{}",
                describe(&left)
            ));
            for p in &left {
                if p.state != 'Z' {
                    send_signal(p.pid, libc::SIGKILL);
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{}\nprocesses before the stop:\n{}\n{}",
                problems.join("\n"),
                describe(&before),
                self.log()
            ))
        }
    }
}

impl Drop for PluginServer {
    fn drop(&mut self) {
        let result = self.try_stop(true);
        if let Err(e) = result {
            if thread::panicking() {
                eprintln!("(while failing) {e}");
            } else {
                panic!("{e}");
            }
        }
    }
}

/// The plugin world of the `ngd` with pid `ngd` and tag `tag` (see the module docs).
fn scan(ngd: u32, tag: &str, seen: &Seen) -> Vec<Proc> {
    let me = std::process::id();
    let entry = format!("{TAG_VAR}={tag}");
    let all = procfs::all_processes();
    let parents: BTreeMap<u32, u32> = all.iter().map(|p| (p.pid, p.ppid)).collect();
    all.into_iter()
        .filter(|p| p.pid != me && p.pid != ngd)
        // The test's own children are the clients (and ngd): never part of the world.
        .filter(|p| p.ppid != me)
        .filter(|p| {
            procfs::descends_from(&parents, p.pid, ngd)
                || seen.sids.contains(&p.sid)
                || seen.pids.contains(&(p.pid, p.start))
                || procfs::environ_has(p.pid, &entry)
        })
        .collect()
}

/// The environment a client run gets from [`ClientCmd`] by default, plus `extra`, as
/// name → value.
pub fn client_env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    DEFAULT_ENV
        .iter()
        .chain(extra)
        .map(|&(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The path of `ngd` (for `ngd status`, `ngd stop`).
pub fn ngd_bin() -> PathBuf {
    bins::ngd()
}

/// The raw bytes of a hex string the fixture printed.
#[track_caller]
pub fn unhex(text: &str) -> Vec<u8> {
    ng_testkit::hex::decode(text).unwrap_or_else(|| panic!("not hex: {text:?}"))
}

/// A JSON document: what `ng-stats --json`, `ngd status --json` and the fixtures print.
pub type Json = serde_json::Value;

/// Reads of a [`Json`] object that fail the test, showing the document, when the member is
/// missing or of another type.
pub trait JsonExt {
    /// Member `key` as a string.
    fn str_at(&self, key: &str) -> &str;
    /// Member `key` as an unsigned integer.
    fn u64_at(&self, key: &str) -> u64;
}

impl JsonExt for Json {
    #[track_caller]
    fn str_at(&self, key: &str) -> &str {
        self.get(key)
            .and_then(Json::as_str)
            .unwrap_or_else(|| panic!("no string {key:?} in {self}"))
    }

    #[track_caller]
    fn u64_at(&self, key: &str) -> u64 {
        self.get(key)
            .and_then(Json::as_u64)
            .unwrap_or_else(|| panic!("no integer {key:?} in {self}"))
    }
}

/// `status.state` of a plugin report (`active`, `disabled`, `retiring`), or `?`.
pub fn state(report: &Json) -> &str {
    report
        .pointer("/status/state")
        .and_then(Json::as_str)
        .unwrap_or("?")
}

/// `status.reason` of a disabled plugin's report, or "".
pub fn disabled_reason(report: &Json) -> String {
    report
        .pointer("/status/reason")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string()
}

/// `last_failure` of a plugin report, or "".
pub fn last_failure(report: &Json) -> String {
    report
        .get("last_failure")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_str("a\"b\\c\n"), r#""a\"b\\c\u000A""#);
        assert_eq!(toml_array(&["x", "y"]), r#"["x", "y"]"#);
    }

    #[test]
    fn plugin_reports_are_read() {
        let report: Json = serde_json::from_str(
            r#"{"status": {"state": "disabled", "reason": "crashed"}, "idle": 2}"#,
        )
        .unwrap();
        assert_eq!(state(&report), "disabled");
        assert_eq!(disabled_reason(&report), "crashed");
        assert_eq!(last_failure(&report), "");
        assert_eq!(report.u64_at("idle"), 2);
        assert_eq!(unhex("00ff"), [0, 255]);
    }
}
