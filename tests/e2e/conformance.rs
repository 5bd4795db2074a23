//! The worker conformance suite (`ng_tests::conformance`, docs/ngw.md "The worker
//! conformance suite") run against each worker: the Python SDK's fork mode (`python3 -m
//! ngw script`), the JVM's exact mode (`ngw-java` with a `main` class) and the Ruby worker
//! (`ngw-ruby`) and the Node worker (`ngw-node`). A worker is a
//! [`Worker`] value (its program's setup and what its log says on each path) and one
//! `conformance!` line with the paths it serves.

use ng_tests::conformance::{self, Route, Setup, Spares, Worker};
use ng_tests::plugins::{fixture, python, repo_root, Plugin};
use ng_tests::{bins, java, jvm, Client};
use std::path::Path;

/// Python: the program is a script file (`#!` the interpreter) and a module of its own
/// beside it, served by `python3 -m ngw script conformance=FILE --preload
/// conformance_trace` (`--no-prefork`: no spare); the module is the source a stale route
/// changes.
fn python_setup(dir: &Path, spares: Spares) -> Setup {
    let script = dir.join("conformance.py");
    let text = std::fs::read_to_string(fixture("conformance.py")).unwrap();
    ng_testkit::exe::write_executable(&script, format!("#!{}\n{text}", python().display()));
    let module = dir.join("conformance_trace.py");
    std::fs::copy(fixture("conformance_trace.py"), &module).unwrap();
    let target = format!("{}={}", conformance::COMMAND, script.display());
    let py = python().to_string_lossy().into_owned();
    let mut command = vec![
        py.as_str(),
        "-m",
        "ngw",
        "script",
        target.as_str(),
        "--preload",
        "conformance_trace",
    ];
    if spares == Spares::Off {
        command.push("--no-prefork");
    }
    Setup {
        cold: script.clone(),
        // The terminal's shell has LANG=C.UTF-8 (`ng_tests::pty`): the worker's own key.
        plugin: Plugin::new("conformance", &command)
            .commands(&[conformance::COMMAND])
            .env("LANG", "C.UTF-8"),
        source: module,
    }
}

const PYTHON: Worker = Worker {
    name: "python",
    setup: python_setup,
    cold_way: "the cold way",
    fresh_is_cold: false,
    stale: Some("stale: code changed on disk"),
    learned: Some("preload"),
    comment: "#",
    not_applicable: &[],
    cold_env: ("PYTHONHASHSEED", "4099"),
};

/// The JVM's exact mode: `ngtest.Conformance` (tests/java), cold as `java -cp NAILS
/// ngtest.Conformance` (a script that execs it), warm through `ngw-java` with the same
/// class path and class.
fn jvm_setup(dir: &Path, _spares: Spares) -> Setup {
    let nails = java::nails_dir().to_string_lossy().into_owned();
    let cold = dir.join("conformance");
    ng_testkit::exe::write_executable(
        &cold,
        format!(
            "#!/bin/sh\nexec {} -cp {nails} ngtest.Conformance \"$@\"\n",
            bins::java().display()
        ),
    );
    let args = ["-cp".into(), nails, "ngtest.Conformance".into()];
    Setup {
        cold: cold.clone(),
        plugin: jvm::program_plugin("conformance", &[conformance::COMMAND], &args),
        source: cold,
    }
}

const JVM_EXACT: Worker = Worker {
    name: "jvm-exact",
    setup: jvm_setup,
    cold_way: "ran cold",
    fresh_is_cold: true,
    stale: None,
    learned: None,
    comment: "#",
    // The JVM answers SIGQUIT itself, with a thread dump (its threads' ids and states),
    // and lets a program handle it only under -Xrs, which refuses it SIGINT instead.
    not_applicable: &[("ctrl-backslash", "the JVM prints a thread dump")],
    cold_env: ("CONFORMANCE_PROBE", "cold"),
};

/// Ruby: the program is a script file (`#!/usr/bin/ruby`) and a file of its own beside
/// it, served by `ngw-ruby --preload FILE conformance=SCRIPT` (`--no-spare`: no spare),
/// learning into a state directory of the world's own; the preloaded file is the source a
/// stale route changes.
fn ruby_setup(dir: &Path, spares: Spares) -> Setup {
    let fixtures = repo_root().join("tests/fixtures/ruby");
    let script = dir.join("conformance.rb");
    let text = std::fs::read_to_string(fixtures.join("conformance.rb")).unwrap();
    ng_testkit::exe::write_executable(&script, format!("#!{RUBY}\n{text}"));
    let module = dir.join("conformance_trace.rb");
    std::fs::copy(fixtures.join("conformance_trace.rb"), &module).unwrap();
    let worker = repo_root().join("sdk/ruby/bin/ngw-ruby");
    let state = dir.join("state");
    let target = format!("{}={}", conformance::COMMAND, script.display());
    let mut command: Vec<String> = vec![
        RUBY.into(),
        worker.to_string_lossy().into_owned(),
        "--state-dir".into(),
        state.to_string_lossy().into_owned(),
        "--preload".into(),
        module.to_string_lossy().into_owned(),
        target,
    ];
    if spares == Spares::Off {
        command.push("--no-spare".into());
    }
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    Setup {
        cold: script.clone(),
        // The terminal's shell has LANG=C.UTF-8 (`ng_tests::pty`): part of the worker's key.
        plugin: Plugin::new("conformance", &command)
            .commands(&[conformance::COMMAND])
            .env("LANG", "C.UTF-8"),
        source: module,
    }
}

