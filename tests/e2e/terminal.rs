//! Terminal scenarios in a real pseudo-terminal (`ng_tests::pty`).
//!
//! * `cold::*`: every scenario of [`SCENARIOS`] run cold (`$PY` = `python3`), twice, must
//!   give the same transcript both times (so a warm run can be compared with it byte for
//!   byte) and what a cold run is known to show.
//! * `ngd_*`: `ng` and the stock C client in a terminal against `ngd-testbed`, both
//!   transports: output, the exit status, and `^C` ending the session.
//!
//! * `warm::*`: every scenario warm, through a fork-mode Python plugin (the script as a
//!   file, `python3 -m ngw script`), with our `ng` over the Unix socket: the transcript
//!   must equal the cold run of the same file byte for byte; the relayed ways (TCP, the
//!   stock client) must end with the cold run's status.

use ng_tests::pty::{Pty, Scenario, SCENARIOS};
use ng_tests::{bins, Flavor, NgdServer, Transport};
use std::ffi::OsStr;

fn python() -> std::path::PathBuf {
    bins::find_on_path("python3").expect("python3 on PATH (scripts/install-peers installs it)")
}

fn cold(name: &str) -> String {
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no scenario {name}"));
    let py = python();
    let first = scenario.transcript(py.as_os_str(), &[]).unwrap();
    let second = scenario.transcript(py.as_os_str(), &[]).unwrap();
    assert_eq!(
        first, second,
        "cold transcripts of {name} differ between runs"
    );
    first
}

/// What the terminal shows after `vi_writes_the_file`'s editor wrote the file and quit.
const VI_WROTE: &str = "hello from vi\n\x1b[?2004h$ ";

fn status(t: &str) -> &str {
    Scenario::status_of(t)
}

mod cold {
    use super::*;

    #[test]
    fn tput_size_and_resize() {
        let t = cold("tput_size_and_resize");
        assert!(t.contains("80\n24\n"), "{t}");
        assert!(t.contains("size 80 24"), "{t}");
        assert!(t.contains("resized 100 30"), "{t}");
        assert_eq!(status(&t), "status=0");
    }

    #[test]
    fn getpass_hides_the_password() {
        let t = cold("getpass_hides_the_password");
        assert!(t.contains("Password: "), "{t}");
        assert!(!t.contains("hunter2"), "the password was echoed: {t}");
        assert_eq!(status(&t), "status=0");
    }

    #[test]
    fn readline_arrow_keys() {
        let t = cold("readline_arrow_keys");
        assert!(!t.contains("^[[D"), "{t}");
        assert_eq!(status(&t), "status=0");
    }

    #[test]
    fn ctrl_c_caught() {
        let t = cold("ctrl_c_caught");
        assert_eq!(status(&t), "status=42");
    }

    #[test]
    fn ctrl_c_uncaught() {
        let t = cold("ctrl_c_uncaught");
        assert!(t.contains("Traceback"), "{t}");
        assert_eq!(status(&t), "status=130");
    }

    #[test]
    fn ctrl_z_and_fg() {
        let t = cold("ctrl_z_and_fg");
        assert_eq!(status(&t), "status=0");
    }

    #[test]
    fn timeout_sigterm() {
        let t = cold("timeout_sigterm");
        assert_eq!(status(&t), "status=124");
    }

    #[test]
    fn head_and_pipestatus() {
        let t = cold("head_and_pipestatus");
        assert!(t.contains("0\nbroken pipe\n"), "{t}");
        assert!(status(&t).ends_with(" 0"), "{t}");
    }

    #[test]
    fn stderr_interleaving() {
        let t = cold("stderr_interleaving");
        assert!(t.contains("out0\nerr0\nout1\nerr1\nout2\nerr2\n"), "{t}");
        assert_eq!(status(&t), "status=0 0");
    }

    #[test]
    fn closed_stdin() {
        let t = cold("closed_stdin");
        assert!(t.contains("stdin True"), "{t}");
    }

