//! Shims that find another program: which pool serves it, if any (docs/configuration.md,
//! "Shims").
//!
//! A plugin table with `program` stands for that file. A shim (`ng` under the command's
//! name) sends the program the shell would have run for the name (`NGD_CLIENT_PROGRAM`);
//! when it is another file (another virtual environment's `yamllint`, another directory
//! of a relative `PATH` entry), [`Routes::route`] decides:
//!
//! * the same file by another path: the plugin's own pool;
//! * a script for the same interpreter family, `#!` line without options: a pool
//!   *derived* from the plugin's table ([`derived_config`]: its interpreter and script in
//!   place of the table's), made on the first session after the file was recognised; for
//!   the Node worker (`sdk = "node"`, whose sessions run the node their script's `#!` line
//!   names, as cold), any Node script without options on its `#!` line, `env` or not
//!   ([`recognise_node`]: another project's `node_modules/.bin/eslint`);
//! * anything else: the client runs it itself (`F exec`), exactly as the shell would.
//!
//! A table whose command line was learned from a launcher ([`PluginConfig::launcher`]: a
//! JVM launcher script, whose `java` command line may depend on the directory and the
//! environment, say a class path read from the project's configuration) is routed by the
//! program *and* the session's directory and environment ([`Context`]): in each one not
//! seen yet, the launcher found (the warmed one, or another shell script of the name) has
//! its command line learned there ([`recognise_launcher`], [`super::launcher::learn`]);
//! the same command line as the table's is the plugin's own pool, another one a derived
//! pool with that command line and `JAVA_HOME`, and one that cannot be learned (the
//! launcher changes the JVM's environment, the system denies watching it) is run by the
//! client.
//!
//! Recognising a file reads it, so it happens on a thread of its own ([`recognise`]),
//! never on the loop thread: until its answer is there, and for the session that makes a
//! derived pool while that pool starts, the client runs the program itself (cold, and
//! exact). What was decided is kept per (plugin, program), and per directory and
//! environment for a launcher's table, at most [`MAX_ROUTES`] of them, until the next
//! reload.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::config::Sdk;
use super::launcher::{self, Context};
use super::PluginConfig;

/// How long a launcher may take to reach its `java` when learned again.
const LEARN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Programs remembered at most; past this a program is not recognised, and runs directly.
pub const MAX_ROUTES: usize = 256;

/// How much of a file is read for its `#!` line.
const SHEBANG_MAX: usize = 256;

/// What a program turned out to be, for the plugin whose shim found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recognised {
    /// The plugin's own program, by another path.
    Same,
    /// A program the plugin's table can serve: this is the derived table's `command`.
    Derivable {
        /// The worker's command line for it.
        command: Vec<String>,
        /// The worker's environment additions (the table's, `JAVA_HOME` for a launcher's).
        env: BTreeMap<String, String>,
    },
    /// Something else; the client runs it (the reason, for the log).
    Foreign(String),
}

/// Where one session goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// This pool serves it.
    Pool(usize),
    /// The client runs the program itself; why, for the log.
    Exec(String),
    /// A pool must be derived for it with this command (the caller makes it and records it
    /// with [`Routes::derived`]); this session runs the program itself meanwhile.
    Derive {
        /// The derived table's `command`.
        command: Vec<String>,
        /// The derived table's `env`.
        env: BTreeMap<String, String>,
        /// What its sessions get on top of the client's environment.
        session_env: SessionEnv,
    },
}

/// Variables a session gets on top of the client's environment: those a launcher sets for
/// its JVM ([`launcher::JvmCommand::env`]); none for a script.
pub type SessionEnv = Vec<(std::ffi::OsString, std::ffi::OsString)>;

/// One remembered program.
#[derive(Debug)]
enum State {
    /// Being recognised on its thread; the answer lands here.
    Recognising(Arc<Mutex<Option<(Recognised, SessionEnv)>>>),
    /// Served by this pool (the plugin's own, or a derived one), its sessions with these
    /// variables.
    Pool(usize, SessionEnv),
    /// Run by the client; the reason.
    Exec(String),
}

/// What a decision is kept for: the plugin's pool, the program its shim found, and for a
/// launcher's table the session's directory and environment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The plugin's pool.
    pub pool: usize,
    /// The program the shim found.
    pub program: Vec<u8>,
    /// The session's directory and environment (a launcher's table only).
    pub context: Option<Context>,
}

