//! The exact mode's class-data cache, on JDK 17 (a static AppCDS archive) and JDK 25 (an
//! AOT cache): a program in a jar, run through `ngw-java -cp <jar> CacheProbe` and by cold
//! `java -cp <jar> CacheProbe`, the same bytes and exit code every time, while the plugin's
//! counters (`ng-stats --json`, `count` notices) say whether each session's JVM mapped the
//! cache. The first session records its classes, the cache is made in the background, a
//! later session uses it; a jar replaced between runs makes a new cache and the new code
//! runs; an archive made by another JDK, or for the jar before it was replaced, put where
//! the cache would be, is never used (and what the JVM says about it reaches no session).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ng_tests::jvm::{jdk17_home, jdk25_home, program_plugin, same};
use ng_tests::plugins::PluginServer;
use ng_tests::{Client, Output};

const PROBE: &str = r#"
import java.util.*;
import java.util.stream.*;

public class CacheProbe {
    static final String VERSION = "@VERSION@";

    public static void main(String[] args) {
        List<String> words = new ArrayList<>(List.of(args));
        Collections.sort(words);
        Map<Integer, List<String>> byLength = words.stream().collect(Collectors.groupingBy(String::length, TreeMap::new, Collectors.toList()));
        System.out.println("version " + VERSION + " probe=" + System.getenv("PROBE"));
        byLength.forEach((n, w) -> System.out.printf("%d: %s%n", n, String.join(",", w)));
        System.err.println("err " + words.size());
        if (words.contains("exit")) {
            System.exit(3);
        }
    }
}
"#;

/// Compiles `CacheProbe` printing `version` into `dir/probe.jar` (replacing it).
fn build_jar(dir: &Path, version: &str) -> PathBuf {
    let src = dir.join("src");
    let classes = dir.join("classes");
    let _ = std::fs::remove_dir_all(&classes);
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("CacheProbe.java"),
        PROBE.replace("@VERSION@", version),
    )
    .unwrap();
    let bin = jdk17_home().join("bin");
    let ok = Command::new(bin.join("javac"))
        .args(["--release", "17", "-d"])
        .arg(&classes)
        .arg(src.join("CacheProbe.java"))
        .status()
        .unwrap();
    assert!(ok.success(), "javac");
    let jar = dir.join("probe.jar");
    let tmp = dir.join("probe.jar.tmp");
    let ok = Command::new(bin.join("jar"))
        .arg("cf")
        .arg(&tmp)
        .arg("-C")
        .arg(&classes)
        .arg(".")
        .status()
        .unwrap();
    assert!(ok.success(), "jar");
    std::fs::rename(&tmp, &jar).unwrap();
    jar
}

fn cold(home: &Path, jar: &Path, args: &[&str], dir: &Path, probe: &str) -> Output {
    let started = Instant::now();
    let out = Command::new(home.join("bin/java"))
        .arg("-cp")
        .arg(jar)
        .arg("CacheProbe")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("PROBE", probe)
        .output()
        .unwrap();
    Output {
        what: format!("cold java CacheProbe {args:?}"),
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
        elapsed: started.elapsed(),
    }
}

/// The plugin's counter `name` (`ng-stats --json`, `counters`).
fn counter(server: &PluginServer, name: &str) -> u64 {
    server
        .plugin_report("probe")
        .and_then(|r| {
            r.pointer(&format!("/counters/{name}"))
                .and_then(|v| v.as_u64())
        })
        .unwrap_or(0)
}

