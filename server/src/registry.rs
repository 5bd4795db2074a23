//! What can be run: commands by name, and aliases.
//!
//! Built-in and embedded commands are registered before the server starts; plugin commands
//! come and go at run time (learned from a worker's hello, changed by a reload), and aliases
//! are added by `ng-alias` or the config, so both tables sit behind locks. An alias names a
//! command; it never names another alias, so resolution takes one step and cannot loop.

use crate::Nail;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

/// How a command runs.
#[derive(Clone)]
pub enum Target {
    /// Rust code in the server process.
    Nail {
        /// The code.
        nail: Arc<dyn Nail>,
        /// Runs on the event-loop thread: only for commands that never block and never read
        /// stdin (their stdin reads see end of file).
        inline: bool,
        /// Takes the client's own descriptors when they were passed
        /// ([`crate::Context::take_client_fds`]).
        client_fds: bool,
    },
    /// A command served by a plugin's worker pool.
    Plugin {
        /// The pool's index in the plugin host.
        pool: usize,
    },
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Nail { inline, .. } => f
                .debug_struct("Nail")
                .field("inline", inline)
                .finish_non_exhaustive(),
            Target::Plugin { pool } => f.debug_struct("Plugin").field("pool", pool).finish(),
        }
    }
}

/// What [`Registry::route_plugin`] could not route.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unrouted {
    /// Class names are routed to another pool already.
    pub class_names: bool,
    /// Command names another command has.
    pub commands: Vec<String>,
}

/// One registered command.
#[derive(Clone, Debug)]
pub struct Entry {
    /// How it runs.
    pub target: Target,
    /// One line for `ng-commands`.
    pub description: String,
}

/// Why an alias could not be added.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AliasError {
    /// The alias would hide a real command.
    #[error("'{0}' is already a command")]
    ShadowsCommand(String),
    /// The target is not a command.
    #[error("no such command: '{0}'")]
    NoSuchCommand(String),
}

/// Commands and aliases. See the module docs.
#[derive(Debug, Default)]
pub struct Registry {
    commands: RwLock<BTreeMap<String, Entry>>,
    aliases: RwLock<BTreeMap<String, String>>,
    /// The plugin pool that also serves names shaped like Java class names, and its name.
    class_names: RwLock<Option<(usize, String)>>,
}

/// True for a name shaped like a fully qualified Java class name: two or more identifiers
/// (letters, digits, `_`, `$`, not starting with a digit) joined by dots.
pub fn is_class_name(name: &str) -> bool {
    let mut parts = 0;
    for part in name.split('.') {
        let mut chars = part.chars();
        match chars.next() {
            Some(c) if c.is_alphabetic() || c == '_' || c == '$' => {}
            _ => return false,
        }
        if !chars.all(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            return false;
        }
        parts += 1;
    }
    parts >= 2
}