    #[test]
    fn closed_stdout() {
        let t = cold("closed_stdout");
        assert!(t.contains("closed\n") && !t.contains("open"), "{t}");
    }

    #[test]
    fn while_read_over_a_file() {
        let t = cold("while_read_over_a_file");
        assert!(t.contains("runs=3"), "{t}");
    }

    #[test]
    fn killed_by_sigkill() {
        let t = cold("killed_by_sigkill");
        assert_eq!(status(&t), "status=137");
    }

    #[test]
    fn killed_by_sigsegv() {
        let t = cold("killed_by_sigsegv");
        assert_eq!(status(&t), "status=139");
    }

    #[test]
    fn every_scenario_has_a_cold_test() {
        let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        let tested = [
            "tput_size_and_resize",
            "getpass_hides_the_password",
            "readline_arrow_keys",
            "ctrl_c_caught",
            "ctrl_c_uncaught",
            "ctrl_z_and_fg",
            "timeout_sigterm",
            "head_and_pipestatus",
            "stderr_interleaving",
            "closed_stdin",
            "closed_stdout",
            "while_read_over_a_file",
            "killed_by_sigkill",
            "killed_by_sigsegv",
            "dev_tty_write_and_read",
            "foreground_group_is_the_commands",
            "getpass_with_piped_stdin",
            "child_reads_dev_tty",
            "interactive_bash_has_job_control",
            "ctrl_c_reaches_the_child",
            "ctrl_z_and_fg_with_a_child",
            "less_as_a_pager",
            "piped_to_a_pager",
            "vi_writes_the_file",
            "raw_mode_left_behind",
            "client_killed_by_sigterm",
        ];
        assert_eq!(names, tested);
    }

    #[test]
    fn dev_tty_write_and_read() {
        let t = cold("dev_tty_write_and_read");
        assert!(
            t.contains("tty says hi\ntyped\nread b'typed\\n'\ndone"),
            "{t}"
        );
    }

    #[test]
    fn foreground_group_is_the_commands() {
        let t = cold("foreground_group_is_the_commands");
        assert!(t.contains("foreground True True"), "{t}");
    }

    #[test]
    fn getpass_with_piped_stdin() {
        let t = cold("getpass_with_piped_stdin");
        assert!(t.contains("got 7 stdin 'data\\n'"), "{t}");
        assert!(!t.contains("hunter2"), "{t}");
    }

    #[test]
    fn child_reads_dev_tty() {
        let t = cold("child_reads_dev_tty");
        assert!(t.contains("got hello"), "{t}");
    }

    #[test]
    fn interactive_bash_has_job_control() {
        let t = cold("interactive_bash_has_job_control");
        assert!(!t.contains("job control"), "{t}");
        assert_eq!(status(&t), "status=0");
    }

    #[test]
    fn ctrl_c_reaches_the_child() {
        let t = cold("ctrl_c_reaches_the_child");
        assert_eq!(status(&t), "status=130");
    }

    #[test]
    fn ctrl_z_and_fg_with_a_child() {
        let t = cold("ctrl_z_and_fg_with_a_child");
        assert!(t.contains("done"), "{t}");
        assert_eq!(status(&t), "status=0");
    }

    #[test]
    fn less_as_a_pager() {
        let t = cold("less_as_a_pager");
        assert!(t.contains("pager done"), "{t}");
    }

    #[test]
    fn piped_to_a_pager() {
        let t = cold("piped_to_a_pager");
        assert_eq!(status(&t), "status=0 0");
    }

    /// Vim's screen depends on when its terminal queries time out, so only the file and
    /// the status are compared.
    #[test]
    fn vi_writes_the_file() {
        let s = SCENARIOS
            .iter()
            .find(|s| s.name == "vi_writes_the_file")
            .unwrap();
        let t = s.transcript(python().as_os_str(), &[]).unwrap();
        assert!(t.contains(VI_WROTE), "{t}");
        assert_eq!(status(&t), "status=0");
    }

