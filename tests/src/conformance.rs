//! The worker conformance suite (docs/ngw.md, "The worker conformance suite"): the same
//! behaviours on every path a session can take, cold and warm side by side, for any
//! runtime's worker.
//!
//! A [`Worker`] is a runtime's program for the suite (it implements every behaviour of
//! [`BEHAVIOURS`], named by its first argument, and appends a trace line when
//! `CONFORMANCE_TRACE` names a file) and the plugin that serves it as [`COMMAND`]. A
//! [`Route`] is a path a session can take: the worker's own process (no spare), a spare, a
//! zygote of another key, the cold way, a session after stale code, a learning session, a
//! session from another directory. [`check`] runs every behaviour on one route: each in a
//! fresh terminal ([`crate::pty`]), cold (the program itself) and warm (our `ng`,
//! symlinked as the command, over the Unix socket), with the same environment and the same
//! typed line, and asserts that the two transcripts are equal byte for byte and which path
//! served the warm run (the trace's process tree, the worker's log). [`check_pipes`] does
//! the same on pipes (descriptors, stdin, exit status, death by a signal) with either
//! client; [`check_classic`] that the stock client and TCP keep the classic behaviour.

use crate::plugins::{Plugin, PluginServer};
use crate::pty::{Scenario, Step, PROMPT};
use crate::{bins, Client, Output, Transport};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The command each worker's program is served as.
pub const COMMAND: &str = "conformance";

/// How long a path may take to become ready (a zygote of another key to start, a
/// worker to learn what a session imported, a spare to be there).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// The behaviours on a terminal. `$RUN` is the program (cold or warm); its first argument
/// names the behaviour.
pub const BEHAVIOURS: &[Scenario] = &[
    Scenario {
        name: "devtty",
        script: "",
        line: "$RUN devtty </dev/null >/dev/null; echo done",
        steps: &[
            Step::Expect("tty says hi"),
            Step::Send("typed\r"),
            Step::Expect("done"),
        ],
        status: "status=$?",
    },
    Scenario {
        name: "foreground",
        script: "",
        line: "$RUN foreground",
        steps: &[Step::Expect("foreground")],
        status: "status=$?",
    },
    Scenario {
        name: "getpass",
        script: "",
        line: "echo data | $RUN getpass",
        steps: &[
            Step::Expect("Password: "),
            Step::Send("hunter2\r"),
            Step::Expect("stdin"),
        ],
        status: "status=$?",
    },
    Scenario {
        name: "bash",
        script: "",
        line: "$RUN bash 2>&1",
        steps: &[Step::Expect("hi")],
        status: "status=$?",
    },
    Scenario {
        name: "ctrl-c",
        script: "",
        line: "$RUN ctrl-c",
        steps: &[Step::Expect("ready"), Step::Pause(300), Step::Send("\x03")],
        status: "status=$?",
    },
    Scenario {
        name: "ctrl-c-child",
        script: "",
        line: "$RUN ctrl-c-child",
        steps: &[
            Step::Expect("ready"),
            Step::Pause(300),
            Step::Send("\x03"),
            Step::Expect("child exited"),
        ],
        status: "status=$?",
    },
    Scenario {
        name: "ctrl-backslash",
        script: "",
        line: "$RUN ctrl-backslash",
        steps: &[
            Step::Expect("ready"),
            Step::Pause(300),
            Step::Send("\x1c"),
            Step::Expect("child exited"),
        ],
        status: "status=$?",
    },
    Scenario {
        name: "ctrl-z",
        script: "",
        // Alone on its line: after `fg`, bash does not run the rest of a stopped list.
        line: "$RUN ctrl-z",
        steps: &[
            Step::Expect("ready"),
            Step::Pause(300),
            Step::Send("\x1a"),
            Step::Expect("Stopped"),
            Step::Expect(PROMPT),
            Step::Send("fg\r"),
            Step::Expect("done"),
        ],
        status: "status=$?",
    },
    Scenario {
        name: "resize",
        script: "",
        line: "$RUN resize",
        steps: &[
            Step::Expect("ready"),
            Step::Pause(300),
            Step::Resize(100, 30),
            Step::Expect("resized"),
        ],
        status: "status=$?",
    },
];

/// Whether the worker keeps a process ready ahead of its sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spares {
    /// None: each session's process is started for it.
    Off,
    /// The worker's default: a spare waits for the next session.
    On,
}

/// A runtime's program for the suite, as one world sets it up.
#[derive(Debug)]
pub struct Setup {
    /// What the cold run types as `$RUN`: the program itself (an executable file).
    pub cold: PathBuf,
    /// The plugin serving it as [`COMMAND`].
    pub plugin: Plugin,
    /// The source file whose change makes the worker's code stale.
    pub source: PathBuf,
}

