//! `ngd warm eslint`: a Node program made warm through the Node worker ngd carries
//! (`sdk = "node"`) and the shims, with nothing written into the project.
//!
//! Real programs: eslint 9.39.1 and 8.57.1 from the npm registry, each in a prefix of its
//! own (`scripts/peers/node`), found on `PATH` as npm bin links (`node_modules/.bin/eslint`
//! → `../eslint/bin/eslint.js`). Each case runs the same shell line cold (no shim on
//! `PATH`) and through the shim, compares stdout, stderr and the exit code byte for byte,
//! and asserts which path served it: the pool's sessions and `fallback` notices in
//! `ng-stats` (a session a spare took adds no notice; one the worker ran cold, or a shim
//! ran itself, adds one).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ng_tests::client::ClientCmd;
use ng_tests::{bins, Output};

use crate::ops::User;

/// `node_modules/.bin` of a prefix `scripts/peers/node` installs, which must hold eslint.
fn bin_dir(prefix: &str) -> PathBuf {
    let peers = std::env::var_os("NGD_PEERS_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/ngd-peers"),
        PathBuf::from,
    );
    let dir = peers.join("node").join(prefix).join("node_modules/.bin");
    assert!(
        dir.join("eslint").exists(),
        "{} is missing: run scripts/install-peers",
        dir.display()
    );
    dir
}

const CONFIG: &str = r#"const local = require('eslint-plugin-local');
module.exports = [{ plugins: { local }, rules: { 'local/no-foo': 'error', semi: 'error' } }];
"#;

/// The project's own eslint plugin (a package in its `node_modules`); its rule reports
/// `message`.
fn plugin(message: &str) -> String {
    format!(
        r#"module.exports = {{ rules: {{ 'no-foo': {{
  meta: {{ type: 'problem', messages: {{ foo: '{message}' }} }},
  create(context) {{
    return {{ Identifier(node) {{
      if (node.name === 'foo') context.report({{ node, messageId: 'foo' }});
    }} }};
  }},
}} }} }};
"#
    )
}

const LINTED: &str = "const foo = 1\nlet baz = 2;\n";

