//! Command lines to argument objects, against a tool's JSON Schema, and `--help` from the
//! schema.
//!
//! `--name value` (or `--name=value`) sets a property with the schema's type: integer,
//! number, boolean (`--flag`, `--flag=false`, `--no-flag`), string, arrays by repeating the
//! option, objects as JSON. `--json '{…}'` gives the whole object (options after it
//! override its members); `-` (or no arguments with stdin not a terminal) reads the object
//! from stdin.

use serde_json::{Map, Number, Value};

/// What a command line asks for.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// Show the help.
    Help,
    /// Call with these arguments; `stdin` says the object (or its base) comes from stdin.
    Call {
        /// The arguments from the command line.
        args: Map<String, Value>,
        /// Read a JSON object from stdin first.
        stdin: bool,
    },
}

/// A usage error (exit 2).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

fn prop_type(p: &Value) -> Option<&str> {
    match p.get("type") {
        Some(Value::String(s)) => Some(s.as_str()),
        // ["string", "null"] and the like: the first non-null type.
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

/// Parses `argv` against `schema` (required properties are checked by [`check_required`]
/// once the object is complete, after stdin).
pub fn parse(schema: &Value, argv: &[String]) -> Result<Parsed, Usage> {
    let props = properties(schema);
    let mut args = Map::new();
    let mut stdin = false;
    let mut i = 0;
    while i < argv.len() {
        let a = &argv[i];
        i += 1;
        if a == "--help" || a == "-h" {
            return Ok(Parsed::Help);
        }
        if a == "-" {
            stdin = true;
            continue;
        }
        let Some(opt) = a.strip_prefix("--") else {
            return Err(Usage(format!(
                "unexpected argument {a:?} (arguments are --name value; see --help)"
            )));
        };
        let (name, inline) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (opt, None),
        };
        if name == "json" {
            let text = match inline {
                Some(v) => v,
                None => next(argv, &mut i, "--json")?,
            };
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(m)) => args.extend(m),
                Ok(_) => return Err(Usage("--json: expected a JSON object".into())),
                Err(e) => return Err(Usage(format!("--json: not JSON: {e}"))),
            }
            continue;
        }
        let (key, prop, negated) = match lookup(props, name) {
            Some((k, p)) => (k, p, false),
            None => match name.strip_prefix("no-").and_then(|n| lookup(props, n)) {
                Some((k, p)) if prop_type(p) == Some("boolean") && inline.is_none() => (k, p, true),
                _ => return Err(Usage(format!("unknown option --{name} (see --help)"))),
            },
        };
        let ty = prop_type(prop);
        if ty == Some("boolean") {
            let v = if negated {
                false
            } else {
                match inline.as_deref() {
                    None | Some("true") => true,
                    Some("false") => false,
                    Some(other) => {
                        return Err(Usage(format!(
                            "--{name}: expected true or false, not {other:?}"
                        )))
                    }
                }
            };
            args.insert(key, Value::Bool(v));
            continue;
        }
        let text = match inline {
            Some(v) => v,
            None => next(argv, &mut i, &format!("--{name}"))?,
        };
        if ty == Some("array") {
            let item = prop.get("items").unwrap_or(&Value::Null);
            let v = typed(item, &text, name)?;
            match args.entry(key).or_insert_with(|| Value::Array(Vec::new())) {
                Value::Array(a) => a.push(v),
                slot => *slot = Value::Array(vec![v]),
            }
        } else {
            let v = typed(prop, &text, name)?;
            args.insert(key, v);
        }
    }
    Ok(Parsed::Call { args, stdin })
}

/// Checks that every required property is present.
pub fn check_required(schema: &Value, args: &Map<String, Value>) -> Result<(), Usage> {
    let missing: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .filter(|k| !args.contains_key(*k))
                .collect()
        })
        .unwrap_or_default();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Usage(format!(
            "missing required {} (see --help)",
            missing
                .iter()
                .map(|m| format!("--{m}"))
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

fn next(argv: &[String], i: &mut usize, what: &str) -> Result<String, Usage> {
    let v = argv
        .get(*i)
        .cloned()
        .ok_or_else(|| Usage(format!("{what} needs a value")))?;
    *i += 1;
    Ok(v)
}

/// Finds a property by its name, also with `-` and `_` swapped.
fn lookup<'a>(props: Option<&'a Map<String, Value>>, name: &str) -> Option<(String, &'a Value)> {
    let props = props?;
    if let Some(p) = props.get(name) {
        return Some((name.to_owned(), p));
    }
    props
        .iter()
        .find(|(k, _)| k.replace('_', "-") == name.replace('_', "-"))
        .map(|(k, p)| (k.clone(), p))
}

fn typed(prop: &Value, text: &str, name: &str) -> Result<Value, Usage> {
    let v = match prop_type(prop) {
        Some("integer") => text
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| Usage(format!("--{name}: expected an integer, not {text:?}")))?,
        Some("number") => match text.parse::<i64>() {
            Ok(n) => Value::from(n),
            Err(_) => text
                .parse::<f64>()
                .ok()
                .and_then(Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| Usage(format!("--{name}: expected a number, not {text:?}")))?,
        },
        Some("boolean") => match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => {
                return Err(Usage(format!(
                    "--{name}: expected true or false, not {text:?}"
                )))
            }
        },
        Some("string") => Value::String(text.to_owned()),
        Some("object") | Some("array") => match serde_json::from_str::<Value>(text) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
            _ => {
                return Err(Usage(format!(
                    "--{name}: expected a JSON {}, not {text:?}",
                    prop_type(prop).unwrap_or("value")
                )))
            }
        },
        Some("null") => Value::Null,
        // No single type: JSON when it parses, else the text as a string.
        _ => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())),
    };
    if let Some(allowed) = prop.get("enum").and_then(Value::as_array) {
        if !allowed.contains(&v) {
            let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
            return Err(Usage(format!(
                "--{name}: {v} is not one of {}",
                list.join(", ")
            )));
        }
    }
    Ok(v)
}

