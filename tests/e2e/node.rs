//! The Node worker (`sdk/node`, `ngw-node`) through a real ngd and both clients: eslint 9
//! (a flat config with a plugin of its own in `node_modules`), eslint 8 (`.eslintrc`),
//! prettier 3 and tsc 5, from
//! the npm registry at pinned versions (`scripts/peers/node`), and a script of our own
//! (`sdk/node/tests/fixtures/exact.js`), each compared byte for byte (stdout, stderr, exit
//! status, and the files it writes) with a cold `node SCRIPT` in the same environment,
//! directory and stdin. Every comparison also asserts which path served the warm run: a
//! spare, once one is ready in the session's key (no new `fallback` notice).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ng_tests::plugins::{repo_root, Plugin, PluginServer, TAG_VAR};
use ng_tests::{both_clients, Client, Output, Transport};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The npm prefixes `scripts/peers/node` installs.
fn peers() -> PathBuf {
    let dir = std::env::var_os("NGD_PEERS_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/ngd-peers"),
        PathBuf::from,
    );
    dir.join("node")
}

/// The bin of `package` in prefix `prefix`.
fn bin(prefix: &str, name: &str) -> PathBuf {
    let p = peers().join(prefix).join("node_modules/.bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/install-peers",
        p.display()
    );
    p
}

/// ngd with one plugin, `node`, serving eslint, prettier, tsc and our script, with one
/// worker (so that its spare is the one every session meets), and the environment its
/// clients and the cold runs share.
struct Setup {
    server: PluginServer,
    env: BTreeMap<String, String>,
    _home: tempfile::TempDir,
}

