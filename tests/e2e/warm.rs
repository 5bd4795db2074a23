//! `ngd warm`, `ngd unwarm`, `ngd list`, `ngd shims`, and the Python SDK ngd carries.
//!
//! Each test is a fresh user (`ops::User`: runtime directory, home, hence configuration,
//! drop-in directory and shims directory) with a `bin/` of programs first on `PATH`:
//! Python scripts whose `#!` names the Python the tests run, which has no `ngw` installed,
//! so every warm run here imports the SDK ngd carries. Warm runs go through the shim, a link
//! to our `ng`, and are compared byte for byte with the same program run cold.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ng_tests::client::ClientCmd;
use ng_tests::plugins::python;
use ng_tests::{bins, Output};

use crate::ops::User;

/// A Python script that shows what a program sees: its arguments, stdin, `sys.path`, the
/// SDK-related environment and `sys.flags`; it exits 3.
const SHOW: &str = r#"
import os, sys
data = sys.stdin.read()
print("argv", sys.argv[1:])
print("stdin", repr(data))
print("path", sys.path)
print("PYTHONPATH", os.environ.get("PYTHONPATH"))
print("ngw importable", any(os.path.isdir(os.path.join(p, "ngw")) for p in sys.path if p))
print("flags", sys.flags)
sys.stderr.write("to stderr\n")
sys.exit(3)
"#;

/// The user and their `bin/`, first on `PATH`, then the shims directory's place (as
/// `ngd warm` tells users to put it, the shims must come first to be used; here the test
/// runs the shim by its path and the real program by its name).
struct Setup {
    user: User,
}

impl Setup {
    fn new() -> Setup {
        let user = User::new();
        std::fs::create_dir(user.dir.path().join("bin")).unwrap();
        Setup { user }
    }

    fn bin(&self) -> PathBuf {
        self.user.dir.path().join("bin")
    }

    fn conf_d(&self) -> PathBuf {
        self.user.home().join(".config/ngd/conf.d")
    }

    fn shims(&self) -> PathBuf {
        self.user.home().join(".local/share/ngd/shims")
    }

    /// `bin/NAME`, a Python script with `body`.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.bin().join(name);
        let text = format!("#!{}\n{body}", python().display());
        ng_testkit::exe::write_executable(&path, text);
        path
    }

    /// `bin/NAME`, any executable text.
    fn program(&self, name: &str, text: &str) -> PathBuf {
        let path = self.bin().join(name);
        ng_testkit::exe::write_executable(&path, text);
        path
    }

    fn path(&self, shims_first: bool) -> OsString {
        let mut dirs = vec![self.bin(), bins::ngd().parent().unwrap().to_path_buf()];
        if shims_first {
            dirs.insert(0, self.shims());
        }
        dirs.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from));
        std::env::join_paths(dirs).unwrap()
    }

    /// `ngd ARGS...` with `bin/` on `PATH`.
    fn ngd(&self) -> ClientCmd {
        self.user
            .ngd()
            .env("PATH", self.path(false))
            .timeout(Duration::from_secs(120))
    }

    /// `program ARGS...` with the user's environment (`bin/` on `PATH`).
    fn run(&self, program: &Path) -> ClientCmd {
        self.user
            .with_env(ClientCmd::new("program", program))
            .env("PATH", self.path(false))
            .timeout(Duration::from_secs(60))
    }

    /// The files of a directory (none if it does not exist), sorted.
    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn tables(&self) -> Vec<String> {
        Self::files(&self.conf_d())
            .into_iter()
            .filter(|n| n != ".lock")
            .collect()
    }
}

#[track_caller]
fn assert_same(cold: &Output, warm: &Output) {
    let context = format!("cold: {cold:?}\nwarm: {warm:?}");
    assert_eq!(cold.code(), warm.code(), "{context}");
    assert_eq!(cold.stdout_text(), warm.stdout_text(), "{context}");
    assert_eq!(cold.stderr_text(), warm.stderr_text(), "{context}");
}

