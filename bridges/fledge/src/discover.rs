//! The bridge's options, and finding installed fledge plugins the way fledge 1.8.0 does.
//!
//! Plugins live in `<plugins_dir>/<name>/plugin.toml` (fledge's default `plugins_dir` is
//! `$XDG_CONFIG_HOME/fledge/plugins`, else `~/.config/fledge/plugins`). Every `[[commands]]`
//! entry becomes a command of the bridge. Granted capabilities are recorded by `fledge
//! plugins install` in `<plugins_dir>/../plugins.toml` (`[[plugins]]` entries with a
//! `capabilities` table); fledge falls back to the manifest's `[capabilities]` when an
//! entry has none. The `[[plugin]]` table's `grants` option names grants for plugins that
//! fledge never installed (and overrides the registry for those it names).

use crate::protocol::Capabilities;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// The bridge's options (the `[[plugin]]` table's protocol-specific keys).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Where the plugins are (`None`: fledge's default, resolved from the environment).
    pub plugins_dir: Option<PathBuf>,
    /// Capabilities by plugin name.
    pub grants: BTreeMap<String, Capabilities>,
    /// How long a question may stay unanswered.
    pub prompt_timeout: Duration,
    /// Whether the next plugin process is started ahead.
    pub spare: bool,
    /// Concurrent sessions.
    pub max_sessions: u32,
    /// The version announced in `init.fledge.version`.
    pub fledge_version: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            plugins_dir: None,
            grants: BTreeMap::new(),
            prompt_timeout: Duration::from_secs(300),
            spare: true,
            max_sessions: 64,
            fledge_version: "1.8.0".into(),
        }
    }
}

impl Options {
    /// Parses the table's keys; an unknown key or a bad value is an error naming it.
    pub fn from_map(map: &Map<String, Value>) -> Result<Self, String> {
        let mut o = Self::default();
        for (key, value) in map {
            match key.as_str() {
                "plugins_dir" => {
                    let s = value
                        .as_str()
                        .filter(|s| !s.is_empty())
                        .ok_or("`plugins_dir` must be a non-empty string (a directory)")?;
                    o.plugins_dir = Some(PathBuf::from(s));
                }
                "grants" => {
                    let table = value.as_object().ok_or(
                        "`grants` must be a table: plugin name = [\"exec\", \"store\", \"metadata\", \"network\"]",
                    )?;
                    for (name, list) in table {
                        let list = list
                            .as_array()
                            .ok_or(format!("`grants.{name}` must be an array of capability names"))?;
                        let mut caps = Capabilities::default();
                        for c in list {
                            match c.as_str() {
                                Some("exec") => caps.exec = true,
                                Some("store") => caps.store = true,
                                Some("metadata") => caps.metadata = true,
                                Some("network") => caps.network = true,
                                _ => {
                                    return Err(format!(
                                        "`grants.{name}`: {c} is not one of \"exec\", \"store\", \"metadata\", \"network\""
                                    ))
                                }
                            }
                        }
                        o.grants.insert(name.clone(), caps);
                    }
                }
                "prompt_timeout_ms" => {
                    let ms = value
                        .as_u64()
                        .filter(|ms| *ms > 0)
                        .ok_or("`prompt_timeout_ms` must be a positive integer")?;
                    o.prompt_timeout = Duration::from_millis(ms);
                }
                "spare" => {
                    o.spare = value.as_bool().ok_or("`spare` must be true or false")?;
                }
                "max_sessions" => {
                    o.max_sessions = value
                        .as_u64()
                        .filter(|n| (1..=1024).contains(n))
                        .ok_or("`max_sessions` must be an integer from 1 to 1024")?
                        as u32;
                }
                "fledge_version" => {
                    o.fledge_version = value
                        .as_str()
                        .filter(|s| !s.is_empty())
                        .ok_or("`fledge_version` must be a non-empty string")?
                        .to_owned();
                }
                other => {
                    return Err(format!(
                        "unknown key `{other}` (fledge-v1 takes plugins_dir, grants, prompt_timeout_ms, spare, max_sessions, fledge_version)"
                    ))
                }
            }
        }
        Ok(o)
    }

