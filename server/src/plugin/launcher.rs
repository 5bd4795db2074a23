//! Learning the JVM command line a launcher runs, without running the program.
//!
//! A launcher (a shell script such as Debian's `/usr/bin/rhino`) computes a `java` command
//! line and executes it: from `PATH`, through `JAVA_HOME` or `JAVACMD`, or by an absolute
//! path (`/usr/bin/java`, `/usr/lib/jvm/*/bin/java`). [`learn`] runs it once, in a given
//! directory and environment, with one marker argument, under a seccomp filter whose
//! `exec`s wait for this process (`ng_sys::seccomp`): every `exec` is read (the file it
//! names, resolved with the caller's directory and descriptors; its arguments; its
//! environment) and let run, until one runs a JDK's `java` with the marker among its
//! arguments. That one is recorded and its process killed before its first instruction, so
//! the program's `main` never runs; the launcher's process group is then killed. Other
//! programs the launcher runs, `java -version` included, run unchanged.
//!
//! What is learned ([`JvmCommand`]) is `java`'s arguments, which must end with the marker
//! (the user's arguments, passed through), the JDK it belongs to, and the environment
//! variables the launcher set or changed for it (Debian's `java-wrappers` export
//! `JAVA_HOME`; a shell may set `PWD` or `SHLVL`), which a warm session gets on top of the
//! client's. The launcher must run `java` in the directory it was started in, and must
//! not remove variables from its environment; otherwise learning fails with the reason
//! ([`LearnError`]). A launcher that runs the JVM in its own process (a JDK tool such as
//! `jshell`) is stopped at that `exec` too.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::FileExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ng_sys::seccomp::{self, ExecCall, Waiting};

/// How many arguments or environment entries of one `exec` are read at most.
const MAX_WORDS: usize = 65_536;
/// How many bytes of one `exec`'s arguments and environment are read at most.
const MAX_BYTES: usize = 4 << 20;

/// Where and how a launcher is run to learn its command line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Context {
    /// The directory it starts in.
    pub cwd: PathBuf,
    /// Its whole environment.
    pub env: Vec<(OsString, OsString)>,
}

impl Context {
    /// This process's own directory and environment.
    pub fn current() -> std::io::Result<Context> {
        Ok(Context {
            cwd: std::env::current_dir()?,
            env: std::env::vars_os().collect(),
        })
    }
}

/// The JVM command line a launcher runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JvmCommand {
    /// The `java` it executes, every link resolved.
    pub java: PathBuf,
    /// That JDK's home (`java` is its `bin/java`).
    pub java_home: PathBuf,
    /// `java`'s arguments before the user's (options, class path, main class, the
    /// launcher's own arguments).
    pub args: Vec<String>,
    /// The variables the launcher set or changed for `java`, sorted by name.
    pub env: Vec<(OsString, OsString)>,
}

/// Why a launcher's command line could not be learned.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    /// The system denies the seccomp filter that watches the launcher's `exec`s.
    #[error(
        "ngd learns a launcher's java command line by watching the programs it runs \
         (seccomp user notification), and this system denies that ({0}); without it, \
         running the launcher could run the program itself"
    )]
    Denied(std::io::Error),
    /// It could not be started.
    #[error("cannot run it: {0}")]
    Start(std::io::Error),
    /// It had not run `java` by the deadline.
    #[error("it did not reach java within {0:?}")]
    Timeout(Duration),
    /// It ended without running `java` with the user's arguments.
    #[error("it ended without running java with the user's arguments")]
    NoJava,
    /// It ran a program of a JDK other than `java` (which would start the JVM itself).
    #[error(
        "it runs {}, a JDK program other than java: ngd serves java command lines only",
        .0.display()
    )]
    OtherJdkTool(PathBuf),
    /// Its `java` command line does not end with the user's arguments.
    #[error("its java command line does not end with the user's arguments")]
    NotPassedThrough,
    /// It runs `java` in another directory than its own.
    #[error(
        "it runs java in {} rather than in the directory it was started in: a warm \
         session runs in the client's",
        .0.display()
    )]
    ChangesDirectory(PathBuf),
    /// It removes variables from `java`'s environment.
    #[error(
        "it removes environment variables ({}) before running java: a warm session \
         sees the client's",
        .0.join(", ")
    )]
    RemovesVariables(Vec<String>),
    /// `java`'s home is not where a JDK keeps it.
    #[error("{} is not in a JDK's bin directory", .0.display())]
    NoJdkHome(PathBuf),
    /// An argument is not UTF-8 (a plugin table holds UTF-8 strings).
    #[error("an argument of its java command line is not UTF-8")]
    NotUtf8,
    /// An `exec` could not be read or answered.
    #[error("cannot read what it runs: {0}")]
    Watch(std::io::Error),
}

