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

#[test]
fn a_plugin_that_ignores_flow_control_fails_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let p = fake(dir.path(), "flood");
    let (mut d, _t) = bridge(&[&p], "{}");
    // The client reads nothing until the bridge has given up on the plugin (and killed
    // it): the session's output blocks, the plugin's unacknowledged items pile up past the
    // cap.
    let id = d.start(&req("fake", &["--nu-input", "none"], b"")).unwrap();
    let running = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.windows(20).any(|w| w == b"nu_plugin_fake_flood"))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while running() {
        assert!(
            std::time::Instant::now() < deadline,
            "the flooding plugin is still running"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = d.finish(id).unwrap();
    assert_eq!(o.code, 1, "{}", o.stderr_str());
    assert!(
        o.stderr_str().contains(
            "sent more than 4096 messages to one call without waiting for acknowledgements"
        ),
        "{}",
        o.stderr_str()
    );
    let printed = o.stdout.iter().filter(|&&b| b == b'\n').count();
    assert!((4096..20000).contains(&printed), "{printed} lines");
}

#[test]
fn engine_calls_are_answered_from_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let p = fake(dir.path(), "ask");
    let (mut d, _t) = bridge(&[&p], r#"{"plugin_config": {"level": 3}}"#);
    let r = req("fake", &["--nu-output", "json"], b"")
        .env("NU_FAKE", "from the client")
        .cwd(dir.path());
    let o = d.run(&r).unwrap();
    assert_eq!(o.code, 0, "{}", o.stderr_str());
    let answers: Vec<String> = serde_json::from_str(&o.stdout_str()).unwrap();
    let cwd = dir.path().to_string_lossy().into_owned();
    assert!(
        answers[0].contains(&format!(
            r#""val":{}"#,
            serde_json::to_string(&cwd).unwrap()
        )),
        "{}",
        answers[0]
    );
    assert!(
        answers[1].contains(r#""val":"from the client""#),
        "{}",
        answers[1]
    );
    assert!(
        answers[2].contains(r#"{"Record":{"val":{"level":{"Int":{"val":3"#),
        "{}",
        answers[2]
    );
    // The synthesised command line is `fake` (the bridge's own flags are taken out).
    assert!(
        answers[3].contains(r#""Binary":{"val":[]"#),
        "{}",
        answers[3]
    );
    assert_eq!(answers[4], r#"{"PipelineData":"Empty"}"#);
    assert!(answers[5].contains(r#""val":"yes""#), "{}", answers[5]);
    for a in &answers[6..] {
        assert!(a.starts_with(r#"{"Error":{"msg":"#), "{a}");
    }
    assert!(
        answers[8].contains("`FindDecl` needs a Nu engine"),
        "{}",
        answers[8]
    );
}

#[test]
fn ctrl_c_becomes_signal_interrupt() {
    let dir = tempfile::tempdir().unwrap();
    let p = fake(dir.path(), "wait");
    let (mut d, _t) = bridge(&[&p], "{}");
    let id = d.start(&req("fake", &[], b"")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    d.interrupt(id, "SIGINT").unwrap();
    let o = d.finish(id).unwrap();
    assert_eq!(o.code, 1);
    assert!(
        o.stderr_str().contains("got Interrupt"),
        "{}",
        o.stderr_str()
    );
    // The next call is preceded by `Signal Reset`.
    let id = d.start(&req("fake", &[], b"")).unwrap();
    let o = d.finish(id).unwrap();
    assert!(o.stderr_str().contains("got Reset"), "{}", o.stderr_str());
}

#[test]
fn a_directory_skips_plugins_that_cannot_start() {
    let dir = tempfile::tempdir().unwrap();
    fake(dir.path(), "old");
    fake(dir.path(), "stream");
    let (mut d, _t) = bridge(&[dir.path()], "{}");
    let o = d.run(&req("fake", &[], b"")).unwrap();
    assert_eq!(o.code, 0, "{}", o.stderr_str());
    assert_eq!(o.stdout_str().lines().count(), 1000);
}