/// A user who ran `ngd warm eslint` with eslint 9's bin directory on `PATH`, and the
/// projects the cases lint.
struct Setup {
    user: User,
    eslint9: PathBuf,
    eslint8: PathBuf,
    /// A flat-config project with a plugin of its own and a `package.json`.
    project: PathBuf,
    /// An `.eslintrc.json` project for eslint 8.
    project8: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let native = bins::ngd().with_file_name("libngw_node.so");
        assert!(
            native.is_file(),
            "{} is not built: cargo build -p ngw-node-native",
            native.display()
        );
        let user = User::new();
        let project = user.dir.path().join("project");
        let local = project.join("node_modules/eslint-plugin-local");
        std::fs::create_dir_all(&local).unwrap();
        std::fs::write(project.join("eslint.config.js"), CONFIG).unwrap();
        std::fs::write(
            project.join("package.json"),
            r#"{"name":"p","version":"1.0.0"}"#,
        )
        .unwrap();
        std::fs::write(
            local.join("package.json"),
            r#"{"name":"eslint-plugin-local","version":"1.0.0","main":"index.js"}"#,
        )
        .unwrap();
        std::fs::write(local.join("index.js"), plugin("no foo allowed")).unwrap();
        std::fs::write(project.join("file.js"), LINTED).unwrap();
        let project8 = user.dir.path().join("project8");
        std::fs::create_dir_all(&project8).unwrap();
        std::fs::write(
            project8.join(".eslintrc.json"),
            r#"{"root": true, "parserOptions": {"ecmaVersion": 2022}, "rules": {"semi": "error"}}"#,
        )
        .unwrap();
        std::fs::write(project8.join("file.js"), LINTED).unwrap();
        let s = Setup {
            user,
            eslint9: bin_dir("eslint9"),
            eslint8: bin_dir("eslint8"),
            project,
            project8,
        };
        let out = s
            .user
            .ngd()
            .env("PATH", s.path(&[&s.eslint9]))
            .env("LANG", "C.UTF-8")
            .args(["warm", "eslint"])
            .timeout(Duration::from_secs(120))
            .run();
        out.assert_success();
        assert!(
            out.stdout_text().contains("eslint is warm (node): eslint"),
            "{out:?}"
        );
        s
    }

    /// ngd's log and the Node workers' (every pool's log file), for failure messages.
    fn logs(&self) -> String {
        let mut all = self.user.log_text();
        let plugins = self.user.home().join(".local/state/ngd/plugins");
        for entry in std::fs::read_dir(plugins).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            all += &format!("\n--- {}\n{text}", entry.path().display());
        }
        all
    }

    fn shims(&self) -> PathBuf {
        self.user.home().join(".local/share/ngd/shims")
    }

    /// `PATH` with `dirs` first, then ngd's directory and the system's.
    fn path(&self, dirs: &[&Path]) -> OsString {
        let mut all: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
        all.push(bins::ngd().parent().unwrap().to_path_buf());
        all.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from));
        let joined: Vec<String> = all.iter().map(|d| d.display().to_string()).collect();
        joined.join(":").into()
    }

    /// `sh -c SCRIPT` with `PATH` as given, in `cwd`, with the linted text on stdin.
    fn sh(&self, path: &OsString, cwd: &Path, script: &str) -> Output {
        self.user
            .with_env(ClientCmd::new("sh", "/bin/sh"))
            .env("PATH", path)
            .env("LANG", "C.UTF-8")
            .cwd(cwd)
            .args(["-c", script])
            .stdin_bytes(LINTED)
            .timeout(Duration::from_secs(120))
            .run()
    }

    /// Each pool's `(sessions, fallback notices)`, from `ng-stats --json`.
    fn counts(&self) -> BTreeMap<String, (u64, u64)> {
        let out = self.user.ng().args(["ng-stats", "--json"]).run();
        out.assert_success();
        let doc: serde_json::Value = serde_json::from_str(&out.stdout_text()).unwrap();
        doc["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let n = |ptr: &str| p.pointer(ptr).and_then(|v| v.as_u64()).unwrap_or(0);
                (
                    p["name"].as_str().unwrap().to_owned(),
                    (n("/sessions"), n("/notice_counts/fallback")),
                )
            })
            .collect()
    }

    /// Runs `line` cold (`cold_path`) and through the shim (`warm_path`), asserts the
    /// same bytes and exit code, and says how the warm run was served.
    #[track_caller]
    fn compare(
        &self,
        cold_path: &OsString,
        warm_path: &OsString,
        cwd: &Path,
        line: &str,
    ) -> Served {
        self.compare_lines((cold_path, line), (warm_path, line), cwd)
    }

    /// [`Setup::compare`] with a line of its own for each run.
    #[track_caller]
    fn compare_lines(
        &self,
        (cold_path, cold_line): (&OsString, &str),
        (warm_path, line): (&OsString, &str),
        cwd: &Path,
    ) -> Served {
        let cold = self.sh(cold_path, cwd, cold_line);
        let before = self.counts();
        let warm = self.sh(warm_path, cwd, line);
        let after = self.counts();
        let context = format!(
            "{line}\ncold: {cold:?}\nwarm: {warm:?}\nlogs:\n{}",
            self.logs()
        );
        assert_eq!(cold.code(), warm.code(), "{context}");
        assert!(cold.stdout == warm.stdout, "stdout differs\n{context}");
        assert!(cold.stderr == warm.stderr, "stderr differs\n{context}");
        let mut served = Served::Directly;
        for (name, (sessions, fallbacks)) in &after {
            let (s0, f0) = before.get(name).copied().unwrap_or((0, 0));
            if *sessions > s0 {
                served = if *fallbacks > f0 {
                    Served::Cold(name.clone())
                } else {
                    Served::Spare(name.clone(), warm.stdout_text())
                };
            }
        }
        served
    }

    /// [`Setup::compare`] until a spare of `pool` serves it (the first session of a key
    /// runs cold and starts the spare for the next); its output.
    #[track_caller]
    fn until_spare(
        &self,
        cold_path: &OsString,
        warm_path: &OsString,
        cwd: &Path,
        line: &str,
        pool: &str,
    ) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.compare(cold_path, warm_path, cwd, line) {
                Served::Spare(p, out) if p == pool => return out,
                other => assert!(
                    Instant::now() < deadline,
                    "{line}: never served by a spare of {pool} (last: {other:?})\nlogs:\n{}",
                    self.logs()
                ),
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// How a warm run was served.
#[derive(Debug, PartialEq, Eq)]
enum Served {
    /// By a spare of this pool (its stdout).
    Spare(String, String),
    /// By this pool's worker, cold.
    Cold(String),
    /// By no pool: the shim ran the program itself.
    Directly,
}

/// eslint 9 through the shim: plain, `--format json`, `--stdin`, each served by a spare;
/// the project's plugin changed (a file the program loaded), then its `package.json`
/// and a lockfile: the next session runs the new code, as cold; the shim called by its
/// path under `npm run`'s `PATH` (`node_modules/.bin` first); and another project's
/// eslint (eslint 8's bin link) served by its own copy, in a pool derived from the table.
#[test]
fn eslint_warm_through_the_shim_as_cold() {
    let s = Setup::new();
    let cold = s.path(&[&s.eslint9]);
    let warm = s.path(&[&s.shims(), &s.eslint9]);
    let dir = &s.project;
    let out = s.until_spare(&cold, &warm, dir, "eslint file.js", "eslint");
    assert!(out.contains("no foo allowed"), "{out}");
    s.until_spare(&cold, &warm, dir, "eslint --format json file.js", "eslint");
    s.until_spare(
        &cold,
        &warm,
        dir,
        "eslint --stdin --stdin-filename x.js",
        "eslint",
    );

    // A file the program loaded changes: the next session shows the new code (as cold),
    // and so do the spares after it.
    std::fs::write(
        dir.join("node_modules/eslint-plugin-local/index.js"),
        plugin("foo is upgraded away"),
    )
    .unwrap();
    let served = s.compare(&cold, &warm, dir, "eslint file.js");
    assert!(
        matches!(&served, Served::Cold(_))
            || matches!(&served, Served::Spare(_, out) if out.contains("foo is upgraded away")),
        "{served:?}"
    );
    let out = s.until_spare(&cold, &warm, dir, "eslint file.js", "eslint");
    assert!(out.contains("foo is upgraded away"), "{out}");
    // The project's package.json, then a lockfile appearing: not served by a spare that
    // started before.
    std::fs::write(
        dir.join("package.json"),
        r#"{"name":"p","version":"1.0.1"}"#,
    )
    .unwrap();
    assert_eq!(
        s.compare(&cold, &warm, dir, "eslint file.js"),
        Served::Cold("eslint".into())
    );
    s.until_spare(&cold, &warm, dir, "eslint file.js", "eslint");
    std::fs::write(dir.join("package-lock.json"), "{}\n").unwrap();
    assert_eq!(
        s.compare(&cold, &warm, dir, "eslint file.js"),
        Served::Cold("eslint".into())
    );

    // `npm run`'s PATH: node_modules/.bin before the shims. `eslint` is the program itself
    // (cold, no session); the shim by its path finds the same program and runs it warm.
    let npm_run = s.path(&[&s.eslint9, &s.shims()]);
    assert_eq!(
        s.compare(&cold, &npm_run, dir, "eslint file.js"),
        Served::Directly
    );
    let by_path = format!("'{}' file.js", s.shims().join("eslint").display());
    let deadline = Instant::now() + Duration::from_secs(60);
    let plain = "eslint file.js";
    while !matches!(
        s.compare_lines((&npm_run, plain), (&npm_run, &by_path), dir),
        Served::Spare(..)
    ) {
        assert!(Instant::now() < deadline, "{}", s.logs());
    }

    // Another project's eslint: the shim finds eslint 8's link, which runs directly while
    // it is recognised, then in a pool derived from the table, warm.
    let cold8 = s.path(&[&s.eslint8]);
    let warm8 = s.path(&[&s.shims(), &s.eslint8]);
    let out = s.until_spare(&cold8, &warm8, &s.project8, "eslint file.js", "eslint~1");
    assert!(out.contains("Missing semicolon"), "{out}");
    // Nothing was written into either project.
    let mut names: Vec<String> = std::fs::read_dir(&s.project8)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".eslintrc.json", "file.js"]);
}