#[test]
fn a_python_script_made_warm_runs_as_cold_and_unwarm_removes_it() {
    let s = Setup::new();
    let show = s.script("show", SHOW);
    let out = s.ngd().args(["warm", "show"]).run();
    out.assert_success();
    let text = out.stdout_text();
    assert!(text.contains("show is warm (python): show"), "{out:?}");
    // The one line for the shell's rc file, as `ngd shims --path` prints it.
    let line = format!("export PATH=\"{}:$PATH\"", s.shims().display());
    assert!(text.contains(&line), "{out:?}");
    let paths = s.ngd().args(["shims", "--path"]).run();
    assert_eq!(paths.stdout_text(), format!("{line}\n"));

    assert_eq!(s.tables(), ["show.toml"]);
    // ngd warm returned once a worker was ready: the first call is warm.
    let list = s.ngd().args(["list", "--json"]).run();
    let rows: serde_json::Value = serde_json::from_str(&list.stdout_text()).unwrap();
    assert_eq!(rows[0]["workers"], 1, "{list:?}");
    let shim = s.shims().join("show");
    assert_eq!(std::fs::read_link(&shim).unwrap(), bins::ng());

    // Through the shim: the same bytes and exit code as cold, with stdin, and with the
    // client's own PYTHONPATH (sys.path and os.environ as a cold run has them).
    for pythonpath in [None, Some("/nonexistent/dir")] {
        let with = |cmd: ClientCmd| match pythonpath {
            Some(p) => cmd.env("PYTHONPATH", p),
            None => cmd,
        };
        let cold = with(s.run(&show))
            .args(["a", "b c"])
            .stdin_bytes("in\n")
            .run();
        let warm = with(s.run(&shim))
            .args(["a", "b c"])
            .stdin_bytes("in\n")
            .run();
        cold.assert_code(3);
        assert!(
            cold.stdout_text().contains("ngw importable False"),
            "{cold:?}"
        );
        assert_same(&cold, &warm);
    }

    // Listed with its kind, state and workers.
    let list = s.ngd().args(["list", "--json"]).run();
    list.assert_success();
    let rows: serde_json::Value = serde_json::from_str(&list.stdout_text()).unwrap();
    assert_eq!(rows[0]["name"], "show", "{list:?}");
    assert_eq!(rows[0]["kind"], "python", "{list:?}");
    assert_eq!(rows[0]["state"], "active", "{list:?}");
    assert_eq!(
        rows[0]["program"],
        show.to_string_lossy().as_ref(),
        "{list:?}"
    );
    assert!(rows[0]["workers"].as_u64().unwrap() >= 1, "{list:?}");

    // Idempotent: again is "already warm", and changes nothing.
    let table = std::fs::read(s.conf_d().join("show.toml")).unwrap();
    let again = s.ngd().args(["warm", "show"]).run();
    again.assert_success();
    assert!(
        again.stdout_text().contains("show is already warm"),
        "{again:?}"
    );
    assert_eq!(std::fs::read(s.conf_d().join("show.toml")).unwrap(), table);

    // `ngd bench` on the warm command keeps its figures for `ngd list`; with the shims
    // first on PATH, its cold side is still the real program.
    let out = s
        .ngd()
        .env("PATH", s.path(true))
        .args([
            "bench", "--json", "--runs", "2", "--warmup", "1", "--", "show",
        ])
        .run();
    out.assert_success();
    let report: serde_json::Value = serde_json::from_str(&out.stdout_text()).unwrap();
    assert_eq!(
        report["cold_program"],
        show.to_string_lossy().as_ref(),
        "{out:?}"
    );
    assert_eq!(report["mode"], "configured", "{out:?}");
    assert_eq!(report["identical"], true, "{out:?}");
    let list = s.ngd().args(["list"]).run();
    let row = list.stdout_text();
    assert!(row.contains("show") && row.contains("python"), "{list:?}");
    assert!(!row.contains(" -  "), "no bench figures: {list:?}");

    // Unwarm: table and shim gone, the server no longer offers it, the real program is
    // what the shell finds with the shims first on PATH.
    let out = s.ngd().args(["unwarm", "show"]).run();
    out.assert_success();
    assert!(
        out.stdout_text().contains("show is no longer warm"),
        "{out:?}"
    );
    assert!(s.tables().is_empty(), "{:?}", s.tables());
    assert!(shim.symlink_metadata().is_err());
    let found = s
        .run(Path::new("/bin/sh"))
        .env("PATH", s.path(true))
        .args(["-c", "command -v show"])
        .run();
    assert_eq!(found.stdout_text().trim(), show.to_string_lossy());
    let check = s.ngd().args(["check", "show"]).run();
    check.assert_code(69);
    let again = s.ngd().args(["unwarm", "show"]).run();
    again.assert_success();
    assert!(
        again.stdout_text().contains("show is not warm"),
        "{again:?}"
    );
}

