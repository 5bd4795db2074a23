//! The JVM worker (`sdk/java`) under test: `ngd` serving the test nails of `tests/java/`
//! (compiled against the reference server's jar) through `ngw-java --nails`, the same nails
//! on the reference Nailgun 0.9.3 server, and the JDKs to run them on.
//!
//! [`nails_server`] starts `ngd` with one plugin, `jvm`, serving classes by name on the JDK
//! given (JDK 17, `java` on `PATH`, when none). [`jdk25_home`] finds the JDK 25 that
//! `scripts/peers/jvm` makes sure of: the Temurin 25 JDK in `/usr/lib/jvm`, or a JDK 25
//! runtime from PyPI. [`same`] compares two runs byte for byte.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::client::Output;
use crate::java;
use crate::plugins::{repo_root, Plugin, PluginServer};

/// `sdk/java/bin/ngw-java`, the worker's launcher (it builds the worker when needed).
pub fn ngw_java() -> PathBuf {
    let path = repo_root().join("sdk/java/bin/ngw-java");
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// The JDK 25 home: `scripts/peers/jvm --java-home-25`.
pub fn jdk25_home() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let out = Command::new(repo_root().join("scripts/peers/jvm"))
            .arg("--java-home-25")
            .output()
            .expect("run scripts/peers/jvm");
        assert!(
            out.status.success(),
            "no JDK 25: run scripts/install-peers\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let home = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert!(
            home.join("bin/java").is_file(),
            "{}: no bin/java",
            home.display()
        );
        home
    })
}

/// The `jvm` plugin: `ngw-java [options] -cp <test nails> --nails`, on `java_home`'s JDK.
pub fn nails_plugin(java_home: Option<&Path>, extra: &[&str]) -> Plugin {
    let mut command = vec![ngw_java().to_string_lossy().into_owned()];
    command.extend(extra.iter().map(|s| s.to_string()));
    command.push("-cp".into());
    command.push(java::nails_dir().to_string_lossy().into_owned());
    command.push("--nails".into());
    let mut plugin = Plugin::new("jvm", &command)
        .set("class_names", true)
        .set("handshake_timeout_ms", 60000);
    if let Some(home) = java_home {
        plugin = plugin.env("JAVA_HOME", &home.to_string_lossy());
    }
    plugin
}

/// `ngd` serving the test nails by class name on `java_home`'s JDK.
pub fn nails_server(java_home: Option<&Path>) -> PluginServer {
    PluginServer::start(vec![nails_plugin(java_home, &[])])
}

/// Asserts that two runs wrote the same bytes and exited the same way.
#[track_caller]
pub fn same(reference: &Output, ours: &Output, context: &str) {
    crate::assert_bytes_eq!(
        reference.stdout,
        ours.stdout,
        "{context}: stdout\n{reference:?}\n{ours:?}"
    );
    crate::assert_bytes_eq!(
        reference.stderr,
        ours.stderr,
        "{context}: stderr\n{reference:?}\n{ours:?}"
    );
    assert_eq!(
        reference.code(),
        ours.code(),
        "{context}: exit code\n{reference:?}\n{ours:?}"
    );
}

/// The JDK 17 home (Debian's `openjdk-17-jdk`): the JDK `java` on `PATH` belongs to.
pub fn jdk17_home() -> PathBuf {
    let java = std::fs::canonicalize(crate::bins::java()).expect("java on PATH");
    java.parent()
        .and_then(Path::parent)
        .expect("java is in <home>/bin")
        .to_path_buf()
}

/// Debian's checkstyle: its class path and main class, as `/usr/bin/checkstyle` runs it.
pub fn checkstyle_classpath() -> String {
    [
        "antlr4-runtime",
        "commons-lang3",
        "commons-beanutils",
        "commons-collections3",
        "guava",
        "commons-cli",
        "commons-logging",
        "picocli",
        "Saxon-HE",
        "reflections",
        "checkstyle",
    ]
    .iter()
    .map(|j| format!("/usr/share/java/{j}.jar"))
    .collect::<Vec<_>>()
    .join(":")
}

/// Debian's groovy 2.4, as `/usr/share/groovy/bin/startGroovy` runs it: JVM options, the
/// class path, the main class and the arguments before the user's.
pub fn groovy_command(java_home: &Path) -> Vec<String> {
    vec![
        "-classpath".into(),
        "/usr/share/groovy/lib/groovy-2.4.21.jar".into(),
        "-Dscript.name=/usr/share/groovy/bin/groovy".into(),
        "-Dprogram.name=groovy".into(),
        "-Dgroovy.starter.conf=/usr/share/groovy/conf/groovy-starter.conf".into(),
        "-Dgroovy.home=/usr/share/groovy".into(),
        format!("-Dtools.jar={}/lib/tools.jar", java_home.display()),
        "org.codehaus.groovy.tools.GroovyStarter".into(),
        "--main".into(),
        "groovy.ui.GroovyMain".into(),
        "--conf".into(),
        "/usr/share/groovy/conf/groovy-starter.conf".into(),
        "--classpath".into(),
        ".".into(),
    ]
}

/// A plugin named `name` serving `commands` with `ngw-java <args>`.
pub fn program_plugin(name: &str, commands: &[&str], args: &[String]) -> Plugin {
    let mut command = vec![ngw_java().to_string_lossy().into_owned()];
    command.extend(args.iter().cloned());
    Plugin::new(name, &command)
        .commands(commands)
        .set("handshake_timeout_ms", 60000)
}
