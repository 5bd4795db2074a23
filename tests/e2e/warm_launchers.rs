//! `ngd warm` of JVM launchers that run `java` by its absolute path, learned by watching
//! their `exec`s: Debian's `/usr/bin/rhino` (`/usr/bin/java`, JDK 17), and a launcher of
//! our own that reads the project's configuration for its JDK (17 or 25), class path and
//! arguments, learned again in each project. Every run goes through the shim and is
//! compared byte for byte with the launcher run cold, with the same arguments, directory,
//! environment and stdin; the server's counters say which path served each run (the
//! plugin's or a derived pool's `sessions`, or a `fallback` notice: the shim ran the
//! launcher itself). Where the system denies watching (a seccomp filter of the test
//! forbids `seccomp(2)`), `ngd warm rhino` refuses and says why.
//!
//! Peers: `rhino` and JDK 25 (`scripts/peers/jvm`), JDK 17 (`scripts/install-peers`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ng_tests::client::ClientCmd;
use ng_tests::{bins, Output};

use crate::ops::User;

/// A user with a `bin/` first on `PATH`, and `ngw-java` in it.
struct Setup {
    user: User,
}

impl Setup {
    fn new() -> Setup {
        let user = User::new();
        let bin = user.dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(ng_tests::jvm::ngw_java(), bin.join("ngw-java")).unwrap();
        Setup { user }
    }

    fn bin(&self) -> PathBuf {
        self.user.dir.path().join("bin")
    }

    fn shim(&self, name: &str) -> PathBuf {
        self.user.home().join(".local/share/ngd/shims").join(name)
    }

    fn conf_d(&self) -> PathBuf {
        self.user.home().join(".config/ngd/conf.d")
    }

    fn path(&self) -> OsString {
        let mut dirs = vec![self.bin(), bins::ngd().parent().unwrap().to_path_buf()];
        dirs.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from));
        std::env::join_paths(dirs).unwrap()
    }

    fn ngd(&self) -> ClientCmd {
        self.user
            .ngd()
            .env("PATH", self.path())
            .timeout(Duration::from_secs(180))
    }

    /// `program` in `dir` with the user's environment and `PWD` (as a shell sets it).
    fn run(&self, program: &Path, dir: &Path) -> ClientCmd {
        self.user
            .with_env(ClientCmd::new("program", program))
            .env("PATH", self.path())
            .env("PWD", dir)
            .cwd(dir)
            .timeout(Duration::from_secs(120))
    }

    /// The server's plugins by name (`ng-stats --json`).
    fn plugins(&self) -> BTreeMap<String, serde_json::Value> {
        let out = self.user.ng().args(["ng-stats", "--json"]).run();
        out.assert_success();
        let doc: serde_json::Value = serde_json::from_str(&out.stdout_text()).unwrap();
        doc["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().unwrap().to_owned(), p.clone()))
            .collect()
    }

    /// Sessions served by `name`'s pools (its own and those derived from it), by pool,
    /// and the `fallback` notices of its own pool (runs the shim made itself).
    fn served(&self, name: &str) -> (BTreeMap<String, u64>, u64) {
        let plugins = self.plugins();
        let sessions = plugins
            .iter()
            .filter(|(n, p)| *n == name || p["derived_from"].as_str() == Some(name))
            .map(|(n, p)| (n.clone(), p["sessions"].as_u64().unwrap()))
            .collect();
        let fallbacks = plugins[name]
            .pointer("/notice_counts/fallback")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        (sessions, fallbacks)
    }
}

/// Which path served one warm run.
#[derive(Debug, PartialEq, Eq)]
enum Served {
    /// A pool of the plugin, by name.
    Warm(String),
    /// The shim ran the launcher itself.
    Direct,
}

/// Runs `with(shim)` and `with(launcher)`, compares them byte for byte, and says which path
/// served the shim's run.
#[track_caller]
fn cold_and_warm(
    s: &Setup,
    name: &str,
    launcher: &Path,
    with: impl Fn(ClientCmd) -> ClientCmd,
    dir: &Path,
) -> (Output, Served) {
    let before = s.served(name);
    let warm = with(s.run(&s.shim(name), dir)).run();
    let after = s.served(name);
    let cold = with(s.run(launcher, dir)).run();
    ng_tests::jvm::same(&cold, &warm, &format!("{name} in {}", dir.display()));
    let grown: Vec<String> = after
        .0
        .iter()
        .filter(|(pool, n)| before.0.get(*pool).copied().unwrap_or(0) < **n)
        .map(|(pool, _)| pool.clone())
        .collect();
    // A pool's session may still be a cold JVM inside the worker (no spare started where
    // it came from), with a `fallback` notice of its own: what counts here is whether a
    // pool served it or the shim ran the launcher itself.
    let path = match grown.as_slice() {
        [pool] => Served::Warm(pool.clone()),
        [] => {
            assert!(after.1 > before.1, "{name}: the shim's run has no notice");
            Served::Direct
        }
        more => panic!("{name}: several pools served one run: {more:?}"),
    };
    (cold, path)
}

