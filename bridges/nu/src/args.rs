//! A command line, parsed against a plugin command's signature the way Nu's parser parses
//! a call: positional, optional and rest arguments, `--long`/`-s` switches and named
//! arguments, values typed by their `SyntaxShape`. Pure: the client's directory and home
//! come in as arguments.
//!
//! Every argument gets a span in a synthesised command line (the command name and the
//! arguments joined by spaces), which the plugin may ask for (`GetSpanContents`) and
//! which error messages point into.

use crate::json::J;
use crate::msg::{EvaluatedCall, LabeledError, Span};
use crate::obj;
use std::path::{Component, Path, PathBuf};

/// A `SyntaxShape`, as far as a shell command line can produce it.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// Anything: a number if it parses as one, else a string.
    Any,
    /// An integer.
    Int,
    /// A float.
    Float,
    /// An integer or a float.
    Number,
    /// A string.
    String,
    /// A path, made absolute against the client's directory.
    Filepath,
    /// A directory, made absolute against the client's directory.
    Directory,
    /// A glob pattern.
    GlobPattern,
    /// A cell path (`a.b.0`).
    CellPath,
    /// A duration (`10sec`).
    Duration,
    /// A file size (`10kb`).
    Filesize,
    /// `true` or `false`.
    Boolean,
    /// Bytes: the argument's bytes.
    Binary,
    /// A list, as JSON.
    List(Box<Shape>),
    /// A record, as JSON.
    Record,
    /// A table (list of records), as JSON.
    Table,
    /// One of several shapes: the first that parses.
    OneOf(Vec<Shape>),
    /// Shapes a shell cannot produce (closures, blocks, ...): by name.
    Other(String),
}

impl Shape {
    /// Reads a wire `SyntaxShape`.
    pub fn from_value(v: &J) -> Shape {
        if let Some(name) = v.as_str() {
            return match name {
                "Any" => Shape::Any,
                "Int" => Shape::Int,
                "Float" => Shape::Float,
                "Number" => Shape::Number,
                "String" | "Keyword" | "Signature" => Shape::String,
                "Filepath" => Shape::Filepath,
                "Directory" => Shape::Directory,
                "GlobPattern" => Shape::GlobPattern,
                "CellPath" | "FullCellPath" => Shape::CellPath,
                "Duration" => Shape::Duration,
                "Filesize" => Shape::Filesize,
                "Boolean" => Shape::Boolean,
                "Binary" => Shape::Binary,
                "Record" => Shape::Record,
                "Table" => Shape::Table,
                other => Shape::Other(other.to_owned()),
            };
        }
        match v.single() {
            Some(("List", inner)) => Shape::List(Box::new(Shape::from_value(inner))),
            Some(("Record", _)) => Shape::Record,
            Some(("Table", _)) => Shape::Table,
            Some(("OneOf", J::Arr(items))) => {
                Shape::OneOf(items.iter().map(Shape::from_value).collect())
            }
            Some(("Keyword", _)) => Shape::String,
            Some((name, _)) => Shape::Other(name.to_owned()),
            None => Shape::Other(v.to_json()),
        }
    }

    /// The name Nu's help uses.
    pub fn name(&self) -> String {
        match self {
            Shape::Any => "any".into(),
            Shape::Int => "int".into(),
            Shape::Float => "float".into(),
            Shape::Number => "number".into(),
            Shape::String => "string".into(),
            Shape::Filepath => "path".into(),
            Shape::Directory => "directory".into(),
            Shape::GlobPattern => "glob".into(),
            Shape::CellPath => "cell-path".into(),
            Shape::Duration => "duration".into(),
            Shape::Filesize => "filesize".into(),
            Shape::Boolean => "bool".into(),
            Shape::Binary => "binary".into(),
            Shape::List(inner) => format!("list<{}>", inner.name()),
            Shape::Record => "record".into(),
            Shape::Table => "table".into(),
            Shape::OneOf(items) => format!(
                "oneof<{}>",
                items.iter().map(Shape::name).collect::<Vec<_>>().join(", ")
            ),
            Shape::Other(n) => n.to_lowercase(),
        }
    }
}

/// A positional parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Positional {
    /// Its name.
    pub name: String,
    /// Its description.
    pub desc: String,
    /// Its shape.
    pub shape: Shape,
}

