//! What differs between profiles once the handshake is done: how a tool is called, how a
//! result is shown, and which exit code a JSON-RPC error becomes.

use crate::config::{MethodDef, Profile};
use crate::message::RpcError;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// One command the bridge serves.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// The command name.
    pub name: String,
    /// One line for `--help`.
    pub description: String,
    /// The arguments' JSON Schema.
    pub input_schema: Value,
    /// A configured method called directly, instead of the profile's tool call.
    pub method: Option<String>,
}

impl From<&MethodDef> for Tool {
    fn from(m: &MethodDef) -> Self {
        Self {
            name: m.name.clone(),
            description: m.description.clone(),
            input_schema: m.input_schema.clone(),
            method: Some(m.method.clone()),
        }
    }
}

/// Reads a catalog entry (`{"name","description","input_schema"|"inputSchema"}`).
pub fn tool_from_json(v: &Value) -> Result<Tool, String> {
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty() && !n.contains(['/', '\0']))
        .ok_or_else(|| format!("a tool without a usable name: {v}"))?;
    let schema = v
        .get("input_schema")
        .or_else(|| v.get("inputSchema"))
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    Ok(Tool {
        name: name.to_owned(),
        description: v
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        input_schema: schema,
        method: None,
    })
}

#[derive(Serialize)]
struct Invoke<'a> {
    tool_name: &'a str,
    args: &'a Map<String, Value>,
}

#[derive(Serialize)]
struct McpCall<'a> {
    name: &'a str,
    arguments: &'a Map<String, Value>,
    _meta: McpMeta,
}

#[derive(Serialize)]
struct McpMeta {
    #[serde(rename = "progressToken")]
    progress_token: u64,
}

/// The method and params (JSON text, members in the reference hosts' order) of a call to
/// `tool` with `args`; `id` is the request id (MCP's progress token).
pub fn call(profile: Profile, tool: &Tool, args: &Map<String, Value>, id: u64) -> (String, String) {
    let text = |v: Result<String, serde_json::Error>| v.unwrap_or_else(|_| "{}".into());
    if let Some(m) = &tool.method {
        return (m.clone(), text(serde_json::to_string(args)));
    }
    match profile {
        Profile::Nexo => (
            "tool.invoke".into(),
            text(serde_json::to_string(&Invoke {
                tool_name: &tool.name,
                args,
            })),
        ),
        Profile::Mcp => (
            "tools/call".into(),
            text(serde_json::to_string(&McpCall {
                name: &tool.name,
                arguments: args,
                _meta: McpMeta { progress_token: id },
            })),
        ),
        Profile::Streamnook | Profile::Plain => {
            (tool.name.clone(), text(serde_json::to_string(args)))
        }
    }
}

/// How a finished call is shown to its client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// Bytes for the client's stdout.
    pub stdout: Vec<u8>,
    /// Bytes for the client's stderr.
    pub stderr: Vec<u8>,
    /// The exit code.
    pub code: i32,
}

/// Exit codes (documented in docs/plugins-jsonrpc.md).
pub mod exit {
    /// The tool ran and reported failure (also any unclassified JSON-RPC error).
    pub const FAILED: i32 = 1;
    /// Bad arguments: usage errors, invalid params, a request too large for the plugin.
    pub const USAGE: i32 = 2;
    /// The plugin is unavailable: rate limited, restarting, exited during the call.
    /// Retrying later may work.
    pub const UNAVAILABLE: i32 = 69;
    /// The plugin is disabled (it failed more often than allowed, or refused the
    /// handshake for good): retrying does not help until `ngd reload`. The same code as
    /// ngd's refusal for any disabled plugin, which is what callers get once ngd has the
    /// bridge's `disabled` notice.
    pub const DISABLED: i32 = 126;
    /// The plugin broke the protocol (an invalid request or parse error reported, an
    /// unreadable reply).
    pub const PROTOCOL: i32 = 70;
    /// Denied: a capability or consent was refused.
    pub const DENIED: i32 = 77;
    /// The tool or method does not exist in the plugin.
    pub const NOT_FOUND: i32 = 127;
}

/// The exit code for a JSON-RPC error code.
pub fn error_exit(code: i64) -> i32 {
    match code {
        -33401 | -32601 | -32002 => exit::NOT_FOUND,
        -33402 | -32602 => exit::USAGE,
        -33405 | -32000 | -32001 => exit::DENIED,
        -33404 | -32005..=-32003 => exit::UNAVAILABLE,
        -32700 | -32600 => exit::PROTOCOL,
        _ => exit::FAILED,
    }
}

/// Shows a JSON-RPC error: its message, its `data` details and the retry hint.
pub fn render_error(command: &str, e: &RpcError) -> Rendered {
    let mut text = format!("{command}: {} (error {})\n", e.message, e.code);
    if let Some(data) = &e.data {
        let retry = data.get("retry_after_ms").and_then(Value::as_u64);
        let details = match data {
            Value::Object(m) => {
                let rest: Map<String, Value> = m
                    .iter()
                    .filter(|(k, _)| *k != "retry_after_ms")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                match rest.get("details") {
                    Some(d) if rest.len() == 1 => Some(d.clone()),
                    _ if rest.is_empty() => None,
                    _ => Some(Value::Object(rest)),
                }
            }
            Value::Null => None,
            other => Some(other.clone()),
        };
        if let Some(d) = details {
            text.push_str(&format!("{command}: details: {d}\n"));
        }
        if let Some(ms) = retry {
            text.push_str(&format!("{command}: retry after {ms} ms\n"));
        }
    }
    let code = error_exit(e.code);
    if code == exit::UNAVAILABLE && !text.contains("retry after") {
        text.push_str(&format!("{command}: unavailable for now; retry later\n"));
    }
    Rendered {
        stdout: Vec::new(),
        stderr: text.into_bytes(),
        code,
    }
}

