//! The hello (`docs/ngw.md` §5): the worker's first chunk, a JSON object saying which
//! protocol it speaks, what it serves and which features it uses, or why it cannot start.
//!
//! [`Hello`] is read by ngd and written by the Rust runtime. Fields it does not name are
//! ignored when it is read, so later versions can add some without a version bump.

use crate::feature::WorkerFeatures;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The version of the worker protocol spoken here.
pub const PROTOCOL: u32 = 1;

/// A worker's hello.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Hello {
    /// The protocol version; ngd refuses any but [`PROTOCOL`].
    pub protocol: Option<i64>,
    /// The worker's pid.
    pub pid: Option<u32>,
    /// Commands it serves.
    #[serde(default)]
    pub commands: Vec<String>,
    /// `interrupt`, `fork`, ... (names this side does not know are left out).
    #[serde(default)]
    pub features: WorkerFeatures,
    /// Its inbound payload cap.
    pub max_chunk: Option<u64>,
    /// Its hangup-to-kill delay.
    pub kill_grace_ms: Option<u64>,
    /// With `mux`: how many sessions it runs at once.
    pub max_sessions: Option<u64>,
    /// SDK name, for logs and status.
    pub sdk: Option<String>,
    /// The language runtime, for logs and status.
    pub runtime: Option<String>,
    /// A refusal to start.
    pub error: Option<String>,
    /// It also serves command names shaped like Java class names.
    #[serde(default)]
    pub class_names: bool,
}

impl Hello {
    /// Whether it speaks this protocol version.
    pub fn speaks_this_protocol(&self) -> bool {
        self.protocol == Some(i64::from(PROTOCOL))
    }

    /// The JSON object, with the fields that are set: no empty `commands` or `features`,
    /// no `class_names` unless true.
    pub fn to_json(&self) -> Map<String, Value> {
        let fields = [
            ("protocol", self.protocol.map(Value::from)),
            ("pid", self.pid.map(Value::from)),
            (
                "commands",
                (!self.commands.is_empty()).then(|| self.commands.clone().into()),
            ),
            (
                "features",
                (self.features != WorkerFeatures::NONE).then(|| self.features.names().into()),
            ),
            ("max_chunk", self.max_chunk.map(Value::from)),
            ("kill_grace_ms", self.kill_grace_ms.map(Value::from)),
            ("max_sessions", self.max_sessions.map(Value::from)),
            ("sdk", self.sdk.clone().map(Value::from)),
            ("runtime", self.runtime.clone().map(Value::from)),
            ("error", self.error.clone().map(Value::from)),
            ("class_names", self.class_names.then_some(Value::Bool(true))),
        ];
        let set = fields
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_owned(), v?)));
        set.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WorkerFeature;

    #[test]
    fn reads_the_documented_example_and_ignores_unknown_fields() {
        let text = r#"{"protocol": 1, "pid": 4242, "commands": ["aws"],
            "features": ["interrupt", "fork", "teleport"], "max_chunk": 16777216,
            "kill_grace_ms": 2000, "sdk": "ngw-python/0.1.0", "runtime": "CPython 3.11.7",
            "later": {"x": 1}}"#;
        let hello: Hello = serde_json::from_str(text).unwrap();
        assert!(hello.speaks_this_protocol());
        assert_eq!(hello.commands, ["aws"]);
        assert_eq!(
            hello.features,
            WorkerFeatures::of(&[WorkerFeature::Interrupt, WorkerFeature::Fork])
        );
        assert_eq!(
            (hello.max_chunk, hello.kill_grace_ms),
            (Some(16 << 20), Some(2000))
        );
        assert_eq!(hello.runtime.as_deref(), Some("CPython 3.11.7"));
        assert!(!hello.class_names);
    }

    #[test]
    fn writes_what_is_set_and_reads_it_back() {
        let refusal = Hello {
            protocol: Some(1),
            pid: Some(7),
            error: Some("no".into()),
            ..Hello::default()
        };
        let text = Value::Object(refusal.to_json()).to_string();
        assert_eq!(text, r#"{"error":"no","pid":7,"protocol":1}"#);
        assert_eq!(serde_json::from_str::<Hello>(&text).unwrap(), refusal);
        let old: Hello = serde_json::from_str(r#"{"protocol":2}"#).unwrap();
        assert!(!old.speaks_this_protocol());
    }
}