#[test]
fn bench_serves_a_python_script_ad_hoc_with_no_sdk_installed() {
    let s = Setup::new();
    let show = s.script("show", SHOW);
    let out = s
        .ngd()
        .args(["bench", "--runs", "2", "--warmup", "1", "--json", "--"])
        .arg(&show)
        .arg("x")
        .run();
    out.assert_success();
    let report: serde_json::Value = serde_json::from_str(&out.stdout_text()).unwrap();
    assert_eq!(report["mode"], "ad hoc", "{out:?}");
    assert_eq!(report["identical"], true, "{out:?}");
    assert_eq!(report["exit_code"], 3, "{out:?}");
}

#[test]
fn what_cannot_be_served_gets_a_message_its_code_and_no_trace() {
    let s = Setup::new();
    s.program("shell", "#!/bin/sh\necho hi\n");
    std::fs::copy("/bin/true", s.bin().join("native")).unwrap();
    s.program("opts", &format!("#!{} -E\nprint(1)\n", python().display()));
    for (name, code, message) in [
        ("native", 69, "is a compiled program"),
        ("shell", 69, "is a script for /bin/sh, not Python"),
        ("opts", 69, "gives the interpreter options (-E)"),
        ("no-such-program", 66, "no-such-program: not found on PATH"),
        ("a/b", 64, "no '/'"),
    ] {
        let out = s.ngd().args(["warm", name]).run();
        out.assert_code(code);
        assert!(out.stderr_text().contains(message), "{name}: {out:?}");
        assert!(out.stderr_text().starts_with("ngd warm: "), "{out:?}");
        assert!(s.tables().is_empty(), "{name}: {:?}", s.tables());
        assert!(Setup::files(&s.shims()).is_empty(), "{name}");
    }
    // No server was started for nothing.
    assert!(!s.user.socket().exists());
}

#[test]
fn a_broken_drop_in_file_stops_warm_before_anything_is_written() {
    let s = Setup::new();
    s.script("show", SHOW);
    std::fs::create_dir_all(s.conf_d()).unwrap();
    std::fs::write(s.conf_d().join("broken.toml"), "[[plugin]\nname = 1\n").unwrap();
    let out = s.ngd().args(["warm", "show"]).run();
    out.assert_code(78);
    let err = out.stderr_text();
    assert!(err.contains("broken.toml"), "{out:?}");
    assert!(err.contains("nothing was changed"), "{out:?}");
    assert_eq!(s.tables(), ["broken.toml"]);
    assert!(Setup::files(&s.shims()).is_empty());
}

