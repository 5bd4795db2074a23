//! Zero-setup operation: `ng`'s auto-start and `ngd`'s idle exit, systemd socket
//! activation and readiness, `ngd bench` and `ngd check` against a real Python CLI, shell
//! completions, man pages and `ng --help`.
//!
//! Every test gets a fresh `$XDG_RUNTIME_DIR` and `$HOME` (so a fresh default socket, log
//! and configuration), and stops whatever server it caused to be started. Auto-start only
//! happens when nothing answers on `127.0.0.1:2113` either, so these tests hold
//! [`ng_tests::DEFAULT_TCP_ADDR_LOCK`], as the test that listens there does.
//!
//! Peers: Pygments and ngw in `venv-bench` of the peers cache (`scripts/peers/bench`),
//! `systemd-socket-activate` (`scripts/peers/systemd`).

use std::ffi::OsString;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::MutexGuard;
use std::thread;
use std::time::{Duration, Instant};

use ng_tests::client::ClientCmd;
use ng_tests::{bins, Address, Client};

/// A fresh user: runtime directory, home, and the environment pointing at them.
pub(crate) struct User {
    pub(crate) dir: tempfile::TempDir,
    _tcp: MutexGuard<'static, ()>,
}

impl User {
    pub(crate) fn new() -> User {
        let tcp = ng_tests::DEFAULT_TCP_ADDR_LOCK
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::Builder::new()
            .prefix("ngd-ops-")
            .tempdir()
            .unwrap();
        std::fs::create_dir(dir.path().join("run")).unwrap();
        std::fs::create_dir(dir.path().join("home")).unwrap();
        User { dir, _tcp: tcp }
    }

