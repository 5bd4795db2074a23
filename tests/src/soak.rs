//! The soak: many invocations of a warm `ngd` with a Python plugin, from
//! parallel clients of both kinds over both transports, some killed, then a check that
//! nothing was left behind. The full form is `benches/soak` (release build, 100 000
//! invocations, `docs/reliability.md`); this is the same mix and the same checks at a size
//! CI can afford (`tests/e2e/soak.rs`).
//!
//! The plugin is `benches/soak.d/worker.py` (the bench's own worker): `soak-inline`
//! (in-process) and `soak-fork` (fork mode) answer `ID CODE` with stdin echoed after a
//! header line, a line on stderr and exit code `CODE`, so every invocation is checked byte
//! for byte. A [`Plan`] draws each invocation from a seed: the command [`Kind`] (weights as
//! in the bench), the client (`ng` or `ng-nailgun`), the transport, the stdin (one of 64
//! blobs of 0 to 4 KiB, from files), the exit code, and whether it gets `SIGKILL` and when.
//! [`run`] runs a range of the plan `parallel` at once; each [`Outcome`] is `Ok`, `Killed`
//! (died of the planned `SIGKILL`: not checked) or `Failed` with the details.
//!
//! [`vitals`] reads `ngd`'s descriptors, RSS, threads and CPU time from `/proc` and counts
//! its workers and their session children; [`settle`] waits until it is idle again.

use std::fmt::Write as _;
use std::fs::File;
use std::ops::Range;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::client::{Client, DEFAULT_ENV};
use crate::plugins::{self, Plugin, PluginServer};
use crate::process::Capture;
use crate::server::Transport;
use ng_testkit::procfs;

/// The plugin's `min_workers`: the pool an idle server is back to.
pub const MIN_WORKERS: usize = 1;
/// The children an idle worker may keep: the SDK's spare (the next fork-mode session's
/// child, forked ahead of time) and, after sessions that came back to back, the spare's
/// successor, which it cloned for the session after (docs/ngw.md §11.5).
pub const IDLE_CHILDREN_PER_WORKER: usize = 2;
/// The plugin's `max_workers`.
pub const MAX_WORKERS: usize = 4;
/// The plugin's `idle_timeout_ms`: how soon the extra workers stop once the load ends.
pub const IDLE_TIMEOUT_MS: u64 = 2000;
/// One invocation that runs longer than this is a failure (a hang), and is killed.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// `ng-yes 64K`'s output.
fn yes_64k() -> Vec<u8> {
    b"y\n".repeat(32768)
}

/// What an invocation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `ng-true`: exit 0, no output (inline on ngd's loop).
    True,
    /// `ng-cat` with a small stdin: stdout is stdin (a nail thread).
    Cat,
    /// `ng-yes 64K`: 32768 × `y\n` (a nail thread).
    Yes64K,
    /// `soak-inline ID CODE` with stdin: the plugin, in-process.
    Inline,
    /// `soak-fork ID CODE` with stdin: the plugin, fork mode.
    Fork,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 5] = [
        Kind::True,
        Kind::Cat,
        Kind::Yes64K,
        Kind::Inline,
        Kind::Fork,
    ];

    /// Its share of this mix, in percent (`benches/soak` mixes these five with the Nu,
    /// JVM and JSON-RPC plugins' commands).
    pub fn weight(self) -> u64 {
        match self {
            Kind::True => 25,
            Kind::Cat => 20,
            Kind::Yes64K => 15,
            Kind::Inline => 20,
            Kind::Fork => 20,
        }
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::True => "ng-true",
            Kind::Cat => "ng-cat",
            Kind::Yes64K => "ng-yes 64K",
            Kind::Inline => "soak-inline",
            Kind::Fork => "soak-fork",
        }
    }

    /// Whether the plugin runs it.
    pub fn is_plugin(self) -> bool {
        matches!(self, Kind::Inline | Kind::Fork)
    }
}

/// One invocation of the plan.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// Its index in the plan (also the `ID` the plugin echoes).
    pub index: usize,
    /// What it runs.
    pub kind: Kind,
    /// Which client runs it.
    pub client: Client,
    /// Over which transport.
    pub transport: Transport,
    /// Its stdin, an index into [`Plan::blobs`] (used by `ng-cat` and the plugin).
    pub blob: usize,
    /// The exit code the plugin commands are asked for.
    pub code: i32,
    /// `SIGKILL` this long after the spawn, if set.
    pub kill_after: Option<Duration>,
}

