//! The exact mode against cold `java`: a plain `main` (`ngtest.ExactProbe`) run warm by
//! `ngw-java -cp <nails> ngtest.ExactProbe` and cold by `java -cp <nails>
//! ngtest.ExactProbe`, with the same arguments, environment, directory and stdin: the same
//! bytes and exit code, with both clients, from the spare's directory and from others (which
//! run cold and say why), on a terminal too (`System.console()`).

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ng_tests::jvm::{program_plugin, same};
use ng_tests::plugins::{PluginServer, TAG_VAR};
use ng_tests::pty::Pty;
use ng_tests::{bins, both_clients, java, Output};

fn probe_server() -> PluginServer {
    let nails = java::nails_dir().to_string_lossy().into_owned();
    PluginServer::start(vec![program_plugin(
        "probe",
        &["probe"],
        &["-cp".into(), nails, "ngtest.ExactProbe".into()],
    )])
}

fn cold(args: &[&str], dir: &Path, probe: &str, stdin: &[u8]) -> Output {
    use std::io::Write as _;
    let started = std::time::Instant::now();
    let mut child = Command::new(bins::java())
        .arg("-cp")
        .arg(java::nails_dir())
        .arg("ngtest.ExactProbe")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("PROBE", probe)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    Output {
        what: format!("cold java ExactProbe {args:?}"),
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
        elapsed: started.elapsed(),
    }
}

both_clients! {
    /// The same runs warm and cold, from two directories and with changing values.
    fn exact_as_cold(client) {
        let server = probe_server();
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let input = ng_tests::data::binary(5000);
        let runs: Vec<(&Path, &str, Vec<&str>)> = vec![
            (&a, "one", vec!["x", "y z"]),
            (&a, "two", vec!["stdin"]),
            (&a, "three ✓", vec!["exit=3"]),
            (&b, "four", vec![]),
            (&b, "five", vec!["exit=0", "é"]),
            (&a, "six", vec![]),
        ];
        for (dir, probe, args) in runs {
            let theirs = cold(&args, dir, probe, &input);
            let ours = server
                .cmd(client)
                .arg("probe")
                .args(&args)
                .cwd(dir)
                .env("PROBE", probe)
                .stdin_bytes(input.clone())
                .run();
            same(&theirs, &ours, &format!("{probe} in {}", dir.display()));
        }
    }
}

/// The probe's server, and a shell on a terminal in a fresh directory, with `PROBE=probe`.
fn on_a_terminal(probe: &str) -> (PluginServer, tempfile::TempDir, Pty) {
    let server = probe_server();
    let tmp = tempfile::tempdir().unwrap();
    let env: Vec<(&str, &OsStr)> = vec![
        ("PATH", OsStr::new("/usr/local/bin:/usr/bin:/bin")),
        (TAG_VAR, OsStr::new(server.tag())),
        ("PROBE", OsStr::new(probe)),
    ];
    let mut pty = Pty::shell(100, 30, &env).unwrap();
    pty.line(&format!("cd {}", tmp.path().display())).unwrap();
    (server, tmp, pty)
}

/// On a terminal, the warm program gets a terminal of its own as cold: `System.console()`
/// exists and `/dev/tty` opens (the pseudo-terminal our `ng` relays, `ctty`).
#[test]
fn exact_on_a_terminal() {
    let (server, _tmp, mut pty) = on_a_terminal("tty");
    let (ng, sock, java) = (bins::ng(), server.socket_path(), bins::java());
    for round in 0..2 {
        pty.line(&format!(
            "{} -cp {} ngtest.ExactProbe t{round}; echo \"cold-done $?\"",
            java.display(),
            java::nails_dir().display()
        ))
        .unwrap();
        let cold = pty.expect("cold-done 0").unwrap();
        pty.line(&format!(
            "{} --nailgun-server local:{} probe t{round}; echo \"warm-done $?\"",
            ng.display(),
            sock.display()
        ))
        .unwrap();
        let warm = pty.expect("warm-done 0").unwrap();
        let lines = |s: &str| -> Vec<String> {
            s.lines()
                .filter(|l| l.contains('='))
                .filter(|l| !l.contains("echo"))
                .map(|l| l.trim_end().to_string())
                .collect()
        };
        let (c, w) = (lines(&cold), lines(&warm));
        assert!(c.iter().any(|l| l == "console=true"), "cold: {cold}");
        assert!(c.iter().any(|l| l == "devtty=opens"), "cold: {cold}");
        assert_eq!(c, w, "cold:\n{cold}\nwarm:\n{warm}");
    }
}

