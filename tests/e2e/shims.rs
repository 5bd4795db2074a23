//! Shims run what the shell would run: `ng` under a program's name looks the name up on
//! `PATH` (skipping itself), and ngd serves that program warm (the warmed one, or one of
//! the same kind in a pool derived from its table) or has the shim exec it directly.
//!
//! Real programs: yamllint 1.33.0 and 1.35.1, each in a venv of its own
//! (`scripts/peers/shims`). Each case runs the same command line cold (the shell, no shim
//! on `PATH`) and through the shim, compares the bytes and exit code, and asserts which
//! program ran (its version) and whether it was warm (the pools' session counts in
//! `ng-stats`, and ngd's log for a program the shim ran itself).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ng_tests::client::ClientCmd;
use ng_tests::{bins, Output};

use crate::ops::User;

/// YAML with problems yamllint reports (the same for both versions' default rules).
const YAML: &str = "key: value   \nlist:\n- a\n-  b\nkey: again\n";

/// The peers cache (`scripts/peers/*`).
fn peers_dir() -> PathBuf {
    std::env::var_os("NGD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/ngd-peers")
        })
}

/// `venv-shims-NAME/bin`, which must hold yamllint.
fn venv_bin(name: &str) -> PathBuf {
    let bin = peers_dir().join(format!("venv-shims-{name}/bin"));
    assert!(
        bin.join("yamllint").is_file(),
        "{} is missing: run scripts/install-peers",
        bin.display()
    );
    bin
}

const A: &str = "yamllint 1.33.0\n";
const B: &str = "yamllint 1.35.1\n";

/// A user with yamllint of venv A warm.
struct Setup {
    user: User,
    a: PathBuf,
    b: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let s = Setup {
            user: User::new(),
            a: venv_bin("a"),
            b: venv_bin("b"),
        };
        let out = s
            .user
            .ngd()
            .env("PATH", s.path(&[&s.a]))
            .args(["warm", "yamllint"])
            .timeout(Duration::from_secs(120))
            .run();
        out.assert_success();
        assert!(
            out.stdout_text().contains("yamllint is warm (python)"),
            "{out:?}"
        );
        s
    }

    fn shims(&self) -> PathBuf {
        self.user.home().join(".local/share/ngd/shims")
    }

    fn shim(&self) -> PathBuf {
        self.shims().join("yamllint")
    }

    /// `PATH` with `dirs` first, then ngd's directory and the system's.
    fn path(&self, dirs: &[&Path]) -> OsString {
        let mut all: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
        all.push(bins::ngd().parent().unwrap().to_path_buf());
        all.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from));
        let joined: Vec<String> = all.iter().map(|d| d.display().to_string()).collect();
        joined.join(":").into()
    }

    /// `sh -c SCRIPT` with `PATH` as given, in `cwd`, with YAML on stdin.
    fn sh(&self, path: &OsString, cwd: &Path, script: &str) -> Output {
        self.user
            .with_env(ClientCmd::new("sh", "/bin/sh"))
            .env("PATH", path)
            .cwd(cwd)
            .args(["-c", script])
            .stdin_bytes(YAML)
            .timeout(Duration::from_secs(60))
            .run()
    }

    /// The sessions each pool served, from `ng-stats --json`.
    fn sessions(&self) -> BTreeMap<String, u64> {
        self.plugins()
            .into_iter()
            .map(|(name, p)| (name, p["sessions"].as_u64().unwrap()))
            .collect()
    }

    fn plugins(&self) -> BTreeMap<String, serde_json::Value> {
        let out = self.user.ng().args(["ng-stats", "--json"]).run();
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
        &self,
        what: &str,
        done: impl Fn(&BTreeMap<String, serde_json::Value>) -> bool,
    ) -> BTreeMap<String, serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let p = self.plugins();
            if done(&p) {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "never {what}: {p:#?}\nngd's log:\n{}",
                self.user.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// How many times ngd's log says a shim ran its program directly.
    fn direct_runs(&self) -> usize {
        self.user
            .log_text()
            .matches("the shim runs the program directly")
            .count()
    }

    /// Runs `yamllint ARGS` cold (`cold_path`: no shim on it) and through the shim
    /// (`shim_path`, or the shim by its own path when `by_path`), compares them, and
    /// returns the warm run's output and which pool served it (`None`: run directly).
    #[track_caller]
    fn compare(
        &self,
        cold_path: &OsString,
        shim_path: &OsString,
        by_path: bool,
        cwd: &Path,
        args: &str,
    ) -> (Output, Option<String>) {
        let cold = self.sh(cold_path, cwd, &format!("yamllint {args}"));
        let before = (self.sessions(), self.direct_runs());
        let command = if by_path {
            format!("'{}' {args}", self.shim().display())
        } else {
            format!("yamllint {args}")
        };
        let warm = self.sh(shim_path, cwd, &command);
        let context = format!("cold: {cold:?}\nwarm: {warm:?}");
        assert_eq!(cold.code(), warm.code(), "{context}");
        assert_eq!(cold.stdout_text(), warm.stdout_text(), "{context}");
        assert_eq!(cold.stderr_text(), warm.stderr_text(), "{context}");
        let after = (self.sessions(), self.direct_runs());
        let served: Vec<&String> = after
            .0
            .iter()
            .filter(|(name, n)| before.0.get(*name).copied().unwrap_or(0) < **n)
            .map(|(name, _)| name)
            .collect();
        let pool = match (served.as_slice(), after.1 - before.1) {
            ([one], 0) => Some((*one).clone()),
            ([], 1) => None,
            (served, direct) => panic!(
                "served by {served:?}, {direct} direct runs\n{context}\nngd's log:\n{}",
                self.user.log_text()
            ),
        };
        (warm, pool)
    }
}

