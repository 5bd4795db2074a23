//! `ng --help`: the usage, then the commands the server offers.
//!
//! After the usage text, `ng` asks the server it would use (`NAILGUN_SERVER` and
//! `NAILGUN_PORT`, else the default address) for `ng-commands` and lists them, so one
//! command shows both `ng`'s options and what can be run. It never starts a server for
//! this, and gives up after [`TIMEOUT`]; a server that is not reachable (or is not `ngd`)
//! is mentioned in one line instead.

use crate::exit::ClientError;
use crate::transport::{self, Target};
use ng_proto::bytes::BytesMut;
use ng_proto::{ClientConfig, ClientEvent, ClientSession, Header};
use std::time::{Duration, Instant};

/// The longest `ng --help` waits for the server's answer.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// Largest command list read.
const MAX_LIST: usize = 1 << 20;

/// The text listing the server's commands (or saying why there is none), for stderr.
pub fn server_commands() -> String {
    let server = crate::env_nonempty("NAILGUN_SERVER");
    let port = crate::env_nonempty("NAILGUN_PORT");
    let target = match Target::resolve(
        server.as_deref(),
        port.as_deref(),
        transport::default_socket_path,
    ) {
        Ok(t) => t,
        Err(e) => return format!("\n{}\n", e.message().unwrap_or_default()),
    };
    match list(&target) {
        Ok(text) => format!("\nCommands offered by the server (ng-commands):\n{text}"),
        Err(_) => "\nNo server is reachable now, so its commands are not listed; with no\n\
                   server named, the first command run starts ngd.\n"
            .to_owned(),
    }
}

/// Runs `ng-commands` on `target` and returns its stdout.
fn list(target: &Target) -> Result<String, ClientError> {
    let socket = transport::connect(target)?;
    socket
        .set_read_timeout(TIMEOUT)
        .map_err(|e| ClientError::broken("setsockopt", &e))?;
    let deadline = Instant::now() + TIMEOUT;
    let now = Instant::now();
    let mut session = ClientSession::new(ClientConfig::default(), now);
    let header = Header {
        command: b"ng-commands".to_vec(),
        args: Vec::new(),
        env: Vec::new(),
        cwd: b"/".to_vec(),
    };
    session.send_header(&header, now);
    socket
        .write_all(&session.take_transmit())
        .map_err(|e| ClientError::broken("send", &e))?;
    let mut buf = BytesMut::with_capacity(64 << 10);
    let mut out = Vec::new();
    loop {
        if Instant::now() >= deadline || out.len() > MAX_LIST {
            return Err(ClientError::ConnectionBroken("timeout".into()));
        }
        buf.reserve(64 << 10);
        match socket.read_into(&mut buf) {
            Ok(0) => return Err(ClientError::ConnectionBroken("closed".into())),
            Ok(_) => {}
            Err(e) => return Err(ClientError::broken("recv", &e)),
        }
        session
            .handle_bytes(&mut buf)
            .map_err(|e| ClientError::ConnectionBroken(e.to_string()))?;
        while let Some(event) = session.poll_event() {
            match event {
                ClientEvent::Stdout(b) => out.extend_from_slice(&b),
                ClientEvent::Stderr(_) => {}
                ClientEvent::StdinRequested => {
                    session.send_stdin_eof(Instant::now());
                    socket
                        .write_all(&session.take_transmit())
                        .map_err(|e| ClientError::broken("send", &e))?;
                }
                ClientEvent::Exit(0) => return Ok(String::from_utf8_lossy(&out).into_owned()),
                ClientEvent::Exit(code) | ClientEvent::ExitBySignal { code, .. } => {
                    return Err(ClientError::ConnectionBroken(format!("exit {code}")))
                }
                // The listing announces no extensions, so none come.
                ClientEvent::Extensions(_) | ClientEvent::Stopped(_) | ClientEvent::PtyWanted => {}
            }
        }
    }
}
