//! Another user is refused: the peer's uid is checked on every connection, over loopback
//! TCP (`sock_diag`, else `/proc/net/tcp`) and over a Unix socket (`SO_PEERCRED`).
//!
//! The client runs as `nobody` through `setpriv`, which needs root; as another user the
//! test says so loudly and returns. To exercise the credential check itself rather than
//! file permissions, the test opens the server's directory (0755) and socket (0666) to
//! everyone, and copies the client binary into a directory `nobody` can reach.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use ng_tests::client::ClientCmd;
use ng_tests::{both_clients, eqnice, Address, Client, Flavor, NgdServer, Server, Transport};

/// `nobody` on Debian and most Linux systems.
const NOBODY: u32 = 65534;

/// `EX_NOPERM`: the client's user may not use this server.
const EX_NOPERM: i32 = ng_server::exit_codes::NOPERM;

/// True if this process can switch users; otherwise says loudly why the test does nothing.
fn can_switch_users(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        eprintln!(
            "\n!!!!!!!! {test}: NOT RUN: running as uid {euid}, and starting a client as \
             another user (setpriv) needs root. Run the suite as root to check that ngd \
             refuses other users. !!!!!!!!\n"
        );
        return false;
    }
    true
}

/// `mode` on `path`.
fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// A copy of `client`'s binary in a fresh 0755 directory, so `nobody` can run it whatever
/// the permissions on `target/`.
fn reachable_copy(client: Client) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("ng-client-copy-")
        .tempdir()
        .unwrap();
    chmod(dir.path(), 0o755);
    let copy = dir.path().join(client.bin().file_name().unwrap());
    ng_testkit::exe::copy_executable(&client.bin(), &copy);
    (dir, copy)
}

both_clients! {
    /// As `nobody`, over TCP and over a world-accessible Unix socket: exit 77 and one
    /// line `ngd: connection refused: ...` on stderr, nothing on stdout. The owner is
    /// served before and after, and the server counts the refusals.
    fn another_uid_is_refused(client) {
        if !can_switch_users("ngd_security::another_uid_is_refused") {
            return;
        }
        let server = NgdServer::both(Flavor::Ngd);
        let Address::Unix(socket) = server.address_on(Transport::Unix).clone() else {
            unreachable!()
        };
        // ngd made the socket its owner's alone; open it (and its directory) to all.
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "mode of {}", socket.display());
        chmod(server.dir(), 0o755);
        chmod(&socket, 0o666);
        let (_copy_dir, copy) = reachable_copy(client);
        let setpriv = ng_tests::bins::find_on_path("setpriv")
            .expect("setpriv (util-linux) is not on PATH: install util-linux");

        for transport in Transport::ALL {
            let at = server.at(transport);
            crate::version::version_matches_reference(&at, client);

            let out = ClientCmd::new(&format!("{client} as nobody"), &setpriv)
                .arg(format!("--reuid={NOBODY}"))
                .arg(format!("--regid={NOBODY}"))
                .arg("--clear-groups")
                .arg(&copy)
                .server(at.address())
                .arg("ng-version")
                .run();
            out.assert_code(EX_NOPERM);
            eqnice!("", out.stdout_text(), "{out:?}\n{}", server.log());
            let stderr = out.stderr_text();
            assert!(
                stderr.starts_with("ngd: connection refused: ")
                    && stderr.ends_with('\n')
                    && stderr.lines().count() == 1,
                "expected one line `ngd: connection refused: ...` over {transport:?}\n\
                 {out:?}\n{}",
                server.log()
            );

            crate::version::version_matches_reference(&at, client);
        }

        let out = ClientCmd::new("ngd", ng_tests::bins::ngd())
            .args(["status", "--server"])
            .arg(server.address_on(Transport::Unix).to_string())
            .run();
        out.assert_success();
        assert!(out.stdout_text().contains(", 2 refused"), "{out:?}");
    }
}
