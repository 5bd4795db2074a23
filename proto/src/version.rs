//! The version `ng` and `ngd` announce and compare (docs/ARCHITECTURE.md, "Upgrades").
//!
//! The version lives in each binary once, in a fixed-size marker ([`MARKER`]):
//! `\0ngd-version:` then the crate's version, padded with NULs. Everything that names the
//! running binary's version reads it from there ([`current`]), through an opaque reference
//! so the compiler cannot fold it into the code: a copy of a built binary whose marker bytes
//! were rewritten (same length) reports another version, which is how the tests make a
//! second install without a runtime switch a user could trip on.
//!
//! [`Version`] is a semantic version compared by precedence (semver 2.0.0, section 11):
//! `MAJOR.MINOR.PATCH`, then pre-release identifiers, build metadata ignored.

use std::cmp::Ordering;
use std::fmt;

/// What precedes the version in the marker.
pub const MARKER_PREFIX: &[u8] = b"\0ngd-version:";
/// The marker's whole length: the prefix, the version, NUL padding.
pub const MARKER_LEN: usize = 64;
/// The longest version text accepted, in the marker or from a peer.
pub const MAX_VERSION_LEN: usize = MARKER_LEN - MARKER_PREFIX.len();

/// The marker: [`MARKER_PREFIX`], this crate's version, NUL padding.
#[used]
pub static MARKER: [u8; MARKER_LEN] = marker(env!("CARGO_PKG_VERSION"));

const fn marker(version: &str) -> [u8; MARKER_LEN] {
    let v = version.as_bytes();
    assert!(
        v.len() < MAX_VERSION_LEN,
        "the version does not fit the marker"
    );
    let mut out = [0u8; MARKER_LEN];
    let mut i = 0;
    while i < MARKER_PREFIX.len() {
        out[i] = MARKER_PREFIX[i];
        i += 1;
    }
    let mut j = 0;
    while j < v.len() {
        out[MARKER_PREFIX.len() + j] = v[j];
        j += 1;
    }
    out
}

/// The version text in this binary's marker, as it is on disk (up to the first NUL).
pub fn current_text() -> &'static str {
    let marker: &'static [u8; MARKER_LEN] = std::hint::black_box(&MARKER);
    let tail = &marker[MARKER_PREFIX.len()..];
    let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
    std::str::from_utf8(&tail[..end]).unwrap_or("0.0.0")
}

/// This binary's version, parsed from its marker (`0.0.0` if the marker was made
/// unreadable).
pub fn current() -> Version {
    Version::parse(current_text().as_bytes()).unwrap_or_default()
}

/// A semantic version: `MAJOR.MINOR.PATCH[-PRE][+BUILD]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    /// The pre-release identifiers (dot-separated), empty for a release.
    pre: Vec<Identifier>,
    /// The text as given, build metadata included.
    text: String,
}

/// One pre-release identifier.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Identifier {
    Numeric(u64),
    Alphanumeric(String),
}

impl Version {
    /// Parses a version of at most [`MAX_VERSION_LEN`] bytes; `None` for anything else.
    pub fn parse(text: &[u8]) -> Option<Self> {
        if text.is_empty() || text.len() > MAX_VERSION_LEN {
            return None;
        }
        let text = std::str::from_utf8(text).ok()?;
        let (rest, build) = match text.split_once('+') {
            Some((rest, build)) => (rest, Some(build)),
            None => (text, None),
        };
        if let Some(build) = build {
            build
                .split('.')
                .try_for_each(|id| valid_id(id).then_some(()))?;
        }
        let (core, pre) = match rest.split_once('-') {
            Some((core, pre)) => (core, Some(pre)),
            None => (rest, None),
        };
        let mut numbers = core.split('.').map(numeric);
        let (major, minor, patch) = (numbers.next()??, numbers.next()??, numbers.next()??);
        if numbers.next().is_some() {
            return None;
        }
        let pre = match pre {
            None => Vec::new(),
            Some(pre) => pre
                .split('.')
                .map(|id| {
                    if !valid_id(id) {
                        None
                    } else if id.bytes().all(|b| b.is_ascii_digit()) {
                        numeric(id).map(Identifier::Numeric)
                    } else {
                        Some(Identifier::Alphanumeric(id.to_owned()))
                    }
                })
                .collect::<Option<_>>()?,
        };
        Some(Self {
            major,
            minor,
            patch,
            pre,
            text: text.to_owned(),
        })
    }

    /// The version as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Precedence: the numbers, then a pre-release below its release, then the pre-release
    /// identifiers in turn (numbers below words, numbers by value, words in ASCII order,
    /// a shorter list below a longer one it starts). Build metadata does not count.
    pub fn precedence(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&other.pre) {
                        let order = match (a, b) {
                            (Identifier::Numeric(a), Identifier::Numeric(b)) => a.cmp(b),
                            (Identifier::Numeric(_), Identifier::Alphanumeric(_)) => Ordering::Less,
                            (Identifier::Alphanumeric(_), Identifier::Numeric(_)) => {
                                Ordering::Greater
                            }
                            (Identifier::Alphanumeric(a), Identifier::Alphanumeric(b)) => a.cmp(b),
                        };
                        if order != Ordering::Equal {
                            return order;
                        }
                    }
                    self.pre.len().cmp(&other.pre.len())
                }
            })
    }

    /// Whether `self` takes precedence over `other`.
    pub fn is_newer_than(&self, other: &Self) -> bool {
        self.precedence(other) == Ordering::Greater
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A non-empty identifier of ASCII letters, digits and hyphens.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A number without leading zeros that fits in 64 bits.
fn numeric(s: &str) -> Option<u64> {
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s.as_bytes()).unwrap_or_else(|| panic!("{s} does not parse"))
    }

    #[test]
    fn the_marker_holds_the_crate_version() {
        assert!(MARKER.starts_with(MARKER_PREFIX));
        assert_eq!(current_text(), env!("CARGO_PKG_VERSION"));
        assert_eq!(current(), v(env!("CARGO_PKG_VERSION")));
    }

    #[test]
    fn precedence_follows_semver() {
        // The example of semver 2.0.0, section 11, in increasing order.
        let order = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.1.0",
            "1.10.0",
            "2.0.0",
        ];
        for pair in order.windows(2) {
            assert!(v(pair[1]).is_newer_than(&v(pair[0])), "{pair:?}");
            assert!(!v(pair[0]).is_newer_than(&v(pair[1])), "{pair:?}");
        }
        assert_eq!(v("1.0.0+a").precedence(&v("1.0.0+b")), Ordering::Equal);
        assert!(!v("0.1.0").is_newer_than(&v("0.1.0")));
    }

    #[test]
    fn malformed_versions_are_refused() {
        let long = "1.0.0-".to_owned() + &"a".repeat(MAX_VERSION_LEN);
        for bad in [
            "",
            "1",
            "1.0",
            "1.0.0.0",
            "01.0.0",
            "1.0.x",
            "1.0.0-",
            "1.0.0-a..b",
            "1.0.0+",
            "1.0.0-é",
            " 1.0.0",
            "99999999999999999999.0.0",
            &long,
        ] {
            assert_eq!(Version::parse(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(v("1.2.3-rc.1+build.5").as_str(), "1.2.3-rc.1+build.5");
    }
}
