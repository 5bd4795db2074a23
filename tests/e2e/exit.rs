//! Exit codes pass through the client, and `X` payloads parse like `atoi`.

use std::net::{Ipv4Addr, SocketAddr};

use ng_tests::{
    both_clients, eqnice, Client, FakeServer, JavaServer, Nail, Reply, Server, Transport,
};

/// The `Exit` nail's code becomes the client's exit status, and its stdout and stderr
/// lines arrive on the matching streams.
///
/// On the 0.9.3 server `ctx.exit(n)` is followed by a second `X 0` when the nail returns
/// (nailgun.md §4.4), so this also checks that the first `X` wins.
pub fn exit_code_passes_through(server: &dyn Server, client: Client, code: i32) {
    let out = client
        .cmd()
        .nail(server, Nail::Exit)
        .arg(code.to_string())
        .run();
    out.assert_code(code);
    eqnice!(format!("exit {code}\n"), out.stdout_text(), "{out:?}");
    eqnice!(
        format!("exiting with {code}\n"),
        out.stderr_text(),
        "{out:?}"
    );
}

both_clients! {
    fn codes_0_1_42_255(client) {
        for transport in Transport::ALL {
            for code in [0, 1, 42, 255] {
                exit_code_passes_through(JavaServer::shared(transport), client, code);
            }
        }
    }
}

/// Codes outside 0..=255 keep their low eight bits, as `exit(3)` would: the server
/// sends `X "-1\n"`, `X "256\n"`, `X "298\n"`.
pub fn codes_wrap_to_8_bits(server: &dyn Server, client: Client) {
    for (code, status) in [(-1, 255), (256, 0), (298, 42)] {
        let out = client
            .cmd()
            .nail(server, Nail::Exit)
            .arg(code.to_string())
            .run();
        out.assert_code(status);
    }
}

both_clients! {
    fn codes_wrap_to_8_bits(client) {
        super::codes_wrap_to_8_bits(JavaServer::shared(Transport::Tcp), client);
    }
}

both_clients! {
    /// `X` payloads the reference server never sends but other servers might: parsed like
    /// C's `atoi` (leading spaces, digits up to junk, empty is 0), then `& 0xFF`
    /// (nailgun.md §1.4; observed with the C client).
    fn x_payload_is_parsed_like_atoi(client) {
        let cases: &[(&[u8], i32)] = &[
            (b"42", 42),
            (b"", 0),
            (b" 7x", 7),
            (b"300\n", 44),
            (b"-1\n", 255),
            (b"3\n4\n", 3),
        ];
        for &(payload, status) in cases {
            let reply = Reply { stdout: b"out\n".to_vec(), stderr: Vec::new(), exit: payload.to_vec() };
            let fake = FakeServer::tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                .expect("bind a loopback port")
                .record(reply);
            let out = client.cmd().server(fake.address()).arg("cmd").run();
            assert_eq!(
                out.code(),
                Some(status),
                "X payload {:?}\n{out:?}",
                String::from_utf8_lossy(payload)
            );
            eqnice!("out\n", out.stdout_text(), "{out:?}");
        }
    }
}
