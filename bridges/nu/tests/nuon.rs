//! NUON in and out, compared with the real nu 0.115.1: `from nuon` of a table of
//! documents (read by the bridge's parser, printed as `to json` and `to nuon`), and
//! `--nu-input nuon` / `--nu-output nuon` through the real plugins.

mod common;

use common::{bridge, nu, peer, req};
use ng_bridge_nu::msg::Span;
use ng_bridge_nu::{nuon, value};
use std::process::Command;

/// Documents nu reads; the bridge must read each to the same value.
const READ: &[&str] = &[
    "",
    "# only a comment\n",
    "{a: 1, b: \"x\", c: [1 2 3]}",
    "{\"a b\": 1, c: null, 'd': true, `e f`: false}",
    "{a:1}",
    "{a: 1 b: 2}",
    "{a: 1,\n b: 2,}",
    "{a-b: 1, c.d: 2, 3: 4}",
    "{\"a\":1,\"b\":[1,2]}",
    "[[a b]; [1 2] [3 4]]",
    "[[a, 'b c']; [1, 2], [3, 4]]",
    "[[a]; ]",
    "[[a b]\n[1 2]]",
    "{a: [[x y]; [1 {z: 2}]]}",
    "[]",
    "{}",
    "[1, 2,\n3] # trailing comment",
    "[,1,,2,]",
    "[a b-c foo.bar ./x 1.2.3 -x --y a:b a$b é 1a 1sec2 `back tick` TRUE nullx _]",
    "[2020-13-01 2020-01-01T12:00]",
    "'single \\n'",
    "r#'raw \\n \"'#",
    "[r##'a'#b'## r#'x'# y]",
    "\"\\u{1}\\u{7f}\\u{80}\\u{2028}\\u{0}\\u{1f}\"",
    "\"esc \\\" \\\\ \\/ \\( \\) \\{ \\} \\$ \\# \\a\\b\\e\\f\\n\\r\\t \\u{41}\\u{1F600}\"",
    "\"line\nbreak\ttab\"",
    "true",
    "null",
    "-5",
    "+5",
    "-0",
    "1_000",
    "[_1 -_1 1_0.5]",
    "0x1f",
    "0o17",
    "0b101",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "1.0",
    "1e3",
    "3.0e-2",
    "[.5 5. 1E3 1e20 1e-7 -0.0 123456789.123]",
    "1e400",
    "[inf -inf NaN nan Inf infinity]",
    "[1ns 1us 1µs 1ms 1sec 1min 1hr 1day 1wk -1sec 1.5min 1.5ns 1.5e3sec 1.0sec]",
    "[1b 5B 1kb 1KB 1kB 1Kb 1mb 1gb 1tb 1pb 1eb 1Eb 1e3b 1kib 1KiB 5Kib 1mib 1gib 1tib 1pib 1.5kb 1.5KiB -1kb]",
    "[2020-01-01 2020-01-01T12:00:00 2020-01-01t12:00:00z 2020-01-01T12:00:00+02:00]",
    "[2024-01-01T00:00:00.5Z 2024-01-01T00:00:00.1234Z 2020-01-01T12:00:00.123456789+05:30]",
    "[2024-02-29 2000-02-29 1999-12-31T23:59:59-00:00]",
    "0x[ff 00 1a]",
    "[0x[f] 0x[fff] 0x[ff, 00] 0x[ff 0] 0x[] 0b[1010] 0b[1] 0o[17] 0o[377]]",
    "{nested: {deeper: {deepest: [1 [2 [3]]]}}}",
    "[{a: 1, b: 2} {a: 3, b: 4}]",
    "[{a: 1, b: 2} {b: 3, a: 4}]",
    "[{a: 1} {b: 2}]",
    "[1 \"a\" {b: c}]",
    "[\"\" \"1\" \"true\" \"null\" \"&&\" \"a b\" \"x?\" \"a=b\" \"a!b\" \"a.b\" \"-a\" \"+inf\" \"-nan\" \"٣\"]",
    "{\"\": 1, \"a:b\": 2, \"1a\": 3, \"a.b\": 4, \"a-b\": 5, \"-a\": 6}",
];

/// Documents nu refuses; the bridge refuses them too (or reads a kind of value it leaves
/// to nu: ranges, cell paths).
const REFUSED: &[&str] = &[
    "abc",
    "1 2",
    "`top`",
    "[1",
    "{a: 1",
    "{a: 1, a: 2}",
    "{a: 1; b: 2}",
    "[[a b]; [1]]",
    "[[a b]; [1 2 3]]",
    "[[a b]; [1 2] x]",
    "[[1 2]; [3 4]]",
    "\"bad \\q\"",
    "\"\\u0041\"",
    "2020-13-01",
    "2020-02-30",
    "2020-01-01T25:00:00Z",
    "[a(b)]",
    "{r#'k'#: 1}",
    "[0x]",
    "[1a2b]",
    "[1.5.sec]",
    "0X1F",
    "$nothing",
];