#[test]
fn two_venvs_each_activated_in_turn_run_their_own_yamllint() {
    let s = Setup::new();
    let cwd = s.user.dir.path().to_path_buf();
    let shims = s.shims();
    let (with_a, cold_a) = (s.path(&[&shims, &s.a]), s.path(&[&s.a]));
    let (with_b, cold_b) = (s.path(&[&shims, &s.b, &s.a]), s.path(&[&s.b, &s.a]));

    // A: the warmed program, warm.
    let (out, pool) = s.compare(&cold_a, &with_a, false, &cwd, "--version");
    assert_eq!(
        (out.stdout_text().as_str(), pool.as_deref()),
        (A, Some("yamllint"))
    );
    let (out, pool) = s.compare(&cold_a, &with_a, false, &cwd, "-f parsable -");
    assert!(out.stdout_text().contains("trailing-spaces"), "{out:?}");
    assert_eq!(pool.as_deref(), Some("yamllint"));

    // B: run directly while it is recognised; then a pool derived from A's table serves it.
    let (out, pool) = s.compare(&cold_b, &with_b, false, &cwd, "--version");
    assert_eq!((out.stdout_text().as_str(), pool), (B, None));
    let derived = "yamllint~1";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s.plugins().contains_key(derived) {
        let (out, pool) = s.compare(&cold_b, &with_b, false, &cwd, "--version");
        assert_eq!((out.stdout_text().as_str(), pool), (B, None));
        assert!(Instant::now() < deadline, "{}", s.user.log_text());
    }
    let p = s.wait_for("the derived pool ready", |p| {
        p[derived]["idle"].as_u64() >= Some(1)
    });
    assert_eq!(p[derived]["derived_from"], "yamllint", "{p:#?}");
    assert_eq!(
        p[derived]["program"],
        s.b.join("yamllint").to_string_lossy().as_ref()
    );
    for args in [
        "--version",
        "-f parsable -",
        "-f parsable /nonexistent.yaml",
    ] {
        let (out, pool) = s.compare(&cold_b, &with_b, false, &cwd, args);
        assert_eq!(pool.as_deref(), Some(derived), "{args}: {out:?}");
    }
    // A again: its own pool.
    let (out, pool) = s.compare(&cold_a, &with_a, false, &cwd, "--version");
    assert_eq!(
        (out.stdout_text().as_str(), pool.as_deref()),
        (A, Some("yamllint"))
    );

    // `ngd list` shows the derived pool with its parent; a reload removes it.
    let list = s.user.ngd().args(["list", "--json"]).run();
    list.assert_success();
    let rows: serde_json::Value = serde_json::from_str(&list.stdout_text()).unwrap();
    assert_eq!(rows[0]["name"], "yamllint", "{list:?}");
    assert_eq!(rows[1]["name"], derived, "{list:?}");
    assert_eq!(
        rows[1]["program"],
        s.b.join("yamllint").to_string_lossy().as_ref(),
        "{list:?}"
    );
    s.user.ng().arg("ng-reload").run().assert_success();
    s.wait_for("the derived pool gone", |p| !p.contains_key(derived));
    // Derived again on use, and `ngd unwarm` removes both.
    let (_, pool) = s.compare(&cold_b, &with_b, false, &cwd, "--version");
    assert_eq!(pool, None);
    let again = "yamllint~2";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s.plugins().contains_key(again) {
        s.compare(&cold_b, &with_b, false, &cwd, "--version");
        assert!(Instant::now() < deadline, "{}", s.user.log_text());
    }
    s.user
        .ngd()
        .args(["unwarm", "yamllint"])
        .run()
        .assert_success();
    s.wait_for("every pool gone", |p| p.is_empty());
}

