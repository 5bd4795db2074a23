//! Test support: the real peers (installed by `scripts/peers/jsonrpc` when missing), the
//! `ngd` binary, and a bridge started as ngd starts it (`ngd bridge jsonrpc -- COMMAND`,
//! `NGW_BRIDGE_CONFIG`), driven with `ngw::testing::Driver`.

#![allow(dead_code)]

use ngw::testing::{Driver, Outcome, Request};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The peers cache.
pub fn peers() -> PathBuf {
    std::env::var_os("NGD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/ngd-peers"))
}

/// Runs `scripts/peers/jsonrpc` once (it skips what is present).
fn install_peers() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let st = Command::new("bash")
            .arg(workspace().join("scripts/peers/jsonrpc"))
            .status()
            .expect("scripts/peers/jsonrpc");
        assert!(st.success(), "scripts/peers/jsonrpc failed");
    });
}

/// The venv's python with `nexoai` 0.4.0.
pub fn nexo_python() -> PathBuf {
    install_peers();
    let p = peers().join("venv-nexo/bin/python");
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// `node .../server-everything/dist/index.js stdio`.
pub fn everything() -> Vec<String> {
    install_peers();
    let js = peers().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(js.exists(), "{} missing", js.display());
    vec![
        "node".into(),
        js.to_string_lossy().into_owned(),
        "stdio".into(),
    ]
}

/// `mcp-server-time` from PyPI (a Python MCP server).
pub fn mcp_time() -> Vec<String> {
    install_peers();
    let p = peers().join("venv-mcp-time/bin/mcp-server-time");
    assert!(p.exists(), "{} missing", p.display());
    vec![p.to_string_lossy().into_owned()]
}

/// A fixture's path.
pub fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// The nexo demo plugin's command.
pub fn nexo_demo() -> Vec<String> {
    vec![
        nexo_python().to_string_lossy().into_owned(),
        fixture("nexo_demo.py"),
    ]
}

/// The StreamNook-profile plugin's command.
pub fn streamnook(extra: &[&str]) -> Vec<String> {
    let mut v = vec!["python3".to_owned(), fixture("streamnook_plugin.py")];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// `target/debug/ngd`, built once per test binary.
pub fn ngd() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let st = Command::new(cargo)
                .args(["build", "-q", "-p", "ngd"])
                .current_dir(workspace())
                .status()
                .expect("cargo build ngd");
            assert!(st.success(), "building ngd failed");
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace().join("target"));
            target.join("debug/ngd")
        })
        .clone()
}

/// A bridge under test.
pub struct Bridge {
    pub driver: Option<Driver>,
    pub log: tempfile::NamedTempFile,
    pub pid: u32,
}

impl Bridge {
    /// Starts `ngd bridge jsonrpc -- command` with `options` and reads its hello.
    pub fn start(name: &str, command: &[String], options: Value) -> Self {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut config = options.as_object().cloned().unwrap_or_default();
        config.insert("name".into(), json!(name));
        // The machine may be loaded (Python MCP servers take seconds to import); tests of
        // the handshake deadline set their own.
        config
            .entry("plugin_handshake_timeout_ms")
            .or_insert(json!(120_000));
        let mut cmd = Command::new(ngd());
        cmd.args(["bridge", "jsonrpc", "--"])
            .args(command)
            .env("NGW_BRIDGE_CONFIG", Value::Object(config).to_string())
            .env(
                "XDG_STATE_HOME",
                std::env::temp_dir().join("ngd-jsonrpc-tests"),
            )
            .stderr(log.reopen().unwrap());
        let mut driver = Driver::spawn(cmd).expect("start the bridge");
        driver.timeout = Duration::from_secs(60);
        let pid = driver.child().unwrap().id();
        Self {
            driver: Some(driver),
            log,
            pid,
        }
    }

    pub fn d(&mut self) -> &mut Driver {
        self.driver.as_mut().unwrap()
    }

    pub fn hello(&mut self) -> Value {
        self.d().hello().clone()
    }

    /// Runs `command args...`.
    pub fn run(&mut self, command: &str, args: &[&str]) -> Outcome {
        self.d()
            .run(&Request::new(command, args.iter().copied()))
            .unwrap()
    }

    /// Runs a prepared request.
    pub fn req(&mut self, req: Request) -> Outcome {
        self.d().run(&req).unwrap()
    }

    /// The bridge's stderr so far (its log and the plugin's).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Waits until the log contains `needle`.
    pub fn wait_log(&self, needle: &str, within: Duration) {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if self.log().contains(needle) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no {needle:?} in the log:\n{}", self.log());
    }

    /// The bridge's child processes (the plugin).
    pub fn children(&self) -> Vec<u32> {
        children(self.pid)
    }

    /// Quits (`q`) and waits for the bridge to exit; returns its status code.
    pub fn quit(&mut self) -> Option<i32> {
        let d = self.driver.take().unwrap();
        d.quit().unwrap().and_then(|s| s.code())
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if let Some(mut d) = self.driver.take() {
            if let Some(c) = d.child() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Processes whose parent is `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
            // pid (comm) state ppid ...
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                let fields: Vec<&str> = rest.split_whitespace().collect();
                if fields.get(1).and_then(|f| f.parse::<u32>().ok()) == Some(pid) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// Whether a process exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, r)| !r.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Waits until `pid` is gone.
pub fn wait_gone(pid: u32, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A request with args.
pub fn request(command: &str, args: &[&str]) -> Request {
    Request::new(command, args.iter().copied())
}

/// Stdout parsed as JSON.
pub fn json_out(o: &Outcome) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {:?} / {:?}",
            o.stdout_str(),
            o.stderr_str()
        )
    })
}
