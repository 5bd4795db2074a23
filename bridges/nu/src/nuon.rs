//! NUON text (Nu's object notation) read into Nu values in their wire shape, as nu 0.115's
//! `from nuon` reads it, sans I/O.
//!
//! Covered: records (`{a: 1, "b c": x}`), lists (`[1 2 3]`, `[1, 2]`), tables
//! (`[[a b]; [1 2]]`), strings (bare inside lists and records; `"..."` with Nu's escapes;
//! `'...'`; `` `...` ``; `r#'...'#`), integers (decimal with `_`, `0x`, `0o`, `0b`),
//! floats (`inf`, `nan`), `true`/`false`/`null`, durations (`1sec`, `1.5min`), file sizes
//! (`1kb`, `1KiB`), dates (`2020-01-01`, RFC 3339), binary (`0x[ff 00]`, `0b[..]`,
//! `0o[..]`) and `#` comments. What nu reads as something other than plain data — ranges
//! (`1..5`), cell paths, variables — and what nu refuses is an error here, never a guess
//! (the caller can send JSON instead). `tests/nuon.rs` checks a table of documents against
//! the real nu.

use crate::json::J;
use crate::msg::Span;
use crate::obj;

/// How deep lists and records may nest.
const MAX_DEPTH: usize = 256;

/// Why a NUON document cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct NuonError {
    /// 1-based line of the problem.
    pub line: usize,
    /// 1-based column (in characters) of the problem.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// Reads one NUON document (empty text is `null`) as a Nu value, every part with `span`.
pub fn parse(text: &str, span: Span) -> Result<J, NuonError> {
    let mut p = Parser {
        src: text,
        pos: 0,
        span,
        depth: 0,
    };
    p.skip_space(false);
    if p.at_end() {
        return Ok(obj! {"Nothing" => obj! {"span" => span.to_value()}});
    }
    let v = p.value(true)?;
    p.skip_space(false);
    if !p.at_end() {
        return Err(p.error("more than one value (a NUON document is one value)"));
    }
    Ok(v)
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    span: Span,
    depth: usize,
}

/// Characters that end a bare word.
fn ends_word(c: char) -> bool {
    c.is_whitespace() || matches!(c, '[' | ']' | '{' | '}' | '(' | ')' | ',' | ';')
}

