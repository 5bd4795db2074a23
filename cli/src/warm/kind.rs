//! What a program is, and the `[[plugin]]` table that serves it.
//!
//! [`identify`] looks at the file a shell would run for a name: its first bytes (a `#!`
//! line, an ELF header) and its name ([`recognise`]): a Python, Ruby or Node script by its
//! `#!` interpreter (Node's in [`super::node`]), a Nushell plugin by its name, a jar; and
//! it runs a shell script that may launch `java` once to learn how. What ngd can serve
//! exactly becomes a [`Program`]; everything else a [`Refusal`] that says why.
//! [`Program::fragment`] writes the drop-in file's text, with the [`Record`] that says what
//! the file is for. MCP servers are not found on `PATH` but read from a client's
//! configuration file ([`mcp_servers`]), and fledge
//! plugins from fledge's plugins directory ([`fledge_plugin`]). [`python_shebang`] gives
//! the interpreter of a Python script for `ngd bench`'s ad hoc server.
//!
//! JVM programs are served by the JVM worker's launcher `ngw-java`, which takes `java`'s
//! command line: an executable jar becomes `ngw-java -jar JAR`, and a shell script that
//! launches `java` (Debian's `/usr/bin/checkstyle` and `/usr/bin/rhino`, groovy's
//! `startGroovy`, ...) becomes the `java` command line it runs, with the JDK it runs,
//! learned by running it once with its `exec`s watched ([`super::launcher`]; where that is
//! denied, with a stand-in `java` that records its arguments, [`super::stand_in`]).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use ng_server::config::Fragment;
use serde::{Deserialize, Serialize};

use crate::measure::find_program;

/// The `[warm]` record of a drop-in file `ngd warm` wrote.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// What the program is.
    pub kind: Kind,
    /// The program (the script, the plugin, the MCP configuration file).
    pub program: PathBuf,
    /// The shims placed for it.
    #[serde(default)]
    pub shims: Vec<String>,
}

impl Record {
    /// The record of a drop-in file; `None` when it has no `[warm]` table, or one that is
    /// not a record `ngd warm` writes.
    pub fn of(fragment: &Fragment) -> Option<Record> {
        let table = fragment.warm.clone()?;
        toml::Value::Table(table).try_into().ok()
    }

    /// Whether it was written for `program`.
    pub fn describes(&self, program: &Program) -> bool {
        self.kind == program.kind() && self.program == program.shown()
    }

    /// Whether a drop-in file's text has a `[warm]` table, read or not: `ngd warm` wrote it.
    pub fn is_in(text: &str) -> bool {
        text.lines().any(|l| l.trim() == "[warm]")
    }
}

/// The kinds of program `ngd warm` serves (the `[warm]` record's `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A Python console script or script, by its `#!` interpreter (fork mode, `python3 -m
    /// ngw console-script`, with the SDK ngd carries).
    Python,
    /// A Nushell plugin (`nu_plugin_*`), through the nu bridge.
    Nu,
    /// A fledge plugin's command, through the fledge-v1 bridge.
    Fledge,
    /// An MCP server's tools, through the JSON-RPC bridge (`profile = "mcp"`).
    Mcp,
    /// A JVM program (a jar, or a shell launcher of `java`), through `ngw-java`.
    Jvm,
    /// A Ruby script (a RubyGems binstub, a script with a ruby `#!` line), by its `#!`
    /// interpreter, through the Ruby worker ngd carries (`sdk = "ruby"`).
    Ruby,
    /// A Node script (an npm bin link, a script with a node `#!` line), through the Node
    /// worker ngd carries (`sdk = "node"`).
    Node,
}

impl Kind {
    /// Its name in the `[warm]` record and in `ngd list`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Python => "python",
            Kind::Nu => "nu",
            Kind::Fledge => "fledge",
            Kind::Mcp => "mcp",
            Kind::Jvm => "jvm",
            Kind::Ruby => "ruby",
            Kind::Node => "node",
        }
    }
}