#[test]
fn relative_path_entries_resolve_in_each_directory() {
    let s = Setup::new();
    let shims = s.shims();
    let (one, two) = (s.user.dir.path().join("one"), s.user.dir.path().join("two"));
    for (dir, venv) in [(&one, &s.a), (&two, &s.b)] {
        std::fs::create_dir_all(dir.join(".venv")).unwrap();
        ng_tests::client::symlink(venv, &dir.join(".venv/bin"));
    }
    let relative = Path::new(".venv/bin");
    let (with, cold) = (s.path(&[&shims, relative]), s.path(&[relative]));
    // In `one`, .venv/bin is A's by another path: the warmed program's own pool.
    let (out, pool) = s.compare(&cold, &with, false, &one, "--version");
    assert_eq!(out.stdout_text(), A);
    if pool.is_none() {
        // Recognised as the same file on its thread; then warm.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (out, pool) = s.compare(&cold, &with, false, &one, "--version");
            assert_eq!(out.stdout_text(), A);
            if pool.is_some() {
                assert_eq!(pool.as_deref(), Some("yamllint"));
                break;
            }
            assert!(Instant::now() < deadline, "{}", s.user.log_text());
        }
    }
    // In `two`, B's: run directly, then derived.
    let (out, pool) = s.compare(&cold, &with, false, &two, "-f parsable -");
    assert_eq!(pool, None, "{out:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (out, pool) = s.compare(&cold, &with, false, &two, "--version");
        assert_eq!(out.stdout_text(), B);
        if let Some(pool) = pool {
            assert_eq!(pool, "yamllint~1");
            break;
        }
        assert!(Instant::now() < deadline, "{}", s.user.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, pool) = s.compare(&cold, &with, false, &one, "--version");
    assert_eq!(pool.as_deref(), Some("yamllint"));
}