/// The `--help` text of a command.
pub fn help(command: &str, description: &str, schema: &Value) -> String {
    let mut out = format!("Usage: {command} [OPTIONS]\n       {command} --json '{{...}}'\n       {command} - < args.json\n");
    if !description.is_empty() {
        out.push('\n');
        out.push_str(description.trim_end());
        out.push('\n');
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    out.push_str("\nOptions:\n");
    let mut rows = Vec::new();
    if let Some(props) = properties(schema) {
        for (k, p) in props {
            let ty = prop_type(p);
            let left = match ty {
                Some("boolean") => format!("--{k}"),
                Some("array") => format!(
                    "--{k} {}...",
                    prop_type(p.get("items").unwrap_or(&Value::Null))
                        .unwrap_or("VALUE")
                        .to_uppercase()
                ),
                Some("object") => format!("--{k} JSON"),
                Some(t) => format!("--{k} {}", t.to_uppercase()),
                None => format!("--{k} VALUE"),
            };
            let mut right = p
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            if let Some(e) = p.get("enum").and_then(Value::as_array) {
                let list: Vec<String> = e.iter().map(Value::to_string).collect();
                right.push_str(&format!(" [one of {}]", list.join(", ")));
            }
            if let Some(d) = p.get("default") {
                right.push_str(&format!(" [default: {d}]"));
            }
            if required.contains(&k.as_str()) {
                right.push_str(" (required)");
            }
            rows.push((left, right.trim().to_owned()));
        }
    }
    rows.push((
        "--json OBJECT".into(),
        "all arguments as one JSON object".into(),
    ));
    rows.push(("-".into(), "read the arguments object from stdin".into()));
    rows.push(("-h, --help".into(), "show this help".into()));
    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0).min(32);
    for (l, r) in rows {
        out.push_str(&format!("  {l:width$}  {r}\n").replace(" \n", "\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "x": {"type": "number"}, "v": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "opts": {"type": "object"}, "max_len": {"type": "integer"},
            "kind": {"type": "string", "enum": ["a", "b"]}},
            "required": ["n"]})
    }

    fn call(a: &[&str]) -> Result<Map<String, Value>, Usage> {
        match parse(&schema(), &argv(a))? {
            Parsed::Call { args, .. } => check_required(&schema(), &args).map(|_| args),
            Parsed::Help => panic!("help"),
        }
    }

    #[test]
    fn typed_options() {
        let a = call(&[
            "--n",
            "5",
            "--x=1.5",
            "--v",
            "--tags",
            "a",
            "--tags",
            "b",
            "--opts",
            "{\"k\":1}",
            "--max-len",
            "3",
            "--kind",
            "b",
        ])
        .unwrap();
        assert_eq!(
            Value::Object(a),
            json!({"n": 5, "x": 1.5, "v": true, "tags": ["a", "b"], "opts": {"k": 1}, "max_len": 3, "kind": "b"})
        );
        assert_eq!(call(&["--n", "1", "--no-v"]).unwrap()["v"], json!(false));
        assert_eq!(call(&["--n", "1", "--x", "2"]).unwrap()["x"], json!(2));
    }

    #[test]
    fn json_and_stdin() {
        assert_eq!(
            Value::Object(call(&["--json", "{\"n\": 1, \"extra\": true}", "--n", "2"]).unwrap()),
            json!({"n": 2, "extra": true})
        );
        assert_eq!(
            parse(&schema(), &argv(&["-"])).unwrap(),
            Parsed::Call {
                args: Map::new(),
                stdin: true
            }
        );
        assert_eq!(
            parse(&schema(), &argv(&["--n", "1", "-h"])).unwrap(),
            Parsed::Help
        );
    }

    #[test]
    fn usage_errors() {
        for (a, msg) in [
            (&["--n", "x"][..], "--n: expected an integer, not \"x\""),
            (&[], "missing required --n (see --help)"),
            (
                &["--n", "1", "--bogus", "1"],
                "unknown option --bogus (see --help)",
            ),
            (&["--n"], "--n needs a value"),
            (
                &["--n", "1", "pos"],
                "unexpected argument \"pos\" (arguments are --name value; see --help)",
            ),
            (
                &["--n", "1", "--kind", "c"],
                "--kind: \"c\" is not one of \"a\", \"b\"",
            ),
            (&["--json", "[1]"], "--json: expected a JSON object"),
            (
                &["--n", "1", "--opts", "3"],
                "--opts: expected a JSON object, not \"3\"",
            ),
            (
                &["--n", "1", "--v=maybe"],
                "--v: expected true or false, not \"maybe\"",
            ),
        ] {
            assert_eq!(call(a).unwrap_err().0, msg, "{a:?}");
        }
    }

    #[test]
    fn help_from_schema() {
        let s = json!({"type": "object", "properties": {"n": {"type": "integer", "description": "the number"}}, "required": ["n"]});
        assert_eq!(
            help("demo_inc", "Increment an integer", &s),
            "Usage: demo_inc [OPTIONS]\n       demo_inc --json '{...}'\n       demo_inc - < args.json\n\nIncrement an integer\n\nOptions:\n  --n INTEGER    the number (required)\n  --json OBJECT  all arguments as one JSON object\n  -              read the arguments object from stdin\n  -h, --help     show this help\n"
        );
    }
}