    /// The plugins directory: the option, else fledge's default from `env`.
    pub fn resolve_plugins_dir(&self, env: impl Fn(&str) -> Option<String>) -> PathBuf {
        if let Some(d) = &self.plugins_dir {
            return d.clone();
        }
        default_plugins_dir(env)
    }
}

/// fledge's plugins directory: `dirs::config_dir()/fledge/plugins`, where the config
/// directory is `$XDG_CONFIG_HOME` when absolute, else `$HOME/.config`.
pub fn default_plugins_dir(env: impl Fn(&str) -> Option<String>) -> PathBuf {
    let config = env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(std::env::temp_dir);
    config.join("fledge").join("plugins")
}

/// `plugin.toml`, as much of it as the bridge uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    /// `[plugin]`.
    pub plugin: Meta,
    /// `[[commands]]`.
    #[serde(default)]
    pub commands: Vec<CommandEntry>,
    /// `[capabilities]`.
    #[serde(default)]
    pub capabilities: Capabilities,
}

/// `[plugin]`.
#[derive(Debug, Clone, Deserialize)]
pub struct Meta {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// `fledge-v1`, another version, or none (inherited stdio).
    #[serde(default)]
    pub protocol: Option<String>,
    /// `wasm` for WASM plugins.
    #[serde(default)]
    pub runtime: Option<String>,
}

/// One `[[commands]]` entry.
#[derive(Debug, Clone, Deserialize)]
pub struct CommandEntry {
    /// The command's name.
    pub name: String,
    /// The program, relative to the plugin's directory.
    pub binary: String,
}

#[derive(Debug, Deserialize, Default)]
struct Registry {
    #[serde(default)]
    plugins: Vec<RegistryEntry>,
}

#[derive(Debug, Deserialize)]
struct RegistryEntry {
    name: String,
    #[serde(default)]
    commands: Vec<String>,
    #[serde(default)]
    capabilities: Option<Capabilities>,
}

/// What went wrong finding a command.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FindError {
    /// The command is no longer in any manifest.
    #[error("fledge plugin command '{0}' is not installed (any more) in {1}")]
    Gone(String, String),
    /// The manifest cannot be read.
    #[error("{0}: {1}")]
    Manifest(String, String),
    /// The binary path leaves the plugin's directory.
    #[error("plugin '{0}' binary '{1}' contains path traversal (..)")]
    Traversal(String, String),
}

/// A command, resolved for one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The command's name.
    pub command: String,
    /// The plugin's directory.
    pub dir: PathBuf,
    /// The program to run.
    pub binary: PathBuf,
    /// `[plugin] name`.
    pub plugin_name: String,
    /// `[plugin] version`.
    pub plugin_version: String,
    /// `[plugin] protocol`.
    pub protocol: Option<String>,
    /// `[plugin] runtime`.
    pub runtime: Option<String>,
    /// Granted capabilities.
    pub capabilities: Capabilities,
}