impl<'a> Parser<'a> {
    fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn error_at(&self, pos: usize, message: impl Into<String>) -> NuonError {
        let before = &self.src[..pos.min(self.src.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        NuonError {
            line,
            column,
            message: message.into(),
        }
    }

    fn error(&self, message: impl Into<String>) -> NuonError {
        self.error_at(self.pos, message)
    }

    /// Skips whitespace and comments (and commas, inside lists and records).
    fn skip_space(&mut self, commas: bool) {
        while let Some(c) = self.peek() {
            if c.is_whitespace() || (commas && c == ',') {
                self.bump();
            } else if c == '#' {
                while let Some(c) = self.bump() {
                    if c == '\n' {
                        break;
                    }
                }
            } else {
                break;
            }
        }
    }

    fn tagged(&self, tag: &str, val: J) -> J {
        obj! {tag => obj! {"val" => val, "span" => self.span.to_value()}}
    }

    fn string(&self, s: String) -> J {
        self.tagged("String", J::Str(s))
    }

    fn value(&mut self, top: bool) -> Result<J, NuonError> {
        let start = self.pos;
        match self.peek() {
            None => Err(self.error("a value was expected")),
            Some('{') => self.nested(|p| p.record()),
            Some('[') => self.nested(|p| p.list()),
            Some('"') => {
                let s = self.double_quoted()?;
                Ok(self.string(s))
            }
            Some('\'') => {
                let s = self.delimited('\'')?;
                Ok(self.string(s))
            }
            Some('`') if top => Err(self.error(
                "a backtick string is a command at the top of a NUON document, not a value",
            )),
            Some('`') => {
                let s = self.delimited('`')?;
                Ok(self.string(s))
            }
            Some(c) if matches!(c, ']' | '}' | ')' | '(' | ',' | ';') => {
                Err(self.error(format!("unexpected `{c}`")))
            }
            Some('r') if self.src[self.pos..].starts_with("r#") => {
                let s = self.raw_string()?;
                Ok(self.string(s))
            }
            Some(_) => {
                let word = self.word();
                if matches!(word, "0x" | "0b" | "0o") && self.peek() == Some('[') {
                    return self.binary(word, start);
                }
                if self.peek() == Some('(') {
                    return Err(self.error("parentheses are not part of NUON"));
                }
                self.classify(word, top, start)
            }
        }
    }

    fn nested(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<J, NuonError>,
    ) -> Result<J, NuonError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error(format!("nested more than {MAX_DEPTH} levels deep")));
        }
        self.depth += 1;
        let v = f(self);
        self.depth -= 1;
        v
    }

    /// A bare word (up to whitespace or a delimiter).
    fn word(&mut self) -> &'a str {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if ends_word(c) {
                break;
            }
            self.bump();
        }
        let src: &'a str = self.src;
        &src[start..self.pos]
    }

    /// What a bare word means: a literal, or a string inside a list or record.
    fn classify(&self, word: &str, top: bool, start: usize) -> Result<J, NuonError> {
        match word {
            "true" => return Ok(self.tagged("Bool", J::Bool(true))),
            "false" => return Ok(self.tagged("Bool", J::Bool(false))),
            "null" => return Ok(obj! {"Nothing" => obj! {"span" => self.span.to_value()}}),
            _ => {}
        }
        if let Some(n) = number(word) {
            return Ok(match n {
                Num::Int(i) => self.tagged("Int", J::Int(i)),
                Num::Float(f) => self.tagged("Float", J::Float(f)),
            });
        }
        match with_unit(word) {
            Ok(Some((tag, Some(n)))) => return Ok(self.tagged(tag, J::Int(n))),
            Ok(Some((_, None))) => {
                return Err(self.error_at(start, format!("`{word}` is out of range")))
            }
            Ok(None) => {}
            Err(()) => {
                return Err(self.error_at(start, format!("`{word}` is not a number with a unit")))
            }
        }
        if looks_like_date(word) {
            // An invalid date is an error at the top and a string inside lists and
            // records, as in nu.
            match date(word) {
                Some(text) => return Ok(self.tagged("Date", J::Str(text))),
                None if top => {
                    return Err(self.error_at(start, format!("`{word}` is not a valid date")))
                }
                None => {}
            }
        }
        let unsigned = word.strip_prefix(['+', '-']).unwrap_or(word);
        if ["0x", "0o", "0b"].iter().any(|p| unsigned.starts_with(p)) {
            return Err(self.error_at(start, format!("`{word}` is not a valid number")));
        }
        if word.starts_with('$') {
            return Err(self.error_at(
                start,
                format!("`{word}`: variables and cell paths are not read from NUON by the bridge"),
            ));
        }
        if top {
            let what = if word.contains("..") && word.starts_with(|c: char| c.is_ascii_digit()) {
                "a range, which the bridge does not read from NUON"
            } else {
                "a bare word is a command at the top of a NUON document, not a value"
            };
            return Err(self.error_at(start, format!("`{word}`: {what}")));
        }
        Ok(self.string(word.to_owned()))
    }

    fn binary(&mut self, prefix: &str, start: usize) -> Result<J, NuonError> {
        let (radix, per_byte) = match prefix {
            "0x" => (16, 2),
            "0b" => (2, 8),
            _ => (8, 3),
        };
        self.bump(); // [
        let mut digits = String::new();
        loop {
            match self.bump() {
                None => return Err(self.error_at(start, "unclosed binary literal")),
                Some(']') => break,
                Some(c) if c.is_whitespace() || c == ',' => {}
                Some(c) if c.is_digit(radix) => digits.push(c),
                Some(c) => {
                    return Err(self.error(format!("`{c}` is not a digit of a {prefix}[..] binary")))
                }
            }
        }
        let pad = (per_byte - digits.len() % per_byte) % per_byte;
        let digits = "0".repeat(pad) + &digits;
        let mut bytes = Vec::with_capacity(digits.len() / per_byte);
        for chunk in digits.as_bytes().chunks(per_byte) {
            let text = std::str::from_utf8(chunk).unwrap_or("");
            match u8::from_str_radix(text, radix) {
                Ok(b) => bytes.push(b),
                Err(_) => {
                    return Err(self.error_at(start, format!("`{text}` does not fit in a byte")))
                }
            }
        }
        Ok(self.tagged("Binary", J::Bytes(bytes)))
    }

    /// A `"..."` string with Nu's escapes.
    fn double_quoted(&mut self) -> Result<String, NuonError> {
        let start = self.pos;
        self.bump();
        let mut out = String::new();
        loop {
            match self.bump() {
                None => return Err(self.error_at(start, "unclosed string")),
                Some('"') => return Ok(out),
                Some('\\') => {
                    let at = self.pos;
                    let c = self
                        .bump()
                        .ok_or_else(|| self.error_at(start, "unclosed string"))?;
                    match c {
                        '"' | '\'' | '\\' | '/' | '(' | ')' | '{' | '}' | '$' | '^' | '#' | '|'
                        | '~' => out.push(c),
                        'a' => out.push('\x07'),
                        'b' => out.push('\x08'),
                        'e' => out.push('\x1b'),
                        'f' => out.push('\x0c'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        '0' => out.push('\0'),
                        'u' => out.push(self.unicode_escape(at)?),
                        other => {
                            return Err(self.error_at(at, format!("unknown escape `\\{other}`")))
                        }
                    }
                }
                Some(c) => out.push(c),
            }
        }
    }

    /// `\u{XXXX}` (the `u` is read).
    fn unicode_escape(&mut self, at: usize) -> Result<char, NuonError> {
        let bad = |p: &Self| p.error_at(at, "`\\u` needs 1 to 6 hex digits in braces: `\\u{41}`");
        if self.bump() != Some('{') {
            return Err(bad(self));
        }
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
            self.bump();
        }
        let hex = &self.src[start..self.pos];
        if hex.is_empty() || hex.len() > 6 || self.bump() != Some('}') {
            return Err(bad(self));
        }
        u32::from_str_radix(hex, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| self.error_at(at, format!("`\\u{{{hex}}}` is not a character")))
    }

    /// A raw string, `r#'...'#` with one or more `#`.
    fn raw_string(&mut self) -> Result<String, NuonError> {
        let start = self.pos;
        let rest = &self.src[start + 1..];
        let hashes = rest.len() - rest.trim_start_matches('#').len();
        if !rest[hashes..].starts_with('\'') {
            return Err(self.error("a raw string is `r#'...'#`"));
        }
        let body = start + 1 + hashes + 1;
        let close = format!("'{}", "#".repeat(hashes));
        match self.src[body..].find(&close) {
            Some(end) => {
                self.pos = body + end + close.len();
                Ok(self.src[body..body + end].to_owned())
            }
            None => Err(self.error_at(start, "unclosed raw string")),
        }
    }

    /// A string between two `quote`s, without escapes.
    fn delimited(&mut self, quote: char) -> Result<String, NuonError> {
        let start = self.pos;
        self.bump();
        let body = self.pos;
        while let Some(c) = self.bump() {
            if c == quote {
                return Ok(self.src[body..self.pos - 1].to_owned());
            }
        }
        Err(self.error_at(start, "unclosed string"))
    }

    fn record(&mut self) -> Result<J, NuonError> {
        self.bump(); // {
        let mut pairs: Vec<(String, J)> = Vec::new();
        loop {
            self.skip_space(true);
            let key_at = self.pos;
            let key = match self.peek() {
                None => return Err(self.error("unclosed record: `}` expected")),
                Some('}') => {
                    self.bump();
                    break;
                }
                Some('"') => self.double_quoted()?,
                Some('\'') => self.delimited('\'')?,
                Some('`') => self.delimited('`')?,
                Some(_) => {
                    let start = self.pos;
                    while let Some(c) = self.peek() {
                        if ends_word(c) || c == ':' {
                            break;
                        }
                        self.bump();
                    }
                    if self.pos == start {
                        return Err(self.error("a record key was expected"));
                    }
                    if self.src[start..self.pos].starts_with("r#") {
                        return Err(self.error_at(start, "a raw string cannot be a record key"));
                    }
                    self.src[start..self.pos].to_owned()
                }
            };
            self.skip_space(false);
            if self.peek() != Some(':') {
                return Err(self.error(format!("`:` expected after the record key `{key}`")));
            }
            self.bump();
            self.skip_space(false);
            let v = self.value(false)?;
            if pairs.iter().any(|(k, _)| *k == key) {
                return Err(self.error_at(key_at, format!("the record key `{key}` is used twice")));
            }
            pairs.push((key, v));
        }
        Ok(self.tagged("Record", J::Obj(pairs)))
    }

    fn list(&mut self) -> Result<J, NuonError> {
        self.bump(); // [
        let mut items = Vec::new();
        loop {
            self.skip_space(true);
            match self.peek() {
                None => return Err(self.error("unclosed list: `]` expected")),
                Some(']') => {
                    self.bump();
                    break;
                }
                Some(c) => {
                    let header = items.is_empty() && c == '[';
                    let v = self.value(false)?;
                    if header {
                        self.skip_space(false);
                        if self.peek() == Some(';') {
                            self.bump();
                            return self.table(v);
                        }
                    }
                    items.push(v);
                }
            }
        }
        Ok(self.list_value(items))
    }

    fn list_value(&self, items: Vec<J>) -> J {
        obj! {"List" => obj! {"vals" => J::Arr(items), "span" => self.span.to_value()}}
    }

    /// The rows of `[[a b]; [1 2] ...]` after the `;`, as a list of records.
    fn table(&mut self, header: J) -> Result<J, NuonError> {
        let names: Vec<String> = list_items(&header)
            .iter()
            .map(|h| match h.single() {
                Some(("String", b)) => b["val"].as_str().map(str::to_owned),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| self.error("a table's column names must be strings"))?;
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(self.error(format!("the column `{n}` is named twice")));
            }
        }
        let mut rows = Vec::new();
        loop {
            self.skip_space(true);
            match self.peek() {
                None => return Err(self.error("unclosed table: `]` expected")),
                Some(']') => {
                    self.bump();
                    break;
                }
                Some('[') => {
                    let at = self.pos;
                    let row = self.nested(|p| p.list())?;
                    let cells = list_items(&row);
                    if cells.len() != names.len() {
                        return Err(self.error_at(
                            at,
                            format!(
                                "a table row has {} cells for {} columns",
                                cells.len(),
                                names.len()
                            ),
                        ));
                    }
                    let pairs = names.iter().cloned().zip(cells.iter().cloned()).collect();
                    rows.push(self.tagged("Record", J::Obj(pairs)));
                }
                Some(_) => return Err(self.error("a table row (`[...]`) was expected")),
            }
        }
        // A table without rows is its header list, as nu reads it.
        if rows.is_empty() {
            return Ok(self.list_value(vec![header]));
        }
        Ok(self.list_value(rows))
    }
}

