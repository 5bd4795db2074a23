//! Sessions that carry the client's descriptors (`docs/ngw.md` §15.4), driven through
//! `ngw::testing::Driver`: on a pseudo-terminal passed as fds 0, 1 and 2, questions are
//! fledge's own prompts answered with keys, progress and output are drawn on the screen,
//! and the plugin's stderr is the terminal; Ctrl-C at a prompt and a forwarded SIGINT
//! cancel the run; without a terminal, line prompts use the descriptors; a plugin without
//! `protocol` runs on the descriptors themselves, gets forwarded signals and window sizes,
//! starts with the client's ignored signals, and its stops and death by signal are
//! reported (`signals`). Sessions without descriptors keep the relayed behaviour, with
//! windowed stdin.

mod common;
#[path = "common/pty.rs"]
mod pty;

use common::World;
use ngw::testing::{Driver, Outcome, Request};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Command;

use std::time::Duration;

/// The client's terminal: a pty of 100 × 24.
struct Pty(pty::Pty);

impl std::ops::Deref for Pty {
    type Target = pty::Pty;
    fn deref(&self) -> &pty::Pty {
        &self.0
    }
}

impl std::ops::DerefMut for Pty {
    fn deref_mut(&mut self) -> &mut pty::Pty {
        &mut self.0
    }
}

impl Pty {
    fn open() -> Self {
        Self(pty::Pty::open(100, 24))
    }

    /// The slave side as the client's fds 0, 1 and 2.
    fn fds(&self) -> Vec<OwnedFd> {
        let slave = self.slave.as_ref().unwrap();
        (0..3).map(|_| slave.try_clone().unwrap()).collect()
    }

    /// Waits for `what` (after byte `from`), then a moment for the prompt to start
    /// reading keys: keys typed while it is still drawing can be lost.
    fn prompt(&self, what: &str, from: usize) -> usize {
        let at = self.wait_for(what, from);
        std::thread::sleep(Duration::from_millis(300));
        at
    }

    fn type_keys(&mut self, k: &[u8]) {
        self.0.keys(k, 100);
    }
}

/// The bridge binary as ngd starts it, announcing every extension the driver speaks.
fn bridge(w: &World) -> Driver {
    bridge_with(w, json!({"max_sessions": 4}))
}

fn bridge_with(w: &World, options: Value) -> Driver {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ng-bridge-fledge"));
    cmd.args(["bridge", "fledge-v1", "--"])
        .env("NGW_BRIDGE_CONFIG", w.config(options));
    let mut d = Driver::spawn(cmd).unwrap();
    d.timeout = Duration::from_secs(60);
    d
}

fn request(w: &World, command: &str, args: &[&str]) -> Request {
    let mut r = Request::new(command, args.iter().copied()).cwd(&w.project);
    for (k, v) in w.env() {
        r = r.env(k, v);
    }
    r.env("TERM", "xterm-256color")
}

