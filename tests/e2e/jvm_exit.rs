//! How an exact-mode session ends, warm against cold `java`, on JDK 17 and JDK 25: a plain
//! `main` (`ngtest.Ends`) that returns, throws, calls `System.exit` (from `main`, from a
//! thread after `main` returned, with shutdown hooks that print), calls `Runtime.halt`,
//! leaves a daemon thread running, or is killed by a signal. Each must write the same bytes
//! and end with the same status as cold; the plugin's `exit-early` counter says which warm
//! sessions had their exit status told by the spare before its JVM's teardown, and which
//! were told by `waitpid`, as a cold one is.

use std::path::Path;
use std::process::Command;

use ng_tests::jvm::{jdk17_home, jdk25_home, program_plugin, same};
use ng_tests::plugins::PluginServer;
use ng_tests::{java, Client, Output};

fn server(home: &Path) -> PluginServer {
    let nails = java::nails_dir().to_string_lossy().into_owned();
    PluginServer::start(vec![program_plugin(
        "ends",
        &["ends"],
        &["-cp".into(), nails, "ngtest.Ends".into()],
    )
    .env("JAVA_HOME", &home.to_string_lossy())])
}

fn cold(home: &Path, args: &[&str], dir: &Path) -> Output {
    let started = std::time::Instant::now();
    let out = Command::new(home.join("bin/java"))
        .arg("-cp")
        .arg(java::nails_dir())
        .arg("ngtest.Ends")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    Output {
        what: format!("cold java ngtest.Ends {args:?}"),
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
        elapsed: started.elapsed(),
    }
}

fn counter(server: &PluginServer, name: &str) -> u64 {
    server
        .plugin_report("ends")
        .and_then(|r| {
            r.pointer(&format!("/counters/{name}"))
                .and_then(serde_json::Value::as_u64)
        })
        .unwrap_or(0)
}

fn fallbacks(server: &PluginServer) -> u64 {
    server
        .plugin_report("ends")
        .and_then(|r| {
            r.pointer("/notice_counts/fallback")
                .and_then(serde_json::Value::as_u64)
        })
        .unwrap_or(0)
}

fn every_end_as_cold(home: &Path) {
    use std::os::unix::process::ExitStatusExt as _;
    let server = server(home);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let doomed = dir.join("doomed");
    let doomed = doomed.to_str().unwrap();
    // The first session runs cold (the first spare was started elsewhere); the next spare
    // is started here.
    server.cmd(Client::Ours).arg("ends").cwd(dir).run();
    let cases: [(&[&str], bool); 11] = [
        (&["return"], true),
        (&["throw"], true),
        (&["exit=3"], true),
        (&["exit=0"], true),
        (&["thread-exit=7"], true),
        (&["hook", doomed], true),
        (&["hook-exit=5", doomed], true),
        (&["daemon"], true),
        (&["halt=4"], false),
        (&["term"], false),
        (&["kill"], false),
    ];
    for (args, early) in cases {
        std::fs::write(doomed, b"x").unwrap();
        let theirs = cold(home, args, dir);
        let cold_deleted = !Path::new(doomed).exists();
        std::fs::write(doomed, b"x").unwrap();
        let (told, ran_cold) = (counter(&server, "exit-early"), fallbacks(&server));
        let ours = server
            .cmd(Client::Ours)
            .arg("ends")
            .args(args)
            .cwd(dir)
            .run();
        let log = server.plugin_log("ends");
        same(&theirs, &ours, &format!("{args:?}\n{log}"));
        assert_eq!(
            theirs.status.signal(),
            ours.status.signal(),
            "{args:?}: {theirs:?} {ours:?}"
        );
        assert_eq!(
            cold_deleted,
            !Path::new(doomed).exists(),
            "{args:?}: deleteOnExit"
        );
        assert_eq!(
            fallbacks(&server),
            ran_cold,
            "{args:?}: a spare takes it\n{log}"
        );
        assert_eq!(
            counter(&server, "exit-early"),
            told + u64::from(early),
            "{args:?}: its exit status told early: {early}\n{log}"
        );
    }
}

#[test]
fn every_end_as_cold_jdk17() {
    every_end_as_cold(&jdk17_home());
}

#[test]
fn every_end_as_cold_jdk25() {
    every_end_as_cold(jdk25_home());
}
