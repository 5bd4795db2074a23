//! The JVM worker: Nailgun nails served by `ngd` through `ngw-java --nails`, side by side
//! with the reference Nailgun 0.9.3 server on JDK 17 (the same compiled nails, the same
//! client, the same input), and the same nails on JDK 25, where the reference server cannot
//! start at all.
//!
//! Every case compares stdout, stderr and the exit code byte for byte, except the
//! deliberate differences docs/plugins-java.md lists, which are asserted as documented:
//! an unknown class (the reference prints a `ClassNotFoundException` trace and exits 131;
//! ngd's worker says `no class '...'` and exits 127) and an uncaught exception (the
//! reference exits 131, with its own frames in the trace; ngd's worker exits 1 with the
//! trace a cold `java` prints).

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use ng_tests::jvm::{jdk25_home, nails_server, same};
use ng_tests::plugins::{send_signal, PluginServer};
use ng_tests::{
    both_clients, eqnice, Client, ClientCmd, JavaServer, Output, Server as _, Transport,
};

/// A client run against the reference server.
fn reference(client: Client) -> ClientCmd {
    client
        .cmd()
        .server(JavaServer::shared(Transport::Unix).address())
}

/// One parity case: a label, the client's arguments, its stdin.
type Case = (&'static str, Vec<String>, Option<Vec<u8>>);

/// The parity cases.
fn cases() -> Vec<Case> {
    let long = "x".repeat(20_000);
    vec![
        (
            "empty argument",
            vec!["ngtest.Props".into(), "".into(), "a".into()],
            None,
        ),
        (
            "unicode",
            vec!["ngtest.Props".into(), "héllo wörld ✓ 日本".into()],
            None,
        ),
        ("long argument", vec!["ngtest.Props".into(), long], None),
        (
            "getEnv and cwd",
            vec!["ngtest.Props".into(), "FOO".into(), "PATH".into()],
            None,
        ),
        (
            "System.exit",
            vec!["ngtest.SysExit".into(), "7".into()],
            None,
        ),
        (
            "System.exit in a thread",
            vec!["ngtest.SysExit".into(), "9".into(), "thread".into()],
            None,
        ),
        (
            "exit, then output",
            vec!["ngtest.ExitThenOutput".into()],
            None,
        ),
        (
            "5000 bytes of stdin",
            vec!["ngtest.StdinSum".into()],
            Some(ng_tests::data::binary(5000)),
        ),
        (
            "NonStaticNail",
            vec!["ngtest.NonStatic".into(), "a".into(), "b".into()],
            None,
        ),
        ("ctx.exit", vec!["ngtest.Exit".into(), "3".into()], None),
    ]
}

fn run(cmd: ClientCmd, args: &[String], stdin: &Option<Vec<u8>>) -> Output {
    let mut cmd = cmd.args(args).env("FOO", "bar ✓");
    if let Some(bytes) = stdin {
        cmd = cmd.stdin_bytes(bytes.clone());
    }
    cmd.run()
}

/// Every parity case through `server`, compared with the reference on JDK 17.
fn parity(client: Client, server: &PluginServer) {
    for (label, args, stdin) in cases() {
        let theirs = run(reference(client), &args, &stdin);
        let ours = run(server.cmd(client), &args, &stdin);
        same(&theirs, &ours, label);
    }
}

both_clients! {
    /// The parity cases on JDK 17, against the reference server.
    fn parity_jdk17(client) {
        let server = nails_server(None);
        parity(client, &server);
    }
}

both_clients! {
    /// The same cases through ngd on JDK 25, compared with the reference on JDK 17.
    fn parity_jdk25(client) {
        let server = nails_server(Some(jdk25_home()));
        let out = server.cmd(client).args(["ngtest.Props", "java.version"]).run();
        out.assert_success();
        parity(client, &server);
    }
}

both_clients! {
    /// The deliberate differences, as documented.
    fn deliberate_differences(client) {
        let server = nails_server(None);
        let theirs = reference(client).arg("no.such.Klass").run();
        assert_eq!(theirs.code(), Some(131), "{theirs:?}");
        assert!(theirs.stderr_text().contains("java.lang.ClassNotFoundException: no.such.Klass"), "{theirs:?}");
        let ours = server.cmd(client).arg("no.such.Klass").run();
        assert_eq!(ours.code(), Some(127), "{ours:?}");
        eqnice!("ngw-java: no class 'no.such.Klass' on the classpath\n", ours.stderr_text());

        let theirs = reference(client).arg("ngtest.Throws").run();
        assert_eq!(theirs.code(), Some(131), "{theirs:?}");
        let ours = server.cmd(client).arg("ngtest.Throws").run();
        assert_eq!(ours.code(), Some(1), "{ours:?}");
        eqnice!("about to throw\n", ours.stdout_text());
        eqnice!(
            "Exception in thread \"main\" java.lang.IllegalStateException: boom from a nail\n\
             \tat ngtest.Throws.nailMain(Throws.java:10)\n",
            ours.stderr_text()
        );
    }
}

/// Runs `Tagged <tag> <n>` twice at once through `cmd`; each output must be its own lines.
fn concurrent(make: impl Fn() -> ClientCmd) {
    let lines = 400;
    let a = make()
        .args(["ngtest.Tagged", "A", &lines.to_string()])
        .spawn();
    let b = make()
        .args(["ngtest.Tagged", "B", &lines.to_string()])
        .spawn();
    for (tag, out) in [("A", a.wait()), ("B", b.wait())] {
        out.assert_success();
        let expected: String = (0..lines).map(|i| format!("{tag} {i}\n")).collect();
        eqnice!(expected, out.stdout_text(), "session {tag}");
    }
}

both_clients! {
    /// Two sessions at once keep their outputs apart, on both servers.
    fn concurrent_sessions(client) {
        let server = nails_server(None);
        concurrent(|| reference(client));
        concurrent(|| server.cmd(client));
    }
}

/// Starts `Disconnect <marker>`, kills the client, and waits for the listener's marker.
fn disconnect(cmd: ClientCmd, dir: &Path) {
    let marker = dir.join("marker");
    let running = cmd
        .args(["ngtest.Disconnect", &marker.to_string_lossy()])
        .spawn();
    running.wait_for_stdout("ready", Duration::from_secs(30));
    send_signal(running.pid(), libc::SIGTERM);
    let _ = running.wait();
    // The listener creates the file, then writes it: wait for its whole line.
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::fs::read_to_string(&marker).unwrap_or_default() != "disconnected\n" {
        assert!(
            Instant::now() < deadline,
            "the disconnect listener never wrote its line: {:?}",
            std::fs::read_to_string(&marker)
        );
        thread::sleep(Duration::from_millis(20));
    }
}

both_clients! {
    /// A client that goes fires the nail's disconnect listener, on both servers.
    fn disconnect_listener(client) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ref")).unwrap();
        std::fs::create_dir(dir.path().join("ngd")).unwrap();
        disconnect(reference(client), &dir.path().join("ref"));
        let server = nails_server(None);
        disconnect(server.cmd(client), &dir.path().join("ngd"));
    }
}