fn features(d: &Driver) -> Vec<String> {
    d.hello()["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_bridge_takes_the_client_descriptors_and_signals() {
    let w = World::new();
    let d = bridge(&w);
    let f = features(&d);
    for name in ["mux", "fds", "signals", "stdin-window"] {
        assert!(f.contains(&name.to_owned()), "{name} in {f:?}");
    }
}

#[test]
fn questions_progress_and_output_on_the_client_terminal() {
    let w = World::new();
    let mut d = bridge(&w);
    let mut pty = Pty::open();
    let id = d
        .start(&request(&w, "quiz", &["slow"]).fds(pty.fds(), "0,1,2"))
        .unwrap();
    // A prompt with a default: Enter takes it.
    let at = pty.prompt("Name", 0);
    pty.type_keys(b"\r");
    // A confirm: `n`.
    let at = pty.prompt("Loud?", at);
    pty.type_keys(b"n");
    // A select: the arrow moves from the default (staging) to production.
    let at = pty.prompt("production", at);
    pty.type_keys(b"\x1b[B");
    pty.type_keys(b"\r");
    // A multi_select: us is checked; down, space checks eu.
    let at = pty.prompt("ap", pty.wait_for("Regions", at));
    pty.type_keys(b"\x1b[B");
    pty.type_keys(b" ");
    pty.type_keys(b"\r");
    // The progress bar and the output are drawn on the terminal itself.
    let bar = pty.wait_for("Working (fledge-ask) [", at);
    pty.wait_for("3/3", bar);
    let out = d.finish(id).unwrap();
    let screen = pty.text();
    assert_eq!((out.taken, out.code), (Some(true), 0), "{screen}");
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    // The output follows the cleared progress bar on the screen.
    let start = screen
        .find("{\"name\"")
        .unwrap_or_else(|| panic!("no output in {screen:?}"));
    let line = screen[start..].lines().next().unwrap_or("");
    let v: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(
        v,
        json!({"name": "world", "loud": false, "env": "production", "regions": ["us", "eu"]})
    );
}

/// Runs `polite` on a fresh pty until its question is on the screen.
fn polite(w: &World, d: &mut Driver) -> (Pty, u64) {
    let pty = Pty::open();
    let id = d
        .start(&request(w, "polite", &[]).fds(pty.fds(), "0,1,2"))
        .unwrap();
    pty.prompt("gamma", pty.wait_for("Pick one:", 0));
    (pty, id)
}

#[test]
fn the_plugin_stderr_is_the_terminal_and_a_select_takes_arrows() {
    let w = World::new();
    let mut d = bridge(&w);
    let (mut pty, id) = polite(&w, &mut d);
    // No default: as under fledge, dialoguer highlights nothing until the first arrow,
    // which goes to alpha; the second goes to beta.
    pty.type_keys(b"\x1b[B");
    pty.type_keys(b"\x1b[B");
    pty.type_keys(b"\r");
    let out = d.finish(id).unwrap();
    // The screen is read by a thread: wait for the lines the run ends with.
    pty.wait_for("polite: stderr is a terminal: True", 0);
    pty.wait_for("polite: thanks", 0);
    pty.wait_for("picked beta", 0);
    let screen = pty.text();
    assert_eq!(out.code, 0, "{screen}");
    assert!(
        screen.contains("polite: stderr is a terminal: True"),
        "{screen}"
    );
    assert!(screen.contains("polite: thanks"), "{screen}");
    assert!(screen.contains("picked beta"), "{screen}");
}

#[test]
fn ctrl_c_at_a_terminal_prompt_cancels_the_run() {
    let w = World::new();
    let mut d = bridge(&w);
    let (mut pty, id) = polite(&w, &mut d);
    pty.type_keys(b"\x03");
    let out = d.finish(id).unwrap();
    // The screen is read by a thread: wait for the lines the run ends with.
    pty.wait_for("polite: cancelled (user_interrupt)", 0);
    pty.wait_for("Plugin 'fledge-polite' exited with code 130", 0);
    let screen = pty.text();
    assert!(
        screen.contains("polite: cancelled (user_interrupt)"),
        "{screen}"
    );
    assert_eq!(out.code, 130, "{screen}");
    assert!(
        screen.contains("Plugin 'fledge-polite' exited with code 130"),
        "{screen}"
    );
}

#[test]
fn a_forwarded_sigint_cancels_a_terminal_prompt() {
    let w = World::new();
    let mut d = bridge(&w);
    let (pty, id) = polite(&w, &mut d);
    d.interrupt(id, "SIGINT").unwrap();
    let out = d.finish(id).unwrap();
    // The screen is read by a thread: wait for the lines the run ends with.
    pty.wait_for("polite: cancelled (user_interrupt)", 0);
    let screen = pty.text();
    assert!(
        screen.contains("polite: cancelled (user_interrupt)"),
        "{screen}"
    );
    assert_eq!(out.code, 130, "{screen}");
}

#[test]
fn a_plugin_without_protocol_runs_on_the_descriptors_themselves() {
    let w = World::new();
    let mut d = bridge(&w);
    let mut pty = Pty::open();
    let id = d
        .start(&request(&w, "sig", &["tty"]).fds(pty.fds(), "0,1,2"))
        .unwrap();
    let at = pty.wait_for("fd 2: terminal", 0);
    pty.type_keys(b"typed at the terminal\r");
    pty.wait_for("read: typed at the terminal", at);
    let out = d.finish(id).unwrap();
    assert_eq!((out.taken, out.code), (Some(true), 0));
    let screen = pty.text();
    assert!(
        screen.contains("fd 0: terminal") && screen.contains("fd 1: terminal"),
        "{screen}"
    );
    // The same program with pipes for fds 0 and 1 and fd 2 closed.
    let (mut in_r, mut in_w) = pipe();
    let (mut out_r, out_w) = pipe();
    in_w.write_all(b"piped\n").unwrap();
    drop(in_w);
    let req = request(&w, "sig", &["tty"]).fds(
        vec![
            std::mem::replace(&mut in_r, File::open("/dev/null").unwrap()).into(),
            out_w.into(),
        ],
        "0,1",
    );
    let out = d.run(&req).unwrap();
    drop(req);
    assert_eq!(out.code, 0);
    let mut text = String::new();
    out_r.read_to_string(&mut text).unwrap();
    assert_eq!(
        text,
        "fd 0: not a terminal\nfd 1: not a terminal\nfd 2: not a terminal\nread: piped\n"
    );
}

fn pipe() -> (File, File) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors.
    unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

/// Runs `sig <mode>` with fds 1 and 2 on a pipe (read by a thread).
fn sig(w: &World, d: &mut Driver, mode: &str) -> (u64, std::thread::JoinHandle<String>) {
    let (mut r, wr) = pipe();
    let fds: Vec<OwnedFd> = vec![wr.try_clone().unwrap().into(), wr.into()];
    let id = d
        .start(&request(w, "sig", &[mode]).fds(fds, "1,2"))
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    });
    (id, reader)
}

