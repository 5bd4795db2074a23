//! Arguments, environment and working directory reach the nail intact.
//!
//! The `Dump` nail reports what the server decoded from the client's `A`, `E` and `D`
//! chunks. The reference server decodes them as UTF-8, so non-ASCII values here are valid
//! UTF-8; `--nailgun-*` options are not arguments (clients take them anywhere).

use std::collections::BTreeMap;

use ng_tests::{both_clients, eqnice, Client, Dump, JavaServer, Nail, Server, Transport};

/// Arguments that a careless client would mangle: empty, spaces, non-ASCII, what looks
/// like an option, `=`, control characters.
const ARGS: &[&str] = &[
    "plain",
    "",
    "two words",
    "na\u{ef}ve \u{2603} \u{65e5}\u{672c}\u{8a9e}",
    "-h",
    "--",
    "a=b",
    "tab\there",
    "line\nbreak",
    " ",
];

/// Variables a careless client would mangle.
const ENV: &[(&str, &str)] = &[
    ("NG_T_PLAIN", "value"),
    ("NG_T_EMPTY", ""),
    ("NG_T_EQUALS", "a=b=c"),
    ("NG_T_UNICODE", "gr\u{fc}\u{df}e \u{2603} \u{65e5}\u{672c}"),
    ("NG_T_SPACES", " two  spaces "),
    ("NG_T_NEWLINE", "line\nbreak"),
];

/// What every client adds (nailgun.md §2.1), with no terminal on stdin, stdout or stderr.
const SYNTHETIC: &[(&str, &str)] = &[
    ("NAILGUN_FILESEPARATOR", "/"),
    ("NAILGUN_PATHSEPARATOR", ":"),
    ("NAILGUN_TTY_0", "0"),
    ("NAILGUN_TTY_1", "0"),
    ("NAILGUN_TTY_2", "0"),
];

/// Every argument arrives, in order, byte for byte, including the empty one.
pub fn args_arrive_intact(server: &dyn Server, client: Client) {
    let out = client.cmd().nail(server, Nail::Dump).args(ARGS).run();
    out.assert_success();
    let dump = Dump::parse(&out.stdout);
    assert_eq!(dump.args, ARGS, "on {}\n{out:?}", server.describe());
}

/// The client's whole environment arrives with exact values, plus the synthetic
/// `NAILGUN_*` variables, and nothing else (except our own `NGD_*` extension namespace,
/// which stock servers just see as variables).
pub fn env_arrives_intact(server: &dyn Server, client: Client) {
    let mut cmd = client.cmd().nail(server, Nail::Dump);
    for (name, value) in ENV {
        cmd = cmd.env(name, value);
    }
    let sent: BTreeMap<String, String> = cmd
        .env_vars()
        .iter()
        .map(|(k, v)| {
            (
                k.to_str().unwrap().to_string(),
                v.to_str().unwrap().to_string(),
            )
        })
        .collect();
    let out = cmd.run();
    out.assert_success();
    let dump = Dump::parse(&out.stdout);

    let mut expected = sent.clone();
    for (name, value) in SYNTHETIC {
        expected.insert(name.to_string(), value.to_string());
    }
    let received: BTreeMap<String, String> = dump
        .env
        .iter()
        .filter(|(name, _)| !name.starts_with("NGD_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(received, expected, "on {}\n{out:?}", server.describe());
}

/// The working directory arrives as the client's physical cwd, non-ASCII and spaces
/// included.
pub fn cwd_arrives_intact(server: &dyn Server, client: Client) {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("d\u{ef}r \u{2603} with space");
    std::fs::create_dir(&cwd).unwrap();
    let cwd = cwd.canonicalize().unwrap();
    let out = client.cmd().nail(server, Nail::Dump).cwd(&cwd).run();
    out.assert_success();
    let dump = Dump::parse(&out.stdout);
    eqnice!(
        cwd.to_str().unwrap(),
        dump.cwd.as_deref().unwrap_or("<no D chunk>"),
        "on {}\n{out:?}",
        server.describe()
    );
}

both_clients! {
    fn args_arrive_intact(client) {
        for transport in Transport::ALL {
            super::args_arrive_intact(JavaServer::shared(transport), client);
        }
    }
}

both_clients! {
    fn env_arrives_intact(client) {
        for transport in Transport::ALL {
            super::env_arrives_intact(JavaServer::shared(transport), client);
        }
    }
}

both_clients! {
    fn cwd_arrives_intact(client) {
        for transport in Transport::ALL {
            super::cwd_arrives_intact(JavaServer::shared(transport), client);
        }
    }
}