/// A worker under test.
#[derive(Clone, Copy, Debug)]
pub struct Worker {
    /// For messages.
    pub name: &'static str,
    /// Writes the program into the directory and returns its [`Setup`].
    pub setup: fn(&Path, Spares) -> Setup,
    /// What the worker's log says when a session runs the cold way.
    pub cold_way: &'static str,
    /// Whether a process the worker starts for the session (no spare) is the cold way: a
    /// JVM started for it is; a child forked from a zygote is not.
    pub fresh_is_cold: bool,
    /// ... when a session found the code changed on disk (None: it has no such path).
    pub stale: Option<&'static str>,
    /// ... once it learned from a session (the learning session's report), or None.
    pub learned: Option<&'static str>,
    /// How a comment line starts in the program's source (a stale route appends one).
    pub comment: &'static str,
    /// Behaviours its runtime cannot show the same way twice, and why: they are not run.
    pub not_applicable: &'static [(&'static str, &'static str)],
    /// A variable and value with which a session runs the cold way, learning nothing: after
    /// a learning session, one wakes the worker to read what the session reported.
    pub cold_env: (&'static str, &'static str),
}

/// A path a session can take.
#[derive(Clone, Copy, Debug)]
pub enum Route {
    /// The worker's own process starts the session's (no spare).
    Root,
    /// A spare, started before the session.
    Spare,
    /// The zygote of another key: the variable with that value in the client's
    /// environment, once the worker has started the zygote for it.
    OtherKey(&'static str, &'static str),
    /// The cold way: each behaviour's session has a value of the variable the worker has
    /// not seen.
    ColdWay(&'static str),
    /// The program's source changed before each session.
    Stale,
    /// The first session of a fresh worker, which learns from it.
    Learning,
    /// Each session from a directory the worker has not seen.
    OtherDir,
}

/// One plugin server with the worker's program, and the `ng` symlink named after it.
struct World {
    server: PluginServer,
    setup: Setup,
    dir: tempfile::TempDir,
    link: PathBuf,
}

impl World {
    fn new(worker: &Worker, spares: Spares) -> World {
        let dir = tempfile::tempdir().unwrap();
        let setup = (worker.setup)(dir.path(), spares);
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let link = bin.join(COMMAND);
        std::os::unix::fs::symlink(bins::ng(), &link).unwrap();
        let server = PluginServer::builder().plugin(setup.plugin.clone()).start();
        // The worker ready first (a JVM's may take a while): sessions then wait for none.
        let deadline = Instant::now() + READY_WITHIN;
        while !server.log().contains("worker ready") {
            assert!(
                Instant::now() < deadline,
                "{}: no worker ready\n{}",
                worker.name,
                server.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        World {
            server,
            setup,
            dir,
            link,
        }
    }

    fn log(&self) -> String {
        self.server.plugin_log(self.setup.plugin.name())
    }

    /// The worker's processes: the children of `ngd`.
    fn workers(&self) -> Vec<u32> {
        children(self.server.pid())
    }

    /// A transcript of `b`: warm (`warm`, with a trace file) or cold, with `env` added.
    fn run(
        &self,
        b: &Scenario,
        warm: Option<&Path>,
        env: &[(String, String)],
        prelude: &str,
    ) -> String {
        let address = self.server.address(Transport::Unix).client_args();
        let mut all: Vec<(&str, &OsStr)> = env
            .iter()
            .map(|(k, v)| (k.as_str(), OsStr::new(v.as_str())))
            .collect();
        // The same environment for every session of a world (a spare is made for the
        // environment of the session before it).
        let tmpfile = self.dir.path().join("tmpfile");
        all.push(("TMPFILE", tmpfile.as_os_str()));
        let program = match warm {
            Some(trace) => {
                let _ = std::fs::remove_file(trace);
                all.push(("NAILGUN_SERVER", address[1].as_os_str()));
                all.push(("CONFORMANCE_TRACE", trace.as_os_str()));
                self.link.as_os_str()
            }
            None => self.setup.cold.as_os_str(),
        };
        b.transcript_after(prelude, "\"$PY\"", program, &all)
            .unwrap_or_else(|e| {
                panic!(
                    "{} ({}): {e}\n{}",
                    b.name,
                    if warm.is_some() { "warm" } else { "cold" },
                    self.server.log()
                )
            })
    }

    /// Waits until the worker's log has `text` after `from`.
    fn await_log(&self, from: usize, text: &str) -> bool {
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if self.log().get(from..).is_some_and(|l| l.contains(text)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

/// The children of `pid` (of any of its threads).
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return found;
    };
    for task in tasks.flatten() {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        found.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    found
}

/// The parent of `pid`, if it still runs.
fn parent(pid: u32) -> Option<u32> {
    ng_testkit::procfs::proc_info(pid).map(|p| p.ppid)
}

/// A warm run's trace: the command's pid, its parent's and its grandparent's.
#[derive(Clone, Copy, Debug)]
struct Trace {
    pid: u32,
    parent: u32,
    grandparent: u32,
}

fn read_trace(path: &Path) -> Option<Trace> {
    let text = std::fs::read_to_string(path).ok()?;
    let ids: Vec<u32> = text
        .lines()
        .next()?
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    match ids[..] {
        [pid, parent, grandparent] => Some(Trace {
            pid,
            parent,
            grandparent,
        }),
        _ => None,
    }
}

/// The environment route `route` gives both runs of behaviour number `i`.
fn route_env(route: Route, i: usize) -> Vec<(String, String)> {
    match route {
        Route::OtherKey(var, value) => vec![(var.into(), value.into())],
        Route::ColdWay(var) => vec![(var.into(), format!("{}", 4100 + i))],
        _ => Vec::new(),
    }
}

/// Every behaviour of [`BEHAVIOURS`] on `route`: cold and warm transcripts equal, and the
/// warm run served by that path. Fails with every behaviour's difference at once.
pub fn check(worker: &Worker, route: Route) {
    let spares = match route {
        Route::Root => Spares::Off,
        _ => Spares::On,
    };
    let mut world = World::new(worker, spares);
    if let Route::Spare = route {
        // A spare as sessions find it: forked after the session before.
        let trace = world.dir.path().join("trace");
        world.run(&BEHAVIOURS[1], Some(&trace), &[], "");
    }
    // A key's first session runs the cold way and starts its zygote, which is there for
    // the sessions after it (once it has preloaded).
    // A stale session's worker retires; the one after it may start after the change.
    let attempts = match route {
        Route::OtherKey(..) => 8,
        Route::Stale => 3,
        _ => 1,
    };
    let mut failures = Vec::new();
    for (i, b) in BEHAVIOURS.iter().enumerate() {
        if worker
            .not_applicable
            .iter()
            .any(|(name, _)| *name == b.name)
        {
            continue;
        }
        if let Route::Learning = route {
            if i > 0 {
                world = World::new(worker, spares);
            }
        }
        let env = route_env(route, i);
        let prelude = match route {
            Route::OtherDir => {
                let other = world.dir.path().join(format!("dir-{i}"));
                std::fs::create_dir_all(&other).unwrap();
                format!("cd '{}'", other.display())
            }
            _ => String::new(),
        };
        let cold = world.run(b, None, &env, &prelude);
        for attempt in 1..=attempts {
            if let Route::Stale = route {
                let mut text = std::fs::read(&world.setup.source).unwrap();
                text.extend_from_slice(format!("\n{} {i}\n", worker.comment).as_bytes());
                std::fs::write(&world.setup.source, text).unwrap();
            }
            let before = before_session(&world, route);
            let from = world.log().len();
            let trace = world.dir.path().join("trace");
            let warm = world.run(b, Some(&trace), &env, &prelude);
            if warm != cold {
                failures.push(format!(
                    "{} (session {attempt}): warm differs from cold\n--- cold\n{cold}\n--- warm\n{warm}",
                    b.name
                ));
                break;
            }
            match served_by(&world, worker, route, &trace, &before, from) {
                Ok(()) => break,
                Err(why) if attempt == attempts => {
                    failures.push(format!("{}: not served by {route:?}: {why}", b.name));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} on {route:?}:\n{}\n{}",
        worker.name,
        failures.join("\n\n"),
        world.server.log()
    );
}

/// Right before a warm session: the processes the worker has started (once there is a
/// spare, on the routes that want one).
fn before_session(world: &World, route: Route) -> Vec<u32> {
    // A session of the cold way may find a spare that could not serve it, if the worker
    // has one by then.
    let wait = match route {
        Route::Spare => READY_WITHIN,
        Route::ColdWay(_) | Route::OtherDir => Duration::from_secs(2),
        _ => Duration::ZERO,
    };
    let deadline = Instant::now() + wait;
    loop {
        let started: Vec<u32> = world.workers().into_iter().flat_map(children).collect();
        let want_spare = !wait.is_zero();
        if !want_spare || !started.is_empty() || Instant::now() >= deadline {
            return started;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the warm run was served by `route`'s path: by the process tree of its trace
/// and by what the worker's log gained since `from`.
fn served_by(
    world: &World,
    worker: &Worker,
    route: Route,
    trace: &Path,
    before: &[u32],
    from: usize,
) -> Result<(), String> {
    let ngd = world.server.pid();
    let t = read_trace(trace).ok_or("no trace")?;
    let by_worker = t.grandparent == ngd && parent(t.parent).is_none_or(|p| p == ngd);
    let by_zygote = !by_worker && parent(t.grandparent) == Some(ngd);
    let log = world.log();
    let new = log.get(from..).unwrap_or_default();
    let cold = new.contains(worker.cold_way)
        || (worker.fresh_is_cold && by_worker && !before.contains(&t.pid));
    let fail = |what: &str| Err(format!("{what}; {t:?}, ngd {ngd}, log since:\n{new}"));
    match route {
        Route::Root if !by_worker || cold || before.contains(&t.pid) => {
            fail("not a process the worker started for it")
        }
        Route::Spare if !by_worker || cold || !before.contains(&t.pid) => {
            fail("not a spare started before it")
        }
        Route::OtherKey(..) if !by_zygote || cold => fail("not the zygote of its key"),
        Route::ColdWay(_) | Route::OtherDir if !cold => fail("not the cold way"),
        Route::Stale if !worker.stale.is_some_and(|s| new.contains(s)) => fail("no stale code"),
        Route::Learning
            if !worker
                .learned
                .is_some_and(|l| learned(world, worker, from, l)) =>
        {
            fail("the worker learned nothing from it")
        }
        _ => Ok(()),
    }
}

/// Whether the worker's log says, after `from`, that it learned from a session (`text`),
/// once another session, run the cold way, woke it.
fn learned(world: &World, worker: &Worker, from: usize, text: &str) -> bool {
    let (var, value) = worker.cold_env;
    world
        .server
        .cmd(Client::Ours)
        .arg(COMMAND)
        .arg("pipes")
        .env(var, value)
        .run();
    world.await_log(from, text)
}

/// On pipes, with `client` over the Unix socket: descriptors, stdin, the exit status and
/// a death by a signal, byte for byte as cold, on `route` (`Root` or `Spare`).
pub fn check_pipes(worker: &Worker, route: Route, client: Client) {
    let spares = match route {
        Route::Root => Spares::Off,
        _ => Spares::On,
    };
    let world = World::new(worker, spares);
    let input = crate::data::binary(70_000);
    for what in ["pipes", "killed"] {
        for round in 0..2 {
            let cold = cold_on_pipes(&world.setup.cold, what, &input);
            let warm = world
                .server
                .cmd(client)
                .arg(COMMAND)
                .arg(what)
                .stdin_bytes(input.clone())
                .run();
            let context = format!("{} {what} (round {round}, {client:?})", worker.name);
            crate::assert_bytes_eq!(cold.stdout, warm.stdout, "{context}: stdout");
            crate::assert_bytes_eq!(cold.stderr, warm.stderr, "{context}: stderr");
            // Our `ng` dies by the command's signal; the stock client exits 128+N.
            let shell = |o: &Output| o.status.code().or(o.status.signal().map(|s| 128 + s));
            assert_eq!(shell(&cold), shell(&warm), "{context}: {cold:?} {warm:?}");
            if client == Client::Ours {
                assert_eq!(cold.status.signal(), warm.status.signal(), "{context}");
            }
        }
    }
}

use std::os::unix::process::ExitStatusExt as _;

fn cold_on_pipes(program: &Path, what: &str, input: &[u8]) -> Output {
    use std::io::Write as _;
    let started = Instant::now();
    let mut child = std::process::Command::new(program)
        .arg(what)
        .env_clear()
        .envs(crate::plugins::client_env(&[]))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    let _ = feeder.join();
    Output {
        what: format!("cold {} {what}", program.display()),
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
        elapsed: started.elapsed(),
    }
}

/// The stock client and our `ng` over TCP keep the classic behaviour on a terminal: no
/// pseudo-terminal is relayed, and `^C` ends the session with the status a cold run has.
pub fn check_classic(worker: &Worker) {
    let world = World::new(worker, Spares::On);
    let b = &BEHAVIOURS[4];
    assert_eq!(b.name, "ctrl-c");
    let cold = world.run(b, None, &[], "");
    let code = |t: &str| Scenario::status_of(t).to_owned();
    for (client, transport) in [
        (bins::ng(), Transport::Tcp),
        (bins::c_client(), Transport::Unix),
        (bins::c_client(), Transport::Tcp),
    ] {
        let dir = world.dir.path().join(format!(
            "{}-{transport:?}",
            client.file_name().unwrap().to_string_lossy()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join(COMMAND);
        std::os::unix::fs::symlink(&client, &link).unwrap();
        let args = world.server.address(transport).client_args();
        let mut env = vec![("NAILGUN_SERVER", args[1].as_os_str())];
        if let Some(port) = args.get(3) {
            env.push(("NAILGUN_PORT", port.as_os_str()));
        }
        let relayed = b
            .transcript_as("\"$PY\"", link.as_os_str(), &env)
            .unwrap_or_else(|e| panic!("{client:?} over {transport:?}: {e}"));
        assert_eq!(
            code(&relayed),
            code(&cold),
            "{} {client:?} over {transport:?}: {relayed}",
            worker.name
        );
    }
}