fn list_items(v: &J) -> &[J] {
    v.get("List")
        .and_then(|b| b.get("vals"))
        .and_then(J::as_array)
        .map_or(&[], Vec::as_slice)
}

enum Num {
    Int(i64),
    Float(f64),
}

/// A number as Nu's parser reads one: integers (decimal with `_`, `0x`, `0o`, `0b`; too
/// large for 64 bits becomes a float), floats (`1.5`, `.5`, `5.`, `1e3`), `inf`, `nan`.
fn number(word: &str) -> Option<Num> {
    let (neg, body) = match word.as_bytes().first()? {
        b'-' => (true, &word[1..]),
        b'+' => (false, &word[1..]),
        _ => (false, word),
    };
    let lower = body.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        let f = if lower == "nan" {
            f64::NAN
        } else {
            f64::INFINITY
        };
        return Some(Num::Float(if neg { -f } else { f }));
    }
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(digits) = body.strip_prefix(prefix) {
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                return None;
            }
            let v = i64::from_str_radix(digits, radix).ok()?;
            return Some(Num::Int(if neg { -v } else { v }));
        }
    }
    let plain: String = body.chars().filter(|&c| c != '_').collect();
    if !plain.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    if !plain
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
    {
        return None;
    }
    if plain.chars().all(|c| c.is_ascii_digit()) {
        let signed = if neg {
            format!("-{plain}")
        } else {
            plain.clone()
        };
        if let Ok(i) = signed.parse::<i64>() {
            return Some(Num::Int(i));
        }
    }
    let f: f64 = plain.parse().ok()?;
    Some(Num::Float(if neg { -f } else { f }))
}

