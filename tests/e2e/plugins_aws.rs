//! The aws CLI 1.x kept warm by `ngd` with the configuration of
//! `examples/aws.toml` (only its relative `cwd` made absolute, and a log file added), run
//! with our `ng` and the C client, directly (`ng aws ...`) and through a symlink named
//! `aws`, and compared byte for byte with a cold run of the `aws` script with the same
//! environment, directory and stdin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use ng_tests::client::symlink;
use ng_tests::plugins::{python, JsonExt as _, Plugin, PluginServer, TAG_VAR};
use ng_tests::{both_clients, Output};

use super::examples::{self, example_table};

/// The directory of the interpreter that has awscli (where its `aws` script is).
fn python_bin() -> PathBuf {
    python().parent().unwrap().to_path_buf()
}

/// `PATH` for ngd, the clients and the cold run: that interpreter first, as in a shell
/// where `aws` and `python3` are the ones installed together.
fn path_var() -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", python_bin().display())
}

fn aws_server() -> PluginServer {
    let check = Command::new(python())
        .args(["-c", "import awscli"])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "awscli is not installed for {} (pip install 'awscli<2'): {}",
        python().display(),
        String::from_utf8_lossy(&check.stderr)
    );
    PluginServer::builder()
        .plugin(Plugin::raw("aws", example_table("aws.toml")))
        .env("PATH", &path_var())
        .start()
}

/// A cold `aws <args>`: the script next to the interpreter, as a shell would run it.
fn cold(args: &[&str], env: &BTreeMap<String, String>, cwd: &Path) -> Output {
    examples::cold(&python_bin().join("aws"), args, env, cwd)
}

both_clients! {
    /// `aws --version`, `aws configure list` (offline: credentials from the environment,
    /// instance metadata disabled) and a usage error, through `ng aws` and through a
    /// symlink named `aws`, give the same stdout, stderr and exit code as a cold `aws`.
    fn aws_cli_matches_a_cold_run(client) {
        let server = aws_server();
        let home = tempfile::Builder::new().prefix("aws-home-").tempdir().unwrap();
        let cwd = home.path().canonicalize().unwrap();
        let link_dir = tempfile::tempdir().unwrap();
        let link = link_dir.path().join("aws");
        symlink(&client.bin(), &link);
        let env: BTreeMap<String, String> = [
            ("PATH", path_var()),
            ("HOME", cwd.to_string_lossy().into_owned()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
            ("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_string()),
            ("AWS_DEFAULT_REGION", "eu-west-3".to_string()),
            (TAG_VAR, server.tag().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let cases: [&[&str]; 3] = [&["--version"], &["configure", "list"], &["no-such-service-ngw"]];
        for args in cases {
            let cold = cold(args, &env, &cwd);
            // The cold runs themselves did what they should, so equality means something.
            match args {
                ["--version"] => {
                    cold.assert_success();
                    assert!(cold.stdout.starts_with(b"aws-cli/1."), "{cold:?}");
                }
                ["configure", "list"] => {
                    cold.assert_success();
                    let text = cold.stdout_text();
                    assert!(
                        text.contains("****************MPLE") && text.contains("eu-west-3"),
                        "{cold:?}"
                    );
                }
                _ => {
                    cold.assert_code(2);
                    assert!(cold.stderr_text().contains("Invalid choice"), "{cold:?}");
                }
            }
            examples::assert_warm_as_cold(&server, client, "aws", &link, args, &env, &cwd, &cold);
        }
        let report = server.plugin_report("aws").expect("aws in ng-stats");
        assert_eq!(report.u64_at("sessions"), 6, "{report}");
    }
}