/// Runs `script` in nu with `$env.DOCS` holding `docs` (a JSON list); returns stdout.
fn nu_over(docs: &[&str], script: &str) -> String {
    let out = Command::new(peer("nu"))
        .arg("--no-config-file")
        .arg("-c")
        .arg(script)
        .env("DOCS", serde_json::to_string(docs).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nu: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What nu makes of each document with `conversion` (`to json` or `to nuon`): the text,
/// or `None` when `from nuon` refused it.
fn nu_reads(docs: &[&str], conversion: &str) -> Vec<Option<String>> {
    let out = nu_over(
        docs,
        &format!(
            "$env.DOCS | from json | each {{|d| try {{ {{ok: ($d | from nuon | {conversion})}} }} catch {{ {{ok: null}} }} }} | to json -r"
        ),
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r["ok"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn nuon_documents_read_as_nu_reads_them() {
    let json = nu_reads(READ, "to json");
    let nuon_out = nu_reads(READ, "to nuon");
    for ((doc, want_json), want_nuon) in READ.iter().zip(&json).zip(&nuon_out) {
        let want_json = want_json
            .as_ref()
            .unwrap_or_else(|| panic!("nu refused {doc:?}"));
        let v = nuon::parse(doc, Span::default())
            .unwrap_or_else(|e| panic!("the bridge refused {doc:?}: {e}"));
        let plain = value::to_plain(&v).unwrap();
        assert_eq!(&value::json_text(&plain), want_json, "to json of {doc:?}");
        assert_eq!(
            Some(value::nuon_text(&v).unwrap()),
            want_nuon.clone(),
            "to nuon of {doc:?}"
        );
    }
}

#[test]
fn nuon_documents_nu_refuses_are_refused() {
    let json = nu_reads(REFUSED, "to json");
    for (doc, got) in REFUSED.iter().zip(&json) {
        assert_eq!(got, &None, "nu read {doc:?}");
        assert!(
            nuon::parse(doc, Span::default()).is_err(),
            "the bridge read {doc:?}"
        );
    }
}

#[test]
fn nuon_input_and_output_through_inc_match_nu() {
    let inc = peer("nu_plugin_inc");
    let (mut d, _t) = bridge(&[&inc], "{}");
    // The plugin reads every kind of value from the bridge and sends it back.
    let doc = "{v: '1.2.3', n: 1, d: 1.5sec, f: 1kb, t: 2020-01-01T12:00:00.5+02:00, b: 0x[ff 00], l: [[a b]; [x 2]], e: null, g: 2.5}";
    for (args, conversion) in [
        (&["v", "--major", "--nu-input", "nuon"][..], "to json"),
        (
            &["v", "--major", "--nu-input", "nuon", "--nu-output", "nuon"][..],
            "to nuon",
        ),
        (&["n", "--nu-input=nuon", "--nu-output=json"][..], "to json"),
    ] {
        let field = args[0];
        let flag = if args.contains(&"--major") {
            " --major"
        } else {
            ""
        };
        let (want, werr, wcode) = nu(
            &inc,
            &format!("{doc} | inc {field}{flag} | {conversion}"),
            None,
        );
        assert_eq!(wcode, 0, "nu: {werr}");
        let o = d.run(&req("inc", args, doc.as_bytes())).unwrap();
        assert_eq!(
            (o.stdout_str(), o.code),
            (want, 0),
            "inc {args:?}: {}",
            o.stderr_str()
        );
    }
    // NUON that nu refuses is refused before the plugin sees it.
    let o = d
        .run(&req("inc", &["--nu-input", "nuon"], b"{a: 1, a: 2}"))
        .unwrap();
    assert_eq!(o.code, 1);
    assert!(
        o.stderr_str()
            .contains("stdin is not NUON: line 1, column 8"),
        "{}",
        o.stderr_str()
    );
}

#[test]
fn nuon_output_of_formats_matches_to_nuon() {
    let formats = peer("nu_plugin_formats");
    let dir = tempfile::tempdir().unwrap();
    let files = common::FORMAT_SAMPLES;
    let (mut d, _t) = bridge(&[&formats], "{}");
    for (cmd, name, text) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let (want, werr, wcode) = nu(
            &formats,
            &format!("open --raw {} | {cmd} | to nuon", path.display()),
            None,
        );
        assert_eq!(wcode, 0, "nu: {werr}");
        let mut words = cmd.split(' ');
        let first = words.next().unwrap();
        let mut args: Vec<&str> = words.collect();
        args.extend(["--nu-output", "nuon"]);
        let o = d.run(&req(first, &args, text.as_bytes())).unwrap();
        assert_eq!(
            (o.stdout_str(), o.code),
            (want, 0),
            "{cmd}: {}",
            o.stderr_str()
        );
    }
}

#[test]
fn nuon_through_to_plist_and_back_matches_nu() {
    let formats = peer("nu_plugin_formats");
    let (mut d, _t) = bridge(&[&formats], "{}");
    let doc = "{a: 1, b: [1 2], c: 0x[01ff], d: 'x y', e: 2.5, f: true, g: 2020-01-01T12:00:00Z}";
    let (want, werr, wcode) = nu(&formats, &format!("{doc} | to plist"), None);
    assert_eq!(wcode, 0, "nu: {werr}");
    let o = d
        .run(&req("to", &["plist", "--nu-input", "nuon"], doc.as_bytes()))
        .unwrap();
    assert_eq!(
        (o.stdout_str(), o.code),
        (want.clone(), 0),
        "{}",
        o.stderr_str()
    );
    let dir = tempfile::tempdir().unwrap();
    let plist = dir.path().join("a.plist");
    std::fs::write(&plist, &want).unwrap();
    // Dates come back from the plugin as `...Z`; nu writes them `+00:00`.
    for conversion in ["nuon", "json"] {
        let (back, werr, wcode) = nu(
            &formats,
            &format!(
                "open --raw {} | from plist | to {conversion}",
                plist.display()
            ),
            None,
        );
        assert_eq!(wcode, 0, "nu: {werr}");
        let o = d
            .run(&req(
                "from",
                &["plist", "--nu-output", conversion],
                want.as_bytes(),
            ))
            .unwrap();
        assert_eq!((o.stdout_str(), o.code), (back, 0), "{}", o.stderr_str());
    }
}