#[test]
fn a_program_of_another_kind_earlier_on_path_is_run_directly_and_exactly() {
    let s = Setup::new();
    let shims = s.shims();
    let bin = s.user.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    // Shows what it was given: argv[0], arguments, directory, stdin, a variable, its open
    // descriptors, its blocked and ignored signals (read by the shell itself: while it
    // forks, a shell blocks every signal and holds a pipeline's pipes); exits 5.
    ng_testkit::exe::write_executable(
        &bin.join("yamllint"),
        "#!/bin/sh\necho \"argv0=$0 args=$*\"\necho \"cwd=$(pwd) var=$SHIM_VAR\"\n\
         cat\ntest -t 0 && echo tty || echo notty\nfor f in /proc/$$/fd/*; do printf '%s ' \"${f##*/}\"; done\n\
         while read -r k v; do case $k in SigBlk:|SigIgn:) echo \"$k $v\";; esac; \
         done < /proc/$$/status\necho err >&2\nexit 5\n",
    );
    let (with, cold) = (s.path(&[&shims, &bin, &s.a]), s.path(&[&bin, &s.a]));
    let cwd = s.user.dir.path().to_path_buf();
    for _ in 0..3 {
        let (out, pool) = s.compare(&cold, &with, false, &cwd, "one 'two three'");
        assert!(out.stdout_text().contains("SigIgn:"), "{out:?}");
        assert_eq!(pool, None, "run directly, never warm");
        out.assert_code(5);
        let text = out.stdout_text();
        // A `#!` script's $0 is its path, as the kernel gives it to the interpreter.
        let first = format!(
            "argv0={} args=one two three\n",
            bin.join("yamllint").display()
        );
        assert!(text.starts_with(&first), "{text}");
        assert!(text.contains(YAML), "{text}");
    }
    // Said where `ngd status` and `ng-stats` show it: a fallback notice of the plugin.
    let p = s.plugins();
    assert!(
        p["yamllint"]["notice_counts"]["fallback"].as_u64() >= Some(3),
        "{p:#?}"
    );
    let last = p["yamllint"]["notices"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let shown = format!("a shim runs {} directly", bin.join("yamllint").display());
    assert!(last["message"].as_str().unwrap().contains(&shown), "{last}");
    // A signal the shell ignores stays ignored for the program.
    let ignored = "trap '' PIPE HUP; yamllint z";
    let (cold_out, warm_out) = (s.sh(&cold, &cwd, ignored), s.sh(&with, &cwd, ignored));
    assert!(
        cold_out.stdout_text().contains("SigIgn: 0000000180001001"),
        "{cold_out:?}"
    );
    assert_eq!(cold_out.stdout_text(), warm_out.stdout_text());
    // By the shim's path: the program PATH has, run directly.
    let by_path = format!("'{}' x", s.shim().display());
    let warm = s.sh(&with, &cwd, &by_path);
    let cold = s.sh(&cold, &cwd, "yamllint x");
    assert_eq!(
        (cold.code(), cold.stdout_text(), cold.stderr_text()),
        (warm.code(), warm.stdout_text(), warm.stderr_text())
    );
}

#[test]
fn shims_twice_on_path_or_not_at_all() {
    let s = Setup::new();
    let shims = s.shims();
    let cwd = s.user.dir.path().to_path_buf();
    let cold_a = s.path(&[&s.a]);
    // Twice, before A: A, warm.
    let twice = s.path(&[&shims, &shims, &s.a]);
    let (out, pool) = s.compare(&cold_a, &twice, false, &cwd, "--version");
    assert_eq!(
        (out.stdout_text().as_str(), pool.as_deref()),
        (A, Some("yamllint"))
    );
    // Not on PATH, the shim called by its path: what PATH has, A, warm.
    let (out, pool) = s.compare(&cold_a, &cold_a, true, &cwd, "-f parsable -");
    assert!(out.stdout_text().contains("trailing-spaces"), "{out:?}");
    assert_eq!(pool.as_deref(), Some("yamllint"));
    // Nothing but the shim: the warmed program, as `ng yamllint` runs it.
    let bare = s.path(&[]);
    let warm = s.sh(&bare, &cwd, &format!("'{}' --version", s.shim().display()));
    assert_eq!(warm.stdout_text(), A, "{warm:?}");
    // Called by its path with B on PATH: B, run directly at first.
    let cold_b = s.path(&[&s.b]);
    let (out, pool) = s.compare(&cold_b, &cold_b, true, &cwd, "--version");
    assert_eq!((out.stdout_text().as_str(), pool), (B, None));
}

#[test]
fn a_derived_pool_evicted_by_the_budget_serves_again() {
    let s = Setup::new();
    let shims = s.shims();
    let cwd = s.user.dir.path().to_path_buf();
    let (with_b, cold_b) = (s.path(&[&shims, &s.b]), s.path(&[&s.b]));
    // A budget no worker fits in: every idle pool gives way.
    s.user.ngd().arg("stop").run().assert_success();
    while s.user.socket().exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    s.user.config("memory_budget_mb = 1\n");
    let derived = "yamllint~1";
    let deadline = Instant::now() + Duration::from_secs(60);
    while !s.plugins().contains_key(derived) {
        let (out, pool) = s.compare(&cold_b, &with_b, false, &cwd, "--version");
        assert_eq!((out.stdout_text().as_str(), pool), (B, None));
        assert!(Instant::now() < deadline, "{}", s.user.log_text());
    }
    let evicted = |p: &BTreeMap<String, serde_json::Value>| {
        p[derived]["residency"] == "evicted"
            && ["starting", "idle", "busy"]
                .iter()
                .all(|k| p[derived][*k] == 0)
    };
    s.wait_for("the derived pool evicted", evicted);
    for _ in 0..2 {
        let (out, pool) = s.compare(&cold_b, &with_b, false, &cwd, "-f parsable -");
        assert_eq!(pool.as_deref(), Some(derived), "{out:?}");
        s.wait_for("the derived pool evicted again", evicted);
    }
    assert!(
        s.user.log_text().contains("over the memory budget"),
        "{}",
        s.user.log_text()
    );
}

#[test]
fn a_program_changed_in_place_under_a_derived_pool_is_stale_code() {
    let s = Setup::new();
    let shims = s.shims();
    let cwd = s.user.dir.path().to_path_buf();
    let bin = s.user.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("yamllint");
    let text = std::fs::read_to_string(s.b.join("yamllint")).unwrap();
    ng_testkit::exe::write_executable(&script, &text);
    let (with, cold) = (s.path(&[&shims, &bin, &s.a]), s.path(&[&bin, &s.a]));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (out, pool) = s.compare(&cold, &with, false, &cwd, "--version");
        assert_eq!(out.stdout_text(), B);
        if let Some(pool) = pool {
            assert_eq!(pool, "yamllint~1");
            break;
        }
        assert!(Instant::now() < deadline, "{}", s.user.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Upgraded in place (a new file renamed over the old, as pip writes it): the next
    // session runs the new code, warm or cold, never the old.
    let changed = text.replace(
        "    sys.exit(run())",
        "    print('changed in place')\n    sys.exit(run())",
    );
    assert_ne!(changed, text);
    let next = bin.join(".yamllint.new");
    ng_testkit::exe::write_executable(&next, &changed);
    std::fs::rename(&next, &script).unwrap();
    for _ in 0..3 {
        let (out, _) = s.compare(&cold, &with, false, &cwd, "--version");
        assert_eq!(out.stdout_text(), format!("changed in place\n{B}"));
    }
}