/// The programs shims found, per plugin pool. See the module docs.
#[derive(Debug, Default)]
pub struct Routes {
    states: HashMap<Key, State>,
}

impl Routes {
    /// The key of a session of pool `pool` (whose table is `config`) whose shim found
    /// `program`, asked from `context` (used for a launcher's table only).
    pub fn key(pool: usize, config: &PluginConfig, program: &[u8], context: Context) -> Key {
        Key {
            pool,
            program: program.to_vec(),
            context: config.launcher.then_some(context),
        }
    }

    /// Where the session of `key` goes (its pool's table is `config`, whose `program` is
    /// the warmed one). `pool_active` says whether a pool may still take sessions.
    pub fn route(
        &mut self,
        key: &Key,
        config: &PluginConfig,
        pool_active: impl Fn(usize) -> bool,
    ) -> Route {
        let pool = key.pool;
        let Some(warmed) = &config.program else {
            return Route::Pool(pool);
        };
        if key.context.is_none() && warmed.as_os_str().as_bytes() == key.program {
            return Route::Pool(pool);
        }
        let state = match self.states.get(key) {
            Some(state) => state,
            None => {
                if self.states.len() >= MAX_ROUTES {
                    return Route::Exec("too many programs seen to remember another".into());
                }
                let slot = Arc::new(Mutex::new(None));
                let answer = Arc::clone(&slot);
                let (warmed, command, env) =
                    (warmed.clone(), config.command.clone(), config.env.clone());
                let node = config.sdk == Some(Sdk::Node);
                let found = PathBuf::from(OsStr::from_bytes(&key.program));
                let context = key.context.clone();
                let spawned = std::thread::Builder::new()
                    .name("ngd-recognise".into())
                    .spawn(move || {
                        let r = match &context {
                            Some(context) => {
                                recognise_launcher(&warmed, &command, &env, &found, context)
                            }
                            None if node => {
                                (recognise_node(&warmed, &command, &found, &env), Vec::new())
                            }
                            None => (recognise(&warmed, &command, &found, &env), Vec::new()),
                        };
                        *answer.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                    });
                if spawned.is_err() {
                    return Route::Exec("cannot start a thread to recognise it".into());
                }
                self.states.insert(key.clone(), State::Recognising(slot));
                let doing = if key.context.is_some() {
                    "learning its java command line in this directory and environment"
                } else {
                    "recognising it"
                };
                return Route::Exec(format!("{doing}; this session runs it directly"));
            }
        };
        match state {
            State::Pool(p, _) if pool_active(*p) => Route::Pool(*p),
            State::Pool(..) => Route::Exec("its pool is disabled".into()),
            State::Exec(reason) => Route::Exec(reason.clone()),
            State::Recognising(slot) => {
                let answer = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
                match answer {
                    None => Route::Exec("still recognising it".into()),
                    Some((Recognised::Same, session_env)) => {
                        self.states
                            .insert(key.clone(), State::Pool(pool, session_env));
                        Route::Pool(pool)
                    }
                    Some((Recognised::Foreign(reason), _)) => {
                        self.states.insert(key.clone(), State::Exec(reason.clone()));
                        Route::Exec(reason)
                    }
                    Some((Recognised::Derivable { command, env }, session_env)) => Route::Derive {
                        command,
                        env,
                        session_env,
                    },
                }
            }
        }
    }

    /// Records that `derived` now serves the sessions of `key`, with `session_env`.
    pub fn derived(&mut self, key: &Key, derived: usize, session_env: SessionEnv) {
        self.states
            .insert(key.clone(), State::Pool(derived, session_env));
    }

    /// What the sessions of `key` get on top of the client's environment (once routed to a
    /// pool).
    pub fn session_env(&self, key: &Key) -> &[(std::ffi::OsString, std::ffi::OsString)] {
        match self.states.get(key) {
            Some(State::Pool(_, env)) => env,
            _ => &[],
        }
    }

    /// Records that the program of `key` cannot be served.
    pub fn refuse(&mut self, key: &Key, reason: String) {
        self.states.insert(key.clone(), State::Exec(reason));
    }

    /// Forgets everything (a reload: tables and pools change).
    pub fn clear(&mut self) {
        self.states.clear();
    }
}

/// The table for a pool derived from `parent` to serve `program` with `command` and `env`;
/// it is named `<parent>~<serial>` (which names its default log file too).
pub fn derived_config(
    parent: &PluginConfig,
    program: &Path,
    command: Vec<String>,
    env: BTreeMap<String, String>,
    serial: u64,
) -> PluginConfig {
    let mut config = parent.clone();
    config.name = format!("{}~{serial}", parent.name);
    config.command = command;
    config.env = env;
    config.program = Some(program.to_path_buf());
    config
}