    #[test]
    fn raw_mode_left_behind() {
        // Cold, the terminal stays raw until the shell's next command line.
        let t = cold("raw_mode_left_behind");
        assert_eq!(status(&t), "status=0 restored=no");
    }

    #[test]
    fn client_killed_by_sigterm() {
        let t = cold("client_killed_by_sigterm");
        assert!(status(&t).starts_with("status=143"), "{t}");
    }
}

/// `client` in a terminal, against `ngd-testbed` on `transport`: a command's output and
/// status, then `^C` during `ngtest-sleep` ends the session with 130.
fn ngd_in_a_terminal(client: &std::path::Path, transport: Transport) {
    let server = NgdServer::shared(Flavor::Testbed);
    let address = server.address_on(transport);
    let args: Vec<String> = address
        .client_args()
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let ng = format!("{} {}", client.display(), args.join(" "));
    let mut pty = Pty::shell(80, 24, &[("NG", OsStr::new(&ng))]).unwrap();
    pty.line("$NG ngtest-echo </dev/null; echo \"@@status=$?@@\"")
        .unwrap();
    let shown = pty.expect("@@\r\n").unwrap();
    assert!(shown.ends_with("status=0@@\r\n"), "{}", pty.screen());
    pty.line("$NG ngtest-sleep 20000").unwrap();
    pty.expect("sleeping 20000").unwrap();
    // Let the shell make the job the terminal's foreground group first.
    std::thread::sleep(std::time::Duration::from_millis(200));
    pty.send(b"\x03").unwrap();
    pty.line("echo \"@@status=$?@@\"").unwrap();
    let shown = pty.expect("@@\r\n").unwrap();
    assert!(shown.ends_with("status=130@@\r\n"), "{}", pty.screen());
}

#[test]
fn ngd_ours_in_a_terminal_over_unix() {
    ngd_in_a_terminal(&bins::ng(), Transport::Unix);
}

#[test]
fn ngd_ours_in_a_terminal_over_tcp() {
    ngd_in_a_terminal(&bins::ng(), Transport::Tcp);
}

#[test]
fn ngd_c_client_in_a_terminal_over_unix() {
    ngd_in_a_terminal(&bins::c_client(), Transport::Unix);
}

#[test]
fn ngd_c_client_in_a_terminal_over_tcp() {
    ngd_in_a_terminal(&bins::c_client(), Transport::Tcp);
}

/// What a scripted server saw of one `ng` session in a terminal.
#[derive(Debug, PartialEq)]
struct Offer {
    /// Descriptors that rode with the header.
    with_header: usize,
    /// `NGD_CLIENT_PTY`'s map, and whether the slave was left out (offered).
    pty: Option<String>,
    offered: bool,
    /// The answer to `P`: how many descriptors came with it, and whether the first is a
    /// terminal.
    answer: Option<(usize, bool)>,
}