/// A program `ngd warm` can serve, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// A Python script run by `interpreter` (absolute; its `#!` line's, resolved on `PATH`
    /// for `#!/usr/bin/env python3`).
    Python {
        /// The script.
        script: PathBuf,
        /// The interpreter the worker runs.
        interpreter: PathBuf,
    },
    /// A Ruby script run by `interpreter` (absolute; its `#!` line's, resolved on `PATH`
    /// for `#!/usr/bin/env ruby`).
    Ruby {
        /// The script.
        script: PathBuf,
        /// The interpreter the worker runs.
        interpreter: PathBuf,
    },
    /// A Node script, served by the Node worker ngd carries, which runs each session with
    /// the node its `#!` line names ([`super::node`]).
    Node {
        /// The script, as the shell found it (an npm bin link).
        script: PathBuf,
        /// The node that runs the worker.
        node: PathBuf,
    },
    /// A Nushell plugin executable.
    Nu {
        /// The executable.
        path: PathBuf,
    },
    /// A fledge plugin's command.
    Fledge {
        /// fledge's plugins directory.
        plugins_dir: PathBuf,
        /// The plugin's directory (for `ngd list`).
        plugin: PathBuf,
    },
    /// A JVM program: `ngw-java` with the `java` command line that runs it cold.
    Jvm {
        /// What runs it cold: the jar, or the launcher script.
        launcher: PathBuf,
        /// `java`'s arguments, without `java` itself: options, then `-cp CP MAIN ARGS...` or
        /// `-jar JAR ARGS...`.
        java_args: Vec<String>,
        /// The JVM worker's launcher.
        ngw_java: PathBuf,
        /// The JDK the launcher runs (the worker's `JAVA_HOME`); `None`: the one on the
        /// worker's `PATH`.
        java_home: Option<PathBuf>,
        /// The command line was learned by watching the launcher: the server learns it
        /// again in each directory and environment (`launcher = true`).
        relearn: bool,
    },
    /// One server of an MCP client configuration's `mcpServers`.
    Mcp {
        /// The configuration file it came from.
        config: PathBuf,
        /// Its command and arguments.
        command: Vec<String>,
        /// Its environment additions.
        env: BTreeMap<String, String>,
    },
}

/// Why a program cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A compiled program: nothing to keep warm that ngd can reproduce exactly.
    #[error(
        "{} is a compiled program, not one ngd can keep warm: a native program starts \
         as fast as it can already, and ngd serves only interpreters it can reproduce \
         exactly (Python, Ruby and Node scripts, JVM programs, Nushell and fledge plugins, \
         MCP servers)",
        .0.display()
    )]
    Binary(PathBuf),
    /// A script for another interpreter.
    #[error(
        "{} is a script for {interpreter}, not Python, Ruby or Node: ngd cannot serve it \
         warm exactly",
        .path.display()
    )]
    Script {
        /// The script.
        path: PathBuf,
        /// Its `#!` interpreter.
        interpreter: String,
    },
    /// A Python, Ruby or Node script whose interpreter cannot be found.
    #[error(
        "{} runs with {interpreter}, which is not found: a warm worker needs that interpreter",
        .path.display()
    )]
    NoInterpreter {
        /// The script.
        path: PathBuf,
        /// The interpreter named.
        interpreter: String,
    },
    /// The interpreter is given options on the `#!` line, which a worker cannot share.
    #[error(
        "{}'s #! line gives the interpreter options ({options}): a warm run could not be exact",
        .path.display()
    )]
    InterpreterOptions {
        /// The script.
        path: PathBuf,
        /// The options.
        options: String,
    },
    /// A JVM program, but no `ngw-java` to serve it.
    #[error(
        "{} is a JVM program, and ngw-java (the JVM worker) is not installed next to ngd \
         nor on PATH (scripts/install installs it)",
        .0.display()
    )]
    Jvm(PathBuf),
    /// A Node script, but this ngd has no native piece for the Node worker.
    #[error(
        "{} is a Node script, and the Node worker's native piece ({}) is neither next to \
         ngd nor in its prefix's lib/ngd (cargo build -p ngw-node-native builds it)",
        .0.display(),
        ng_server::carried_sdk::NODE_NATIVE
    )]
    NodeNative(PathBuf),
    /// A shell script that could be a `java` launcher, but running it recorded no `java`
    /// command line.
    #[error("{}: {reason}", .path.display())]
    JavaLauncher {
        /// The script.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The file cannot be read.
    #[error("{}: {reason}", .path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// Neither `#!` nor a known binary format.
    #[error("{} is neither a script with a #! line nor a program ngd knows", .0.display())]
    Unknown(PathBuf),
}