/// What `found` is for a launcher's table (`command` with `env`, learned from `warmed`), in
/// `context`: its `java` command line learned there, the table's own or another, and the
/// variables the launcher sets for it; `found` is learned when it is `warmed` or another
/// shell script. Runs the launcher (never the program): call off the loop thread.
pub fn recognise_launcher(
    warmed: &Path,
    command: &[String],
    env: &BTreeMap<String, String>,
    found: &Path,
    context: &Context,
) -> (Recognised, SessionEnv) {
    let foreign = |reason: String| (Recognised::Foreign(reason), Vec::new());
    let same = matches!(
        (std::fs::canonicalize(warmed), std::fs::canonicalize(found)),
        (Ok(a), Ok(b)) if a == b
    );
    if !same {
        match shebang(found) {
            Ok(interpreter) if is_shell(&interpreter) => {}
            Ok(interpreter) => {
                return foreign(format!("a script for {interpreter}, not a shell launcher"))
            }
            Err(reason) => return foreign(reason),
        }
    }
    let Some(worker) = command.first() else {
        return foreign("the plugin's table has no command".into());
    };
    let learned = match launcher::learn(found, context, LEARN_TIMEOUT) {
        Ok(learned) => learned,
        Err(e) => return foreign(format!("its java command line cannot be learned here: {e}")),
    };
    let Some(home) = learned.java_home.to_str() else {
        return foreign("its JDK's path is not UTF-8".into());
    };
    let mut derived = Vec::with_capacity(1 + learned.args.len());
    derived.push(worker.clone());
    derived.extend(learned.args);
    let mut derived_env = env.clone();
    derived_env.insert("JAVA_HOME".to_owned(), home.to_owned());
    let recognised = if derived == command && derived_env == *env {
        Recognised::Same
    } else {
        Recognised::Derivable {
            command: derived,
            env: derived_env,
        }
    };
    (recognised, learned.env)
}

/// A POSIX shell (`sh`, `bash`, `dash`, `ksh`, `zsh`), by its path.
fn is_shell(interpreter: &str) -> bool {
    matches!(
        interpreter.rsplit('/').next(),
        Some("sh" | "bash" | "dash" | "ksh" | "zsh")
    )
}

/// What `found` is for a plugin whose table runs `warmed` with `command` (and `env`).
/// Reads files: call off the loop thread.
pub fn recognise(
    warmed: &Path,
    command: &[String],
    found: &Path,
    env: &BTreeMap<String, String>,
) -> Recognised {
    let (Ok(a), Ok(b)) = (std::fs::canonicalize(warmed), std::fs::canonicalize(found)) else {
        return Recognised::Foreign(format!("{} cannot be resolved", found.display()));
    };
    if a == b {
        return Recognised::Same;
    }
    let parent = match shebang(warmed) {
        Ok(i) => i,
        Err(reason) => return Recognised::Foreign(format!("the warmed program: {reason}")),
    };
    if command.first().map(String::as_str) != Some(parent.as_str()) {
        return Recognised::Foreign(
            "the plugin's table does not run its program with its #! interpreter".into(),
        );
    }
    let interpreter = match shebang(found) {
        Ok(i) => i,
        Err(reason) => return Recognised::Foreign(reason),
    };
    if family(&interpreter) != family(&parent) {
        return Recognised::Foreign(format!(
            "a script for {interpreter}, not for {}",
            family(&parent)
        ));
    }
    if !Path::new(&interpreter).is_file() {
        return Recognised::Foreign(format!("its interpreter {interpreter} is not found"));
    }
    let Some(found_text) = found.to_str() else {
        return Recognised::Foreign("its path is not UTF-8".into());
    };
    let warmed_text = warmed.to_string_lossy();
    let mut derived = Vec::with_capacity(command.len());
    derived.push(interpreter.clone());
    for word in &command[1..] {
        derived.push(if *word == warmed_text {
            found_text.to_owned()
        } else {
            word.clone()
        });
    }
    if !derived[1..].iter().any(|w| w == found_text) {
        return Recognised::Foreign("the plugin's table does not name its program".into());
    }
    Recognised::Derivable {
        command: derived,
        env: env.clone(),
    }
}