/// Shows a result: text content as text, anything else as the plugin's JSON.
pub fn render_result(profile: Profile, command: &str, raw: &str) -> Rendered {
    let value: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    let flag = match profile {
        Profile::Mcp => "isError",
        _ => "is_error",
    };
    let is_error = value
        .get(flag)
        .or_else(|| value.get("isError"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(text) = text_content(&value) {
        if is_error {
            // MCP servers wrap protocol errors in an error result: "MCP error -32602: ...".
            let code = text
                .strip_prefix("MCP error ")
                .and_then(|r| r.split(':').next())
                .and_then(|c| c.trim().parse::<i64>().ok())
                .map_or(exit::FAILED, error_exit);
            let mut err = Vec::new();
            for line in text.lines() {
                err.extend_from_slice(format!("{command}: {line}\n").as_bytes());
            }
            return Rendered {
                stdout: Vec::new(),
                stderr: err,
                code,
            };
        }
        let mut out = text.into_bytes();
        if !out.ends_with(b"\n") {
            out.push(b'\n');
        }
        return Rendered {
            stdout: out,
            stderr: Vec::new(),
            code: 0,
        };
    }
    let mut out = match &value {
        Value::String(s) => s.clone().into_bytes(),
        _ => raw.as_bytes().to_vec(),
    };
    if !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    if is_error {
        Rendered {
            stdout: Vec::new(),
            stderr: out,
            code: exit::FAILED,
        }
    } else {
        Rendered {
            stdout: out,
            stderr: Vec::new(),
            code: 0,
        }
    }
}

/// The text of a result whose `content` is all text items (joined by newlines).
fn text_content(v: &Value) -> Option<String> {
    let items = v.get("content")?.as_array()?;
    if items.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    for item in items {
        if item.get("type").and_then(Value::as_str) != Some("text") {
            return None;
        }
        parts.push(item.get("text")?.as_str()?);
    }
    Some(parts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap()
    }

    #[test]
    fn nexo_results_from_the_capture() {
        let r = render_result(Profile::Nexo, "demo_inc", r#"{"n": 6}"#);
        assert_eq!((s(&r.stdout), r.code), ("{\"n\": 6}\n", 0));
        let r = render_result(
            Profile::Nexo,
            "demo_upper",
            r#"{"content": [{"type": "text", "text": "HI"}], "is_error": false}"#,
        );
        assert_eq!((s(&r.stdout), r.code), ("HI\n", 0));
        let r = render_result(
            Profile::Nexo,
            "t",
            r#"{"content": [{"type": "text", "text": "bad"}], "is_error": true}"#,
        );
        assert_eq!((s(&r.stderr), r.code), ("t: bad\n", 1));
    }

    #[test]
    fn mcp_results() {
        let r = render_result(
            Profile::Mcp,
            "echo",
            r#"{"content":[{"type":"text","text":"Echo: hi"}]}"#,
        );
        assert_eq!(s(&r.stdout), "Echo: hi\n");
        let r = render_result(
            Profile::Mcp,
            "get-sum",
            r#"{"content":[{"type":"text","text":"MCP error -32602: Input validation error: bad\nmore"}],"isError":true}"#,
        );
        assert_eq!(r.code, 2);
        assert_eq!(
            s(&r.stderr),
            "get-sum: MCP error -32602: Input validation error: bad\nget-sum: more\n"
        );
        let raw = r#"{"content":[{"type":"image","data":"AA==","mimeType":"image/png"}]}"#;
        let r = render_result(Profile::Mcp, "img", raw);
        assert_eq!(s(&r.stdout), format!("{raw}\n"));
    }

    #[test]
    fn errors_map_to_exit_codes() {
        for (code, exit) in [
            (-33401, 127),
            (-32601, 127),
            (-33402, 2),
            (-32602, 2),
            (-33403, 1),
            (-33404, 69),
            (-32003, 69),
            (-33405, 77),
            (-32000, 77),
            (-32600, 70),
            (-1, 1),
        ] {
            assert_eq!(error_exit(code), exit, "{code}");
        }
        let e = RpcError {
            code: -33402,
            message: "invalid argument: n must be an integer".into(),
            data: Some(json!({"details": {"field": "n"}})),
        };
        let r = render_error("demo_inc", &e);
        assert_eq!(
            s(&r.stderr),
            "demo_inc: invalid argument: n must be an integer (error -33402)\ndemo_inc: details: {\"field\":\"n\"}\n"
        );
        let e = RpcError {
            code: -33404,
            message: "unavailable: busy".into(),
            data: Some(json!({"retry_after_ms": 1500})),
        };
        let r = render_error("t", &e);
        assert_eq!(r.code, 69);
        assert!(s(&r.stderr).ends_with("t: retry after 1500 ms\n"));
    }

    #[test]
    fn calls_per_profile() {
        let t = Tool {
            name: "demo_upper".into(),
            description: String::new(),
            input_schema: json!({}),
            method: None,
        };
        let mut args = Map::new();
        args.insert("text".into(), json!("hi"));
        let (m, p) = call(Profile::Nexo, &t, &args, 3);
        // The capture's request 3, byte for byte.
        assert_eq!(
            s(&crate::message::request_raw(3, &m, Some(&p))),
            r#"{"jsonrpc":"2.0","id":3,"method":"tool.invoke","params":{"tool_name":"demo_upper","args":{"text":"hi"}}}"#
        );
        let (m, p) = call(Profile::Mcp, &t, &args, 4);
        assert_eq!(m, "tools/call");
        assert_eq!(
            p,
            r#"{"name":"demo_upper","arguments":{"text":"hi"},"_meta":{"progressToken":4}}"#
        );
    }
}
