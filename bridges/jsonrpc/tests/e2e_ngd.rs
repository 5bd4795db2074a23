//! End to end: `ngd serve --config` with `protocol = "jsonrpc"` plugins (the real nexo SDK
//! plugin and the real MCP server-everything), called with the real `ng` client, by name
//! and through a symlink, as a shell script would.

mod common;

use common::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Handshake deadlines for a loaded machine: the plugin's, and ngd's for the bridge (which
/// says hello after the plugin's handshake).
const SLOW: &str = "plugin_handshake_timeout_ms = 120000\nhandshake_timeout_ms = 150000";

struct Server {
    child: Child,
    dir: tempfile::TempDir,
    sock: PathBuf,
}

fn toml_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(", "))
}

impl Server {
    fn start(config: &str) -> Self {
        let ngd = ngd();
        let dir = tempfile::Builder::new()
            .prefix("ngd-jsonrpc-e2e-")
            .tempdir()
            .unwrap();
        for d in ["run", "config", "state"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let cfg = dir.path().join("ngd.toml");
        std::fs::write(&cfg, config).unwrap();
        let sock = dir.path().join("ngd.sock");
        let log = std::fs::File::create(dir.path().join("ngd.log")).unwrap();
        let child = Command::new(&ngd)
            .arg("serve")
            .arg("--config")
            .arg(&cfg)
            .arg("--listen")
            .arg(format!("local:{}", sock.display()))
            .env("XDG_RUNTIME_DIR", dir.path().join("run"))
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let s = Self { child, dir, sock };
        let end = Instant::now() + Duration::from_secs(60);
        while !s.log().contains(" listening on ") {
            assert!(Instant::now() < end, "ngd not ready:\n{}", s.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("ngd.log")).unwrap_or_default()
    }

    fn server_arg(&self) -> String {
        format!("local:{}", self.sock.display())
    }

    fn ng(&self, argv0: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        let mut c = Command::new(argv0);
        c.args(args)
            .arg("--nailgun-server")
            .arg(self.server_arg())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = c.spawn().unwrap();
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        child.wait_with_output().unwrap()
    }

    fn ngd(&self, sub: &str) -> Output {
        Command::new(ngd())
            .arg(sub)
            .arg("--server")
            .arg(self.server_arg())
            .output()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ng_bin() -> PathBuf {
    let ngd = ngd();
    let ng = ngd.with_file_name("ng");
    if !ng.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-q", "-p", "ng-client"])
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
            .status()
            .unwrap();
        assert!(st.success());
    }
    assert!(ng.exists(), "{} missing", ng.display());
    ng
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Processes (not zombies) whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(needle) && alive(pid) {
                out.push(pid);
            }
        }
    }
    out
}

#[test]
fn warm_tools_through_ngd_and_ng() {
    let marker = format!("jsonrpc-e2e-{}", std::process::id());
    let nexo = nexo_demo();
    let mut everything = everything();
    let config = format!(
        "[[plugin]]\nname = \"demo\"\nprotocol = \"jsonrpc\"\nprofile = \"nexo\"\ncommand = {}\n{SLOW}\n\
         [[plugin]]\nname = \"everything\"\nprotocol = \"jsonrpc\"\nprofile = \"mcp\"\ncommand = {}\n{SLOW}\n",
        toml_list(&[nexo[0].clone(), nexo[1].clone(), marker.clone()]),
        toml_list({
            everything.push(marker.clone());
            &everything
        }),
    );
    let server = Server::start(&config);
    let ng = ng_bin();
    let o = server.ng(&ng, &["demo_inc", "--n", "5"], None);
    assert_eq!(
        (s(&o.stdout).as_str(), o.status.code()),
        ("{\"n\": 6}\n", Some(0)),
        "{}\n{}",
        s(&o.stderr),
        server.log()
    );
    // `ln -s ng demo_inc; demo_inc --n 5`.
    let link = server.dir.path().join("demo_inc");
    std::os::unix::fs::symlink(&ng, &link).unwrap();
    let o = server.ng(&link, &["--n", "5"], None);
    assert_eq!(s(&o.stdout), "{\"n\": 6}\n", "{}", s(&o.stderr));
    // A JSON object on stdin (stdin is a pipe).
    let o = server.ng(&link, &[], Some("{\"n\": 41}"));
    assert_eq!(s(&o.stdout), "{\"n\": 42}\n", "{}", s(&o.stderr));
    let o = server.ng(&ng, &["demo_busy"], None);
    assert_eq!(o.status.code(), Some(69));
    assert!(s(&o.stderr).contains("retry after 1500 ms"));
    let o = server.ng(&ng, &["demo_inc", "--n", "x"], None);
    assert_eq!(o.status.code(), Some(2));
    let o = server.ng(&ng, &["echo", "--message", "via ngd"], None);
    assert_eq!(s(&o.stdout), "Echo: via ngd\n", "{}", s(&o.stderr));
    let o = server.ng(&ng, &["get-sum", "--a", "2", "--b", "3"], None);
    assert_eq!(s(&o.stdout), "The sum of 2 and 3 is 5.\n");
    // The same plugin process served every call.
    let pid1 = s(&server.ng(&ng, &["demo_pid"], None).stdout);
    let pid2 = s(&server.ng(&ng, &["demo_pid"], None).stdout);
    assert_eq!(pid1, pid2);
    let status = server.ngd("status");
    assert!(s(&status.stdout).contains("demo"), "{}", s(&status.stdout));
    // A crash mid-call: 69 with the reason, then the next call works.
    let o = server.ng(&ng, &["demo_crash"], None);
    assert_eq!(o.status.code(), Some(69), "{}", s(&o.stderr));
    assert!(s(&o.stderr).contains("the plugin exited with status 3 during the call"));
    let o = server.ng(&ng, &["demo_inc", "--n", "1"], None);
    assert_eq!(s(&o.stdout), "{\"n\": 2}\n", "{}", s(&o.stderr));
    // `ngd stop` leaves no plugin process behind (nor bridge: both carry the marker).
    assert_eq!(
        processes_with(&marker).len(),
        4,
        "{:?}",
        processes_with(&marker)
    );
    let o = server.ngd("stop");
    assert!(o.status.success(), "{}", s(&o.stderr));
    let end = Instant::now() + Duration::from_secs(20);
    while !processes_with(&marker).is_empty() {
        assert!(
            Instant::now() < end,
            "left behind: {:?}\n{}",
            processes_with(&marker),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_disabled_plugin_shows_its_reason_and_a_plain_reload_revives_it() {
    let marker = format!("jsonrpc-e2e-disabled-{}", std::process::id());
    let mut nexo = nexo_demo();
    nexo.push(marker.clone());
    let config = format!(
        "[[plugin]]\nname = \"demo\"\nprotocol = \"jsonrpc\"\nprofile = \"nexo\"\ncommand = {}\n\
         plugin_restart_backoff_ms = [10]\nplugin_max_restarts = 1\n{SLOW}\n",
        toml_list(&nexo)
    );
    let server = Server::start(&config);
    let ng = ng_bin();
    let reason = "the plugin failed again after 1 restart within 600 s \
                  (last failure: the plugin exited with status 3)";
    // The first crash is restarted; the second is one too many.
    let o = server.ng(&ng, &["demo_crash"], None);
    assert_eq!(o.status.code(), Some(69), "{}", s(&o.stderr));
    let o = server.ng(&ng, &["demo_crash"], None);
    assert_eq!(
        (s(&o.stderr), o.status.code()),
        (
            format!(
                "demo_crash: the plugin exited with status 3 during the call; \
                 the plugin is disabled: {reason}; `ngd reload` starts it again\n"
            ),
            Some(126)
        )
    );
    // ngd took the bridge's `disabled` notice: the pool is disabled with the bridge's
    // reason, and ngd itself refuses the next call, as for any disabled plugin.
    let o = server.ng(&ng, &["demo_inc", "--n", "1"], None);
    assert_eq!(
        (s(&o.stderr), o.status.code()),
        (
            format!("ngd: command 'demo_inc' could not start: {reason}\n"),
            Some(126)
        ),
        "{}",
        server.log()
    );
    let status = server.ngd("status");
    assert!(
        s(&status.stdout).contains(&format!("plugin demo: DISABLED: {reason};")),
        "{}",
        s(&status.stdout)
    );
    let status = Command::new(ngd())
        .args(["status", "--json", "--server", &server.server_arg()])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let plugin = json["plugins"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "demo"))
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(plugin["status"]["state"], "disabled", "{plugin}");
    assert_eq!(plugin["status"]["reason"], reason, "{plugin}");
    // The disabled pool lets its bridge go: nothing of it keeps running.
    let end = Instant::now() + Duration::from_secs(20);
    while !processes_with(&marker).is_empty() {
        assert!(
            Instant::now() < end,
            "left behind: {:?}\n{}",
            processes_with(&marker),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A reload with the very same table replaces the disabled pool: a new bridge, a new
    // plugin, and the calls work again. (`ngd reload` asks the server's loop to reload;
    // until it has, calls are still refused.)
    let o = server.ngd("reload");
    assert!(o.status.success(), "{}", s(&o.stderr));
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let o = server.ng(&ng, &["demo_inc", "--n", "1"], None);
        if o.status.code() == Some(0) {
            assert_eq!(s(&o.stdout), "{\"n\": 2}\n");
            break;
        }
        assert_eq!(o.status.code(), Some(126), "{}", s(&o.stderr));
        assert!(
            Instant::now() < end,
            "not revived: {}\n{}",
            s(&o.stderr),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = server.ngd("status");
    assert!(
        s(&status.stdout).contains("plugin demo: active;"),
        "{}",
        s(&status.stdout)
    );
}