/// Reads `<dir>/plugin.toml`.
pub fn read_manifest(dir: &Path) -> Result<Manifest, FindError> {
    let path = dir.join("plugin.toml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| FindError::Manifest(path.display().to_string(), e.to_string()))?;
    toml::from_str(&text)
        .map_err(|e| FindError::Manifest(path.display().to_string(), e.to_string()))
}

/// Every command in `plugins_dir`: command name → plugin directory. Directories are read
/// in name order; a command name already taken is skipped (reported in `skipped`).
pub fn scan(plugins_dir: &Path) -> (BTreeMap<String, PathBuf>, Vec<String>) {
    let mut commands = BTreeMap::new();
    let mut skipped = Vec::new();
    let Ok(entries) = std::fs::read_dir(plugins_dir) else {
        return (commands, skipped);
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("plugin.toml").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        match read_manifest(&dir) {
            Ok(m) => {
                for c in m.commands {
                    if !valid_command_name(&c.name) {
                        skipped.push(format!(
                            "{}: invalid command name '{}'",
                            dir.display(),
                            c.name
                        ));
                    } else {
                        match commands.entry(c.name) {
                            std::collections::btree_map::Entry::Occupied(e) => {
                                skipped.push(format!(
                                    "{}: command '{}' is already provided by another plugin",
                                    dir.display(),
                                    e.key()
                                ))
                            }
                            std::collections::btree_map::Entry::Vacant(e) => {
                                e.insert(dir.clone());
                            }
                        }
                    }
                }
            }
            Err(e) => skipped.push(e.to_string()),
        }
    }
    (commands, skipped)
}

/// fledge's rule for command names.
pub fn valid_command_name(name: &str) -> bool {
    !(name.is_empty()
        || name.contains('/')
        || name.contains('\\')
        || name.contains('\0')
        || name.starts_with('.')
        || name.starts_with('-'))
}

/// Resolves `command` in `dir` now (the manifest and the grants are read afresh on every
/// run, so edits apply without restarting the bridge).
pub fn resolve(
    command: &str,
    dir: &Path,
    plugins_dir: &Path,
    options: &Options,
) -> Result<Resolved, FindError> {
    let manifest = read_manifest(dir)?;
    let entry = manifest
        .commands
        .iter()
        .find(|c| c.name == command)
        .ok_or_else(|| FindError::Gone(command.into(), plugins_dir.display().to_string()))?;
    if Path::new(&entry.binary)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(FindError::Traversal(
            manifest.plugin.name.clone(),
            entry.binary.clone(),
        ));
    }
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let capabilities = grants(&manifest, &dir_name, command, plugins_dir, options);
    Ok(Resolved {
        command: command.into(),
        dir: dir.to_path_buf(),
        binary: dir.join(&entry.binary),
        plugin_name: manifest.plugin.name.clone(),
        plugin_version: manifest.plugin.version.clone(),
        protocol: manifest.plugin.protocol.clone(),
        runtime: manifest.plugin.runtime.clone(),
        capabilities,
    })
}