/// What `found` is for a Node worker's table (`sdk = "node"`) that runs `warmed` with
/// `command` (`[NODE, ..., "NAME=WARMED", ...]`): the same file, or a Node script whose
/// `#!` line gives node no options (`#!/usr/bin/env node`, `#!/usr/bin/node`), served by
/// the same table with `NAME=FOUND`; the worker runs each session with the node that line
/// names, as cold. Reads files: call off the loop thread.
pub fn recognise_node(
    warmed: &Path,
    command: &[String],
    found: &Path,
    env: &BTreeMap<String, String>,
) -> Recognised {
    let (Ok(a), Ok(b)) = (std::fs::canonicalize(warmed), std::fs::canonicalize(found)) else {
        return Recognised::Foreign(format!("{} cannot be resolved", found.display()));
    };
    if a == b {
        return Recognised::Same;
    }
    if let Err(reason) = node_shebang(found) {
        return Recognised::Foreign(reason);
    }
    let Some(found_text) = found.to_str() else {
        return Recognised::Foreign("its path is not UTF-8".into());
    };
    let warmed_text = warmed.to_string_lossy();
    let mut named = false;
    let mut derived = Vec::with_capacity(command.len());
    for (i, word) in command.iter().enumerate() {
        let spec = word
            .split_once('=')
            .filter(|(_, script)| *script == warmed_text);
        derived.push(match spec {
            Some((name, _)) if i > 0 => {
                named = true;
                format!("{name}={found_text}")
            }
            _ if i > 0 && *word == warmed_text => {
                named = true;
                found_text.to_owned()
            }
            _ => word.clone(),
        });
    }
    if !named {
        return Recognised::Foreign("the plugin's table does not name its program".into());
    }
    Recognised::Derivable {
        command: derived,
        env: env.clone(),
    }
}

/// Whether a file is a Node script whose `#!` line gives node no options: `Err` with why
/// not.
fn node_shebang(path: &Path) -> Result<(), String> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(SHEBANG_MAX);
    std::fs::File::open(path)
        .and_then(|f| f.take(SHEBANG_MAX as u64).read_to_end(&mut head))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(line) = head.strip_prefix(b"#!") else {
        return Err(format!("{} is not a script (no #! line)", path.display()));
    };
    let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words: Vec<&str> = line.split_whitespace().collect();
    if words
        .first()
        .is_some_and(|w| w.rsplit('/').next() == Some("env"))
    {
        words.remove(0);
        if words.first() == Some(&"-S") {
            words.remove(0);
        }
    }
    match words.as_slice() {
        [node] if matches!(node.rsplit('/').next(), Some("node" | "nodejs")) => Ok(()),
        [node, ..] if matches!(node.rsplit('/').next(), Some("node" | "nodejs")) => {
            Err(format!("{}'s #! line gives node options", path.display()))
        }
        _ => Err(format!("{} is not a Node script", path.display())),
    }
}

/// The interpreter of a script's `#!` line: an absolute path, with no options.
fn shebang(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(SHEBANG_MAX);
    std::fs::File::open(path)
        .and_then(|f| f.take(SHEBANG_MAX as u64).read_to_end(&mut head))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(line) = head.strip_prefix(b"#!") else {
        return Err(format!("{} is not a script (no #! line)", path.display()));
    };
    let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = std::str::from_utf8(line)
        .map_err(|_| format!("{}'s #! line is not UTF-8", path.display()))?
        .trim();
    let mut words = line.split_whitespace();
    let interpreter = words.next().unwrap_or_default();
    if !interpreter.starts_with('/') {
        return Err(format!("{}'s #! line names no interpreter", path.display()));
    }
    if words.next().is_some() {
        return Err(format!(
            "{}'s #! line gives the interpreter options or goes through env",
            path.display()
        ));
    }
    Ok(interpreter.to_owned())
}