/// Identifies the program at `path`, found on `PATH` for `name`: [`recognise`] on its first
/// bytes, and for a shell script that names `java`, the `java` command line it runs
/// ([`super::stand_in::probe_java_launcher`]), served by `ngw-java`. `which` finds the programs a recognised
/// file needs (an interpreter, `ngw-java`, `java`): [`find_tool`] for `ngd warm`.
pub fn identify(
    name: &str,
    path: &Path,
    which: impl Fn(&OsStr) -> Option<PathBuf>,
) -> Result<Program, Refusal> {
    let mut head = [0u8; 512];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| Refusal::Unreadable {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    match recognise(name, path, &head[..n], &which) {
        Err(Refusal::Script { path, interpreter })
            if is_shell(&interpreter) && mentions_java(&path) =>
        {
            let ngw_java = which(OsStr::new("ngw-java")).ok_or(Refusal::Jvm(path.clone()))?;
            let find_java =
                || which(OsStr::new("java")).and_then(|j| std::fs::canonicalize(j).ok());
            let learned = super::launcher::learn(&path, find_java).map_err(|reason| {
                Refusal::JavaLauncher {
                    path: path.clone(),
                    reason,
                }
            })?;
            Ok(Program::Jvm {
                launcher: path,
                java_args: learned.java_args,
                ngw_java,
                java_home: learned.java_home,
                relearn: learned.relearn,
            })
        }
        other => other,
    }
}

/// Finds a program a recognised file needs: `ngw-java` next to `ngd` first (where
/// `scripts/install` and the wheel put it), then on `PATH`.
pub fn find_tool(name: &OsStr) -> Option<PathBuf> {
    if name == "ngw-java" {
        let beside = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("ngw-java")))
            .filter(|p| p.is_file());
        if beside.is_some() {
            return beside;
        }
    }
    find_program(name, |_| false)
}

/// True when a shell script's text names `java` (a launcher worth probing).
fn mentions_java(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|text| text.windows(4).any(|w| w.eq_ignore_ascii_case(b"java")))
}

/// Recognises the program at `path` (found for `name`) from its first bytes `head`;
/// `which` finds an interpreter named by `#!/usr/bin/env NAME`.
pub fn recognise(
    name: &str,
    path: &Path,
    head: &[u8],
    which: impl Fn(&OsStr) -> Option<PathBuf>,
) -> Result<Program, Refusal> {
    let is_elf = head.starts_with(b"\x7fELF");
    if name.starts_with("nu_plugin_") && (is_elf || head.starts_with(b"#!")) {
        return Ok(Program::Nu {
            path: path.to_path_buf(),
        });
    }
    if is_elf {
        return Err(Refusal::Binary(path.to_path_buf()));
    }
    if head.starts_with(b"PK\x03\x04") || path.extension().is_some_and(|x| x == "jar") {
        let ngw_java =
            which(OsStr::new("ngw-java")).ok_or_else(|| Refusal::Jvm(path.to_path_buf()))?;
        return Ok(Program::Jvm {
            launcher: path.to_path_buf(),
            java_args: vec!["-jar".into(), path.to_string_lossy().into_owned()],
            ngw_java,
            java_home: None,
            relearn: false,
        });
    }
    let Some(words) = shebang(head) else {
        return Err(Refusal::Unknown(path.to_path_buf()));
    };
    let program_words: &[String] = match words.first() {
        Some(first) if basename(first) == "env" => &words[1..],
        _ => &words,
    };
    let Some(interp) = program_words.first() else {
        return Err(Refusal::Unknown(path.to_path_buf()));
    };
    if let Some(node) = super::node::recognise(&words, &which, super::node::native_beside_ngd) {
        use super::node::Unserved;
        let path = path.to_path_buf();
        return match node {
            Ok(node) => Ok(Program::Node { script: path, node }),
            Err(Unserved::Options(options)) => Err(Refusal::InterpreterOptions { path, options }),
            Err(Unserved::NoNode(interpreter)) => Err(Refusal::NoInterpreter { path, interpreter }),
            Err(Unserved::NoNative) => Err(Refusal::NodeNative(path)),
        };
    }
    let interp_name = basename(interp);
    if interp_name == "java" {
        return Err(Refusal::Script {
            path: path.to_path_buf(),
            interpreter: words.join(" "),
        });
    }
    let ruby = is_ruby(interp_name);
    if !is_python(interp_name) && !ruby {
        return Err(Refusal::Script {
            path: path.to_path_buf(),
            interpreter: words.join(" "),
        });
    }
    if program_words.len() > 1 {
        return Err(Refusal::InterpreterOptions {
            path: path.to_path_buf(),
            options: program_words[1..].join(" "),
        });
    }
    let interpreter = if interp.contains('/') {
        Some(PathBuf::from(interp)).filter(|p| p.is_file())
    } else {
        which(OsStr::new(interp))
    };
    let interpreter = interpreter.ok_or_else(|| Refusal::NoInterpreter {
        path: path.to_path_buf(),
        interpreter: interp.clone(),
    })?;
    let script = path.to_path_buf();
    Ok(if ruby {
        Program::Ruby {
            script,
            interpreter,
        }
    } else {
        Program::Python {
            script,
            interpreter,
        }
    })
}

