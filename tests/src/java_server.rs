//! The reference Nailgun 0.9.3 Java server, run as a guard object.
//!
//! [`JavaServer`] starts `java com.martiansoftware.nailgun.NGServer` with the server jar,
//! JNA (for Unix sockets) and the compiled test nails on the classpath, waits for its
//! banner (`NGServer 0.9.3-SNAPSHOT started on ...`), and kills and reaps it on drop. Its
//! stdout and stderr are captured for failure messages.
//!
//! TCP servers bind `127.0.0.1:0` and read the port the kernel picked from the banner, so
//! no two servers race for a port. Unix servers listen on `local:<tempdir>/ng.sock` in a
//! private temporary directory that is also their working directory.
//!
//! A JVM takes about a second of CPU to start, so scenarios that leave the server as they
//! found it share one server per transport ([`JavaServer::shared`]); tests that kill the
//! server or need other settings start their own.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tempfile::TempDir;

use crate::bins;
use crate::java;
use crate::process::OwnedChild;
use crate::server::{Address, Nail, Server, Transport};

/// How long a JVM may take to print its banner. Generous: CI machines have two cores and
/// several JVMs may start at once.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A running reference server; killed when dropped.
#[derive(Debug)]
pub struct JavaServer {
    /// The JVM.
    process: OwnedChild,
    address: Address,
    /// Holds the Unix socket and is the JVM's working directory; removed on drop.
    dir: TempDir,
}

impl JavaServer {
    /// A new server on a free loopback TCP port.
    pub fn tcp() -> JavaServer {
        JavaServer::start(Transport::Tcp, None)
    }

    /// A new server on a Unix socket in a private temporary directory.
    pub fn unix() -> JavaServer {
        JavaServer::start(Transport::Unix, None)
    }

    /// The server shared by every test of this process for `transport`.
    ///
    /// Never kill it: other tests are using it. It dies with the test process.
    pub fn shared(transport: Transport) -> &'static JavaServer {
        static TCP: OnceLock<JavaServer> = OnceLock::new();
        static UNIX: OnceLock<JavaServer> = OnceLock::new();
        let cell = match transport {
            Transport::Tcp => &TCP,
            Transport::Unix => &UNIX,
        };
        cell.get_or_init(|| JavaServer::start(transport, None))
    }

    /// Starts a server on `transport`.
    ///
    /// `heartbeat_timeout` is the server's second command-line argument: how long a
    /// session may go without any chunk from the client before the server considers the
    /// client gone (default 10 s).
    pub fn start(transport: Transport, heartbeat_timeout: Option<Duration>) -> JavaServer {
        let dir = tempfile::Builder::new()
            .prefix("ng-java-")
            .tempdir()
            .expect("create the server's directory");
        let listen = match transport {
            Transport::Tcp => "127.0.0.1:0".to_string(),
            Transport::Unix => format!("local:{}", dir.path().join("ng.sock").display()),
        };
        let classpath = std::env::join_paths([
            bins::nailgun_jar(),
            bins::jna_jar(),
            java::nails_dir().to_path_buf(),
        ])
        .expect("a classpath");

        let mut cmd = Command::new(bins::java());
        cmd.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .current_dir(dir.path())
            // Quick to start and small: the nails need no optimizing compiler.
            .args(["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m"])
            .arg("-cp")
            .arg(classpath)
            .arg("com.martiansoftware.nailgun.NGServer")
            .arg(&listen)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(timeout) = heartbeat_timeout {
            cmd.arg(timeout.as_millis().to_string());
        }
        let mut server = JavaServer {
            process: OwnedChild::start(cmd).expect("start the Java Nailgun server"),
            address: Address::Unix(dir.path().join("ng.sock")),
            dir,
        };
        if !server
            .process
            .stdout
            .wait_for("started on", STARTUP_TIMEOUT)
        {
            panic!(
                "the Java server on {listen} did not start within {STARTUP_TIMEOUT:?}\n{}",
                server.log()
            );
        }
        if transport == Transport::Tcp {
            let port = banner_port(&server.process.stdout.text())
                .unwrap_or_else(|| panic!("no port in the Java server's banner\n{}", server.log()));
            server.address = Address::Tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        }
        server
    }

    /// The private directory the server runs in.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// The port in a banner like
/// `NGServer 0.9.3-SNAPSHOT started on address /127.0.0.1 port 0, port 41045.`: the last
/// number after `port `.
fn banner_port(banner: &str) -> Option<u16> {
    let line = banner.lines().find(|line| line.contains("started on"))?;
    let (_, rest) = line.rsplit_once("port ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl Server for JavaServer {
    fn describe(&self) -> String {
        format!("java-0.9.3 {}", self.address)
    }

    fn address(&self) -> &Address {
        &self.address
    }

    fn command(&self, nail: Nail) -> String {
        let class = match nail {
            Nail::Version => return "ng-version".to_string(),
            Nail::Echo => "Echo",
            Nail::Dump => "Dump",
            Nail::Exit => "Exit",
            Nail::Sleep => "Sleep",
        };
        format!("{}.{class}", java::PACKAGE)
    }

    fn version_output(&self) -> String {
        "NailGun server version 0.9.3-SNAPSHOT\n".to_string()
    }

    fn kill(&self) {
        self.process.kill();
    }

    fn log(&self) -> String {
        self.process.log(&self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::banner_port;

    #[test]
    fn banner_port_takes_the_bound_port() {
        let banner = "WARNING: x\nNGServer 0.9.3-SNAPSHOT started on address /127.0.0.1 \
                      port 0, port 41045.\n";
        assert_eq!(banner_port(banner), Some(41045));
        assert_eq!(
            banner_port("NGServer 0.9.3 started on local socket /x."),
            None
        );
    }
}