/// Runs the same session until a pool serves it (the first runs in a new directory and
/// environment run the launcher directly while its command line is learned there and
/// its pool starts), then twice more; every run as cold. Returns the pool and the last
/// cold output.
#[track_caller]
fn until_warm(
    s: &Setup,
    name: &str,
    launcher: &Path,
    with: impl Fn(ClientCmd) -> ClientCmd,
    dir: &Path,
) -> (String, Output) {
    let (_, first) = cold_and_warm(s, name, launcher, &with, dir);
    assert_eq!(
        first,
        Served::Direct,
        "the first run in a new place is learned"
    );
    let mut pool = None;
    for _ in 0..8 {
        match cold_and_warm(s, name, launcher, &with, dir).1 {
            Served::Warm(p) => {
                pool = Some(p);
                break;
            }
            Served::Direct => std::thread::sleep(Duration::from_millis(500)),
        }
    }
    let pool = pool.unwrap_or_else(|| panic!("{name} never ran warm in {}", dir.display()));
    let mut last = None;
    for _ in 0..2 {
        let (cold, path) = cold_and_warm(s, name, launcher, &with, dir);
        assert_eq!(path, Served::Warm(pool.clone()));
        last = Some(cold);
    }
    (pool, last.unwrap())
}

/// Debian's `/usr/bin/rhino` runs `/usr/bin/java` by its path: `ngd warm rhino` learns its
/// command line without running Rhino, and the shim runs JavaScript files warm, byte for
/// byte as cold, in two directories and with stdin.
#[test]
fn rhino_runs_java_by_its_path_and_is_served_warm_through_its_shim() {
    let rhino = Path::new("/usr/bin/rhino");
    assert!(
        rhino.is_file(),
        "no /usr/bin/rhino: run scripts/install-peers"
    );
    let s = Setup::new();
    let out = s.ngd().args(["warm", "rhino"]).run();
    out.assert_success();
    assert!(
        out.stdout_text().contains("rhino is warm (jvm): rhino"),
        "{out:?}"
    );
    let table = std::fs::read_to_string(s.conf_d().join("rhino.toml")).unwrap();
    let jdk17 = ng_tests::jvm::jdk17_home();
    for needle in [
        "\"org.mozilla.javascript.tools.shell.Main\"".to_owned(),
        "\"/usr/share/java/js.jar:/usr/share/java/jline.jar\"".to_owned(),
        format!("JAVA_HOME = \"{}\"", jdk17.display()),
        "launcher = true".to_owned(),
    ] {
        assert!(table.contains(&needle), "{needle} not in\n{table}");
    }
    let script = "var a = []; for (var i = 0; i < arguments.length; i++) a.push(arguments[i]);\n\
         print('args ' + a.join('|'));\n\
         print('dir ' + java.lang.System.getProperty('user.dir'));\n\
         print('PROBE ' + java.lang.System.getenv('PROBE'));\n\
         var line = new java.io.BufferedReader(new java.io.InputStreamReader(java.lang.System['in'])).readLine();\n\
         print('stdin ' + line);\n\
         java.lang.System.err.println('to stderr');\n\
         java.lang.System.exit(arguments.length);\n";
    for project in ["one", "two"] {
        let dir = s.user.dir.path().join(project);
        std::fs::create_dir(&dir).unwrap();
        let dir = std::fs::canonicalize(dir).unwrap();
        std::fs::write(dir.join("t.js"), script).unwrap();
        let with = |cmd: ClientCmd| {
            cmd.args(["t.js", "a", "b c"])
                .env("PROBE", "hello")
                .stdin_bytes("first line\nsecond\n")
        };
        let (pool, cold) = until_warm(&s, "rhino", rhino, with, &dir);
        // The same command line everywhere: the plugin's own pool.
        assert_eq!(pool, "rhino");
        cold.assert_code(2);
        assert_eq!(
            cold.stdout_text(),
            format!(
                "args a|b c\ndir {}\nPROBE hello\nstdin first line\n",
                dir.display()
            )
        );
        assert_eq!(cold.stderr_text(), "to stderr\n");
    }
}

