//! An ordered JSON-like value, the bridge's form of every message in either encoding.
//!
//! Nu records are ordered; `serde_json::Value` (without its `preserve_order` feature, which
//! would change key order for every crate in the workspace) sorts object keys. [`J`] keeps
//! objects as ordered pairs, keeps integers exact, and keeps msgpack byte strings as one
//! buffer ([`J::Bytes`]); readers of byte buffers accept both that and the JSON encoding's
//! array of numbers (`msg::bytes_of`).

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use std::fmt;

/// A JSON value with ordered objects.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum J {
    /// `null`.
    #[default]
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    UInt(u64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<J>),
    /// An object, in order.
    Obj(Vec<(String, J)>),
    /// Bytes: a msgpack `bin` (decoded as one buffer, not a number per byte), written in
    /// JSON as an array of numbers (what both encodings of the protocol expect for byte
    /// buffers). JSON input has no `bin`: its byte buffers arrive as arrays.
    Bytes(Vec<u8>),
}

/// Builds an object: `obj! {"a" => 1, "b" => "x"}`.
#[macro_export]
macro_rules! obj {
    ($($k:expr => $v:expr),* $(,)?) => {
        $crate::json::J::Obj(vec![$((String::from($k), $crate::json::J::from($v))),*])
    };
}

/// Builds an array: `arr![1, "x"]`.
#[macro_export]
macro_rules! arr {
    ($($v:expr),* $(,)?) => {
        $crate::json::J::Arr(vec![$($crate::json::J::from($v)),*])
    };
}

impl J {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A string's text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            J::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            J::Int(i) => u64::try_from(i).ok(),
            J::UInt(u) => Some(u),
            _ => None,
        }
    }

    /// An integer that fits `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            J::Int(i) => Some(i),
            J::UInt(u) => i64::try_from(u).ok(),
            _ => None,
        }
    }

    /// A number as a float.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            J::Int(i) => Some(i as f64),
            J::UInt(u) => Some(u as f64),
            J::Float(f) => Some(f),
            _ => None,
        }
    }

    /// A boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            J::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// An array's items.
    pub fn as_array(&self) -> Option<&Vec<J>> {
        match self {
            J::Arr(a) => Some(a),
            _ => None,
        }
    }

    /// An object's pairs.
    pub fn as_object(&self) -> Option<&Vec<(String, J)>> {
        match self {
            J::Obj(o) => Some(o),
            _ => None,
        }
    }

    /// Whether it is a string.
    pub fn is_string(&self) -> bool {
        matches!(self, J::Str(_))
    }

    /// Whether it is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, J::Null)
    }

    /// The only key and value of a one-key object (an externally tagged enum).
    pub fn single(&self) -> Option<(&str, &J)> {
        match self {
            J::Obj(pairs) if pairs.len() == 1 => Some((pairs[0].0.as_str(), &pairs[0].1)),
            _ => None,
        }
    }

    /// Compact JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses JSON text.
    pub fn parse(text: &[u8]) -> Result<J, serde_json::Error> {
        serde_json::from_slice(text)
    }
}

static NULL: J = J::Null;

impl std::ops::Index<&str> for J {
    type Output = J;
    /// The member `key`, or `null`.
    fn index(&self, key: &str) -> &J {
        self.get(key).unwrap_or(&NULL)
    }
}

impl std::ops::Index<usize> for J {
    type Output = J;
    /// Item `i` of an array, or `null`.
    fn index(&self, i: usize) -> &J {
        self.as_array().and_then(|a| a.get(i)).unwrap_or(&NULL)
    }
}

impl PartialEq<&str> for J {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == Some(*other)
    }
}

impl PartialEq<i64> for J {
    fn eq(&self, other: &i64) -> bool {
        self.as_i64() == Some(*other)
    }
}

impl fmt::Display for J {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

impl From<&str> for J {
    fn from(s: &str) -> J {
        J::Str(s.to_owned())
    }
}
impl From<String> for J {
    fn from(s: String) -> J {
        J::Str(s)
    }
}
impl From<&String> for J {
    fn from(s: &String) -> J {
        J::Str(s.clone())
    }
}
impl From<bool> for J {
    fn from(b: bool) -> J {
        J::Bool(b)
    }
}
impl From<i64> for J {
    fn from(i: i64) -> J {
        J::Int(i)
    }
}
impl From<u64> for J {
    fn from(u: u64) -> J {
        i64::try_from(u).map_or(J::UInt(u), J::Int)
    }
}
impl From<usize> for J {
    fn from(u: usize) -> J {
        J::from(u as u64)
    }
}
impl From<u8> for J {
    fn from(u: u8) -> J {
        J::Int(i64::from(u))
    }
}
impl From<f64> for J {
    fn from(f: f64) -> J {
        J::Float(f)
    }
}
impl From<Vec<J>> for J {
    fn from(v: Vec<J>) -> J {
        J::Arr(v)
    }
}
impl From<&J> for J {
    fn from(v: &J) -> J {
        v.clone()
    }
}
impl<T: Into<J>> From<Option<T>> for J {
    fn from(v: Option<T>) -> J {
        v.map_or(J::Null, Into::into)
    }
}

impl Serialize for J {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            J::Null => s.serialize_unit(),
            J::Bool(b) => s.serialize_bool(*b),
            J::Int(i) => s.serialize_i64(*i),
            J::UInt(u) => s.serialize_u64(*u),
            J::Float(f) => s.serialize_f64(*f),
            J::Str(t) => s.serialize_str(t),
            J::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
            J::Bytes(b) => s.serialize_bytes(b),
            J::Obj(pairs) => {
                let mut map = s.serialize_map(Some(pairs.len()))?;
                for (k, v) in pairs {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JVisitor)
    }
}

struct JVisitor;

impl<'de> Visitor<'de> for JVisitor {
    type Value = J;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON or msgpack value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<J, E> {
        Ok(J::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<J, E> {
        Ok(J::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<J, E> {
        Ok(J::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<J, E> {
        Ok(J::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<J, E> {
        Ok(J::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<J, E> {
        Ok(J::Str(v))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<J, E> {
        Ok(J::Bytes(v.to_vec()))
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<J, E> {
        Ok(J::Bytes(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<J, D::Error> {
        J::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(J::Arr(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
        let mut out: Vec<(String, J)> = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some((k, v)) = map.next_entry::<J, J>()? {
            let key = match k {
                J::Str(s) => s,
                other => other.to_json(),
            };
            out.push((key, v));
        }
        Ok(J::Obj(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_key_order_and_exact_integers() {
        let text = br#"{"z":1,"a":[true,null,-3,18446744073709551615,1.5,"s"]}"#;
        let v = J::parse(text).unwrap();
        assert_eq!(v.to_json().as_bytes(), text);
        assert_eq!(v.get("z"), Some(&J::Int(1)));
        assert_eq!(
            obj! {"b" => 1u64, "a" => "x"}.to_json(),
            r#"{"b":1,"a":"x"}"#
        );
    }
}
