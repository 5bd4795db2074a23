//! The bridge on its own: questions answered from piped stdin, Ctrl-C and prompt timeouts
//! with the SIGTERM/SIGKILL escalation, a failed question, the spare process, concurrent
//! sessions, and refused configurations.

mod common;

use common::{log_lines, pid_of, Driver, Spec, World};
use serde_json::{json, Value};
use std::path::Path;

#[test]
fn hello_lists_every_command_and_runs_sessions_at_once() {
    let w = World::new();
    let mut d = Driver::start(&w.config(json!({"max_sessions": 8})), &[]);
    let cmds: Vec<&str> = d.hello["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for c in [
        "quiz",
        "demo",
        "deploy",
        "deploy-sh",
        "hello",
        "legacy",
        "future",
        "kv",
    ] {
        assert!(cmds.contains(&c), "{c} in {cmds:?}");
    }
    assert!(d.hello["features"]
        .as_array()
        .unwrap()
        .contains(&json!("mux")));
    let specs: Vec<Spec> = (0..4)
        .map(|i| Spec::new(&w, "hello", &[&format!("n{i}")]))
        .collect();
    let outs = d.run_all(specs);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(
            (o.out(), o.code),
            (format!("hello n{i}\n"), 0),
            "{}",
            o.err()
        );
    }
}

#[test]
fn questions_are_answered_from_piped_stdin() {
    let w = World::new();
    let mut d = Driver::start(&w.config(json!({})), &[]);
    let o = d.run(Spec::new(&w, "quiz", &[]).stdin(b"Bob\nn\n3\n2,3\n"));
    assert_eq!(o.code, 0, "{}", o.err());
    let v: Value = serde_json::from_str(o.out().trim()).unwrap();
    assert_eq!(
        v,
        json!({"name": "Bob", "loud": false, "env": "production", "regions": ["eu", "ap"]})
    );
    assert!(o.err().contains("? Name: [world] Bob\n"), "{}", o.err());
    assert!(o.err().contains("  3) production\n"), "{}", o.err());
    // The seed's plugin, answered.
    let o = d.run(Spec::new(&w, "deploy", &[]).stdin(b"production\ny\n"));
    assert_eq!(
        (o.out().as_str(), o.code),
        ("Deployed to production\n", 0),
        "{}",
        o.err()
    );
    // A validator re-asks.
    let o = d.run(Spec::new(&w, "quiz", &[]).stdin(b"   \nAnn\n\n\n\n"));
    assert!(o.err().contains("✘ Input cannot be empty"), "{}", o.err());
    assert!(o.out().contains("\"name\": \"Ann\""), "{}", o.out());
}

#[test]
fn ctrl_c_during_a_prompt_cancels_then_terminates() {
    let w = World::new();
    let mut d = Driver::start(&w.config(json!({})), &[]);
    let mut spec = Spec::new(&w, "stubborn", &[]);
    spec.interrupt_on = Some("? Waiting: ".into());
    spec.hold_stdin = true;
    let o = d.run(spec);
    let err = o.err();
    assert!(
        err.contains("stubborn: received {\"type\":\"cancel\",\"reason\":\"user_interrupt\"}\n"),
        "{err}"
    );
    // The plugin ignored the cancel; SIGTERM came 5 s later and it exited 42.
    assert!(err.contains("stubborn: got SIGTERM\n"), "{err}");
    assert_eq!(o.code, 42, "{err}");
}

#[test]
fn a_plugin_ignoring_sigterm_is_killed() {
    let w = World::new();
    let mut d = Driver::start(&w.config(json!({})), &[]);
    let mut spec = Spec::new(&w, "stubborn", &["ignore-term"]);
    spec.interrupt_on = Some("? Waiting: ".into());
    spec.hold_stdin = true;
    let o = d.run(spec);
    assert!(o.err().contains("stubborn: got SIGTERM\n"), "{}", o.err());
    assert_eq!(o.code, 137, "{}", o.err());
}

#[test]
fn an_unanswered_prompt_times_out() {
    let w = World::new();
    let mut d = Driver::start(&w.config(json!({"prompt_timeout_ms": 300})), &[]);
    let mut spec = Spec::new(&w, "stubborn", &[]);
    spec.hold_stdin = true;
    let o = d.run(spec);
    assert!(
        o.err()
            .contains("stubborn: received {\"type\":\"cancel\",\"reason\":\"timeout\"}\n"),
        "{}",
        o.err()
    );
    assert_eq!(o.code, 42);
}

#[test]
fn a_question_without_input_or_default_fails_clearly() {
    let w = World::new();
    let mut d = Driver::start(&w.config(json!({})), &[]);
    let o = d.run(Spec::new(&w, "stubborn", &[]));
    assert!(
        o.err().contains("error: Plugin requested input 'Waiting:' but no input was given and no default was provided.\n"),
        "{}",
        o.err()
    );
    // Its stdin was closed; it did not exit, so it was stopped; the run fails with 1.
    assert!(o.err().contains("stubborn: got SIGTERM"), "{}", o.err());
    assert_eq!(o.code, 1);
}

