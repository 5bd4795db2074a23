//! How a client is invoked: through a symlink named after a nail, and with the server
//! named by the environment instead of options.

use ng_tests::client::symlink;
use ng_tests::{both_clients, eqnice, Address, Client, Dump, JavaServer, Nail, Server, Transport};

/// A symlink to the client named `ng-version` runs `ng-version`.
pub fn symlink_runs_the_version_nail(server: &dyn Server, client: Client) {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join(server.command(Nail::Version));
    symlink(&client.bin(), &link);
    let out = client.cmd().program(&link).server(server.address()).run();
    out.assert_success();
    eqnice!(server.version_output(), out.stdout_text(), "{out:?}");
}

/// A symlink named after a nail runs it with every argument forwarded: the first
/// argument is an argument, not the command.
pub fn symlink_forwards_every_argument(server: &dyn Server, client: Client) {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join(server.command(Nail::Dump));
    symlink(&client.bin(), &link);
    let args = ["first", "", "second arg"];
    let out = client
        .cmd()
        .program(&link)
        .server(server.address())
        .args(args)
        .run();
    out.assert_success();
    assert_eq!(Dump::parse(&out.stdout).args, args, "{out:?}");
}

both_clients! {
    fn symlink_named_ng_version(client) {
        for transport in Transport::ALL {
            symlink_runs_the_version_nail(JavaServer::shared(transport), client);
        }
    }
}

both_clients! {
    fn symlink_named_after_a_class(client) {
        for transport in Transport::ALL {
            symlink_forwards_every_argument(JavaServer::shared(transport), client);
        }
    }
}

/// `NAILGUN_SERVER` and `NAILGUN_PORT` name the server when no option does.
pub fn server_from_environment(server: &dyn Server, client: Client) {
    let out = client
        .cmd()
        .server_env(server.address())
        .arg(server.command(Nail::Version))
        .run();
    out.assert_success();
    eqnice!(server.version_output(), out.stdout_text(), "{out:?}");
}

/// A relative `local:` path is relative to the client's working directory (`server`
/// must listen on a Unix socket).
pub fn relative_unix_socket_path(server: &dyn Server, client: Client) {
    let Address::Unix(path) = server.address() else {
        panic!("{} is not a Unix socket server", server.describe())
    };
    let out = client
        .cmd()
        .cwd(path.parent().unwrap())
        .server(&Address::Unix(path.file_name().unwrap().into()))
        .arg(server.command(Nail::Version))
        .run();
    out.assert_success();
    eqnice!(server.version_output(), out.stdout_text(), "{out:?}");
}

both_clients! {
    fn server_from_environment(client) {
        for transport in Transport::ALL {
            super::server_from_environment(JavaServer::shared(transport), client);
        }
    }
}

both_clients! {
    fn relative_unix_socket_path(client) {
        super::relative_unix_socket_path(JavaServer::shared(Transport::Unix), client);
    }
}