    pub(crate) fn runtime(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    pub(crate) fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub(crate) fn socket(&self) -> PathBuf {
        self.runtime().join("ngd/ngd.sock")
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.home().join(".local/state/ngd/ngd.log")
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    /// Writes the default configuration file.
    pub(crate) fn config(&self, text: &str) {
        let dir = self.home().join(".config/ngd");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ngd.toml"), text).unwrap();
    }

    pub(crate) fn with_env(&self, cmd: ClientCmd) -> ClientCmd {
        cmd.env("XDG_RUNTIME_DIR", self.runtime())
            .env("HOME", self.home())
    }

    /// Our `ng`, no server named.
    pub(crate) fn ng(&self) -> ClientCmd {
        self.with_env(Client::Ours.cmd())
    }

    /// `ngd`, in this user's environment.
    pub(crate) fn ngd(&self) -> ClientCmd {
        self.with_env(ClientCmd::new("ngd", bins::ngd()))
    }

    /// The pid of the server on the default socket, from `ngd status`.
    pub(crate) fn server_pid(&self) -> Option<u32> {
        let out = self.ngd().arg("status").run();
        let text = out.stdout_text();
        let pid = text.split("pid ").nth(1)?;
        pid.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    }
}

impl Drop for User {
    fn drop(&mut self) {
        if self.socket().exists() {
            let _ = self.ngd().arg("stop").run();
        }
    }
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its new parent) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn autostart_sixteen_clients_at_once_start_one_server() {
    let user = User::new();
    let runs: Vec<_> = (0..16)
        .map(|_| user.ng().arg("ng-version").spawn())
        .collect();
    for run in runs {
        let out = run.wait();
        out.assert_success();
        assert_eq!(
            out.stdout_text(),
            "NailGun server version 0.1.0 (ngd)\n",
            "{out:?}"
        );
    }
    let log = user.log_text();
    assert_eq!(
        log.matches(" listening on ").count(),
        1,
        "exactly one server should have started:\n{log}"
    );
    assert!(
        log.contains(&format!("listening on local:{}", user.socket().display())),
        "{log}"
    );
    assert!(!log.contains('\x1b'), "ANSI escapes in a log file:\n{log}");
    let pid = user
        .server_pid()
        .expect("the auto-started server answers ngd status");
    // Detached: its own session and process group.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(fields[2], pid.to_string(), "process group of {pid}: {stat}");
    assert_eq!(fields[3], pid.to_string(), "session of {pid}: {stat}");
    // Later calls use it.
    user.ng().arg("ng-true").run().assert_success();
    assert_eq!(user.server_pid(), Some(pid));
}

#[test]
fn autostart_opt_outs_and_named_servers() {
    let user = User::new();
    for out in [
        user.ng()
            .env("NG_NO_AUTOSTART", "1")
            .arg("ng-version")
            .run(),
        user.ng()
            .args(["--nailgun-no-autostart", "ng-version"])
            .run(),
        user.ng()
            .env(
                "NAILGUN_SERVER",
                format!("local:{}", user.socket().display()),
            )
            .arg("ng-version")
            .run(),
        user.ng()
            .args(["--nailgun-server"])
            .arg(format!("local:{}", user.socket().display()))
            .arg("ng-version")
            .run(),
    ] {
        out.assert_code(230);
    }
    assert!(!user.socket().exists(), "a server was started anyway");
    assert!(!user.log().exists(), "a server was started anyway");
    // NG_NO_AUTOSTART=0 is not an opt-out.
    user.ng()
        .env("NG_NO_AUTOSTART", "0")
        .arg("ng-version")
        .run()
        .assert_success();
}

#[test]
fn autostarted_server_exits_when_idle_and_restarts_on_demand() {
    let user = User::new();
    user.config("idle_exit_ms = 300\n");
    user.ng().arg("ng-version").run().assert_success();
    let pid = user.server_pid().expect("a server");
    wait_until("the idle exit", Duration::from_secs(20), || !alive(pid));
    assert!(
        !user.socket().exists(),
        "the socket file survived the idle exit"
    );
    let log = user.log_text();
    assert!(log.contains("idle for 0.3s"), "{log}");
    // The next call starts a new one.
    user.ng().arg("ng-version").run().assert_success();
    let again = user.server_pid().expect("a new server");
    assert_ne!(again, pid);
}

#[test]
fn explicit_server_idle_exit_only_when_told() {
    let user = User::new();
    let socket = user.dir.path().join("explicit.sock");
    let mut child = Command::new(bins::ngd())
        .args(["serve", "--idle-exit", "200", "--listen"])
        .arg(format!("local:{}", socket.display()))
        .env("HOME", user.home())
        .env("XDG_RUNTIME_DIR", user.runtime())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ngd serve --idle-exit 200 still runs");
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

#[test]
fn autostart_with_a_bad_config_fails_with_69_and_the_reason() {
    let user = User::new();
    user.config("bogus_setting = 1\n");
    let out = user
        .ng()
        .arg("ng-version")
        .timeout(Duration::from_secs(40))
        .run();
    out.assert_code(69);
    let err = out.stderr_text();
    assert!(err.contains("starting one failed"), "{out:?}");
    assert!(err.contains("exit status: 78"), "{out:?}");
    assert!(err.contains("unknown field `bogus_setting`"), "{out:?}");
    assert!(!user.socket().exists());
}

#[test]
fn socket_activation_with_both_clients() {
    let user = User::new();
    let socket = user.dir.path().join("activated.sock");
    let activate = bins::find_on_path("systemd-socket-activate")
        .expect("systemd-socket-activate is not on PATH: run scripts/peers/systemd");
    let mut child = Command::new(activate)
        .arg("-l")
        .arg(&socket)
        .arg("--fdname=ngd")
        .arg("-E")
        .arg(format!("HOME={}", user.home().display()))
        .arg("-E")
        .arg(format!("XDG_RUNTIME_DIR={}", user.runtime().display()))
        .arg(bins::ngd())
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the activation socket", Duration::from_secs(20), || {
        socket.exists()
    });
    let address = Address::Unix(socket.clone());
    for client in [Client::Ours, Client::CClient] {
        let out = client.cmd().server(&address).arg("ng-version").run();
        out.assert_success();
        assert_eq!(
            out.stdout_text(),
            "NailGun server version 0.1.0 (ngd)\n",
            "{client:?}: {out:?}"
        );
    }
    // The server is the activated process itself, and it used the passed socket: its own
    // default socket was never created.
    assert!(!user.socket().exists());
    Client::Ours
        .cmd()
        .server(&address)
        .arg("ng-stop")
        .run()
        .assert_success();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the activated ngd did not stop");
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    // The socket file belongs to the service manager: ngd leaves it.
    assert!(socket.exists(), "ngd removed the activation socket file");
}

#[test]
fn readiness_is_notified() {
    let user = User::new();
    let notify = user.dir.path().join("notify");
    let receiver = UnixDatagram::bind(&notify).unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let socket = user.dir.path().join("n.sock");
    let mut child = Command::new(bins::ngd())
        .arg("serve")
        .arg("--listen")
        .arg(format!("local:{}", socket.display()))
        .env("NOTIFY_SOCKET", &notify)
        .env("HOME", user.home())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = receiver.recv(&mut buf).expect("no notification");
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(text.lines().any(|l| l == "READY=1"), "{text}");
    assert!(text.contains(&format!("MAINPID={}", child.id())), "{text}");
    // Ready means connectable.
    let out = Client::Ours
        .cmd()
        .server(&Address::Unix(socket.clone()))
        .arg("ng-stop")
        .run();
    out.assert_success();
    let n = receiver.recv(&mut buf).expect("no STOPPING notification");
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert!(child.wait().unwrap().success());
}

/// The peers cache (`scripts/peers/*`).
fn peers_dir() -> PathBuf {
    std::env::var_os("NGD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/ngd-peers")
        })
}