/// An interpreter's family: its file name without a version (`python3.12` → `python`).
fn family(interpreter: &str) -> &str {
    let name = interpreter.rsplit('/').next().unwrap_or(interpreter);
    name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(program: &str, command: &[&str]) -> PluginConfig {
        let words: Vec<String> = command.iter().map(|w| format!("{w:?}")).collect();
        let mut c = crate::config::ServerConfig::from_toml_str(&format!(
            "[[plugin]]\nname = \"tool\"\ncommand = [{}]\ncommands = [\"tool\"]\nprogram = {program:?}\n",
            words.join(", ")
        ))
        .unwrap();
        c.plugins.remove(0)
    }

    fn script(path: &Path, first_line: &str) {
        std::fs::write(path, format!("{first_line}\nprint('hi')\n")).unwrap();
    }

    #[test]
    fn families_drop_versions() {
        assert_eq!(family("/usr/bin/python3.12"), "python");
        assert_eq!(family("/v/bin/python"), "python");
        assert_eq!(family("/usr/bin/ruby3.1"), "ruby");
        assert_ne!(family("/bin/sh"), family("/usr/bin/python3"));
    }

    #[test]
    fn another_script_of_the_same_interpreter_is_derivable() {
        let d = tempfile::tempdir().unwrap();
        let (warmed, other, shell, same) = (
            d.path().join("warmed"),
            d.path().join("other"),
            d.path().join("shell"),
            d.path().join("same"),
        );
        let python = std::fs::canonicalize("/proc/self/exe").unwrap();
        let python = python.to_str().unwrap();
        script(&warmed, &format!("#!{python}"));
        script(&other, &format!("#!{python}"));
        script(&shell, "#!/bin/sh");
        std::os::unix::fs::symlink(&warmed, &same).unwrap();
        let w = warmed.to_str().unwrap();
        let command: Vec<String> = [python, "-m", "ngw", "console-script", w]
            .map(String::from)
            .to_vec();
        assert_eq!(
            recognise(&warmed, &command, &other, &BTreeMap::new()),
            Recognised::Derivable {
                command: [
                    python,
                    "-m",
                    "ngw",
                    "console-script",
                    other.to_str().unwrap()
                ]
                .map(String::from)
                .to_vec(),
                env: BTreeMap::new(),
            }
        );
        assert_eq!(
            recognise(&warmed, &command, &same, &BTreeMap::new()),
            Recognised::Same
        );
        assert!(matches!(
            recognise(&warmed, &command, &shell, &BTreeMap::new()),
            Recognised::Foreign(_)
        ));
        assert!(matches!(
            recognise(
                &warmed,
                &command,
                Path::new("/nonexistent"),
                &BTreeMap::new()
            ),
            Recognised::Foreign(_)
        ));
        script(&other, &format!("#!{python} -u"));
        assert!(matches!(
            recognise(&warmed, &command, &other, &BTreeMap::new()),
            Recognised::Foreign(_)
        ));
    }

    fn here() -> Context {
        Context {
            cwd: "/".into(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        }
    }

    #[test]
    fn another_projects_node_script_is_derivable() {
        let d = tempfile::tempdir().unwrap();
        let bin = |project: &str| {
            let dir = d.path().join(project).join("node_modules");
            std::fs::create_dir_all(dir.join(".bin")).unwrap();
            std::fs::create_dir_all(dir.join("eslint/bin")).unwrap();
            let script = dir.join("eslint/bin/eslint.js");
            std::fs::write(&script, "#!/usr/bin/env node\nrequire('x');\n").unwrap();
            let link = dir.join(".bin/eslint");
            std::os::unix::fs::symlink("../eslint/bin/eslint.js", &link).unwrap();
            (link, script)
        };
        let (warmed, warmed_script) = bin("a");
        let (other, other_script) = bin("b");
        let w = warmed.to_str().unwrap();
        let command = vec!["/usr/bin/node".to_owned(), format!("eslint={w}")];
        let env = BTreeMap::from([("NODE_ENV".to_owned(), "test".to_owned())]);
        assert_eq!(
            recognise_node(&warmed, &command, &warmed_script, &env),
            Recognised::Same
        );
        assert_eq!(
            recognise_node(&warmed, &command, &other, &env),
            Recognised::Derivable {
                command: vec![
                    "/usr/bin/node".into(),
                    format!("eslint={}", other.display())
                ],
                env: env.clone(),
            }
        );
        for (line, derivable) in [
            ("#!/usr/bin/node", true),
            ("#!/usr/bin/env -S node", true),
            ("#!/usr/bin/env -S node --no-warnings", false),
            ("#!/usr/bin/env python3", false),
            ("#!/bin/sh", false),
        ] {
            std::fs::write(&other_script, format!("{line}\n")).unwrap();
            let r = recognise_node(&warmed, &command, &other, &env);
            assert_eq!(
                matches!(r, Recognised::Derivable { .. }),
                derivable,
                "{line}: {r:?}"
            );
        }
        // The generic rule cannot read `#!/usr/bin/env node`; the Node one must be asked.
        std::fs::write(&other_script, "#!/usr/bin/env node\n").unwrap();
        assert!(matches!(
            recognise(&warmed, &command, &other, &env),
            Recognised::Foreign(_)
        ));
    }

    #[test]
    fn routes_go_by_the_program_and_recognise_off_the_caller() {
        let mut routes = Routes::default();
        let c = table("/v/bin/tool", &["/v/bin/python", "/v/bin/tool"]);
        let key = |program: &[u8]| Routes::key(3, &c, program, here());
        let active = |_: usize| true;
        assert_eq!(
            routes.route(&key(b"/v/bin/tool"), &c, active),
            Route::Pool(3)
        );
        // Unknown: runs directly while it is recognised; then remembered.
        let unknown = key(b"/nonexistent/tool");
        assert_eq!(unknown.context, None);
        assert!(matches!(routes.route(&unknown, &c, active), Route::Exec(_)));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match routes.route(&unknown, &c, active) {
                Route::Exec(reason) if reason.contains("recognising") => {}
                Route::Exec(_) => break,
                other => panic!("{other:?}"),
            }
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let other = key(b"/w/bin/tool");
        routes.derived(&other, 7, Vec::new());
        assert_eq!(routes.route(&other, &c, active), Route::Pool(7));
        assert!(matches!(
            routes.route(&other, &c, |_| false),
            Route::Exec(_)
        ));
        // A table without `program` is routed by name, whatever the shim found.
        let mut by_name = c.clone();
        by_name.program = None;
        assert_eq!(
            routes.route(&key(b"/x/tool"), &by_name, active),
            Route::Pool(3)
        );
    }

    /// A launcher's table: in each directory and environment its launcher is learned
    /// again, the warmed one included; the same command line is the plugin's own pool, and
    /// another one a derived pool with its JDK.
    #[test]
    fn a_launchers_table_is_learned_again_in_each_directory_and_environment() {
        let d = tempfile::tempdir().unwrap();
        let d = std::fs::canonicalize(d.path()).unwrap();
        let home = d.join("jdk");
        std::fs::create_dir_all(home.join("bin")).unwrap();
        std::fs::write(home.join("release"), "JAVA_VERSION=\"17\"\n").unwrap();
        std::fs::write(home.join("bin/java"), "#!/bin/sh\nexit 9\n").unwrap();
        let warmed = d.join("tool");
        let text = format!(
            "#!/bin/sh\nexec {}/bin/java -cp \"$(cat cp)\" Main \"$@\"\n",
            home.display()
        );
        std::fs::write(&warmed, text).unwrap();
        for f in [&warmed, &home.join("bin/java")] {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let (a, b) = (d.join("a"), d.join("b"));
        for (dir, cp) in [(&a, "/a.jar"), (&b, "/b.jar")] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("cp"), cp).unwrap();
        }
        let mut c = table(
            warmed.to_str().unwrap(),
            &["/x/ngw-java", "-cp", "/a.jar", "Main"],
        );
        c.launcher = true;
        c.env
            .insert("JAVA_HOME".into(), home.to_string_lossy().into_owned());
        let in_dir = |dir: &Path| Context {
            cwd: dir.to_path_buf(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        };
        let learned =
            |dir: &Path| recognise_launcher(&warmed, &c.command, &c.env, &warmed, &in_dir(dir)).0;
        assert_eq!(learned(&a), Recognised::Same);
        assert_eq!(
            learned(&b),
            Recognised::Derivable {
                command: ["/x/ngw-java", "-cp", "/b.jar", "Main"]
                    .map(String::from)
                    .to_vec(),
                env: c.env.clone(),
            }
        );
        // Routes: the key holds the context; the first session of each runs directly.
        let mut routes = Routes::default();
        let key = Routes::key(3, &c, warmed.to_str().unwrap().as_bytes(), in_dir(&a));
        assert_eq!(key.context, Some(in_dir(&a)));
        assert!(matches!(routes.route(&key, &c, |_| true), Route::Exec(_)));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            match routes.route(&key, &c, |_| true) {
                Route::Exec(reason) if reason.contains("recognising") => {}
                Route::Pool(3) => break,
                other => panic!("{other:?}"),
            }
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // A compiled program found by the shim is never run to learn it.
        assert!(matches!(
            recognise_launcher(
                &warmed,
                &c.command,
                &c.env,
                Path::new("/bin/true"),
                &in_dir(&a)
            )
            .0,
            Recognised::Foreign(_)
        ));
    }
}
