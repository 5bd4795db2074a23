//! Parsing the output of the `Dump` test nail.
//!
//! `Dump` (`tests/java/ngtest/Dump.java`, and its equivalent on any other server under
//! test) prints one item per line, every string as hex of its UTF-8 bytes:
//! `A:<hex>` per argument in order, `E:<hex name>:<hex value>` per environment entry,
//! `D:<hex>` for the working directory if the client sent one. Hex keeps every value
//! unambiguous; [`Dump::parse`] turns it back into strings.

use std::collections::BTreeMap;

/// What a server received from a client, as the `Dump` nail reported it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dump {
    /// The arguments, in order.
    pub args: Vec<String>,
    /// The environment.
    pub env: BTreeMap<String, String>,
    /// The working directory, if the client sent one.
    pub cwd: Option<String>,
}

impl Dump {
    /// Parses `Dump`'s stdout, panicking with the offending line on malformed input.
    pub fn parse(stdout: &[u8]) -> Dump {
        let text = std::str::from_utf8(stdout)
            .unwrap_or_else(|_| panic!("Dump output is not ASCII: {stdout:?}"));
        let mut dump = Dump::default();
        for line in text.lines() {
            if dump.add_line(line).is_none() {
                panic!("malformed Dump line {line:?} in:\n{text}");
            }
        }
        dump
    }

    fn add_line(&mut self, line: &str) -> Option<()> {
        match line.split_once(':')? {
            ("A", hex) => self.args.push(unhex(hex)?),
            ("E", entry) => {
                let (name, value) = entry.split_once(':')?;
                self.env.insert(unhex(name)?, unhex(value)?);
            }
            ("D", hex) => self.cwd = Some(unhex(hex)?),
            _ => return None,
        }
        Some(())
    }
}

/// Decodes lowercase or uppercase hex into a UTF-8 string.
fn unhex(hex: &str) -> Option<String> {
    String::from_utf8(ng_testkit::hex::decode(hex)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_of_line() {
        let out = b"A:61\nA:\nA:c3a9\nE:4b:763d31\nE:454d505459:\nD:2f746d70\n";
        let dump = Dump::parse(out);
        assert_eq!(dump.args, ["a", "", "\u{e9}"]);
        assert_eq!(dump.env.get("K").map(String::as_str), Some("v=1"));
        assert_eq!(dump.env.get("EMPTY").map(String::as_str), Some(""));
        assert_eq!(dump.cwd.as_deref(), Some("/tmp"));
    }

    #[test]
    #[should_panic(expected = "malformed Dump line")]
    fn rejects_odd_hex() {
        Dump::parse(b"A:6\n");
    }
}
