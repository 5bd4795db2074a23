//! What `ngd bench`, `ngd check` and `ngd warm --check` share: running a program and
//! capturing what it did, comparing two runs, summing up timings, finding programs as a
//! shell would (and `ng`), and a private `ngd` to run a command on.
//!
//! * [`run_once`] runs a [`Spec`] in this process's environment and directory and gives
//!   its [`Outcome`]: stdout, stderr, the exit code as a shell reports it, spawn to reaped.
//! * [`differences`] says how two outcomes differ, one line per stream; [`Summary`] gives
//!   median and spread of some durations.
//! * [`find_program`] finds a name as a shell would, [`is_ng`] tells the `ng` client (and
//!   links to it, the shims) apart, [`ng_binary`] finds `ng` next to `ngd`.
//! * [`server_commands`] asks a server what it offers; [`AdHocServer`] is a private
//!   `ngd serve` on a temporary socket, stopped on drop.
//! * [`conclude`] ends `ngd bench` and `ngd check` alike: the report, then the exit status.

use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ng_server::config::ListenAddr;

/// Exit status: a difference between cold and warm.
pub const EXIT_DIFFERENT: u8 = 1;
/// Exit status: the command does not exist (`EX_NOINPUT`).
pub const EXIT_NOT_FOUND: u8 = 66;
/// Exit status: the command cannot be served warm (`EX_UNAVAILABLE`).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Exit status: a program could not be started (`EX_OSERR`).
pub const EXIT_OSERR: u8 = 71;

/// How long an ad hoc server may take to become ready (it starts its plugins' workers).
const AD_HOC_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// One way of running the command.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Bytes fed to its stdin (`None`: `/dev/null`).
    pub stdin: Option<std::sync::Arc<Vec<u8>>>,
}

impl Spec {
    /// `program args...` with stdin from `/dev/null`.
    pub fn new(program: impl Into<PathBuf>, args: Vec<OsString>) -> Self {
        Self {
            program: program.into(),
            args,
            stdin: None,
        }
    }
}

/// What one run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Everything written to stdout.
    pub stdout: Vec<u8>,
    /// Everything written to stderr.
    pub stderr: Vec<u8>,
    /// The exit code as a shell reports it (128 + N for a signal).
    pub code: i32,
    /// Spawn to reaped.
    pub elapsed: Duration,
}

/// Runs `spec` once in this process's environment and directory, capturing its output.
pub fn run_once(spec: &Spec) -> std::io::Result<Outcome> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let feeder = match (&spec.stdin, child.stdin.take()) {
        (Some(bytes), Some(mut pipe)) => {
            let bytes = bytes.clone();
            // A command that does not read all of its input closes the pipe: not an error.
            Some(std::thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            }))
        }
        _ => None,
    };
    let output = child.wait_with_output()?;
    let elapsed = started.elapsed();
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let code = match (output.status.code(), output.status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => -1,
    };
    Ok(Outcome {
        stdout: output.stdout,
        stderr: output.stderr,
        code,
        elapsed,
    })
}

/// How `warm` differs from `reference`, one line per stream that differs.
pub fn differences(reference: &Outcome, other: &Outcome) -> Vec<String> {
    let mut out = Vec::new();
    for (stream, a, b) in [
        ("stdout", &reference.stdout, &other.stdout),
        ("stderr", &reference.stderr, &other.stderr),
    ] {
        if a != b {
            out.push(describe_difference(stream, a, b));
        }
    }
    if reference.code != other.code {
        out.push(format!(
            "exit code: {} against {}",
            reference.code, other.code
        ));
    }
    out
}

/// `stream: N bytes against M; first difference at line L: "..." against "..."`.
fn describe_difference(stream: &str, a: &[u8], b: &[u8]) -> String {
    let at = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let line = a[..at].iter().filter(|&&c| c == b'\n').count() + 1;
    let line_start = a[..at]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |p| p + 1);
    let excerpt = |s: &[u8]| {
        let rest = &s[line_start.min(s.len())..];
        let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
        let text = String::from_utf8_lossy(&rest[..end.min(120)]).into_owned();
        format!("{text:?}")
    };
    format!(
        "{stream}: {} bytes against {}; first difference on line {line}: {} against {}",
        a.len(),
        b.len(),
        excerpt(a),
        excerpt(b)
    )
}