/// `ng` run in a terminal against a server that reads its header, asks for the
/// pseudo-terminal with `P` if `ask`, answers `F fds` and exits 0.
fn pty_offer(ask: bool) -> Offer {
    use ng_proto::{Features, ServerConfig, ServerEvent, ServerSession};
    use std::io::Write as _;
    use std::os::fd::AsRawFd as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let now = std::time::Instant::now();
        let mut s = ServerSession::new(ServerConfig::default(), now);
        let mut buf = ng_proto::bytes::BytesMut::new();
        let mut scratch = vec![0u8; 65536];
        let mut with_header = 0;
        let mut answer = None;
        let mut request = None;
        loop {
            let got = ng_sys::scm::recv_with_fds(conn.as_raw_fd(), &mut scratch, 8).unwrap();
            assert!(got.len > 0, "the client closed");
            if request.is_none() {
                with_header += got.fds.len();
                s.handle_passed_fds(got.fds.len());
            } else if !got.fds.is_empty() {
                s.handle_passed_fds(got.fds.len());
                let tty = std::io::IsTerminal::is_terminal(&got.fds[0]);
                answer = Some((got.fds.len(), tty));
            }
            buf.extend_from_slice(&scratch[..got.len]);
            s.handle_bytes(&mut buf, now).unwrap();
            let mut answered = false;
            while let Some(event) = s.poll_event() {
                match event {
                    ServerEvent::Launch(r) => request = Some(r),
                    ServerEvent::Pty => answered = true,
                    _ => {}
                }
            }
            let Some(r) = &request else { continue };
            if ask && !answered && s.request_pty() {
                conn.write_all(&s.take_transmit()).unwrap();
                continue;
            }
            if ask && !answered {
                continue;
            }
            if answered && answer.is_none() {
                answer = Some((0, false));
            }
            s.accept_extensions(Features::FDS);
            s.exit(0);
            conn.write_all(&s.take_transmit()).unwrap();
            let _ = conn.shutdown(std::net::Shutdown::Write);
            let _ = std::io::Read::read_to_end(&mut conn, &mut Vec::new());
            return Offer {
                with_header,
                pty: r.client.pty.map(|m| m.to_value()),
                offered: r.client.pty_offered,
                answer,
            };
        }
    });
    let ng = bins::ng();
    let server_arg = format!("local:{}", path.display());
    let mut pty = Pty::shell(
        80,
        24,
        &[
            ("NG", ng.as_os_str()),
            ("NAILGUN_SERVER", OsStr::new(&server_arg)),
        ],
    )
    .unwrap();
    pty.line("$NG some-command; echo \"@@status=$?@@\"")
        .unwrap();
    let shown = pty.expect("@@\r\n").unwrap();
    assert!(shown.ends_with("status=0@@\r\n"), "{}", pty.screen());
    server.join().unwrap()
}

#[test]
fn ours_offers_a_pseudo_terminal_and_opens_it_when_asked() {
    // Asked with `P`: the slave rides with `ng`'s `P`, and nothing with the header but
    // fds 0-2.
    assert_eq!(
        pty_offer(true),
        Offer {
            with_header: 3,
            pty: Some("0,1,2".into()),
            offered: true,
            answer: Some((1, true)),
        }
    );
    // Not asked (a built-in, or a worker that does not take `ctty`): none is passed.
    assert_eq!(
        pty_offer(false),
        Offer {
            with_header: 3,
            pty: Some("0,1,2".into()),
            offered: true,
            answer: None,
        }
    );
}

/// Every scenario warm: the script is a file served by a fork-mode Python plugin (`python3
/// -m ngw script NAME=FILE`), run through an `ng` symlink named after it, and compared
/// with the same file run cold (`$PY` is the file itself, with a `#!` line naming
/// python3). The typed line is the same (`"$PY"`), so the transcripts must be identical
/// byte for byte with our `ng` over the Unix socket, where the command runs on the
/// terminal itself. Over TCP and with the stock client the session is relayed: it must
/// end, with the statuses the classic protocol can give.
mod warm {
    use super::*;
    use ng_tests::plugins::{Plugin, PluginServer};
    use std::path::{Path, PathBuf};

    struct World {
        server: PluginServer,
        _dir: tempfile::TempDir,
        script: PathBuf,
        bin: PathBuf,
    }

    fn world(scenario: &Scenario) -> World {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join(format!("{}.py", scenario.name));
        let py = python();
        ng_testkit::exe::write_executable(
            &script,
            format!("#!{}\n{}\n", py.display(), scenario.script),
        );
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let target = format!("{}={}", scenario.name, script.display());
        let plugin = Plugin::new(
            "scenario",
            &[
                py.to_string_lossy().as_ref(),
                "-m",
                "ngw",
                "script",
                target.as_str(),
            ],
        )
        .commands(&[scenario.name]);
        let server = PluginServer::builder().plugin(plugin).start();
        World {
            server,
            _dir: dir,
            script,
            bin,
        }
    }