fn archives(state: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(state.join("jvm-cache"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jsa"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

struct Probe<'a> {
    home: &'a Path,
    server: PluginServer,
    jar: PathBuf,
    dir: PathBuf,
    runs: usize,
}

impl Probe<'_> {
    /// One session warm and the same cold; identical. Returns whether it used the cache.
    fn run(&mut self) -> bool {
        let dir = self.dir.clone();
        self.run_in(&dir)
    }

    /// [`Probe::run`] from `dir`.
    fn run_in(&mut self, dir: &Path) -> bool {
        self.runs += 1;
        let used = counter(&self.server, "cache-used");
        let unused = counter(&self.server, "cache-unused");
        let probe = format!("p{}", self.runs);
        let args: Vec<&str> = if self.runs % 2 == 0 {
            vec!["bb", "a", "ccc", "exit"]
        } else {
            vec!["x", "yy"]
        };
        let theirs = cold(self.home, &self.jar, &args, dir, &probe);
        let ours = self
            .server
            .cmd(Client::Ours)
            .arg("probe")
            .args(&args)
            .cwd(dir)
            .env("PROBE", &probe)
            .run();
        same(&theirs, &ours, &format!("run {}", self.runs));
        let (u, n) = (
            counter(&self.server, "cache-used"),
            counter(&self.server, "cache-unused"),
        );
        assert_eq!(
            u + n,
            used + unused + 1,
            "one counter per session\n{}",
            self.server.plugin_log("probe")
        );
        u > used
    }

    /// Runs sessions until one uses the cache (the spare started before it was made
    /// serves one without).
    fn until_used(&mut self) {
        for _ in 0..4 {
            if self.run() {
                return;
            }
        }
        panic!(
            "no session used the cache\n{}",
            self.server.plugin_log("probe")
        );
    }

    fn wait_made(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(180);
        while counter(&self.server, "cache-made") < n {
            assert!(
                Instant::now() < deadline,
                "no cache made\n{}",
                self.server.plugin_log("probe")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Puts `from`'s bytes in `to` (archives may be read-only).
fn put(to: &Path, bytes: &[u8]) {
    std::fs::remove_file(to).unwrap();
    std::fs::write(to, bytes).unwrap();
}

fn probe_server(home: &Path, state: &Path, jar: &Path) -> PluginServer {
    let plugin = program_plugin(
        "probe",
        &["probe"],
        &[
            "-cp".into(),
            jar.to_string_lossy().into_owned(),
            "CacheProbe".into(),
        ],
    )
    .env("JAVA_HOME", &home.to_string_lossy())
    .env("NGW_STATE_DIR", &state.to_string_lossy());
    PluginServer::start(vec![plugin])
}

/// The cycle on one JDK, with its cache in `state`: its directory (with `probe.jar`) and
/// the archive it made last.
fn cycle(home: &Path, state: &Path) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let jar = build_jar(tmp.path(), "one");
    let mut p = Probe {
        home,
        server: probe_server(home, state, &jar),
        jar: jar.clone(),
        dir: tmp.path().to_path_buf(),
        runs: 0,
    };
    let before = archives(state);
    // The first session records; none used a cache.
    assert!(!p.run(), "the first session used a cache");
    p.wait_made(1);
    p.until_used();
    // From another directory, where no spare was started: the cold way uses it too.
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    assert!(
        p.run_in(&elsewhere),
        "a cold-way session did not use the cache"
    );
    let first = archives(state);
    assert_eq!(first.len(), before.len() + 1, "{first:?}");

    // A replaced jar: the new code runs, and a new cache is made and used.
    std::thread::sleep(Duration::from_millis(1100));
    build_jar(tmp.path(), "two, longer");
    p.run();
    p.wait_made(2);
    p.until_used();
    let second = archives(state);
    assert_eq!(second.len(), first.len() + 1, "{second:?}");
    let newest = second.iter().find(|a| !first.contains(a)).unwrap().clone();
    let older = first.iter().find(|a| !before.contains(a)).unwrap().clone();

    // The archive made for the jar before it was replaced, where the current one is: the
    // JVM refuses it, silently. (The spare ready now mapped the right one; the next ones
    // start after the swap.)
    let kept = std::fs::read(&newest).unwrap();
    put(&newest, &std::fs::read(&older).unwrap());
    p.run();
    for _ in 0..2 {
        assert!(!p.run(), "a session used the cache of the replaced jar");
    }
    put(&newest, &kept);
    (tmp, newest)
}

#[test]
fn class_data_cache_on_jdk17_and_jdk25() {
    let state = tempfile::tempdir().unwrap();
    let (d17, a17) = cycle(&jdk17_home(), state.path());
    let (d25, a25) = cycle(jdk25_home(), state.path());
    assert_ne!(a17, a25);

    // JDK 17's archive where JDK 25's would be, and the other way round: never used.
    let (k17, k25) = (std::fs::read(&a17).unwrap(), std::fs::read(&a25).unwrap());
    put(&a25, &k17);
    put(&a17, &k25);
    for (home, dir) in [(jdk17_home(), d17), (jdk25_home().to_path_buf(), d25)] {
        let jar = dir.path().join("probe.jar");
        let mut p = Probe {
            home: &home,
            server: probe_server(&home, state.path(), &jar),
            jar,
            dir: dir.path().to_path_buf(),
            runs: 0,
        };
        for _ in 0..2 {
            assert!(!p.run(), "{}: used another JDK's cache", home.display());
        }
    }
}
