//! Test support: the test plugins installed the way `fledge plugins install` leaves them,
//! the real fledge 1.8.0 from the peers cache, and a minimal ngd side of the worker channel
//! (a socketpair, the hello, `mux` sessions with stdin on demand and interrupts).

#![allow(dead_code)]

use bytes::BytesMut;
use ng_proto::codec::{encode, Decoder, Limits};
use ng_proto::ChunkType;
use serde_json::Value;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The test plugins' sources.
pub fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plugins")
}

/// The real fledge, installed by `scripts/peers/fledge` (run here when missing).
pub fn fledge() -> PathBuf {
    let peers = std::env::var_os("NGD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/ngd-peers"));
    let bin = peers.join("bin/fledge");
    if !bin.exists() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers/fledge");
        let st = Command::new("bash")
            .arg(script)
            .status()
            .expect("scripts/peers/fledge");
        assert!(st.success(), "scripts/peers/fledge failed");
    }
    assert!(bin.exists(), "fledge not installed at {}", bin.display());
    bin
}

/// A home with a fledge config directory holding the test plugins, and a project.
pub struct World {
    pub tmp: tempfile::TempDir,
    pub home: PathBuf,
    pub xdg: PathBuf,
    pub plugins: PathBuf,
    pub project: PathBuf,
}

impl World {
    /// Installs every test plugin; `grants` lists, per plugin directory, the capabilities
    /// recorded in `plugins.toml` (as fledge's install records the manifest's).
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let xdg = home.join(".config");
        let plugins = xdg.join("fledge/plugins");
        let bin = plugins.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let mut registry = String::new();
        let mut names: Vec<_> = std::fs::read_dir(sources())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for name in names {
            let name = name.to_string_lossy().into_owned();
            let dir = plugins.join(&name);
            ng_testkit::exe::copy_tree(&sources().join(&name), &dir);
            let manifest: toml::Value =
                toml::from_str(&std::fs::read_to_string(dir.join("plugin.toml")).unwrap()).unwrap();
            let mut cmds = Vec::new();
            for c in manifest["commands"].as_array().unwrap() {
                let cmd = c["name"].as_str().unwrap();
                std::os::unix::fs::symlink(
                    dir.join(c["binary"].as_str().unwrap()),
                    bin.join(format!("fledge-{cmd}")),
                )
                .unwrap();
                cmds.push(format!("\"{cmd}\""));
            }
            let version = manifest["plugin"]["version"].as_str().unwrap();
            registry.push_str(&format!(
                "[[plugins]]\nname = \"{name}\"\nsource = \"{}\"\nversion = \"{version}\"\ninstalled = \"2026-11-23\"\ncommands = [{}]\n",
                sources().join(&name).display(),
                cmds.join(", ")
            ));
            if manifest["plugin"].get("protocol").is_some() {
                let caps = manifest.get("capabilities").and_then(|c| c.as_table());
                let flag = |k: &str| {
                    caps.and_then(|c| c.get(k))
                        .and_then(|v| v.as_bool())
                        .unwrap_or(false)
                };
                registry.push_str(&format!(
                    "\n[plugins.capabilities]\nexec = {}\nstore = {}\nmetadata = {}\nnetwork = false\n",
                    flag("exec"),
                    flag("store"),
                    flag("metadata")
                ));
            }
            registry.push('\n');
        }
        std::fs::write(xdg.join("fledge/plugins.toml"), registry).unwrap();
        let project = tmp.path().join("myproj");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join("Cargo.toml"), "[package]\nname = \"myproj\"\n").unwrap();
        Self {
            tmp,
            home,
            xdg,
            plugins,
            project,
        }
    }

    /// Makes the project a git repository with one commit and a change.
    pub fn git_init(&self) {
        let git = |args: &[&str]| {
            let st = Command::new("git")
                .args(args)
                .current_dir(&self.project)
                .env("HOME", &self.home)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success(), "git {args:?}");
        };
        git(&["init", "-q", "-b", "main"]);
        git(&["-c", "user.email=t@t", "-c", "user.name=t", "add", "."]);
        git(&[
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "first",
        ]);
        git(&[
            "remote",
            "add",
            "origin",
            "https://user:secret@example.com/o/myproj.git",
        ]);
        git(&["tag", "v0.1.0"]);
        std::fs::write(self.project.join("new.txt"), "x").unwrap();
    }

    /// The environment both hosts get.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("PATH".into(), std::env::var("PATH").unwrap()),
            ("HOME".into(), self.home.display().to_string()),
            ("XDG_CONFIG_HOME".into(), self.xdg.display().to_string()),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
            ("LANG".into(), "C.UTF-8".into()),
        ]
    }

    /// The bridge's `NGW_BRIDGE_CONFIG`.
    pub fn config(&self, extra: Value) -> String {
        let mut opts = serde_json::json!({"name": "fledge", "plugins_dir": self.plugins.display().to_string()});
        if let (Some(o), Some(e)) = (opts.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                o.insert(k.clone(), v.clone());
            }
        }
        opts.to_string()
    }

    /// Runs the real fledge: `fledge <command> <args>` in the project with `stdin`.
    pub fn fledge(&self, command: &str, args: &[&str], stdin: &[u8]) -> Outcome {
        self.fledge_with(command, args, stdin, &[])
    }

    /// [`World::fledge`] with more environment.
    pub fn fledge_with(
        &self,
        command: &str,
        args: &[&str],
        stdin: &[u8],
        extra: &[(String, String)],
    ) -> Outcome {
        let mut c = Command::new(fledge());
        c.arg(command)
            .args(args)
            .current_dir(&self.project)
            .env_clear()
            .envs(self.env())
            .envs(extra.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        let data = stdin.to_vec();
        let w = std::thread::spawn(move || {
            let _ = input.write_all(&data);
        });
        let out = child.wait_with_output().unwrap();
        let _ = w.join();
        Outcome {
            stdout: out.stdout,
            stderr: out.stderr,
            code: out.status.code().unwrap_or(-1),
        }
    }

    /// The plugin's `state.json`, parsed.
    pub fn state(&self, plugin: &str) -> Option<Value> {
        std::fs::read(self.plugins.join(plugin).join("state.json"))
            .ok()
            .map(|b| serde_json::from_slice(&b).unwrap())
    }
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub code: i32,
}