/// Deterministic invocations, and the stdin files they read.
#[derive(Debug)]
pub struct Plan {
    /// Stdin contents.
    pub blobs: Vec<Vec<u8>>,
    files: Vec<PathBuf>,
    /// The invocations.
    pub items: Vec<Invocation>,
}

/// splitmix64: a small deterministic generator (no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Plan {
    /// `total` invocations drawn from `seed`; a `kill_rate` share of them get `SIGKILL`
    /// 0 to `kill_delay` after the spawn (three times that for plugin commands, which take
    /// about three times as long under load). The 64 stdin blobs are written to `dir`.
    pub fn new(seed: u64, total: usize, kill_rate: f64, kill_delay: Duration, dir: &Path) -> Plan {
        let mut rng = Rng(seed);
        const SIZES: [usize; 8] = [0, 1, 17, 100, 512, 2048, 2049, 4096];
        let blobs: Vec<Vec<u8>> = (0..64)
            .map(|_| {
                let len = SIZES[rng.below(SIZES.len() as u64) as usize];
                (0..len).map(|_| rng.next() as u8).collect()
            })
            .collect();
        let files = blobs
            .iter()
            .enumerate()
            .map(|(i, blob)| {
                let path = dir.join(format!("stdin-{i}"));
                std::fs::write(&path, blob)
                    .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
                path
            })
            .collect();
        let weights: u64 = Kind::ALL.iter().map(|k| k.weight()).sum();
        let items = (0..total)
            .map(|index| {
                let mut pick = rng.below(weights);
                let kind = *Kind::ALL
                    .iter()
                    .find(|k| {
                        if pick < k.weight() {
                            true
                        } else {
                            pick -= k.weight();
                            false
                        }
                    })
                    .expect("weights add up");
                let client = [Client::Ours, Client::CClient][rng.below(2) as usize];
                let transport = [Transport::Unix, Transport::Tcp][rng.below(2) as usize];
                let blob = rng.below(blobs.len() as u64) as usize;
                let code = if rng.below(8) == 0 {
                    [1, 3, 42, 255][rng.below(4) as usize]
                } else {
                    0
                };
                let most = kill_delay.mul_f64(if kind.is_plugin() { 3.0 } else { 1.0 });
                let kill_after = (rng.unit() < kill_rate).then(|| most.mul_f64(rng.unit()));
                Invocation {
                    index,
                    kind,
                    client,
                    transport,
                    blob,
                    code,
                    kill_after,
                }
            })
            .collect();
        Plan {
            blobs,
            files,
            items,
        }
    }

    /// The command and its arguments, the stdin file (or none: `/dev/null`), and the
    /// expected exit code, stdout and stderr.
    pub fn describe(&self, inv: &Invocation) -> (Vec<String>, Option<&Path>, Expected) {
        let data = &self.blobs[inv.blob];
        let file = Some(self.files[inv.blob].as_path());
        let plugin = |mode: &str| {
            let mut stdout = format!("{mode} {} {}\n", inv.index, data.len()).into_bytes();
            stdout.extend_from_slice(data);
            Expected {
                code: inv.code,
                stdout,
                stderr: format!("{mode} {}\n", inv.index).into_bytes(),
            }
        };
        let ok = |stdout: Vec<u8>| Expected {
            code: 0,
            stdout,
            stderr: Vec::new(),
        };
        let id_code = [inv.index.to_string(), inv.code.to_string()];
        match inv.kind {
            Kind::True => (vec!["ng-true".into()], None, ok(Vec::new())),
            Kind::Cat => (vec!["ng-cat".into()], file, ok(data.clone())),
            Kind::Yes64K => (vec!["ng-yes".into(), "64K".into()], None, ok(yes_64k())),
            Kind::Inline => (
                [vec!["soak-inline".to_string()], id_code.to_vec()].concat(),
                file,
                plugin("inline"),
            ),
            Kind::Fork => (
                [vec!["soak-fork".to_string()], id_code.to_vec()].concat(),
                file,
                plugin("fork"),
            ),
        }
    }
}

/// What an invocation must produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// Exit code.
    pub code: i32,
    /// Stdout, exactly.
    pub stdout: Vec<u8>,
    /// Stderr, exactly.
    pub stderr: Vec<u8>,
}

/// How one invocation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Exit code, stdout and stderr as expected.
    Ok,
    /// Died of its planned `SIGKILL`; not checked.
    Killed,
    /// Anything else, described.
    Failed(String),
}

