//! What ngd tells a bridge about its plugin (`docs/ngw.md` §15.2).
//!
//! ngd starts a bridge as `ngd bridge <protocol> -- <command...>` with `NGW_BRIDGE_CONFIG`,
//! a JSON object with the plugin's `name`, `cwd` and `env` and every protocol-specific key
//! of its `[[plugin]]` table.

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The environment variable holding the bridge's configuration.
pub const CONFIG_VAR: &str = "NGW_BRIDGE_CONFIG";

/// A bridge's view of its `[[plugin]]` table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BridgeConfig {
    /// The plugin's name (`NGW_PLUGIN`).
    pub name: String,
    /// The plugin's working directory, if configured.
    pub cwd: Option<PathBuf>,
    /// The plugin's `env` table (already in the bridge's own environment).
    pub env: BTreeMap<String, String>,
    /// The protocol-specific keys, as ngd checked them.
    pub options: Map<String, Value>,
}

impl BridgeConfig {
    /// Reads `NGW_BRIDGE_CONFIG` (an empty configuration when it is not set).
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(CONFIG_VAR) {
            Ok(text) => Self::from_json(&text),
            Err(std::env::VarError::NotPresent) => Ok(Self::default()),
            Err(e) => Err(format!("{CONFIG_VAR}: {e}")),
        }
    }

    /// Parses the JSON object ngd passes.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("{CONFIG_VAR}: not JSON: {e}"))?;
        let Value::Object(mut map) = value else {
            return Err(format!("{CONFIG_VAR}: not a JSON object"));
        };
        let name = match map.remove("name") {
            Some(Value::String(s)) => s,
            None => String::new(),
            Some(_) => return Err(format!("{CONFIG_VAR}: `name` is not a string")),
        };
        let cwd = match map.remove("cwd") {
            Some(Value::String(s)) => Some(PathBuf::from(s)),
            None | Some(Value::Null) => None,
            Some(_) => return Err(format!("{CONFIG_VAR}: `cwd` is not a string")),
        };
        let env = match map.remove("env") {
            Some(Value::Object(m)) => m
                .into_iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k, s)),
                    _ => Err(format!("{CONFIG_VAR}: env.{k} is not a string")),
                })
                .collect::<Result<_, _>>()?,
            None | Some(Value::Null) => BTreeMap::new(),
            Some(_) => return Err(format!("{CONFIG_VAR}: `env` is not a table")),
        };
        Ok(Self {
            name,
            cwd,
            env,
            options: map,
        })
    }

    /// The JSON ngd passes for this configuration.
    pub fn to_json(&self) -> String {
        let mut map = self.options.clone();
        map.insert("name".into(), Value::String(self.name.clone()));
        if let Some(cwd) = &self.cwd {
            map.insert(
                "cwd".into(),
                Value::String(cwd.to_string_lossy().into_owned()),
            );
        }
        let env = self
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        map.insert("env".into(), Value::Object(env));
        Value::Object(map).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_options() {
        let text =
            r#"{"name":"inc","cwd":"/tmp","env":{"A":"1"},"gc_ms":10000,"framing":"ndjson"}"#;
        let c = BridgeConfig::from_json(text).unwrap();
        assert_eq!(c.name, "inc");
        assert_eq!(c.cwd.as_deref(), Some(std::path::Path::new("/tmp")));
        assert_eq!(c.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(c.options.len(), 2);
        assert_eq!(BridgeConfig::from_json(&c.to_json()).unwrap(), c);
    }

    #[test]
    fn rejects_non_objects() {
        assert!(BridgeConfig::from_json("[1]").is_err());
        assert!(BridgeConfig::from_json(r#"{"env":3}"#).is_err());
    }
}
