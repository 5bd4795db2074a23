//! The same plugins, run by the real fledge 1.8.0 and by the bridge, for a table of cases:
//! stdout, stderr (except where `docs/plugins-fledge.md` documents a difference), state
//! files and exit codes.

mod common;

use common::{Driver, Spec, World};
use serde_json::json;

/// How stderr is compared.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stderr {
    /// Byte for byte.
    Same,
    /// The bridge adds its line prompts (fledge answers defaults without showing them);
    /// with those lines removed, the rest is the same.
    SameButPrompts,
    /// Each host words the error its own way (checked by the case).
    Own,
}

struct Case {
    command: &'static str,
    args: &'static [&'static str],
    stdin: &'static [u8],
    /// fledge's exit code and the bridge's (the plugin's own).
    codes: (i32, i32),
    stderr: Stderr,
    state_of: Option<&'static str>,
}

fn strip_prompts(s: &str) -> String {
    s.lines()
        .filter(|l| {
            !(l.starts_with("? ") || l.starts_with("  Choose ") || {
                let t = l.trim_start();
                l.starts_with("  ")
                    && t.split_once(") ")
                        .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
            })
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn fledge_and_the_bridge_agree() {
    let cases = [
        Case {
            command: "demo",
            args: &["3", "extra"],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::Same,
            state_of: Some("fledge-demo"),
        },
        Case {
            command: "deploy",
            args: &[],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::SameButPrompts,
            state_of: None,
        },
        Case {
            command: "deploy-sh",
            args: &["x"],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::SameButPrompts,
            state_of: None,
        },
        Case {
            command: "quiz",
            args: &[],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::SameButPrompts,
            state_of: None,
        },
        Case {
            command: "exitwith",
            args: &["3"],
            stdin: b"",
            codes: (1, 3),
            stderr: Stderr::Same,
            state_of: None,
        },
        Case {
            command: "exitwith",
            args: &["0"],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::Same,
            state_of: None,
        },
        Case {
            command: "legacy",
            args: &["cat", "4"],
            stdin: b"hello\nworld\n",
            codes: (1, 4),
            stderr: Stderr::Same,
            state_of: None,
        },
        Case {
            command: "legacy",
            args: &["plain"],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::Same,
            state_of: None,
        },
        Case {
            command: "garbage",
            args: &[],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::Same,
            state_of: None,
        },
        Case {
            command: "denied",
            args: &[],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::Same,
            state_of: Some("fledge-denied"),
        },
        Case {
            command: "kv",
            args: &["meta", "env", "git_tags", "git_log", "nope"],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::Same,
            state_of: None,
        },
        Case {
            command: "execs",
            args: &[],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::Same,
            state_of: None,
        },
        Case {
            command: "flood",
            args: &["20000"],
            stdin: b"",
            codes: (0, 0),
            stderr: Stderr::Same,
            state_of: None,
        },
        Case {
            command: "future",
            args: &[],
            stdin: b"",
            codes: (1, 1),
            stderr: Stderr::Own,
            state_of: None,
        },
        Case {
            command: "dies",
            args: &[],
            stdin: b"",
            codes: (1, 137),
            stderr: Stderr::Own,
            state_of: None,
        },
    ];
    // Two worlds with identical layouts, one per host, so state files compare.
    let theirs = World::new();
    let ours = World::new();
    theirs.git_init();
    ours.git_init();
    let mut driver = Driver::start(&ours.config(json!({})), &[]);
    for case in &cases {
        let mut env_extra = vec![("SECRET_TOKEN".to_string(), "s3cret".to_string())];
        let f = theirs.fledge_with(case.command, case.args, case.stdin, &env_extra);
        let mut spec = Spec::new(&ours, case.command, case.args).stdin(case.stdin);
        spec.env.append(&mut env_extra);
        let b = driver.run(spec);
        let label = format!("{} {:?}", case.command, case.args);
        // Paths differ only by the world's directory.
        let norm = |s: String, w: &World| s.replace(&w.tmp.path().display().to_string(), "<tmp>");
        assert_eq!(
            norm(b.out(), &ours),
            norm(f.out(), &theirs),
            "stdout of {label}\nbridge stderr: {}",
            b.err()
        );
        assert_eq!(
            (f.code, b.code),
            case.codes,
            "exit codes of {label}: {}",
            b.err()
        );
        let (fe, be) = (norm(f.err(), &theirs), norm(b.err(), &ours));
        match case.stderr {
            Stderr::Same => assert_eq!(be, fe, "stderr of {label}"),
            Stderr::SameButPrompts => assert_eq!(strip_prompts(&be), fe, "stderr of {label}"),
            Stderr::Own => {
                assert!(!fe.is_empty() && !be.is_empty(), "{label}: {fe} / {be}");
            }
        }
        if let Some(p) = case.state_of {
            assert_eq!(ours.state(p), theirs.state(p), "state of {label}");
        }
    }
    assert_eq!(driver.quit(), 0);
}

#[test]
fn state_written_by_one_host_is_read_by_the_other() {
    let w = World::new();
    let mut driver = Driver::start(&w.config(json!({})), &[]);
    let b = driver.run(Spec::new(
        &w,
        "kv",
        &["set", "greeting", "héllo \"wörld\"\n\ttab"],
    ));
    assert_eq!((b.out().as_str(), b.code), ("stored\n", 0), "{}", b.err());
    let f = w.fledge("kv", &["get", "greeting"], b"");
    assert_eq!(f.out(), "\"h\\u00e9llo \\\"w\\u00f6rld\\\"\\n\\ttab\"\n");
    let f = w.fledge("kv", &["set", "other", "from fledge"], b"");
    assert_eq!(f.code, 0, "{}", f.err());
    let b = driver.run(Spec::new(&w, "kv", &["get", "other"]));
    assert_eq!(b.out(), "\"from fledge\"\n");
    let b = driver.run(Spec::new(&w, "kv", &["get", "greeting"]));
    assert_eq!(b.out(), "\"h\\u00e9llo \\\"w\\u00f6rld\\\"\\n\\ttab\"\n");
    assert_eq!(
        w.state("fledge-kv"),
        Some(json!({"greeting": "héllo \"wörld\"\n\ttab", "other": "from fledge"}))
    );
}