fn setup() -> Setup {
    let native = repo_root().join("target/debug/libngw_node.so");
    assert!(
        native.is_file() || repo_root().join("target/release/libngw_node.so").is_file(),
        "the Node worker's native piece is not built: cargo build -p ngw-node-native"
    );
    let home = tempfile::Builder::new()
        .prefix("node-home-")
        .tempdir()
        .unwrap();
    let home_dir = home.path().canonicalize().unwrap();
    let state = home_dir.join(".state");
    let worker = repo_root().join("sdk/node/bin/ngw-node");
    let fixture = repo_root().join("sdk/node/tests/fixtures/exact.js");
    let spec = |name: &str, path: &Path| format!("{name}={}", path.display());
    let command = vec![
        "node".to_string(),
        worker.to_string_lossy().into_owned(),
        "--state-dir".to_string(),
        state.to_string_lossy().into_owned(),
        spec("eslint", &bin("eslint9", "eslint")),
        spec("eslint8", &bin("eslint8", "eslint")),
        spec("prettier", &bin("prettier", "prettier")),
        spec("tsc", &bin("typescript", "tsc")),
        spec("exact", &fixture),
    ];
    let home_str = home_dir.to_string_lossy().into_owned();
    let server = PluginServer::builder()
        .plugin(
            Plugin::new("node", &command)
                .commands(&["eslint", "eslint8", "prettier", "tsc", "exact"])
                .set("min_workers", 1)
                .set("max_workers", 1),
        )
        .env("LANG", "C.UTF-8")
        .env("HOME", &home_str)
        .start();
    let env: BTreeMap<String, String> = [
        ("PATH", PATH.to_string()),
        ("HOME", home_str),
        ("LANG", "C.UTF-8".to_string()),
        (TAG_VAR, server.tag().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Setup {
        server,
        env,
        _home: home,
    }
}

/// `argv` run cold with exactly `env` in `cwd`, `stdin` on a pipe.
fn cold(argv: &[&str], env: &BTreeMap<String, String>, cwd: &Path, stdin: &[u8]) -> Output {
    let started = std::time::Instant::now();
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {argv:?}: {e}"));
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        use std::io::Write as _;
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    Output {
        what: format!("[cold] {argv:?}"),
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
        elapsed: started.elapsed(),
    }
}

impl Setup {
    fn warm(
        &self,
        client: Client,
        command: &str,
        args: &[&str],
        cwd: &Path,
        stdin: &[u8],
    ) -> Output {
        let mut cmd = self.server.cmd_on(client, Transport::Unix);
        for (k, v) in &self.env {
            cmd = cmd.env(k, v);
        }
        cmd.cwd(cwd)
            .arg(command)
            .args(args)
            .stdin_bytes(stdin.to_vec())
            .timeout(std::time::Duration::from_secs(120))
            .run()
    }

    /// The plugin's `fallback` notices so far.
    fn fallbacks(&self) -> u64 {
        let report = self.server.plugin_report("node").expect("node in ng-stats");
        report
            .pointer("/notice_counts/fallback")
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
    }

    /// Runs `program args` cold, then `command args` through ngd until a spare served it
    /// (at most three runs: the first of a key runs cold and starts the spare for the next),
    /// asserting every run showed the same bytes, ended the same way and left `files`
    /// as the cold run did (`reset` runs before each run). Returns the cold run.
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    fn same(
        &self,
        client: Client,
        command: &str,
        program: &Path,
        args: &[&str],
        cwd: &Path,
        stdin: &[u8],
        files: &[&str],
        reset: &dyn Fn(),
    ) -> Output {
        let program = program.to_string_lossy().into_owned();
        let mut argv = vec![program.as_str()];
        argv.extend_from_slice(args);
        reset();
        let cold = cold(&argv, &self.env, cwd, stdin);
        let wrote: Vec<Vec<u8>> = files
            .iter()
            .map(|f| std::fs::read(cwd.join(f)).unwrap())
            .collect();
        for attempt in 0..3 {
            reset();
            let before = self.fallbacks();
            let warm = self.warm(client, command, args, cwd, stdin);
            let served_warm = self.fallbacks() == before;
            let context = format!(
                "cold:\n{cold:?}\nwarm (attempt {attempt}, served warm: {served_warm}):\n{warm:?}\nlog:\n{}",
                self.server.plugin_log("node")
            );
            match (cold.status.signal(), client) {
                (Some(sig), Client::CClient) => {
                    assert_eq!(warm.code(), Some(128 + sig), "{context}")
                }
                _ => {
                    assert_eq!(cold.code(), warm.code(), "exit codes differ\n{context}");
                    assert_eq!(
                        cold.status.signal(),
                        warm.status.signal(),
                        "signals differ\n{context}"
                    );
                }
            }
            assert!(cold.stdout == warm.stdout, "stdout differs\n{context}");
            assert!(cold.stderr == warm.stderr, "stderr differs\n{context}");
            for (f, want) in files.iter().zip(&wrote) {
                let got = std::fs::read(cwd.join(f)).unwrap();
                assert!(&got == want, "{f} differs\n{context}");
            }
            if served_warm {
                eprintln!(
                    "{command} {args:?} with {client}: cold {:?}, warm {:?} (attempt {attempt})",
                    cold.elapsed, warm.elapsed
                );
                return cold;
            }
            // The spare for this key starts beside the cold run: let it get ready.
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        panic!(
            "{command} {args:?} never served warm\n{}",
            self.server.plugin_log("node")
        );
    }
}

fn scratch(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap();
    (dir, path)
}

const ESLINT_CONFIG: &str = r#"const local = require('eslint-plugin-local');
module.exports = [{ plugins: { local }, rules: { 'local/no-foo': 'error', 'no-unused-vars': 'warn', semi: 'error' } }];
"#;

/// The plugin of the eslint project, as a package in its `node_modules`; `message` is
/// what its rule reports.
fn eslint_plugin(message: &str) -> String {
    format!(
        r#"module.exports = {{ rules: {{ 'no-foo': {{
  meta: {{ type: 'problem', fixable: 'code', messages: {{ foo: '{message}' }} }},
  create(context) {{
    return {{ Identifier(node) {{
      if (node.name === 'foo') context.report({{ node, messageId: 'foo', fix: (f) => f.replaceText(node, 'bar') }});
    }} }};
  }},
}} }} }};
"#
    )
}

const LINTED: &str = "const foo = 1\nlet baz = 2;\n";

fn eslint_project() -> (tempfile::TempDir, PathBuf) {
    let (d, dir) = scratch("eslint9-");
    std::fs::write(dir.join("eslint.config.js"), ESLINT_CONFIG).unwrap();
    let plugin = dir.join("node_modules/eslint-plugin-local");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(
        plugin.join("package.json"),
        r#"{"name":"eslint-plugin-local","version":"1.0.0","main":"index.js"}"#,
    )
    .unwrap();
    std::fs::write(plugin.join("index.js"), eslint_plugin("no foo allowed")).unwrap();
    std::fs::write(dir.join("file.js"), LINTED).unwrap();
    (d, dir)
}

