//! The exact mode's spares that initialise the main class ahead, on JDK 17 and JDK 25: for
//! each probe, a main class whose static initialiser reads the environment, the directory,
//! the time zone, stdin's first line, system properties or `System.console()`, prints, or
//! writes a file, run by cold `java -cp <jar> Probe` and through ngd several times in a row,
//! with the environment and the directory changing between runs: the same bytes and exit
//! code (and the same file) every time, while the plugin's counters (`ahead-used`,
//! `ahead-discarded`) say whether each session ran on a spare that went ahead. A spare goes
//! ahead once two sessions in a row came with the same environment, directory and kinds of
//! descriptors, so a run is served ahead exactly when it and the two before it share those.
//! Initialisers that read stdin, print or write a file never serve a session: their spare
//! is discarded once, and the program's later spares (in a new worker too) do not go ahead.
//! And a real program whose main class does its start in its initialiser: Debian's clojure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ng_tests::jvm::{jdk17_home, jdk25_home, program_plugin, same};
use ng_tests::plugins::{PluginServer, TAG_VAR};
use ng_tests::{Client, Output};
use serde_json::Value as Json;

const PROBES: &[(&str, &str)] = &[
    (
        "AheadEnv",
        r#"
import java.util.*;

public class AheadEnv {
    static final String PROBE = System.getenv("PROBE");
    static final Map<String, String> ENV = new TreeMap<>(System.getenv());

    public static void main(String[] args) {
        System.out.println("init PROBE=" + PROBE + " main PROBE=" + System.getenv("PROBE"));
        ENV.forEach((k, v) -> System.out.println(k + "=" + v));
    }
}
"#,
    ),
    (
        "AheadDir",
        r#"
import java.io.*;
import java.nio.file.*;

public class AheadDir {
    static final String DIR = System.getProperty("user.dir");
    static final String CANONICAL = canonical();
    static final String ABSOLUTE = Path.of("rel").toAbsolutePath().toString();

    static String canonical() {
        try {
            return new File(".").getCanonicalPath();
        } catch (IOException e) {
            return e.toString();
        }
    }

    public static void main(String[] args) {
        System.out.println("init dir=" + DIR + " canonical=" + CANONICAL + " absolute=" + ABSOLUTE);
        System.out.println("main dir=" + System.getProperty("user.dir") + " absolute=" + new File("rel").getAbsolutePath());
    }
}
"#,
    ),
    (
        "AheadTz",
        r#"
import java.time.*;
import java.util.*;

public class AheadTz {
    static final String TZ = TimeZone.getDefault().getID();
    static final String ZONE = ZoneId.systemDefault().toString();
    static final String PROP = System.getProperty("user.timezone");

    public static void main(String[] args) {
        System.out.println("init tz=" + TZ + " zone=" + ZONE + " user.timezone=" + PROP);
        System.out.println("main tz=" + TimeZone.getDefault().getID());
    }
}
"#,
    ),
    (
        "AheadStdin",
        r#"
import java.io.*;

public class AheadStdin {
    static final String FIRST = first();

    static String first() {
        try {
            return new BufferedReader(new InputStreamReader(System.in)).readLine();
        } catch (IOException e) {
            return e.toString();
        }
    }

    public static void main(String[] args) {
        System.out.println("first=" + FIRST);
    }
}
"#,
    ),
    (
        "AheadProp",
        r#"
public class AheadProp {
    static final String CP = System.getProperty("java.class.path");
    static final String PROP = System.getProperty("ahead.prop");
    static final String DIR = System.getProperty("user.dir");
    static final String ENCODINGS = System.getProperty("file.encoding") + " " + System.getProperty("sun.jnu.encoding")
            + " " + System.getProperty("native.encoding");
    static final boolean OURS = System.getProperties().stringPropertyNames().stream()
            .anyMatch(n -> n.startsWith("ngw.") || n.equals("jna.encoding"));

    public static void main(String[] args) {
        System.out.println("init cp=" + CP + " prop=" + PROP + " dir=" + DIR + " encodings=" + ENCODINGS
                + " worker's properties=" + OURS);
        System.out.println("main prop=" + System.getProperty("ahead.prop"));
    }
}
"#,
    ),
    (
        "AheadConsole",
        r#"
public class AheadConsole {
    static final boolean CONSOLE = System.console() != null;

    public static void main(String[] args) {
        System.out.println("init console=" + CONSOLE + " main console=" + (System.console() != null));
    }
}
"#,
    ),
    (
        "AheadPrint",
        r#"
public class AheadPrint {
    static {
        System.out.println("printed by the initialiser");
    }

    public static void main(String[] args) {
        System.out.println("main");
    }
}
"#,
    ),
    (
        "AheadFile",
        r#"
import java.io.*;
import java.nio.file.*;

public class AheadFile {
    static {
        try (FileWriter w = new FileWriter("init.log", true)) {
            w.write("initialised\n");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public static void main(String[] args) throws IOException {
        System.out.print(Files.readString(Path.of("init.log")));
    }
}
"#,
    ),
];

/// Every probe compiled (JDK 17, `--release 17`) into `dir/ahead.jar`.
fn build_jar(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    let classes = dir.join("classes");
    std::fs::create_dir_all(&src).unwrap();
    let mut files = Vec::new();
    for (name, text) in PROBES {
        let f = src.join(format!("{name}.java"));
        std::fs::write(&f, text).unwrap();
        files.push(f);
    }
    let bin = jdk17_home().join("bin");
    let ok = Command::new(bin.join("javac"))
        .args(["--release", "17", "-d"])
        .arg(&classes)
        .args(&files)
        .status()
        .unwrap();
    assert!(ok.success(), "javac");
    let jar = dir.join("ahead.jar");
    let ok = Command::new(bin.join("jar"))
        .arg("cf")
        .arg(&jar)
        .arg("-C")
        .arg(&classes)
        .arg(".")
        .status()
        .unwrap();
    assert!(ok.success(), "jar");
    jar
}

/// A JVM option both ways run with.
const PROP: &str = "-Dahead.prop=set on the command line";

fn probe_server(home: &Path, state: &Path, jar: &Path, class: &str) -> PluginServer {
    let plugin = program_plugin(
        "probe",
        &["probe"],
        &[
            PROP.into(),
            "-cp".into(),
            jar.to_string_lossy().into_owned(),
            class.into(),
        ],
    )
    .env("JAVA_HOME", &home.to_string_lossy())
    .env("NGW_STATE_DIR", &state.to_string_lossy());
    PluginServer::start(vec![plugin])
}

/// The plugin's counter `name` (`ng-stats --json`, `counters`).
fn counter(server: &PluginServer, name: &str) -> u64 {
    server
        .plugin_report("probe")
        .and_then(|r| {
            r.pointer(&format!("/counters/{name}"))
                .and_then(Json::as_u64)
        })
        .unwrap_or(0)
}

/// The plugin's notices of `kind` so far, and the messages of those it keeps.
fn notices(server: &PluginServer, kind: &str) -> (u64, Vec<String>) {
    let report = server.plugin_report("probe").unwrap_or_default();
    let count = report
        .pointer(&format!("/notice_counts/{kind}"))
        .and_then(Json::as_u64)
        .unwrap_or(0);
    let messages = report
        .get("notices")
        .and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter(|n| n["kind"] == kind)
                .filter_map(|n| n["message"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (count, messages)
}

/// One run: its directory (cold and warm may each have their own) and the values that change.
#[derive(Clone)]
struct Run {
    dir: &'static str,
    probe: &'static str,
    tz: &'static str,
}

/// Runs that change directory and environment: each is served ahead exactly when it and the
/// two before it have the same (see the file comment).
const RUNS: &[Run] = &[
    Run {
        dir: "a",
        probe: "one",
        tz: "Europe/Paris",
    },
    Run {
        dir: "a",
        probe: "one",
        tz: "Europe/Paris",
    },
    Run {
        dir: "a",
        probe: "one",
        tz: "Europe/Paris",
    },
    Run {
        dir: "a",
        probe: "one",
        tz: "Europe/Paris",
    },
    Run {
        dir: "b",
        probe: "one",
        tz: "Europe/Paris",
    },
    Run {
        dir: "b",
        probe: "two ✓",
        tz: "Asia/Tokyo",
    },
    Run {
        dir: "b",
        probe: "two ✓",
        tz: "Asia/Tokyo",
    },
    Run {
        dir: "b",
        probe: "two ✓",
        tz: "Asia/Tokyo",
    },
];

fn same_key(a: &Run, b: &Run) -> bool {
    a.dir == b.dir && a.probe == b.probe && a.tz == b.tz
}

/// Whether run `k` of `runs` is served by a spare that went ahead (for a program that may).
fn served_ahead(runs: &[Run], k: usize) -> bool {
    k >= 2 && same_key(&runs[k], &runs[k - 1]) && same_key(&runs[k - 1], &runs[k - 2])
}

const STDIN: &[u8] = b"the first line\nthe second line\n";

struct Probe<'a> {
    home: &'a Path,
    jar: &'a Path,
    class: &'a str,
    server: PluginServer,
    /// Cold runs' directories are under `cold`, warm runs' under `warm` (`AheadFile` writes
    /// one file in each), else both under `cold`.
    cold: PathBuf,
    warm: PathBuf,
}

impl Probe<'_> {
    fn cold(&self, run: &Run) -> Output {
        let dir = self.cold.join(run.dir);
        let started = Instant::now();
        let mut child = Command::new(self.home.join("bin/java"))
            .arg(PROP)
            .arg("-cp")
            .arg(self.jar)
            .arg(self.class)
            .current_dir(&dir)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env(TAG_VAR, self.server.tag())
            .env("PROBE", run.probe)
            .env("TZ", run.tz)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write as _;
            let _ = child.stdin.take().unwrap().write_all(STDIN);
        }
        let out = child.wait_with_output().unwrap();
        Output {
            what: format!("cold java {} in {}", self.class, run.dir),
            status: out.status,
            stdout: out.stdout,
            stderr: out.stderr,
            elapsed: started.elapsed(),
        }
    }

    /// Run `k` of `runs` cold and warm: identical, and (the returned value) whether the
    /// warm one was served ahead.
    fn run(&self, runs: &[Run], k: usize) -> bool {
        let run = &runs[k];
        let used = counter(&self.server, "ahead-used");
        let theirs = self.cold(run);
        let ours = self
            .server
            .cmd(Client::Ours)
            .arg("probe")
            .cwd(self.warm.join(run.dir))
            .env("PROBE", run.probe)
            .env("TZ", run.tz)
            .stdin_bytes(STDIN.to_vec())
            .run();
        let context = format!("{} run {k} in {} ({})", self.class, run.dir, run.probe);
        same(&theirs, &ours, &context);
        if self.cold != self.warm {
            let read = |d: &Path| std::fs::read(d.join(run.dir).join("init.log")).ok();
            assert_eq!(read(&self.cold), read(&self.warm), "{context}: init.log");
        }
        let now = counter(&self.server, "ahead-used");
        assert!(now <= used + 1, "{context}: {used} -> {now}");
        now > used
    }
}

/// Runs [`RUNS`] with `class` on `home`'s JDK; `clean`: whether its initialiser may go
/// ahead (else its first spare that goes ahead is discarded, and no later one tries).
fn probe(home: &Path, class: &str, clean: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let jar = build_jar(tmp.path());
    let state = tmp.path().join("state");
    let (cold, warm) = (tmp.path().join("cold"), tmp.path().join("warm"));
    for d in ["a", "b"] {
        std::fs::create_dir_all(cold.join(d)).unwrap();
        std::fs::create_dir_all(warm.join(d)).unwrap();
    }
    let separate = class == "AheadFile";
    let p = Probe {
        home,
        jar: &jar,
        class,
        server: probe_server(home, &state, &jar, class),
        warm: if separate { warm.clone() } else { cold.clone() },
        cold: cold.clone(),
    };
    for k in 0..RUNS.len() {
        let ahead = p.run(RUNS, k);
        let expected = clean && served_ahead(RUNS, k);
        assert_eq!(
            ahead,
            expected,
            "{class} on {}: run {k} served ahead: {ahead}, expected {expected}\n{}",
            home.display(),
            p.server.plugin_log("probe")
        );
    }
    if clean {
        assert_eq!(
            counter(&p.server, "ahead-discarded"),
            0,
            "{}",
            p.server.plugin_log("probe")
        );
        return;
    }
    // Discarded once, said why; remembered: a new worker's spares do not go ahead.
    p.server.wait_plugin("probe", Duration::from_secs(60), |r| {
        r.pointer("/counters/ahead-discarded")
            .and_then(Json::as_u64)
            == Some(1)
    });
    let (n, messages) = notices(&p.server, "ahead");
    assert_eq!(n, 1, "{messages:?}");
    assert!(
        messages.iter().any(|m| m.contains("no longer initialise")),
        "{messages:?}"
    );
    drop(p);
    let again = Probe {
        home,
        jar: &jar,
        class,
        server: probe_server(home, &state, &jar, class),
        warm: if separate { warm.clone() } else { cold.clone() },
        cold,
    };
    for k in 0..3 {
        assert!(
            !again.run(&RUNS[..3], k),
            "{class}: served ahead after it was remembered"
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        counter(&again.server, "ahead-discarded"),
        0,
        "{}",
        again.server.plugin_log("probe")
    );
}

macro_rules! ahead_tests {
    ($($name:ident: $class:literal, $clean:expr;)*) => {
        $(
            #[test]
            fn $name() {
                probe(&jdk17_home(), $class, $clean);
                probe(jdk25_home(), $class, $clean);
            }
        )*
    };
}

ahead_tests! {
    ahead_reads_the_environment: "AheadEnv", true;
    ahead_reads_the_directory: "AheadDir", true;
    ahead_reads_the_time_zone: "AheadTz", true;
    ahead_reads_system_properties: "AheadProp", true;
    ahead_asks_for_the_console: "AheadConsole", true;
    ahead_never_reads_stdin: "AheadStdin", false;
    ahead_never_prints: "AheadPrint", false;
    ahead_never_writes_a_file: "AheadFile", false;
}

/// Debian's clojure, as `/usr/bin/clojure` runs it: its main class's initialiser loads
/// `clojure.core`. Warm as cold, five runs from one place on each JDK, served ahead from the
/// third.
#[test]
fn clojure_goes_ahead_as_cold() {
    const JAR: &str = "/usr/share/java/clojure-1.11.jar";
    assert!(
        Path::new(JAR).is_file(),
        "{JAR} is missing: run scripts/install-peers"
    );
    let expr = r#"(println (System/getenv "PROBE") (System/getProperty "user.dir") *clojure-version* (count (all-ns)))"#;
    for home in [jdk17_home(), jdk25_home().to_path_buf()] {
        let tmp = tempfile::tempdir().unwrap();
        let plugin = program_plugin(
            "probe",
            &["probe"],
            &["-cp".into(), JAR.into(), "clojure.main".into()],
        )
        .env("JAVA_HOME", &home.to_string_lossy())
        .env("NGW_STATE_DIR", &tmp.path().join("state").to_string_lossy());
        let server = PluginServer::start(vec![plugin]);
        for k in 0..5 {
            let used = counter(&server, "ahead-used");
            let started = Instant::now();
            let out = Command::new(home.join("bin/java"))
                .args(["-cp", JAR, "clojure.main", "-e", expr])
                .current_dir(tmp.path())
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env(TAG_VAR, server.tag())
                .env("PROBE", "clj")
                .output()
                .unwrap();
            let theirs = Output {
                what: "cold clojure".into(),
                status: out.status,
                stdout: out.stdout,
                stderr: out.stderr,
                elapsed: started.elapsed(),
            };
            let ours = server
                .cmd(Client::Ours)
                .args(["probe", "-e", expr])
                .cwd(tmp.path())
                .env("PROBE", "clj")
                .run();
            same(
                &theirs,
                &ours,
                &format!("clojure run {k} on {}", home.display()),
            );
            let ahead = counter(&server, "ahead-used") > used;
            assert_eq!(
                ahead,
                k >= 2,
                "clojure run {k} on {}\n{}",
                home.display(),
                server.plugin_log("probe")
            );
        }
    }
}