/// The words of a `#!` line (as the kernel splits it: the interpreter, then the rest as
/// one argument, which `env` splits again; here split on white space throughout).
fn shebang(head: &[u8]) -> Option<Vec<String>> {
    let line = head.strip_prefix(b"#!")?;
    let end = line.iter().position(|&c| c == b'\n').unwrap_or(line.len());
    let words: Vec<String> = line[..end]
        .split(|c| c.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(|w| OsStr::from_bytes(w).to_string_lossy().into_owned())
        .collect();
    (!words.is_empty()).then_some(words)
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// `python`, `python3`, `python3.12`, `pythonw`... but not `pythonista`.
fn is_python(name: &str) -> bool {
    name.strip_prefix("python")
        .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// `ruby`, `ruby3.1`... (the C interpreter, which has `fork`), but not `jruby`,
/// `truffleruby` nor `ruby-parse`.
fn is_ruby(name: &str) -> bool {
    name.strip_prefix("ruby")
        .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

impl Program {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Program::Python { .. } => Kind::Python,
            Program::Ruby { .. } => Kind::Ruby,
            Program::Node { .. } => Kind::Node,
            Program::Nu { .. } => Kind::Nu,
            Program::Fledge { .. } => Kind::Fledge,
            Program::Mcp { .. } => Kind::Mcp,
            Program::Jvm { .. } => Kind::Jvm,
        }
    }

    /// What `ngd list` shows as the program.
    pub fn shown(&self) -> PathBuf {
        match self {
            Program::Python { script, .. }
            | Program::Ruby { script, .. }
            | Program::Node { script, .. } => script.clone(),
            Program::Nu { path } => path.clone(),
            Program::Fledge { plugin, .. } => plugin.clone(),
            Program::Mcp { config, .. } => config.clone(),
            Program::Jvm { launcher, .. } => launcher.clone(),
        }
    }

    /// Whether the commands are known before the plugin starts (the shims are then
    /// `[name]`); otherwise they are learned from the running plugin.
    pub fn commands_known(&self) -> bool {
        matches!(
            self,
            Program::Python { .. }
                | Program::Ruby { .. }
                | Program::Node { .. }
                | Program::Fledge { .. }
                | Program::Jvm { .. }
        )
    }

    /// What runs it cold, for a comparison with a warm run: the script or the launcher;
    /// `None` for plugins, which have no cold run of their own.
    pub fn cold_program(&self) -> Option<&Path> {
        match self {
            Program::Python { script, .. }
            | Program::Ruby { script, .. }
            | Program::Node { script, .. } => Some(script),
            Program::Jvm { launcher, .. } => Some(launcher),
            Program::Nu { .. } | Program::Fledge { .. } | Program::Mcp { .. } => None,
        }
    }

    /// The `[[plugin]]` table serving it as `name` (the plugin's name).
    pub fn plugin_table(&self, name: &str) -> String {
        let mut t = format!("[[plugin]]\nname = {}\n", q(name));
        match self {
            Program::Python {
                script,
                interpreter,
            } => {
                t += &format!(
                    "command = [{}, \"-m\", \"ngw\", \"console-script\", {}]\n\
                     sdk = \"python\"\ncommands = [{}]\n",
                    q(&interpreter.to_string_lossy()),
                    q(&script.to_string_lossy()),
                    q(name)
                );
            }
            Program::Ruby {
                script,
                interpreter,
            } => {
                // The worker ngd carries runs the script as `ruby SCRIPT ARGS` would, its
                // learned preloads in its state directory; a zygote that preloaded rubocop
                // takes a few seconds to start on a small machine.
                t += &format!(
                    "command = [{}, {}]\nsdk = \"ruby\"\ncommands = [{}]\n\
                     handshake_timeout_ms = 60000\n",
                    q(&interpreter.to_string_lossy()),
                    q(&format!("{name}={}", script.to_string_lossy())),
                    q(name)
                );
            }
            Program::Node { script, node } => {
                t += &super::node::table(name, script, node, q);
            }
            Program::Nu { path } => {
                t += &format!(
                    "protocol = \"nu\"\ncommand = [{}]\n",
                    q(&path.to_string_lossy())
                );
            }
            Program::Jvm {
                java_args,
                ngw_java,
                java_home,
                relearn,
                ..
            } => {
                let mut words = vec![q(&ngw_java.to_string_lossy())];
                words.extend(java_args.iter().map(|w| q(w)));
                // A JVM's first start reads its class path and warms up: more than the
                // default handshake time on a small machine.
                t += &format!(
                    "command = [{}]\ncommands = [{}]\nhandshake_timeout_ms = 60000\n",
                    words.join(", "),
                    q(name)
                );
                if let Some(home) = java_home {
                    t += &format!("env = {{ JAVA_HOME = {} }}\n", q(&home.to_string_lossy()));
                }
                if *relearn {
                    t += "launcher = true\n";
                }
            }
            Program::Fledge { plugins_dir, .. } => {
                t += &format!(
                    "protocol = \"fledge-v1\"\ncommand = [{}]\ncommands = [{}]\n",
                    q(&plugins_dir.to_string_lossy()),
                    q(name)
                );
            }
            Program::Mcp { command, env, .. } => {
                let words: Vec<String> = command.iter().map(|w| q(w)).collect();
                // MCP servers from PyPI and npm import a lot before they answer.
                t += &format!(
                    "protocol = \"jsonrpc\"\nprofile = \"mcp\"\ncommand = [{}]\n\
                     plugin_handshake_timeout_ms = 30000\n",
                    words.join(", ")
                );
                if !env.is_empty() {
                    let pairs: Vec<String> = env
                        .iter()
                        .map(|(k, v)| format!("{} = {}", q(k), q(v)))
                        .collect();
                    t += &format!("env = {{ {} }}\n", pairs.join(", "));
                }
            }
        }
        // What its shims stand for: a shim that finds another program routes by it.
        if let Some(program) = self.cold_program() {
            t += &format!("program = {}\n", q(&program.to_string_lossy()));
        }
        t
    }

    /// The whole drop-in file for it: a comment, the `[warm]` record and the table.
    pub fn fragment(&self, name: &str, shims: &[String]) -> String {
        let shims: Vec<String> = shims.iter().map(|s| q(s)).collect();
        format!(
            "# Written by `ngd warm`; `ngd unwarm {name}` removes it.\n\n\
             [warm]\nkind = {}\nprogram = {}\nshims = [{}]\n\n{}",
            q(self.kind().as_str()),
            q(&self.shown().to_string_lossy()),
            shims.join(", "),
            self.plugin_table(name)
        )
    }
}

/// True for a `#!` interpreter that is a POSIX shell (whose scripts may launch `java`).
fn is_shell(interpreter: &str) -> bool {
    let words: Vec<&str> = interpreter.split_whitespace().collect();
    let program = match words.first() {
        Some(first) if basename(first) == "env" => words.get(1),
        first => first,
    };
    program.is_some_and(|p| matches!(basename(p), "sh" | "bash" | "dash" | "ksh" | "zsh"))
}

/// A TOML string holding `s`.
fn q(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// The interpreter named by a Python script's `#!` line (with `env`, its arguments), as
/// `ngd bench` runs it for an ad hoc server: any word naming a `python*` program makes it
/// one.
pub fn python_shebang(program: &Path) -> Option<Vec<OsString>> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&c| c == b'\n')?];
    let words: Vec<OsString> = line
        .split(|c| c.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(|w| OsStr::from_bytes(w).to_os_string())
        .collect();
    let is_python = words.iter().any(|w| {
        Path::new(w)
            .file_name()
            .is_some_and(|f| f.as_bytes().starts_with(b"python"))
    });
    (is_python && !words.is_empty()).then_some(words)
}

/// fledge's plugins directory: `$XDG_CONFIG_HOME/fledge/plugins`, else
/// `~/.config/fledge/plugins` (fledge's own default, as the fledge bridge's).
pub fn fledge_plugins_dir() -> Option<PathBuf> {
    let absolute = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    absolute(std::env::var_os("XDG_CONFIG_HOME"))
        .or_else(|| absolute(std::env::var_os("HOME")).map(|h| h.join(".config")))
        .map(|c| c.join("fledge/plugins"))
}

/// The fledge plugin in `plugins_dir` that has a command `name`, if any.
pub fn fledge_plugin(plugins_dir: &Path, name: &str) -> Option<Program> {
    #[derive(Deserialize)]
    struct Manifest {
        #[serde(default)]
        commands: Vec<Command>,
    }
    #[derive(Deserialize)]
    struct Command {
        name: String,
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(plugins_dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs.into_iter().find_map(|dir| {
        let text = std::fs::read_to_string(dir.join("plugin.toml")).ok()?;
        let manifest: Manifest = toml::from_str(&text).ok()?;
        manifest
            .commands
            .iter()
            .any(|c| c.name == name)
            .then(|| Program::Fledge {
                plugins_dir: plugins_dir.to_path_buf(),
                plugin: dir.clone(),
            })
    })
}

/// Why an MCP configuration file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// Unreadable.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not the usual shape.
    #[error("{}: {problem}", .path.display())]
    Shape {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

/// The servers of an MCP client configuration file (`{"mcpServers": {NAME: {"command":
/// ..., "args": [...], "env": {...}}}}`), by name. Servers reached by URL (`"url"`) have no
/// process to keep warm and are refused.
pub fn mcp_servers(path: &Path) -> Result<BTreeMap<String, Program>, McpError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct File {
        mcp_servers: BTreeMap<String, Server>,
    }
    #[derive(Deserialize)]
    struct Server {
        command: Option<String>,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
    }
    let text = std::fs::read_to_string(path).map_err(|source| McpError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let shape = |problem: String| McpError::Shape {
        path: path.to_path_buf(),
        problem,
    };
    let file: File = serde_json::from_str(&text).map_err(|e| shape(e.to_string()))?;
    let config = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = BTreeMap::new();
    for (name, server) in file.mcp_servers {
        let command = server.command.filter(|c| !c.is_empty()).ok_or_else(|| {
            shape(format!(
                "server '{name}' has no command (a server reached by URL has no process for \
                 ngd to keep warm)"
            ))
        })?;
        let mut words = vec![command];
        words.extend(server.args);
        out.insert(
            name,
            Program::Mcp {
                config: config.clone(),
                command: words,
                env: server.env,
            },
        );
    }
    if out.is_empty() {
        return Err(shape("mcpServers is empty".to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn which(name: &OsStr) -> Option<PathBuf> {
        match name.to_str() {
            Some("python3") => Some(PathBuf::from("/opt/py/bin/python3")),
            Some("ruby") => Some(PathBuf::from("/opt/rb/bin/ruby")),
            _ => None,
        }
    }

    fn rec(name: &str, head: &[u8]) -> Result<Program, Refusal> {
        recognise(name, Path::new("/bin/x"), head, which)
    }

    #[test]
    fn python_scripts_by_their_interpreter() {
        assert_eq!(
            rec("x", b"#!/usr/bin/env python3\nimport x\n"),
            Ok(Program::Python {
                script: "/bin/x".into(),
                interpreter: "/opt/py/bin/python3".into()
            })
        );
        // An absolute interpreter must exist.
        assert!(matches!(
            rec("x", b"#!/nonexistent/python3.12\n"),
            Err(Refusal::NoInterpreter { .. })
        ));
        assert!(matches!(
            rec("x", b"#!/usr/bin/env python2.9\n"),
            Err(Refusal::NoInterpreter { .. })
        ));
        assert!(matches!(
            rec("x", b"#!/usr/bin/python3 -E\n"),
            Err(Refusal::InterpreterOptions { .. })
        ));
    }

    #[test]
    fn ruby_scripts_by_their_interpreter() {
        let ruby = |interpreter: &str| {
            Ok(Program::Ruby {
                script: "/bin/x".into(),
                interpreter: interpreter.into(),
            })
        };
        // A RubyGems binstub (as Debian's /usr/bin/rubocop), naming its interpreter's path.
        let dir = tempfile::tempdir().unwrap();
        let interpreter = dir.path().join("ruby3.1");
        std::fs::write(&interpreter, "").unwrap();
        let binstub = format!(
            "#!{}\n#\n# This file was generated by RubyGems.\n",
            interpreter.display()
        );
        assert_eq!(
            rec("rubocop", binstub.as_bytes()),
            ruby(&interpreter.to_string_lossy())
        );
        assert_eq!(
            rec("x", b"#!/usr/bin/env ruby\nputs 1\n"),
            ruby("/opt/rb/bin/ruby")
        );
        assert!(matches!(
            rec("x", b"#!/nonexistent/ruby3.1\n"),
            Err(Refusal::NoInterpreter { interpreter, .. }) if interpreter == "/nonexistent/ruby3.1"
        ));
        assert!(matches!(
            rec("x", b"#!/usr/bin/env ruby3.9\n"),
            Err(Refusal::NoInterpreter { .. })
        ));
        // Options on the #! line (`-w` changes what the program prints) are not shared.
        assert!(matches!(
            rec("x", b"#!/usr/bin/env ruby -w\n"),
            Err(Refusal::InterpreterOptions { options, .. }) if options == "-w"
        ));
        // Other Rubies and Ruby's other tools are not the interpreter the worker forks.
        for other in ["jruby", "truffleruby", "ruby-parse"] {
            let head = format!("#!/usr/bin/env {other}\n");
            assert!(
                matches!(rec("x", head.as_bytes()), Err(Refusal::Script { .. })),
                "{other}"
            );
        }
        assert!(is_ruby("ruby3.1") && is_ruby("ruby") && !is_ruby("rubyx"));
    }

    #[test]
    fn a_ruby_programs_table_runs_the_worker_ngd_carries() {
        let program = Program::Ruby {
            script: "/usr/bin/rubocop".into(),
            interpreter: "/usr/bin/ruby3.1".into(),
        };
        assert_eq!(program.kind(), Kind::Ruby);
        assert!(program.commands_known());
        assert_eq!(program.cold_program(), Some(Path::new("/usr/bin/rubocop")));
        let table = program.plugin_table("rubocop");
        assert!(
            table.contains("command = [\"/usr/bin/ruby3.1\", \"rubocop=/usr/bin/rubocop\"]\n"),
            "{table}"
        );
        assert!(table.contains("sdk = \"ruby\"\n"), "{table}");
        assert!(table.contains("commands = [\"rubocop\"]\n"), "{table}");
    }

    #[test]
    fn other_programs_are_refused_with_the_reason() {
        assert_eq!(
            rec("x", b"\x7fELF\x02\x01"),
            Err(Refusal::Binary("/bin/x".into()))
        );
        assert!(matches!(
            rec("x", b"#!/bin/sh\necho\n"),
            Err(Refusal::Script { interpreter, .. }) if interpreter == "/bin/sh"
        ));
        assert!(matches!(
            rec("x", b"#!/usr/bin/env pythonista\n"),
            Err(Refusal::Script { .. })
        ));
        assert_eq!(rec("x", b"PK\x03\x04"), Err(Refusal::Jvm("/bin/x".into())));
        assert_eq!(
            rec("x", b"echo hi\n"),
            Err(Refusal::Unknown("/bin/x".into()))
        );
        assert_eq!(rec("x", b""), Err(Refusal::Unknown("/bin/x".into())));
        let msg = rec("x", b"\x7fELF").unwrap_err().to_string();
        assert!(msg.contains("compiled program"), "{msg}");
    }

    #[test]
    fn nu_plugins_by_name() {
        assert_eq!(
            rec("nu_plugin_inc", b"\x7fELF"),
            Ok(Program::Nu {
                path: "/bin/x".into()
            })
        );
    }

    #[cfg(feature = "bridges")]
    #[test]
    fn fragments_parse_back_as_drop_in_files() {
        let programs = [
            Program::Python {
                script: "/v/bin/black \"q\"".into(),
                interpreter: "/v/bin/python".into(),
            },
            Program::Nu {
                path: "/p/nu_plugin_inc".into(),
            },
            Program::Ruby {
                script: "/usr/bin/rake".into(),
                interpreter: "/usr/bin/ruby".into(),
            },
            Program::Node {
                script: "/p/node_modules/.bin/eslint".into(),
                node: "/usr/bin/node".into(),
            },
            Program::Fledge {
                plugins_dir: "/c/fledge/plugins".into(),
                plugin: "/c/fledge/plugins/deploy".into(),
            },
            Program::Mcp {
                config: "/c/mcp.json".into(),
                command: vec!["npx".into(), "-y".into(), "server".into()],
                env: [("K".to_owned(), "v".to_owned())].into(),
            },
            Program::Jvm {
                launcher: "/usr/bin/rhino".into(),
                java_args: vec![
                    "-classpath".into(),
                    "/usr/share/java/js.jar".into(),
                    "org.mozilla.javascript.tools.shell.Main".into(),
                ],
                ngw_java: "/usr/lib/ngd/ngw-java".into(),
                java_home: Some("/usr/lib/jvm/java-17-openjdk-amd64".into()),
                relearn: true,
            },
        ];
        for p in programs {
            let text = p.fragment("tool", &["tool".to_owned()]);
            let f = Fragment::parse(&text, Path::new("/c/ngd/conf.d/tool.toml"))
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            let record = Record::of(&f).unwrap();
            assert!(record.describes(&p));
            assert!(Record::is_in(&text));
            assert_eq!(record.kind, p.kind());
            assert_eq!(record.program, p.shown());
            assert_eq!(f.plugins.len(), 1);
            assert_eq!(f.plugins[0].name, "tool");
            f.plugins[0]
                .validate()
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            if let Program::Python { interpreter, .. } = &p {
                assert_eq!(f.plugins[0].command[0], interpreter.to_string_lossy());
                assert_eq!(
                    f.plugins[0].sdk,
                    Some(ng_server::plugin::config::Sdk::Python)
                );
            }
            if let Program::Jvm {
                java_home, relearn, ..
            } = &p
            {
                assert_eq!(f.plugins[0].launcher, *relearn);
                assert_eq!(
                    f.plugins[0].env.get("JAVA_HOME").map(PathBuf::from),
                    *java_home
                );
                assert_eq!(
                    f.plugins[0].program.as_deref(),
                    Some(Path::new("/usr/bin/rhino"))
                );
            }
            if let Program::Node { node, script } = &p {
                assert_eq!(f.plugins[0].command[0], node.to_string_lossy());
                assert_eq!(
                    f.plugins[0].command[1],
                    format!("tool={}", script.display())
                );
                assert_eq!(f.plugins[0].sdk, Some(ng_server::plugin::config::Sdk::Node));
                assert_eq!(f.plugins[0].program.as_deref(), Some(script.as_path()));
            }
            if let Program::Ruby { interpreter, .. } = &p {
                assert_eq!(f.plugins[0].command[0], interpreter.to_string_lossy());
                assert_eq!(f.plugins[0].sdk, Some(ng_server::plugin::config::Sdk::Ruby));
            }
        }
    }

    #[test]
    fn mcp_configuration_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mcp.json");
        std::fs::write(
            &file,
            r#"{"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"],
                "env": {"TZ": "UTC"}}}, "other": 1}"#,
        )
        .unwrap();
        let servers = mcp_servers(&file).unwrap();
        let Program::Mcp { command, env, .. } = &servers["time"] else {
            panic!("{servers:?}")
        };
        assert_eq!(command, &["uvx", "mcp-server-time"]);
        assert_eq!(env["TZ"], "UTC");
        std::fs::write(&file, r#"{"mcpServers": {"web": {"url": "https://x"}}}"#).unwrap();
        let msg = mcp_servers(&file).unwrap_err().to_string();
        assert!(msg.contains("server 'web' has no command"), "{msg}");
        std::fs::write(&file, "{").unwrap();
        assert!(mcp_servers(&file).is_err());
    }

    #[test]
    fn fledge_plugins_by_command_name() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = dir.path().join("fledge-deploy");
        std::fs::create_dir(&plugin).unwrap();
        std::fs::write(
            plugin.join("plugin.toml"),
            "[plugin]\nname = \"fledge-deploy\"\n[[commands]]\nname = \"deploy\"\nbinary = \"bin/d\"\n",
        )
        .unwrap();
        assert_eq!(
            fledge_plugin(dir.path(), "deploy"),
            Some(Program::Fledge {
                plugins_dir: dir.path().to_path_buf(),
                plugin
            })
        );
        assert_eq!(fledge_plugin(dir.path(), "other"), None);
    }

    #[test]
    fn shebangs() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        assert_eq!(
            python_shebang(&write("a", "#!/usr/bin/python3.11\nimport x\n")),
            Some(vec!["/usr/bin/python3.11".into()])
        );
        assert_eq!(
            python_shebang(&write("b", "#!/usr/bin/env python3\n")),
            Some(vec!["/usr/bin/env".into(), "python3".into()])
        );
        assert_eq!(python_shebang(&write("c", "#!/bin/sh\n")), None);
        assert_eq!(python_shebang(&write("d", "\x7fELF")), None);
    }

    #[test]
    fn identify_reads_the_file_a_shell_would_run() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        assert!(matches!(
            identify("x", &missing, which),
            Err(Refusal::Unreadable { path, .. }) if path == missing
        ));
        let script = dir.path().join("tool");
        std::fs::write(&script, "#!/usr/bin/env python3\nimport tool\n").unwrap();
        let program = identify("tool", &script, which).unwrap();
        assert_eq!(program.cold_program(), Some(script.as_path()));
        assert!(program.commands_known());
        // A shell script that does not name java is not probed.
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert!(matches!(
            identify("tool", &script, which),
            Err(Refusal::Script { interpreter, .. }) if interpreter == "/bin/sh"
        ));
        // One that does needs ngw-java, which this `which` does not find.
        std::fs::write(&script, "#!/bin/sh\nexec java -jar x.jar \"$@\"\n").unwrap();
        assert_eq!(identify("tool", &script, which), Err(Refusal::Jvm(script)));
    }

    #[test]
    fn shells() {
        assert!(is_shell("/bin/sh"));
        assert!(is_shell("/usr/bin/env bash"));
        assert!(!is_shell("/usr/bin/env python3"));
        assert!(!is_shell(""));
    }

    #[test]
    fn records_of_drop_in_files() {
        let path = Path::new("/c/ngd/conf.d/tool.toml");
        let record = |text: &str| Record::of(&Fragment::parse(text, path).unwrap());
        let written = "[warm]\nkind = \"nu\"\nprogram = \"/p/nu_plugin_inc\"\n";
        assert_eq!(
            record(written),
            Some(Record {
                kind: Kind::Nu,
                program: "/p/nu_plugin_inc".into(),
                shims: Vec::new(),
            })
        );
        assert!(record(written).unwrap().describes(&Program::Nu {
            path: "/p/nu_plugin_inc".into()
        }));
        // Another kind, an unknown key: a [warm] table, but not a record this version reads.
        assert_eq!(record("[warm]\nkind = \"perl\"\nprogram = \"/x\"\n"), None);
        let extra = "[warm]\nkind = \"nu\"\nprogram = \"/x\"\nmore = 1\n";
        assert_eq!(record(extra), None);
        assert!(Record::is_in(extra));
        assert_eq!(record("[aliases]\nx = \"ng-true\"\n"), None);
        assert!(!Record::is_in("[aliases]\nx = \"ng-true\"\n"));
    }
}