both_clients! {
    /// eslint 9 with a flat config and a plugin: plain, `--format json`, `--stdin`,
    /// `--fix` (the file it writes), `FORCE_COLOR=1` and `NO_COLOR=1`; then the plugin
    /// upgraded in `node_modules`, and the config changed, between runs.
    fn eslint9_as_cold(client) {
        let mut s = setup();
        let (_d, dir) = eslint_project();
        let eslint = bin("eslint9", "eslint");
        let nothing = || {};
        let restore = || std::fs::write(dir.join("file.js"), LINTED).unwrap();
        let cold = s.same(client, "eslint", &eslint, &["file.js"], &dir, b"", &[], &nothing);
        cold.assert_code(1);
        assert!(cold.stdout_text().contains("no foo allowed"), "{cold:?}");
        s.same(client, "eslint", &eslint, &["--format", "json", "file.js"], &dir, b"", &[], &nothing);
        s.same(client, "eslint", &eslint, &["--stdin", "--stdin-filename", "x.js"], &dir, LINTED.as_bytes(), &[], &nothing);
        s.same(client, "eslint", &eslint, &["--fix", "file.js"], &dir, b"", &["file.js"], &restore);
        restore();
        s.env.insert("FORCE_COLOR".into(), "1".into());
        s.same(client, "eslint", &eslint, &["file.js"], &dir, b"", &[], &nothing);
        s.env.remove("FORCE_COLOR");
        s.env.insert("NO_COLOR".into(), "1".into());
        s.same(client, "eslint", &eslint, &["file.js"], &dir, b"", &[], &nothing);
        // Between runs: the plugin upgraded, then the config changed.
        let plugin = dir.join("node_modules/eslint-plugin-local/index.js");
        std::fs::write(&plugin, eslint_plugin("foo is upgraded away")).unwrap();
        let cold = s.same(client, "eslint", &eslint, &["file.js"], &dir, b"", &[], &nothing);
        assert!(cold.stdout_text().contains("foo is upgraded away"), "{cold:?}");
        std::fs::write(dir.join("eslint.config.js"), ESLINT_CONFIG.replace("semi: 'error'", "semi: 'off'")).unwrap();
        let cold = s.same(client, "eslint", &eslint, &["file.js"], &dir, b"", &[], &nothing);
        assert!(!cold.stdout_text().contains("Missing semicolon"), "{cold:?}");
    }
}

/// eslint's colour flags, which `supports-color` reads from `process.argv` as it loads: a
/// spare preloaded with `--color` must not serve a run without it, nor the other way round,
/// while runs that differ only in their files stay warm.
#[test]
fn eslint_color_flags_as_cold() {
    let s = setup();
    let (_d, dir) = eslint_project();
    std::fs::write(dir.join("other.js"), LINTED).unwrap();
    let eslint = bin("eslint9", "eslint");
    let nothing = || {};
    let runs: [&[&str]; 5] = [
        &["--color", "file.js"],
        &["file.js"],
        &["--color", "file.js"],
        &["--no-color", "file.js"],
        &["--no-color", "other.js"],
    ];
    for args in runs {
        s.same(
            Client::Ours,
            "eslint",
            &eslint,
            args,
            &dir,
            b"",
            &[],
            &nothing,
        );
    }
    let log = s.server.plugin_log("node");
    assert!(
        log.contains("a preloaded module read the arguments"),
        "{log}"
    );
    // The last run differs from the one before only in its file: its spare served it.
    let last = log
        .lines()
        .rev()
        .find(|l| l.contains("session "))
        .unwrap_or("");
    assert!(last.contains("warm, handed over"), "{log}");
}