/// Median and spread of some durations, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    /// The median.
    pub median_ms: f64,
    /// 10th percentile (nearest rank).
    pub p10_ms: f64,
    /// 90th percentile (nearest rank).
    pub p90_ms: f64,
    /// The fastest.
    pub min_ms: f64,
    /// The slowest.
    pub max_ms: f64,
}

impl Summary {
    /// The summary of `samples` (at least one).
    pub fn of(samples: &[Duration]) -> Self {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        ms.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            if ms.is_empty() {
                return 0.0;
            }
            let i = ((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1;
            ms[i]
        };
        let median = if ms.is_empty() {
            0.0
        } else if ms.len() % 2 == 1 {
            ms[ms.len() / 2]
        } else {
            (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
        };
        Self {
            median_ms: median,
            p10_ms: rank(0.10),
            p90_ms: rank(0.90),
            min_ms: ms.first().copied().unwrap_or(0.0),
            max_ms: ms.last().copied().unwrap_or(0.0),
        }
    }
}

/// Finds `name` as a shell would: a path if it has a slash, else the first executable in
/// `PATH`; `skip` excludes candidates (`ng` symlinks, for `ngd check`).
pub fn find_program(name: &OsStr, skip: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.as_bytes().contains(&b'/') {
        let p = PathBuf::from(name);
        return executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| executable(p) && !skip(p))
}

/// The `ng` client: next to this `ngd`, else on `PATH`.
pub fn ng_binary() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("ng")))
        .filter(|p| p.is_file());
    beside.or_else(|| find_program(OsStr::new("ng"), |_| false))
}

/// The arguments naming `server` for `ng`.
pub fn ng_server_args(server: Option<&ListenAddr>) -> Vec<OsString> {
    match server {
        None => Vec::new(),
        Some(ListenAddr::Unix(p)) => {
            let mut v = OsString::from("local:");
            v.push(p);
            vec!["--nailgun-server".into(), v]
        }
        Some(ListenAddr::Tcp(a)) => vec![
            "--nailgun-server".into(),
            a.ip().to_string().into(),
            "--nailgun-port".into(),
            a.port().to_string().into(),
        ],
    }
}

/// Whether `candidate` is the `ng` client (a link to it, or a copy at the same path).
pub fn is_ng(candidate: &Path, ng: Option<&Path>) -> bool {
    let real = std::fs::canonicalize(candidate).ok();
    let ng_real = ng.and_then(|p| std::fs::canonicalize(p).ok());
    real.is_some() && real == ng_real
        || real
            .as_deref()
            .and_then(Path::file_name)
            .is_some_and(|f| f == "ng")
}