#[test]
fn a_death_by_signal_is_reported_as_one() {
    let w = World::new();
    let mut d = bridge(&w);
    let (id, text) = sig(&w, &mut d, "kill");
    let out = d.finish(id).unwrap();
    assert_eq!(out.exit, b"137 SIGKILL\n");
    assert!(text
        .join()
        .unwrap()
        .contains("Plugin 'sig' exited with code 137"));
}

#[test]
fn a_stop_is_reported_and_sigcont_resumes_it() {
    let w = World::new();
    let mut d = bridge(&w);
    let (id, text) = sig(&w, &mut d, "stop");
    d.wait_until(id, |o: &Outcome| !o.stops.is_empty()).unwrap();
    d.interrupt(id, "SIGCONT").unwrap();
    let out = d.finish(id).unwrap();
    assert_eq!(
        (out.stops.as_slice(), out.code),
        (&["SIGTSTP".to_owned()][..], 0)
    );
    assert_eq!(text.join().unwrap(), "continued\n");
}

/// Starts `sig wait` with fd 1 on a pipe and waits for its `ready`: the session and the
/// pipe's read end.
fn sig_waiting(w: &World, d: &mut Driver) -> (u64, File) {
    let (mut r, wr) = pipe();
    let id = d
        .start(&request(w, "sig", &["wait"]).fds(vec![wr.into()], "1"))
        .unwrap();
    let mut ready = [0u8; 6];
    r.read_exact(&mut ready).unwrap();
    assert_eq!(&ready, b"ready\n");
    (id, r)
}

/// The children of `parent` that are stopped (`T`), from `/proc`.
fn stopped_children(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split(' ').collect();
        if fields.first() == Some(&"T") && fields.get(1) == Some(&parent.to_string().as_str()) {
            found.extend(
                entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<u32>().ok()),
            );
        }
    }
    found
}