#[test]
fn the_spare_is_used_only_when_env_and_cwd_match() {
    let w = World::new();
    let log = w.tmp.path().join("starts.log");
    let mut d = Driver::start(&w.config(json!({})), &[]);
    let spec = |cwd: &Path| {
        let mut s = Spec::new(&w, "warm", &[]);
        s.env.push(("WARM_LOG".into(), log.display().to_string()));
        s.cwd = cwd.to_path_buf();
        s
    };
    let first = d.run(spec(&w.project));
    assert_eq!(first.code, 0, "{}", first.err());
    // The first run started cold; a spare was started for the next.
    let wait_for = |n: usize| {
        for _ in 0..200 {
            if log_lines(&log).len() >= n {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("{n} starts expected: {:?}", log_lines(&log));
    };
    let mut printed = vec![pid_of(&first.out())];
    let spare_of = |printed: &[String]| {
        let all = log_lines(&log);
        let left: Vec<String> = all.into_iter().filter(|p| !printed.contains(p)).collect();
        assert_eq!(left.len(), 1, "one spare: {left:?}");
        left[0].clone()
    };
    wait_for(2);
    let spare = spare_of(&printed);
    let second = d.run(spec(&w.project));
    assert_eq!(
        pid_of(&second.out()),
        spare,
        "the spare served the matching run"
    );
    printed.push(spare);
    wait_for(3);
    let spare = spare_of(&printed);
    // Another directory: the spare is not used.
    let elsewhere = w.tmp.path();
    let third = d.run(spec(elsewhere));
    assert_ne!(pid_of(&third.out()), spare);
    assert!(third
        .out()
        .contains(&format!("cwd={}", elsewhere.display())));
    assert!(
        d.notices.iter().any(|n| n["kind"] == "fallback"
            && n["message"]
                .as_str()
                .unwrap()
                .contains("working directory differs")),
        "{:?}",
        d.notices
    );
    // Another environment: not used either.
    printed.push(pid_of(&third.out()));
    wait_for(5);
    let all = log_lines(&log);
    let spare = all
        .into_iter()
        .find(|p| !printed.contains(p) && *p != spare)
        .unwrap();
    let mut s = spec(elsewhere);
    s.env.push(("EXTRA".into(), "1".into()));
    let fourth = d.run(s);
    assert_ne!(pid_of(&fourth.out()), spare);
}

#[test]
fn without_spare_every_run_starts_its_own_process() {
    let w = World::new();
    let log = w.tmp.path().join("starts.log");
    let mut d = Driver::start(&w.config(json!({"spare": false})), &[]);
    for _ in 0..2 {
        let mut s = Spec::new(&w, "warm", &[]);
        s.env.push(("WARM_LOG".into(), log.display().to_string()));
        assert_eq!(d.run(s).code, 0);
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(log_lines(&log).len(), 2);
}

#[test]
fn bad_configurations_are_refused_with_a_reason() {
    let w = World::new();
    let d = Driver::start(&w.config(json!({"plugin_dir": "/x"})), &[]);
    assert!(d.hello["error"]
        .as_str()
        .unwrap()
        .contains("unknown key `plugin_dir`"));
    let d = Driver::start(&w.config(json!({})), &["some-plugin"]);
    assert!(
        d.hello["error"].as_str().unwrap().contains("is neither"),
        "{}",
        d.hello
    );
    // The plugins directory as the command.
    let mut d = Driver::start(r#"{"name":"fledge"}"#, &[w.plugins.to_str().unwrap()]);
    assert_eq!(d.run(Spec::new(&w, "hello", &["x"])).out(), "hello x\n");
    let d = Driver::start(
        &w.config(json!({"plugins_dir": "/nonexistent/plugins"})),
        &[],
    );
    assert!(d.hello["error"]
        .as_str()
        .unwrap()
        .contains("no fledge plugin commands in /nonexistent/plugins"));
}

#[test]
fn grants_from_the_table_apply() {
    let w = World::new();
    let mut d = Driver::start(
        &w.config(json!({"grants": {"fledge-denied": ["exec", "store", "metadata"]}})),
        &[],
    );
    let o = d.run(Spec::new(&w, "denied", &[]));
    assert!(o.out().contains("should-not-run"), "{}", o.out());
    assert!(!o.err().contains("blocked"), "{}", o.err());
    assert_eq!(w.state("fledge-denied"), Some(json!({"k": "v"})));
}

#[test]
fn progress_is_drawn_on_a_terminal_stderr_and_not_on_a_pipe() {
    let w = World::new();
    let mut d = Driver::start(&w.config(json!({})), &[]);
    let mut spec = Spec::new(&w, "quiz", &["slow"]).stdin(b"\n\n\n\n");
    spec.env.push(("NAILGUN_TTY_2".into(), "1".into()));
    spec.env.push(("TERM".into(), "xterm".into()));
    let o = d.run(spec);
    assert_eq!(o.code, 0, "{}", o.err());
    let err = o.err();
    assert!(err.contains("Working (fledge-ask) ["), "{err:?}");
    assert!(err.contains("] 3/3"), "{err:?}");
    // Colour on a terminal.
    assert!(err.contains("\u{1b}[36m"), "{err:?}");
    let o = d.run(Spec::new(&w, "quiz", &["slow"]).stdin(b"\n\n\n\n"));
    assert!(!o.err().contains("Working"), "{}", o.err());
}
