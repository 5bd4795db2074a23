//! Faults a real plugin cannot produce, with a fake plugin (`fixtures/nu_plugin_fake.py`):
//! garbage instead of a message, an oversized message, an incompatible version, an
//! engine call that needs Nu; a list stream.

mod common;

use common::{bridge, fake, req};

#[test]
fn garbage_fails_the_call_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let p = fake(dir.path(), "garbage");
    let (mut d, _t) = bridge(&[&p], "{}");
    let o = d.run(&req("fake", &[], b"")).unwrap();
    assert_eq!(o.code, 1);
    assert!(
        o.stderr_str().contains("not a json message"),
        "{}",
        o.stderr_str()
    );
    // The next call starts a new plugin (which breaks the same way, but answers hello).
    let o = d.run(&req("fake", &[], b"")).unwrap();
    assert_eq!(o.code, 1);
}

#[test]
fn an_oversized_message_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = fake(dir.path(), "oversized");
    let (mut d, _t) = bridge(&[&p], r#"{"max_message_mb": 1}"#);
    let o = d.run(&req("fake", &[], b"")).unwrap();
    assert_eq!(o.code, 1);
    assert!(
        o.stderr_str().contains("larger than 1048576 bytes"),
        "{}",
        o.stderr_str()
    );
}

#[test]
fn an_incompatible_version_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let p = fake(dir.path(), "old");
    let (d, t) = bridge(&[&p], "{}");
    let why = d.hello()["error"].as_str().unwrap_or("").to_owned();
    assert!(
        why.contains("0.114.0") && why.contains("not compatible"),
        "{why}"
    );
    assert_eq!(t.join().unwrap(), 78);
}

#[test]
fn engine_calls_that_need_nu_get_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let p = fake(dir.path(), "engine");
    let (mut d, _t) = bridge(&[&p], "{}");
    let o = d.run(&req("fake", &[], b"")).unwrap();
    assert_eq!(o.code, 1);
    assert!(
        o.stderr_str()
            .contains("engine said: `EvalClosure` needs a Nu engine"),
        "{}",
        o.stderr_str()
    );
}

#[test]
fn a_list_stream_is_printed_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let p = fake(dir.path(), "stream");
    let (mut d, _t) = bridge(&[&p], "{}");
    let o = d.run(&req("fake", &[], b"")).unwrap();
    assert_eq!(o.code, 0, "{}", o.stderr_str());
    let lines: Vec<&str> = o
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| std::str::from_utf8(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1000);
    assert_eq!(lines[999], "999");
}
