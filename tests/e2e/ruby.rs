//! The Ruby worker (`sdk/ruby`, `ngw-ruby`) through a real ngd and both clients: Debian's
//! `rubocop` and `rake` (RubyGems binstubs, installed by `scripts/peers/ruby`) and a
//! script of our own (`sdk/ruby/tests/fixtures/exact.rb`) run with `ruby`, each compared
//! byte for byte (stdout, stderr, exit status) with a cold run of the same program with
//! the same environment, directory and stdin, and every session served warm (no
//! `fallback` notice). The worker is configured with an explicit `command`; its learned
//! preloads go to a state directory of the test's own. On a terminal: a script in a real
//! pseudo-terminal (`ng_tests::pty`), and irb in tmux, made warm by `ngd warm irb` and
//! compared by the screens `capture-pane` shows ([`Tmux`]).

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ng_tests::plugins::{repo_root, send_signal, Plugin, PluginServer, TAG_VAR};
use ng_tests::{both_clients, Client, ClientCmd, Output, Transport};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// ngd with one plugin, `ruby`, serving `rubocop`, `rake` and `ruby SCRIPT`, and the
/// environment its clients and the cold runs share.
struct Setup {
    server: PluginServer,
    env: BTreeMap<String, String>,
    _home: tempfile::TempDir,
}

