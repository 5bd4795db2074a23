//! JSON-RPC 2.0 envelopes: parsing what a plugin writes and encoding what the bridge sends.
//!
//! Requests are encoded member by member (`jsonrpc`, `id`, `method`, `params`) so the bytes
//! on the wire are the ones a reference host writes; results are kept as the plugin's raw
//! JSON text, so a result printed as JSON is exactly what the plugin produced.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    /// The error code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// `error.data`, if present.
    pub data: Option<Value>,
}

/// One message from the plugin.
#[derive(Debug)]
pub enum Incoming {
    /// A reply to one of the bridge's requests.
    Response {
        /// The id, when it is one the bridge could have sent (a non-negative integer).
        id: Option<u64>,
        /// The id as the plugin wrote it, for logs.
        raw_id: String,
        /// `result` (raw JSON text; `null` when absent) or `error`.
        outcome: Result<Box<RawValue>, RpcError>,
    },
    /// A request from the plugin to the host.
    Request {
        /// The id, echoed verbatim in the reply.
        id: Box<RawValue>,
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A notification from the plugin.
    Notification {
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<Value>,
}

/// Parses one frame's body.
pub fn parse(body: &[u8]) -> Result<Incoming, String> {
    let env: Envelope = serde_json::from_slice(body).map_err(|e| format!("not JSON-RPC: {e}"))?;
    match (env.method, env.id) {
        (Some(method), Some(id)) => Ok(Incoming::Request {
            id,
            method,
            params: env.params.unwrap_or(Value::Null),
        }),
        (Some(method), None) => Ok(Incoming::Notification {
            method,
            params: env.params.unwrap_or(Value::Null),
        }),
        (None, Some(id)) => {
            let raw_id = id.get().to_owned();
            let outcome = match env.error {
                Some(e) => Err(parse_error(e)?),
                None => Ok(env.result.unwrap_or_default()),
            };
            Ok(Incoming::Response {
                id: raw_id.parse().ok(),
                raw_id,
                outcome,
            })
        }
        (None, None) => match env.error {
            Some(e) => {
                let e = parse_error(e)?;
                Err(format!(
                    "an error without an id: {} ({})",
                    e.message, e.code
                ))
            }
            None => Err("neither a request, a notification nor a response".into()),
        },
    }
}

fn parse_error(e: Value) -> Result<RpcError, String> {
    let code = e
        .get("code")
        .and_then(Value::as_i64)
        .ok_or("an error object without an integer `code`")?;
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    Ok(RpcError {
        code,
        message,
        data: e.get("data").cloned(),
    })
}

/// Encodes a request.
pub fn request(id: u64, method: &str, params: Option<&Value>) -> Vec<u8> {
    let params = params.map(Value::to_string);
    request_raw(id, method, params.as_deref())
}

/// Encodes a request whose params are already JSON text (members in the caller's order).
pub fn request_raw(id: u64, method: &str, params: Option<&str>) -> Vec<u8> {
    let mut out = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":").into_bytes();
    push_json(&mut out, &Value::String(method.to_owned()));
    if let Some(p) = params {
        out.extend_from_slice(b",\"params\":");
        out.extend_from_slice(p.as_bytes());
    }
    out.push(b'}');
    out
}

/// Encodes a notification.
pub fn notification(method: &str, params: Option<&Value>) -> Vec<u8> {
    let mut out = b"{\"jsonrpc\":\"2.0\",\"method\":".to_vec();
    push_json(&mut out, &Value::String(method.to_owned()));
    if let Some(p) = params {
        out.extend_from_slice(b",\"params\":");
        push_json(&mut out, p);
    }
    out.push(b'}');
    out
}

/// Encodes a successful reply to a plugin's request.
pub fn reply(id: &RawValue, result: &Value) -> Vec<u8> {
    let mut out = format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":", id.get()).into_bytes();
    push_json(&mut out, result);
    out.push(b'}');
    out
}

