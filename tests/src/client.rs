//! Running a Nailgun client binary and capturing what it did.
//!
//! [`Client`] names a client implementation: ours (`ng`) or the reference C client
//! (`ng-nailgun`), which scenarios run as an oracle beside ours. [`ClientCmd`] is a
//! builder for one run, with deterministic defaults: an emptied environment holding only
//! [`DEFAULT_ENV`], cwd `/`, stdin from `/dev/null` and a 30 s timeout. A run that
//! outlives its timeout is killed and fails the test with everything captured so far.
//! [`Output`] holds the exit status and both output streams, with assertions that print
//! them all on failure.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::bins;
use crate::process::Capture;
use crate::server::{Address, Nail, Server};

/// The environment every client starts with, after `env_clear`.
pub const DEFAULT_ENV: &[(&str, &str)] = &[("PATH", "/usr/local/bin:/usr/bin:/bin")];

/// How long a client may run unless a test says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A Nailgun client implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    /// Our client, `ng`.
    Ours,
    /// The reference C client, Debian's `ng-nailgun` (Nailgun 0.9.3, reports 0.9.0).
    CClient,
}

impl Client {
    /// The client's binary.
    pub fn bin(self) -> PathBuf {
        match self {
            Client::Ours => bins::ng(),
            Client::CClient => bins::c_client(),
        }
    }

