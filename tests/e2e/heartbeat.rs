//! A nail that runs for seconds is not broken by heartbeats, nor by their absence.
//!
//! These servers consider a client gone after [`HEARTBEAT_TIMEOUT`] without any chunk
//! from it (the reference default is 10 s), shorter than the 3 s nail, so only a client
//! that heartbeats while idle (the C client sends `H` about every second) keeps the
//! session alive. The `Sleep` nail reports whether the server still thought the client
//! connected when it woke up. [`a_silent_client_is_noticed`] shows the check has teeth.
//!
//! The 0.9.3 server applies the timeout as `SO_TIMEOUT`, which its JNA Unix sockets
//! ignore, so over `local:` this only checks that heartbeats do no harm.

use std::sync::OnceLock;
use std::time::Duration;

use ng_testkit::net::run_silent;
use ng_tests::{both_clients, eqnice, Client, JavaServer, Nail, Server, Transport};

/// Twice the C client's usual heartbeat interval, and well under the nail's 3 s.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(2000);

/// The heartbeat tests share one strict server per transport.
fn strict_server(transport: Transport) -> &'static JavaServer {
    static TCP: OnceLock<JavaServer> = OnceLock::new();
    static UNIX: OnceLock<JavaServer> = OnceLock::new();
    let cell = match transport {
        Transport::Tcp => &TCP,
        Transport::Unix => &UNIX,
    };
    cell.get_or_init(|| JavaServer::start(transport, Some(HEARTBEAT_TIMEOUT)))
}

/// `Sleep 3000` completes normally, with the client still connected at the end.
pub fn three_second_nail_completes(server: &dyn Server, client: Client) {
    let out = client
        .cmd()
        .nail(server, Nail::Sleep)
        .arg("3000")
        .timeout(Duration::from_secs(30))
        .run();
    out.assert_success();
    eqnice!(
        "sleeping 3000\nslept, client connected: true\n",
        out.stdout_text(),
        "on {}\n{out:?}",
        server.describe()
    );
}

both_clients! {
    fn three_second_nail_over_tcp(client) {
        three_second_nail_completes(strict_server(Transport::Tcp), client);
    }
}

both_clients! {
    fn three_second_nail_over_unix(client) {
        three_second_nail_completes(strict_server(Transport::Unix), client);
    }
}

/// Harness self-check: a client that sends no heartbeats is reported as gone, so the
/// tests above would catch a client that stopped heartbeating.
#[test]
fn a_silent_client_is_noticed() {
    let server = strict_server(Transport::Tcp);
    let chunks = run_silent(server.address(), &server.command(Nail::Sleep), &["3000"])
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log()));
    let stdout: Vec<u8> = chunks
        .iter()
        .filter(|c| c.ty == b'1')
        .flat_map(|c| c.payload.clone())
        .collect();
    eqnice!(
        "sleeping 3000\nslept, client connected: false\n",
        String::from_utf8_lossy(&stdout),
        "chunks: {chunks:?}"
    );
}
