//! Nu values in their wire shape (`{"Int":{"val":5,"span":..}}`), converted for a shell:
//! JSON in (as `from json` reads it), JSON out (as `to json` writes it), NUON out (as
//! `to nuon` writes it), and the error a value can carry.

use crate::json::J;
use crate::msg::{bytes_of, LabeledError, Span};
use crate::obj;
use std::fmt::Write as _;

/// A JSON document as a Nu value, every part with `span`.
pub fn from_json(v: &J, span: Span) -> J {
    let tagged = |tag: &str, val: J| obj! {tag => obj! {"val" => val, "span" => span.to_value()}};
    match v {
        J::Null => obj! {"Nothing" => obj! {"span" => span.to_value()}},
        J::Bool(b) => tagged("Bool", J::Bool(*b)),
        J::Int(i) => tagged("Int", J::Int(*i)),
        J::UInt(u) => tagged("Float", J::Float(*u as f64)),
        J::Float(f) => tagged("Float", J::Float(*f)),
        J::Str(s) => tagged("String", J::Str(s.clone())),
        J::Bytes(b) => tagged("Binary", J::Bytes(b.clone())),
        J::Arr(items) => obj! {"List" => obj! {
        "vals" => J::Arr(items.iter().map(|i| from_json(i, span)).collect()),
        "span" => span.to_value()}},
        J::Obj(pairs) => tagged(
            "Record",
            J::Obj(
                pairs
                    .iter()
                    .map(|(k, v)| (k.clone(), from_json(v, span)))
                    .collect(),
            ),
        ),
    }
}

/// Why a value cannot be shown in a shell.
#[derive(Debug, Clone, PartialEq)]
pub enum Unprintable {
    /// The value is an error.
    Error(LabeledError),
    /// A type that only means something inside Nu (closures, custom values).
    Type(String),
}

impl Unprintable {
    /// As an error to render.
    pub fn into_error(self) -> LabeledError {
        match self {
            Unprintable::Error(e) => e,
            Unprintable::Type(t) => LabeledError::msg(format!(
                "The plugin returned a {t}, which has no representation outside Nu."
            ))
            .help("Convert it inside the plugin call, or run the command in nu itself."),
        }
    }
}

/// The variant and body of a wire value.
fn parts(v: &J) -> Result<(&str, &J), Unprintable> {
    v.single()
        .ok_or_else(|| Unprintable::Type(format!("malformed value {}", crate::msg::brief(v))))
}

/// The error a value carries, if it is an `Error` value.
pub fn error_of(v: &J) -> Option<LabeledError> {
    match v.single() {
        Some(("Error", body)) => Some(LabeledError::from_value(
            body.get("error")
                .or_else(|| body.get("val"))
                .unwrap_or(body),
        )),
        _ => None,
    }
}

/// The text of a `String` value (or the bytes of a `Binary`), for raw output.
pub fn raw_bytes(v: &J) -> Option<Vec<u8>> {
    match v.single()? {
        ("String", b) => Some(b.get("val")?.as_str()?.as_bytes().to_vec()),
        ("Binary", b) => bytes_of(b.get("val")?).ok(),
        _ => None,
    }
}

/// Whether the value is `Nothing`.
pub fn is_nothing(v: &J) -> bool {
    matches!(v.single(), Some(("Nothing", _)))
}

