//! flask's command line kept warm by `ngd` with the configuration of `examples/flask.toml`
//! (only its relative `cwd` made absolute, and a log file added): the flask of the
//! fidelity venv that `scripts/peers/fidelity` installs, found on ngd's `PATH` as the
//! example says. Run with our `ng` and the C client, directly (`ng flask ...`) and through
//! a symlink named `flask`, in a directory holding an application, and compared byte for
//! byte with a cold run of the venv's `flask` script with the same environment, directory
//! and stdin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ng_tests::client::symlink;
use ng_tests::plugins::{JsonExt as _, Plugin, PluginServer, TAG_VAR};
use ng_tests::{both_clients, Output};

use super::examples::{self, example_table};

/// The fidelity venv's bin directory (`scripts/peers/fidelity`).
fn venv_bin() -> PathBuf {
    let peers = std::env::var_os("NGD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/ngd-peers")
        });
    let bin = peers.join("venv-fidelity/bin");
    assert!(
        bin.join("flask").is_file(),
        "{} is missing: run scripts/install-peers",
        bin.join("flask").display()
    );
    bin
}

/// `PATH` for ngd, the clients and the cold run: the venv first, as in a shell where the
/// venv is active.
fn path_var() -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", venv_bin().display())
}

/// The application the commands find in the client's directory (`app.py`, flask's
/// default), with a command of its own.
const APP: &str = r#"import click
from flask import Flask

app = Flask(__name__)


@app.route("/")
def index():
    return "index"


@app.route("/hello/<name>", methods=["GET", "POST"])
def hello(name):
    return "hello " + name


@app.cli.command("greet")
@click.argument("who")
@click.option("--shout", is_flag=True)
def greet(who, shout):
    """Greets WHO."""
    text = "héllo " + who
    click.echo(text.upper() if shout else text)
"#;

/// A cold `flask <args>`: the venv's script, as a shell would run it.
fn cold(args: &[&str], env: &BTreeMap<String, String>, cwd: &Path) -> Output {
    examples::cold(&venv_bin().join("flask"), args, env, cwd)
}

both_clients! {
    /// `flask --version`, `flask routes`, the application's own command with a
    /// non-ASCII argument, an unknown command and a missing application, through `ng
    /// flask` and through a symlink named `flask`, give the same stdout, stderr and exit
    /// code as a cold `flask`, and every session ran warm (no fallback notice).
    fn flask_cli_matches_a_cold_run(client) {
        let server = PluginServer::builder()
            .plugin(Plugin::raw("flask", example_table("flask.toml")))
            .env("PATH", &path_var())
            // ngd started from the clients' shell: the same locale, so the sessions match
            // the worker's zygote (another locale gets a zygote of its own, and its first
            // sessions run the cold way while that starts).
            .env("LANG", "C.UTF-8")
            .start();
        let dir = tempfile::Builder::new().prefix("flask-app-").tempdir().unwrap();
        let cwd = dir.path().canonicalize().unwrap();
        std::fs::write(cwd.join("app.py"), APP).unwrap();
        let link_dir = tempfile::tempdir().unwrap();
        let link = link_dir.path().join("flask");
        symlink(&client.bin(), &link);
        let base: BTreeMap<String, String> = [
            ("PATH", path_var()),
            ("HOME", cwd.to_string_lossy().into_owned()),
            ("LANG", "C.UTF-8".to_string()),
            (TAG_VAR, server.tag().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let cases: [(&[&str], Option<&str>); 6] = [
            (&["--version"], None),
            (&["routes"], None),
            (&["routes", "--sort", "methods"], None),
            (&["greet", "wörld", "--shout"], None),
            (&["no-such-command"], None),
            (&["routes"], Some("missing_module")),
        ];
        let mut sessions = 0;
        for (args, app) in cases {
            let mut env = base.clone();
            if let Some(app) = app {
                env.insert("FLASK_APP".into(), app.into());
            }
            let cold = cold(args, &env, &cwd);
            // The cold runs themselves did what they should, so equality means something.
            match (args, app) {
                (["--version"], _) => {
                    cold.assert_success();
                    assert!(cold.stdout_text().contains("Flask "), "{cold:?}");
                }
                (["routes", ..], None) => {
                    cold.assert_success();
                    assert!(cold.stdout_text().contains("/hello/<name>"), "{cold:?}");
                }
                (["greet", ..], _) => {
                    cold.assert_success();
                    assert_eq!(cold.stdout_text(), "HÉLLO WÖRLD\n", "{cold:?}");
                }
                (["no-such-command"], _) => {
                    cold.assert_code(2);
                    assert!(cold.stderr_text().contains("No such command"), "{cold:?}");
                }
                _ => {
                    cold.assert_code(2);
                    assert!(cold.stderr_text().contains("missing_module"), "{cold:?}");
                }
            }
            examples::assert_warm_as_cold(&server, client, "flask", &link, args, &env, &cwd, &cold);
            sessions += 2;
        }
        let report = server.plugin_report("flask").expect("flask in ng-stats");
        assert_eq!(report.u64_at("sessions"), sessions, "{report}");
        assert!(
            report
                .get("notice_counts")
                .and_then(|c| c.get("fallback"))
                .is_none(),
            "a session ran the cold way: {report}\n{}",
            server.plugin_log("flask")
        );
    }
}
