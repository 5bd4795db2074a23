//! The bridge against a plugin written with the real nexo SDK (`nexoai` 0.4.0):
//! tests/fixtures/nexo_demo.py.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

fn bridge(options: serde_json::Value) -> Bridge {
    let mut opts = json!({"profile": "nexo"});
    opts.as_object_mut()
        .unwrap()
        .extend(options.as_object().unwrap().clone());
    Bridge::start("demo", &nexo_demo(), opts)
}

#[test]
fn hello_lists_every_tool_and_mux() {
    let mut b = bridge(json!({"concurrency": 8}));
    let h = b.hello();
    let cmds: Vec<&str> = h["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(cmds.len(), 17);
    assert_eq!(
        &cmds[..4],
        ["demo_inc", "demo_upper", "demo_fail", "demo_sleep"]
    );
    assert_eq!(h["max_sessions"], 8);
    assert!(h["features"].as_array().unwrap().contains(&json!("mux")));
    assert_eq!(h["runtime"], "nexo demo 0.1.0");
    assert_eq!(b.quit(), Some(0));
}

#[test]
fn every_tool_callable_by_argv_json_and_stdin() {
    let mut b = bridge(json!({}));
    let o = b.run("demo_inc", &["--n", "5"]);
    assert_eq!((o.stdout_str().as_str(), o.code), ("{\"n\": 6}\n", 0));
    let o = b.run("demo_inc", &["--json", "{\"n\": 41}"]);
    assert_eq!(o.stdout_str(), "{\"n\": 42}\n");
    let o = b.req(request("demo_inc", &["-"]).stdin("{\"n\": 9}"));
    assert_eq!(o.stdout_str(), "{\"n\": 10}\n");
    // No arguments and stdin not a terminal: the object comes from stdin.
    let o = b.req(
        request("demo_inc", &[])
            .env("NAILGUN_TTY_0", "0")
            .stdin("{\"n\": 1}\n"),
    );
    assert_eq!(o.stdout_str(), "{\"n\": 2}\n", "{}", o.stderr_str());
    // Text content is printed as text; the SDK's stdout guard keeps the stray print out.
    let o = b.run("demo_upper", &["--text", "hi"]);
    assert_eq!((o.stdout_str().as_str(), o.code), ("HI\n", 0));
    let o = b.run("demo_sleep", &["--s", "0", "--tag", "3"]);
    assert_eq!(json_out(&o), json!({"slept": 0, "tag": 3}));
    let o = b.run("demo_pid", &[]);
    assert!(json_out(&o)["pid"].as_u64().is_some());
    let o = b.run("demo_len", &["--text", "héllo"]);
    assert_eq!(json_out(&o), json!({"len": 5}));
    let o = b.run("demo_big", &["--n", "3"]);
    assert_eq!(o.stdout_str(), "xxx\n");
    assert_eq!(b.quit(), Some(0));
}

#[test]
fn typed_arguments() {
    let mut b = bridge(json!({}));
    let o = b.run(
        "demo_types",
        &[
            "--i",
            "-7",
            "--x",
            "2.5",
            "--flag",
            "--tags",
            "a",
            "--tags",
            "b c",
            "--nums",
            "1",
            "--nums",
            "2",
            "--obj",
            "{\"k\": [1]}",
            "--mode",
            "slow",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr_str());
    assert_eq!(
        json_out(&o),
        json!({"i": -7, "x": 2.5, "flag": true, "tags": ["a", "b c"], "nums": [1, 2],
               "obj": {"k": [1]}, "mode": "slow"})
    );
    let o = b.run("demo_types", &["--i=1", "--no-flag"]);
    assert_eq!(json_out(&o), json!({"i": 1, "flag": false}));
    let o = b.run(
        "demo_types",
        &["--json", "{\"i\": 1, \"x\": 1}", "--x", "3"],
    );
    assert_eq!(json_out(&o), json!({"i": 1, "x": 3}));
}

#[test]
fn usage_errors_exit_2_and_help() {
    let mut b = bridge(json!({}));
    for (args, msg) in [
        (
            &["--n", "x"][..],
            "demo_inc: --n: expected an integer, not \"x\"\n",
        ),
        (&[], "demo_inc: missing required --n (see --help)\n"),
        (
            &["--n", "1", "--m", "2"],
            "demo_inc: unknown option --m (see --help)\n",
        ),
        (
            &["--json", "nope"],
            "demo_inc: --json: not JSON: expected ident at line 1 column 2\n",
        ),
    ] {
        let o = b.run("demo_inc", args);
        assert_eq!((o.stderr_str().as_str(), o.code), (msg, 2), "{args:?}");
        assert!(o.stdout.is_empty());
    }
    let o = b.req(request("demo_inc", &["-"]).stdin("[1]"));
    assert_eq!(
        (o.stderr_str().as_str(), o.code),
        ("demo_inc: stdin: expected a JSON object\n", 2)
    );
    let o = b.req(request("demo_inc", &["-"]).stdin("{}"));
    assert_eq!(o.code, 2);
    let o = b.run("demo_types", &["--i", "1", "--mode", "medium"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr_str().contains("is not one of \"fast\", \"slow\""));
    let o = b.run("demo_types", &["--help"]);
    assert_eq!(o.code, 0);
    let help = o.stdout_str();
    assert!(help.starts_with("Usage: demo_types [OPTIONS]\n"), "{help}");
    assert!(help.contains("\nEcho typed arguments\n"));
    assert!(help.contains("--i INTEGER"));
    assert!(help.contains("an integer (required)"));
    assert!(help.contains("--tags STRING..."));
    assert!(help.contains("[one of \"fast\", \"slow\"]"));
    // The plugin was never asked: every usage error is the bridge's.
    assert!(!b.log().contains("invalid argument"));
}

#[test]
fn every_error_code() {
    let mut b = bridge(json!({}));
    let cases: [(&str, i32, &str); 5] = [
        ("demo_fail", 1, "demo_fail: execution failed: RuntimeError('boom') (error -33403)\n"),
        (
            "demo_check",
            2,
            "demo_check: invalid argument: n is out of range (error -33402)\ndemo_check: details: {\"field\":\"n\",\"max\":10}\n",
        ),
        (
            "demo_busy",
            69,
            "demo_busy: unavailable: backend warming up (error -33404)\ndemo_busy: retry after 1500 ms\n",
        ),
        ("demo_denied", 77, "demo_denied: denied: not for you (error -33405)\n"),
        ("demo_gone", 127, "demo_gone: tool not found: demo_gone (error -33401)\n"),
    ];
    for (tool, code, err) in cases {
        let o = b.run(tool, &[]);
        assert_eq!((o.stderr_str().as_str(), o.code), (err, code), "{tool}");
        assert!(o.stdout.is_empty());
    }
    // A plugin → host request that is not granted: -32000, and the plugin goes on.
    let o = b.run("demo_recall", &[]);
    assert_eq!(o.code, 0);
    assert!(
        o.stdout_str().starts_with("recall failed: "),
        "{}",
        o.stdout_str()
    );
    assert!(
        o.stdout_str().contains("capability_denied"),
        "{}",
        o.stdout_str()
    );
    assert!(b
        .log()
        .contains("denied the plugin's `memory.recall`: not granted"));
}

#[test]
fn thirty_two_concurrent_calls_answered_out_of_order() {
    let mut b = bridge(json!({"concurrency": 32}));
    let reqs: Vec<_> = (0..32)
        .map(|i| {
            let s = format!("{}", f64::from(31 - i) * 0.01);
            let tag = i.to_string();
            request("demo_sleep", &["--s", &s, "--tag", &tag])
        })
        .collect();
    let outs = b.d().run_all(&reqs).unwrap();
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.code, 0, "{}", o.stderr_str());
        assert_eq!(json_out(o)["tag"], json!(i), "call {i}");
    }
    assert_eq!(b.quit(), Some(0));
}

#[test]
fn broker_publish_reaches_the_calling_client() {
    let mut b = bridge(json!({}));
    let o = b.run("demo_publish", &[]);
    assert_eq!(o.stdout_str(), "published\n");
    assert_eq!(
        o.stderr_str(),
        "demo_publish: broker.publish plugin.inbound.demo: {\"step\":1}\n"
    );
}

#[test]
fn stray_stdout_garbage_and_partial_lines_never_corrupt_a_result() {
    let mut b = bridge(json!({}));
    let o = b.run("demo_stray", &[]);
    assert_eq!((o.stdout_str().as_str(), o.code), ("{\"ok\": true}\n", 0));
    assert!(b.log().contains("malformed message skipped"));
    assert!(b
        .log()
        .contains("stray output skipped before a message: {\"partial\": "));
    let o = b.run("demo_inc", &["--n", "1"]);
    assert_eq!(o.stdout_str(), "{\"n\": 2}\n");
}

#[test]
fn oversized_frames_each_direction() {
    let mut b = bridge(json!({"max_frame_bytes": 65536}));
    // To the plugin: nexo drops frames over 1 MiB without a word, so the bridge refuses.
    let big = "a".repeat(1024 * 1024);
    let o = b.run("demo_len", &["--text", &big]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr_str()
            .contains("over the plugin's frame limit of 1048576 bytes"),
        "{}",
        o.stderr_str()
    );
    // Just under the limit goes through.
    let ok = "a".repeat(1024 * 1024 - 200);
    let o = b.run("demo_len", &["--text", &ok]);
    assert_eq!(json_out(&o), json!({"len": 1024 * 1024 - 200}));
    // From the plugin: a reply over the cap fails its call only.
    let o = b.run("demo_big", &["--n", "100000"]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr_str()
            .contains("over the 65536-byte frame cap (raise max_frame_bytes)"),
        "{}",
        o.stderr_str()
    );
    let o = b.run("demo_inc", &["--n", "1"]);
    assert_eq!(o.stdout_str(), "{\"n\": 2}\n");
}

#[test]
fn plugin_dying_mid_call_is_reported_and_restarted() {
    let mut b = bridge(json!({"plugin_restart_backoff_ms": [50, 50, 50]}));
    let pid1 = json_out(&b.run("demo_pid", &[]))["pid"].as_u64().unwrap();
    let o = b.run("demo_crash", &[]);
    assert_eq!(o.code, 69);
    assert_eq!(
        o.stderr_str(),
        "demo_crash: the plugin exited with status 3 during the call; it is being restarted: retry\n"
    );
    let o = b.run("demo_inc", &["--n", "1"]);
    assert_eq!((o.stdout_str().as_str(), o.code), ("{\"n\": 2}\n", 0));
    let pid2 = json_out(&b.run("demo_pid", &[]))["pid"].as_u64().unwrap();
    assert_ne!(pid1, pid2);
    assert!(b.log().contains("demo: crashing on purpose"));
    assert!(b
        .log()
        .contains("the plugin exited with status 3; restarting it in 50 ms"));
}

#[test]
fn a_plugin_that_stops_answering_pings_is_restarted() {
    let mut b = bridge(json!({"plugin_ping_interval_ms": 100, "plugin_restart_backoff_ms": [50]}));
    let pid1 = json_out(&b.run("demo_pid", &[]))["pid"].as_u64().unwrap();
    // The call stops the whole process; the client gives up (hangs up), the bridge
    // discards the call, pings go unanswered, and the plugin is restarted.
    let id = b.d().start(&request("demo_freeze", &[])).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    b.d().interrupt(id, "hangup").unwrap();
    let o = b.d().finish(id).unwrap();
    assert_eq!(o.code, 129);
    b.wait_log(
        "unhealthy: no answer to 3 pings in a row (100 ms apart); restarting it",
        Duration::from_secs(20),
    );
    let o = b.run("demo_inc", &["--n", "1"]);
    assert_eq!(o.stdout_str(), "{\"n\": 2}\n");
    let pid2 = json_out(&b.run("demo_pid", &[]))["pid"].as_u64().unwrap();
    assert_ne!(pid1, pid2);
    assert!(wait_gone(pid1 as u32, Duration::from_secs(5)));
}

#[test]
fn repeated_crashes_disable_the_plugin_with_its_reason() {
    let mut b = bridge(json!({"plugin_restart_backoff_ms": [20, 20, 20]}));
    for _ in 0..3 {
        assert_eq!(b.run("demo_crash", &[]).code, 69);
    }
    // The fourth failure is one restart too many: 126, as ngd's refusals of a disabled
    // plugin.
    let o = b.run("demo_crash", &[]);
    assert_eq!(o.code, 126);
    assert_eq!(
        o.stderr_str(),
        "demo_crash: the plugin exited with status 3 during the call; the plugin is disabled: the plugin failed again after 3 restarts within 600 s (last failure: the plugin exited with status 3); `ngd reload` starts it again\n"
    );
    let o = b.run("demo_inc", &["--n", "1"]);
    assert_eq!(o.code, 126);
    assert_eq!(
        o.stderr_str(),
        "demo_inc: the plugin is disabled: the plugin failed again after 3 restarts within 600 s (last failure: the plugin exited with status 3); `ngd reload` starts it again\n"
    );
    assert!(b
        .log()
        .contains("disabled: the plugin failed again after 3 restarts within 600 s"));
    // ngd hears of the restarts and of the disabling (`notices`), and shows them.
    let kinds: Vec<String> = b
        .d()
        .notices
        .iter()
        .map(|n| n["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        ["restart", "restart", "restart", "disabled"],
        "{:?}",
        b.d().notices
    );
    assert!(b.d().notices[3]["message"]
        .as_str()
        .unwrap()
        .starts_with("the plugin failed again after 3 restarts within 600 s"));
    assert!(b.children().is_empty(), "{:?}", b.children());
    // The bridge itself still stops cleanly.
    assert_eq!(b.quit(), Some(0));
}

#[test]
fn a_client_gone_mid_call_cancels_it_and_the_plugin_keeps_serving() {
    let mut b = bridge(json!({}));
    let pid = json_out(&b.run("demo_pid", &[]))["pid"].as_u64().unwrap();
    let id = b
        .d()
        .start(&request("demo_sleep", &["--s", "0.5"]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    b.d().interrupt(id, "SIGINT").unwrap();
    let o = b.d().finish(id).unwrap();
    assert_eq!(
        (o.stderr_str().as_str(), o.code),
        ("demo_sleep: cancelled (SIGINT)\n", 130)
    );
    let id = b
        .d()
        .start(&request("demo_sleep", &["--s", "0.3"]))
        .unwrap();
    b.d().interrupt(id, "hangup").unwrap();
    assert_eq!(b.d().finish(id).unwrap().code, 129);
    // The late results are discarded; the same process goes on.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        json_out(&b.run("demo_pid", &[]))["pid"].as_u64().unwrap(),
        pid
    );
    assert!(b.log().contains("discarded"));
}

#[test]
fn stop_shuts_the_plugin_down_and_leaves_no_process() {
    let mut b = bridge(json!({}));
    let pid = json_out(&b.run("demo_pid", &[]))["pid"].as_u64().unwrap() as u32;
    assert!(alive(pid));
    assert_eq!(b.quit(), Some(0));
    assert!(wait_gone(pid, Duration::from_secs(2)));
    // nexo's `shutdown` ran: the SDK's own shutdown path, not a kill.
    assert!(!b.log().contains("killing it"), "{}", b.log());
}

#[test]
fn a_plugin_that_cannot_start_is_refused_in_the_hello() {
    let mut b = Bridge::start(
        "nope",
        &["/nonexistent/plugin".to_owned()],
        json!({"profile": "nexo"}),
    );
    let h = b.hello();
    assert_eq!(
        h["error"],
        "cannot start /nonexistent/plugin: No such file or directory (os error 2)"
    );
}

#[test]
fn a_bad_configuration_is_refused_in_the_hello() {
    let mut b = Bridge::start(
        "demo",
        &nexo_demo(),
        json!({"profile": "nexo", "framing": "xml"}),
    );
    let h = b.hello();
    assert!(h["error"]
        .as_str()
        .unwrap()
        .starts_with("bad configuration: framing = \"xml\""));
}
