//! The bridge against the real MCP reference server, `@modelcontextprotocol/server-everything`
//! 2026.8.31 from npm, and the Python `mcp-server-time` from PyPI (both installed by
//! scripts/peers/jsonrpc).

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

fn bridge(options: serde_json::Value) -> Bridge {
    let mut opts = json!({"profile": "mcp"});
    opts.as_object_mut()
        .unwrap()
        .extend(options.as_object().unwrap().clone());
    Bridge::start("everything", &everything(), opts)
}

#[test]
fn catalog_from_tools_list() {
    let mut b = bridge(json!({}));
    let h = b.hello();
    let cmds: Vec<&str> = h["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for t in [
        "echo",
        "get-sum",
        "get-tiny-image",
        "trigger-long-running-operation",
    ] {
        assert!(cmds.contains(&t), "{t} not in {cmds:?}");
    }
    assert!(h["runtime"]
        .as_str()
        .unwrap()
        .starts_with("mcp mcp-servers/everything "));
    assert_eq!(b.quit(), Some(0));
}

#[test]
fn tools_by_argv_json_and_stdin() {
    let mut b = bridge(json!({}));
    let o = b.run("echo", &["--message", "hi there"]);
    assert_eq!((o.stdout_str().as_str(), o.code), ("Echo: hi there\n", 0));
    let o = b.run("get-sum", &["--a", "1", "--b", "2.5"]);
    assert_eq!(o.stdout_str(), "The sum of 1 and 2.5 is 3.5.\n");
    let o = b.run("get-sum", &["--json", "{\"a\": 40, \"b\": 2}"]);
    assert_eq!(o.stdout_str(), "The sum of 40 and 2 is 42.\n");
    let o = b.req(request("echo", &["-"]).stdin("{\"message\": \"from stdin\"}"));
    assert_eq!(o.stdout_str(), "Echo: from stdin\n");
    let o = b.req(
        request("echo", &[])
            .env("NAILGUN_TTY_0", "0")
            .stdin("{\"message\": \"x\"}"),
    );
    assert_eq!(o.stdout_str(), "Echo: x\n");
    let o = b.run("get-structured-content", &["--location", "Chicago"]);
    assert_eq!(o.code, 0, "{}", o.stderr_str());
    // Anything but text content is printed as the server's JSON.
    let o = b.run("get-tiny-image", &[]);
    assert_eq!(o.code, 0);
    let v = json_out(&o);
    assert!(v["content"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "image"));
    assert_eq!(b.quit(), Some(0));
}

#[test]
fn usage_and_server_errors() {
    let mut b = bridge(json!({}));
    let o = b.run("get-sum", &["--a", "x", "--b", "1"]);
    assert_eq!(
        (o.stderr_str().as_str(), o.code),
        ("get-sum: --a: expected a number, not \"x\"\n", 2)
    );
    let o = b.run("echo", &[]);
    assert_eq!(
        (o.stderr_str().as_str(), o.code),
        ("echo: missing required --message (see --help)\n", 2)
    );
    let o = b.run("get-structured-content", &["--location", "Paris"]);
    assert_eq!(o.code, 2);
    // Arguments the bridge cannot check (given as JSON) are checked by the server, which
    // wraps its -32602 in an error result.
    let o = b.run("get-sum", &["--json", "{\"a\": \"x\", \"b\": 1}"]);
    assert_eq!(o.code, 2, "{}", o.stderr_str());
    assert!(
        o.stderr_str().starts_with("get-sum: MCP error -32602: "),
        "{}",
        o.stderr_str()
    );
    let o = b.run("echo", &["--help"]);
    assert!(o.stdout_str().contains("--message STRING"));
    assert!(o.stdout_str().contains("Message to echo (required)"));
}

#[test]
fn progress_goes_to_the_client_and_ctrl_c_cancels() {
    let mut b = bridge(json!({}));
    let o = b.run(
        "trigger-long-running-operation",
        &["--duration", "0.3", "--steps", "3"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr_str());
    let err = o.stderr_str();
    assert!(
        err.contains("trigger-long-running-operation: progress 1/3"),
        "{err}"
    );
    assert!(
        err.contains("trigger-long-running-operation: progress 3/3"),
        "{err}"
    );
    assert!(
        o.stdout_str().contains("Long running operation completed"),
        "{}",
        o.stdout_str()
    );
    let id = b
        .d()
        .start(&request(
            "trigger-long-running-operation",
            &["--duration", "5", "--steps", "5"],
        ))
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    b.d().interrupt(id, "SIGINT").unwrap();
    let o = b.d().finish(id).unwrap();
    assert_eq!(o.code, 130);
    assert!(o
        .stderr_str()
        .ends_with("trigger-long-running-operation: cancelled (SIGINT)\n"));
    let o = b.run("echo", &["--message", "still here"]);
    assert_eq!(o.stdout_str(), "Echo: still here\n");
    assert!(b
        .log()
        .contains("cancelled (SIGINT); its result will be discarded"));
}

#[test]
fn thirty_two_concurrent_calls() {
    let mut b = bridge(json!({"concurrency": 32}));
    let reqs: Vec<_> = (0..32)
        .map(|i| {
            let a = i.to_string();
            request("get-sum", &["--a", &a, "--b", "1000"])
        })
        .collect();
    let outs = b.d().run_all(&reqs).unwrap();
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(
            o.stdout_str(),
            format!("The sum of {i} and 1000 is {}.\n", i + 1000)
        );
    }
}

#[test]
fn stop_leaves_no_process() {
    let mut b = bridge(json!({}));
    assert_eq!(b.run("echo", &["--message", "x"]).code, 0);
    let kids = b.children();
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(b.quit(), Some(0));
    assert!(wait_gone(kids[0], Duration::from_secs(2)));
}

#[test]
fn a_python_mcp_server_from_pypi() {
    let mut b = Bridge::start("time", &mcp_time(), json!({"profile": "mcp"}));
    let h = b.hello();
    assert_eq!(
        h["commands"],
        json!(["get_current_time", "convert_time"]),
        "{h}\n{}",
        b.log()
    );
    let o = b.run("get_current_time", &["--timezone", "UTC"]);
    assert_eq!(o.code, 0, "{}", o.stderr_str());
    let v: serde_json::Value = serde_json::from_str(&o.stdout_str()).unwrap();
    assert_eq!(v["timezone"], "UTC");
    let o = b.run(
        "convert_time",
        &["--source-timezone", "UTC", "--time", "12:00"],
    );
    assert_eq!(
        (o.stderr_str().as_str(), o.code),
        (
            "convert_time: missing required --target_timezone (see --help)\n",
            2
        )
    );
    let o = b.run(
        "convert_time",
        &[
            "--source_timezone",
            "UTC",
            "--time",
            "12:00",
            "--target_timezone",
            "Europe/Paris",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr_str());
    assert!(o.stdout_str().contains("Europe/Paris"));
    let o = b.run("get_current_time", &["--timezone", "Nowhere/Special"]);
    assert_ne!(o.code, 0);
    assert!(
        o.stderr_str().contains("Nowhere/Special"),
        "{}",
        o.stderr_str()
    );
    assert_eq!(b.quit(), Some(0));
}