/// `^Z` stops the warm JVM itself, as cold, and `fg` resumes it, whether it was started for
/// the session or was a spare: the JVM leads its session on the pseudo-terminal, and the
/// job's anchor keeps its process group from being orphaned (docs/ngw.md 15.7).
#[test]
fn exact_stops_on_ctrl_z_and_resumes_on_fg() {
    let (server, _tmp, mut pty) = on_a_terminal("z");
    let (ng, sock, java) = (bins::ng(), server.socket_path(), bins::java());
    let cold = format!(
        "{} -cp {} ngtest.ExactProbe sleep=2000",
        java.display(),
        java::nails_dir().display()
    );
    let warm = format!(
        "{} --nailgun-server local:{} probe sleep=2000",
        ng.display(),
        sock.display()
    );
    // The first warm run starts a JVM for the session; the second finds a spare started
    // in this directory with this environment.
    for (how, line) in [("cold", cold), ("warm", warm.clone()), ("spare", warm)] {
        // Alone on its line: after `fg`, bash does not run the rest of a stopped list.
        pty.line(&line).unwrap();
        pty.expect_within("ready", Duration::from_secs(60)).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        pty.send(b"\x1a").unwrap();
        let stopped = pty
            .expect_within("Stopped", Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{how}: no Stopped: {e}\n{}", pty.screen()));
        assert!(!stopped.contains("woke"), "{how}: {stopped}");
        // Stopped: it does not wake while the shell holds it.
        assert!(
            pty.expect_within("woke", Duration::from_millis(2500))
                .is_err(),
            "{how}: woke while stopped"
        );
        pty.line("fg").unwrap();
        pty.expect_within("woke", Duration::from_secs(30)).unwrap();
        pty.expect(ng_tests::pty::PROMPT).unwrap();
        pty.line(&format!("echo \"{how}-done $?\"")).unwrap();
        pty.expect(&format!("{how}-done 0")).unwrap();
    }
}

/// The plugin's `fallback` notices so far, and the messages of those it keeps.
fn fallbacks(server: &PluginServer) -> (u64, Vec<String>) {
    let report = server.plugin_report("probe").unwrap_or_default();
    let count = report
        .pointer("/notice_counts/fallback")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let messages = report
        .get("notices")
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|n| n["kind"] == "fallback")
                .filter_map(|n| n["message"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (count, messages)
}

/// A session from a directory no spare was started in runs cold and says so in a `fallback`
/// notice; one from the spare's directory takes the spare and says nothing.
#[test]
fn a_session_no_spare_matches_says_why_it_ran_cold() {
    let server = probe_server();
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    // The first spare was started in ngd's directory; the next ones where a session came
    // from.
    let runs: [(&Path, &str, u64); 3] = [(&a, "one", 1), (&a, "one", 1), (&b, "one", 2)];
    for (dir, probe, count) in runs {
        let theirs = cold(&[], dir, probe, b"");
        let ours = server
            .cmd(ng_tests::Client::Ours)
            .arg("probe")
            .cwd(dir)
            .env("PROBE", probe)
            .run();
        same(&theirs, &ours, probe);
        let (n, messages) = fallbacks(&server);
        assert_eq!(
            n,
            count,
            "{probe}: {messages:?}\n{}",
            server.plugin_log("probe")
        );
        assert!(
            messages
                .last()
                .is_some_and(|m| m.contains("another directory")),
            "{probe}: {messages:?}"
        );
    }
}
