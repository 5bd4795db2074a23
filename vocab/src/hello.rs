//! The hello (`docs/ngw.md` §5): the worker's first chunk, a JSON object saying which
//! protocol it speaks, what it serves and which features it uses, or why it cannot start.
//!
//! [`Hello`] is read by ngd and written by the Rust runtime. Fields it does not name are
//! ignored when it is read, so later versions can add some without a version bump.

use crate::feature::WorkerFeatures;
use serde::{Deserialize, Serialize};

/// The version of the worker protocol spoken here.
pub const PROTOCOL: u32 = 1;

/// A worker's hello.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Hello {
    /// The protocol version; ngd refuses any but [`PROTOCOL`].
    pub protocol: Option<i64>,
    /// The worker's pid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Commands it serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// `interrupt`, `fork`, ... (names this side does not know are left out).
    #[serde(default, skip_serializing_if = "is_none")]
    pub features: WorkerFeatures,
    /// Its inbound payload cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_chunk: Option<u64>,
    /// Its hangup-to-kill delay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kill_grace_ms: Option<u64>,
    /// With `mux`: how many sessions it runs at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<u64>,
    /// SDK name, for logs and status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sdk: Option<String>,
    /// The language runtime, for logs and status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// A refusal to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// It also serves command names shaped like Java class names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub class_names: bool,
}

fn is_none(features: &WorkerFeatures) -> bool {
    *features == WorkerFeatures::NONE
}

impl Hello {
    /// Whether it speaks this protocol version.
    pub fn speaks_this_protocol(&self) -> bool {
        self.protocol == Some(i64::from(PROTOCOL))
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
        let text = serde_json::to_string(&refusal).unwrap();
        assert_eq!(text, r#"{"protocol":1,"pid":7,"error":"no"}"#);
        assert_eq!(serde_json::from_str::<Hello>(&text).unwrap(), refusal);
        let old: Hello = serde_json::from_str(r#"{"protocol":2}"#).unwrap();
        assert!(!old.speaks_this_protocol());
    }
}
