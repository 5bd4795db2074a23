//! Where `ng` connects: IPv6, Unix sockets, the environment, and ngd's default socket.

use crate::util::{code, finish, temp_dir, Chunk, Server};
use std::os::unix::fs::PermissionsExt;

/// Runs `cmd` (already pointed at `server`) through one trivial session.
fn round_trip(server: &Server, cmd: &mut std::process::Command) {
    let child = cmd.arg("cmd").spawn().unwrap();
    let mut peer = server.accept();
    let header = peer.header();
    assert_eq!(header.last().unwrap(), &Chunk::new(b'C', b"cmd"));
    peer.send(b'1', b"hi\n");
    peer.exit("0\n");
    let out = finish(child);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"hi\n");
}

#[test]
fn ipv6_loopback_with_and_without_brackets() {
    for host in ["::1", "[::1]"] {
        let server = Server::tcp6(host);
        round_trip(&server, &mut server.ng());
    }
}

#[test]
fn unix_socket_absolute_path() {
    let dir = temp_dir("uds");
    let server = Server::unix(&dir.join("ng.sock"));
    round_trip(&server, &mut server.ng());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unix_socket_relative_path_is_relative_to_the_working_directory() {
    let dir = temp_dir("uds-rel");
    let server = Server::unix(&dir.join("ng.sock"));
    let mut cmd = crate::util::ng();
    cmd.args(["--nailgun-server", "local:ng.sock"])
        .current_dir(&dir);
    round_trip(&server, &mut cmd);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn environment_names_the_server() {
    let dir = temp_dir("env-uds");
    let path = dir.join("ng.sock");
    let server = Server::unix(&path);
    let mut cmd = crate::util::ng();
    cmd.env("NAILGUN_SERVER", format!("local:{}", path.display()));
    round_trip(&server, &mut cmd);

    let server = Server::tcp();
    let mut cmd = crate::util::ng();
    cmd.env("NAILGUN_SERVER", "127.0.0.1")
        .env("NAILGUN_PORT", server.port().to_string());
    round_trip(&server, &mut cmd);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn options_override_the_environment() {
    let server = Server::tcp();
    let mut cmd = server.ng();
    cmd.env("NAILGUN_SERVER", "local:/nonexistent/ng.sock")
        .env("NAILGUN_PORT", "1")
        .args(["--nailgun-server", "127.0.0.1"]);
    round_trip(&server, &mut cmd);
}

#[test]
fn default_server_is_ngds_own_socket() {
    let runtime = temp_dir("xdg");
    let dir = runtime.join("ngd");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let server = Server::unix(&dir.join("ngd.sock"));
    // No server and no port named; an empty NAILGUN_SERVER counts as not set.
    let mut cmd = crate::util::ng();
    cmd.env("XDG_RUNTIME_DIR", &runtime)
        .env("NAILGUN_SERVER", "");
    round_trip(&server, &mut cmd);
    std::fs::remove_dir_all(&runtime).unwrap();
}
