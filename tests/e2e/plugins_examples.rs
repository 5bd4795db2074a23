//! What the tests of `examples/*.toml` share: an example's `[[plugin]]` table as ngd
//! should load it from the tests, a cold run of the real program, and the comparison of
//! the two.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use ng_tests::plugins::{repo_root, toml_str, PluginServer};
use ng_tests::{assert_bytes_eq, Client, Output};

/// `examples/<file>`'s `[[plugin]]` table, with its `cwd = ".."` pointing at the
/// repository (the only change: the test's ngd does not run from `examples/`).
pub fn example_table(file: &str) -> String {
    let example = repo_root().join("examples").join(file);
    let text = std::fs::read_to_string(&example).unwrap();
    let (_, table) = text
        .split_once("[[plugin]]\n")
        .unwrap_or_else(|| panic!("examples/{file} has no [[plugin]] table"));
    let cwd_line = table
        .lines()
        .find(|l| l.starts_with("cwd = "))
        .unwrap_or_else(|| panic!("examples/{file} sets no cwd"));
    assert_eq!(
        cwd_line.split('#').next().unwrap().trim(),
        "cwd = \"..\"",
        "examples/{file}'s cwd changed; update this test"
    );
    table.replace(
        cwd_line,
        &format!("cwd = {}", toml_str(&repo_root().to_string_lossy())),
    )
}

/// A cold `<program> <args>` with exactly `env`, in `cwd`, stdin from the null device: as
/// a shell would run the installed script.
pub fn cold(program: &Path, args: &[&str], env: &BTreeMap<String, String>, cwd: &Path) -> Output {
    assert!(program.is_file(), "{} is missing", program.display());
    let started = std::time::Instant::now();
    let out = Command::new(program)
        .args(args)
        .env_clear()
        .envs(env)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    Output {
        what: format!("[cold] {} {args:?}", program.display()),
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
        elapsed: started.elapsed(),
    }
}

/// The warm run showed what the cold one did: exit code, stdout, stderr.
#[track_caller]
pub fn assert_same(cold: &Output, warm: &Output) {
    let context = format!("cold:\n{cold:?}\nwarm:\n{warm:?}");
    assert_eq!(cold.code(), warm.code(), "exit codes differ\n{context}");
    assert_bytes_eq!(cold.stdout, warm.stdout, "stdout differs\n{context}");
    assert_bytes_eq!(cold.stderr, warm.stderr, "stderr differs\n{context}");
}

/// Runs `<command> <args>` warm twice, as `ng <command> ...` and through `link` (a symlink
/// to the client named after the command), with exactly `env` in `cwd`, and asserts that
/// each showed what `cold` did; prints the three timings.
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn assert_warm_as_cold(
    server: &PluginServer,
    client: Client,
    command: &str,
    link: &Path,
    args: &[&str],
    env: &BTreeMap<String, String>,
    cwd: &Path,
    cold: &Output,
) {
    let warm = |via_link: bool| {
        let mut cmd = server.cmd(client);
        cmd = if via_link {
            cmd.program(link)
        } else {
            cmd.arg(command)
        };
        for (k, v) in env {
            cmd = cmd.env(k, v);
        }
        cmd.cwd(cwd).args(args).run()
    };
    let direct = warm(false);
    assert_same(cold, &direct);
    let linked = warm(true);
    assert_same(cold, &linked);
    eprintln!(
        "{command} {args:?} with {client}: cold {:?}, ng {command} {:?}, symlink {:?}",
        cold.elapsed, direct.elapsed, linked.elapsed
    );
}
