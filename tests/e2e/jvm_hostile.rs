//! Hostile programs and clients on the JVM worker: a class that does not exist, a nail that
//! never returns and ignores interrupts, one that calls `Runtime.halt`, one that writes
//! 100 MB, a session killed mid-run (exact mode), and a jar replaced while sessions run (both
//! modes). In every case the other sessions are unaffected, and when the server stops no JVM
//! is left (the [`PluginServer`] guard checks every process it started).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ng_tests::jvm::{nails_plugin, program_plugin};
use ng_tests::plugins::{send_signal, PluginServer};
use ng_tests::{eqnice, java, Client};

fn props_ok(server: &PluginServer) {
    let out = server.cmd(Client::Ours).args(["ngtest.Props", "ok"]).run();
    out.assert_success();
    eqnice!("[ok]\ncwd=/\n", out.stdout_text());
}

#[test]
fn unknown_class_and_halt() {
    let server = PluginServer::start(vec![nails_plugin(None, &[])]);
    let out = server.cmd(Client::CClient).arg("no.such.Klass").run();
    assert_eq!(out.code(), Some(127), "{out:?}");
    let out = server.cmd(Client::Ours).args(["ngtest.Halt", "5"]).run();
    assert_eq!(out.code(), Some(5), "{out:?}");
    eqnice!("halting\n", out.stdout_text());
    props_ok(&server);
}

#[test]
fn a_nail_that_never_returns_and_its_client_killed() {
    let server = PluginServer::start(vec![nails_plugin(None, &["--kill-grace-ms", "500"])]);
    let running = server.cmd(Client::Ours).arg("ngtest.Forever").spawn();
    running.wait_for_stdout("started", Duration::from_secs(30));
    props_ok(&server);
    send_signal(running.pid(), libc::SIGTERM);
    let _ = running.wait();
    // The worker ends the session after its grace and retires; ngd starts a fresh one.
    std::thread::sleep(Duration::from_millis(1500));
    props_ok(&server);
    props_ok(&server);
}

#[test]
fn a_nail_that_writes_100_mb() {
    let server = PluginServer::start(vec![nails_plugin(None, &[])]);
    let total = 100 << 20;
    let flood = server
        .cmd(Client::Ours)
        .args(["ngtest.Flood", &total.to_string()])
        .spawn();
    props_ok(&server);
    let out = flood.wait();
    out.assert_success();
    assert_eq!(out.stdout.len(), total, "stdout length");
    assert!(
        out.stdout
            .iter()
            .enumerate()
            .step_by(4099)
            .all(|(i, b)| *b == b'a' + ((i % 65536) % 26) as u8),
        "stdout content"
    );
}

#[test]
fn an_exact_session_killed_mid_run() {
    let nails = java::nails_dir().to_string_lossy().into_owned();
    let server = PluginServer::start(vec![program_plugin(
        "sleep",
        &["sleepy"],
        &["-cp".into(), nails, "ngtest.SleepMain".into()],
    )]);
    for client in [Client::Ours, Client::CClient] {
        let running = server.cmd(client).arg("sleepy").spawn();
        running.wait_for_stdout("sleeping", Duration::from_secs(60));
        send_signal(running.pid(), libc::SIGKILL);
        let _ = running.wait();
    }
    let out = server.cmd(Client::Ours).args(["sleepy", "10"]).run();
    out.assert_success();
    eqnice!("sleeping\nslept\n", out.stdout_text());
}

/// Compiles `jr.Version` printing `version <word>` (and sleeping `args[0]` ms first, if
/// given) into `jar`, replacing it atomically.
fn version_jar(dir: &Path, jar: &Path, word: &str) {
    let src = dir.join(format!("src-{word}/jr"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("Version.java"),
        format!(
            "package jr;\npublic class Version {{\n  public static void main(String[] a) throws Exception {{\n    \
             if (a.length > 0) Thread.sleep(Long.parseLong(a[0]));\n    System.out.println(\"version {word}\");\n  }}\n}}\n"
        ),
    )
    .unwrap();
    let classes = dir.join(format!("classes-{word}"));
    let ok = Command::new(ng_tests::bins::javac())
        .args(["-d"])
        .arg(&classes)
        .arg(src.join("Version.java"))
        .status()
        .unwrap();
    assert!(ok.success());
    let tmp = dir.join(format!("{word}.jar.tmp"));
    let jar_tool = ng_tests::bins::javac().with_file_name("jar");
    let ok = Command::new(jar_tool)
        .arg("cf")
        .arg(&tmp)
        .arg("-C")
        .arg(&classes)
        .arg(".")
        .status()
        .unwrap();
    assert!(ok.success());
    std::fs::rename(&tmp, jar).unwrap();
}

#[test]
fn a_jar_replaced_while_sessions_run() {
    let dir = tempfile::tempdir().unwrap();
    let jar = dir.path().join("app.jar");
    version_jar(dir.path(), &jar, "one");
    let jar_s = jar.to_string_lossy().into_owned();
    let server = PluginServer::start(vec![
        program_plugin(
            "vexact",
            &["vexact"],
            &["-cp".into(), jar_s.clone(), "jr.Version".into()],
        ),
        program_plugin(
            "vshared",
            &["vshared"],
            &["--shared".into(), "-cp".into(), jar_s, "jr.Version".into()],
        ),
    ]);
    for command in ["vexact", "vshared"] {
        let out = server.cmd(Client::Ours).arg(command).run();
        eqnice!("version one\n", out.stdout_text(), "{command} before");
    }
    let long = server.cmd(Client::Ours).args(["vshared", "3000"]).spawn();
    std::thread::sleep(Duration::from_millis(300));
    // Past the file system's mtime granularity, so the change is seen.
    std::thread::sleep(Duration::from_millis(1100));
    version_jar(dir.path(), &jar, "two");
    for command in ["vexact", "vshared", "vexact", "vshared"] {
        let out = server.cmd(Client::Ours).arg(command).run();
        eqnice!("version two\n", out.stdout_text(), "{command} after");
    }
    let out = long.wait();
    eqnice!(
        "version one\n",
        out.stdout_text(),
        "the session that ran through the change"
    );
    let stats = server.cmd(Client::Ours).args(["ng-stats", "--json"]).run();
    assert!(
        stats.stdout_text().contains("stale"),
        "ng-stats names the stale classes: {}",
        stats.stdout_text()
    );
}