/// The commands a server offers (`ng-commands`), or why they cannot be listed.
pub fn server_commands(ng: &Path, server: Option<&ListenAddr>) -> Result<Vec<String>, String> {
    let mut args = ng_server_args(server);
    args.push("ng-commands".into());
    let out = run_once(&Spec::new(ng, args)).map_err(|e| format!("cannot run ng: {e}"))?;
    if out.code != 0 {
        return Err(format!(
            "`ng ng-commands` failed with {}: {}",
            out.code,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect())
}

/// A private `ngd` on a temporary socket, with a configuration of its own, stopped on drop.
#[derive(Debug)]
pub struct AdHocServer {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
    log: PathBuf,
}

impl AdHocServer {
    /// Starts `ngd serve` on a temporary socket with the configuration `config(dir)`
    /// returns, given the server's temporary directory (for its plugins' logs), and waits
    /// until it is ready.
    pub fn with_config(config: impl FnOnce(&Path) -> String) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find ngd itself: {e}"))?;
        let dir = std::env::temp_dir().join(format!(
            "ngd-bench-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let config = config(&dir);
        let config_path = dir.join("ngd.toml");
        let socket = dir.join("ngd.sock");
        let log = dir.join("ngd.log");
        std::fs::write(&config_path, config).map_err(|e| format!("{e}"))?;
        let log_file = std::fs::File::create(&log).map_err(|e| format!("{e}"))?;
        let mut child = Command::new(exe)
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .arg("--listen")
            .arg(format!("local:{}", socket.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot start ngd: {e}"))?;
        let mut stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = Vec::new();
            let mut byte = [0u8; 1];
            while let Ok(1) = stdout.read(&mut byte) {
                if byte[0] == b'\n' {
                    break;
                }
                line.push(byte[0]);
            }
            let _ = tx.send(line);
        });
        let server = Self {
            child,
            dir,
            socket,
            log,
        };
        match rx.recv_timeout(AD_HOC_READY_TIMEOUT) {
            Ok(line) if line.windows(13).any(|w| w == b" listening on") => Ok(server),
            _ => Err(format!(
                "the ad hoc server did not start: {}",
                std::fs::read_to_string(&server.log)
                    .unwrap_or_default()
                    .trim()
            )),
        }
    }

    /// Its address.
    pub fn address(&self) -> ListenAddr {
        ListenAddr::Unix(self.socket.clone())
    }
}

impl Drop for AdHocServer {
    fn drop(&mut self) {
        // Our own child, which we have not reaped yet.
        ng_sys::signal::kill(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How `ngd bench` and `ngd check` end: the report as JSON or as text, then 0 when the cold
/// and warm runs were identical and [`EXIT_DIFFERENT`] when not; an error is said on
/// stderr and its code returned.
pub fn conclude<R: serde::Serialize>(
    name: &str,
    result: Result<R, (u8, String)>,
    json: bool,
    print: fn(&R),
    identical: fn(&R) -> bool,
) -> u8 {
    match result {
        Ok(report) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).unwrap_or_default()
                );
            } else {
                print(&report);
            }
            if identical(&report) {
                0
            } else {
                EXIT_DIFFERENT
            }
        }
        Err((code, message)) => {
            eprintln!("{name}: {message}");
            code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(stdout: &[u8], stderr: &[u8], code: i32) -> Outcome {
        Outcome {
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
            code,
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn summary_percentiles() {
        let samples: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        let s = Summary::of(&samples);
        assert_eq!(s.median_ms, 5.5);
        assert_eq!(s.p10_ms, 1.0);
        assert_eq!(s.p90_ms, 9.0);
        assert_eq!(s.min_ms, 1.0);
        assert_eq!(s.max_ms, 10.0);
        let one = Summary::of(&[Duration::from_millis(3)]);
        assert_eq!((one.median_ms, one.p10_ms, one.p90_ms), (3.0, 3.0, 3.0));
    }

    #[test]
    fn identical_outcomes_have_no_differences() {
        let a = outcome(b"x\n", b"", 0);
        assert!(differences(&a, &a.clone()).is_empty());
    }

    #[test]
    fn differences_name_the_stream_and_line() {
        let a = outcome(b"one\ntwo\n", b"", 0);
        let b = outcome(b"one\nTWO\n", b"warning\n", 2);
        let d = differences(&a, &b);
        assert_eq!(d.len(), 3, "{d:?}");
        assert_eq!(
            d[0],
            "stdout: 8 bytes against 8; first difference on line 2: \"two\" against \"TWO\""
        );
        assert!(d[1].starts_with("stderr: 0 bytes against 8"), "{}", d[1]);
        assert_eq!(d[2], "exit code: 0 against 2");
    }

    #[test]
    fn runner_captures_output_and_code() {
        let spec = Spec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "cat; echo err >&2; exit 3".into()],
            stdin: Some(std::sync::Arc::new(b"in".to_vec())),
        };
        let o = run_once(&spec).unwrap();
        assert_eq!(o.stdout, b"in");
        assert_eq!(o.stderr, b"err\n");
        assert_eq!(o.code, 3);
        let killed = Spec::new("/bin/sh", vec!["-c".into(), "kill -9 $$".into()]);
        assert_eq!(run_once(&killed).unwrap().code, 137);
    }

    #[test]
    fn server_args() {
        assert!(ng_server_args(None).is_empty());
        let unix = ListenAddr::Unix("/x/s.sock".into());
        assert_eq!(
            ng_server_args(Some(&unix)),
            vec![OsString::from("--nailgun-server"), "local:/x/s.sock".into()]
        );
        let tcp: ListenAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(ng_server_args(Some(&tcp)).len(), 4);
    }

    #[test]
    fn links_to_ng_are_not_cold_programs() {
        let dir = tempfile::tempdir().unwrap();
        let ng = dir.path().join("ng");
        std::fs::write(&ng, "").unwrap();
        let link = dir.path().join("tool");
        std::os::unix::fs::symlink(&ng, &link).unwrap();
        let other = dir.path().join("other");
        std::fs::write(&other, "").unwrap();
        assert!(is_ng(&link, Some(&ng)));
        assert!(is_ng(&ng, None));
        assert!(!is_ng(&other, Some(&ng)));
    }
}
