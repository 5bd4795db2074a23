//! `ngd` under test, run as a guard object: the real `ngd` binary, or `ngd-testbed` (the
//! same server library with the test nails built in).
//!
//! [`NgdServer::builder`] starts `<binary> serve --listen 127.0.0.1:0 --listen
//! local:<tempdir>/ngd.sock` (either or both, or no `--listen` at all to test the
//! defaults), waits for the ready line `<name> <version> listening on <addresses>` and
//! takes the addresses from it (with port 0 the kernel's choice is printed, so no two
//! servers race for a port). The guard kills and reaps the server on drop, and exposes its
//! pid (for `/proc/<pid>/fd`), its private directory and its log.
//!
//! Every server runs with an emptied environment in which `XDG_CONFIG_HOME` and
//! `XDG_RUNTIME_DIR` point into its private directory, so no test ever reads a
//! developer's `ngd.toml` or touches their real runtime directory. Settings go through a
//! config file (`--config`), which both binaries read.
//!
//! A server listening on both transports implements [`Server`] with its first address;
//! [`NgdServer::at`] gives a [`Server`] for either one. `ngd` starts in milliseconds, so
//! tests that kill or stop the server simply start their own.

use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use ng_testkit::procfs;

use crate::bins;
use crate::process::OwnedChild;
use crate::server::{Address, Nail, Server, Transport};

/// How long a server may take to print its ready line (a debug build on a loaded
/// two-core machine, with other servers starting).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// What prefixes the addresses in the ready line.
const READY: &str = " listening on ";

/// Which server binary runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// The real `ngd` binary: built-in commands only (`ng-version`, `ng-cat`, ...).
    Ngd,
    /// `ngd-testbed` (`tests/src/bin/ngd-testbed.rs`): the built-ins plus the test nails.
    Testbed,
}

impl Flavor {
    /// The binary.
    pub fn bin(self) -> PathBuf {
        match self {
            Flavor::Ngd => bins::ngd(),
            Flavor::Testbed => bins::ngd_testbed(),
        }
    }

    /// `ngd` or `ngd-testbed`.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Ngd => "ngd",
            Flavor::Testbed => "ngd-testbed",
        }
    }
}

/// Where a server should listen.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Listen {
    /// `127.0.0.1:0`.
    Tcp,
    /// `local:<dir>/ngd.sock`.
    Unix,
    /// A literal `--listen` value.
    Addr(String),
}

/// Configures and starts an [`NgdServer`].
#[derive(Debug)]
pub struct NgdBuilder {
    flavor: Flavor,
    listen: Vec<Listen>,
    config: String,
    env: Vec<(OsString, OsString)>,
}

impl NgdBuilder {
    /// Listens on a free loopback TCP port.
    pub fn tcp(mut self) -> NgdBuilder {
        self.listen.push(Listen::Tcp);
        self
    }

    /// Listens on `ngd.sock` in the server's private directory.
    pub fn unix(mut self) -> NgdBuilder {
        self.listen.push(Listen::Unix);
        self
    }

    /// Listens on `transport` (see [`tcp`](NgdBuilder::tcp), [`unix`](NgdBuilder::unix)).
    pub fn transport(self, transport: Transport) -> NgdBuilder {
        match transport {
            Transport::Tcp => self.tcp(),
            Transport::Unix => self.unix(),
        }
    }

    /// Passes `--listen addr` as given.
    pub fn listen(mut self, addr: impl Into<String>) -> NgdBuilder {
        self.listen.push(Listen::Addr(addr.into()));
        self
    }

    /// Sets the server's heartbeat timeout (`heartbeat_timeout_ms` in its config file).
    pub fn heartbeat_timeout(self, timeout: Duration) -> NgdBuilder {
        self.config_line(format!("heartbeat_timeout_ms = {}", timeout.as_millis()))
    }

    /// Adds a line to the server's config file (top-level keys only).
    pub fn config_line(mut self, line: impl AsRef<str>) -> NgdBuilder {
        self.config.push_str(line.as_ref());
        self.config.push('\n');
        self
    }