both_clients! {
    /// prettier 3: `--check`, `--write` (the file it writes), `--stdin-filepath`; tsc 5:
    /// `--version`, a file with a type error, `--pretty false`.
    fn prettier_and_tsc_as_cold(client) {
        let s = setup();
        let (_d, dir) = scratch("prettier-");
        let unformatted = "const a = {b:1,\n  c:2}\n";
        let restore = || std::fs::write(dir.join("f.js"), unformatted).unwrap();
        let nothing = || {};
        let prettier = bin("prettier", "prettier");
        restore();
        s.same(client, "prettier", &prettier, &["--check", "f.js"], &dir, b"", &[], &nothing).assert_code(1);
        // `--write` reports each file's time: the log level keeps the output to the file.
        s.same(client, "prettier", &prettier, &["--write", "--log-level", "warn", "f.js"], &dir, b"", &["f.js"], &restore);
        s.same(client, "prettier", &prettier, &["--stdin-filepath", "x.js"], &dir, unformatted.as_bytes(), &[], &nothing);
        let tsc = bin("typescript", "tsc");
        std::fs::write(dir.join("bad.ts"), "let x: number = \"s\";\n").unwrap();
        s.same(client, "tsc", &tsc, &["--version"], &dir, b"", &[], &nothing);
        s.same(client, "tsc", &tsc, &["--noEmit", "bad.ts"], &dir, b"", &[], &nothing).assert_code(2);
        s.same(client, "tsc", &tsc, &["--noEmit", "--pretty", "false", "bad.ts"], &dir, b"", &[], &nothing);
    }
}