/// One `exec` read from the watched process.
#[derive(Debug)]
struct Exec {
    /// The file, resolved (links followed); `None` when it does not resolve (the `exec`
    /// fails by itself).
    file: Option<PathBuf>,
    /// Its arguments, `argv[0]` first.
    argv: Vec<OsString>,
    /// Its environment.
    envp: Vec<OsString>,
    /// The caller's directory.
    cwd: Option<PathBuf>,
}

/// Runs `launcher` in `context` with one marker argument, watching its `exec`s, and
/// returns the JVM command line it runs; never runs the program's `main` (see the module
/// docs). Gives up after `timeout`.
pub fn learn(
    launcher: &Path,
    context: &Context,
    timeout: Duration,
) -> Result<JvmCommand, LearnError> {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let marker = format!("ngd-learn-{}-{serial}", std::process::id());
    let (tx, rx) = std::sync::mpsc::channel();
    let mut cmd = Command::new(launcher);
    cmd.arg(&marker)
        .env_clear()
        .envs(context.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&context.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    // The filter goes on a thread that does nothing but start the launcher: its other
    // threads, and this process's, are not watched.
    let starter = std::thread::Builder::new()
        .name("ngd-learn".into())
        .spawn(move || {
            let listener = match seccomp::watch_execs() {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return None;
                }
            };
            let _ = tx.send(listener.try_clone());
            Some(cmd.spawn())
        })
        .map_err(LearnError::Start)?;
    let listener = match rx.recv() {
        Ok(Ok(listener)) => listener,
        Ok(Err(e)) => {
            let _ = starter.join();
            return Err(LearnError::Denied(e));
        }
        Err(_) => {
            let _ = starter.join();
            return Err(LearnError::Start(std::io::Error::other(
                "the thread starting it ended",
            )));
        }
    };
    let mut watch = Watch {
        listener,
        marker,
        starter: Some(starter),
        child: None,
        deadline: Instant::now() + timeout,
    };
    let result = watch.run(context, timeout);
    watch.end();
    result
}

/// The watch over one launcher run.
struct Watch {
    listener: OwnedFd,
    marker: String,
    /// The thread starting the launcher, until it has (it waits for the first `exec`).
    starter: Option<std::thread::JoinHandle<Option<std::io::Result<Child>>>>,
    child: Option<Child>,
    deadline: Instant,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("listener", &self.listener)
            .field("child", &self.child)
            .finish_non_exhaustive()
    }
}