impl Outcome {
    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn err(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// A session to run.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub stdin: Vec<u8>,
    /// Send `i SIGINT` once stderr contains this text.
    pub interrupt_on: Option<String>,
    /// Never answer the bridge's requests for input (a user who types nothing).
    pub hold_stdin: bool,
}

impl Spec {
    pub fn new(world: &World, command: &str, args: &[&str]) -> Self {
        Self {
            command: command.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: world.env(),
            cwd: world.project.clone(),
            ..Self::default()
        }
    }
    pub fn stdin(mut self, data: &[u8]) -> Self {
        self.stdin = data.to_vec();
        self
    }
}

/// ngd's side of a bridge's channel.
pub struct Driver {
    stream: UnixStream,
    child: Child,
    decoder: Decoder,
    buf: BytesMut,
    next: u64,
    pub hello: Value,
    /// Notices received (`n` chunks).
    pub notices: Vec<Value>,
}

impl Driver {
    /// Starts the bridge binary with `config`.
    pub fn start(config: &str, command: &[&str]) -> Self {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let fd = theirs.as_raw_fd();
        // SAFETY: clearing close-on-exec on the worker's end in the child.
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ng-bridge-fledge"));
        cmd.arg("bridge")
            .arg("fledge-v1")
            .arg("--")
            .args(command)
            .env("NGW_FD", fd.to_string())
            .env("NGW_VERSION", "1")
            .env("NGW_HOST_FEATURES", "mux,notices")
            .env("NGW_BRIDGE_CONFIG", config)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        drop(theirs);
        ours.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut d = Self {
            stream: ours,
            child,
            decoder: Decoder::new(Limits {
                max_chunk_len: 64 << 20,
            }),
            buf: BytesMut::new(),
            next: 1,
            hello: Value::Null,
            notices: Vec::new(),
        };
        let (ty, payload) = d.chunk().expect("a hello");
        assert_eq!(ty, ChunkType::WORKER_HELLO);
        d.hello = serde_json::from_slice(&payload).unwrap();
        d
    }

    fn chunk(&mut self) -> Option<(ChunkType, Vec<u8>)> {
        let mut scratch = [0u8; 65536];
        loop {
            if let Some(c) = self.decoder.decode(&mut self.buf).unwrap() {
                return Some((c.ty, c.payload.to_vec()));
            }
            match self.stream.read(&mut scratch) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&scratch[..n]),
                Err(e) => panic!(
                    "reading the bridge: {e}; so far: {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
            }
        }
    }

    fn send(&mut self, ty: ChunkType, payload: &[u8]) {
        let mut b = BytesMut::new();
        encode(ty, payload, &mut b);
        self.stream.write_all(&b).unwrap();
    }

    /// Runs one session.
    pub fn run(&mut self, spec: Spec) -> Outcome {
        self.run_all(vec![spec]).pop().unwrap()
    }

