//! Stdin reaches the nail byte for byte, from a pipe and from a regular file.
//!
//! The `Echo` nail copies stdin to stdout, so the client's credit-based stdin (one `0`
//! chunk per `S`, then `.`) and its output handling are checked together against a
//! binary payload holding every byte value.
//!
//! Sizes: 1 MiB over the Unix socket for both clients, and over TCP for ours. Over TCP
//! the reference C client sends each chunk's header and payload in two `send()`s without
//! `TCP_NODELAY`, so each 2 KiB chunk waits ~40 ms for a delayed ACK (nailgun.md §6.4):
//! 1 MiB would take ~20 s. It gets [`C_CLIENT_TCP_LEN`] over TCP instead, still many
//! chunks.

use std::time::Duration;

use ng_tests::data::{self, MIB};
use ng_tests::{
    assert_bytes_eq, both_clients, eqnice, Client, JavaServer, Nail, Server, Transport,
};

/// What the C client gets over TCP: 8 chunks, about a third of a second.
const C_CLIENT_TCP_LEN: usize = 16 * 1024;

/// A megabyte at the reference Java server's pace, with room for a loaded CI machine.
const TIMEOUT: Duration = Duration::from_secs(90);

/// How stdin is attached to the client.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// A pipe fed by the harness.
    Pipe,
    /// A regular file.
    File,
}

/// `len` bytes of binary stdin come back identical through `Echo`.
pub fn echo_round_trips(server: &dyn Server, client: Client, source: Source, len: usize) {
    let input = data::binary(len);
    let file = tempfile::NamedTempFile::new().unwrap();
    let cmd = client.cmd().nail(server, Nail::Echo).timeout(TIMEOUT);
    let cmd = match source {
        Source::Pipe => cmd.stdin_bytes(input.clone()),
        Source::File => {
            std::fs::write(file.path(), &input).unwrap();
            cmd.stdin_file(file.path())
        }
    };
    let out = cmd.run();
    let context = format!("{len} bytes from a {source:?} on {}", server.describe());
    out.assert_success();
    eqnice!("", out.stderr_text(), "{context}\n{out:?}");
    assert_bytes_eq!(input, out.stdout, "{context}, took {:?}", out.elapsed);
}

/// The size a client gets over `transport` (see the module docs).
fn len_for(client: Client, transport: Transport) -> usize {
    match (client, transport) {
        (Client::CClient, Transport::Tcp) => C_CLIENT_TCP_LEN,
        _ => MIB,
    }
}

both_clients! {
    fn pipe_1mib_unix(client) {
        let server = JavaServer::shared(Transport::Unix);
        echo_round_trips(server, client, Source::Pipe, MIB);
    }
}

both_clients! {
    fn file_1mib_unix(client) {
        let server = JavaServer::shared(Transport::Unix);
        echo_round_trips(server, client, Source::File, MIB);
    }
}

both_clients! {
    /// 1 MiB for ours, 16 KiB for the C client (Nagle, see the module docs).
    fn pipe_tcp(client) {
        let len = len_for(client, Transport::Tcp);
        echo_round_trips(JavaServer::shared(Transport::Tcp), client, Source::Pipe, len);
    }
}

both_clients! {
    /// 1 MiB for ours, 16 KiB for the C client (Nagle, see the module docs).
    fn file_tcp(client) {
        let len = len_for(client, Transport::Tcp);
        echo_round_trips(JavaServer::shared(Transport::Tcp), client, Source::File, len);
    }
}

both_clients! {
    /// Empty stdin: the nail sees end of file at once and prints nothing.
    fn empty(client) {
        for transport in Transport::ALL {
            echo_round_trips(JavaServer::shared(transport), client, Source::Pipe, 0);
            echo_round_trips(JavaServer::shared(transport), client, Source::File, 0);
        }
    }
}

/// A nail that never reads stdin finishes even though stdin stays open: the client only
/// reads stdin when the server asks (`S`), like `sleep 60 | ng ng-version`.
pub fn open_stdin_is_not_waited_for(server: &dyn Server, client: Client) {
    let out = client
        .cmd()
        .nail(server, Nail::Version)
        .stdin_open()
        .timeout(Duration::from_secs(10))
        .run();
    out.assert_success();
    eqnice!(server.version_output(), out.stdout_text(), "{out:?}");
}

both_clients! {
    fn open_stdin_is_not_waited_for(client) {
        for transport in Transport::ALL {
            super::open_stdin_is_not_waited_for(JavaServer::shared(transport), client);
        }
    }
}