#[test]
fn a_forwarded_stop_stops_the_plugin_and_is_not_reported_back() {
    let w = World::new();
    let mut d = bridge(&w);
    let bridge_pid = d.child().unwrap().id();
    let (id, mut r) = sig_waiting(&w, &mut d);
    d.interrupt(id, "SIGTSTP").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while stopped_children(bridge_pid).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the plugin never stopped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The client stopped itself when it forwarded the stop: the plugin's is not reported.
    d.interrupt(id, "SIGCONT").unwrap();
    d.interrupt(id, "SIGTERM process").unwrap();
    let out = d.finish(id).unwrap();
    let mut rest = String::new();
    r.read_to_string(&mut rest).unwrap();
    assert_eq!(
        (out.stops.as_slice(), rest.as_str(), out.code),
        (&[][..], "got TERM\n", 7)
    );
}

#[test]
fn a_window_size_and_a_process_signal_reach_the_plugin() {
    let w = World::new();
    let mut d = bridge(&w);
    let (id, mut r) = sig_waiting(&w, &mut d);
    // A resize reaches the plugin as SIGWINCH.
    d.interrupt(id, "winsize 120 40 0 0").unwrap();
    let mut winch = [0u8; 10];
    r.read_exact(&mut winch).unwrap();
    assert_eq!(&winch, b"got WINCH\n");
    d.interrupt(id, "SIGTERM process").unwrap();
    let out = d.finish(id).unwrap();
    let mut rest = String::new();
    r.read_to_string(&mut rest).unwrap();
    assert_eq!((rest.as_str(), out.code), ("got TERM\n", 7));
}

#[test]
fn signals_the_client_parent_ignored_start_ignored() {
    let w = World::new();
    let mut d = bridge(&w);
    let mask = |d: &mut Driver, ignored: Option<&str>| {
        let mut req = request(&w, "sig", &["sigign"]);
        if let Some(list) = ignored {
            req = req.env("NGW_SIGIGN", list);
        }
        let out = d.run(&req).unwrap();
        u64::from_str_radix(out.stdout_str().trim(), 16).unwrap()
    };
    let bit = |sig: i32| 1u64 << (sig - 1);
    let plain = mask(&mut d, None);
    let ignored = mask(&mut d, Some("SIGHUP,SIGUSR1"));
    assert_eq!(plain & (bit(libc::SIGHUP) | bit(libc::SIGUSR1)), 0);
    assert_eq!(ignored, plain | bit(libc::SIGHUP) | bit(libc::SIGUSR1));
}

#[test]
fn a_signal_the_bridge_inherited_ignored_is_not_the_plugins() {
    // An ngd started under `nohup` passes SIGHUP ignored to its bridges; a cold run gets
    // the client's ignored signals, not those. SIGUSR2 stands for it here: no other test
    // of this file uses it.
    // SAFETY: setting a signal's disposition to SIG_IGN; nothing in this test binary
    // handles SIGUSR2.
    unsafe { libc::signal(libc::SIGUSR2, libc::SIG_IGN) };
    let w = World::new();
    let mut d = bridge(&w);
    let out = d.run(&request(&w, "sig", &["sigign"])).unwrap();
    let mask = u64::from_str_radix(out.stdout_str().trim(), 16).unwrap();
    assert_eq!(mask & (1u64 << (libc::SIGUSR2 - 1)), 0, "mask {mask:x}");
}

#[test]
fn without_descriptors_the_session_is_relayed_as_before() {
    let w = World::new();
    let mut d = bridge(&w);
    let out = d
        .run(&request(&w, "quiz", &[]).stdin(&b"Bob\nn\n3\n2,3\n"[..]))
        .unwrap();
    assert_eq!((out.taken, out.code), (None, 0), "{}", out.stderr_str());
    let v: Value = serde_json::from_str(out.stdout_str().trim()).unwrap();
    assert_eq!(
        v,
        json!({"name": "Bob", "loud": false, "env": "production", "regions": ["eu", "ap"]})
    );
    assert!(out.stderr_str().contains("? Name: [world] Bob\n"));
}

