//! The plugin host's seam for other plugin protocols, end to end on the `ngd` binary:
//! `protocol = "..."` tables are checked when the configuration loads (each bridge judges
//! its own keys), and `ngd bridge` is the hidden entry point ngd runs bridges through.

use std::process::{Command, Output};

use ng_tests::bins;

/// Runs `ngd serve` on a private socket with `config` as its configuration file.
fn serve_with(config: &str) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ngd.toml");
    std::fs::write(&path, config).expect("write config");
    let socket = dir.path().join("s.sock");
    Command::new(bins::ngd())
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .arg("--listen")
        .arg(format!("local:{}", socket.display()))
        .env("XDG_STATE_HOME", dir.path())
        .output()
        .expect("run ngd")
}

#[test]
fn a_bridged_plugin_with_an_unknown_key_is_refused_at_load() {
    let out = serve_with(
        "[[plugin]]\nname = \"inc\"\nprotocol = \"nu\"\ncommand = [\"nu_plugin_inc\"]\n\
         bogus_key = 3\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "stderr: {stderr}");
    assert!(
        stderr.contains("plugin 'inc' (protocol = \"nu\")") && stderr.contains("bogus_key"),
        "the message names the plugin, its protocol and the key: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing was served: {:?}",
        out.stdout
    );
}

#[test]
fn an_ngw_plugin_with_an_unknown_key_is_refused_at_load() {
    let out =
        serve_with("[[plugin]]\nname = \"w\"\ncommand = [\"worker\"]\nframing = \"ndjson\"\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "stderr: {stderr}");
    assert!(
        stderr.contains("plugin 'w'") && stderr.contains("unknown field `framing`"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_protocol_is_refused_at_load() {
    let out = serve_with("[[plugin]]\nname = \"g\"\nprotocol = \"grpc\"\ncommand = [\"x\"]\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "stderr: {stderr}");
    assert!(stderr.contains("grpc"), "{stderr}");
}

#[test]
fn the_bridge_subcommand_is_hidden_and_refuses_unknown_protocols() {
    let help = Command::new(bins::ngd())
        .arg("--help")
        .output()
        .expect("ngd --help");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("serve"), "{text}");
    assert!(!text.contains("bridge"), "bridge is not for users: {text}");
    let out = Command::new(bins::ngd())
        .args(["bridge", "grpc", "--", "true"])
        .output()
        .expect("ngd bridge");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no bridge for protocol \"grpc\""),
        "{stderr}"
    );
    // A configuration that is not JSON is refused before any bridge runs.
    let out = Command::new(bins::ngd())
        .args(["bridge", "nu", "--", "true"])
        .env("NGW_BRIDGE_CONFIG", "{nope")
        .output()
        .expect("ngd bridge");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("NGW_BRIDGE_CONFIG"), "{stderr}");
}

/// A fake ngw worker speaking `mux` and `notices` on raw chunks (no SDK), for what a real
/// worker does not do on demand: sessions that wait for each other on one channel, notices
/// of every kind, a crash with several sessions bound. Commands:
/// * `mfeatures`: prints `NGW_HOST_FEATURES`;
/// * `mwait N`: ends only once N sessions are bound at the same time (each prints its id);
/// * `mcat`: echoes its stdin (asked for with `S`, one credit at a time);
/// * `mnotice KIND MESSAGE`: sends a notice about its session, then ends;
/// * `mdie`: the worker exits with status 3 at once.
const MUX_WORKER: &str = r#"
import json, os, socket, struct, sys
fd = int(os.environ["NGW_FD"])
ch = socket.socket(fileno=fd)
features = os.environ.get("NGW_HOST_FEATURES", "")
def send(ty, payload=b""):
    ch.sendall(struct.pack(">IB", len(payload), ord(ty)) + payload)
buf = b""
def chunk():
    global buf
    while True:
        if len(buf) >= 5:
            n, ty = struct.unpack(">IB", buf[:5])
            if len(buf) >= 5 + n:
                payload = buf[5:5 + n]
                buf = buf[5 + n:]
                return chr(ty), payload
        data = ch.recv(65536)
        if not data:
            sys.exit(0)
        buf += data
send("h", json.dumps({"protocol": 1, "pid": os.getpid(),
    "commands": ["mfeatures", "mwait", "mcat", "mnotice", "mdie"],
    "features": ["mux", "notices"], "max_sessions": 4}).encode())
sessions = {}
selected = None
out_selected = None
waiting = []
quitting = False
def to(sid, ty, payload=b""):
    global out_selected
    if out_selected != sid:
        send("s", str(sid).encode())
        out_selected = sid
    send(ty, payload)
def finish(sid, code):
    to(sid, "X", b"%d\n" % code)
    sessions.pop(sid, None)
    if quitting and not sessions:
        sys.exit(0)
while True:
    ty, payload = chunk()
    if ty == "p":
        send("o", payload)
    elif ty == "q":
        quitting = True
        if not sessions:
            sys.exit(0)
    elif ty == "s":
        selected = int(payload)
        sessions.setdefault(selected, {"args": []})
    elif ty == "A":
        sessions[selected]["args"].append(payload.decode())
    elif ty in "ED":
        pass
    elif ty == "C":
        s = sessions[selected]
        cmd, args = payload.decode(), s["args"]
        if cmd == "mfeatures":
            to(selected, "1", features.encode() + b"\n")
            finish(selected, 0)
        elif cmd == "mwait":
            waiting.append(selected)
            if len(waiting) >= int(args[0]):
                for sid in waiting:
                    to(sid, "1", b"%d\n" % sid)
                    finish(sid, 0)
                waiting = []
        elif cmd == "mcat":
            to(selected, "S")
        elif cmd == "mnotice":
            send("n", json.dumps({"kind": args[0], "message": args[1], "session": selected}).encode())
            finish(selected, 0)
        elif cmd == "mdie":
            sys.exit(3)
    elif ty == "0":
        if selected in sessions:
            to(selected, "1", payload)
            to(selected, "S")
    elif ty == ".":
        if selected in sessions:
            finish(selected, 0)
    elif ty == "i":
        if selected in sessions and payload == b"hangup":
            finish(selected, 129)
"#;

mod mux {
    use std::time::Duration;

    use ng_tests::plugins::{python, Json, Plugin, PluginServer};
    use ng_tests::Client;

    /// A server whose plugin `mx` is one [`super::MUX_WORKER`] (at most one worker).
    fn server(dir: &tempfile::TempDir, extra: &[(&str, &str)]) -> PluginServer {
        let script = dir.path().join("mux_worker.py");
        std::fs::write(&script, super::MUX_WORKER).expect("write the fake worker");
        let mut plugin = Plugin::new(
            "mx",
            &[
                python().to_string_lossy().into_owned(),
                script.to_string_lossy().into_owned(),
            ],
        )
        .set("max_workers", 1);
        for (k, v) in extra {
            plugin = plugin.set(k, v);
        }
        PluginServer::start(vec![plugin])
    }

    fn count(report: &Json, key: &str) -> Option<u64> {
        report.get(key).and_then(Json::as_u64)
    }

    #[test]
    fn the_host_announces_mux_and_notices() {
        let dir = tempfile::tempdir().unwrap();
        let server = server(&dir, &[]);
        for client in [Client::Ours, Client::CClient] {
            let out = server.run(client, &["mfeatures"]);
            assert_eq!(out.code(), Some(0), "{out:?}");
            assert_eq!(
                out.stdout_text(),
                "mux,notices,fds,ctty,signals,stdin-window\n"
            );
        }
    }

    #[test]
    fn several_sessions_run_at_once_on_one_worker() {
        let dir = tempfile::tempdir().unwrap();
        let server = server(&dir, &[]);
        // Each `mwait 3` ends only when three are bound together: with one worker, only
        // multiplexing can finish them.
        let running: Vec<_> = (0..3)
            .map(|i| {
                let client = if i % 2 == 0 {
                    Client::Ours
                } else {
                    Client::CClient
                };
                server.cmd(client).args(["mwait", "3"]).spawn()
            })
            .collect();
        let mut ids = Vec::new();
        for r in running {
            let out = r.wait();
            assert_eq!(out.code(), Some(0), "{out:?}");
            ids.push(out.stdout_text());
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 3, "three distinct sessions: {ids:?}");
        let report = server.plugin_report("mx").expect("report");
        assert_eq!(count(&report, "sessions"), Some(3), "{report}");
        assert_eq!(count(&report, "restarts"), Some(0), "{report}");
    }

    #[test]
    fn stdin_and_output_are_relayed_per_session() {
        let dir = tempfile::tempdir().unwrap();
        let server = server(&dir, &[]);
        let a = server
            .cmd(Client::Ours)
            .arg("mcat")
            .stdin_bytes(b"first session\n".repeat(1000))
            .spawn();
        let b = server
            .cmd(Client::CClient)
            .arg("mcat")
            .stdin_bytes(b"second\n".repeat(3000))
            .spawn();
        let (a, b) = (a.wait(), b.wait());
        assert_eq!(a.code(), Some(0), "{a:?}");
        assert_eq!(b.code(), Some(0), "{b:?}");
        assert_eq!(a.stdout, b"first session\n".repeat(1000));
        assert_eq!(b.stdout, b"second\n".repeat(3000));
    }

    #[test]
    fn every_bound_session_fails_when_the_mux_worker_dies() {
        let dir = tempfile::tempdir().unwrap();
        let server = server(&dir, &[]);
        let waiting: Vec<_> = (0..2)
            .map(|_| server.cmd(Client::Ours).args(["mwait", "9"]).spawn())
            .collect();
        server.wait_plugin("mx", Duration::from_secs(20), |r| {
            count(r, "running") == Some(2)
        });
        let killer = server.run(Client::Ours, &["mdie"]);
        assert_ne!(killer.code(), Some(0), "{killer:?}");
        for w in waiting {
            let out = w.wait();
            assert_eq!(out.code(), Some(1), "{out:?}");
            assert!(
                out.stderr_text().contains(
                    "ngd: worker for 'mwait' died during the command (exited with status 3"
                ),
                "{out:?}"
            );
        }
        // A worker replaces it.
        let out = server.run(Client::Ours, &["mfeatures"]);
        assert_eq!(out.code(), Some(0), "{out:?}");
    }

    #[test]
    fn notices_are_kept_counted_and_a_retire_is_a_recycle() {
        let dir = tempfile::tempdir().unwrap();
        let server = server(&dir, &[]);
        for (kind, message) in [
            ("fallback", "ran cold"),
            ("stale", "code changed"),
            ("fallback", "ran cold again"),
        ] {
            let out = server.run(Client::Ours, &["mnotice", kind, message]);
            assert_eq!(out.code(), Some(0), "{out:?}");
        }
        let report = server.wait_plugin("mx", Duration::from_secs(10), |r| {
            r.get("notices").and_then(Json::as_array).map(Vec::len) == Some(3)
        });
        let counts = report.get("notice_counts").expect("counts");
        assert_eq!(
            counts.get("fallback").and_then(Json::as_u64),
            Some(2),
            "{report}"
        );
        assert_eq!(
            counts.get("stale").and_then(Json::as_u64),
            Some(1),
            "{report}"
        );
        let last = &report.get("notices").and_then(Json::as_array).unwrap()[2];
        assert_eq!(
            last.get("message").and_then(Json::as_str),
            Some("ran cold again")
        );
        // `retire`: the worker is replaced without counting a failure.
        let out = server.run(Client::Ours, &["mnotice", "retire", "stale code"]);
        assert_eq!(out.code(), Some(0), "{out:?}");
        server.wait_plugin("mx", Duration::from_secs(20), |r| {
            count(r, "idle") == Some(1) && count(r, "quitting") == Some(0)
        });
        let out = server.run(Client::Ours, &["mfeatures"]);
        assert_eq!(out.code(), Some(0), "{out:?}");
        let report = server.plugin_report("mx").expect("report");
        assert_eq!(count(&report, "failures"), Some(0), "{report}");
        assert!(
            report
                .get("last_failure")
                .is_none_or(|f| f.as_str().is_none()),
            "{report}"
        );
        // `ngd status` shows them too.
        let status = server.run(Client::Ours, &["ng-stats"]);
        let text = status.stdout_text();
        assert!(
            text.contains("plugin mx: notices: fallback 2, retire 1, stale 1"),
            "{status:?}"
        );
        assert!(
            text.contains("notice [stale] from pid") && text.contains(": code changed"),
            "{status:?}"
        );
    }
}
