//! `ng-version`: the smallest complete session, compared with the reference client.

use ng_tests::{both_clients, eqnice, Client, JavaServer, Nail, Server, Transport};

/// `client ng-version` prints the server's version line on stdout, nothing on stderr, and
/// exits 0; for our client, exactly what the reference client prints.
pub fn version_matches_reference(server: &dyn Server, client: Client) {
    let out = client.cmd().nail(server, Nail::Version).run();
    out.assert_success();
    eqnice!(server.version_output(), out.stdout_text(), "{out:?}");
    eqnice!("", out.stderr_text(), "{out:?}");
    if client != Client::CClient {
        let reference = Client::CClient.cmd().nail(server, Nail::Version).run();
        eqnice!(
            reference.stdout_text(),
            out.stdout_text(),
            "stdout differs from {reference:?}"
        );
        eqnice!(
            reference.stderr_text(),
            out.stderr_text(),
            "stderr differs from {reference:?}"
        );
        assert_eq!(
            reference.code(),
            out.code(),
            "{out:?}\nreference: {reference:?}"
        );
    }
}

both_clients! {
    fn ng_version(client) {
        for transport in Transport::ALL {
            version_matches_reference(JavaServer::shared(transport), client);
        }
    }
}
