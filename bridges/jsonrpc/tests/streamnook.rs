//! The bridge against a StreamNook protocol v1 plugin written from the protocol text
//! (tests/fixtures/streamnook_plugin.py): Content-Length framing, the handshake with
//! grants and directories, host requests, error codes, version mismatch, faults.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

fn options(extra: serde_json::Value) -> serde_json::Value {
    let mut o = json!({
        "profile": "streamnook",
        "plugin_id": "community.example",
        "granted": {"host_methods": ["log", "notify"], "events": ["on_watch_tick"]},
        "methods": [
            {"name": "greet", "description": "Say hello",
             "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}}},
            {"name": "add", "input_schema": {"type": "object",
             "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}},
            "whoami", "host_calls", "notify_me", "limited", "forbidden", "garbage", "crash",
            "missing",
            {"name": "big", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
            {"name": "echo", "method": "greet", "description": "greet under another name"},
        ],
    });
    o.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    o
}

#[test]
fn handshake_methods_and_grants() {
    let mut b = Bridge::start("sn", &streamnook(&[]), options(json!({})));
    let h = b.hello();
    assert_eq!(h["runtime"], "streamnook community.example 1.2.0");
    assert_eq!(h["commands"].as_array().unwrap().len(), 12);
    let o = b.run("greet", &["--name", "ngd"]);
    assert_eq!(json_out(&o), json!({"greeting": "hello, ngd"}));
    let o = b.run("echo", &["--json", "{\"name\": \"x\"}"]);
    assert_eq!(json_out(&o), json!({"greeting": "hello, x"}));
    let o = b.req(request("add", &["-"]).stdin("{\"a\": 2, \"b\": 3}"));
    assert_eq!(o.stdout_str(), "5\n");
    let o = b.run("whoami", &[]);
    let v = json_out(&o);
    assert_eq!(
        v["granted"],
        json!({"events": ["on_watch_tick"], "host_methods": ["log", "notify"], "credentials": [], "ui": []})
    );
    // Plugin → host: `log` granted (into the plugin log), `get_followed_live` not granted
    // (-32000), an unknown method (-32601).
    let o = b.run("host_calls", &[]);
    assert_eq!(
        json_out(&o),
        json!({
            "log": {},
            "get_followed_live": {"code": -32000, "message": "capability_denied: `get_followed_live` is not granted",
                                  "data": {"name": "capability_denied", "retry_after_ms": null}},
            "bogus": {"code": -32601, "message": "method not found"},
        })
    );
    assert!(b.log().contains("plugin: [info] hello from the plugin"));
    // `notify` during a call reaches that call's client.
    let o = b.run("notify_me", &[]);
    assert_eq!(o.stdout_str(), "notified\n");
    assert_eq!(o.stderr_str(), "notify_me: heads up\n");
    // The hooks outside the granted events are ignored, and said so.
    assert!(b
        .log()
        .contains("hook `on_followed_live` is not among the granted events; ignored"));
    assert_eq!(b.quit(), Some(0));
    // shutdown → exit: the plugin exits on its own.
    assert!(b.log().contains("streamnook-plugin: exit"));
}

#[test]
fn error_codes() {
    let mut b = Bridge::start("sn", &streamnook(&[]), options(json!({})));
    let o = b.run("limited", &[]);
    assert_eq!(
        (o.stderr_str().as_str(), o.code),
        ("limited: rate_limited (error -32003)\nlimited: details: {\"name\":\"rate_limited\"}\nlimited: retry after 2500 ms\n", 69)
    );
    let o = b.run("forbidden", &[]);
    assert_eq!(o.code, 77);
    let o = b.run("missing", &[]);
    assert_eq!(
        (o.stderr_str().as_str(), o.code),
        ("missing: method not found: missing (error -32601)\n", 127)
    );
    let o = b.run("add", &["--a", "1"]);
    assert_eq!(
        (o.stderr_str().as_str(), o.code),
        ("add: missing required --b (see --help)\n", 2)
    );
}

#[test]
fn protocol_version_mismatch_disables_with_the_reason() {
    let mut b = Bridge::start(
        "sn",
        &streamnook(&["--require-protocol", "2"]),
        options(json!({})),
    );
    let h = b.hello();
    assert_eq!(
        h["error"],
        "protocol version mismatch: the plugin refused protocol_version 1 (-32600: unsupported protocol_version 1; this plugin speaks 2)"
    );
    assert!(b.children().is_empty());
}

#[test]
fn a_slow_handshake_times_out() {
    let mut b = Bridge::start(
        "sn",
        &streamnook(&["--slow-init", "30"]),
        options(json!({"plugin_handshake_timeout_ms": 300})),
    );
    assert_eq!(
        b.hello()["error"],
        "no answer to `initialize` within 300 ms"
    );
}

#[test]
fn garbage_and_oversized_frames() {
    let mut b = Bridge::start(
        "sn",
        &streamnook(&[]),
        options(json!({"max_frame_bytes": 65536})),
    );
    let o = b.run("garbage", &[]);
    assert_eq!(o.stdout_str(), "after garbage\n");
    assert!(b
        .log()
        .contains("stray output skipped: this is not a header"));
    let o = b.run("big", &["--n", "100000"]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr_str().contains("over the 65536-byte frame cap"),
        "{}",
        o.stderr_str()
    );
    let o = b.run("big", &["--n", "10"]);
    assert_eq!(o.stdout_str(), "yyyyyyyyyy\n");
    // To the plugin: over StreamNook's 4 MiB.
    let text = "z".repeat(4 * 1024 * 1024);
    let o = b.run("greet", &["--name", &text]);
    assert_eq!(o.code, 2);
    assert!(o
        .stderr_str()
        .contains("over the plugin's frame limit of 4194304 bytes"));
}

#[test]
fn crash_restart_and_clean_stop() {
    let mut b = Bridge::start(
        "sn",
        &streamnook(&[]),
        options(json!({"plugin_restart_backoff_ms": [30]})),
    );
    let o = b.run("crash", &[]);
    assert_eq!(o.code, 69);
    assert_eq!(
        b.run("greet", &[]).stdout_str(),
        "{\"greeting\": \"hello, world\"}\n"
    );
    let kids = b.children();
    assert_eq!(kids.len(), 1);
    assert_eq!(b.quit(), Some(0));
    assert!(wait_gone(kids[0], Duration::from_secs(2)));
}