    /// Sets an environment variable for the server (after the harness's own, so it can
    /// override `XDG_RUNTIME_DIR`).
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> NgdBuilder {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Starts the server and waits until it is ready; fails the test if it is not.
    #[track_caller]
    pub fn start(self) -> NgdServer {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts the server and waits until it is ready, or returns its log if it exits or
    /// does not get ready in time.
    pub fn try_start(self) -> Result<NgdServer, String> {
        let dir = tempfile::Builder::new()
            .prefix("ngd-test-")
            .tempdir()
            .expect("create the server's directory");
        let config_file = dir.path().join("ngd-test.toml");
        std::fs::write(&config_file, &self.config).expect("write the server's config file");
        std::fs::create_dir(dir.path().join("config")).expect("create XDG_CONFIG_HOME");
        std::fs::create_dir(dir.path().join("runtime")).expect("create XDG_RUNTIME_DIR");

        let bin = self.flavor.bin();
        let mut cmd = Command::new(&bin);
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_RUNTIME_DIR", dir.path().join("runtime"))
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir.path())
            .arg("serve")
            .arg("--config")
            .arg(&config_file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for listen in &self.listen {
            let value = match listen {
                Listen::Tcp => "127.0.0.1:0".to_string(),
                Listen::Unix => format!("local:{}", dir.path().join("ngd.sock").display()),
                Listen::Addr(a) => a.clone(),
            };
            cmd.arg("--listen").arg(value);
        }
        let what = format!("{:?}", cmd);
        let process = OwnedChild::start(cmd)
            .unwrap_or_else(|e| panic!("could not start {}: {e}", bin.display()));
        let mut server = NgdServer {
            flavor: self.flavor,
            pid: process.pid(),
            process,
            addresses: Vec::new(),
            dir,
        };
        match server.ready_line() {
            Some(line) => {
                server.addresses = parse_ready_line(&line)
                    .ok_or_else(|| format!("unreadable ready line {line:?}\n{}", server.log()))?;
                Ok(server)
            }
            None => {
                server.kill();
                Err(format!(
                    "{} did not get ready within {STARTUP_TIMEOUT:?} ({})\ncommand: {what}\n{}",
                    self.flavor.name(),
                    server.describe_status(),
                    server.log()
                ))
            }
        }
    }
}

/// A running `ngd` or `ngd-testbed`; killed when dropped.
#[derive(Debug)]
pub struct NgdServer {
    flavor: Flavor,
    /// The server's process.
    process: OwnedChild,
    pid: u32,
    addresses: Vec<Address>,
    /// The socket, the config file, `XDG_*` directories, and the server's cwd.
    dir: TempDir,
}

impl NgdServer {
    /// A builder for a server of `flavor` (add at least one listener, or none for the
    /// defaults).
    pub fn builder(flavor: Flavor) -> NgdBuilder {
        NgdBuilder {
            flavor,
            listen: Vec::new(),
            config: String::new(),
            env: Vec::new(),
        }
    }

    /// A new server of `flavor` on a loopback TCP port and a Unix socket.
    pub fn both(flavor: Flavor) -> NgdServer {
        NgdServer::builder(flavor).tcp().unix().start()
    }

    /// The server of `flavor` shared by every test of this process, on both transports.
    ///
    /// Never kill or stop it: other tests are using it. It dies with the test process.
    pub fn shared(flavor: Flavor) -> &'static NgdServer {
        static NGD: OnceLock<NgdServer> = OnceLock::new();
        static TESTBED: OnceLock<NgdServer> = OnceLock::new();
        let cell = match flavor {
            Flavor::Ngd => &NGD,
            Flavor::Testbed => &TESTBED,
        };
        cell.get_or_init(|| NgdServer::both(flavor))
    }

    /// Which binary runs.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Every address from the ready line, in order.
    pub fn addresses(&self) -> &[Address] {
        &self.addresses
    }

    /// The first address on `transport`; fails the test if there is none.
    #[track_caller]
    pub fn address_on(&self, transport: Transport) -> &Address {
        self.addresses
            .iter()
            .find(|a| a.transport() == transport)
            .unwrap_or_else(|| panic!("{} does not listen on {transport:?}", self.describe()))
    }

    /// This server as a [`Server`] reached over `transport`.
    #[track_caller]
    pub fn at(&self, transport: Transport) -> At<'_> {
        At {
            server: self,
            address: self.address_on(transport).clone(),
        }
    }

    /// The private directory (the Unix socket, `config/`, `runtime/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// How many file descriptors the server has open now (`/proc/<pid>/fd`).
    pub fn fd_count(&self) -> usize {
        procfs::fd_count(self.pid)
            .unwrap_or_else(|e| panic!("read /proc/{}/fd: {e}\n{}", self.pid, self.log()))
    }

