//! The bridge against the real plugins (nu_plugin_inc: JSON encoding; nu_plugin_formats:
//! msgpack), compared with what the real nu 0.115.1 prints for the same call.

mod common;

use common::{bridge, nu, peer, plugin_pids, private_copy, req};
use std::time::{Duration, Instant};

/// Runs `cmd args` through a fresh bridge for `plugin`.
fn ng(plugin: &str, cmd: &str, args: &[&str], stdin: &[u8]) -> (String, String, i32) {
    let p = peer(plugin);
    let (mut d, _t) = bridge(&[&p], "{}");
    let o = d.run(&req(cmd, args, stdin)).unwrap();
    (o.stdout_str(), o.stderr_str(), o.code)
}

#[test]
fn inc_table_matches_nu() {
    let inc = peer("nu_plugin_inc");
    let (mut d, _t) = bridge(&[&inc], "{}");
    // (bridge args, stdin, nu pipeline)
    let table: &[(&[&str], &str, &str)] = &[
        (&["--nu-input", "json"], "5", "5 | inc"),
        (&["--nu-input", "json"], "-1", "-1 | inc"),
        (&["--nu-output", "json"], "1.2.3", "'1.2.3' | inc"),
        (
            &["--major", "--nu-output", "json"],
            "1.2.3",
            "'1.2.3' | inc --major",
        ),
        (
            &["--minor", "--nu-output", "json"],
            "0.1.2",
            "'0.1.2' | inc --minor",
        ),
        (
            &["-p", "--nu-output=json"],
            "1.2.3",
            "'1.2.3' | inc --patch",
        ),
        (
            &["v", "--major", "--nu-input", "json"],
            r#"{"v":"1.2.3","w":1}"#,
            "{v: '1.2.3', w: 1} | inc v --major",
        ),
        (
            &["w", "--nu-input", "json"],
            r#"{"v":"1.2.3","w":1}"#,
            "{v: '1.2.3', w: 1} | inc w",
        ),
    ];
    for (args, stdin, script) in table {
        let o = d.run(&req("inc", args, stdin.as_bytes())).unwrap();
        let (want, werr, wcode) = nu(&inc, &format!("{script} | to json"), None);
        assert_eq!(wcode, 0, "nu failed for {script}: {werr}");
        assert_eq!(
            (o.stdout_str(), o.code),
            (want, 0),
            "inc {args:?} <<< {stdin}: {}",
            o.stderr_str()
        );
    }
}

#[test]
fn strings_print_raw_by_default() {
    // Nu's external-command input (a byte stream) is what the bridge sends by default.
    let (out, err, code) = ng("nu_plugin_inc", "inc", &["--major"], b"1.2.3");
    assert_eq!((out.as_str(), code), ("2.0.0\n", 0), "{err}");
    let inc = peer("nu_plugin_inc");
    let (want, _, _) = nu(&inc, "^printf 1.2.3 | inc --major", None);
    assert_eq!(want, "2.0.0\n");
}

#[test]
fn formats_from_ini_eml_ics_match_nu() {
    let formats = peer("nu_plugin_formats");
    let dir = tempfile::tempdir().unwrap();
    let files = common::FORMAT_SAMPLES;
    let (mut d, _t) = bridge(&[&formats], "{}");
    for (cmd, name, text) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let (want, werr, wcode) = nu(
            &formats,
            &format!("open --raw {} | {cmd} | to json", path.display()),
            None,
        );
        assert_eq!(wcode, 0, "nu: {werr}");
        let mut words = cmd.split(' ');
        let first = words.next().unwrap();
        let sub: Vec<&str> = words.collect();
        let o = d.run(&req(first, &sub, text.as_bytes())).unwrap();
        assert_eq!(
            (o.stdout_str(), o.code),
            (want, 0),
            "{cmd}: {}",
            o.stderr_str()
        );
    }
}

#[test]
fn plugin_errors_render_like_nu_with_exit_1() {
    let (out, err, code) = ng(
        "nu_plugin_inc",
        "inc",
        &["--nu-input", "json"],
        b"[1, 2, 3]",
    );
    assert_eq!(code, 1, "{out}");
    let inc = peer("nu_plugin_inc");
    let (_, nerr, ncode) = nu(&inc, "[1 2 3] | inc", None);
    assert_ne!(ncode, 0);
    let first = |s: &str| {
        s.lines()
            .find(|l| l.contains(" x "))
            .unwrap_or("")
            .trim()
            .to_owned()
    };
    assert_eq!(first(&err), first(&nerr), "bridge:\n{err}\nnu:\n{nerr}");
}

#[test]
fn usage_errors_and_help() {
    let (_, err, code) = ng("nu_plugin_inc", "inc", &["a", "b"], b"");
    assert_eq!(code, 2);
    assert!(
        err.contains("nu::parser::extra_positional") && err.contains("Extra positional argument."),
        "{err}"
    );
    let (_, err, code) = ng("nu_plugin_inc", "inc", &["--bogus"], b"");
    assert_eq!(code, 2);
    assert!(
        err.contains("The `inc` command doesn't have flag `bogus`."),
        "{err}"
    );
    let (out, _, code) = ng("nu_plugin_inc", "inc", &["--help"], b"");
    assert_eq!(code, 0);
    assert!(
        out.contains("Usage:\n  > inc {flags} (cell_path)") && out.contains("--major"),
        "{out}"
    );
    let (_, err, code) = ng("nu_plugin_formats", "from", &["nope"], b"");
    assert_eq!(code, 2);
    assert!(err.contains("from ini"), "{err}");
}