    impl World {
        /// `$PY` for a warm run through `client` over `transport`, and its environment.
        fn warm(
            &self,
            client: &Path,
            transport: Transport,
            name: &str,
        ) -> (PathBuf, Vec<(String, String)>) {
            let dir = self.bin.join(format!(
                "{}-{transport:?}",
                client.file_name().unwrap().to_string_lossy()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let link = dir.join(name);
            if !link.exists() {
                std::os::unix::fs::symlink(client, &link).unwrap();
            }
            let address = self.server.address(transport);
            let args = address.client_args();
            let mut env = vec![(
                "NAILGUN_SERVER".to_owned(),
                args[1].to_string_lossy().into_owned(),
            )];
            if let Some(port) = args.get(3) {
                env.push((
                    "NAILGUN_PORT".to_owned(),
                    port.to_string_lossy().into_owned(),
                ));
            }
            (link, env)
        }
    }

    fn run(scenario: &Scenario, py: &Path, env: &[(String, String)]) -> String {
        let env: Vec<(&str, &OsStr)> = env
            .iter()
            .map(|(k, v)| (k.as_str(), OsStr::new(v.as_str())))
            .collect();
        scenario
            .transcript_as("\"$PY\"", py.as_os_str(), &env)
            .unwrap_or_else(|e| panic!("{}: {e}", scenario.name))
    }

    fn scenario(name: &str) -> &'static Scenario {
        SCENARIOS.iter().find(|s| s.name == name).unwrap()
    }

    /// Cold and warm (ours, Unix) identical.
    fn exact(name: &str) -> (String, String) {
        let s = scenario(name);
        let w = world(s);
        let cold = run(s, &w.script, &[]);
        let (py, env) = w.warm(&bins::ng(), Transport::Unix, name);
        let warm = run(s, &py, &env);
        assert_eq!(warm, cold, "{name}: warm (ours, Unix) differs from cold");
        (cold, warm)
    }

    /// The relayed ways (our `ng` over TCP, the stock client over both transports) on the
    /// scenarios whose steps the classic protocol can meet: each ends with the status a
    /// cold run has.
    #[test]
    fn relayed_sessions_keep_working() {
        for name in [
            "stderr_interleaving",
            "closed_stdout",
            "while_read_over_a_file",
            "timeout_sigterm",
        ] {
            let s = scenario(name);
            let w = world(s);
            let cold = run(s, &w.script, &[]);
            for (client, transport) in [
                (bins::ng(), Transport::Tcp),
                (bins::c_client(), Transport::Unix),
                (bins::c_client(), Transport::Tcp),
            ] {
                let (py, env) = w.warm(&client, transport, name);
                let relayed = run(s, &py, &env);
                let code = |t: &str| status(t).trim_start_matches("status=").to_owned();
                assert_eq!(
                    code(&relayed),
                    code(&cold),
                    "{name} {client:?} over {transport:?}: {relayed}"
                );
            }
        }
    }

    #[test]
    fn tput_size_and_resize() {
        exact("tput_size_and_resize");
    }

    #[test]
    fn getpass_hides_the_password() {
        exact("getpass_hides_the_password");
    }

    #[test]
    fn readline_arrow_keys() {
        exact("readline_arrow_keys");
    }

    #[test]
    fn ctrl_c_caught() {
        let (_, warm) = exact("ctrl_c_caught");
        assert_eq!(status(&warm), "status=42");
    }

    #[test]
    fn ctrl_c_uncaught() {
        let (_, warm) = exact("ctrl_c_uncaught");
        assert_eq!(status(&warm), "status=130");
    }

    #[test]
    fn ctrl_z_and_fg() {
        exact("ctrl_z_and_fg");
    }

    #[test]
    fn timeout_sigterm() {
        let (_, warm) = exact("timeout_sigterm");
        assert_eq!(status(&warm), "status=124");
    }

    #[test]
    fn head_and_pipestatus() {
        exact("head_and_pipestatus");
    }

    #[test]
    fn stderr_interleaving() {
        exact("stderr_interleaving");
    }

    #[test]
    fn closed_stdin() {
        exact("closed_stdin");
    }

    #[test]
    fn closed_stdout() {
        exact("closed_stdout");
    }

