//! `ngd status`, `ngd reload` and `ngd stop`: one built-in command (`ng-stats`, `ng-reload`,
//! `ng-stop`) run on a running server over the Nailgun protocol, its output relayed, on
//! `--server ADDR` or the default Unix socket, then `127.0.0.1:2113`.

use ng_proto::{ClientConfig, ClientEvent, ClientSession, Header};
use ng_server::config::{ListenAddr, ServerConfig};
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Instant;

/// A blocking connection to a running server, split into read and write halves.
type Halves = (Box<dyn Read>, Box<dyn Write>);

fn connect(addr: &ListenAddr) -> std::io::Result<Halves> {
    match addr {
        ListenAddr::Tcp(a) => {
            let s = std::net::TcpStream::connect(a)?;
            s.set_nodelay(true)?;
            Ok((Box::new(s.try_clone()?), Box::new(s)))
        }
        ListenAddr::Unix(p) => {
            let s = std::os::unix::net::UnixStream::connect(p)?;
            Ok((Box::new(s.try_clone()?), Box::new(s)))
        }
    }
}

/// Runs one built-in command on a running server and relays its output.
pub fn run(server: Option<ListenAddr>, command: &str, args: &[&str]) -> ExitCode {
    let candidates = match server {
        Some(a) => vec![a],
        None => ServerConfig::default().listen_addrs(),
    };
    let mut conn = None;
    let mut errors = Vec::new();
    for addr in &candidates {
        match connect(addr) {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            Err(e) => errors.push(format!("{addr}: {e}")),
        }
    }
    let Some((mut reader, mut writer)) = conn else {
        eprintln!("ngd: no server is running ({})", errors.join("; "));
        return ExitCode::from(1);
    };
    let now = Instant::now();
    let mut session = ClientSession::new(ClientConfig::default(), now);
    let header = Header {
        command: command.as_bytes().to_vec(),
        args: args
            .iter()
            .map(|a| ng_proto::HeaderArg::Plain(a.as_bytes().to_vec()))
            .collect(),
        env: Vec::new(),
        cwd: std::env::current_dir()
            .map(|p| p.into_os_string().into_encoded_bytes())
            .unwrap_or_default(),
    };
    session.send_header(&header, now);
    if let Err(e) = writer.write_all(&session.take_transmit()) {
        eprintln!("ngd: send: {e}");
        return ExitCode::from(1);
    }
    let mut buf = bytes::BytesMut::with_capacity(64 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("ngd: recv: {e}");
                return ExitCode::from(1);
            }
        };
        if n == 0 {
            eprintln!("ngd: the server closed the connection early");
            return ExitCode::from(1);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Err(e) = session.handle_bytes(&mut buf) {
            eprintln!("ngd: {e}");
            return ExitCode::from(1);
        }
        while let Some(event) = session.poll_event() {
            match event {
                ClientEvent::Stdout(b) => {
                    let _ = std::io::stdout().write_all(&b);
                }
                ClientEvent::Stderr(b) => {
                    let _ = std::io::stderr().write_all(&b);
                }
                ClientEvent::StdinRequested => {
                    session.send_stdin_eof(Instant::now());
                    let _ = writer.write_all(&session.take_transmit());
                }
                ClientEvent::Exit(code) | ClientEvent::ExitBySignal { code, .. } => {
                    let _ = std::io::stdout().flush();
                    return ExitCode::from(ng_proto::exit::status(code));
                }
                // This client announces no extensions, so these never come.
                ClientEvent::Extensions(_) | ClientEvent::Stopped(_) | ClientEvent::PtyWanted => {}
            }
        }
    }
}