#[test]
fn hello_lists_first_words_and_mux() {
    let formats = peer("nu_plugin_formats");
    let inc = peer("nu_plugin_inc");
    let (d, _t) = bridge(&[&inc, &formats], "{}");
    let cmds: Vec<String> = d.hello()["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    assert!(
        cmds.contains(&"inc".to_owned()) && cmds.contains(&"from".to_owned()),
        "{cmds:?}"
    );
    assert_eq!(cmds.iter().filter(|c| *c == "from").count(), 1);
    assert_eq!(d.hello()["max_sessions"], 32);
}

#[test]
fn thirty_two_concurrent_calls_share_one_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let inc = private_copy("nu_plugin_inc", dir.path());
    let (mut d, _t) = bridge(&[&inc], "{}");
    let reqs: Vec<_> = (0..32)
        .map(|i| req("inc", &["--nu-input", "json"], i.to_string().as_bytes()))
        .collect();
    let outs = d.run_all(&reqs).unwrap();
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(
            (o.stdout_str(), o.code),
            (format!("{}\n", i + 1), 0),
            "{}",
            o.stderr_str()
        );
    }
    assert_eq!(plugin_pids(&inc).len(), 1);
}

#[test]
fn gc_stops_an_idle_plugin_and_the_next_call_restarts_it() {
    let dir = tempfile::tempdir().unwrap();
    let inc = private_copy("nu_plugin_inc", dir.path());
    let (mut d, _t) = bridge(&[&inc], r#"{"gc_ms": 300}"#);
    let o = d.run(&req("inc", &["--nu-input", "json"], b"1")).unwrap();
    assert_eq!(o.stdout_str(), "2\n");
    let first = plugin_pids(&inc);
    assert_eq!(first.len(), 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !plugin_pids(&inc).is_empty() {
        assert!(Instant::now() < deadline, "the idle plugin was not stopped");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = d.run(&req("inc", &["--nu-input", "json"], b"41")).unwrap();
    assert_eq!(
        (o.stdout_str(), o.code),
        ("42\n".to_owned(), 0),
        "{}",
        o.stderr_str()
    );
    let second = plugin_pids(&inc);
    assert_eq!(second.len(), 1);
    assert_ne!(first, second);
}

#[test]
fn a_plugin_killed_mid_call_fails_that_call_and_the_next_starts_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let inc = private_copy("nu_plugin_inc", dir.path());
    let (mut d, _t) = bridge(&[&inc], "{}");
    // Raw input with stdin held open: the plugin waits for the stream's end.
    let mut r = req("inc", &[], b"1.2");
    r.hold_stdin = true;
    let id = d.start(&r).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let pids = loop {
        let pids = plugin_pids(&inc);
        if !pids.is_empty() || Instant::now() > deadline {
            break pids;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(pids.len(), 1);
    // Started; give the call time to reach it (it then waits for the stream's end).
    std::thread::sleep(Duration::from_millis(300));
    unsafe {
        libc::kill(pids[0], libc::SIGKILL);
    }
    let o = d.finish(id).unwrap();
    assert_eq!(o.code, 128 + 9, "{}", o.stderr_str());
    assert!(
        o.stderr_str().contains("killed by signal 9"),
        "{}",
        o.stderr_str()
    );
    let o = d.run(&req("inc", &["--nu-input", "json"], b"7")).unwrap();
    assert_eq!(
        (o.stdout_str(), o.code),
        ("8\n".to_owned(), 0),
        "{}",
        o.stderr_str()
    );
}

#[test]
fn one_entry_serves_a_directory_or_a_nu_registry() {
    let dir = tempfile::tempdir().unwrap();
    let inc = private_copy("nu_plugin_inc", dir.path());
    std::fs::write(dir.path().join("README"), "not a plugin").unwrap();
    let (mut d, _t) = bridge(&[dir.path()], "{}");
    let o = d.run(&req("inc", &["--nu-input", "json"], b"1")).unwrap();
    assert_eq!(
        (o.stdout_str(), o.code),
        ("2\n".to_owned(), 0),
        "{}",
        o.stderr_str()
    );
    // A registry written by nu's own `plugin add`.
    let reg = dir.path().join("plugin.msgpackz");
    let (_, err, code) = nu(
        &inc,
        &format!(
            "plugin add --plugin-config {} {}",
            reg.display(),
            inc.display()
        ),
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(ng_bridge_nu::registry(&reg).unwrap(), vec![inc.clone()]);
    let (mut d, _t) = bridge(&[&reg], "{}");
    let o = d.run(&req("inc", &["--nu-input", "json"], b"41")).unwrap();
    assert_eq!(
        (o.stdout_str(), o.code),
        ("42\n".to_owned(), 0),
        "{}",
        o.stderr_str()
    );
}