    #[test]
    fn while_read_over_a_file() {
        let (_, warm) = exact("while_read_over_a_file");
        assert!(warm.contains("runs=3"), "{warm}");
    }

    #[test]
    fn killed_by_sigkill() {
        let (_, warm) = exact("killed_by_sigkill");
        assert_eq!(status(&warm), "status=137");
    }

    #[test]
    fn killed_by_sigsegv() {
        let (_, warm) = exact("killed_by_sigsegv");
        assert_eq!(status(&warm), "status=139");
    }

    #[test]
    fn dev_tty_write_and_read() {
        exact("dev_tty_write_and_read");
    }

    #[test]
    fn foreground_group_is_the_commands() {
        exact("foreground_group_is_the_commands");
    }

    #[test]
    fn getpass_with_piped_stdin() {
        exact("getpass_with_piped_stdin");
    }

    #[test]
    fn child_reads_dev_tty() {
        exact("child_reads_dev_tty");
    }

    #[test]
    fn interactive_bash_has_job_control() {
        exact("interactive_bash_has_job_control");
    }

    #[test]
    fn ctrl_c_reaches_the_child() {
        let (_, warm) = exact("ctrl_c_reaches_the_child");
        assert!(warm.contains("child got INT"), "{warm}");
    }

    #[test]
    fn ctrl_z_and_fg_with_a_child() {
        exact("ctrl_z_and_fg_with_a_child");
    }

    #[test]
    fn less_as_a_pager() {
        exact("less_as_a_pager");
    }

    /// `cmd | less`: the pager keeps the keyboard (no relay takes its `q`).
    #[test]
    fn piped_to_a_pager() {
        exact("piped_to_a_pager");
    }

    /// As cold (`cold::vi_writes_the_file`): the file and the status.
    #[test]
    fn vi_writes_the_file() {
        let t = warm_only("vi_writes_the_file");
        assert!(t.contains(VI_WROTE), "{t}");
        assert_eq!(status(&t), "status=0");
    }

    /// The command leaves its pseudo-terminal raw: `ng` gives the user's terminal its
    /// modes back (cold, it stays raw until the shell's next command line).
    #[test]
    fn raw_mode_left_behind() {
        let t = warm_only("raw_mode_left_behind");
        assert_eq!(status(&t), "status=0 restored=yes", "{t}");
    }

    /// `ng` killed by SIGTERM while the command has the terminal raw: the command dies
    /// of it and the user's terminal has its modes back.
    #[test]
    fn client_killed_by_sigterm() {
        let t = warm_only("client_killed_by_sigterm");
        assert_eq!(status(&t), "status=143 restored=yes", "{t}");
    }

    /// The warm transcript (ours, Unix) of a scenario whose cold run differs on purpose.
    fn warm_only(name: &str) -> String {
        let s = scenario(name);
        let w = world(s);
        let (py, env) = w.warm(&bins::ng(), Transport::Unix, name);
        run(s, &py, &env)
    }

    /// Over TCP and with the stock client nothing changes: the controlling-terminal
    /// scenarios end as they did before (the worker's emulated terminal is the
    /// controlling terminal of a relayed command whose stdin is a terminal).
    #[test]
    fn relayed_sessions_keep_their_terminal_behaviour() {
        for name in ["child_reads_dev_tty", "interactive_bash_has_job_control"] {
            let s = scenario(name);
            let w = world(s);
            let cold = run(s, &w.script, &[]);
            for (client, transport) in [
                (bins::ng(), Transport::Tcp),
                (bins::c_client(), Transport::Unix),
            ] {
                let (py, env) = w.warm(&client, transport, name);
                let relayed = run(s, &py, &env);
                let code = |t: &str| status(t).trim_start_matches("status=").to_owned();
                assert_eq!(
                    code(&relayed),
                    code(&cold),
                    "{name} {client:?} over {transport:?}: {relayed}"
                );
            }
        }
    }

    #[test]
    fn every_scenario_has_a_warm_test() {
        assert_eq!(SCENARIOS.len(), 26);
    }
}