impl Registry {
    /// Registers (or replaces) a command.
    pub fn insert(&mut self, name: impl Into<String>, entry: Entry) {
        self.commands
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.into(), entry);
    }

    fn read_commands(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Entry>> {
        self.commands.read().unwrap_or_else(|p| p.into_inner())
    }

    /// True if `name` is a command (not an alias).
    pub fn contains(&self, name: &str) -> bool {
        self.read_commands().contains_key(name)
    }

    /// Routes plugin pool `pool` (named `plugin`): its `commands`, and names shaped like Java
    /// class names when `class_names`; its previous routes are replaced. Says what could not
    /// be routed because another command or pool has it.
    pub fn route_plugin(
        &self,
        pool: usize,
        plugin: &str,
        commands: &[String],
        class_names: bool,
    ) -> Unrouted {
        Unrouted {
            class_names: !self.set_class_names(pool, class_names, plugin),
            commands: self.set_plugin_commands(pool, commands, plugin),
        }
    }

    /// Withdraws every route of plugin pool `pool`.
    pub fn unroute_plugin(&self, pool: usize) {
        self.set_plugin_commands(pool, &[], "");
        self.set_class_names(pool, false, "");
    }

    /// Routes `names` to plugin pool `pool`, replacing that pool's previous routes. Names
    /// taken by another command are skipped and returned.
    pub fn set_plugin_commands(&self, pool: usize, names: &[String], plugin: &str) -> Vec<String> {
        let mut commands = self.commands.write().unwrap_or_else(|p| p.into_inner());
        commands.retain(|_, e| !matches!(e.target, Target::Plugin { pool: p } if p == pool));
        let mut clashes = Vec::new();
        for name in names {
            if commands.contains_key(name) {
                clashes.push(name.clone());
                continue;
            }
            commands.insert(
                name.clone(),
                Entry {
                    target: Target::Plugin { pool },
                    description: format!("served by plugin '{plugin}'"),
                },
            );
        }
        clashes
    }

    /// Routes names shaped like Java class names to `pool` (`on`), or stops routing them
    /// there. False when another pool already has them.
    pub fn set_class_names(&self, pool: usize, on: bool, plugin: &str) -> bool {
        let mut route = self.class_names.write().unwrap_or_else(|p| p.into_inner());
        match (*route).as_ref() {
            Some((p, _)) if *p != pool => !on,
            _ => {
                *route = on.then(|| (pool, plugin.to_owned()));
                true
            }
        }
    }

    /// The entry for a class name that no command claims, if a pool serves class names.
    fn class_entry(&self, name: &str) -> Option<Entry> {
        if !is_class_name(name) {
            return None;
        }
        let route = self.class_names.read().unwrap_or_else(|p| p.into_inner());
        let (pool, plugin) = (*route).as_ref()?;
        Some(Entry {
            target: Target::Plugin { pool: *pool },
            description: format!("a class served by plugin '{plugin}'"),
        })
    }

    /// Looks a name up, following one alias. Returns the command's own name and entry.
    pub fn resolve(&self, name: &[u8]) -> Option<(String, Entry)> {
        let name = std::str::from_utf8(name).ok()?;
        let commands = self.read_commands();
        if let Some(entry) = commands.get(name) {
            return Some((name.to_owned(), entry.clone()));
        }
        let aliases = self.aliases.read().unwrap_or_else(|p| p.into_inner());
        if let Some(target) = aliases.get(name) {
            let entry = commands
                .get(target)
                .cloned()
                .or_else(|| self.class_entry(target))?;
            return Some((target.clone(), entry));
        }
        drop(aliases);
        let entry = self.class_entry(name)?;
        Some((name.to_owned(), entry))
    }

    /// Adds or replaces an alias.
    pub fn add_alias(&self, alias: &str, command: &str) -> Result<(), AliasError> {
        if self.contains(alias) {
            return Err(AliasError::ShadowsCommand(alias.to_owned()));
        }
        if !self.contains(command) && self.class_entry(command).is_none() {
            return Err(AliasError::NoSuchCommand(command.to_owned()));
        }
        let mut aliases = self.aliases.write().unwrap_or_else(|p| p.into_inner());
        aliases.insert(alias.to_owned(), command.to_owned());
        Ok(())
    }

    /// Every command with its description, sorted by name.
    pub fn commands(&self) -> Vec<(String, String)> {
        self.read_commands()
            .iter()
            .map(|(k, v)| (k.clone(), v.description.clone()))
            .collect()
    }

    /// Every alias and its command, sorted by alias.
    pub fn aliases(&self) -> Vec<(String, String)> {
        let aliases = self.aliases.read().unwrap_or_else(|p| p.into_inner());
        aliases
            .iter()
            .map(|(a, c)| (a.clone(), c.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            target: Target::Nail {
                nail: Arc::new(|_: &mut crate::Context| 0),
                inline: true,
                client_fds: false,
            },
            description: String::new(),
        }
    }

    #[test]
    fn aliases_resolve_one_step_and_never_shadow() {
        let mut r = Registry::default();
        r.insert("real", entry());
        assert_eq!(r.add_alias("a", "real"), Ok(()));
        assert_eq!(r.resolve(b"a").map(|(n, _)| n), Some("real".to_owned()));
        assert_eq!(
            r.add_alias("real", "real"),
            Err(AliasError::ShadowsCommand("real".into()))
        );
        assert_eq!(
            r.add_alias("b", "a"),
            Err(AliasError::NoSuchCommand("a".into()))
        );
        assert!(r.resolve(b"missing").is_none());
        assert!(r.resolve(b"\xff").is_none());
    }

    #[test]
    fn class_names_route_to_one_pool_after_commands_and_aliases() {
        let mut r = Registry::default();
        r.insert("a.b", entry());
        assert!(r.resolve(b"com.example.Nail").is_none());
        assert!(r.set_class_names(3, true, "jvm"));
        assert!(!r.set_class_names(4, true, "other"));
        let (name, e) = r.resolve(b"com.example.Nail").expect("routed");
        assert_eq!(name, "com.example.Nail");
        assert!(matches!(e.target, Target::Plugin { pool: 3 }));
        assert!(matches!(
            r.resolve(b"a.b").map(|(_, e)| e.target),
            Some(Target::Nail { .. })
        ));
        for bad in ["Nail", "a..b", "1a.b", "a.b-c", ".a.b", "a.b."] {
            assert!(r.resolve(bad.as_bytes()).is_none(), "{bad}");
        }
        assert_eq!(r.add_alias("hello", "com.example.Hello"), Ok(()));
        assert_eq!(
            r.resolve(b"hello").map(|(n, _)| n),
            Some("com.example.Hello".to_owned())
        );
        assert!(r.set_class_names(3, false, ""));
        assert!(r.resolve(b"com.example.Nail").is_none());
        assert!(r.set_class_names(4, true, "other"));
    }
}