/// A value as plain JSON data (what `to json` would write, before formatting).
pub fn to_plain(v: &J) -> Result<J, Unprintable> {
    if let Some(e) = error_of(v) {
        return Err(Unprintable::Error(e));
    }
    let (tag, body) = parts(v)?;
    let val = body.get("val").unwrap_or(&J::Null);
    Ok(match tag {
        "Nothing" => J::Null,
        "Bool" | "Int" | "Float" | "String" | "Filesize" | "Duration" => val.clone(),
        "Date" => J::Str(date_text(val)),
        "Glob" => val.clone(),
        "Binary" => match val {
            J::Bytes(b) => J::Arr(b.iter().map(|&x| J::from(x)).collect()),
            other => other.clone(),
        },
        "Record" => J::Obj(
            val.as_object()
                .map(|pairs| {
                    pairs
                        .iter()
                        .map(|(k, v)| Ok((k.clone(), to_plain(v)?)))
                        .collect::<Result<Vec<_>, Unprintable>>()
                })
                .transpose()?
                .unwrap_or_default(),
        ),
        "List" => J::Arr(
            body.get("vals")
                .and_then(J::as_array)
                .map(|items| items.iter().map(to_plain).collect::<Result<Vec<_>, _>>())
                .transpose()?
                .unwrap_or_default(),
        ),
        "CellPath" => J::Str(cell_path_text(val)),
        "Range" => J::Str(range_text(val)),
        "Custom" => {
            let name = val
                .get("name")
                .and_then(J::as_str)
                .unwrap_or("custom value");
            return Err(Unprintable::Type(format!("custom value `{name}`")));
        }
        other => return Err(Unprintable::Type(other.to_lowercase())),
    })
}

/// A date as nu writes it (`to json`, `to nuon`): RFC 3339 with the offset as `+00:00`,
/// never `Z` (a plugin's serialiser writes UTC as `Z`).
fn date_text(val: &J) -> String {
    let text = val.as_str().unwrap_or("");
    match text.strip_suffix(['Z', 'z']) {
        Some(rest) => format!("{rest}+00:00"),
        None => text.to_owned(),
    }
}

fn cell_path_text(val: &J) -> String {
    if let Some(s) = val.as_str() {
        return s.to_owned();
    }
    let mut out = String::from("$");
    for m in val
        .get("members")
        .and_then(J::as_array)
        .into_iter()
        .flatten()
    {
        if let Some((_, body)) = m.single() {
            out.push('.');
            match &body["val"] {
                J::Str(s) => out.push_str(s),
                other => out.push_str(&other.to_json()),
            }
            if body["optional"].as_bool() == Some(true) {
                out.push('?');
            }
        }
    }
    out
}

fn range_text(val: &J) -> String {
    let Some((_, r)) = val.single() else {
        return val.to_json();
    };
    let num = |j: &J| match j {
        J::Float(f) => format_float(*f),
        other => other.to_json(),
    };
    let start = num(&r["start"]);
    let end = match r["end"].single() {
        Some(("Included", e)) => format!("..{}", num(e)),
        Some(("Excluded", e)) => format!("..<{}", num(e)),
        _ => "..".to_owned(),
    };
    format!("{start}{end}")
}

/// A float as Nu writes it: `1.0`, `2.5`, `1e+20`.
pub fn format_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".into();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-5..1e16).contains(&a) {
        let s = format!("{f:e}");
        return match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        };
    }
    if f.fract() == 0.0 {
        format!("{f:.1}")
    } else {
        format!("{f}")
    }
}

/// A float as nu's `to json` writes it in its indented form: the plain decimal (with
/// `.0` when whole) unless the exponent form is more than one character shorter
/// (`1e+15`, `5e-4`, but `12345.0`, `0.1`); `-0.0` as `0.0`; not finite as `null`.
pub fn pretty_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".into();
    }
    let f = if f == 0.0 { 0.0 } else { f };
    // Whole numbers with every digit of the exact value (`9223372036854775808.0`), others
    // with the shortest digits that read back the same.
    let plain = if f.fract() == 0.0 {
        format!("{f:.0}.0")
    } else {
        format!("{f}")
    };
    let exp = format!("{f:e}");
    if plain.len() <= exp.len() + 1 {
        plain
    } else if exp.contains("e-") {
        exp
    } else {
        exp.replacen('e', "e+", 1)
    }
}