/// One invocation's result.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Index in the plan.
    pub index: usize,
    /// What it ran.
    pub kind: Kind,
    /// Spawn to reap.
    pub latency: Duration,
    /// How it ended.
    pub verdict: Verdict,
}

/// The `plugin` table of the soak's worker.
pub fn plugin() -> Plugin {
    let worker = plugins::repo_root().join("benches/soak.d/worker.py");
    assert!(worker.is_file(), "{} is missing", worker.display());
    Plugin::new(
        "soak",
        &[
            plugins::python().to_string_lossy().into_owned(),
            worker.to_string_lossy().into_owned(),
        ],
    )
    .set("min_workers", MIN_WORKERS)
    .set("max_workers", MAX_WORKERS)
    .set("idle_timeout_ms", IDLE_TIMEOUT_MS)
    // One zygote per worker: the soak counts processes, and a worker's zygotes for other
    // keys (docs/ngw.md §12.4) would count as leftovers; they are tested in the SDK suite.
    .env("NGW_MAX_ZYGOTES", "1")
}

/// Runs `range` of `plan` against `server`, `parallel` clients at once, starting no new
/// invocation after `deadline` (those are missing from the result).
pub fn run(
    server: &PluginServer,
    plan: &Plan,
    range: Range<usize>,
    parallel: usize,
    deadline: Instant,
) -> Vec<Outcome> {
    let next = AtomicUsize::new(range.start);
    let outcomes = Mutex::new(Vec::with_capacity(range.len()));
    let cwd = tempfile::tempdir().expect("a working directory for the clients");
    thread::scope(|scope| {
        for _ in 0..parallel.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= range.end || Instant::now() > deadline {
                    return;
                }
                let outcome = invoke(server, plan, &plan.items[i], cwd.path());
                outcomes.lock().unwrap().push(outcome);
            });
        }
    });
    outcomes.into_inner().unwrap()
}

fn invoke(server: &PluginServer, plan: &Plan, inv: &Invocation, cwd: &Path) -> Outcome {
    let (args, stdin, expected) = plan.describe(inv);
    let mut cmd = Command::new(inv.client.bin());
    cmd.args(server.address(inv.transport).client_args())
        .args(&args)
        .env_clear()
        .envs(DEFAULT_ENV.iter().copied())
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match stdin {
        Some(path) => {
            let file = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
            cmd.stdin(file);
        }
        None => {
            cmd.stdin(Stdio::null());
        }
    }
    let what = format!(
        "#{} {} via {} over {:?}: {} {}{}",
        inv.index,
        inv.kind.name(),
        inv.client,
        inv.transport,
        inv.client.bin().display(),
        args.join(" "),
        stdin.map_or(String::new(), |p| format!(
            " < {} ({} bytes)",
            p.display(),
            plan.blobs[inv.blob].len()
        )),
    );
    let started = Instant::now();
    let outcome = |verdict| Outcome {
        index: inv.index,
        kind: inv.kind,
        latency: started.elapsed(),
        verdict,
    };
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return outcome(Verdict::Failed(format!("{what}: could not start: {e}"))),
    };
    let (stdout, stderr, timed_out) = drain(
        &mut child,
        inv.kill_after.map(|d| started + d),
        started + CLIENT_TIMEOUT,
    );
    let status = child.wait().expect("wait for a client");
    let latency = started.elapsed();
    if inv.kill_after.is_some() && status.signal() == Some(libc::SIGKILL) && !timed_out {
        return Outcome {
            latency,
            ..outcome(Verdict::Killed)
        };
    }
    let mut problems = Vec::new();
    if timed_out {
        problems.push(format!("timed out after {CLIENT_TIMEOUT:?} and was killed"));
    }
    if status.code() != Some(expected.code) {
        problems.push(format!(
            "{}, expected exit code {}",
            match (status.code(), status.signal()) {
                (Some(c), _) => format!("exit code {c}"),
                (None, Some(s)) => format!("killed by signal {s}"),
                _ => format!("{status}"),
            },
            expected.code
        ));
    }
    for (name, got, want) in [
        ("stdout", &stdout, &expected.stdout),
        ("stderr", &stderr, &expected.stderr),
    ] {
        if got != want {
            let at = got
                .iter()
                .zip(want.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(want.len()));
            problems.push(format!(
                "{name}: {} bytes, expected {}; first difference at byte {at}: got {:?}, \
                 expected {:?}",
                got.len(),
                want.len(),
                String::from_utf8_lossy(&got[at..got.len().min(at + 80)]),
                String::from_utf8_lossy(&want[at..want.len().min(at + 80)]),
            ));
            if name == "stderr" || got.len() < 300 {
                problems.push(format!(
                    "{name} was {:?}",
                    String::from_utf8_lossy(&got[..got.len().min(600)])
                ));
            }
        }
    }
    let verdict = if problems.is_empty() {
        Verdict::Ok
    } else {
        let kill = inv
            .kill_after
            .map_or(String::new(), |d| format!(", SIGKILL planned at {d:.1?}"));
        Verdict::Failed(format!(
            "{what}\n    after {latency:.1?}{kill}\n    {}",
            problems.join("\n    ")
        ))
    };
    Outcome {
        latency,
        ..outcome(verdict)
    }
}