#[test]
fn a_shims_directory_that_cannot_be_written_leaves_no_table() {
    use std::os::unix::fs::PermissionsExt as _;
    let s = Setup::new();
    s.script("show", SHOW);
    std::fs::create_dir_all(s.shims()).unwrap();
    std::fs::set_permissions(s.shims(), std::fs::Permissions::from_mode(0o555)).unwrap();
    // Permissions do not stop root: then the shims directory's parent is made a file,
    // which nobody can create a directory in.
    let root = ng_server::sys::effective_uid() == 0;
    if root {
        std::fs::set_permissions(s.shims(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = s.shims().parent().unwrap().to_path_buf();
        std::fs::remove_dir_all(&data).unwrap();
        std::fs::write(&data, "not a directory").unwrap();
    }
    let out = s.ngd().args(["warm", "show"]).run();
    out.assert_code(73);
    assert!(
        out.stderr_text().contains("cannot make its shim"),
        "{out:?}"
    );
    assert!(out.stderr_text().contains("nothing was changed"), "{out:?}");
    assert!(s.tables().is_empty(), "{:?}", s.tables());
    if !root {
        std::fs::set_permissions(s.shims(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(Setup::files(&s.shims()).is_empty());
    }
}

#[test]
fn check_refuses_a_program_whose_warm_run_differs_and_leaves_no_trace() {
    let s = Setup::new();
    // The parent process differs: a cold run's is ngd, a warm run's is the worker.
    s.script("ppid", "import os\nprint(os.getppid())\n");
    let out = s.ngd().args(["warm", "--check", "ppid"]).run();
    out.assert_code(1);
    let err = out.stderr_text();
    assert!(
        err.contains("ppid: refused: `ppid --version` warm differs"),
        "{out:?}"
    );
    assert!(err.contains("stdout:"), "{out:?}");
    assert!(s.tables().is_empty(), "{:?}", s.tables());
    assert!(Setup::files(&s.shims()).is_empty());
    assert!(!s.user.socket().exists(), "a server was started");
    assert!(
        !s.user
            .home()
            .join(".local/state/ngd/plugins/ppid.log")
            .exists(),
        "the check's plugin log was left"
    );

    // A program that runs the same warm passes, with the arguments given.
    s.script("show", SHOW);
    let out = s.ngd().args(["warm", "--check", "show", "--", "a"]).run();
    out.assert_success();
    assert_eq!(s.tables(), ["show.toml"]);
}

#[test]
fn concurrent_warms_leave_a_consistent_directory() {
    let s = Setup::new();
    s.script("one", SHOW);
    s.script("two", SHOW);
    for names in [["one", "two"], ["one", "one"]] {
        let running: Vec<_> = names
            .iter()
            .map(|n| s.ngd().args(["warm", n]).spawn())
            .collect();
        for r in running {
            r.wait().assert_success();
        }
        let mut expected: Vec<&str> = names.to_vec();
        expected.dedup();
        let tables: Vec<String> = expected.iter().map(|n| format!("{n}.toml")).collect();
        assert_eq!(s.tables(), tables);
        assert_eq!(Setup::files(&s.shims()), expected);
        for name in &expected {
            let cold = s.run(&s.bin().join(name)).run();
            let warm = s.run(&s.shims().join(name)).run();
            assert_same(&cold, &warm);
        }
        s.ngd().arg("unwarm").args(names).run().assert_success();
        assert!(s.tables().is_empty());
        assert!(Setup::files(&s.shims()).is_empty());
    }
}

/// `ng ng-stats --json` on the user's default server, from `bin`'s own `ng`.
fn stats(s: &Setup, ng: &Path) -> Output {
    s.user
        .with_env(ClientCmd::new("ng", ng))
        .args(["ng-stats", "--json"])
        .timeout(Duration::from_secs(30))
        .run()
}

/// Replaces `path` with a copy of `from` (a new file renamed over it, as installers do).
fn replace_binary(path: &Path, from: &Path) {
    let new = path.with_extension("new");
    std::fs::copy(from, &new).unwrap();
    std::fs::rename(&new, path).unwrap();
}

#[test]
fn an_auto_started_server_hands_over_to_a_new_binary_and_no_call_fails() {
    let s = Setup::new();
    // ng and ngd side by side, as an install puts them: ng auto-starts the ngd next to it.
    let (ng, ngd) = (s.bin().join("ng"), s.bin().join("ngd"));
    std::fs::copy(bins::ng(), &ng).unwrap();
    std::fs::copy(bins::ngd(), &ngd).unwrap();
    let first = stats(&s, &ng);
    first.assert_success();
    let json =
        |o: &Output| -> serde_json::Value { serde_json::from_str(&o.stdout_text()).unwrap() };
    let old_pid = json(&first)["pid"].as_u64().unwrap();
    assert_eq!(json(&first)["outdated"], false);

    replace_binary(&ngd, &bins::ngd());
    // Calls keep coming; every one succeeds, and soon a new server answers them.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let new_pid = loop {
        let out = stats(&s, &ng);
        out.assert_success();
        let pid = json(&out)["pid"].as_u64().unwrap();
        if pid != old_pid {
            assert_eq!(json(&out)["outdated"], false, "{out:?}");
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the old server never handed over"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_ne!(new_pid, old_pid);
    let gone = std::time::Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{old_pid}")).exists() {
        assert!(
            std::time::Instant::now() < gone,
            "the old server did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        s.user.log_text().contains("changed on disk: handing over"),
        "{}",
        s.user.log_text()
    );
}

#[test]
fn a_server_started_by_hand_says_it_is_outdated() {
    let s = Setup::new();
    let ngd = s.bin().join("ngd");
    std::fs::copy(bins::ngd(), &ngd).unwrap();
    let socket = s.user.dir.path().join("hand.sock");
    let address = format!("local:{}", socket.display());
    let server = s
        .user
        .with_env(ClientCmd::new("ngd", &ngd))
        .args(["serve", "--listen", &address])
        .timeout(Duration::from_secs(60))
        .spawn();
    server.wait_for_stdout("listening on", Duration::from_secs(20));
    let status = || s.ngd().args(["status", "--server", &address]).run();
    assert!(!status().stdout_text().contains("outdated"));
    replace_binary(&ngd, &bins::ngd());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = status();
        out.assert_success();
        if out
            .stdout_text()
            .contains("outdated: ngd's binary changed on disk")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never outdated: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // It keeps serving until told to stop.
    s.ngd()
        .args(["stop", "--server", &address])
        .run()
        .assert_success();
    server.wait().assert_success();
}

/// A `[[plugin]]` table serving `bin/NAME` (a Python script) with the SDK ngd carries.
fn script_table(s: &Setup, name: &str, extra: &str) -> String {
    format!(
        "[[plugin]]\nname = \"{name}\"\ncommand = [{}, \"-m\", \"ngw\", \"script\", \"{name}={}\"]\n\
         sdk = \"python\"\ncommands = [\"{name}\"]\nmax_workers = 1\n{extra}\n",
        ng_tests::plugins::toml_str(&python().to_string_lossy()),
        s.bin().join(name).display()
    )
}

/// The default server's plugins by name, from `ng-stats --json`.
fn plugins(s: &Setup) -> std::collections::BTreeMap<String, serde_json::Value> {
    let out = s.user.ng().args(["ng-stats", "--json"]).run();
    out.assert_success();
    let doc: serde_json::Value = serde_json::from_str(&out.stdout_text()).unwrap();
    doc["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_owned(), p.clone()))
        .collect()
}

/// Waits until `done` holds for the server's plugins.
#[track_caller]
fn wait_for(
    s: &Setup,
    what: &str,
    done: impl Fn(&std::collections::BTreeMap<String, serde_json::Value>) -> bool,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let p = plugins(s);
        if done(&p) {
            return p;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never {what}: {p:#?}\nngd's log:\n{}",
            s.user.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the workers of `names` hold together, once two readings a measuring interval
/// apart agree within 5%.
fn settled_total(s: &Setup, names: &[&str]) -> u64 {
    let total = |p: &std::collections::BTreeMap<String, serde_json::Value>| -> Option<u64> {
        names
            .iter()
            .map(|n| p[*n]["memory_bytes"].as_u64().filter(|m| *m > 0))
            .sum()
    };
    let mut last: Option<u64> = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let p = plugins(s);
        let now = total(&p);
        if let (Some(a), Some(b)) = (last, now) {
            if a.abs_diff(b) <= b / 20 {
                return b;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never settled: {p:#?}"
        );
        last = now;
        std::thread::sleep(Duration::from_millis(1200));
    }
}

fn workers(p: &serde_json::Value) -> u64 {
    ["starting", "idle", "busy"]
        .iter()
        .map(|k| p[*k].as_u64().unwrap())
        .sum()
}

#[test]
fn under_the_memory_budget_the_least_recently_used_gives_way() {
    let s = Setup::new();
    let names = ["p0", "p1", "p2"];
    for n in names {
        s.script(n, &format!("print({n:?})\n"));
    }
    // Without spares: a spare comes and goes with each session, and what it holds would
    // make the measured figures wander by a few MB either side of the budget.
    let tables: String = names
        .iter()
        .map(|n| {
            script_table(&s, n, "idle_to_zero_ms = 0")
                .replace("\"script\", ", "\"script\", \"--no-prefork\", ")
        })
        .collect();
    let call = |name: &str| {
        let out = s.user.ng().arg(name).timeout(Duration::from_secs(60)).run();
        out.assert_success();
        assert_eq!(out.stdout_text(), format!("{name}\n"));
    };
    // What two and what three warm workers hold, without a budget. Measured with each
    // count: a page the workers share is counted a part per worker sharing it.
    s.user.config(&format!("memory_budget_mb = 0\n{tables}"));
    call("p0");
    call("p1");
    let two = settled_total(&s, &names[..2]);
    call("p2");
    let three = settled_total(&s, &names);
    s.user.ngd().arg("stop").run().assert_success();
    while s.user.socket().exists() {
        std::thread::sleep(Duration::from_millis(20));
    }

    // Room for two workers and not three: three programs warm, one gives way.
    let budget_mb = ((two + three) / 2) >> 20;
    let budget = budget_mb << 20;
    s.user
        .config(&format!("memory_budget_mb = {budget_mb}\n{tables}"));
    for n in names {
        call(n);
    }
    let total = |p: &std::collections::BTreeMap<String, serde_json::Value>| -> u64 {
        p.values()
            .map(|v| v["memory_bytes"].as_u64().unwrap())
            .sum()
    };
    let evicted = |who: &'static str| {
        move |p: &std::collections::BTreeMap<String, serde_json::Value>| {
            p[who]["residency"] == "evicted"
                && workers(&p[who]) == 0
                && names
                    .iter()
                    .filter(|n| **n != who)
                    .all(|n| p[*n]["residency"] == "awake" && workers(&p[*n]) == 1)
        }
    };
    let p = wait_for(&s, "p0 evicted", evicted("p0"));
    assert!(total(&p) <= budget, "{} > {budget}: {p:#?}", total(&p));
    // Every call still succeeds; the one woken up makes the next least recently used go.
    call("p0");
    let p = wait_for(&s, "p1 evicted", evicted("p1"));
    assert!(total(&p) <= budget, "{} > {budget}: {p:#?}", total(&p));
    call("p1");
    wait_for(&s, "p2 evicted", evicted("p2"));
    assert!(
        s.user.log_text().contains("over the memory budget"),
        "{}",
        s.user.log_text()
    );
}

#[test]
fn a_plugin_idle_long_enough_keeps_no_worker_and_the_next_call_starts_one() {
    let s = Setup::new();
    s.script("sleepy", "print('awake')\n");
    s.user
        .config(&script_table(&s, "sleepy", "idle_to_zero_ms = 1000"));
    let call = || {
        let out = s
            .user
            .ng()
            .arg("sleepy")
            .timeout(Duration::from_secs(60))
            .run();
        out.assert_success();
        assert_eq!(out.stdout_text(), "awake\n");
    };
    call();
    wait_for(&s, "asleep", |p| {
        p["sleepy"]["residency"] == "asleep" && workers(&p["sleepy"]) == 0
    });
    call();
    let p = plugins(&s);
    assert_eq!(p["sleepy"]["residency"], "awake", "{p:#?}");
    assert_eq!(workers(&p["sleepy"]), 1, "{p:#?}");
}

/// The peers cache (`scripts/peers/*`), as the test process sees it.
fn peers_dir() -> PathBuf {
    std::env::var_os("NGD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/ngd-peers")
        })
}

/// A peer from the cache, which must be there.
fn peer(path: &str) -> PathBuf {
    let p = peers_dir().join(path);
    assert!(
        p.is_file(),
        "{} is missing: run scripts/install-peers",
        p.display()
    );
    p
}

#[test]
fn a_nushell_plugin_gets_shims_for_the_commands_it_serves() {
    let s = Setup::new();
    let inc = peer("bin/nu_plugin_inc");
    std::fs::copy(&inc, s.bin().join("nu_plugin_inc")).unwrap();
    let out = s.ngd().args(["warm", "nu_plugin_inc"]).run();
    out.assert_success();
    assert!(
        out.stdout_text()
            .contains("nu_plugin_inc is warm (nu): inc"),
        "{out:?}"
    );
    let shim = s.shims().join("inc");
    assert!(std::fs::read_link(&shim).is_ok());
    let out = s.run(&shim).arg("--major").stdin_bytes("1.2.3").run();
    out.assert_success();
    assert_eq!(out.stdout_text(), "2.0.0\n");
    let list = s.ngd().args(["list", "--json"]).run();
    let rows: serde_json::Value = serde_json::from_str(&list.stdout_text()).unwrap();
    assert_eq!(rows[0]["kind"], "nu", "{list:?}");
    assert_eq!(rows[0]["shims"], serde_json::json!(["inc"]), "{list:?}");
    s.ngd()
        .args(["unwarm", "nu_plugin_inc"])
        .run()
        .assert_success();
    assert!(shim.symlink_metadata().is_err());
    assert!(s.tables().is_empty());
}

#[test]
fn mcp_servers_of_a_client_configuration_become_commands() {
    let s = Setup::new();
    let server = peer("venv-mcp-time/bin/mcp-server-time");
    let config = s.user.dir.path().join("mcp.json");
    std::fs::write(
        &config,
        serde_json::json!({"mcpServers": {"time": {"command": server, "args": []}}}).to_string(),
    )
    .unwrap();
    let out = s.ngd().arg("warm").arg("--mcp").arg(&config).run();
    out.assert_success();
    assert!(
        out.stdout_text()
            .contains("mcp-time is warm (mcp): get_current_time convert_time"),
        "{out:?}"
    );
    let out = s
        .run(&s.shims().join("get_current_time"))
        .args(["--timezone", "UTC"])
        .run();
    out.assert_success();
    let v: serde_json::Value = serde_json::from_str(&out.stdout_text()).unwrap();
    assert_eq!(v["timezone"], "UTC", "{out:?}");
}

#[test]
fn a_fledge_plugins_command_is_found_by_name() {
    let s = Setup::new();
    let fixture = ng_tests::plugins::repo_root().join("bridges/fledge/tests/plugins/fledge-hello");
    let plugin = s.user.home().join(".config/fledge/plugins/fledge-hello");
    std::fs::create_dir_all(&plugin).unwrap();
    for file in ["plugin.toml", "hello.py"] {
        std::fs::copy(fixture.join(file), plugin.join(file)).unwrap();
    }
    let out = s.ngd().args(["warm", "hello"]).run();
    out.assert_success();
    assert!(
        out.stdout_text().contains("hello is warm (fledge): hello"),
        "{out:?}"
    );
    let out = s.run(&s.shims().join("hello")).args(["a", "b"]).run();
    out.assert_success();
    assert_eq!(out.stdout_text(), "hello a b\n");
}

/// A JVM program's shell launcher (Debian's `/usr/bin/checkstyle`, and one that puts its
/// own arguments before the user's) is served by `ngw-java` with the `java` command line
/// it runs; through the shim it is byte-identical to the launcher run cold.
#[test]
fn a_java_launcher_is_served_by_ngw_java() {
    let s = Setup::new();
    std::os::unix::fs::symlink(ng_tests::jvm::ngw_java(), s.bin().join("ngw-java")).unwrap();
    s.program(
        "probe",
        &format!(
            "#!/bin/sh\nexec \"${{JAVA_HOME:-/usr}}/bin/java\" -cp {} ngtest.ExactProbe lead \"$@\"\n",
            ng_tests::java::nails_dir().display()
        ),
    );
    let out = s.ngd().args(["warm", "probe", "checkstyle"]).run();
    out.assert_success();
    assert!(
        out.stdout_text().contains("probe is warm (jvm): probe"),
        "{out:?}"
    );
    assert!(
        out.stdout_text()
            .contains("checkstyle is warm (jvm): checkstyle"),
        "{out:?}"
    );
    let dir = s.user.dir.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Foo.java"),
        "public class Foo {\n  int x;\n    public void f(){ int Y=1; }\n}\n",
    )
    .unwrap();
    let probe = s.bin().join("probe");
    let checkstyle = PathBuf::from("/usr/bin/checkstyle");
    for (name, cold_program, args) in [
        ("probe", &probe, vec!["a", "b c"]),
        ("probe", &probe, vec!["exit=4"]),
        (
            "checkstyle",
            &checkstyle,
            vec!["-c", "/sun_checks.xml", "Foo.java"],
        ),
    ] {
        for _ in 0..2 {
            let cold = s.run(cold_program).args(&args).cwd(&dir).run();
            let warm = s.run(&s.shims().join(name)).args(&args).cwd(&dir).run();
            assert_same(&cold, &warm);
        }
    }
}

/// A Ruby script of our own (`#!/usr/bin/env ruby`): what it sees, its stdin, both streams;
/// it exits 3.
const RUBY_SHOW: &str = r#"#!/usr/bin/env ruby
data = $stdin.read
puts "argv #{ARGV.inspect}"
puts "stdin #{data.inspect}"
puts "program #{$0} #{__FILE__ == $0}"
puts "ngw in ENV #{ENV.keys.grep(/\ANGW_/).inspect}"
$stderr.puts 'to stderr'
exit 3
"#;

/// Debian's RubyGems binstubs (`/usr/bin/rubocop`, `/usr/bin/rake`, `#!/usr/bin/ruby`) and
/// a script with `#!/usr/bin/env ruby`, made warm by name: served by the Ruby worker ngd
/// carries (no checkout named anywhere), through their shims byte for byte as cold, with
/// every session on the warm path (counted by the server, no `fallback` notice), the first
/// rubocop session teaching the worker its preloads and the next ones on the zygote that
/// preloaded them.
#[test]
fn ruby_programs_made_warm_run_as_cold_through_the_ruby_sdk_ngd_carries() {
    for program in ["/usr/bin/ruby", "/usr/bin/rubocop", "/usr/bin/rake"] {
        assert!(
            Path::new(program).is_file(),
            "{program} is missing: run scripts/install-peers"
        );
    }
    let s = Setup::new();
    let show = s.program("rbshow", RUBY_SHOW);
    let out = s.ngd().args(["warm", "rubocop", "rake", "rbshow"]).run();
    out.assert_success();
    for name in ["rubocop", "rake", "rbshow"] {
        assert!(
            out.stdout_text()
                .contains(&format!("{name} is warm (ruby): {name}")),
            "{out:?}"
        );
    }
    let table = std::fs::read_to_string(s.conf_d().join("rubocop.toml")).unwrap();
    assert!(
        table.contains("command = [\"/usr/bin/ruby\", \"rubocop=/usr/bin/rubocop\"]"),
        "{table}"
    );
    assert!(table.contains("sdk = \"ruby\""), "{table}");

    let dir = s.user.dir.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("t.rb"),
        "def foo( a )\n  x = 1\n  return a\nend\nputs \"hi\"\n",
    )
    .unwrap();
    std::fs::copy(
        ng_tests::plugins::repo_root().join("sdk/ruby/tests/fixtures/Rakefile"),
        dir.join("Rakefile"),
    )
    .unwrap();
    let rubocop = PathBuf::from("/usr/bin/rubocop");
    let rake = PathBuf::from("/usr/bin/rake");
    let mut sessions = 0;
    for (name, cold_program, args, code) in [
        ("rubocop", &rubocop, vec!["--cache", "false", "t.rb"], 1),
        ("rubocop", &rubocop, vec!["--cache", "false", "t.rb"], 1),
        (
            "rubocop",
            &rubocop,
            vec!["--cache", "false", "-f", "json", "t.rb"],
            1,
        ),
        ("rake", &rake, vec!["show"], 0),
        ("rake", &rake, vec!["fail"], 1),
        ("rbshow", &show, vec!["a", "b c"], 3),
    ] {
        for _ in 0..2 {
            let with = |cmd: ClientCmd| cmd.args(&args).cwd(&dir).env("GREETING", "héllo");
            let cold = with(s.run(cold_program)).stdin_bytes("in\n").run();
            let warm = with(s.run(&s.shims().join(name))).stdin_bytes("in\n").run();
            cold.assert_code(code);
            assert_same(&cold, &warm);
            sessions += 1;
        }
    }
    let shown = s.run(&s.shims().join("rbshow")).run();
    assert!(
        shown
            .stdout_text()
            .contains(&format!("program {} true\nngw in ENV []\n", show.display())),
        "{shown:?}"
    );
    sessions += 1;

    // Every session went through the Ruby worker, and none ran the cold way.
    let served = plugins(&s);
    let total: u64 = ["rubocop", "rake", "rbshow"]
        .iter()
        .map(|n| served[*n]["sessions"].as_u64().unwrap())
        .sum();
    assert_eq!(total, sessions, "{served:#?}");
    for name in ["rubocop", "rake", "rbshow"] {
        assert!(
            served[name].pointer("/notice_counts/fallback").is_none(),
            "{name} ran cold: {:#?}",
            served[name]
        );
    }
    let list = s.ngd().args(["list", "--json"]).run();
    let rows: serde_json::Value = serde_json::from_str(&list.stdout_text()).unwrap();
    assert!(
        rows.as_array().unwrap().iter().all(|r| r["kind"] == "ruby"),
        "{list:?}"
    );
}