/// A Nu value as `to json` writes it: the same text as `json_text(&to_plain(v)?)`,
/// written straight from the wire value without building the plain copy first.
pub fn value_json_text(v: &J) -> Result<String, Unprintable> {
    let mut out = String::new();
    write_value_json(v, 0, &mut out)?;
    Ok(out)
}

fn write_value_json(v: &J, depth: usize, out: &mut String) -> Result<(), Unprintable> {
    let pad = |n: usize, out: &mut String| out.extend(std::iter::repeat_n(' ', n * 2));
    if let Some(e) = error_of(v) {
        return Err(Unprintable::Error(e));
    }
    let (tag, body) = parts(v)?;
    match (tag, body.get("val"), body.get("vals")) {
        ("String", Some(J::Str(s)), _) => out.push_str(&json_string(s)),
        ("Record", Some(J::Obj(pairs)), _) if !pairs.is_empty() => {
            out.push_str("{\n");
            for (i, (k, item)) in pairs.iter().enumerate() {
                pad(depth + 1, out);
                out.push_str(&json_string(k));
                out.push_str(": ");
                write_value_json(item, depth + 1, out)?;
                out.push_str(if i + 1 < pairs.len() { ",\n" } else { "\n" });
            }
            pad(depth, out);
            out.push('}');
        }
        ("List", _, Some(J::Arr(items))) if !items.is_empty() => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                pad(depth + 1, out);
                write_value_json(item, depth + 1, out)?;
                out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
            }
            pad(depth, out);
            out.push(']');
        }
        _ => write_json(&to_plain(v)?, depth, out),
    }
    Ok(())
}

/// Plain JSON data formatted as `to json` does (2-space indentation).
pub fn json_text(v: &J) -> String {
    let mut out = String::new();
    write_json(v, 0, &mut out);
    out
}

fn write_json(v: &J, depth: usize, out: &mut String) {
    let pad = |n: usize, out: &mut String| out.extend(std::iter::repeat_n(' ', n * 2));
    match v {
        J::Float(f) => out.push_str(&pretty_float(*f)),
        J::Str(s) => out.push_str(&json_string(s)),
        J::Arr(items) if items.is_empty() => out.push_str("[]"),
        J::Obj(pairs) if pairs.is_empty() => out.push_str("{}"),
        J::Arr(items) => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                pad(depth + 1, out);
                write_json(item, depth + 1, out);
                out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
            }
            pad(depth, out);
            out.push(']');
        }
        J::Obj(pairs) => {
            out.push_str("{\n");
            for (i, (k, item)) in pairs.iter().enumerate() {
                pad(depth + 1, out);
                out.push_str(&json_string(k));
                out.push_str(": ");
                write_json(item, depth + 1, out);
                out.push_str(if i + 1 < pairs.len() { ",\n" } else { "\n" });
            }
            pad(depth, out);
            out.push('}');
        }
        other => out.push_str(&other.to_json()),
    }
}