/// Reads the child's stdout and stderr to their end, sending `SIGKILL` at `kill_at` and at
/// `deadline` (then "timed out"). The child is not reaped here, so its pid cannot have been
/// reused when it is signalled.
fn drain(
    child: &mut Child,
    kill_at: Option<Instant>,
    deadline: Instant,
) -> (Vec<u8>, Vec<u8>, bool) {
    let (stdout, out_reader) = Capture::start(child.stdout.take().expect("piped stdout"));
    let (stderr, err_reader) = Capture::start(child.stderr.take().expect("piped stderr"));
    let mut kill_at = kill_at;
    let mut timed_out = false;
    // Past this, something else holds the pipes open: give up on them.
    let abandon = deadline + Duration::from_secs(5);
    loop {
        let now = Instant::now();
        if kill_at.is_some_and(|at| now >= at) {
            let _ = child.kill();
            kill_at = None;
        }
        if now >= deadline && !timed_out {
            timed_out = true;
            let _ = child.kill();
        }
        let wake = match kill_at {
            _ if timed_out => abandon,
            Some(at) => at.min(deadline),
            None => deadline,
        };
        let closed = stdout.wait_closed(wake.saturating_duration_since(now))
            && stderr.wait_closed(wake.saturating_duration_since(Instant::now()));
        if closed {
            let _ = out_reader.join();
            let _ = err_reader.join();
            break;
        }
        if Instant::now() >= abandon {
            break;
        }
    }
    (stdout.bytes(), stderr.bytes(), timed_out)
}

/// `ngd`'s vital signs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vitals {
    /// Open descriptors.
    pub fds: usize,
    /// `VmRSS`, KiB.
    pub rss_kib: u64,
    /// Threads.
    pub threads: u64,
    /// CPU time so far, clock ticks.
    pub cpu_ticks: u64,
    /// Its children: the plugin's workers.
    pub workers: usize,
    /// The workers' children: fork-mode session children, and at idle the SDK's spare and
    /// its successor (at most [`IDLE_CHILDREN_PER_WORKER`] per worker).
    pub children: usize,
    /// Processes below those (what session children started).
    pub deeper: usize,
}

/// Reads `server`'s `ngd` vital signs now.
#[track_caller]
pub fn vitals(server: &PluginServer) -> Vitals {
    let pid = server.pid();
    let threads = procfs::threads(pid).unwrap_or(0);
    let procs = server.processes();
    let workers: Vec<u32> = procs
        .iter()
        .filter(|p| p.ppid == pid)
        .map(|p| p.pid)
        .collect();
    let children = procs.iter().filter(|p| workers.contains(&p.ppid)).count();
    Vitals {
        fds: server.ngd().fd_count(),
        rss_kib: procfs::rss_kib(pid).unwrap_or(0),
        threads,
        cpu_ticks: procfs::cpu_ticks(pid).unwrap_or(0),
        workers: workers.len(),
        children,
        deeper: procs.len() - workers.len() - children,
    }
}