    /// Runs sessions at once; outcomes in the order given.
    pub fn run_all(&mut self, specs: Vec<Spec>) -> Vec<Outcome> {
        struct S {
            spec: Spec,
            out: Outcome,
            stdin_sent: bool,
            interrupted: bool,
            done: bool,
        }
        let mut sessions: HashMap<u64, S> = HashMap::new();
        let mut order = Vec::new();
        for spec in specs {
            let id = self.next;
            self.next += 1;
            self.send(ChunkType::WORKER_SELECT, id.to_string().as_bytes());
            for a in &spec.args {
                self.send(ChunkType::ARGUMENT, a.as_bytes());
            }
            for (k, v) in &spec.env {
                self.send(ChunkType::ENVIRONMENT, format!("{k}={v}").as_bytes());
            }
            self.send(
                ChunkType::ENVIRONMENT,
                format!("NGW_SESSION={id}").as_bytes(),
            );
            self.send(
                ChunkType::WORKING_DIR,
                spec.cwd.to_string_lossy().as_bytes(),
            );
            self.send(ChunkType::COMMAND, spec.command.as_bytes());
            order.push(id);
            sessions.insert(
                id,
                S {
                    spec,
                    out: Outcome {
                        stdout: vec![],
                        stderr: vec![],
                        code: -1,
                    },
                    stdin_sent: false,
                    interrupted: false,
                    done: false,
                },
            );
        }
        let mut selected = 0u64;
        let deadline = Instant::now() + Duration::from_secs(120);
        while sessions.values().any(|s| !s.done) {
            assert!(Instant::now() < deadline, "sessions did not end");
            let Some((ty, payload)) = self.chunk() else {
                eprintln!("DBG closed");
                panic!("the bridge closed the channel");
            };
            if std::env::var_os("DRIVER_DEBUG").is_some() {
                eprintln!("DBG chunk {:?} {:?}", ty, String::from_utf8_lossy(&payload));
            }
            match ty {
                ChunkType::WORKER_SELECT => {
                    selected = String::from_utf8(payload).unwrap().parse().unwrap();
                }
                ChunkType::STDOUT => sessions
                    .get_mut(&selected)
                    .unwrap()
                    .out
                    .stdout
                    .extend(payload),
                ChunkType::STDERR => {
                    let s = sessions.get_mut(&selected).unwrap();
                    s.out.stderr.extend(payload);
                    let fire = !s.interrupted
                        && s.spec.interrupt_on.as_ref().is_some_and(|t| {
                            String::from_utf8_lossy(&s.out.stderr).contains(t.as_str())
                        });
                    if fire {
                        s.interrupted = true;
                        let id = selected;
                        self.send(ChunkType::WORKER_SELECT, id.to_string().as_bytes());
                        self.send(ChunkType::WORKER_INTERRUPT, b"SIGINT");
                    }
                }
                ChunkType::SEND_INPUT => {
                    let id = selected;
                    let s = sessions.get_mut(&id).unwrap();
                    if s.spec.hold_stdin {
                        continue;
                    }
                    let data = if s.stdin_sent || s.spec.stdin.is_empty() {
                        None
                    } else {
                        s.stdin_sent = true;
                        Some(s.spec.stdin.clone())
                    };
                    self.send(ChunkType::WORKER_SELECT, id.to_string().as_bytes());
                    match data {
                        Some(d) => self.send(ChunkType::STDIN, &d),
                        None => self.send(ChunkType::STDIN_EOF, b""),
                    }
                }
                ChunkType::EXIT => {
                    let s = sessions.get_mut(&selected).unwrap();
                    s.out.code = String::from_utf8(payload).unwrap().trim().parse().unwrap();
                    s.done = true;
                }
                ChunkType::WORKER_PONG => {}
                ChunkType::WORKER_NOTICE => {
                    self.notices.push(serde_json::from_slice(&payload).unwrap())
                }
                other => panic!("unexpected chunk {other:?}"),
            }
        }
        order
            .into_iter()
            .map(|id| sessions.remove(&id).unwrap().out)
            .collect()
    }

    /// Says quit and waits for the bridge to exit.
    pub fn quit(mut self) -> i32 {
        self.send(ChunkType::WORKER_QUIT, b"");
        self.child.wait().unwrap().code().unwrap_or(-1)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        let _ = self.child.wait();
    }
}

/// Arguments as OsStrings (for documentation of shapes).
pub fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// The lines of a log file a test plugin appends to (none when it is not there yet).
pub fn log_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The `pid=N` a test plugin printed.
pub fn pid_of(out: &str) -> String {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))
        .unwrap()
        .to_owned()
}
