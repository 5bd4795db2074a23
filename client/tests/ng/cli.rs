//! Usage and version: printed without connecting anywhere, exit 0.

use crate::util::{code, finish, ng, Server};
use std::time::Duration;

fn version_line() -> String {
    format!(
        "NailGun client version {} (ngd)\n",
        env!("CARGO_PKG_VERSION")
    )
}

#[test]
fn ng_alone_prints_usage_and_exits_0() {
    let out = finish(ng().spawn().unwrap());
    assert_eq!(code(&out), 0);
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage: ng"));
}

#[test]
fn help_flags_print_usage() {
    for args in [&["-h"][..], &["--help"], &["cmd", "a", "--nailgun-help"]] {
        let out = finish(ng().args(args).spawn().unwrap());
        assert_eq!(code(&out), 0, "{args:?}");
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains("--nailgun-filearg"));
    }
}

#[test]
fn version_anywhere_exits_0_without_connecting() {
    let server = Server::tcp();
    let out = finish(
        server
            .ng()
            .args(["cmd", "a", "--nailgun-version", "b"])
            .spawn()
            .unwrap(),
    );
    assert_eq!(code(&out), 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout), version_line());
    assert!(out.stderr.is_empty());
    assert!(server.try_accept(Duration::from_millis(100)).is_none());
}

#[test]
fn showversion_prints_and_continues() {
    let server = Server::tcp();
    let child = server
        .ng()
        .args(["--nailgun-showversion", "cmd"])
        .spawn()
        .unwrap();
    let mut peer = server.accept();
    peer.header();
    peer.send(b'1', b"out\n");
    peer.exit("0\n");
    let out = finish(child);
    assert_eq!(code(&out), 0);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}out\n", version_line())
    );
}
