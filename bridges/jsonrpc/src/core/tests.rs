//! Byte-exact tests of the core against exchanges captured from nexoai 0.4.0, MCP servers
//! and StreamNook.

use super::*;
use crate::config::Options;

fn core(opts: Value) -> (Core, Vec<Action>) {
    let opts = Arc::new(Options::from_map(opts.as_object().unwrap()).unwrap());
    let host = Arc::new(HostInfo {
        name: "demo".into(),
        host_version: "ngd-research".into(),
        data_dir: "/d".into(),
        log_dir: "/l".into(),
    });
    Core::new(opts, host, 0)
}

fn sent(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(b) => Some(String::from_utf8(b.clone()).unwrap()),
            _ => None,
        })
        .collect()
}

const NEXO_INIT_REPLY: &[u8] = b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"result\": {\"manifest\": {\"plugin\": {\"id\": \"demo\", \"version\": \"0.1.0\", \"name\": \"Demo\", \"description\": \"ngd research demo plugin\", \"extends\": {\"tools\": [\"demo_inc\", \"demo_upper\", \"demo_fail\", \"demo_sleep\"]}}}, \"server_version\": \"0.1.0\", \"tools\": [{\"name\": \"demo_inc\", \"description\": \"Increment an integer\", \"input_schema\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}, \"required\": [\"n\"]}}, {\"name\": \"demo_upper\", \"description\": \"Uppercase text\", \"input_schema\": {\"type\": \"object\", \"properties\": {\"text\": {\"type\": \"string\"}}}}, {\"name\": \"demo_fail\", \"description\": \"Always fails\", \"input_schema\": {\"type\": \"object\"}}, {\"name\": \"demo_sleep\", \"description\": \"Sleep s seconds\", \"input_schema\": {\"type\": \"object\", \"properties\": {\"s\": {\"type\": \"number\"}}}}]}}\n";

fn ready_nexo() -> Core {
    let (mut c, first) = core(json!({"profile": "nexo"}));
    assert_eq!(
        sent(&first),
        ["{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"host_version\":\"ngd-research\"}}\n"]
    );
    let acts = c.on_bytes(NEXO_INIT_REPLY, 1);
    assert!(matches!(acts.as_slice(), [Action::Ready]), "{acts:?}");
    c
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn nexo_handshake_catalog_from_the_capture() {
    let c = ready_nexo();
    let names: Vec<_> = c.catalog().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["demo_inc", "demo_upper", "demo_fail", "demo_sleep"]);
    assert_eq!(c.catalog()[0].input_schema["required"], json!(["n"]));
    assert_eq!(c.runtime(), "nexo demo 0.1.0");
}

#[test]
fn nexo_calls_byte_exact_and_out_of_order() {
    let mut c = ready_nexo();
    let (a, s1) = c
        .start_call("demo_sleep", &args(json!({"s": 0.5})), 2)
        .unwrap();
    let (b, s2) = c
        .start_call("demo_inc", &args(json!({"n": 41})), 2)
        .unwrap();
    assert_eq!(
        sent(&s1),
        ["{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tool.invoke\",\"params\":{\"tool_name\":\"demo_sleep\",\"args\":{\"s\":0.5}}}\n"]
    );
    assert_eq!(
        sent(&s2),
        ["{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tool.invoke\",\"params\":{\"tool_name\":\"demo_inc\",\"args\":{\"n\":41}}}\n"]
    );
    // The capture's replies to 21 then 20, renumbered 3 then 2, split mid-line, with a
    // stray stdout-guard line and garbage between them.
    let mut acts = c.on_bytes(b"{\"jsonrpc\": \"2.0\", \"id\": 3, \"result\": {\"n\": 42}}\nthis is not json\n{\"jsonrpc\": \"2.0\", \"id\"", 3);
    acts.extend(c.on_bytes(b": 2, \"result\": {\"slept\": 0.5}}\n", 4));
    let replies: Vec<_> = acts
        .iter()
        .filter_map(|a| match a {
            Action::Reply {
                call,
                outcome: Outcome::Result(r),
            } => Some((*call, r.get().to_owned())),
            _ => None,
        })
        .collect();
    assert_eq!(
        replies,
        [
            (b, "{\"n\": 42}".to_owned()),
            (a, "{\"slept\": 0.5}".to_owned())
        ]
    );
    assert!(acts
        .iter()
        .any(|a| matches!(a, Action::Log(l) if l.contains("malformed message skipped"))));
    assert!(c.in_flight().is_empty());
}