/// Waits until `ngd` is idle: the pool back to [`MIN_WORKERS`], each worker with at most
/// [`IDLE_CHILDREN_PER_WORKER`] children (its spare and the spare's successor) and nothing
/// below, descriptors (equal to `want_fds`, when given) and
/// CPU time unchanged for 1 s. Returns the last vital signs, how long it waited, and whether
/// it got there within `timeout`.
pub fn settle(
    server: &PluginServer,
    want_fds: Option<usize>,
    timeout: Duration,
) -> (Vitals, Duration, bool) {
    let start = Instant::now();
    let mut last: Option<Vitals> = None;
    let mut stable_since: Option<Instant> = None;
    loop {
        let now_vitals = vitals(server);
        let now = Instant::now();
        let quiet = now_vitals.workers == MIN_WORKERS
            && now_vitals.children <= now_vitals.workers * IDLE_CHILDREN_PER_WORKER
            && now_vitals.deeper == 0
            && want_fds.is_none_or(|want| now_vitals.fds == want);
        let same = last.is_some_and(|l| {
            (l.fds, l.cpu_ticks, l.workers)
                == (now_vitals.fds, now_vitals.cpu_ticks, now_vitals.workers)
        });
        if quiet && same {
            let since = *stable_since.get_or_insert(now);
            if now - since >= Duration::from_secs(1) {
                return (now_vitals, now - start, true);
            }
        } else {
            stable_since = None;
        }
        last = Some(now_vitals);
        if now - start > timeout {
            return (now_vitals, now - start, false);
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Nearest-rank percentile of an ascending slice.
pub fn percentile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Per kind: invocations, ok, killed, failed, p50 and p99 of the checked ones.
pub fn summary(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "| command     | invocations | ok    | killed | failed | p50 ms | p99 ms |\n\
         |-------------|------------:|------:|-------:|-------:|-------:|-------:|\n",
    );
    for kind in Kind::ALL {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.kind == kind).collect();
        let mut lat: Vec<Duration> = of
            .iter()
            .filter(|o| o.verdict == Verdict::Ok)
            .map(|o| o.latency)
            .collect();
        lat.sort();
        let ms = |d: Option<Duration>| {
            d.map_or("-".to_string(), |d| format!("{:.2}", d.as_secs_f64() * 1e3))
        };
        let _ = writeln!(
            out,
            "| {:<11} | {:>11} | {:>5} | {:>6} | {:>6} | {:>6} | {:>6} |",
            kind.name(),
            of.len(),
            lat.len(),
            of.iter().filter(|o| o.verdict == Verdict::Killed).count(),
            of.iter()
                .filter(|o| matches!(o.verdict, Verdict::Failed(_)))
                .count(),
            ms(percentile(&lat, 0.5)),
            ms(percentile(&lat, 0.99)),
        );
    }
    out
}

/// The failures' descriptions, in plan order.
pub fn failures(outcomes: &[Outcome]) -> Vec<String> {
    let mut failed: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| matches!(o.verdict, Verdict::Failed(_)))
        .collect();
    failed.sort_by_key(|o| o.index);
    failed
        .into_iter()
        .filter_map(|o| match &o.verdict {
            Verdict::Failed(text) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_deterministic_and_mixed() {
        let dir = tempfile::tempdir().unwrap();
        let a = Plan::new(7, 2000, 0.05, Duration::from_millis(20), dir.path());
        let b = Plan::new(7, 2000, 0.05, Duration::from_millis(20), dir.path());
        assert_eq!(a.blobs, b.blobs);
        for (x, y) in a.items.iter().zip(&b.items) {
            assert_eq!(
                (x.kind, x.client, x.transport, x.blob, x.code),
                (y.kind, y.client, y.transport, y.blob, y.code)
            );
            assert_eq!(x.kill_after, y.kill_after);
        }
        for kind in Kind::ALL {
            let n = a.items.iter().filter(|i| i.kind == kind).count();
            let want = 2000 * kind.weight() as usize / 100;
            assert!(
                n.abs_diff(want) < want / 4,
                "{kind:?}: {n} of 2000, about {want} expected"
            );
        }
        let kills = a.items.iter().filter(|i| i.kill_after.is_some()).count();
        assert!((50..150).contains(&kills), "{kills} kills planned");
        assert!(a.items.iter().any(|i| i.code != 0) && a.items.iter().any(|i| i.code == 0));
        let inv = &a.items[a.items.iter().position(|i| i.kind == Kind::Fork).unwrap()];
        let (args, file, want) = a.describe(inv);
        assert_eq!(
            args,
            [
                "soak-fork".to_string(),
                inv.index.to_string(),
                inv.code.to_string()
            ]
        );
        assert_eq!(std::fs::read(file.unwrap()).unwrap(), a.blobs[inv.blob]);
        assert!(want
            .stdout
            .starts_with(format!("fork {} ", inv.index).as_bytes()));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&v, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&v[..1], 0.99), Some(Duration::from_millis(1)));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