impl Watch {
    fn run(&mut self, context: &Context, timeout: Duration) -> Result<JvmCommand, LearnError> {
        loop {
            if Instant::now() > self.deadline {
                return Err(LearnError::Timeout(timeout));
            }
            if self.starter.as_ref().is_some_and(|s| s.is_finished()) {
                match self.starter.take().map(std::thread::JoinHandle::join) {
                    Some(Ok(Some(Ok(child)))) => self.child = Some(child),
                    Some(Ok(Some(Err(e)))) => return Err(LearnError::Start(e)),
                    _ => {
                        return Err(LearnError::Start(std::io::Error::other(
                            "the thread starting it failed",
                        )))
                    }
                }
            }
            if let Some(child) = &mut self.child {
                if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                    return Err(LearnError::NoJava);
                }
            }
            let mut fds = [libc::pollfd {
                fd: self.listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            match ng_sys::fd::poll(&mut fds, 50) {
                Ok(0) => continue,
                Ok(_) if fds[0].revents & libc::POLLIN == 0 => {
                    // Every watched process has ended (POLLHUP).
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(LearnError::Watch(e)),
            }
            let waiting = match seccomp::receive(&self.listener) {
                Ok(w) => w,
                // The caller died before it was read; or another reader took it.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINTR)) => continue,
                Err(e) => return Err(LearnError::Watch(e)),
            };
            match self.judge(&waiting, context) {
                Verdict::Run => {
                    let _ = seccomp::let_run(&self.listener, waiting.id);
                }
                Verdict::Stop(result) => {
                    ng_sys::signal::kill(waiting.pid, libc::SIGKILL);
                    let _ = seccomp::refuse(&self.listener, waiting.id, libc::EPERM);
                    return result;
                }
            }
        }
    }

    /// What to do with one `exec`.
    fn judge(&self, waiting: &Waiting, context: &Context) -> Verdict {
        let exec = match read_exec(waiting) {
            Ok(e) => e,
            // Its process died meanwhile: nothing runs.
            Err(_) if !seccomp::still_waiting(&self.listener, waiting.id) => return Verdict::Run,
            // The system keeps other processes' memory from this one (Yama's
            // `ptrace_scope`, a security module): as denied as the filter itself.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Verdict::Stop(Err(LearnError::Denied(e)))
            }
            // Unreadable: if it was the JVM, letting it run would run the program.
            Err(e) => return Verdict::Stop(Err(LearnError::Watch(e))),
        };
        if !seccomp::still_waiting(&self.listener, waiting.id) {
            return Verdict::Run;
        }
        let marked = exec
            .argv
            .iter()
            .any(|a| a.as_bytes() == self.marker.as_bytes());
        // Unmarked programs (`java -version`, `uname`), and the launcher's own steps that
        // carry the marker on (a shell, `env`, another script), run.
        let (true, Some(file)) = (marked, &exec.file) else {
            return Verdict::Run;
        };
        let Some(home) = jdk_home(file) else {
            return Verdict::Run;
        };
        if file.file_name() != Some(OsStr::new("java")) {
            return Verdict::Stop(Err(LearnError::OtherJdkTool(file.clone())));
        }
        Verdict::Stop(self.command(file, home, &exec, context))
    }

    /// The JVM command line of the marked `exec` of `java`, checked against `context`.
    fn command(
        &self,
        java: &Path,
        home: PathBuf,
        exec: &Exec,
        context: &Context,
    ) -> Result<JvmCommand, LearnError> {
        let mut args: Vec<&OsString> = exec.argv.iter().skip(1).collect();
        if args.pop().map(|a| a.as_bytes()) != Some(self.marker.as_bytes()) {
            return Err(LearnError::NotPassedThrough);
        }
        let started = std::fs::canonicalize(&context.cwd).unwrap_or_else(|_| context.cwd.clone());
        if let Some(cwd) = &exec.cwd {
            if *cwd != started {
                return Err(LearnError::ChangesDirectory(cwd.clone()));
            }
        }
        let (env, removed) = changed_variables(&context.env, &exec.envp);
        if !removed.is_empty() {
            return Err(LearnError::RemovesVariables(removed));
        }
        let args = args
            .into_iter()
            .map(|a| a.to_str().map(str::to_owned).ok_or(LearnError::NotUtf8))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(JvmCommand {
            java: java.to_path_buf(),
            java_home: home,
            args,
            env,
        })
    }

    /// Kills what is left of the launcher and reaps it. A launcher that has ended is not
    /// signalled: in ngd, which adopts and reaps exited children, its pid may be reaped
    /// already.
    fn end(&mut self) {
        fn kill(child: &mut Child) {
            if matches!(child.try_wait(), Ok(None)) {
                ng_sys::signal::kill_group(child.id(), libc::SIGKILL);
            }
        }
        if let Some(child) = &mut self.child {
            kill(child);
        }
        // A starter still waiting for its `exec`: refuse what comes until it has (for a
        // few seconds at most; past them its thread is left behind).
        for _ in 0..250 {
            let Some(starter) = self.starter.take() else {
                break;
            };
            if starter.is_finished() {
                if let Ok(Some(Ok(mut child))) = starter.join() {
                    kill(&mut child);
                    self.child = Some(child);
                }
                break;
            }
            let mut fds = [libc::pollfd {
                fd: self.listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            if ng_sys::fd::poll(&mut fds, 20).is_ok_and(|n| n > 0) {
                if let Ok(w) = seccomp::receive(&self.listener) {
                    ng_sys::signal::kill(w.pid, libc::SIGKILL);
                    let _ = seccomp::refuse(&self.listener, w.id, libc::EPERM);
                }
            }
            self.starter = Some(starter);
        }
        if let Some(mut child) = self.child.take() {
            // Reaped here unless ngd's own reaping took it first.
            let _ = child.wait();
        }
    }
}

/// What [`Watch::judge`] decided.
#[derive(Debug)]
enum Verdict {
    /// Let the `exec` run.
    Run,
    /// Kill its process: learning is over, with this result.
    Stop(Result<JvmCommand, LearnError>),
}

/// The home of the JDK whose `bin` directory holds `file` (its parent is `bin`, beside a
/// `release` file or a `lib/server/libjvm.so`).
fn jdk_home(file: &Path) -> Option<PathBuf> {
    let bin = file.parent()?;
    if bin.file_name() != Some(OsStr::new("bin")) {
        return None;
    }
    let home = bin.parent()?;
    let is_jdk = home.join("release").is_file()
        || home.join("lib/server/libjvm.so").is_file()
        || home.join("jre/lib/amd64/server/libjvm.so").is_file();
    is_jdk.then(|| home.to_path_buf())
}

/// The variables `java` got (`got`, `NAME=VALUE` entries) with another value than the
/// launcher was `given`, or that it was not given, sorted by name; and the names of those
/// it was given but `java` did not get.
fn changed_variables(
    given: &[(OsString, OsString)],
    got: &[OsString],
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    use std::collections::BTreeMap;
    let given: BTreeMap<&[u8], &[u8]> = given
        .iter()
        .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
        .collect();
    let got: BTreeMap<&[u8], &[u8]> = got
        .iter()
        .filter_map(|e| {
            let e = e.as_bytes();
            let eq = e.iter().position(|&b| b == b'=')?;
            Some((&e[..eq], &e[eq + 1..]))
        })
        .collect();
    let set = got
        .iter()
        .filter(|(name, value)| given.get(*name) != Some(*value))
        .map(|(name, value)| {
            (
                OsStr::from_bytes(name).into(),
                OsStr::from_bytes(value).into(),
            )
        })
        .collect();
    let removed = given
        .keys()
        .filter(|name| !got.contains_key(*name))
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect();
    (set, removed)
}

/// Reads a waiting `exec` from the caller's memory (`/proc/PID/mem`).
fn read_exec(w: &Waiting) -> std::io::Result<Exec> {
    let proc_dir = PathBuf::from(format!("/proc/{}", w.pid));
    let mem = File::open(proc_dir.join("mem"))?;
    let (dirfd, path, argv, envp, flags) = match w.call {
        ExecCall::Execve => (libc::AT_FDCWD as i64, w.args[0], w.args[1], w.args[2], 0),
        ExecCall::Execveat => (
            w.args[0] as i32 as i64,
            w.args[1],
            w.args[2],
            w.args[3],
            w.args[4],
        ),
    };
    let mut budget = MAX_BYTES;
    let path = OsString::from_vec(read_string(&mem, path, &mut budget)?);
    let argv = read_words(&mem, argv, &mut budget)?;
    let envp = read_words(&mem, envp, &mut budget)?;
    let cwd = std::fs::canonicalize(proc_dir.join("cwd")).ok();
    let base = if dirfd == i64::from(libc::AT_FDCWD) {
        proc_dir.join("cwd")
    } else {
        proc_dir.join("fd").join(dirfd.to_string())
    };
    let full = if path.is_empty() && flags & libc::AT_EMPTY_PATH as u64 != 0 {
        base
    } else if Path::new(&path).is_absolute() {
        PathBuf::from(&path)
    } else {
        base.join(&path)
    };
    Ok(Exec {
        file: std::fs::canonicalize(full).ok(),
        argv,
        envp,
        cwd,
    })
}

/// A NULL-terminated array of strings at `at` (`argv`, `envp`); none for a NULL `at`.
fn read_words(mem: &File, at: u64, budget: &mut usize) -> std::io::Result<Vec<OsString>> {
    let mut words = Vec::new();
    if at == 0 {
        return Ok(words);
    }
    for i in 0..MAX_WORDS as u64 {
        let mut ptr = [0u8; 8];
        mem.read_exact_at(&mut ptr, at + i * 8)?;
        let ptr = u64::from_ne_bytes(ptr);
        if ptr == 0 {
            return Ok(words);
        }
        words.push(OsString::from_vec(read_string(mem, ptr, budget)?));
    }
    Err(std::io::Error::other("too many arguments"))
}

/// A NUL-terminated string at `at`, taken from `budget`.
fn read_string(mem: &File, at: u64, budget: &mut usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        let addr = at + out.len() as u64;
        // Stop at a page end: the next page may not be mapped.
        let to_page_end = 4096 - (addr % 4096) as usize;
        let want = chunk.len().min(to_page_end);
        let n = mem.read_at(&mut chunk[..want], addr)?;
        if n == 0 {
            return Err(std::io::Error::other("unreadable memory"));
        }
        if let Some(end) = chunk[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            *budget = budget.saturating_sub(end + 1);
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..n]);
        if out.len() >= *budget {
            return Err(std::io::Error::other("arguments too long"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|&(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn variables_a_launcher_sets_are_kept_and_removals_named() {
        let given = env(&[("A", "1"), ("B", "2"), ("SHLVL", "1")]);
        let got: Vec<OsString> = ["A=1", "B=3", "C=4", "SHLVL=2"]
            .map(OsString::from)
            .to_vec();
        let (set, removed) = changed_variables(&given, &got);
        assert_eq!(set, env(&[("B", "3"), ("C", "4"), ("SHLVL", "2")]));
        assert!(removed.is_empty());
        let same: Vec<OsString> = ["A=1", "B=2", "SHLVL=1"].map(OsString::from).to_vec();
        assert_eq!(changed_variables(&given, &same), (vec![], vec![]));
        let fewer: Vec<OsString> = ["A=1", "SHLVL=1"].map(OsString::from).to_vec();
        assert_eq!(
            changed_variables(&given, &fewer),
            (vec![], vec!["B".to_owned()])
        );
    }

    #[test]
    fn a_jdk_is_known_by_its_layout() {
        let d = tempfile::tempdir().unwrap();
        let java = d.path().join("jdk/bin/java");
        std::fs::create_dir_all(java.parent().unwrap()).unwrap();
        std::fs::write(&java, "").unwrap();
        assert_eq!(jdk_home(&java), None);
        std::fs::write(d.path().join("jdk/release"), "JAVA_VERSION=\"17\"\n").unwrap();
        assert_eq!(jdk_home(&java), Some(d.path().join("jdk")));
        assert_eq!(jdk_home(Path::new("/bin/sh")), None);
    }

    fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// A fake JDK whose `java` would leave a mark if it ran: learning must not run it.
    fn fake_jdk(dir: &Path) -> PathBuf {
        let home = dir.join("jdk");
        std::fs::create_dir_all(home.join("bin")).unwrap();
        std::fs::write(home.join("release"), "JAVA_VERSION=\"17\"\n").unwrap();
        script(
            &home.join("bin"),
            "java",
            &format!("#!/bin/sh\ntouch {}/ran\n", dir.display()),
        );
        home
    }

    fn context(dir: &Path) -> Context {
        let pwd = dir.to_string_lossy().into_owned();
        let env = env(&[
            ("HOME", "/"),
            ("PATH", "/usr/bin:/bin"),
            ("PWD", pwd.as_str()),
        ]);
        Context {
            cwd: dir.to_path_buf(),
            env,
        }
    }

    #[test]
    fn a_launcher_running_java_by_its_absolute_path_is_learned_without_running_it() {
        let d = tempfile::tempdir().unwrap();
        let d = std::fs::canonicalize(d.path()).unwrap();
        let home = fake_jdk(&d);
        let launcher = script(
            &d,
            "tool",
            &format!(
                "#!/bin/sh\nCP=\"$(cat cp.txt)\"\nexport CP_SET=yes\n{}/bin/java -Xss1m -cp \"$CP\" p.Main first \"$@\"\necho after\n",
                home.display()
            ),
        );
        std::fs::write(d.join("cp.txt"), "/a.jar:/b.jar").unwrap();
        let learned = learn(&launcher, &context(&d), Duration::from_secs(20));
        let learned = match learned {
            Err(LearnError::Denied(e)) => panic!("seccomp user notification denied here: {e}"),
            other => other.unwrap(),
        };
        assert_eq!(learned.java, home.join("bin/java"));
        assert_eq!(learned.java_home, home);
        assert_eq!(
            learned.args,
            ["-Xss1m", "-cp", "/a.jar:/b.jar", "p.Main", "first"]
        );
        assert_eq!(learned.env, env(&[("CP_SET", "yes")]));
        assert!(!d.join("ran").exists(), "the JDK's java ran");
    }

    #[test]
    fn what_a_warm_session_could_not_reproduce_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let d = std::fs::canonicalize(d.path()).unwrap();
        let home = fake_jdk(&d);
        let java = home.join("bin/java");
        type Expected = fn(&LearnError) -> bool;
        let cases: [(&str, Expected); 5] = [
            (
                "unset HOME; exec JAVA -cp x M \"$@\"",
                |e| matches!(e, LearnError::RemovesVariables(n) if n == &["HOME"]),
            ),
            ("cd /; exec JAVA -cp x M \"$@\"", |e| {
                matches!(e, LearnError::ChangesDirectory(_))
            }),
            ("exec JAVA -cp x M \"$@\" --more", |e| {
                matches!(e, LearnError::NotPassedThrough)
            }),
            ("exit 3", |e| matches!(e, LearnError::NoJava)),
            // `java -version` is not the program: it runs (and marks).
            ("JAVA -version; exit 0", |e| matches!(e, LearnError::NoJava)),
        ];
        for (body, expected) in cases {
            let text = format!(
                "#!/bin/sh\n{}\n",
                body.replace("JAVA", &java.to_string_lossy())
            );
            let launcher = script(&d, "tool", &text);
            let err = learn(&launcher, &context(&d), Duration::from_secs(20)).unwrap_err();
            assert!(expected(&err), "{body}: {err:?}");
        }
        assert!(d.join("ran").exists(), "java -version did not run");
        let other = script(&home.join("bin"), "jshell", "#!/bin/sh\n");
        let launcher = script(
            &d,
            "tool",
            &format!("#!/bin/sh\nexec {} \"$@\"\n", other.display()),
        );
        let err = learn(&launcher, &context(&d), Duration::from_secs(20)).unwrap_err();
        assert!(matches!(err, LearnError::OtherJdkTool(_)), "{err:?}");
    }
}
