//! Checks of the harness itself: the Java server starts and the raw client works.

use ng_testkit::net::run_silent;
use ng_tests::{JavaServer, Nail, Server, Transport};

#[test]
fn java_server_answers_a_raw_client() {
    for transport in [Transport::Tcp, Transport::Unix] {
        let server = JavaServer::shared(transport);
        let chunks = run_silent(server.address(), &server.command(Nail::Version), &[])
            .unwrap_or_else(|e| panic!("{e}\n{}", server.log()));
        let text: Vec<String> = chunks.iter().map(|c| format!("{c:?}")).collect();
        assert_eq!(
            text,
            ["1\"NailGun server version 0.9.3-SNAPSHOT\\n\"", "X\"0\\n\""],
            "{}",
            server.log()
        );
    }
}