/// A string as nu's `to json` writes it: `"`, `\\`, backspace, form feed, newline,
/// carriage return and tab escaped; every other character as it is.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Plain JSON data on one line, floats as Nu writes them (for JSON Lines output).
pub fn json_line(v: &J) -> String {
    match v {
        J::Float(f) => format_float(*f),
        J::Str(s) => json_string(s),
        J::Arr(items) => format!(
            "[{}]",
            items.iter().map(json_line).collect::<Vec<_>>().join(",")
        ),
        J::Obj(pairs) => format!(
            "{{{}}}",
            pairs
                .iter()
                .map(|(k, v)| format!("{}:{}", json_string(k), json_line(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => other.to_json(),
    }
}

/// A value as `to nuon` writes it (nu 0.115's default style: one line, `, ` between
/// items, a list of records with the same columns as a table `[[a, b]; [1, 2]]`, strings
/// bare inside lists and records when nu would leave them bare, quoted at the top).
pub fn nuon_text(v: &J) -> Result<String, Unprintable> {
    let mut out = String::new();
    write_nuon(v, &mut out, true)?;
    Ok(out)
}

fn write_nuon(v: &J, out: &mut String, top: bool) -> Result<(), Unprintable> {
    if let Some(e) = error_of(v) {
        return Err(Unprintable::Error(e));
    }
    let (tag, body) = parts(v)?;
    let val = body.get("val").unwrap_or(&J::Null);
    match tag {
        "Nothing" => out.push_str("null"),
        "Bool" | "Int" => out.push_str(&val.to_json()),
        "Float" => out.push_str(&nuon_float(val.as_f64().unwrap_or(0.0))),
        "String" if !top => out.push_str(&nuon_string(val.as_str().unwrap_or(""))),
        "String" | "Glob" => out.push_str(&quote_nuon(val.as_str().unwrap_or(""))),
        "Filesize" => {
            let _ = write!(out, "{}b", val.to_json());
        }
        "Duration" => {
            let _ = write!(out, "{}ns", val.to_json());
        }
        "Date" => out.push_str(&date_text(val)),
        "Binary" => {
            out.push_str("0x[");
            for b in bytes_of(val).unwrap_or_default() {
                let _ = write!(out, "{b:02X}");
            }
            out.push(']');
        }
        "CellPath" => out.push_str(&cell_path_text(val)),
        "Range" => out.push_str(&range_text(val)),
        "Record" => {
            out.push('{');
            for (i, (k, item)) in val.as_object().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&nuon_string(k));
                out.push_str(": ");
                write_nuon(item, out, false)?;
            }
            out.push('}');
        }
        "List" => {
            let items = body["vals"].as_array().map_or(&[][..], Vec::as_slice);
            if let Some(columns) = table_columns(items) {
                out.push_str("[[");
                out.push_str(
                    &columns
                        .iter()
                        .map(|c| nuon_string(c))
                        .collect::<Vec<_>>()
                        .join(", "),
                );
                out.push_str("]; ");
                for (i, row) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push('[');
                    let cells = row.single().and_then(|(_, b)| b["val"].as_object());
                    for (j, (_, cell)) in cells.into_iter().flatten().enumerate() {
                        if j > 0 {
                            out.push_str(", ");
                        }
                        write_nuon(cell, out, false)?;
                    }
                    out.push(']');
                }
                out.push(']');
            } else {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_nuon(item, out, false)?;
                }
                out.push(']');
            }
        }
        _ => {
            to_plain(v)?;
        }
    }
    Ok(())
}

/// The columns when every item is a record with the same, non-empty, columns in the same
/// order: what `to nuon` writes as a table.
fn table_columns(items: &[J]) -> Option<Vec<&str>> {
    fn columns(v: &J) -> Option<Vec<&str>> {
        match v.single()? {
            ("Record", b) => Some(
                b.get("val")?
                    .as_object()?
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect(),
            ),
            _ => None,
        }
    }
    let first = columns(items.first()?)?;
    if first.is_empty() {
        return None;
    }
    items[1..]
        .iter()
        .all(|v| columns(v).as_ref() == Some(&first))
        .then_some(first)
}

fn nuon_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "inf" } else { "-inf" }.into()
    } else if f.fract() == 0.0 {
        format!("{f:.1}")
    } else {
        format!("{f}")
    }
}

/// A string bare when nu leaves it bare inside a list or record, else quoted: quoted when
/// empty, `true`/`false`/`null`/`&&`, containing a digit, whitespace or one of
/// ``[]:`{}#'";()|$,.!?=``, or spelling `inf`, `infinity` or `nan` (any case, any sign).
/// Digits are Unicode decimal digits in nu; here, besides ASCII digits, every non-ASCII
/// numeric character counts (so `½` is quoted where nu leaves it bare — still the same
/// string when read back).
pub fn nuon_string(s: &str) -> String {
    let keyword = matches!(s, "true" | "false" | "null" | "&&");
    let special = s
        .chars()
        .any(|c| c.is_whitespace() || c.is_numeric() || "[]:`{}#'\";()|$,.!?=".contains(c));
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s).to_ascii_lowercase();
    let float_word = matches!(unsigned.as_str(), "inf" | "infinity" | "nan");
    if s.is_empty() || keyword || special || float_word {
        quote_nuon(s)
    } else {
        s.to_owned()
    }
}