    /// A short name for messages: `ours` or `c_client`.
    pub fn name(self) -> &'static str {
        match self {
            Client::Ours => "ours",
            Client::CClient => "c_client",
        }
    }

    /// A builder for one run of this client.
    pub fn cmd(self) -> ClientCmd {
        ClientCmd::new(self.name(), self.bin())
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a client's stdin comes from.
#[derive(Clone, Debug)]
pub enum Input {
    /// `/dev/null`: immediate end of file.
    Null,
    /// These bytes, written through a pipe by a harness thread, then end of file.
    Bytes(Vec<u8>),
    /// A regular file, opened read-only (what a shell's `< file` does).
    File(PathBuf),
    /// A pipe that stays open, with nothing written to it, until the client exits (like
    /// `sleep 60 | ng ...`): a client must not wait for stdin the server never asked for.
    Open,
    /// A pipe that stays empty for a while, then gets these bytes and end of file (like
    /// `(sleep 3; echo hi) | ng ...`, or a user typing slowly).
    Later(Duration, Vec<u8>),
}

/// One client run, being configured.
#[derive(Debug)]
pub struct ClientCmd {
    label: String,
    program: PathBuf,
    args: Vec<OsString>,
    env: BTreeMap<OsString, OsString>,
    cwd: PathBuf,
    stdin: Input,
    timeout: Duration,
}

impl ClientCmd {
    /// Runs `program`; `label` names the client in messages.
    pub fn new(label: &str, program: impl Into<PathBuf>) -> ClientCmd {
        ClientCmd {
            label: label.to_string(),
            program: program.into(),
            args: Vec::new(),
            env: DEFAULT_ENV
                .iter()
                .map(|&(k, v)| (OsString::from(k), OsString::from(v)))
                .collect(),
            cwd: PathBuf::from("/"),
            stdin: Input::Null,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Runs `program` instead of the client's own path (e.g. a symlink to it), keeping
    /// everything else.
    pub fn program(mut self, program: impl Into<PathBuf>) -> ClientCmd {
        self.program = program.into();
        self
    }

    /// Appends the options naming `address` (`--nailgun-server`, `--nailgun-port`).
    pub fn server(self, address: &Address) -> ClientCmd {
        self.args(address.client_args())
    }

    /// Names `server` and runs its `nail`: `--nailgun-server ... <command>`; add the
    /// nail's arguments with [`arg`](ClientCmd::arg) or [`args`](ClientCmd::args).
    pub fn nail(self, server: &dyn Server, nail: Nail) -> ClientCmd {
        self.server(server.address()).arg(server.command(nail))
    }

    /// Names `address` through `NAILGUN_SERVER` and `NAILGUN_PORT` instead of options.
    pub fn server_env(mut self, address: &Address) -> ClientCmd {
        self = self.env("NAILGUN_SERVER", address.server());
        match address.port() {
            Some(port) => self.env("NAILGUN_PORT", port.to_string()),
            None => self.env_remove("NAILGUN_PORT"),
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> ClientCmd {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> ClientCmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Sets an environment variable (on top of [`DEFAULT_ENV`]).
    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> ClientCmd {
        self.env
            .insert(name.as_ref().to_os_string(), value.as_ref().to_os_string());
        self
    }

    /// Removes an environment variable, including one of [`DEFAULT_ENV`].
    pub fn env_remove(mut self, name: impl AsRef<OsStr>) -> ClientCmd {
        self.env.remove(name.as_ref());
        self
    }

    /// The environment the client will get.
    pub fn env_vars(&self) -> &BTreeMap<OsString, OsString> {
        &self.env
    }

    /// Sets the working directory (default `/`).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> ClientCmd {
        self.cwd = dir.into();
        self
    }

    /// Feeds `bytes` to stdin through a pipe.
    pub fn stdin_bytes(mut self, bytes: impl Into<Vec<u8>>) -> ClientCmd {
        self.stdin = Input::Bytes(bytes.into());
        self
    }

    /// Opens `path` as stdin (a regular file, not a pipe).
    pub fn stdin_file(mut self, path: impl Into<PathBuf>) -> ClientCmd {
        self.stdin = Input::File(path.into());
        self
    }

    /// Attaches a pipe that stays open and empty until the client exits ([`Input::Open`]).
    pub fn stdin_open(mut self) -> ClientCmd {
        self.stdin = Input::Open;
        self
    }

    /// Feeds `bytes` to stdin through a pipe after `delay` ([`Input::Later`]).
    pub fn stdin_later(mut self, delay: Duration, bytes: impl Into<Vec<u8>>) -> ClientCmd {
        self.stdin = Input::Later(delay, bytes.into());
        self
    }

    /// Kills the client and fails the test if it runs longer than `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> ClientCmd {
        self.timeout = timeout;
        self
    }

    /// The command line, for messages.
    pub fn describe(&self) -> String {
        let mut line = format!("[{}] {}", self.label, self.program.display());
        for arg in &self.args {
            line.push(' ');
            line.push_str(&format!("{:?}", arg));
        }
        line
    }

    /// Runs the client to completion.
    #[track_caller]
    pub fn run(self) -> Output {
        self.spawn().wait()
    }

    /// Starts the client and returns at once, for tests that act while it runs.
    pub fn spawn(self) -> Running {
        let what = self.describe();
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .env_clear()
            .envs(&self.env)
            .current_dir(&self.cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut feed = None;
        match &self.stdin {
            Input::Null => {
                cmd.stdin(Stdio::null());
            }
            Input::Bytes(bytes) => {
                cmd.stdin(Stdio::piped());
                feed = Some((Duration::ZERO, bytes.clone()));
            }
            Input::Later(delay, bytes) => {
                cmd.stdin(Stdio::piped());
                feed = Some((*delay, bytes.clone()));
            }
            Input::File(path) => {
                let file = File::open(path)
                    .unwrap_or_else(|e| panic!("open {} for stdin: {e}", path.display()));
                cmd.stdin(Stdio::from(file));
            }
            Input::Open => {
                cmd.stdin(Stdio::piped());
            }
        }
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {what}: {e}"));
        let writer = feed.map(|(delay, bytes)| {
            let mut pipe = child.stdin.take().unwrap();
            // The client may exit or stop reading early (it only reads stdin when the
            // server asks), so a broken pipe here is not an error.
            thread::spawn(move || {
                thread::sleep(delay);
                let _ = pipe.write_all(&bytes);
            })
        });
        let held_stdin = child.stdin.take();
        let (stdout, out_reader) = Capture::start(child.stdout.take().unwrap());
        let (stderr, err_reader) = Capture::start(child.stderr.take().unwrap());
        Running {
            what,
            child,
            held_stdin,
            started,
            timeout: self.timeout,
            stdout,
            stderr,
            threads: [Some(out_reader), Some(err_reader), writer],
        }
    }
}

/// A client that is running.
#[derive(Debug)]
pub struct Running {
    what: String,
    child: Child,
    /// The write end of an [`Input::Open`] stdin, closed once the client has exited.
    held_stdin: Option<ChildStdin>,
    started: Instant,
    timeout: Duration,
    stdout: Arc<Capture>,
    stderr: Arc<Capture>,
    /// Output readers and the stdin writer, joined when the client has exited.
    threads: [Option<JoinHandle<()>>; 3],
}

impl Running {
    /// Waits until the client's stdout contains `needle`; fails the test after `timeout`.
    #[track_caller]
    pub fn wait_for_stdout(&self, needle: &str, timeout: Duration) {
        assert!(
            self.stdout.wait_for(needle, timeout),
            "{}: {needle:?} did not appear on stdout within {timeout:?}\n\
             stdout so far: {:?}\nstderr so far: {:?}",
            self.what,
            self.stdout.text(),
            self.stderr.text(),
        );
    }

    /// The client's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the client to exit, killing it and failing the test at its timeout.
    #[track_caller]
    pub fn wait(mut self) -> Output {
        let deadline = self.started + self.timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for the client") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                for thread in self.threads.iter_mut().filter_map(Option::take) {
                    let _ = thread.join();
                }
                panic!(
                    "{} timed out after {:?} and was killed\nstdout: {:?}\nstderr: {:?}",
                    self.what,
                    self.timeout,
                    truncated(&self.stdout.bytes()),
                    truncated(&self.stderr.bytes()),
                );
            }
            thread::sleep(Duration::from_millis(2));
        };
        let elapsed = self.started.elapsed();
        self.held_stdin = None;
        for thread in self.threads.iter_mut().filter_map(Option::take) {
            let _ = thread.join();
        }
        Output {
            what: self.what.clone(),
            status,
            stdout: self.stdout.bytes(),
            stderr: self.stderr.bytes(),
            elapsed,
        }
    }
}

impl Drop for Running {
    /// A test that fails while the client runs must not leave it behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a finished client did.
#[derive(Clone)]
pub struct Output {
    /// The command line, for messages.
    pub what: String,
    /// How the process ended.
    pub status: ExitStatus,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
    /// From spawn to exit.
    pub elapsed: Duration,
}

impl Output {
    /// The exit code, or `None` if a signal ended the process.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Stdout, decoded lossily.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr, decoded lossily.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// Fails the test, with everything captured, unless the exit code is `code`.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Output {
        assert!(
            self.code() == Some(code),
            "expected exit code {code}, got {}\n{self:?}",
            describe_status(self.status),
        );
        self
    }

    /// Fails the test unless the exit code is 0.
    #[track_caller]
    pub fn assert_success(&self) -> &Output {
        self.assert_code(0)
    }
}

impl fmt::Debug for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "command: {}", self.what)?;
        writeln!(
            f,
            "status: {} after {:?}",
            describe_status(self.status),
            self.elapsed
        )?;
        writeln!(f, "stdout: {:?}", truncated(&self.stdout))?;
        write!(f, "stderr: {:?}", truncated(&self.stderr))
    }
}

fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => format!("{status}"),
    }
}

/// Text for a message: lossily decoded, and cut after 4 KiB.
fn truncated(bytes: &[u8]) -> String {
    const MAX: usize = 4096;
    if bytes.len() <= MAX {
        String::from_utf8_lossy(bytes).into_owned()
    } else {
        format!(
            "{}... ({} bytes in all)",
            String::from_utf8_lossy(&bytes[..MAX]),
            bytes.len()
        )
    }
}

/// Makes `link` a symlink to `target` (e.g. a client binary named after a nail).
pub fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link)
        .unwrap_or_else(|e| panic!("symlink {} -> {}: {e}", link.display(), target.display()));
}