both_clients! {
    /// An alias made with ng-alias runs its class, and ng-alias lists it.
    fn aliases(client) {
        let server = nails_server(None);
        server.cmd(client).args(["ng-alias", "props", "ngtest.Props"]).run().assert_success();
        let out = server.cmd(client).args(["props", "x"]).run();
        out.assert_success();
        eqnice!("[x]\ncwd=/\n", out.stdout_text());
    }
}

/// The reference server exits 0 at once on JDK 25, having served nothing: it cannot install
/// its SecurityManager.
#[test]
fn reference_server_fails_on_jdk25() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("ng.sock");
    let classpath = format!(
        "{}:{}",
        ng_tests::bins::nailgun_jar().display(),
        ng_tests::bins::jna_jar().display()
    );
    let out = std::process::Command::new(jdk25_home().join("bin/java"))
        .args(["-cp", &classpath, "com.martiansoftware.nailgun.NGServer"])
        .arg(format!("local:{}", socket.display()))
        .current_dir(dir.path())
        .output()
        .expect("run the reference server on JDK 25");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr
            .contains("UnsupportedOperationException: Setting a Security Manager is not supported"),
        "{stderr}"
    );
}

#[path = "jvm_programs.rs"]
mod programs;

#[path = "jvm_hostile.rs"]
mod hostile;

#[path = "jvm_exact.rs"]
mod exact;

#[path = "jvm_cache.rs"]
mod cache;

#[path = "jvm_ahead.rs"]
mod ahead;

// The exact mode's ends (exit, exceptions, hooks, halt, signals), warm against cold.
#[path = "jvm_exit.rs"]
mod ends;

/// `ngtest.FreshThread` five times through `server`, each run compared with cold `java` on
/// `java_home`'s JDK: every run sees a new thread's state, though the worker ran some of them
/// on a thread it used before (their ids, in the file, repeat).
fn fresh_thread(client: Client, server: &PluginServer, java_home: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let cold_ids = dir.path().join("cold");
    let warm_ids = dir.path().join("warm");
    for run in 0..5 {
        let started = Instant::now();
        let out = std::process::Command::new(java_home.join("bin/java"))
            .arg("-cp")
            .arg(ng_tests::java::nails_dir())
            .arg("ngtest.FreshThread")
            .arg(&cold_ids)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run cold java");
        let cold = Output {
            what: "cold java ngtest.FreshThread".into(),
            status: out.status,
            stdout: out.stdout,
            stderr: out.stderr,
            elapsed: started.elapsed(),
        };
        let warm = server
            .cmd(client)
            .args(["ngtest.FreshThread", &warm_ids.to_string_lossy()])
            .run();
        same(&cold, &warm, &format!("run {run}"));
    }
    let ids = std::fs::read_to_string(&warm_ids).unwrap();
    let mut seen: Vec<&str> = ids.lines().collect();
    let runs = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert!(
        seen.len() < runs,
        "no session ran on a thread used before, so nothing was checked: {ids}"
    );
}

both_clients! {
    /// A session's thread, new or used again, starts as a new `main` thread: JDK 17.
    fn fresh_thread_jdk17(client) {
        let server = nails_server(None);
        fresh_thread(client, &server, &ng_tests::jvm::jdk17_home());
    }
}

both_clients! {
    /// The same on JDK 25.
    fn fresh_thread_jdk25(client) {
        let server = nails_server(Some(jdk25_home()));
        fresh_thread(client, &server, jdk25_home());
    }
}