impl Setup {
    /// How many warm sessions the plugin's log shows served by a spare that had preloaded
    /// ES modules, once the log holds at least `at_least` (waiting up to 5 s for it).
    fn served_with_es_modules(&self, at_least: usize) -> usize {
        let count = || {
            self.server
                .plugin_log("node")
                .lines()
                .filter(|l| {
                    l.contains(": warm, handed over") && l.contains("ES module(s) preloaded")
                })
                .count()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while count() < at_least && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        count()
    }
}

/// prettier 3 is ES modules (its bin imports `internal/legacy-cli.mjs`, which imports the
/// rest; the parser plugins are imported as it formats): once a warm run has learned
/// them, the spares preload them. `--stdin-filepath`, `--check` and `--write` (the file it
/// writes), cold and warm byte for byte, each warm run served by a spare that had
/// preloaded prettier's ES modules.
#[test]
fn prettier_with_es_modules_preloaded_as_cold() {
    let s = setup();
    let (_d, dir) = scratch("prettier-esm-");
    let unformatted = "const a = {b:1,\n  c:2}\n";
    let restore = || std::fs::write(dir.join("f.js"), unformatted).unwrap();
    let nothing = || {};
    let prettier = bin("prettier", "prettier");
    restore();
    // The first warm run learns the ES modules; the spare started after it preloads them.
    let mut primed = false;
    for _ in 0..8 {
        let before = s.served_with_es_modules(0);
        s.warm(
            Client::Ours,
            "prettier",
            &["--stdin-filepath", "x.js"],
            &dir,
            unformatted.as_bytes(),
        );
        if s.served_with_es_modules(before + 1) > before {
            primed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert!(
        primed,
        "no spare preloaded ES modules\n{}",
        s.server.plugin_log("node")
    );
    /// A prettier run: its arguments, its stdin, the files it writes and what resets them.
    type Case<'a> = (&'a [&'a str], &'a [u8], &'a [&'a str], &'a dyn Fn());
    let cases: [Case<'_>; 3] = [
        (
            &["--stdin-filepath", "x.js"],
            unformatted.as_bytes(),
            &[],
            &nothing,
        ),
        (&["--check", "f.js"], b"", &[], &nothing),
        (
            &["--write", "--log-level", "warn", "f.js"],
            b"",
            &["f.js"],
            &restore,
        ),
    ];
    for (args, stdin, files, reset) in cases {
        let before = s.served_with_es_modules(0);
        s.same(
            Client::Ours,
            "prettier",
            &prettier,
            args,
            &dir,
            stdin,
            files,
            reset,
        );
        assert!(
            s.served_with_es_modules(before + 1) > before,
            "prettier {args:?} was not served by a spare with ES modules preloaded\n{}",
            s.server.plugin_log("node")
        );
    }
    let log = s.server.plugin_log("node");
    assert!(
        log.contains("prettier: learned 5 ES module(s) to preload"),
        "{log}"
    );
}

both_clients! {
    /// tsc 5 from V8's code cache: `lib/_tsc.js` runs the compiler as it loads, so a spare
    /// compiles it ahead, from the cache an earlier session made after running it. Each run
    /// byte for byte as cold; sessions served with cache hits (`code-cache-hit`, in
    /// `ngd status`'s counters), none rejected.
    fn tsc_from_the_code_cache(client) {
        let s = setup();
        let (_d, dir) = scratch("tsc-cache-");
        std::fs::write(dir.join("bad.ts"), "let x: number = \"s\";\n").unwrap();
        let tsc = bin("typescript", "tsc");
        let nothing = || {};
        let hits = || {
            s.server
                .plugin_report("node")
                .and_then(|r| r.pointer("/counters/code-cache-hit").and_then(|v| v.as_u64()))
                .unwrap_or(0)
        };
        // The first warm session learns the modules; the next spare compiles them ahead
        // without a cache, and its session writes one; the spares after use it.
        let mut used = 0;
        for _ in 0..6 {
            let before = hits();
            s.same(client, "tsc", &tsc, &["--noEmit", "--pretty", "false", "bad.ts"], &dir, b"", &[], &nothing).assert_code(2);
            s.same(client, "tsc", &tsc, &["--version"], &dir, b"", &[], &nothing);
            if hits() > before {
                used += 1;
            }
        }
        let log = s.server.plugin_log("node");
        assert!(used >= 3, "sessions were served from the code cache {used} time(s)\n{log}");
        let rejected = s.server.plugin_report("node").and_then(|r| r.pointer("/counters/code-cache-rejected").and_then(|v| v.as_u64()));
        assert_eq!(rejected, None, "{log}");
        assert!(log.contains("code cache: 2 hit, 0 rejected, 0 missed, 2 compiled ahead"), "{log}");
    }
}

both_clients! {
    /// Our own script: what it sees, a timer that keeps it alive, an unhandled rejection,
    /// an uncaught error, `process.exit` in a callback, `process.exitCode`, children, a
    /// large stdin read whole, a flood of stdout, death by SIGKILL and SIGTERM; with our
    /// client, the client lost mid-run.
    fn script_as_cold(client) {
        let s = setup();
        let (_d, dir) = scratch("node-script-");
        let script = repo_root().join("sdk/node/tests/fixtures/exact.js");
        let nothing = || {};
        // Cold, the script runs through its `#!/usr/bin/env node` line.
        let run = |args: &[&str], stdin: &[u8]| s.same(client, "exact", &script, args, &dir, stdin, &[], &nothing);
        for case in [&["timer"][..], &["reject"], &["throw"], &["exit-in-callback"], &["exit-code"], &["children"], &["flood", "3000000"]] {
            run(case, b"");
        }
        let big: Vec<u8> = (0..200_000u32).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        let cold = run(&["stdin"], &big);
        assert!(cold.stdout_text().starts_with(&format!("{} ", big.len())), "{cold:?}");
        let cold = run(&["kill"], b"");
        assert_eq!(cold.status.signal(), Some(libc::SIGKILL));
        run(&["kill", "SIGTERM"], b"");
        if client == Client::Ours {
            // The client lost mid-run: the session's process is ended (SIGHUP to its group,
            // SIGKILL after the worker's grace) and the next session is still served.
            let pidfile = dir.join("pid");
            let mut cmd = s.server.cmd(client);
            for (k, v) in &s.env {
                cmd = cmd.env(k, v);
            }
            let running = cmd
                .cwd(&dir)
                .args(["exact", "sleep", "60000", pidfile.to_str().unwrap()])
                .spawn();
            running.wait_for_stdout("sleeping", std::time::Duration::from_secs(30));
            let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
            ng_tests::plugins::send_signal(running.pid(), libc::SIGKILL);
            let _ = running.wait();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
            while Path::new(&format!("/proc/{pid}")).exists() {
                let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                if state.split(' ').nth(2) == Some("Z") {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "the session's process {pid} outlived its client");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            run(&["timer"], b"");
        }
    }
}

/// The client's stdout pipe after a run, cold and warm: Node makes a pipe non-blocking as
/// it opens the stream and puts the flag back as it exits (normally, or in its handler of
/// SIGINT and SIGTERM), not after SIGKILL or SIGHUP. Every warm run must leave the flag as
/// the cold one did, whether the pipe came blocking or not; each is asserted served by a
/// spare.
#[test]
fn stdout_flags_after_the_run_as_cold() {
    let s = setup();
    let (_d, dir) = scratch("node-flags-");
    let script = repo_root()
        .join("sdk/node/tests/fixtures/exact.js")
        .to_string_lossy()
        .into_owned();
    // Whether the write end of a pipe given as stdout is non-blocking once `cmd` exited.
    let after = |mut cmd: Command, nonblocking: bool| -> bool {
        let (read, write) = ng_sys::fd::pipe().unwrap();
        ng_sys::fd::set_nonblocking_to(write.as_raw_fd(), nonblocking).unwrap();
        let ours = write.try_clone().unwrap();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            std::fs::File::from(read).read_to_end(&mut all).unwrap();
            all
        });
        let status = cmd
            .env_clear()
            .envs(&s.env)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(write))
            .stderr(Stdio::null())
            .status()
            .unwrap();
        let flag = ng_sys::fd::is_nonblocking(ours.as_raw_fd()).unwrap();
        // The command holds its copy of the write end until it is dropped.
        drop(cmd);
        drop(ours);
        let out = reader.join().unwrap();
        assert!(
            out.starts_with(b"before") || out.starts_with(b"early"),
            "{status:?} {out:?}"
        );
        flag
    };
    let cases: [&[&str]; 5] = [
        &["timer"],
        &["kill"],
        &["kill", "SIGTERM"],
        &["kill", "SIGINT"],
        &["kill", "SIGHUP"],
    ];
    for case in cases {
        for nonblocking in [false, true] {
            let mut cold = Command::new(&script);
            cold.args(case);
            let want = after(cold, nonblocking);
            let mut served = false;
            for _ in 0..3 {
                let before = s.fallbacks();
                let mut warm = Command::new(Client::Ours.bin());
                warm.args(s.server.address(Transport::Unix).client_args())
                    .env(TAG_VAR, s.server.tag())
                    .arg("exact")
                    .args(case);
                let got = after(warm, nonblocking);
                assert_eq!(
                    want,
                    got,
                    "{case:?} on a pipe that was non-blocking: {nonblocking}: cold left \
                     O_NONBLOCK {want}, warm {got}\n{}",
                    s.server.plugin_log("node")
                );
                if s.fallbacks() == before {
                    served = true;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            assert!(
                served,
                "{case:?} never served warm\n{}",
                s.server.plugin_log("node")
            );
        }
    }
}

/// Eight calls at once, on eight workers: the first round runs cold (no worker has a spare
/// yet) and leaves each worker a spare in its key; in the second, every call is served by
/// a spare, and each shows what a cold run shows.
#[test]
fn eight_at_once() {
    let home = tempfile::Builder::new()
        .prefix("node-home-")
        .tempdir()
        .unwrap();
    let home_dir = home.path().canonicalize().unwrap();
    let worker = repo_root().join("sdk/node/bin/ngw-node");
    let fixture = repo_root().join("sdk/node/tests/fixtures/exact.js");
    let command = vec![
        "node".to_string(),
        worker.to_string_lossy().into_owned(),
        "--state-dir".to_string(),
        home_dir.join(".state").to_string_lossy().into_owned(),
        format!("exact={}", fixture.display()),
    ];
    let home_str = home_dir.to_string_lossy().into_owned();
    let server = PluginServer::builder()
        .plugin(
            Plugin::new("node", &command)
                .commands(&["exact"])
                .set("min_workers", 8)
                .set("max_workers", 8),
        )
        .env("LANG", "C.UTF-8")
        .env("HOME", &home_str)
        .start();
    let s = Setup {
        server,
        env: [
            ("PATH", PATH.to_string()),
            ("HOME", home_str),
            ("LANG", "C.UTF-8".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        _home: home,
    };
    let (_d, dir) = scratch("node-eight-");
    let fixture_str = fixture.to_string_lossy().into_owned();
    let want = cold(&[&fixture_str, "timer"], &s.env, &dir, b"");
    for round in 0..2 {
        let before = s.fallbacks();
        let running: Vec<_> = (0..8)
            .map(|_| {
                let mut cmd = s.server.cmd(Client::Ours);
                for (k, v) in &s.env {
                    cmd = cmd.env(k, v);
                }
                cmd.cwd(&dir)
                    .args(["exact", "timer"])
                    .timeout(std::time::Duration::from_secs(120))
                    .spawn()
            })
            .collect();
        for run in running {
            let got = run.wait();
            assert_eq!(want.code(), got.code(), "{got:?}");
            assert!(
                want.stdout == got.stdout && want.stderr == got.stderr,
                "{want:?}\n{got:?}"
            );
        }
        let fallbacks = s.fallbacks() - before;
        if round == 1 {
            assert_eq!(
                fallbacks,
                0,
                "{fallbacks} of the second eight ran cold\n{}",
                s.server.plugin_log("node")
            );
        }
        // Each worker's spare starts beside its session: give them the time to be ready.
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
}

both_clients! {
    /// eslint 8 in a project of its own with `.eslintrc.json`: plain and `--format json`,
    /// then eslint 9 in its project and eslint 8 again (the spare follows the command).
    fn eslint8_as_cold(client) {
        let s = setup();
        let (_d, dir) = scratch("eslint8-");
        std::fs::write(
            dir.join(".eslintrc.json"),
            r#"{"root": true, "parserOptions": {"ecmaVersion": 2022}, "rules": {"semi": "error", "no-unused-vars": "warn"}}"#,
        )
        .unwrap();
        std::fs::write(dir.join("file.js"), LINTED).unwrap();
        let eslint8 = bin("eslint8", "eslint");
        let nothing = || {};
        let cold = s.same(client, "eslint8", &eslint8, &["file.js"], &dir, b"", &[], &nothing);
        cold.assert_code(1);
        assert!(cold.stdout_text().contains("Missing semicolon"), "{cold:?}");
        s.same(client, "eslint8", &eslint8, &["--format", "json", "file.js"], &dir, b"", &[], &nothing);
        let (_d9, dir9) = eslint_project();
        s.same(client, "eslint", &bin("eslint9", "eslint"), &["file.js"], &dir9, b"", &[], &nothing);
        s.same(client, "eslint8", &eslint8, &["file.js"], &dir, b"", &[], &nothing);
    }
}

/// Our script on the terminal, in a shell in a real pseudo-terminal: it opens `/dev/tty`,
/// sees its streams as terminals of the terminal's size and colours, and `^C` ends it as
/// it ends a cold run. Cold (the script through its `#!` line) and warm (our `ng` through
/// a link named `exact`, so that the typed lines are the same), the transcripts must be
/// identical byte for byte, and the warm one served by a spare.
#[test]
fn terminal_as_cold() {
    use ng_tests::bins;
    use ng_tests::pty::{Pty, PROMPT};
    use std::ffi::OsStr;

    let s = setup();
    let (_d, dir) = scratch("node-tty-");
    let script = dir.join("exact");
    std::fs::copy(
        repo_root().join("sdk/node/tests/fixtures/exact.js"),
        &script,
    )
    .unwrap();
    let link = dir.join("bin/exact");
    std::fs::create_dir(dir.join("bin")).unwrap();
    std::os::unix::fs::symlink(bins::ng(), &link).unwrap();
    let address = s.server.address(Transport::Unix);
    let server_arg = address.client_args()[1].to_string_lossy().into_owned();
    let transcript = |program: &Path| -> String {
        let env: Vec<(&str, &OsStr)> = vec![
            ("X", program.as_os_str()),
            ("NAILGUN_SERVER", OsStr::new(&server_arg)),
            (TAG_VAR, OsStr::new(s.server.tag())),
        ];
        let mut pty = Pty::shell(80, 24, &env).unwrap();
        pty.line(&format!("cd {}", dir.display())).unwrap();
        let mut shown = pty.expect(PROMPT).unwrap();
        pty.line("\"$X\" tty").unwrap();
        shown.push_str(&pty.expect("ready\r\n").unwrap());
        std::thread::sleep(std::time::Duration::from_millis(200));
        pty.send(b"\x03").unwrap();
        shown.push_str(&pty.expect(PROMPT).unwrap());
        pty.line("echo \"@@status=$?@@\"").unwrap();
        shown.push_str(&pty.expect("@@\r\n").unwrap());
        shown.replace("\r\n", "\n")
    };
    let cold = transcript(&script);
    assert!(cold.contains("tty opens\n[true,true,true,80,24,"), "{cold}");
    assert!(cold.contains("@@status=130@@"), "{cold}");
    for attempt in 0..3 {
        let before = s.fallbacks();
        let warm = transcript(&link);
        assert_eq!(
            cold,
            warm,
            "warm differs from cold\nlog:\n{}",
            s.server.plugin_log("node")
        );
        if s.fallbacks() == before {
            return;
        }
        eprintln!("attempt {attempt} ran cold; the spare for the terminal's key starts beside it");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("never served warm\n{}", s.server.plugin_log("node"));
}