fn setup() -> Setup {
    for program in ["ruby", "rubocop", "rake"] {
        assert!(
            Path::new("/usr/bin").join(program).is_file(),
            "/usr/bin/{program} is missing: run scripts/install-peers"
        );
    }
    let home = tempfile::Builder::new()
        .prefix("ruby-home-")
        .tempdir()
        .unwrap();
    let home_dir = home.path().canonicalize().unwrap();
    let state = home_dir.join(".state");
    let worker = repo_root().join("sdk/ruby/bin/ngw-ruby");
    let command = [
        "ruby".to_string(),
        worker.to_string_lossy().into_owned(),
        "--state-dir".to_string(),
        state.to_string_lossy().into_owned(),
        "rubocop=/usr/bin/rubocop".to_string(),
        "rake=/usr/bin/rake".to_string(),
        "ruby".to_string(),
    ];
    let home_str = home_dir.to_string_lossy().into_owned();
    let server = PluginServer::builder()
        .plugin(Plugin::new("ruby", &command).commands(&["rubocop", "rake", "ruby"]))
        // ngd started from the clients' shell: the same locale and home.
        .env("LANG", "C.UTF-8")
        .env("HOME", &home_str)
        .start();
    let env: BTreeMap<String, String> = [
        ("PATH", PATH.to_string()),
        ("HOME", home_str),
        ("LANG", "C.UTF-8".to_string()),
        ("NO_COLOR", "1".to_string()),
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

/// `argv` run cold with exactly `env` in `cwd`, `stdin` on a pipe; with `merge`, stderr
/// goes to stdout's pipe (`2>&1`).
fn cold(
    argv: &[&str],
    env: &BTreeMap<String, String>,
    cwd: &Path,
    stdin: &[u8],
    merge: bool,
) -> Output {
    let mut cmd = if merge {
        let mut c = Command::new("/bin/sh");
        c.arg("-c").arg("exec \"$0\" \"$@\" 2>&1").args(argv);
        c
    } else {
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..]);
        c
    };
    let started = std::time::Instant::now();
    let mut child = cmd
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
    /// `command args` warm through `client`, with the setup's environment in `cwd`.
    fn warm(
        &self,
        client: Client,
        command: &str,
        args: &[&str],
        cwd: &Path,
        stdin: &[u8],
        merge: bool,
    ) -> Output {
        let mut cmd = if merge {
            ClientCmd::new(client.name(), "/bin/sh")
                .arg("-c")
                .arg("exec \"$0\" \"$@\" 2>&1")
                .arg(client.bin())
                .server_env(self.server.address(Transport::Unix))
        } else {
            self.server.cmd(client)
        };
        for (k, v) in &self.env {
            cmd = cmd.env(k, v);
        }
        cmd.cwd(cwd)
            .arg(command)
            .args(args)
            .stdin_bytes(stdin.to_vec())
            .timeout(std::time::Duration::from_secs(60))
            .run()
    }

    /// Runs `program args` cold and `command args` warm, and asserts they showed the same
    /// bytes and ended the same way; returns the cold run.
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    fn same(
        &self,
        client: Client,
        command: &str,
        program: &str,
        args: &[&str],
        cwd: &Path,
        stdin: &[u8],
        merge: bool,
    ) -> Output {
        let mut argv = vec![program];
        argv.extend_from_slice(args);
        let cold = cold(&argv, &self.env, cwd, stdin, merge);
        let warm = self.warm(client, command, args, cwd, stdin, merge);
        let context = format!(
            "cold:\n{cold:?}\nwarm:\n{warm:?}\nlog:\n{}",
            self.server.plugin_log("ruby")
        );
        match (cold.status.signal(), client) {
            // The C client cannot die of a signal: it exits with 128 + N.
            (Some(sig), Client::CClient) => assert_eq!(warm.code(), Some(128 + sig), "{context}"),
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
        eprintln!(
            "{command} {args:?} with {client}: cold {:?}, warm {:?}",
            cold.elapsed, warm.elapsed
        );
        cold
    }

    /// No session ran the cold way.
    #[track_caller]
    fn assert_all_warm(&self) {
        let report = self.server.plugin_report("ruby").expect("ruby in ng-stats");
        let fallbacks = report.pointer("/notice_counts/fallback");
        let log = self.server.plugin_log("ruby");
        assert!(fallbacks.is_none(), "ran cold: {report}\n{log}");
    }
}

fn scratch(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap();
    (dir, path)
}

const OFFENCES: &str = "def foo( a )\n  x = 1\n  return a\nend\nputs \"hi\"\n";

both_clients! {
    /// rubocop on a file with offences, as text and `-f json`, twice each (the first
    /// session teaches the worker what to preload and retires it; the next worker
    /// rehearses), four at once, then a clean file, then a project whose root, target
    /// Ruby version and excluded directory a rehearsal's memos would get wrong.
    fn rubocop_as_cold(client) {
        let s = setup();
        let (_d, dir) = scratch("rubocop-");
        std::fs::write(dir.join("t.rb"), OFFENCES).unwrap();
        let rubocop =
            |args: &[&str]| s.same(client, "rubocop", "/usr/bin/rubocop", args, &dir, b"", false);
        for _ in 0..2 {
            let cold = rubocop(&["--cache", "false", "t.rb"]);
            cold.assert_code(1);
            assert!(cold.stdout_text().contains("offenses detected"), "{cold:?}");
            let cold = rubocop(&["--cache", "false", "-f", "json", "t.rb"]);
            assert!(cold.stdout_text().starts_with("{\"metadata\""), "{cold:?}");
        }
        // Four at once: each shows what the cold run showed.
        let args = ["--cache", "false", "t.rb"];
        let cold = rubocop(&args);
        let running: Vec<_> = (0..4)
            .map(|_| {
                let mut cmd = s.server.cmd(client);
                for (k, v) in &s.env {
                    cmd = cmd.env(k, v);
                }
                cmd.cwd(&dir)
                    .arg("rubocop")
                    .args(args)
                    .timeout(std::time::Duration::from_secs(120))
                    .spawn()
            })
            .collect();
        for run in running {
            let warm = run.wait();
            assert_eq!(cold.code(), warm.code(), "{warm:?}");
            assert!(cold.stdout == warm.stdout && cold.stderr == warm.stderr, "{cold:?}\n{warm:?}");
        }
        std::fs::write(dir.join("t.rb"), "# frozen_string_literal: true\n\nputs 'hi'\n").unwrap();
        rubocop(&["--cache", "false", "t.rb"]).assert_success();
        // The worker that learned rehearsed rubocop before its hello; what the rehearsal
        // memoised from its scratch directory (the project root, the default
        // configuration's absolute Excludes, the target Ruby version) is not what a
        // project of the user's sees: a project with a Gemfile, a .ruby-version and a
        // vendor/ directory, all of it linted, as cold.
        let log = s.server.plugin_log("ruby");
        assert!(log.contains("rehearsed rubocop --cache false rehearsal.rb"), "{log}");
        let (_p, project) = scratch("rubocop-project-");
        std::fs::create_dir(project.join("vendor")).unwrap();
        std::fs::write(project.join("Gemfile"), "source 'https://rubygems.org'\n").unwrap();
        std::fs::write(project.join(".ruby-version"), "2.7\n").unwrap();
        std::fs::write(project.join("t.rb"), OFFENCES).unwrap();
        std::fs::write(project.join("vendor/v.rb"), OFFENCES).unwrap();
        let cold = s.same(client, "rubocop", "/usr/bin/rubocop", &["--cache", "false"], &project, b"", false);
        assert!(!cold.stdout_text().contains("v.rb"), "vendor/ excluded: {cold:?}");
        s.assert_all_warm();
    }
}

both_clients! {
    /// rake with a Rakefile whose task reads ENV and Dir.pwd (from a subdirectory too),
    /// a failing task, an unknown one.
    fn rake_as_cold(client) {
        let mut s = setup();
        let (_d, dir) = scratch("rake-");
        let rakefile = repo_root().join("sdk/ruby/tests/fixtures/Rakefile");
        std::fs::copy(rakefile, dir.join("Rakefile")).unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        s.env.insert("GREETING".into(), "héllo".into());
        for _ in 0..2 {
            let cold = s.same(client, "rake", "/usr/bin/rake", &["show"], &dir, b"", false);
            assert_eq!(cold.stdout_text(), format!("pwd {}\nGREETING=héllo\n", dir.display()));
            s.same(client, "rake", "/usr/bin/rake", &[], &dir.join("sub"), b"", false);
            let cold = s.same(client, "rake", "/usr/bin/rake", &["fail"], &dir, b"", false);
            cold.assert_code(1);
            assert!(cold.stderr_text().contains("the task failed"), "{cold:?}");
            s.same(client, "rake", "/usr/bin/rake", &["nosuch"], &dir, b"", false);
        }
        s.assert_all_warm();
    }
}

both_clients! {
    /// Our own script: argv and what it sees, interleaved stdout and stderr, a fork,
    /// `exit!` in an `at_exit` hook, an uncaught exception with a cause, a large stdin,
    /// death by SIGKILL; with our client also `2>&1` on one pipe and SIGINT forwarded to
    /// the script's trap.
    fn script_as_cold(client) {
        let s = setup();
        let (_d, dir) = scratch("script-");
        let script = dir.join("exact.rb");
        std::fs::copy(repo_root().join("sdk/ruby/tests/fixtures/exact.rb"), &script).unwrap();
        let big: Vec<u8> = (0..150_000).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        for mode in ["info", "interleave", "fork", "atexit", "raise", "kill", "caller", "data"] {
            s.same(client, "ruby", "ruby", &["exact.rb", mode], &dir, b"", false);
        }
        let cold = s.same(client, "ruby", "ruby", &["exact.rb", "stdin"], &dir, &big, false);
        assert!(cold.stdout_text().starts_with(&format!("{} bytes", big.len())), "{cold:?}");
        let cold = s.same(client, "ruby", "ruby", &["exact.rb", "kill"], &dir, b"", false);
        assert_eq!(cold.status.signal(), Some(libc::SIGKILL));
        if client == Client::Ours {
            s.same(client, "ruby", "ruby", &["exact.rb", "interleave"], &dir, b"", true);
            s.same(client, "ruby", "ruby", &["exact.rb", "raise"], &dir, b"", true);
            // SIGINT to the client reaches the script's trap.
            let mut cmd = s.server.cmd(client);
            for (k, v) in &s.env {
                cmd = cmd.env(k, v);
            }
            let running = cmd.cwd(&dir).args(["ruby", "exact.rb", "trap"]).spawn();
            running.wait_for_stdout("ready", std::time::Duration::from_secs(30));
            send_signal(running.pid(), libc::SIGINT);
            let out = running.wait();
            out.assert_code(42);
            assert_eq!(out.stdout_text(), "ready\ngot INT\n", "{out:?}");
        }
        s.assert_all_warm();
    }
}

/// A script on the terminal, in a shell in a real pseudo-terminal: it opens `/dev/tty`,
/// sees its streams as terminals, is stopped by `^Z` and continued by `fg`, and `^C`
/// reaches its trap. Run cold (`ruby`) and warm (our `ng` through a link named `ruby`, so
/// the typed lines are the same), the transcripts must be identical byte for byte.
#[test]
fn terminal_as_cold() {
    use ng_tests::bins;
    use ng_tests::pty::{Pty, PROMPT};
    use std::ffi::OsStr;

    const TTY_SCRIPT: &str = r#"File.open('/dev/tty', 'w') { |t| t.puts 'tty opens' }
p [STDIN.tty?, STDOUT.tty?, STDERR.tty?, STDOUT.sync]
trap('INT') do
  puts 'caught INT'
  exit 42
end
puts 'ready'
$stdin.gets
puts 'not interrupted'
"#;
    let s = setup();
    let (_d, dir) = scratch("ruby-tty-");
    std::fs::write(dir.join("tty.rb"), TTY_SCRIPT).unwrap();
    let link = dir.join("bin/ruby");
    std::fs::create_dir(dir.join("bin")).unwrap();
    std::os::unix::fs::symlink(bins::ng(), &link).unwrap();
    let address = s.server.address(Transport::Unix);
    let server_arg = address.client_args()[1].to_string_lossy().into_owned();
    let transcript = |rb: &Path| -> String {
        let env: Vec<(&str, &OsStr)> = vec![
            ("RB", rb.as_os_str()),
            ("NAILGUN_SERVER", OsStr::new(&server_arg)),
            (TAG_VAR, OsStr::new(s.server.tag())),
        ];
        let mut pty = Pty::shell(80, 24, &env).unwrap();
        pty.line(&format!("cd {}", dir.display())).unwrap();
        let mut shown = pty.expect(PROMPT).unwrap();
        pty.line("\"$RB\" tty.rb").unwrap();
        shown.push_str(&pty.expect("ready\r\n").unwrap());
        pty.send(b"\x1a").unwrap();
        shown.push_str(&pty.expect(PROMPT).unwrap());
        pty.line("fg").unwrap();
        shown.push_str(&pty.expect("tty.rb\r\n").unwrap());
        std::thread::sleep(std::time::Duration::from_millis(200));
        pty.send(b"\x03").unwrap();
        shown.push_str(&pty.expect(PROMPT).unwrap());
        pty.line("echo \"@@status=$?@@\"").unwrap();
        shown.push_str(&pty.expect("@@\r\n").unwrap());
        shown.replace("\r\n", "\n")
    };
    let cold = transcript(Path::new("/usr/bin/ruby"));
    assert!(
        cold.contains("tty opens\n[true, true, true, false]\nready\n"),
        "{cold}"
    );
    assert!(cold.contains("Stopped"), "{cold}");
    assert!(cold.contains("caught INT"), "{cold}");
    assert!(cold.contains("@@status=42@@"), "{cold}");
    let warm = transcript(&link);
    assert_eq!(
        cold,
        warm,
        "warm differs from cold\nlog:\n{}",
        s.server.plugin_log("ruby")
    );
    s.assert_all_warm();
}

/// A tmux server of its own (its socket in a temporary directory) with one 80×24 window
/// running `bash --norc --noprofile` with exactly the environment given; what the terminal
/// shows is read with `capture-pane` once it has settled (unchanged for 300 ms), so a
/// program that redraws its line (irb's reline) is compared by what a user sees, not by
/// the bytes of its redrawing.
struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn start(env: &[(&str, &str)]) -> Tmux {
        let dir = tempfile::Builder::new()
            .prefix("ruby-tmux-")
            .tempdir()
            .unwrap();
        let socket = dir.path().join("tmux.sock");
        let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        let mut shell = String::from("exec env -i");
        for (k, v) in env {
            shell += &format!(" {k}={}", quote(v));
        }
        shell += " bash --norc --noprofile";
        let tmux = Tmux { socket, _dir: dir };
        tmux.run(&["new-session", "-d", "-x", "80", "-y", "24", &shell]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["-f", "/dev/null"])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("tmux: {e} (scripts/install-peers installs it)"));
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p"])
    }

    /// The screen once `ready` holds for it and it stays the same for 300 ms.
    #[track_caller]
    fn settle(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let now = self.screen();
            if ready(&now) {
                std::thread::sleep(std::time::Duration::from_millis(300));
                if self.screen() == now {
                    return now;
                }
                continue;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never {what}; the screen:\n{now}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Types `text` (as keys, literally), then `key`; the screens once each settled, the
    /// second once it shows `then`.
    #[track_caller]
    fn type_then(&self, text: &str, key: &str, then: &str) -> [String; 2] {
        self.run(&["send-keys", "-l", text]);
        let typed = self.settle(&format!("showing {text:?}"), |s| s.contains(text));
        self.run(&["send-keys", key]);
        // capture-pane leaves out the blanks at the end of a line.
        let then = then.trim_end();
        let after = self.settle(&format!("showing {then:?}"), |s| s.contains(then));
        [typed, after]
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

/// irb on a terminal (tmux), cold and warm through the shim `ngd warm irb` placed (the
/// server started from the same environment as the terminal's shell): a sum, a method
/// defined over three lines, a call of it, an error with its backtrace, `^C` at the prompt
/// with a line half typed, `exit`, and the shell's `$?`. The screens at each settled point
/// must be the same. The first warm session teaches the worker (reline decides at load
/// time by whether stdout is a terminal, so the worker leaves out what asks); the compared
/// one runs on the zygote that learned, on the warm path.
#[test]
fn irb_on_a_terminal_as_cold() {
    let user = crate::ops::User::new();
    let home = user.home().to_string_lossy().into_owned();
    let runtime = user.runtime().to_string_lossy().into_owned();
    let shims = user.home().join(".local/share/ngd/shims");
    let base_env = [
        ("HOME", home.as_str()),
        ("XDG_RUNTIME_DIR", runtime.as_str()),
        ("LANG", "C.UTF-8"),
        ("TERM", "screen"),
    ];
    let mut ngd = user.ngd().timeout(std::time::Duration::from_secs(120));
    for (k, v) in base_env {
        ngd = ngd.env(k, v);
    }
    let out = ngd.args(["warm", "irb"]).run();
    out.assert_success();
    assert!(
        out.stdout_text().contains("irb is warm (ruby): irb"),
        "{out:?}"
    );
    let session = |path: &str| -> Vec<String> {
        let _ = std::fs::remove_file(user.home().join(".irb_history"));
        let mut env = base_env.to_vec();
        env.push(("PATH", path));
        env.push(("PS1", "$ "));
        let t = Tmux::start(&env);
        let at_prompt = |s: &str| s.trim_end().ends_with('$');
        let mut screens = vec![t.settle("at the shell's prompt", at_prompt)];
        for (line, then) in [
            ("irb", "irb(main):001:0> "),
            ("1 + 2", "irb(main):002:0> "),
            ("def sq(x)", "irb(main):003:"),
            ("x * x", "irb(main):004:"),
            ("end", "irb(main):005:0> "),
            ("sq(7)", "irb(main):006:0> "),
            ("nosuch + 1", "irb(main):007:0> "),
        ] {
            screens.extend(t.type_then(line, "Enter", then));
        }
        screens.extend(t.type_then("abc", "C-c", "^C"));
        t.run(&["send-keys", "-l", "exit"]);
        screens.push(t.settle("showing exit", |s| s.contains("> exit")));
        t.run(&["send-keys", "Enter"]);
        screens.push(t.settle("back at the shell's prompt", at_prompt));
        screens.extend(t.type_then("echo \"@@status=$?@@\"", "Enter", "@@status=0@@"));
        screens
    };
    let cold_path = "/usr/bin:/bin";
    let warm_path = format!("{}:/usr/bin:/bin", shims.display());
    let cold = session(cold_path);
    let last = cold.last().unwrap();
    assert!(last.contains("=> 49\n"), "{last}");
    assert!(last.contains("(NameError)"), "{last}");
    assert!(last.contains("^C"), "{last}");
    // The first warm session runs on the bare zygote and teaches it.
    session(&warm_path);
    let warm = session(&warm_path);
    for (i, (c, w)) in cold.iter().zip(&warm).enumerate() {
        assert_eq!(c, w, "screen {i} differs\ncold:\n{c}\nwarm:\n{w}");
    }
    assert_eq!(cold.len(), warm.len());
    // Both warm sessions went through the worker, neither the cold way.
    let stats = user.ng().args(["ng-stats", "--json"]).run();
    let doc: serde_json::Value = serde_json::from_str(&stats.stdout_text()).unwrap();
    let irb = doc["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "irb")
        .expect("irb in ng-stats")
        .clone();
    assert_eq!(irb["sessions"], 2, "{irb:#}");
    assert!(
        irb.pointer("/notice_counts/fallback").is_none(),
        "ran cold: {irb:#}"
    );
}