/// Duration units (case-sensitive) in nanoseconds.
const DURATIONS: &[(&str, i64)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("sec", 1_000_000_000),
    ("min", 60_000_000_000),
    ("hr", 3_600_000_000_000),
    ("day", 86_400_000_000_000),
    ("wk", 604_800_000_000_000),
];

/// File size units (case-insensitive) in bytes.
const FILESIZES: &[(&str, i64)] = &[
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("pb", 1_000_000_000_000_000),
    ("eb", 1_000_000_000_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("pib", 1 << 50),
    ("eib", 1 << 60),
];

/// A value with a unit: `Duration` or `Filesize`, and nanoseconds or bytes (`None` when
/// out of range).
type Unit = (&'static str, Option<i64>);

/// A number with a duration or file size unit: the tag and the value in nanoseconds or
/// bytes (`None` when it overflows); `Err` for a unit after something that is not a
/// number but starts like one (`1a2b`, which nu refuses too).
fn with_unit(word: &str) -> Result<Option<Unit>, ()> {
    let durations = DURATIONS.iter().filter(|(u, _)| word.ends_with(u));
    let sizes = FILESIZES.iter().filter(|(u, _)| {
        word.len() >= u.len()
            && word.is_char_boundary(word.len() - u.len())
            && word[word.len() - u.len()..].eq_ignore_ascii_case(u)
    });
    let mut refused = false;
    for (tag, (unit, factor)) in durations
        .map(|u| ("Duration", u))
        .chain(sizes.map(|u| ("Filesize", u)))
    {
        let num = &word[..word.len() - unit.len()];
        let value = match number(num) {
            Some(Num::Int(i)) => i.checked_mul(*factor),
            Some(Num::Float(f)) => {
                let v = f * *factor as f64;
                (v.is_finite() && v.abs() < 9.2e18).then_some(v as i64)
            }
            None => {
                refused |= num.starts_with(|c: char| c.is_ascii_digit() || "+-._".contains(c))
                    && num.chars().any(|c| c.is_ascii_digit());
                continue;
            }
        };
        return Ok(Some((tag, value)));
    }
    if refused {
        Err(())
    } else {
        Ok(None)
    }
}

/// Whether a word is shaped like a date (`YYYY-MM-DD...`).
fn looks_like_date(word: &str) -> bool {
    let b = word.as_bytes();
    b.len() >= 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
}

/// A date as Nu reads it (`YYYY-MM-DD`, or RFC 3339 with an optional offset; no offset is
/// UTC), written as nu writes dates (RFC 3339, fractions in 3, 6 or 9 digits, `+00:00`).
fn date(word: &str) -> Option<String> {
    let b = word.as_bytes();
    let num = |s: &[u8]| -> Option<u32> {
        if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(s).ok()?.parse().ok()
    };
    let (year, month, day) = (num(&b[0..4])?, num(b.get(5..7)?)?, num(b.get(8..10)?)?);
    if b.get(7) != Some(&b'-') || !(1..=12).contains(&month) {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if day == 0 || day > days[month as usize - 1] {
        return None;
    }
    let date = format!("{year:04}-{month:02}-{day:02}");
    let rest = &b[10..];
    if rest.is_empty() {
        return Some(format!("{date}T00:00:00+00:00"));
    }
    if !matches!(rest[0], b'T' | b't') || rest.len() < 9 {
        return None;
    }
    let (h, m, s) = (num(&rest[1..3])?, num(&rest[4..6])?, num(&rest[7..9])?);
    if rest[3] != b':' || rest[6] != b':' || h > 23 || m > 59 || s > 59 {
        return None;
    }
    let mut rest = &rest[9..];
    let mut nanos: u64 = 0;
    if rest.first() == Some(&b'.') {
        let digits = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        for i in 0..9 {
            let d = if i < digits { rest[1 + i] - b'0' } else { 0 };
            nanos = nanos * 10 + u64::from(d);
        }
        rest = &rest[1 + digits..];
    }
    let offset = match rest {
        [] | [b'Z'] | [b'z'] => "+00:00".to_owned(),
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (oh, om) = (num(&[*h1, *h2])?, num(&[*m1, *m2])?);
            if oh > 23 || om > 59 {
                return None;
            }
            let sign = if oh == 0 && om == 0 { b'+' } else { *sign };
            format!("{}{oh:02}:{om:02}", sign as char)
        }
        _ => return None,
    };
    let frac = if nanos == 0 {
        String::new()
    } else if nanos % 1_000_000 == 0 {
        format!(".{:03}", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!(".{:06}", nanos / 1_000)
    } else {
        format!(".{nanos:09}")
    };
    Some(format!("{date}T{h:02}:{m:02}:{s:02}{frac}{offset}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{json_text, nuon_text, to_plain};

    fn json(text: &str) -> String {
        json_text(&to_plain(&parse(text, Span::default()).unwrap()).unwrap())
    }

    #[test]
    fn scalars() {
        assert_eq!(json(""), "null");
        assert_eq!(json("  # nothing\n"), "null");
        assert_eq!(json("-5"), "-5");
        assert_eq!(json("1_000"), "1000");
        assert_eq!(json("0x1f"), "31");
        assert_eq!(json("1e3"), "1e+3");
        assert_eq!(json(".5"), "0.5");
        assert_eq!(json("9223372036854775808"), "9223372036854775808.0");
        assert_eq!(json("1.5min"), "90000000000");
        assert_eq!(json("1.5ns"), "1");
        assert_eq!(json("1KiB"), "1024");
        assert_eq!(json("-1kb"), "-1000");
        assert_eq!(json("2020-01-01"), "\"2020-01-01T00:00:00+00:00\"");
        assert_eq!(
            json("2024-01-01T00:00:00.1234Z"),
            "\"2024-01-01T00:00:00.123400+00:00\""
        );
        assert_eq!(json(r#""esc\n\u{41}\(""#), r#""esc\nA(""#);
        assert_eq!(json("'a\\nb'"), r#""a\\nb""#);
    }

    #[test]
    fn containers() {
        assert_eq!(
            nuon_text(&parse("[[a b]; [1 2], [3 4]]", Span::default()).unwrap()).unwrap(),
            "[[a, b]; [1, 2], [3, 4]]"
        );
        assert_eq!(
            nuon_text(&parse("{a: 1, \"b c\": [x `y z` 0x[f 0a]]}", Span::default()).unwrap())
                .unwrap(),
            "{a: 1, \"b c\": [x, \"y z\", 0x[0F0A]]}"
        );
        assert_eq!(
            nuon_text(&parse("[[a]; ]", Span::default()).unwrap()).unwrap(),
            "[[a]]"
        );
    }

    #[test]
    fn refusals_say_where() {
        for bad in [
            "abc",
            "1 2",
            "[1",
            "{a: 1, a: 2}",
            "{a 1}",
            "[[a b]; [1]]",
            "1..5",
            "$x",
            "\"bad \\q\"",
            "2020-02-30",
            "0x[fg]",
            "[a(b)]",
            "{r#'x'#: 1}",
            "`top`",
        ] {
            assert!(parse(bad, Span::default()).is_err(), "{bad}");
        }
        let e = parse("[1,\n  {a 1}]", Span::default()).unwrap_err();
        assert_eq!((e.line, e.column), (2, 6), "{e}");
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert!(parse(&deep, Span::default())
            .unwrap_err()
            .message
            .contains("nested"));
    }
}