/// The capabilities granted: the `grants` option for this plugin (by directory or plugin
/// name), else fledge's registry entry (its `capabilities`, or the manifest's when the
/// entry has none, as fledge does), else none.
fn grants(
    manifest: &Manifest,
    dir_name: &str,
    command: &str,
    plugins_dir: &Path,
    options: &Options,
) -> Capabilities {
    let declared = &manifest.capabilities;
    let with_declared_scope = |mut c: Capabilities| {
        c.filesystem = declared.filesystem.clone();
        c
    };
    if let Some(c) = options
        .grants
        .get(dir_name)
        .or_else(|| options.grants.get(&manifest.plugin.name))
    {
        return with_declared_scope(c.clone());
    }
    let registry_path = plugins_dir
        .parent()
        .map(|p| p.join("plugins.toml"))
        .unwrap_or_else(|| PathBuf::from("plugins.toml"));
    let registry: Registry = std::fs::read_to_string(&registry_path)
        .ok()
        .and_then(|t| toml::from_str(&t).ok())
        .unwrap_or_default();
    let entry = registry
        .plugins
        .iter()
        .find(|p| p.name == dir_name)
        .or_else(|| {
            registry.plugins.iter().find(|p| {
                p.name == command
                    || p.name == format!("fledge-{command}")
                    || p.commands.iter().any(|c| c == command)
            })
        });
    match entry {
        Some(e) => e.capabilities.clone().unwrap_or_else(|| declared.clone()),
        None => Capabilities::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn options_parse_and_reject() {
        let o = Options::from_map(
            json!({"plugins_dir": "/p", "grants": {"deploy": ["exec", "store"]},
                   "prompt_timeout_ms": 1500, "spare": false, "max_sessions": 4})
            .as_object()
            .unwrap(),
        )
        .unwrap();
        assert_eq!(o.plugins_dir.as_deref(), Some(Path::new("/p")));
        assert!(
            o.grants["deploy"].exec && o.grants["deploy"].store && !o.grants["deploy"].metadata
        );
        assert_eq!(o.prompt_timeout, Duration::from_millis(1500));
        assert!(!o.spare);
        for bad in [
            json!({"plugin_dir": "/p"}),
            json!({"grants": {"x": ["root"]}}),
            json!({"prompt_timeout_ms": 0}),
            json!({"max_sessions": 0}),
            json!({"plugins_dir": 3}),
        ] {
            assert!(
                Options::from_map(bad.as_object().unwrap()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn default_dir_follows_xdg_then_home() {
        let env = |k: &str| match k {
            "XDG_CONFIG_HOME" => Some("/x".to_owned()),
            "HOME" => Some("/h".to_owned()),
            _ => None,
        };
        assert_eq!(default_plugins_dir(env), Path::new("/x/fledge/plugins"));
        let env = |k: &str| match k {
            "XDG_CONFIG_HOME" => Some("relative".to_owned()),
            "HOME" => Some("/h".to_owned()),
            _ => None,
        };
        assert_eq!(
            default_plugins_dir(env),
            Path::new("/h/.config/fledge/plugins")
        );
    }

    #[test]
    fn scan_resolve_and_grants() {
        let tmp = tempfile::tempdir().unwrap();
        let plugins = tmp.path().join("fledge/plugins");
        write(
            &plugins.join("fledge-deploy/plugin.toml"),
            "[plugin]\nname = \"fledge-deploy\"\nversion = \"0.1.0\"\nprotocol = \"fledge-v1\"\n\
             [capabilities]\nexec = true\nstore = true\n\
             [[commands]]\nname = \"deploy\"\nbinary = \"bin/deploy\"\n",
        );
        write(
            &plugins.join("other/plugin.toml"),
            "[plugin]\nname = \"other\"\nversion = \"1\"\n\
             [[commands]]\nname = \"deploy\"\nbinary = \"x\"\n\
             [[commands]]\nname = \"hello\"\nbinary = \"../escape\"\n",
        );
        write(&plugins.join("broken/plugin.toml"), "not toml [");
        let (cmds, skipped) = scan(&plugins);
        assert_eq!(cmds.keys().collect::<Vec<_>>(), ["deploy", "hello"]);
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        let o = Options::default();
        let r = resolve("deploy", &cmds["deploy"], &plugins, &o).unwrap();
        assert_eq!(r.binary, plugins.join("fledge-deploy/bin/deploy"));
        assert_eq!(r.protocol.as_deref(), Some("fledge-v1"));
        // Not installed by fledge: nothing granted.
        assert_eq!(r.capabilities, Capabilities::default());
        assert!(matches!(
            resolve("hello", &cmds["hello"], &plugins, &o),
            Err(FindError::Traversal(..))
        ));
        // fledge's registry grants.
        write(
            &tmp.path().join("fledge/plugins.toml"),
            "[[plugins]]\nname = \"fledge-deploy\"\nsource = \"/src\"\nversion = \"0.1.0\"\n\
             installed = \"2026-11-23\"\ncommands = [\"deploy\"]\n\n\
             [plugins.capabilities]\nexec = false\nstore = true\nmetadata = false\nnetwork = false\n",
        );
        let r = resolve("deploy", &cmds["deploy"], &plugins, &o).unwrap();
        assert!(!r.capabilities.exec && r.capabilities.store);
        // The option wins.
        let mut o = Options::default();
        o.grants.insert(
            "fledge-deploy".into(),
            Capabilities {
                metadata: true,
                ..Capabilities::default()
            },
        );
        let r = resolve("deploy", &cmds["deploy"], &plugins, &o).unwrap();
        assert!(r.capabilities.metadata && !r.capabilities.store);
    }
}
