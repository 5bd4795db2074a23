//! The client's own failures and their exit codes (nailgun.md §3.1): 227 when the server
//! goes away mid-command, 230 when nothing listens, 226 for bad arguments.

use std::time::Duration;

use ng_tests::RefusingPort;
use ng_tests::{both_clients, eqnice, Address, Client, JavaServer, Nail, Server, Transport};

/// The server dies (SIGKILL) while a nail runs: the client reports a broken connection,
/// 227, promptly, after passing on the output it already had.
pub fn server_killed_mid_command(server: &dyn Server, client: Client) {
    let running = client
        .cmd()
        .nail(server, Nail::Sleep)
        .arg("30000")
        .timeout(Duration::from_secs(15))
        .spawn();
    running.wait_for_stdout("sleeping", Duration::from_secs(15));
    server.kill();
    let out = running.wait();
    out.assert_code(227);
    eqnice!("sleeping 30000\n", out.stdout_text(), "{out:?}");
}

both_clients! {
    fn server_killed_mid_command_gives_227(client) {
        for transport in Transport::ALL {
            server_killed_mid_command(&JavaServer::start(transport, None), client);
        }
    }
}

/// Connecting to `address` fails: 230, nothing on stdout, a message on stderr.
fn connect_fails(client: Client, address: &Address) {
    let out = client.cmd().server(address).arg("ng-version").run();
    out.assert_code(230);
    eqnice!("", out.stdout_text(), "{out:?}");
    assert!(!out.stderr.is_empty(), "no message on stderr\n{out:?}");
}

both_clients! {
    /// Nothing listens: a refused TCP port, a missing socket file, and a stale socket
    /// file left by a server that is gone.
    fn nothing_listening_gives_230(client) {
        let port = RefusingPort::new();
        connect_fails(client, port.address());

        let dir = tempfile::tempdir().unwrap();
        connect_fails(client, &Address::Unix(dir.path().join("missing.sock")));

        // Bound by another process that is gone: a listener bound here could still be
        // held, for an instant, by a child another test thread forks before its exec, and
        // a connection would then be accepted and reset.
        let stale = dir.path().join("stale.sock");
        let bound = std::process::Command::new("python3")
            .args(["-c", "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])"])
            .arg(&stale)
            .status()
            .unwrap();
        assert!(bound.success() && stale.exists());
        connect_fails(client, &Address::Unix(stale));
    }
}

both_clients! {
    /// Options without their value, or no command at all: usage on stderr, 226, and no
    /// connection attempt (the environment names a refusing port, which would give 230).
    fn bad_arguments_give_226(client) {
        let port = RefusingPort::new();
        let port_number = port.address().port().unwrap().to_string();
        let cases: &[&[&str]] = &[
            &["--nailgun-port"],
            &["--nailgun-server"],
            &["--nailgun-filearg"],
            &["ng-version", "--nailgun-port"],
            &["ng-version", "a", "--nailgun-server"],
            &["--nailgun-server", "127.0.0.1", "--nailgun-port", &port_number],
        ];
        for args in cases {
            let out = client.cmd().server_env(port.address()).args(*args).run();
            out.assert_code(226);
            eqnice!("", out.stdout_text(), "{out:?}");
            assert!(!out.stderr.is_empty(), "no usage on stderr\n{out:?}");
        }
    }
}
