//! The plugin host's seam for other plugin protocols, end to end on the `ngd` binary:
//! `protocol = "..."` tables are checked when the configuration loads (each bridge judges
//! its own keys), and `ngd bridge` is the hidden entry point ngd runs bridges through.

use std::process::{Command, Output};

use ng_tests::bins;

/// Runs `ngd serve` on a private socket with `config` as its configuration file.
fn serve_with(config: &str) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ngd.toml");
    std::fs::write(&path, config).expect("write config");
    let socket = dir.path().join("s.sock");
    Command::new(bins::ngd())
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .arg("--listen")
        .arg(format!("local:{}", socket.display()))
        .env("XDG_STATE_HOME", dir.path())
        .output()
        .expect("run ngd")
}

#[test]
fn a_bridged_plugin_with_an_unknown_key_is_refused_at_load() {
    let out = serve_with(
        "[[plugin]]\nname = \"inc\"\nprotocol = \"nu\"\ncommand = [\"nu_plugin_inc\"]\n\
         bogus_key = 3\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "stderr: {stderr}");
    assert!(
        stderr.contains("plugin 'inc' (protocol = \"nu\")") && stderr.contains("bogus_key"),
        "the message names the plugin, its protocol and the key: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing was served: {:?}",
        out.stdout
    );
}

#[test]
fn an_ngw_plugin_with_an_unknown_key_is_refused_at_load() {
    let out =
        serve_with("[[plugin]]\nname = \"w\"\ncommand = [\"worker\"]\nframing = \"ndjson\"\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "stderr: {stderr}");
    assert!(
        stderr.contains("plugin 'w'") && stderr.contains("unknown field `framing`"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_protocol_is_refused_at_load() {
    let out = serve_with("[[plugin]]\nname = \"g\"\nprotocol = \"grpc\"\ncommand = [\"x\"]\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "stderr: {stderr}");
    assert!(stderr.contains("grpc"), "{stderr}");
}

#[test]
fn the_bridge_subcommand_is_hidden_and_refuses_unknown_protocols() {
    let help = Command::new(bins::ngd())
        .arg("--help")
        .output()
        .expect("ngd --help");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("serve"), "{text}");
    assert!(!text.contains("bridge"), "bridge is not for users: {text}");
    let out = Command::new(bins::ngd())
        .args(["bridge", "grpc", "--", "true"])
        .output()
        .expect("ngd bridge");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no bridge for protocol \"grpc\""),
        "{stderr}"
    );
    // A configuration that is not JSON is refused before any bridge runs.
    let out = Command::new(bins::ngd())
        .args(["bridge", "nu", "--", "true"])
        .env("NGW_BRIDGE_CONFIG", "{nope")
        .output()
        .expect("ngd bridge");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("NGW_BRIDGE_CONFIG"), "{stderr}");
}