#[test]
fn without_a_terminal_questions_are_line_prompts_on_the_client_descriptors() {
    let w = World::new();
    let mut d = bridge(&w);
    let (in_r, mut in_w) = pipe();
    let (mut out_r, out_w) = pipe();
    let (mut err_r, err_w) = pipe();
    in_w.write_all(b"Bob\nn\n3\n2,3\n").unwrap();
    drop(in_w);
    let req = request(&w, "quiz", &[]).fds(vec![in_r.into(), out_w.into(), err_w.into()], "0,1,2");
    let out = d.run(&req).unwrap();
    drop(req);
    assert_eq!((out.taken, out.code), (Some(true), 0));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    out_r.read_to_string(&mut stdout).unwrap();
    err_r.read_to_string(&mut stderr).unwrap();
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        v,
        json!({"name": "Bob", "loud": false, "env": "production", "regions": ["eu", "ap"]})
    );
    assert!(stderr.contains("? Name: [world] Bob\n"), "{stderr}");
    // No terminal on fd 2: no progress drawn.
    assert!(!stderr.contains("Working"), "{stderr}");
}

#[test]
fn relayed_stdin_streams_in_windows_to_a_plugin_without_protocol() {
    let w = World::new();
    let mut d = bridge(&w);
    let text: String = (0..40_000).map(|i| format!("line {i}\n")).collect();
    let out = d
        .run(&request(&w, "legacy", &["cat"]).stdin(text.clone()))
        .unwrap();
    assert_eq!((out.taken, out.code), (None, 0), "{}", out.stderr_str());
    let expected = format!("args: cat\ndir: legacy\n{}", text.to_uppercase());
    assert!(out.stdout_str() == expected, "{} bytes", out.stdout.len());
}

#[test]
fn prompts_and_logs_follow_the_client_colour_settings() {
    let w = World::new();
    let mut d = bridge(&w);
    let mut pty = Pty::open();
    let id = d
        .start(
            &request(&w, "polite", &[])
                .env("NO_COLOR", "1")
                .fds(pty.fds(), "0,1,2"),
        )
        .unwrap();
    pty.prompt("gamma", pty.wait_for("Pick one:", 0));
    pty.type_keys(b"\x1b[B");
    pty.type_keys(b"\r");
    let out = d.finish(id).unwrap();
    // The screen is read by a thread: wait for the lines the run ends with.
    pty.wait_for("? Pick one:", 0);
    pty.wait_for("  INFO [fledge-polite] polite: thanks", 0);
    pty.wait_for("picked alpha", 0);
    let screen = pty.text();
    assert_eq!(out.code, 0, "{screen}");
    assert!(screen.contains("? Pick one:"), "{screen}");
    assert!(
        screen.contains("  INFO [fledge-polite] polite: thanks"),
        "{screen}"
    );
    assert!(screen.contains("picked alpha"), "{screen}");
    assert!(
        !screen.contains("\x1b[33m") && !screen.contains("\x1b[36m"),
        "{screen:?}"
    );
}

/// The pty's local modes.
fn lflag(pty: &Pty) -> libc::tcflag_t {
    use std::os::fd::AsRawFd;
    // SAFETY: tcgetattr fills a termios for a descriptor we hold.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(
            libc::tcgetattr(pty.slave.as_ref().unwrap().as_raw_fd(), &mut t),
            0
        );
        t.c_lflag
    }
}

#[test]
fn a_prompt_timeout_leaves_the_terminal_as_it_was() {
    let w = World::new();
    let mut d = bridge_with(&w, json!({"prompt_timeout_ms": 1500}));
    let pty = Pty::open();
    let before = lflag(&pty);
    assert_ne!(before & libc::ICANON, 0);
    let id = d
        .start(&request(&w, "polite", &[]).fds(pty.fds(), "0,1,2"))
        .unwrap();
    // Nobody answers: the question is abandoned while the prompt is in raw mode.
    let out = d.finish(id).unwrap();
    // The screen is read by a thread: wait for the lines the run ends with.
    pty.wait_for("polite: cancelled (timeout)", 0);
    let screen = pty.text();
    assert!(screen.contains("polite: cancelled (timeout)"), "{screen}");
    assert_eq!(out.code, 130, "{screen}");
    assert_eq!(lflag(&pty), before);
}