    /// Waits until the server has exactly `baseline` descriptors open, for at most
    /// `timeout`; fails the test with the descriptor list otherwise.
    #[track_caller]
    pub fn wait_fd_count(&self, baseline: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let now = self.fd_count();
            if now == baseline {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{}: {now} descriptors open {timeout:?} later, expected {baseline}:\n{}\n{}",
                    self.describe(),
                    procfs::fd_listing(self.pid),
                    self.log()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the server to exit on its own, for at most `timeout`, and returns how it
    /// ended; `None` if it is still running.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        self.process.wait_exit(timeout)
    }

    /// Whether the server's process is still running.
    pub fn is_running(&self) -> bool {
        self.wait_exit(Duration::ZERO).is_none()
    }

    /// The server's stdout so far.
    pub fn stdout_text(&self) -> String {
        self.process.stdout.text()
    }

    /// The server's stderr (its log) so far.
    pub fn stderr_text(&self) -> String {
        self.process.stderr.text()
    }

    /// The complete ready line, once it has been printed.
    fn ready_line(&self) -> Option<String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        if !self.process.stdout.wait_for(READY, STARTUP_TIMEOUT) {
            return None;
        }
        // The line is printed with one write, but be patient about its end anyway.
        loop {
            let text = self.process.stdout.text();
            let line = text
                .split_inclusive('\n')
                .find(|l| l.contains(READY) && l.ends_with('\n'));
            if let Some(line) = line {
                return Some(line.trim_end().to_string());
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(2));
        }
    }

    fn describe_status(&self) -> String {
        match self.wait_exit(Duration::ZERO) {
            Some(status) => format!("it exited: {status}"),
            None => "still running".to_string(),
        }
    }
}

/// The addresses in `<name> <version> listening on <a>, <b>`.
fn parse_ready_line(line: &str) -> Option<Vec<Address>> {
    let (_, list) = line.split_once(READY)?;
    list.split(", ")
        .map(|a| match a.strip_prefix("local:") {
            Some(path) => Some(Address::Unix(PathBuf::from(path))),
            None => a.parse::<SocketAddr>().ok().map(Address::Tcp),
        })
        .collect()
}

impl Server for NgdServer {
    fn describe(&self) -> String {
        let addrs: Vec<String> = self.addresses.iter().map(Address::to_string).collect();
        format!(
            "{} pid {} {}",
            self.flavor.name(),
            self.pid,
            addrs.join(", ")
        )
    }

    fn address(&self) -> &Address {
        self.addresses
            .first()
            .expect("a started server has an address")
    }

    fn command(&self, nail: Nail) -> String {
        command(self.flavor, nail)
    }

    fn version_output(&self) -> String {
        format!(
            "NailGun server version {} (ngd)\n",
            ng_server::builtins::VERSION
        )
    }

    fn kill(&self) {
        self.process.kill();
    }

    fn log(&self) -> String {
        self.process.log(&self.describe())
    }
}

/// The command name of `nail` on a server of `flavor`.
///
/// The real `ngd` has only its built-ins: `Echo` is `ng-cat`, which has the same contract;
/// `Dump`, `Exit` and `Sleep` exist on the test-bed only.
pub fn command(flavor: Flavor, nail: Nail) -> String {
    match (flavor, nail) {
        (_, Nail::Version) => "ng-version",
        (Flavor::Ngd, Nail::Echo) => "ng-cat",
        (Flavor::Testbed, Nail::Echo) => "ngtest-echo",
        (Flavor::Testbed, Nail::Dump) => "ngtest-dump",
        (Flavor::Testbed, Nail::Exit) => "ngtest-exit",
        (Flavor::Testbed, Nail::Sleep) => "ngtest-sleep",
        (Flavor::Ngd, nail) => {
            panic!("the ngd binary has no {nail:?} nail: start the server with Flavor::Testbed")
        }
    }
    .to_string()
}

/// An [`NgdServer`] reached over one of its addresses.
#[derive(Debug)]
pub struct At<'a> {
    server: &'a NgdServer,
    address: Address,
}

impl At<'_> {
    /// The server behind this address.
    pub fn server(&self) -> &NgdServer {
        self.server
    }
}

impl Server for At<'_> {
    fn describe(&self) -> String {
        format!("{} via {}", self.server.describe(), self.address)
    }

    fn address(&self) -> &Address {
        &self.address
    }

    fn command(&self, nail: Nail) -> String {
        self.server.command(nail)
    }

    fn version_output(&self) -> String {
        self.server.version_output()
    }

    fn kill(&self) {
        self.server.kill();
    }

    fn log(&self) -> String {
        self.server.log()
    }
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_line_gives_every_address() {
        let line = "ngd 0.1.0 listening on 127.0.0.1:37173, local:/tmp/x y/ngd.sock, [::1]:5";
        assert_eq!(
            parse_ready_line(line),
            Some(vec![
                Address::Tcp("127.0.0.1:37173".parse().unwrap()),
                Address::Unix(PathBuf::from("/tmp/x y/ngd.sock")),
                Address::Tcp("[::1]:5".parse().unwrap()),
            ])
        );
        assert_eq!(parse_ready_line("ngd 0.1.0 listening on nonsense"), None);
    }
}