/// Debian's ruby (`scripts/peers/ruby`).
const RUBY: &str = "/usr/bin/ruby";

const RUBY_WORKER: Worker = Worker {
    name: "ruby",
    setup: ruby_setup,
    cold_way: "ran cold",
    fresh_is_cold: false,
    stale: Some("stale: "),
    learned: Some("learned 1 file(s) to preload"),
    comment: "#",
    not_applicable: &[],
    cold_env: ("RUBYLIB", "/nonexistent"),
};

/// Node: the program is a script file (`#!/usr/bin/env node`) and a module of its own
/// beside it, served by `ngw-node conformance=SCRIPT` (its spares learn the module), with a
/// state directory of the world's own. Node cannot fork: a session that no spare takes
/// runs in a fresh `node`, the cold way; the script is the source a stale route changes
/// (every spare checks it before it takes a session).
fn node_setup(dir: &Path, spares: Spares) -> Setup {
    let fixtures = repo_root().join("tests/fixtures/node");
    let script = dir.join("conformance.js");
    let text = std::fs::read_to_string(fixtures.join("conformance.js")).unwrap();
    ng_testkit::exe::write_executable(&script, format!("#!/usr/bin/env node\n{text}"));
    std::fs::copy(
        fixtures.join("conformance_trace.js"),
        dir.join("conformance_trace.js"),
    )
    .unwrap();
    let worker = repo_root().join("sdk/node/bin/ngw-node");
    let state = dir.join("state");
    let target = format!("{}={}", conformance::COMMAND, script.display());
    let mut command: Vec<String> = vec![
        "node".into(),
        worker.to_string_lossy().into_owned(),
        "--state-dir".into(),
        state.to_string_lossy().into_owned(),
        target,
    ];
    if spares == Spares::Off {
        command.push("--no-spare".into());
    }
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    Setup {
        cold: script.clone(),
        plugin: Plugin::new("conformance", &command)
            .commands(&[conformance::COMMAND])
            .env("LANG", "C.UTF-8"),
        source: script,
    }
}

const NODE_WORKER: Worker = Worker {
    name: "node",
    setup: node_setup,
    cold_way: "ran cold",
    fresh_is_cold: true,
    stale: Some("changed since the spare loaded it"),
    learned: None,
    comment: "//",
    not_applicable: &[],
    cold_env: ("NODE_CONFORMANCE", "cold"),
};

/// One test per path for `$worker`: `conformance!(module, WORKER, test = Route, ...)`.
macro_rules! conformance {
    ($module:ident, $worker:expr, $($test:ident = $route:expr),* $(,)?) => {
        mod $module {
            use super::*;
            $(
                #[test]
                fn $test() {
                    conformance::check(&$worker, $route);
                }
            )*
            #[test]
            fn pipes_ours() {
                conformance::check_pipes(&$worker, Route::Spare, Client::Ours);
            }
            #[test]
            fn pipes_c_client() {
                conformance::check_pipes(&$worker, Route::Spare, Client::CClient);
            }
            #[test]
            fn classic_clients_and_tcp() {
                conformance::check_classic(&$worker);
            }
        }
    };
}

conformance!(
    python,
    PYTHON,
    root = Route::Root,
    spare = Route::Spare,
    other_lang = Route::OtherKey("LANG", "C"),
    other_hash_seed = Route::OtherKey("PYTHONHASHSEED", "7"),
    other_python_path = Route::OtherKey("PYTHONPATH", "/nonexistent"),
    cold_way = Route::ColdWay("PYTHONHASHSEED"),
    stale_code = Route::Stale,
    learning = Route::Learning,
);

conformance!(
    jvm_exact,
    JVM_EXACT,
    spare = Route::Spare,
    cold = Route::ColdWay("CONFORMANCE_PROBE"),
    other_dir = Route::OtherDir,
);

conformance!(
    ruby,
    RUBY_WORKER,
    root = Route::Root,
    spare = Route::Spare,
    cold_way_lang = Route::ColdWay("LANG"),
    cold_way_rubylib = Route::ColdWay("RUBYLIB"),
    stale_code = Route::Stale,
    learning = Route::Learning,
);

conformance!(
    node,
    NODE_WORKER,
    spare = Route::Spare,
    cold_way_lang = Route::ColdWay("LANG"),
    cold_way_node_var = Route::ColdWay("NODE_CONFORMANCE"),
    other_dir = Route::OtherDir,
    stale_code = Route::Stale,
);