/// Eight eslint calls at once through the shim, the table's pool sized for them as a user
/// sizes it (`min_workers` and `max_workers` in `conf.d/eslint.toml`, then `ngd reload`):
/// eight workers, each with a spare in the key of its last session, so eight spares for
/// one key. The first round may run cold (no spare in that key yet); in each later round
/// every call shows what a cold run shows, and the pool counts eight more sessions and no
/// `fallback` notice: each was served by a spare.
#[test]
fn eight_eslint_calls_at_once() {
    let s = Setup::new();
    let table = s.user.home().join(".config/ngd/conf.d/eslint.toml");
    let mut text = std::fs::read_to_string(&table).unwrap();
    text.push_str("min_workers = 8\nmax_workers = 8\n");
    std::fs::write(&table, text).unwrap();
    s.user.ngd().arg("reload").run().assert_success();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let report = s.user.ng().args(["ng-stats", "--json"]).run();
        let doc: serde_json::Value = serde_json::from_str(&report.stdout_text()).unwrap();
        let idle = doc["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "eslint")
            .and_then(|p| p["idle"].as_u64());
        if idle == Some(8) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "eight workers never ready: {}\n{}",
            report.stdout_text(),
            s.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let cold_path = s.path(&[&s.eslint9]);
    let warm_path = s.path(&[&s.shims(), &s.eslint9]);
    let line = "eslint file.js";
    let cold = s.sh(&cold_path, &s.project, line);
    assert_eq!(cold.code(), Some(1), "{cold:?}");
    for round in 0..3 {
        let before = s.counts().get("eslint").copied().unwrap_or((0, 0));
        let running: Vec<_> = (0..8)
            .map(|_| {
                s.user
                    .with_env(ClientCmd::new("sh", "/bin/sh"))
                    .env("PATH", &warm_path)
                    .env("LANG", "C.UTF-8")
                    .cwd(&s.project)
                    .args(["-c", line])
                    .stdin_bytes(LINTED)
                    .timeout(Duration::from_secs(120))
                    .spawn()
            })
            .collect();
        for run in running {
            let warm = run.wait();
            let context = format!("round {round}\ncold: {cold:?}\nwarm: {warm:?}");
            assert_eq!(cold.code(), warm.code(), "{context}\n{}", s.logs());
            assert!(cold.stdout == warm.stdout, "stdout differs\n{context}");
            assert!(cold.stderr == warm.stderr, "stderr differs\n{context}");
        }
        let after = s.counts().get("eslint").copied().unwrap_or((0, 0));
        assert_eq!(
            after.0 - before.0,
            8,
            "round {round}: not eight sessions of the pool"
        );
        if round > 0 {
            assert_eq!(
                after.1 - before.1,
                0,
                "round {round}: some of the eight ran cold\n{}",
                s.logs()
            );
        }
        eprintln!(
            "round {round}: eight identical to cold, {} of them cold",
            after.1 - before.1
        );
    }
}