/// A launcher of our own computes its JDK, class path and arguments from `myapp.conf` in
/// the working directory, sets a variable for the JVM from one of the client's, and runs
/// that JDK's `java` by its path: made warm in one project, it is learned again in another
/// (JDK 25 there, other arguments), served by a pool derived for it, and in the first
/// project with another environment (the variable it sets follows); every run as cold.
#[test]
fn a_launcher_reading_the_projects_configuration_is_learned_again_in_each_project() {
    let s = Setup::new();
    let jdk17 = ng_tests::jvm::jdk17_home();
    let jdk25 = ng_tests::jvm::jdk25_home();
    let launcher = s.bin().join("myapp");
    ng_testkit::exe::write_executable(
        &launcher,
        format!(
            "#!/bin/sh\n\
             # Runs the project's application: its JDK, class path and arguments from\n\
             # ./myapp.conf, relative to the project.\n\
             jdk=17\nclasspath=classes\nappargs=\n\
             [ -f myapp.conf ] && . ./myapp.conf\n\
             export PROBE=\"myapp:$PROBE\"\n\
             case \"$jdk\" in\n  25) home={jdk25} ;;\n  *) home={jdk17} ;;\nesac\n\
             exec \"$home/bin/java\" -cp \"$(pwd)/$classpath\" ngtest.LauncherProbe $appargs \"$@\"\n",
            jdk25 = jdk25.display(),
            jdk17 = jdk17.display(),
        ),
    );
    let project = |name: &str, conf: &str| {
        let dir = s.user.dir.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(ng_tests::java::nails_dir(), dir.join("lib")).unwrap();
        std::fs::write(dir.join("myapp.conf"), conf).unwrap();
        std::fs::canonicalize(dir).unwrap()
    };
    let alpha = project("alpha", "classpath=lib\nappargs=alpha\n");
    let beta = project("beta", "jdk=25\nclasspath=lib\nappargs='beta two'\n");
    let out = s.ngd().args(["warm", "myapp"]).cwd(&alpha).run();
    out.assert_success();
    let table = std::fs::read_to_string(s.conf_d().join("myapp.toml")).unwrap();
    assert!(table.contains("\"alpha\""), "{table}");
    assert!(table.contains("launcher = true"), "{table}");

    let with = |cmd: ClientCmd| cmd.args(["x", "exit=3"]).env("PROBE", "p");
    let (pool, cold) = until_warm(&s, "myapp", &launcher, with, &alpha);
    assert_eq!(pool, "myapp", "alpha's command line is the table's");
    cold.assert_code(3);
    assert_eq!(
        cold.stdout_text(),
        format!(
            "args=alpha|x|exit=3\njava=17\nPROBE=myapp:p\nuser.dir={}\n",
            alpha.display()
        )
    );

    let (pool, cold) = until_warm(&s, "myapp", &launcher, with, &beta);
    assert!(pool.starts_with("myapp~"), "beta's is another: {pool}");
    cold.assert_code(3);
    assert_eq!(
        cold.stdout_text(),
        format!(
            "args=beta|two|x|exit=3\njava=25\nPROBE=myapp:p\nuser.dir={}\n",
            beta.display()
        )
    );

    // Back in alpha with another environment: learned there again, the table's pool.
    let other_env = |cmd: ClientCmd| cmd.args(["y"]).env("PROBE", "q");
    let (pool, cold) = until_warm(&s, "myapp", &launcher, other_env, &alpha);
    assert_eq!(pool, "myapp");
    assert!(cold
        .stdout_text()
        .starts_with("args=alpha|y\njava=17\nPROBE=myapp:q\n"));
}

/// Where the system denies watching a launcher's `exec`s (here a seccomp filter that makes
/// `seccomp(2)` fail, as a container's policy may), `ngd warm rhino` refuses with the
/// reason, and writes nothing.
#[test]
fn where_watching_is_denied_a_launcher_running_java_by_its_path_is_refused() {
    assert!(
        Path::new("/usr/bin/rhino").is_file(),
        "no /usr/bin/rhino: run scripts/install-peers"
    );
    let s = Setup::new();
    let cmd = s.ngd().args(["warm", "rhino"]);
    // The filter holds for the thread that starts ngd, and so for ngd.
    let out = std::thread::spawn(move || {
        ng_sys::seccomp::forbid_filters().expect("a seccomp filter for the test");
        cmd.run()
    })
    .join()
    .unwrap();
    out.assert_code(69);
    let err = out.stderr_text();
    for needle in [
        "rhino",
        "runs java by its path",
        "seccomp user notification",
        "denies",
        "no shim made",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    assert!(!s.conf_d().join("rhino.toml").exists());
    assert!(s.shim("rhino").symlink_metadata().is_err());
}
