//! Real Java programs from Debian's packages through the JVM worker, warm against cold, in
//! the exact mode (the default) and in `--shared`: javac compiling a small project (and one
//! with an error), checkstyle on a file with violations, and `groovy -e`. stdout, stderr and
//! the exit code must be byte-identical to the program's own launcher run cold
//! (`/usr/bin/javac`, `/usr/bin/checkstyle`, `/usr/bin/groovy`), with the same arguments,
//! environment and directory. Shared mode does not apply the client's directory to the
//! JVM, so its runs name files by absolute path.

use std::path::{Path, PathBuf};
use std::process::Command;

use ng_tests::jvm::{checkstyle_classpath, groovy_command, jdk17_home, program_plugin, same};
use ng_tests::plugins::{PluginServer, TAG_VAR};
use ng_tests::{Client, ClientCmd, Output};

/// Runs `program args` cold in `dir` with the clients' environment.
fn cold(program: &str, args: &[String], dir: &Path, env: &[(&str, String)]) -> Output {
    let started = std::time::Instant::now();
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(dir).env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the program cold");
    Output {
        what: format!("cold {program} {args:?}"),
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
        elapsed: started.elapsed(),
    }
}

fn env() -> Vec<(&'static str, String)> {
    vec![
        ("PATH", "/usr/local/bin:/usr/bin:/bin".to_string()),
        ("JAVA_HOME", jdk17_home().to_string_lossy().into_owned()),
        ("LANG", "C.UTF-8".to_string()),
    ]
}

fn warm(
    server: &PluginServer,
    client: Client,
    command: &str,
    args: &[String],
    dir: &Path,
) -> Output {
    let mut cmd: ClientCmd = server.cmd(client).arg(command).args(args).cwd(dir);
    for (k, v) in env() {
        cmd = cmd.env(k, v);
    }
    cmd.env(TAG_VAR, server.tag()).run()
}

/// A small project: two classes that compile, one that does not.
fn project(root: &Path) -> PathBuf {
    let src = root.join("src/p");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("A.java"),
        "package p;\npublic class A { public static int f() { return B.g() + 1; } }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("B.java"),
        "package p;\nclass B { static int g() { return 41; } }\n",
    )
    .unwrap();
    std::fs::write(
        root.join("Bad.java"),
        "public class Bad {\n  void f() { int x = \"no\"; undefined(); }\n}\n",
    )
    .unwrap();
    std::fs::write(
        root.join("Foo.java"),
        "public class Foo {\n  int x;\n    public void f(){ int Y=1; }\n}\n",
    )
    .unwrap();
    root.to_path_buf()
}

/// A case's arguments, for the tree it runs in.
type Arguments<'a> = Box<dyn Fn(&Path) -> Vec<String> + 'a>;

/// Every program case, in `mode` (`[]` exact, `["--shared"]`), for `client`.
fn programs(client: Client, mode: &[&str]) {
    let shared = !mode.is_empty();
    let mut javac = mode.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    javac.push("com.sun.tools.javac.Main".into());
    let mut checkstyle = mode.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    checkstyle.extend([
        "-classpath".into(),
        checkstyle_classpath(),
        "com.puppycrawl.tools.checkstyle.Main".into(),
    ]);
    let mut groovy = mode.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    groovy.extend(groovy_command(&jdk17_home()));
    let server = PluginServer::builder()
        .env("JAVA_HOME", &jdk17_home().to_string_lossy())
        .plugin(program_plugin("javac", &["javac"], &javac))
        .plugin(program_plugin("checkstyle", &["checkstyle"], &checkstyle))
        .plugin(program_plugin("groovy", &["groovy"], &groovy))
        .start();

    let tmp = tempfile::tempdir().unwrap();
    let cold_dir = project(&tmp.path().join("cold"));
    let warm_dir = project(&tmp.path().join("warm"));
    // Paths as the program sees them: relative in exact mode, absolute in shared mode (the
    // two trees differ, so each side gets its own).
    let path = |dir: &Path, rel: &str| {
        if shared {
            dir.join(rel).to_string_lossy().into_owned()
        } else {
            rel.to_string()
        }
    };
    let cases: Vec<(&str, &str, Arguments<'_>)> = vec![
        (
            "javac",
            "/usr/bin/javac",
            Box::new(move |d: &Path| {
                vec![
                    "-d".into(),
                    path(d, "out"),
                    path(d, "src/p/A.java"),
                    path(d, "src/p/B.java"),
                ]
            }),
        ),
        (
            "javac",
            "/usr/bin/javac",
            Box::new(move |d: &Path| vec!["-d".into(), path(d, "out"), path(d, "Bad.java")]),
        ),
        (
            "checkstyle",
            "/usr/bin/checkstyle",
            Box::new(move |d: &Path| {
                vec!["-c".into(), "/sun_checks.xml".into(), path(d, "Foo.java")]
            }),
        ),
        (
            "groovy",
            "/usr/bin/groovy",
            Box::new(|_: &Path| {
                vec![
                    "-e".into(),
                    "println \"hi \" + (1+1); System.err.println(\"on stderr\"); System.exit(3)"
                        .into(),
                ]
            }),
        ),
    ];
    for round in 0..2 {
        for (command, launcher, args) in &cases {
            let theirs = cold(launcher, &args(&cold_dir), &cold_dir, &env());
            let ours = warm(&server, client, command, &args(&warm_dir), &warm_dir);
            // Paths in the output name each side's own tree.
            let ours = Output {
                stdout: replace(&ours.stdout, &warm_dir, &cold_dir),
                stderr: replace(&ours.stderr, &warm_dir, &cold_dir),
                ..ours
            };
            same(
                &theirs,
                &ours,
                &format!(
                    "{command} {:?} ({}, run {round})",
                    args(&cold_dir),
                    if shared { "shared" } else { "exact" }
                ),
            );
        }
    }
    assert!(
        warm_dir.join("out/p/A.class").is_file(),
        "javac wrote no classes warm"
    );
}

fn replace(bytes: &[u8], from: &Path, to: &Path) -> Vec<u8> {
    String::from_utf8_lossy(bytes)
        .replace(&*from.to_string_lossy(), &to.to_string_lossy())
        .into_bytes()
}

#[test]
fn exact_ours() {
    programs(Client::Ours, &[]);
}

#[test]
fn exact_c_client() {
    programs(Client::CClient, &[]);
}

#[test]
fn shared_ours() {
    programs(Client::Ours, &["--shared"]);
}

#[test]
fn shared_c_client() {
    programs(Client::CClient, &["--shared"]);
}