/// Encodes an error reply to a plugin's request.
pub fn reply_error(id: &RawValue, code: i64, message: &str, data: Option<&Value>) -> Vec<u8> {
    let mut err = serde_json::Map::new();
    err.insert("code".into(), code.into());
    err.insert("message".into(), message.into());
    if let Some(d) = data {
        err.insert("data".into(), d.clone());
    }
    let mut out = format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":", id.get()).into_bytes();
    push_json(&mut out, &Value::Object(err));
    out.push(b'}');
    out
}

fn push_json(out: &mut Vec<u8>, v: &Value) {
    // Writing a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_match_the_reference_host_bytes() {
        // As nexoai 0.4.0's host sends them (captured on the wire).
        assert_eq!(
            request(8, "tools/list", None),
            br#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#
        );
        assert_eq!(
            request(99, "shutdown", None),
            br#"{"jsonrpc":"2.0","id":99,"method":"shutdown"}"#
        );
        assert_eq!(
            request(1, "initialize", Some(&json!({"host_version": "ngd-research"}))),
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"host_version":"ngd-research"}}"#
        );
    }

    #[test]
    fn parses_the_sdk_replies() {
        let m = parse(br#"{"jsonrpc": "2.0", "id": 2, "result": {"n": 6}}"#).unwrap();
        match m {
            Incoming::Response {
                id: Some(2),
                outcome: Ok(raw),
                ..
            } => assert_eq!(raw.get(), r#"{"n": 6}"#),
            other => panic!("{other:?}"),
        }
        let m = parse(br#"{"jsonrpc": "2.0", "id": 6, "error": {"code": -33402, "message": "invalid argument: n must be an integer", "data": {"details": {"field": "n"}}}}"#).unwrap();
        match m {
            Incoming::Response {
                id: Some(6),
                outcome: Err(e),
                ..
            } => {
                assert_eq!(e.code, -33402);
                assert_eq!(e.message, "invalid argument: n must be an integer");
                assert_eq!(e.data, Some(json!({"details": {"field": "n"}})));
            }
            other => panic!("{other:?}"),
        }
        let m = parse(br#"{"jsonrpc": "2.0", "method": "broker.publish", "params": {"topic": "plugin.inbound.demo", "event": {"topic": "plugin.inbound.demo", "source": "demo", "payload": {"echo": {"x": 1}}}}}"#).unwrap();
        assert!(
            matches!(m, Incoming::Notification { ref method, .. } if method == "broker.publish")
        );
    }

    #[test]
    fn null_and_missing_results_and_odd_ids() {
        for body in [
            &br#"{"jsonrpc":"2.0","id":3,"result":null}"#[..],
            br#"{"jsonrpc":"2.0","id":3}"#,
        ] {
            match parse(body).unwrap() {
                Incoming::Response {
                    id: Some(3),
                    outcome: Ok(raw),
                    ..
                } => assert_eq!(raw.get(), "null"),
                other => panic!("{other:?}"),
            }
        }
        match parse(br#"{"jsonrpc":"2.0","id":"x","result":1}"#).unwrap() {
            Incoming::Response {
                id: None, raw_id, ..
            } => assert_eq!(raw_id, "\"x\""),
            other => panic!("{other:?}"),
        }
        assert!(parse(b"this is not json").is_err());
        assert!(
            parse(br#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"p"},"id":null}"#).is_err()
        );
        assert!(parse(br#"{"jsonrpc":"2.0","id":1,"error":{"message":"no code"}}"#).is_err());
    }

    #[test]
    fn replies_echo_the_raw_id() {
        let id = RawValue::from_string("\"abc\"".into()).unwrap();
        assert_eq!(
            reply(&id, &json!({})),
            br#"{"jsonrpc":"2.0","id":"abc","result":{}}"#
        );
        assert_eq!(
            reply_error(&id, -32601, "method not found", None),
            br#"{"jsonrpc":"2.0","id":"abc","error":{"code":-32601,"message":"method not found"}}"#
        );
    }
}