/// The venv with Pygments and ngw.
fn bench_venv() -> PathBuf {
    let venv = peers_dir().join("venv-bench");
    assert!(
        venv.join("bin/pygmentize").is_file(),
        "{} has no pygmentize: run scripts/peers/bench",
        venv.display()
    );
    venv
}

fn json(out: &ng_tests::Output) -> serde_json::Value {
    serde_json::from_str(&out.stdout_text()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn bench_a_real_python_cli_ad_hoc() {
    let user = User::new();
    let pygmentize = bench_venv().join("bin/pygmentize");
    let out = user
        .ngd()
        .args(["bench", "--runs", "5", "--warmup", "1", "--json", "--"])
        .arg(&pygmentize)
        .arg("-V")
        .timeout(Duration::from_secs(180))
        .run();
    out.assert_success();
    let report = json(&out);
    assert_eq!(report["identical"], true, "{out:?}");
    assert_eq!(report["mode"], "ad hoc", "{out:?}");
    assert_eq!(report["name"], "pygmentize");
    assert_eq!(report["exit_code"], 0);
    assert_eq!(report["runs"], 5);
    let ms = |which: &str, key: &str| report[which][key].as_f64().unwrap();
    for which in ["cold", "warm", "floor"] {
        assert!(ms(which, "p10_ms") <= ms(which, "median_ms"), "{out:?}");
        assert!(ms(which, "median_ms") <= ms(which, "p90_ms"), "{out:?}");
        assert!(ms(which, "min_ms") > 0.0, "{out:?}");
    }
    let ratio = report["ratio"].as_f64().unwrap();
    assert!(
        (ratio - ms("cold", "median_ms") / ms("warm", "median_ms")).abs() < 1e-6,
        "{out:?}"
    );
    // A Python start-up costs more than exec'ing /bin/true.
    assert!(
        ms("cold", "median_ms") > ms("floor", "median_ms"),
        "{out:?}"
    );
}

#[test]
fn bench_a_configured_command_and_text_output() {
    let user = User::new();
    let venv = bench_venv();
    user.config(&format!(
        "[[plugin]]\nname = \"pyg\"\ncommand = [{:?}, \"-m\", \"ngw\", \"script\", \"pygmentize={}\"]\ncommands = [\"pygmentize\"]\n",
        venv.join("bin/python").display().to_string(),
        venv.join("bin/pygmentize").display()
    ));
    let out = user
        .ngd()
        .args(["bench", "--runs", "3", "--warmup", "1", "--"])
        .arg(venv.join("bin/pygmentize"))
        .arg("-V")
        .timeout(Duration::from_secs(180))
        .run();
    out.assert_success();
    let text = out.stdout_text();
    assert!(text.contains("warm: configured as 'pygmentize'"), "{out:?}");
    assert!(text.contains("(/bin/true)"), "{out:?}");
    assert!(
        text.contains("identical: stdout, stderr and exit code (0)"),
        "{out:?}"
    );
    // No progress bar when stderr is not a terminal.
    assert!(!out.stderr_text().contains("runs"), "{out:?}");
}

#[test]
fn check_reports_identical_and_different_commands() {
    let user = User::new();
    let venv = bench_venv();
    user.config(&format!(
        "[[plugin]]\nname = \"pyg\"\ncommand = [{:?}, \"-m\", \"ngw\", \"script\", \"pygmentize={}\"]\ncommands = [\"pygmentize\"]\n",
        venv.join("bin/python").display().to_string(),
        venv.join("bin/pygmentize").display()
    ));
    // Identical: the real console script, cold, against the plugin.
    let out = user
        .ngd()
        .args(["check", "--json", "--cold"])
        .arg(venv.join("bin/pygmentize"))
        .args(["pygmentize", "-V"])
        .timeout(Duration::from_secs(120))
        .run();
    out.assert_success();
    let report = json(&out);
    assert_eq!(report["identical"], true, "{out:?}");
    assert_eq!(report["cold_exit_code"], 0);
    assert!(report["warm"]["median_ms"].as_f64().unwrap() > 0.0);

    // Different: the `pygmentize` a shell finds on PATH is not the served one.
    let bin = user.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let fake = bin.join("pygmentize");
    ng_testkit::exe::write_executable(&fake, "#!/bin/sh\necho 'Pygments version 0.0'\nexit 3\n");
    // A link to ng named like the command is skipped when looking for the cold program.
    let link_dir = user.dir.path().join("links");
    std::fs::create_dir(&link_dir).unwrap();
    std::os::unix::fs::symlink(bins::ng(), link_dir.join("pygmentize")).unwrap();
    let mut path = OsString::from(&link_dir);
    path.push(":");
    path.push(&bin);
    path.push(":/usr/bin:/bin");
    let out = user
        .ngd()
        .env("PATH", path)
        .args(["check", "pygmentize", "-V"])
        .timeout(Duration::from_secs(120))
        .run();
    out.assert_code(1);
    let text = out.stdout_text();
    assert!(
        text.contains(&format!("(cold: {})", fake.display())),
        "{out:?}"
    );
    assert!(text.contains("stdout: DIFFERENT"), "{out:?}");
    assert!(text.contains("\"Pygments version 0.0\""), "{out:?}");
    assert!(
        text.contains("exit code: DIFFERENT: warm: exit code: 3 against 0"),
        "{out:?}"
    );
    assert!(text.contains("stderr: identical"), "{out:?}");
    assert!(text.contains("result: DIFFERENT"), "{out:?}");
}

#[test]
fn check_says_when_no_server_offers_the_command() {
    // A server that does not offer the command would answer 127 to every warm run: that is
    // "nothing serves it", not a difference between cold and warm.
    let user = User::new();
    let out = user
        .ngd()
        .args(["check", "--cold", "/bin/echo", "no-such-command", "hi"])
        .timeout(Duration::from_secs(60))
        .run();
    out.assert_code(69);
    assert!(
        out.stderr_text()
            .contains("ngd check: no server offers 'no-such-command'"),
        "{out:?}"
    );
    assert!(!out.stdout_text().contains("DIFFERENT"), "{out:?}");
}

#[test]
fn completions_and_man_pages_are_generated() {
    let user = User::new();
    for (shell, needle) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef ngd"),
        ("fish", "complete -c ngd"),
    ] {
        let out = user.ngd().args(["completions", shell]).run();
        out.assert_success();
        let text = out.stdout_text();
        assert!(text.contains(needle), "{shell}: {text}");
        for sub in ["serve", "bench", "check"] {
            assert!(text.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let man = user.dir.path().join("man1");
    let out = user.ngd().arg("man").arg(&man).run();
    out.assert_success();
    for page in ["ng.1", "ngd.1", "ngd-serve.1", "ngd-bench.1", "ngd-check.1"] {
        let text = std::fs::read_to_string(man.join(page))
            .unwrap_or_else(|e| panic!("{page}: {e}\n{out:?}"));
        assert!(text.contains(".TH"), "{page}");
    }
    // ng's man page documents exactly the options ng --help lists.
    let ng_page = std::fs::read_to_string(man.join("ng.1")).unwrap();
    let help = user.ng().arg("--help").run();
    help.assert_success();
    let usage = help.stderr_text();
    let options = |text: &str| -> std::collections::BTreeSet<String> {
        let mut text = text.replace("\\-", "-");
        for font in ["\\fB", "\\fI", "\\fR", "\\fP"] {
            text = text.replace(font, " ");
        }
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| w.starts_with("--nailgun-") && *w != "--nailgun-options")
            .map(|w| {
                // --nailgun-D<NAME>=<VALUE> and --nailgun-DNAME=VALUE are one option.
                if w.starts_with("--nailgun-D") {
                    "--nailgun-D".to_owned()
                } else {
                    w.trim_end_matches('-').to_owned()
                }
            })
            .collect()
    };
    assert_eq!(options(&ng_page), options(&usage), "{ng_page}\n{usage}");
}

/// A tool whose reader goes away (`ngd completions bash | head -0`) ends by SIGPIPE, as
/// other Unix tools do: no panic, nothing on stderr.
#[test]
fn tools_end_quietly_on_a_closed_pipe() {
    use std::os::unix::process::ExitStatusExt as _;
    let (read, write) = ng_sys::fd::pipe().unwrap();
    drop(read);
    let out = Command::new(bins::ngd())
        .args(["completions", "bash"])
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ng_help_lists_the_server_commands_when_one_runs() {
    let user = User::new();
    let help = user.ng().arg("--help").run();
    help.assert_success();
    assert!(
        help.stderr_text().contains("No server is reachable"),
        "{help:?}"
    );
    assert!(!user.socket().exists(), "--help started a server");
    user.ng().arg("ng-version").run().assert_success();
    let help = user.ng().arg("--help").run();
    help.assert_success();
    let text = help.stderr_text();
    assert!(text.contains("--nailgun-server"), "{text}");
    assert!(text.contains("Commands offered by the server"), "{text}");
    for command in ["ng-version", "ng-commands", "ng-stats"] {
        assert!(text.contains(command), "{text}");
    }
}

#[test]
fn log_file_and_json_format() {
    let user = User::new();
    let log = user.dir.path().join("json.log");
    let socket = user.dir.path().join("j.sock");
    let child = Command::new(bins::ngd())
        .args(["serve", "--log-format", "json", "--log-file"])
        .arg(&log)
        .arg("--listen")
        .arg(format!("local:{}", socket.display()))
        .env("HOME", user.home())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the server's socket", Duration::from_secs(20), || {
        socket.exists()
    });
    Client::Ours
        .cmd()
        .server(&Address::Unix(socket.clone()))
        .arg("ng-stop")
        .run()
        .assert_success();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.is_empty());
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string(), "{line}");
        assert!(v["fields"]["message"].is_string(), "{line}");
    }
    assert!(!text.contains('\x1b'));
    assert!(text.contains("stopped"), "{text}");
}