#[test]
fn nexo_errors_from_the_capture() {
    let mut c = ready_nexo();
    let (id, _) = c
        .start_call("demo_inc", &args(json!({"n": "x"})), 0)
        .unwrap();
    let line = format!("{{\"jsonrpc\": \"2.0\", \"id\": {id}, \"error\": {{\"code\": -33402, \"message\": \"invalid argument: n must be an integer\", \"data\": {{\"details\": {{\"field\": \"n\"}}}}}}}}\n");
    let acts = c.on_bytes(line.as_bytes(), 0);
    match acts.as_slice() {
        [Action::Reply {
            outcome: Outcome::Error(e),
            ..
        }] => {
            assert_eq!(e.code, -33402);
            assert_eq!(e.data, Some(json!({"details": {"field": "n"}})));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn oversized_requests_refused_before_sending() {
    let mut c = ready_nexo();
    let big = "x".repeat(1024 * 1024);
    match c.start_call("demo_upper", &args(json!({"text": big})), 0) {
        Err(CallError::TooLarge { limit, .. }) => assert_eq!(limit, 1 << 20),
        other => panic!("{other:?}"),
    }
    assert!(c.in_flight().is_empty());
    assert_eq!(
        c.start_call("demo_nope", &Map::new(), 0).unwrap_err(),
        CallError::UnknownTool("demo_nope".into())
    );
}

#[test]
fn oversized_reply_fails_only_its_call() {
    let (mut c, _) = core(json!({"profile": "nexo", "max_frame_bytes": 4096}));
    c.on_bytes(NEXO_INIT_REPLY, 0);
    let (a, _) = c.start_call("demo_upper", &Map::new(), 0).unwrap();
    let (b, _) = c.start_call("demo_inc", &args(json!({"n": 1})), 0).unwrap();
    let line = format!(
        "{{\"jsonrpc\": \"2.0\", \"id\": {a}, \"result\": \"{}\"}}\n",
        "y".repeat(10_000)
    );
    let acts = c.on_bytes(line.as_bytes(), 0);
    assert!(acts
        .iter()
        .any(|x| matches!(x, Action::Reply { call, outcome: Outcome::Lost(_) } if *call == a)));
    assert_eq!(c.in_flight(), [b]);
}

#[test]
fn broker_publish_goes_to_the_sole_call() {
    let mut c = ready_nexo();
    let (id, _) = c.start_call("demo_inc", &args(json!({"n": 1})), 0).unwrap();
    let acts = c.on_bytes(b"{\"jsonrpc\": \"2.0\", \"method\": \"broker.publish\", \"params\": {\"topic\": \"plugin.inbound.demo\", \"event\": {\"topic\": \"plugin.inbound.demo\", \"source\": \"demo\", \"payload\": {\"echo\": {\"x\": 1}}}}}\n", 0);
    match acts.as_slice() {
        [Action::Note { call, text }] => {
            assert_eq!(*call, id);
            assert_eq!(
                text,
                "broker.publish plugin.inbound.demo: {\"echo\":{\"x\":1}}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn host_requests_are_granted_denied_or_unknown() {
    let mut c = ready_nexo();
    let acts = c.on_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":\"r1\",\"method\":\"memory.recall\",\"params\":{}}\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"log\",\"params\":{\"level\":\"info\",\"message\":\"hi\"}}\n{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"what\"}\n", 0);
    assert_eq!(
        sent(&acts),
        [
            "{\"jsonrpc\":\"2.0\",\"id\":\"r1\",\"error\":{\"code\":-32000,\"data\":{\"name\":\"capability_denied\",\"retry_after_ms\":null},\"message\":\"capability_denied: `memory.recall` is not granted\"}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":8,\"error\":{\"code\":-32601,\"message\":\"method not found\"}}\n",
        ]
    );
    assert!(acts
        .iter()
        .any(|a| matches!(a, Action::Log(l) if l == "plugin: [info] hi")));
}

#[test]
fn nexo_shutdown_from_the_capture() {
    let mut c = ready_nexo();
    let acts = c.shutdown();
    assert_eq!(
        sent(&acts),
        ["{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"shutdown\"}\n"]
    );
    let acts = c.on_bytes(
        b"{\"jsonrpc\": \"2.0\", \"id\": 2, \"result\": {\"ok\": true}}\n",
        0,
    );
    assert!(matches!(acts.as_slice(), [Action::ShutdownAnswered]));
    assert!(c.exit().is_empty());
}

#[test]
fn pings_between_calls_and_three_misses() {
    let (mut c, _) = core(json!({"profile": "nexo", "plugin_ping_interval_ms": 100}));
    c.on_bytes(NEXO_INIT_REPLY, 0);
    assert!(c.tick(50).is_empty());
    assert_eq!(
        sent(&c.tick(100)),
        ["{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n"]
    );
    // nexo has no `ping`: "method not found" still proves it alive.
    assert!(c.on_bytes(b"{\"jsonrpc\": \"2.0\", \"id\": 2, \"error\": {\"code\": -32601, \"message\": \"method not found\"}}\n", 110).is_empty());
    // A call in flight holds pings back.
    let (_id, _) = c.start_call("demo_sleep", &Map::new(), 150).unwrap();
    assert!(c.tick(1000).is_empty());
    c.cancel(3, "client went away");
    let mut sends = 0;
    let mut verdict = None;
    for t in [1100, 1200, 1300, 1400] {
        for a in c.tick(t) {
            match a {
                Action::Send(_) => sends += 1,
                Action::Unhealthy(r) => verdict = Some(r),
                _ => {}
            }
        }
    }
    assert_eq!(sends, 3);
    assert_eq!(
        verdict.as_deref(),
        Some("no answer to 3 pings in a row (100 ms apart)")
    );
}

#[test]
fn handshake_timeout() {
    let (mut c, _) = core(json!({"profile": "nexo"}));
    assert!(c.tick(9_999).is_empty());
    match c.tick(10_000).as_slice() {
        [Action::Failed {
            reason,
            disable: false,
        }] => {
            assert_eq!(reason, "no answer to `initialize` within 10000 ms")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn mcp_handshake_and_cancel() {
    let (mut c, first) = core(json!({"profile": "mcp"}));
    assert_eq!(
        sent(&first),
        ["{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"capabilities\":{},\"clientInfo\":{\"name\":\"ngd\",\"version\":\"ngd-research\"},\"protocolVersion\":\"2025-06-18\"}}\n"]
    );
    // server-everything 2026.8.31 sends list_changed before its initialize reply.
    let acts = c.on_bytes(b"{\"method\":\"notifications/tools/list_changed\",\"jsonrpc\":\"2.0\"}\n{\"result\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"tools\":{\"listChanged\":true}},\"serverInfo\":{\"name\":\"mcp-servers/everything\",\"version\":\"2.0.0\"}},\"jsonrpc\":\"2.0\",\"id\":1}\n", 0);
    assert_eq!(
        sent(&acts),
        [
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n"
        ]
    );
    let acts = c.on_bytes(b"{\"result\":{\"tools\":[{\"name\":\"echo\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"message\":{\"type\":\"string\"}},\"required\":[\"message\"]}}],\"nextCursor\":\"p2\"},\"jsonrpc\":\"2.0\",\"id\":2}\n", 0);
    assert_eq!(sent(&acts), ["{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{\"cursor\":\"p2\"}}\n"]);
    let acts = c.on_bytes(
        b"{\"result\":{\"tools\":[{\"name\":\"get-sum\"}]},\"jsonrpc\":\"2.0\",\"id\":3}\n",
        0,
    );
    assert!(matches!(acts.as_slice(), [Action::Ready]));
    assert_eq!(c.catalog().len(), 2);
    assert_eq!(
        c.runtime(),
        "mcp mcp-servers/everything 2.0.0 (protocol 2025-06-18)"
    );
    let (id, acts) = c
        .start_call("echo", &args(json!({"message": "hi"})), 0)
        .unwrap();
    assert_eq!(
        sent(&acts),
        ["{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"message\":\"hi\"},\"_meta\":{\"progressToken\":4}}}\n"]
    );
    let acts = c.on_bytes(b"{\"method\":\"notifications/progress\",\"params\":{\"progress\":1,\"total\":5,\"progressToken\":4},\"jsonrpc\":\"2.0\"}\n", 0);
    assert!(matches!(acts.as_slice(), [Action::Note { call: 4, text }] if text == "progress 1/5"));
    let acts = c.cancel(id, "SIGINT");
    assert_eq!(
        sent(&acts),
        ["{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"reason\":\"SIGINT\",\"requestId\":4}}\n"]
    );
    let acts = c.on_bytes(b"{\"result\":{},\"jsonrpc\":\"2.0\",\"id\":4}\n", 0);
    assert!(matches!(acts.as_slice(), [Action::Log(_)]));
    // MCP has no shutdown request: stopping is closing stdin.
    assert!(matches!(
        c.shutdown().as_slice(),
        [Action::ShutdownAnswered]
    ));
}

#[test]
fn streamnook_content_length_handshake_and_mismatch() {
    let opts = json!({"profile": "streamnook", "methods": ["greet"],
        "granted": {"host_methods": ["log"], "events": ["on_watch_tick"]}, "plugin_id": "community.example"});
    let (mut c, first) = core(opts.clone());
    let body = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"data_dir\":\"/d\",\"granted\":{\"credentials\":[],\"events\":[\"on_watch_tick\"],\"host_methods\":[\"log\"],\"ui\":[]},\"host_version\":\"ngd-research\",\"log_dir\":\"/l\",\"plugin_id\":\"community.example\",\"protocol_version\":1}}";
    assert_eq!(
        sent(&first),
        [format!("Content-Length: {}\r\n\r\n{body}", body.len())]
    );
    let reply = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"plugin_version\":\"1.2.0\",\"hooks\":[\"on_watch_tick\"]}}";
    let mut framed = format!("Content-Length: {}\r\n\r\n", reply.len()).into_bytes();
    framed.extend_from_slice(reply);
    let acts = c.on_bytes(&framed, 0);
    assert_eq!(
        sent(&acts),
        ["Content-Length: 40\r\n\r\n{\"jsonrpc\":\"2.0\",\"method\":\"initialized\"}"]
    );
    assert!(matches!(acts.last(), Some(Action::Ready)));
    let acts = c.shutdown();
    assert_eq!(
        sent(&acts),
        ["Content-Length: 44\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"shutdown\"}"]
    );
    let acts = c.on_bytes(
        b"Content-Length: 38\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":null}",
        0,
    );
    assert!(matches!(acts.as_slice(), [Action::ShutdownAnswered]));
    assert_eq!(
        sent(&c.exit()),
        ["Content-Length: 33\r\n\r\n{\"jsonrpc\":\"2.0\",\"method\":\"exit\"}"]
    );

    let (mut c, _) = core(opts);
    let err = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32600,\"message\":\"unsupported protocol_version 1; this plugin needs 2\"}}";
    let mut framed = format!("Content-Length: {}\r\n\r\n", err.len()).into_bytes();
    framed.extend_from_slice(err);
    match c.on_bytes(&framed, 0).as_slice() {
        [Action::Failed { reason, disable: true }] => assert_eq!(
            reason,
            "protocol version mismatch: the plugin refused protocol_version 1 (-32600: unsupported protocol_version 1; this plugin needs 2)"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_partial_line_completed_by_a_reply_is_recovered() {
    let mut c = ready_nexo();
    let (id, _) = c.start_call("demo_inc", &args(json!({"n": 1})), 0).unwrap();
    // What demo_stray makes the real SDK write: raw bytes past its stdout guard.
    let line = format!("garbage line, not json\n{{\"partial\": {{\"jsonrpc\": \"2.0\", \"id\": {id}, \"result\": {{\"ok\": true}}}}\n");
    let acts = c.on_bytes(line.as_bytes(), 0);
    assert!(matches!(&acts[0], Action::Log(l) if l.starts_with("malformed message skipped")));
    assert!(
        matches!(&acts[1], Action::Log(l) if l == "stray output skipped before a message: {\"partial\": ")
    );
    assert!(
        matches!(&acts[2], Action::Reply { call, outcome: Outcome::Result(r) } if *call == id && r.get() == "{\"ok\": true}")
    );
}