/// A string in double quotes, `"` and `\` escaped (as nu's `escape_quote_string`).
fn quote_nuon(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(text: &str) -> J {
        J::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn json_out_matches_to_json() {
        // Expected text from `nu --no-config-file -c '{...} | to json'` (0.115.1).
        let v = j(
            r#"{"Record":{"val":{"a":{"Int":{"val":1,"span":{"start":0,"end":0}}},"b":{"List":{"vals":[{"Float":{"val":2.5,"span":{"start":0,"end":0}}},{"Nothing":{"span":{"start":0,"end":0}}}],"span":{"start":0,"end":0}}},"c":{"Record":{"val":{},"span":{"start":0,"end":0}}},"e":{"Filesize":{"val":1000,"span":{"start":0,"end":0}}},"i":{"Float":{"val":1.0,"span":{"start":0,"end":0}}},"m":{"Float":{"val":1e20,"span":{"start":0,"end":0}}}},"span":{"start":0,"end":0}}}"#,
        );
        assert_eq!(
            json_text(&to_plain(&v).unwrap()),
            "{\n  \"a\": 1,\n  \"b\": [\n    2.5,\n    null\n  ],\n  \"c\": {},\n  \"e\": 1000,\n  \"i\": 1.0,\n  \"m\": 1e+20\n}"
        );
        assert_eq!(
            nuon_text(&v).unwrap(),
            "{a: 1, b: [2.5, null], c: {}, e: 1000b, i: 1.0, m: 100000000000000000000.0}"
        );
    }

    #[test]
    fn json_straight_from_the_value_equals_json_of_the_plain_copy() {
        let v = crate::nuon::parse(
            "{a: [1 2.5 \"x\\ny\" null {}], b: {c: []}, d: 0x[01 02], e: 1kb, f: 2020-01-01, g: [[h]; [true]]}",
            Span::default(),
        )
        .unwrap();
        assert_eq!(
            value_json_text(&v).unwrap(),
            json_text(&to_plain(&v).unwrap())
        );
        let bad = j(
            r#"{"List":{"vals":[{"Closure":{"val":{},"span":{"start":0,"end":0}}}],"span":{"start":0,"end":0}}}"#,
        );
        assert_eq!(value_json_text(&bad), to_plain(&bad).map(|p| json_text(&p)));
    }

    #[test]
    fn json_in_keeps_order_and_types() {
        let v = from_json(&j(r#"{"z":[1,"x",null],"a":true}"#), Span::new(1, 2));
        assert_eq!(
            json_text(&to_plain(&v).unwrap()),
            "{\n  \"z\": [\n    1,\n    \"x\",\n    null\n  ],\n  \"a\": true\n}"
        );
    }

    #[test]
    fn errors_and_custom_values_are_unprintable() {
        let e = j(
            r#"{"Error":{"error":{"msg":"bad","labels":[],"code":null,"url":null,"help":null,"inner":[]},"span":{"start":0,"end":0}}}"#,
        );
        assert_eq!(
            to_plain(&e),
            Err(Unprintable::Error(LabeledError::msg("bad")))
        );
        let c = j(
            r#"{"Custom":{"val":{"type":"PluginCustomValue","name":"database","data":[1]},"span":{"start":0,"end":0}}}"#,
        );
        assert!(matches!(to_plain(&c), Err(Unprintable::Type(t)) if t.contains("database")));
    }
}
