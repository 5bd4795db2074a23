//! What can be run: commands by name, and aliases.
//!
//! The registry is fixed once the server is built; aliases can be added at run time (by
//! `ng-alias` or the config), so they sit behind a lock. An alias names a command; it never
//! names another alias, so resolution takes one step and cannot loop.

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
    },
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Nail { inline, .. } => f
                .debug_struct("Nail")
                .field("inline", inline)
                .finish_non_exhaustive(),
        }
    }
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
    commands: BTreeMap<String, Entry>,
    aliases: RwLock<BTreeMap<String, String>>,
}

impl Registry {
    /// Registers (or replaces) a command.
    pub fn insert(&mut self, name: impl Into<String>, entry: Entry) {
        self.commands.insert(name.into(), entry);
    }

    /// Looks a name up, following one alias. Returns the command's own name and entry.
    pub fn resolve(&self, name: &[u8]) -> Option<(String, Entry)> {
        let name = std::str::from_utf8(name).ok()?;
        if let Some(entry) = self.commands.get(name) {
            return Some((name.to_owned(), entry.clone()));
        }
        let aliases = self.aliases.read().unwrap_or_else(|p| p.into_inner());
        let target = aliases.get(name)?;
        let entry = self.commands.get(target)?;
        Some((target.clone(), entry.clone()))
    }

    /// Adds or replaces an alias.
    pub fn add_alias(&self, alias: &str, command: &str) -> Result<(), AliasError> {
        if self.commands.contains_key(alias) {
            return Err(AliasError::ShadowsCommand(alias.to_owned()));
        }
        if !self.commands.contains_key(command) {
            return Err(AliasError::NoSuchCommand(command.to_owned()));
        }
        let mut aliases = self.aliases.write().unwrap_or_else(|p| p.into_inner());
        aliases.insert(alias.to_owned(), command.to_owned());
        Ok(())
    }

    /// Every command with its description, sorted by name.
    pub fn commands(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.commands.iter().map(|(k, v)| (k.as_str(), v))
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
}
