//! The kinds of a worker's notice (`n`, `docs/ngw.md` §15.3): what happened, in one word.
//!
//! A kind this table does not name is information: ngd logs it and keeps it like any
//! other, so a worker may say more than this host knows.

use std::fmt;

/// The `kind` of a notice.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NoticeKind {
    /// A session could not be served the warm way and ran the cold way.
    Fallback,
    /// Code the worker loaded changed on disk.
    Stale,
    /// The worker takes no new session; ngd replaces it once its sessions end (a recycle,
    /// never a failure).
    Retire,
    /// What the worker serves is disabled for good; ngd disables the pool with the
    /// notice's message as the reason.
    Disabled,
    /// A bridge started its plugin again.
    Restart,
    /// A sub-zygote of the Python SDK could not serve a session.
    Zygote,
    /// A worker stopped preparing a program's sessions ahead of time (the JVM worker's
    /// spares that initialise the main class), and why: logged and kept.
    Ahead,
    /// One more of the counter its message names (a session used the worker's cache, say):
    /// counted, neither logged nor kept.
    Count,
    /// A kind this table does not name.
    Other(String),
}

/// Every named kind with its spelling on the wire.
const NAMES: [(NoticeKind, &str); 8] = [
    (NoticeKind::Fallback, "fallback"),
    (NoticeKind::Stale, "stale"),
    (NoticeKind::Retire, "retire"),
    (NoticeKind::Disabled, "disabled"),
    (NoticeKind::Restart, "restart"),
    (NoticeKind::Zygote, "zygote"),
    (NoticeKind::Ahead, "ahead"),
    (NoticeKind::Count, "count"),
];

impl NoticeKind {
    /// The kind spelled `name` on the wire; one the table does not name is
    /// [`NoticeKind::Other`].
    pub fn from_name(name: &str) -> Self {
        NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map_or_else(|| NoticeKind::Other(name.to_owned()), |(k, _)| k.clone())
    }

    /// Its spelling on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            NoticeKind::Other(name) => name,
            named => NAMES
                .iter()
                .find(|(k, _)| k == named)
                .map_or("", |(_, n)| n),
        }
    }
}

impl fmt::Display for NoticeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for NoticeKind {
    /// Its spelling on the wire.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for NoticeKind {
    /// A string, as a notice's `kind`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::from_name(&String::deserialize(d)?))
    }
}

impl From<&str> for NoticeKind {
    fn from(name: &str) -> Self {
        Self::from_name(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_are_kept() {
        for (kind, name) in &NAMES {
            assert_eq!(NoticeKind::from_name(name), *kind);
            assert_eq!(kind.as_str(), *name);
        }
        let other = NoticeKind::from_name("Retire");
        assert_eq!(other, NoticeKind::Other("Retire".into()));
        assert_eq!(other.to_string(), "Retire");
    }
}