/// A flag.
#[derive(Clone, Debug, PartialEq)]
pub struct Flag {
    /// `--long`.
    pub long: String,
    /// `-s`.
    pub short: Option<char>,
    /// The shape of its value; `None` for a switch.
    pub arg: Option<Shape>,
    /// Whether it must be given.
    pub required: bool,
    /// Its description.
    pub desc: String,
}

/// An example from the signature.
#[derive(Clone, Debug, PartialEq)]
pub struct Example {
    /// The Nu code.
    pub example: String,
    /// What it shows.
    pub description: String,
}

/// A plugin command's signature.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    /// The full command name (`from ini`).
    pub name: String,
    /// One-line description.
    pub description: String,
    /// More description.
    pub extra_description: String,
    /// Required positionals.
    pub required: Vec<Positional>,
    /// Optional positionals.
    pub optional: Vec<Positional>,
    /// The rest parameter.
    pub rest: Option<Positional>,
    /// Flags, `help` included.
    pub named: Vec<Flag>,
    /// Input/output types, as Nu names them.
    pub io_types: Vec<(String, String)>,
    /// Examples.
    pub examples: Vec<Example>,
}

impl Signature {
    /// Reads one element of a `Signature` response (`{sig, examples}`).
    pub fn from_value(v: &J) -> Result<Signature, String> {
        let sig = v.get("sig").ok_or("a signature without `sig`")?;
        let text = |o: &J, k: &str| o.get(k).and_then(J::as_str).unwrap_or("").to_owned();
        let positional = |p: &J| Positional {
            name: text(p, "name"),
            desc: text(p, "desc"),
            shape: Shape::from_value(p.get("shape").unwrap_or(&J::Null)),
        };
        let list = |k: &str| -> Vec<Positional> {
            sig.get(k)
                .and_then(J::as_array)
                .map(|a| a.iter().map(positional).collect())
                .unwrap_or_default()
        };
        let name = text(sig, "name");
        if name.trim().is_empty() {
            return Err("a signature without a name".into());
        }
        Ok(Signature {
            name,
            description: text(sig, "description"),
            extra_description: text(sig, "extra_description"),
            required: list("required_positional"),
            optional: list("optional_positional"),
            rest: sig
                .get("rest_positional")
                .filter(|r| !r.is_null())
                .map(positional),
            named: sig
                .get("named")
                .and_then(J::as_array)
                .map(|a| {
                    a.iter()
                        .map(|f| Flag {
                            long: text(f, "long"),
                            short: f
                                .get("short")
                                .and_then(J::as_str)
                                .and_then(|s| s.chars().next()),
                            arg: f.get("arg").filter(|a| !a.is_null()).map(Shape::from_value),
                            required: f.get("required").and_then(J::as_bool).unwrap_or(false),
                            desc: text(f, "desc"),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            io_types: sig
                .get("input_output_types")
                .and_then(J::as_array)
                .map(|a| {
                    a.iter()
                        .map(|p| (type_name(&p[0]), type_name(&p[1])))
                        .collect()
                })
                .unwrap_or_default(),
            examples: v
                .get("examples")
                .and_then(J::as_array)
                .map(|a| {
                    a.iter()
                        .map(|e| Example {
                            example: text(e, "example"),
                            description: text(e, "description"),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The usage line: `inc {flags} (cell_path)`.
    pub fn usage(&self) -> String {
        let mut s = self.name.clone();
        if !self.named.is_empty() {
            s.push_str(" {flags}");
        }
        for p in &self.required {
            s.push_str(&format!(" <{}>", p.name));
        }
        for p in &self.optional {
            s.push_str(&format!(" ({})", p.name));
        }
        if let Some(r) = &self.rest {
            s.push_str(&format!(" ...({})", r.name));
        }
        s
    }

    /// Help text in the layout of Nu's `help` (without colours).
    pub fn help(&self) -> String {
        let mut out = String::new();
        out.push_str(&self.description);
        out.push_str("\n\n");
        if !self.extra_description.is_empty() {
            out.push_str(&self.extra_description);
            out.push_str("\n\n");
        }
        out.push_str(&format!("Usage:\n  > {} \n\n", self.usage()));
        if !self.named.is_empty() {
            out.push_str("Flags:\n");
            for f in &self.named {
                let short = f.short.map(|c| format!("-{c}, ")).unwrap_or_default();
                let arg = f
                    .arg
                    .as_ref()
                    .map(|a| format!(" <{}>", a.name()))
                    .unwrap_or_default();
                let req = if f.required { " (required)" } else { "" };
                out.push_str(&format!("  {short}--{}{arg}{req}: {}\n", f.long, f.desc));
            }
            out.push('\n');
        }
        let params: Vec<(&Positional, &str)> = self
            .required
            .iter()
            .map(|p| (p, ""))
            .chain(self.optional.iter().map(|p| (p, " (optional)")))
            .chain(self.rest.iter().map(|p| (p, "")))
            .collect();
        if !params.is_empty() {
            out.push_str("Parameters:\n");
            for (p, opt) in params {
                let dots = if self.rest.as_ref() == Some(p) {
                    "..."
                } else {
                    ""
                };
                out.push_str(&format!(
                    "  {dots}{} <{}>: {}{opt}\n",
                    p.name,
                    p.shape.name(),
                    p.desc
                ));
            }
            out.push('\n');
        }
        if !self.io_types.is_empty() {
            out.push_str("Input/output types:\n");
            for (i, o) in &self.io_types {
                out.push_str(&format!("  {i} | {o}\n"));
            }
            out.push('\n');
        }
        if !self.examples.is_empty() {
            out.push_str("Examples:\n");
            for e in &self.examples {
                out.push_str(&format!("  {}\n  > {}\n\n", e.description, e.example));
            }
        }
        while out.ends_with("\n\n") {
            out.pop();
        }
        out
    }
}

/// Nu's name of a wire `Type`.
fn type_name(t: &J) -> String {
    if let Some(s) = t.as_str() {
        return match s {
            "CellPath" => "cell-path".into(),
            "Boolean" => "bool".into(),
            other => other.to_lowercase(),
        };
    }
    match t.single() {
        Some(("List", inner)) => format!("list<{}>", type_name(inner)),
        Some(("Record", _)) => "record".into(),
        Some(("Table", _)) => "table".into(),
        Some((name, _)) => name.to_lowercase(),
        None => "any".into(),
    }
}

/// What the client's environment contributes to argument values.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// The client's working directory.
    pub cwd: PathBuf,
    /// The client's home directory, for `~`.
    pub home: Option<PathBuf>,
}

/// A parsed invocation.
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    /// Run the call.
    Call(EvaluatedCall),
    /// `--help` / `-h`: print the help.
    Help,
}

/// The synthesised command line and the spans of its words.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// The text: the command name and each argument, separated by spaces.
    pub text: String,
    /// The span of the command name.
    pub head: Span,
    /// The span of each argument.
    pub args: Vec<Span>,
}

impl Source {
    /// Lays out `name args...`.
    pub fn new(name: &str, args: &[String]) -> Source {
        let mut text = name.to_owned();
        let head = Span::new(0, text.len());
        let mut spans = Vec::with_capacity(args.len());
        for a in args {
            text.push(' ');
            let start = text.len();
            text.push_str(a);
            spans.push(Span::new(start, text.len()));
        }
        Source {
            text,
            head,
            args: spans,
        }
    }

    /// The bytes of a span (empty when it is not inside the text).
    pub fn contents(&self, span: Span) -> &[u8] {
        self.text
            .as_bytes()
            .get(span.start..span.end)
            .unwrap_or_default()
    }
}

/// A usage error in Nu's words: code, message, label on a span, help.
pub fn usage_error(
    code: &str,
    msg: &str,
    label: &str,
    span: Span,
    help: Option<String>,
) -> LabeledError {
    let mut e = LabeledError::msg(msg).label(label, span);
    e.code = Some(code.to_owned());
    e.help = help;
    e
}

/// Parses `args` (after the command's own words) against `sig`.
pub fn parse(
    sig: &Signature,
    src: &Source,
    args: &[String],
    ctx: &Context,
) -> Result<Parsed, LabeledError> {
    let usage_help = || {
        Some(format!(
            "Usage: {} . Use `--help` for more information.",
            sig.usage()
        ))
    };
    let mut positional: Vec<(String, Span)> = Vec::new();
    let mut named: Vec<(String, Span, Option<J>)> = Vec::new();
    let mut i = 0;
    let mut only_positional = false;
    while i < args.len() {
        let a = &args[i];
        let span = src.args[i];
        i += 1;
        if only_positional || a == "-" || !a.starts_with('-') || looks_numeric(a) {
            positional.push((a.clone(), span));
            continue;
        }
        if a == "--" {
            only_positional = true;
            continue;
        }
        if let Some(body) = a.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (body, None),
            };
            let Some(flag) = sig.named.iter().find(|f| f.long == name) else {
                return Err(unknown_flag(sig, name, span));
            };
            if flag.long == "help" {
                return Ok(Parsed::Help);
            }
            let value = flag_value(sig, flag, inline, args, &mut i, src, span, ctx)?;
            named.push((flag.long.clone(), span, value));
            continue;
        }
        // A group of short flags: `-abc`; only the last may take a value.
        let shorts: Vec<char> = a[1..].chars().collect();
        for (k, c) in shorts.iter().enumerate() {
            let Some(flag) = sig.named.iter().find(|f| f.short == Some(*c)) else {
                return Err(unknown_flag(sig, &c.to_string(), span));
            };
            if flag.long == "help" {
                return Ok(Parsed::Help);
            }
            if flag.arg.is_some() && k + 1 != shorts.len() {
                return Err(usage_error(
                    "nu::parser::short_flag_batch_cant_take_arg",
                    "Short flag batches can't take args.",
                    "short flag batches can't take args",
                    span,
                    None,
                ));
            }
            let value = flag_value(sig, flag, None, args, &mut i, src, span, ctx)?;
            named.push((flag.long.clone(), span, value));
        }
    }
    for f in sig.named.iter().filter(|f| f.required) {
        if !named.iter().any(|(n, _, _)| *n == f.long) {
            return Err(usage_error(
                "nu::parser::missing_required_flag",
                "Missing required flag.",
                &format!("missing required flag --{}", f.long),
                src.head,
                usage_help(),
            ));
        }
    }
    let mut values = Vec::new();
    let mut it = positional.into_iter();
    for p in &sig.required {
        let Some((text, span)) = it.next() else {
            let end = Span::new(src.text.len(), src.text.len());
            return Err(usage_error(
                "nu::parser::missing_positional",
                "Missing required positional argument.",
                &format!("missing {}", p.name),
                end,
                usage_help(),
            ));
        };
        values.push(convert(&p.shape, &text, span, ctx)?);
    }
    for p in &sig.optional {
        match it.next() {
            Some((text, span)) => values.push(convert(&p.shape, &text, span, ctx)?),
            None => break,
        }
    }
    for (text, span) in it {
        let Some(rest) = &sig.rest else {
            return Err(usage_error(
                "nu::parser::extra_positional",
                "Extra positional argument.",
                "extra positional argument",
                span,
                usage_help(),
            ));
        };
        values.push(convert(&rest.shape, &text, span, ctx)?);
    }
    Ok(Parsed::Call(EvaluatedCall {
        head: src.head,
        positional: values,
        named,
    }))
}

fn unknown_flag(sig: &Signature, name: &str, span: Span) -> LabeledError {
    usage_error(
        "nu::parser::unknown_flag",
        &format!("The `{}` command doesn't have flag `{name}`.", sig.name),
        "unknown flag",
        span,
        Some("Use `--help` to see available flags".into()),
    )
}

#[allow(clippy::too_many_arguments)]
fn flag_value(
    _sig: &Signature,
    flag: &Flag,
    inline: Option<String>,
    args: &[String],
    i: &mut usize,
    src: &Source,
    span: Span,
    ctx: &Context,
) -> Result<Option<J>, LabeledError> {
    let Some(shape) = &flag.arg else {
        // A switch; `--flag=false` turns it off as in Nu.
        return match inline.as_deref() {
            None => Ok(None),
            Some("true") => Ok(Some(bool_value(true, span))),
            Some("false") => Ok(Some(bool_value(false, span))),
            Some(_) => Err(usage_error(
                "nu::parser::parse_mismatch",
                "Parse mismatch: expected bool.",
                "expected bool",
                span,
                None,
            )),
        };
    };
    if let Some(text) = inline {
        return convert(shape, &text, span, ctx).map(Some);
    }
    if *i >= args.len() {
        return Err(usage_error(
            "nu::parser::missing_flag_param",
            "Missing flag argument.",
            &format!("flag missing {} argument", shape.name()),
            span,
            None,
        ));
    }
    let (text, vspan) = (&args[*i], src.args[*i]);
    *i += 1;
    convert(shape, text, vspan, ctx).map(Some)
}

fn looks_numeric(a: &str) -> bool {
    a.len() > 1
        && a[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && a.parse::<f64>().is_ok()
}

fn mismatch(shape: &Shape, span: Span) -> LabeledError {
    let what = shape.name();
    usage_error(
        "nu::parser::parse_mismatch",
        &format!("Parse mismatch: expected {what}."),
        &format!("expected {what}"),
        span,
        None,
    )
}

fn tagged(tag: &str, val: J, span: Span) -> J {
    obj! {tag => obj! {"val" => val, "span" => span.to_value()}}
}

fn bool_value(b: bool, span: Span) -> J {
    tagged("Bool", J::Bool(b), span)
}

/// Converts one argument to a Nu value of `shape`.
pub fn convert(shape: &Shape, text: &str, span: Span, ctx: &Context) -> Result<J, LabeledError> {
    let int = |t: &str| parse_int(t).map(|i| tagged("Int", J::Int(i), span));
    let float = |t: &str| {
        t.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(|f| tagged("Float", J::Float(f), span))
    };
    let string = || tagged("String", J::from(text), span);
    let fail = || mismatch(shape, span);
    match shape {
        Shape::Int => int(text).ok_or_else(fail),
        Shape::Float => float(text).ok_or_else(fail),
        Shape::Number => int(text).or_else(|| float(text)).ok_or_else(fail),
        Shape::String => Ok(string()),
        Shape::Any => Ok(int(text).or_else(|| float(text)).unwrap_or_else(string)),
        Shape::Filepath | Shape::Directory => Ok(tagged(
            "String",
            J::from(expand_path(text, ctx).to_string_lossy().into_owned()),
            span,
        )),
        Shape::GlobPattern => Ok(obj! {"Glob" => obj! {
        "val" => text, "no_expand" => false, "span" => span.to_value()}}),
        Shape::CellPath => cell_path(text, span).ok_or_else(fail),
        Shape::Duration => parse_unit(text, DURATION_UNITS)
            .map(|n| tagged("Duration", J::Int(n), span))
            .ok_or_else(fail),
        Shape::Filesize => parse_unit(text, FILESIZE_UNITS)
            .map(|n| tagged("Filesize", J::Int(n), span))
            .ok_or_else(fail),
        Shape::Boolean => match text {
            "true" => Ok(bool_value(true, span)),
            "false" => Ok(bool_value(false, span)),
            _ => Err(fail()),
        },
        Shape::Binary => Ok(tagged(
            "Binary",
            J::Arr(text.bytes().map(J::from).collect()),
            span,
        )),
        Shape::List(_) | Shape::Record | Shape::Table => {
            let parsed = J::parse(text.as_bytes()).map_err(|_| {
                usage_error(
                    "nu::parser::parse_mismatch",
                    &format!("Parse mismatch: expected {} (as JSON).", shape.name()),
                    &format!("expected {} as JSON", shape.name()),
                    span,
                    None,
                )
            })?;
            let ok = match shape {
                Shape::Record => parsed.as_object().is_some(),
                _ => parsed.as_array().is_some(),
            };
            if !ok {
                return Err(fail());
            }
            Ok(crate::value::from_json(&parsed, span))
        }
        Shape::OneOf(shapes) => shapes
            .iter()
            .find_map(|s| convert(s, text, span, ctx).ok())
            .ok_or_else(fail),
        Shape::Other(name) => Err(usage_error(
            "nu::parser::parse_mismatch",
            &format!("A {name} cannot be passed from a shell command line."),
            &format!("expected {}", shape.name()),
            span,
            Some("This argument needs Nu itself; run the command inside nu.".into()),
        )),
    }
}

fn parse_int(t: &str) -> Option<i64> {
    let (neg, body) = match t.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let body = body.replace('_', "");
    let v = if let Some(h) = body.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()?
    } else if let Some(o) = body.strip_prefix("0o") {
        i64::from_str_radix(o, 8).ok()?
    } else if let Some(b) = body.strip_prefix("0b") {
        i64::from_str_radix(b, 2).ok()?
    } else {
        body.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

const DURATION_UNITS: &[(&str, f64)] = &[
    ("ns", 1.0),
    ("us", 1e3),
    ("µs", 1e3),
    ("ms", 1e6),
    ("sec", 1e9),
    ("min", 60e9),
    ("hr", 3600e9),
    ("day", 86400e9),
    ("wk", 604800e9),
];

const FILESIZE_UNITS: &[(&str, f64)] = &[
    ("b", 1.0),
    ("kb", 1e3),
    ("mb", 1e6),
    ("gb", 1e9),
    ("tb", 1e12),
    ("pb", 1e15),
    ("eb", 1e18),
    ("kib", 1024.0),
    ("mib", 1048576.0),
    ("gib", 1073741824.0),
    ("tib", 1099511627776.0),
    ("pib", 1125899906842624.0),
    ("eib", 1152921504606846976.0),
];

/// `10sec`, `1.5kb`: a number and a unit (case-insensitive) as an integer count.
fn parse_unit(text: &str, units: &[(&str, f64)]) -> Option<i64> {
    let lower = text.to_lowercase();
    let split = lower.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '_'))?;
    let (num, unit) = lower.split_at(split);
    let factor = units.iter().find(|(u, _)| *u == unit)?.1;
    let num = num.replace('_', "");
    if let Ok(i) = num.parse::<i64>() {
        let f = factor as i64;
        if factor.fract() == 0.0 && (factor as i64) as f64 == factor {
            return i.checked_mul(f);
        }
    }
    let n = num.parse::<f64>().ok()? * factor;
    (n.is_finite() && n.abs() < 9.2e18).then_some(n as i64)
}

/// `a.b.0` → a cell path value. Nu 0.115 sends a cell path as its text (`$.a.b.0`, members
/// with `?` when optional); quoted members keep their quotes.
fn cell_path(text: &str, span: Span) -> Option<J> {
    let body = text
        .strip_prefix("$.")
        .or_else(|| text.strip_prefix('$'))
        .unwrap_or(text);
    let parts = if body.is_empty() {
        Vec::new()
    } else {
        split_path(body)?
    };
    let mut path = String::from("$");
    for p in parts {
        path.push('.');
        path.push_str(&p);
    }
    Some(obj! {"CellPath" => obj! {"val" => path, "span" => span.to_value()}})
}

/// Splits on dots outside double quotes; every part must be non-empty.
fn split_path(body: &str) -> Option<Vec<String>> {
    let mut parts = vec![String::new()];
    let mut quoted = false;
    for c in body.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                parts.last_mut()?.push(c);
            }
            '.' if !quoted => parts.push(String::new()),
            c => parts.last_mut()?.push(c),
        }
    }
    if quoted || parts.iter().any(String::is_empty) {
        return None;
    }
    Some(parts)
}

/// `~` and relative paths resolved as Nu's `expand_path_with` does (lexically).
pub fn expand_path(text: &str, ctx: &Context) -> PathBuf {
    let p = if text == "~" || text.starts_with("~/") {
        match &ctx.home {
            Some(h) => h.join(text.trim_start_matches('~').trim_start_matches('/')),
            None => PathBuf::from(text),
        }
    } else {
        PathBuf::from(text)
    };
    let abs = if p.is_absolute() { p } else { ctx.cwd.join(p) };
    normalize(&abs)
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INC_SIG: &str = r#"{"sig":{"name":"inc","description":"Increment a value or version. Optionally use the column of a table.","extra_description":"","search_terms":[],"required_positional":[],"optional_positional":[{"name":"cell_path","desc":"Cell path to update.","shape":"CellPath","completion":null,"var_id":null,"default_value":null}],"rest_positional":null,"named":[{"long":"help","short":"h","arg":null,"required":false,"desc":"Display the help message for this command","completion":null,"var_id":null,"default_value":null},{"long":"major","short":"M","arg":null,"required":false,"desc":"increment the major version (eg 1.2.1 -> 2.0.0)","completion":null,"var_id":null,"default_value":null},{"long":"minor","short":"m","arg":null,"required":false,"desc":"increment the minor version (eg 1.2.1 -> 1.3.0)","completion":null,"var_id":null,"default_value":null},{"long":"patch","short":"p","arg":null,"required":false,"desc":"increment the patch version (eg 1.2.1 -> 1.2.2)","completion":null,"var_id":null,"default_value":null}],"input_output_types":[],"allow_variants_without_examples":false},"examples":[]}"#;

    fn sig(text: &str) -> Signature {
        Signature::from_value(&J::parse(text.as_bytes()).unwrap()).unwrap()
    }

    fn run(s: &Signature, args: &[&str]) -> Result<Parsed, LabeledError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let src = Source::new(&s.name, &args);
        parse(
            s,
            &src,
            &args,
            &Context {
                cwd: "/w".into(),
                home: Some("/h".into()),
            },
        )
    }

    #[test]
    fn switches_long_and_short_become_named_nulls() {
        let s = sig(INC_SIG);
        let Ok(Parsed::Call(c)) = run(&s, &["--minor"]) else {
            panic!()
        };
        assert_eq!(c.head, Span::new(0, 3));
        assert_eq!(c.named, vec![("minor".to_owned(), Span::new(4, 11), None)]);
        let Ok(Parsed::Call(c)) = run(&s, &["-M"]) else {
            panic!()
        };
        assert_eq!(c.named[0].0, "major");
        assert_eq!(run(&s, &["-h"]), Ok(Parsed::Help));
        assert_eq!(run(&s, &["--help"]), Ok(Parsed::Help));
    }

    #[test]
    fn cell_path_positional() {
        let s = sig(INC_SIG);
        let Ok(Parsed::Call(c)) = run(&s, &["v", "--major"]) else {
            panic!()
        };
        assert_eq!(
            c.positional[0].to_json(),
            r#"{"CellPath":{"val":"$.v","span":{"start":4,"end":5}}}"#
        );
    }

    #[test]
    fn usage_errors_in_nus_words() {
        let s = sig(INC_SIG);
        let e = run(&s, &["--foo"]).unwrap_err();
        assert_eq!(e.msg, "The `inc` command doesn't have flag `foo`.");
        assert_eq!(e.code.as_deref(), Some("nu::parser::unknown_flag"));
        let e = run(&s, &["a", "b"]).unwrap_err();
        assert_eq!(e.msg, "Extra positional argument.");
        assert_eq!(e.labels[0].1, Some(Span::new(6, 7)));
        assert_eq!(
            e.help.as_deref(),
            Some("Usage: inc {flags} (cell_path) . Use `--help` for more information.")
        );
    }

    #[test]
    fn shapes() {
        let ctx = Context {
            cwd: "/w/d".into(),
            home: Some("/h".into()),
        };
        let sp = Span::new(0, 1);
        let c = |shape: Shape, t: &str| convert(&shape, t, sp, &ctx).map(|v| v.to_json());
        assert_eq!(
            c(Shape::Int, "-5").unwrap(),
            r#"{"Int":{"val":-5,"span":{"start":0,"end":1}}}"#
        );
        assert!(c(Shape::Int, "x").is_err());
        assert_eq!(
            c(Shape::Any, "1.5").unwrap(),
            r#"{"Float":{"val":1.5,"span":{"start":0,"end":1}}}"#
        );
        assert_eq!(
            c(Shape::Filepath, "../x").unwrap(),
            r#"{"String":{"val":"/w/x","span":{"start":0,"end":1}}}"#
        );
        assert_eq!(
            c(Shape::Filepath, "~/y").unwrap(),
            r#"{"String":{"val":"/h/y","span":{"start":0,"end":1}}}"#
        );
        assert_eq!(
            c(Shape::Duration, "2sec").unwrap(),
            r#"{"Duration":{"val":2000000000,"span":{"start":0,"end":1}}}"#
        );
        assert_eq!(
            c(Shape::Filesize, "1KiB").unwrap(),
            r#"{"Filesize":{"val":1024,"span":{"start":0,"end":1}}}"#
        );
        assert_eq!(
            c(Shape::Record, r#"{"a":1}"#).unwrap(),
            r#"{"Record":{"val":{"a":{"Int":{"val":1,"span":{"start":0,"end":1}}}},"span":{"start":0,"end":1}}}"#
        );
        assert!(c(Shape::Other("Closure".into()), "x").is_err());
    }

    #[test]
    fn help_has_usage_flags_and_parameters() {
        let h = sig(INC_SIG).help();
        assert!(h.starts_with("Increment a value or version."), "{h}");
        assert!(h.contains("Usage:\n  > inc {flags} (cell_path) \n"), "{h}");
        assert!(
            h.contains("  -M, --major: increment the major version"),
            "{h}"
        );
        assert!(
            h.contains("  cell_path <cell-path>: Cell path to update. (optional)"),
            "{h}"
        );
    }
}
