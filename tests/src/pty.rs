//! A pseudo-terminal driver, and the terminal scenarios that compare a warm command with
//! the same command run cold.
//!
//! [`Pty::shell`] starts an interactive `bash` (no rc files, job control on) as the session
//! leader of a new pseudo-terminal of a given size, so it behaves exactly as in a user's
//! terminal window: `^C` and `^Z` typed on the master become SIGINT and SIGTSTP for the
//! foreground job, `fg` resumes it, the shell prints `Killed` / `Segmentation fault`,
//! [`Pty::resize`] sends SIGWINCH. The driver is plain `posix_openpt`, a reader thread
//! that collects everything the terminal shows, and [`Pty::expect`] with a timeout (a
//! test failure message shows the whole screen so far), so no Python or `expect` is
//! needed.
//!
//! [`Scenario`]s are the cases of the terminal checklist (window size and resize,
//! `getpass`, readline editing, `^C` caught and uncaught, `^Z` and `fg`, `timeout -s TERM`,
//! `| head -1` with `PIPESTATUS`, `2>&1` interleaving, `<&-`/`>&-`, `while read`, deaths
//! by SIGSEGV and SIGKILL), and those of a controlling terminal (`/dev/tty` written and
//! read, by the command and by a child of it, the foreground process group, `getpass`
//! with stdin from a pipe, an interactive `bash` started by the command, `^C` reaching
//! the command's child, `^Z` and `fg` with a child running, `less` and `vi`, the terminal's
//! modes after a command that leaves it raw and after the client is killed). Each is a shell line that runs `$PY` (a Python script given
//! as `-c`), the keys typed, and a status line printed by the shell afterwards. A scenario
//! runs with `$PY` set to the real `python3` (cold) or to a warm way of running the same
//! script (for example `ng` symlinked as a plugin command); [`Scenario::transcript`]
//! normalises what the terminal showed so that the cold and warm transcripts can be
//! compared for equality.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What `bash` shows when it prompts again: bracketed paste on, then `PS1`.
pub const PROMPT: &str = "\x1b[?2004h$ ";

/// How long [`Pty::expect`] waits by default.
pub const EXPECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The screen so far, shared with the reader thread.
#[derive(Debug, Default)]
struct Screen {
    bytes: Vec<u8>,
    closed: bool,
}

/// An interactive shell on a new pseudo-terminal; killed when dropped.
#[derive(Debug)]
pub struct Pty {
    master: OwnedFd,
    child: Child,
    screen: Arc<(Mutex<Screen>, Condvar)>,
    /// How much of the screen [`Pty::expect`] has consumed.
    seen: usize,
}

fn check(rc: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(rc)
}

fn set_size(fd: RawFd, cols: u16, rows: u16) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize.
    check(
        unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) },
        "TIOCSWINSZ",
    )?;
    Ok(())
}

impl Pty {
    /// `bash --norc --noprofile -i` on a new `cols`×`rows` terminal, with `env` added to a
    /// small clean environment (`PATH`, `HOME`, `TERM=xterm`, `LANG=C.UTF-8`, a plain
    /// prompt `$ `, cores off).
    pub fn shell(cols: u16, rows: u16, env: &[(&str, &OsStr)]) -> io::Result<Pty> {
        // SAFETY: plain system calls; results checked.
        let master = unsafe {
            let fd = check(
                libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC),
                "posix_openpt",
            )?;
            OwnedFd::from_raw_fd(fd)
        };
        // SAFETY: as above, on the master we own.
        unsafe {
            check(libc::grantpt(master.as_raw_fd()), "grantpt")?;
            check(libc::unlockpt(master.as_raw_fd()), "unlockpt")?;
        }
        let mut name = [0 as libc::c_char; 128];
        // SAFETY: the buffer is valid for its length.
        let rc = unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: ptsname_r NUL-terminated it.
        let path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_owned();
        // SAFETY: opening the slave by name.
        let slave = unsafe {
            let fd = check(
                libc::open(
                    path.as_ptr(),
                    libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
                ),
                "open slave",
            )?;
            OwnedFd::from_raw_fd(fd)
        };
        set_size(slave.as_raw_fd(), cols, rows)?;

        let mut cmd = Command::new("bash");
        cmd.args(["--norc", "--noprofile", "-i"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env(
                "HOME",
                std::env::var_os("HOME").unwrap_or_else(|| "/".into()),
            )
            .env("TERM", "xterm")
            .env("LANG", "C.UTF-8")
            .env("PS1", "$ ")
            .env("PS2", "> ")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let slave_fd = slave.as_raw_fd();
        // SAFETY: only async-signal-safe calls between fork and exec: a new session with
        // the slave as its controlling terminal and as fds 0, 1, 2, default signals.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
                for fd in 0..3 {
                    if libc::dup2(slave_fd, fd) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                for s in [libc::SIGINT, libc::SIGQUIT, libc::SIGTSTP, libc::SIGPIPE] {
                    libc::signal(s, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(slave);

        let screen = Arc::new((Mutex::new(Screen::default()), Condvar::new()));
        let reader = {
            let screen = Arc::clone(&screen);
            let fd = master.try_clone()?;
            move || {
                let mut buf = [0u8; 4096];
                loop {
                    // SAFETY: reading into a local buffer.
                    let n =
                        unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                    let (lock, cond) = &*screen;
                    let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
                    if n <= 0 {
                        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
                        {
                            continue;
                        }
                        s.closed = true;
                        cond.notify_all();
                        return;
                    }
                    s.bytes.extend_from_slice(&buf[..n as usize]);
                    cond.notify_all();
                }
            }
        };
        std::thread::spawn(reader);
        let mut pty = Pty {
            master,
            child,
            screen,
            seen: 0,
        };
        // Type only once the shell shows its prompt: input typed earlier can be flushed
        // when it sets the terminal up.
        pty.expect("$ ")?;
        pty.line("ulimit -c 0; stty -ixon; echo @@ready@@")?;
        pty.expect("@@ready@@\r\n")?;
        pty.expect("$ ")?;
        Ok(pty)
    }

    /// Types `bytes`.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            // SAFETY: writing from a live slice.
            let n =
                unsafe { libc::write(self.master.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
            check(n as libc::c_int, "write to pty")?;
            rest = &rest[n as usize..];
        }
        Ok(())
    }

    /// Types a line of shell and Enter.
    pub fn line(&mut self, line: &str) -> io::Result<()> {
        self.send(line.as_bytes())?;
        self.send(b"\r")
    }

    /// Changes the terminal's size (the foreground job gets SIGWINCH).
    pub fn resize(&mut self, cols: u16, rows: u16) -> io::Result<()> {
        set_size(self.master.as_raw_fd(), cols, rows)
    }

    /// Waits until `text` appears after what earlier calls consumed, and consumes up to
    /// its end. Returns everything up to and including it.
    pub fn expect(&mut self, text: &str) -> io::Result<String> {
        self.expect_within(text, EXPECT_TIMEOUT)
    }

    /// [`Pty::expect`] with a timeout.
    pub fn expect_within(&mut self, text: &str, timeout: Duration) -> io::Result<String> {
        let deadline = Instant::now() + timeout;
        let (lock, cond) = &*self.screen;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let hay = &s.bytes[self.seen..];
            if let Some(at) = find(hay, text.as_bytes()) {
                let end = self.seen + at + text.len();
                let got = String::from_utf8_lossy(&s.bytes[self.seen..end]).into_owned();
                self.seen = end;
                return Ok(got);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || s.closed {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{text:?} did not appear; the terminal shows after the last match:\n{}",
                        String::from_utf8_lossy(hay)
                    ),
                ));
            }
            s = cond
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Everything the terminal showed so far.
    pub fn screen(&self) -> String {
        let s = self.screen.0.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&s.bytes).into_owned()
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        // SAFETY: killing and reaping our own child (the shell); its jobs get SIGHUP when
        // the terminal's session leader dies.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len().max(1)).position(|w| w == needle)
}

/// One thing to do in a scenario.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Type these bytes.
    Send(&'static str),
    /// Wait for this text.
    Expect(&'static str),
    /// Resize the terminal.
    Resize(u16, u16),
    /// Wait this many milliseconds: after a command prints that it is ready, the shell may
    /// not yet have made its job the terminal's foreground group, and a `^C` typed then
    /// would go to the shell.
    Pause(u64),
}

/// A terminal scenario: a shell line that runs `$PY` with a script, then the steps, then
/// the shell's `echo "status=$? ..."`; the transcript is what the terminal showed.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    /// Its name, for test names and messages.
    pub name: &'static str,
    /// The Python script (run as `$PY -c "$SCRIPT"`, with `SCRIPT` in the environment).
    pub script: &'static str,
    /// The shell line; `$RUN` stands for `"$PY" -c "$SCRIPT"`.
    pub line: &'static str,
    /// What to type and wait for while it runs.
    pub steps: &'static [Step],
    /// The status line printed afterwards (shell code for `echo`).
    pub status: &'static str,
}

impl Scenario {
    /// Runs the scenario in a fresh 80×24 terminal with `py` as `$PY` (plus `env`) and
    /// returns the transcript: from the command line to the status line, with `\r\n` made
    /// `\n`.
    pub fn transcript(&self, py: &OsStr, env: &[(&str, &OsStr)]) -> io::Result<String> {
        self.transcript_as("\"$PY\" -c \"$SCRIPT\"", py, env)
    }

    /// [`Scenario::transcript`] with `$RUN` standing for `run` (shell text typed as is, so
    /// two runs that type the same text can be compared byte for byte).
    pub fn transcript_as(
        &self,
        run: &str,
        py: &OsStr,
        env: &[(&str, &OsStr)],
    ) -> io::Result<String> {
        self.transcript_after("", run, py, env)
    }

    /// [`Scenario::transcript_as`] after `prelude` (a shell line, left out of the
    /// transcript; none if empty), for example a `cd`.
    pub fn transcript_after(
        &self,
        prelude: &str,
        run: &str,
        py: &OsStr,
        env: &[(&str, &OsStr)],
    ) -> io::Result<String> {
        let dir = tempfile::tempdir()?;
        let tmpfile = dir.path().join("lines.txt");
        let mut all: Vec<(&str, &OsStr)> = vec![
            ("PY", py),
            ("SCRIPT", OsStr::new(self.script)),
            ("TMPFILE", tmpfile.as_os_str()),
        ];
        all.extend_from_slice(env);
        let mut pty = Pty::shell(80, 24, &all)?;
        if !prelude.is_empty() {
            pty.line(prelude)?;
            pty.expect(PROMPT)?;
        }
        let line = self.line.replace("$RUN", run);
        pty.line(&line)?;
        let mut shown = String::new();
        for step in self.steps {
            match step {
                Step::Send(keys) => pty.send(keys.as_bytes())?,
                Step::Expect(text) => shown.push_str(&pty.expect(text)?),
                Step::Resize(c, r) => pty.resize(*c, *r)?,
                Step::Pause(ms) => std::thread::sleep(Duration::from_millis(*ms)),
            }
        }
        // Wait for the next prompt (bash turns bracketed paste back on just before it), so
        // the status line is not typed ahead and echoed in the middle of the output.
        shown.push_str(&pty.expect(PROMPT)?);
        pty.line(&format!("echo \"@@{}@@\"", self.status))?;
        // The echoed command line has `@@"` before its end of line; only the output line
        // ends in `@@` and a newline.
        shown.push_str(&pty.expect("@@\r\n")?);
        // The line discipline's echo of `^Z` races with the stop: when the shell takes the
        // terminal back before the echo was read, the echo is flushed. Cold runs show it or
        // not from one run to the next, so neither transcript keeps it.
        // The echo of `^C` races with the command's output: the line discipline sends
        // SIGINT before it echoes the key, so a command that prints as it is interrupted
        // (a traceback) may print first; cold runs show the echo before or after that
        // output. The transcript keeps how many times `^C` was echoed, not where.
        let shown = shown
            .replace("\r\n", "\n")
            .replace("^Z\n[1]+  Stopped", "\n[1]+  Stopped");
        let interrupts = shown.matches("^C").count();
        let mut shown = shown.replace("^C", "");
        if interrupts > 0 {
            shown.push_str(&format!("[^C echoed {interrupts} time(s)]\n"));
        }
        Ok(shown)
    }

    /// The status line of a transcript (`@@...@@`, the last one).
    pub fn status_of(transcript: &str) -> &str {
        transcript.rsplit("@@").nth(1).unwrap_or_default()
    }
}

/// The terminal checklist. Cold (`$PY` = `python3`) every one of them runs today; warm,
/// each must give the same transcript.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "tput_size_and_resize",
        script: "import os, signal, shutil, sys, time\n\
                 print('size', os.get_terminal_size().columns, os.get_terminal_size().lines, flush=True)\n\
                 got = []\n\
                 signal.signal(signal.SIGWINCH, lambda *a: got.append(os.get_terminal_size()))\n\
                 print('ready', flush=True)\n\
                 while not got: time.sleep(0.01)\n\
                 print('resized', got[0].columns, got[0].lines, flush=True)",
        line: "tput cols; tput lines; $RUN",
        steps: &[Step::Expect("ready"), Step::Pause(200), Step::Resize(100, 30), Step::Expect("resized")],
        status: "status=$?",
    },
    Scenario {
        name: "getpass_hides_the_password",
        script: "import getpass; p = getpass.getpass('Password: '); print('got', len(p))",
        line: "$RUN",
        steps: &[Step::Expect("Password: "), Step::Send("hunter2\r"), Step::Expect("got 7")],
        status: "status=$?",
    },
    Scenario {
        name: "readline_arrow_keys",
        script: "import readline; s = input('> '); print('line', repr(s))",
        line: "$RUN",
        steps: &[Step::Expect("> "), Step::Send("ac\x1b[Db\r"), Step::Expect("line 'abc'")],
        status: "status=$?",
    },
    Scenario {
        name: "ctrl_c_caught",
        script: "import sys, time\n\
                 try:\n    print('ready', flush=True); time.sleep(30)\n\
                 except KeyboardInterrupt:\n    print('caught'); sys.exit(42)",
        line: "$RUN",
        steps: &[Step::Expect("ready"), Step::Pause(200), Step::Send("\x03"), Step::Expect("caught")],
        status: "status=$?",
    },
    Scenario {
        name: "ctrl_c_uncaught",
        script: "import time; print('ready', flush=True); time.sleep(30)",
        line: "$RUN",
        steps: &[Step::Expect("ready"), Step::Pause(200), Step::Send("\x03"), Step::Expect("KeyboardInterrupt")],
        status: "status=$?",
    },
    Scenario {
        name: "ctrl_z_and_fg",
        script: "import time; print('ready', flush=True); time.sleep(1); print('done')",
        line: "$RUN",
        steps: &[
            Step::Expect("ready"),
            Step::Pause(200),
            Step::Send("\x1a"),
            Step::Expect("Stopped"),
            Step::Expect(PROMPT),
            Step::Send("fg\r"),
            Step::Expect("done"),
        ],
        status: "status=$?",
    },
    Scenario {
        name: "timeout_sigterm",
        script: "import time; time.sleep(30)",
        line: "timeout -s TERM 0.5 $RUN",
        steps: &[],
        status: "status=$?",
    },
    Scenario {
        name: "head_and_pipestatus",
        script: "import sys\n\
                 try:\n    [print(i) for i in range(100000)]\n\
                 except BrokenPipeError:\n    sys.stderr.write('broken pipe\\n'); sys.exit(3)",
        line: "$RUN | head -1",
        steps: &[],
        status: "status=${PIPESTATUS[*]}",
    },
    Scenario {
        name: "stderr_interleaving",
        script: "import sys\n\
                 for i in range(3):\n    sys.stdout.write(f'out{i}\\n'); sys.stdout.flush(); sys.stderr.write(f'err{i}\\n'); sys.stderr.flush()",
        line: "$RUN 2>&1 | cat",
        steps: &[],
        status: "status=${PIPESTATUS[*]}",
    },
    Scenario {
        name: "closed_stdin",
        script: "import sys; print('stdin', sys.stdin is None)",
        line: "$RUN <&-",
        steps: &[],
        status: "status=$?",
    },
    Scenario {
        name: "closed_stdout",
        script: "import sys, os\n\
                 try:\n    os.fstat(1); print('open', file=sys.stderr)\n\
                 except OSError:\n    print('closed', file=sys.stderr)",
        line: "$RUN >&-",
        steps: &[],
        status: "status=$?",
    },
    Scenario {
        name: "while_read_over_a_file",
        script: "pass",
        line: "printf 'one\\ntwo\\nthree\\n' > \"$TMPFILE\"; n=0; while read x; do $RUN; n=$((n+1)); done < \"$TMPFILE\"; echo runs=$n",
        steps: &[],
        status: "status=$?",
    },
    Scenario {
        name: "killed_by_sigkill",
        script: "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
        line: "$RUN",
        steps: &[Step::Expect("Killed")],
        status: "status=$?",
    },
    Scenario {
        name: "killed_by_sigsegv",
        script: "import os, signal; signal.signal(signal.SIGSEGV, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGSEGV)",
        line: "$RUN",
        steps: &[Step::Expect("Segmentation fault")],
        status: "status=$?",
    },
    Scenario {
        name: "dev_tty_write_and_read",
        script: "import sys\n\
                 tty = open('/dev/tty', 'rb+', buffering=0)\n\
                 tty.write(b'tty says hi\\n')\n\
                 sys.stderr.write('read %r\\n' % tty.readline())",
        line: "$RUN </dev/null >/dev/null; echo done",
        steps: &[Step::Expect("tty says hi"), Step::Send("typed\r"), Step::Expect("done")],
        status: "status=$?",
    },
    Scenario {
        name: "foreground_group_is_the_commands",
        script: "import os; print('foreground', os.tcgetpgrp(0) == os.getpgrp(), os.tcgetpgrp(1) == os.getpgrp())",
        line: "$RUN",
        steps: &[Step::Expect("foreground")],
        status: "status=$?",
    },
    Scenario {
        name: "getpass_with_piped_stdin",
        script: "import getpass, sys\n\
                 p = getpass.getpass('Password: ')\n\
                 print('got', len(p), 'stdin', repr(sys.stdin.read()))",
        line: "echo data | $RUN",
        steps: &[Step::Expect("Password: "), Step::Send("hunter2\r"), Step::Expect("stdin")],
        status: "status=$?",
    },
    Scenario {
        name: "child_reads_dev_tty",
        script: "import subprocess\n\
                 print('ready', flush=True)\n\
                 subprocess.run(['sh', '-c', 'read x </dev/tty; echo got $x'])",
        line: "$RUN",
        steps: &[Step::Expect("ready"), Step::Send("hello\r"), Step::Expect("got hello")],
        status: "status=$?",
    },
    Scenario {
        name: "interactive_bash_has_job_control",
        script: "import subprocess\n\
                 subprocess.run(['bash', '--norc', '--noprofile', '-i', '-c', 'echo hi'])",
        line: "$RUN 2>&1",
        steps: &[Step::Expect("hi")],
        status: "status=$?",
    },
    Scenario {
        name: "ctrl_c_reaches_the_child",
        script: "import subprocess\n\
                 print('ready', flush=True)\n\
                 r = subprocess.run(['sh', '-c', 'trap \"echo child got INT; exit 3\" INT; sleep 30 & wait'])\n\
                 print('child exited', r.returncode)",
        line: "$RUN",
        steps: &[Step::Expect("ready"), Step::Pause(300), Step::Send("\x03"), Step::Expect("child got INT")],
        status: "status=$?",
    },
    Scenario {
        name: "ctrl_z_and_fg_with_a_child",
        script: "import subprocess\n\
                 print('ready', flush=True)\n\
                 subprocess.run(['sleep', '1'])\n\
                 print('done')",
        line: "$RUN",
        steps: &[
            Step::Expect("ready"),
            Step::Pause(300),
            Step::Send("\x1a"),
            Step::Expect("Stopped"),
            Step::Expect(PROMPT),
            Step::Send("fg\r"),
            Step::Expect("done"),
        ],
        status: "status=$?",
    },
    Scenario {
        name: "less_as_a_pager",
        script: "import subprocess\n\
                 text = ''.join('line %d\\n' % i for i in range(100))\n\
                 subprocess.run(['less'], input=text.encode())\n\
                 print('pager done')",
        line: "LESS= LESSHISTFILE=- $RUN",
        steps: &[Step::Expect("line 5"), Step::Pause(300), Step::Send("q"), Step::Expect("pager done")],
        status: "status=$?",
    },
    Scenario {
        name: "piped_to_a_pager",
        script: "print(''.join('line %d\\n' % i for i in range(100)), end='')",
        line: "$RUN | LESS= LESSHISTFILE=- less",
        steps: &[Step::Expect("line 5"), Step::Pause(300), Step::Send("q")],
        status: "status=${PIPESTATUS[*]}",
    },
    Scenario {
        name: "vi_writes_the_file",
        script: "import os, subprocess\n\
                 path = os.environ['TMPFILE']\n\
                 subprocess.run(['vi', '-u', 'NONE', '-i', 'NONE', '-N', '-X', path])",
        line: "$RUN; cat \"$TMPFILE\"",
        steps: &[Step::Pause(800), Step::Send("ihello from vi\x1b"), Step::Pause(300), Step::Send(":wq\r"), Step::Expect("hello from vi\r\n")],
        status: "status=$?",
    },
    Scenario {
        name: "raw_mode_left_behind",
        script: "import tty; tty.setraw(0); print('raw')",
        line: "stty -g > \"$TMPFILE\"; $RUN",
        steps: &[Step::Expect("raw")],
        status: "status=$? restored=$(stty -g | cmp -s - \"$TMPFILE\" && echo yes || echo no)$(stty \"$(cat \"$TMPFILE\")\")",
    },
    Scenario {
        name: "client_killed_by_sigterm",
        script: "import os, time, tty\n\
                 tty.setraw(0); print('raw', flush=True)\n\
                 open(os.environ['TMPFILE'] + '.ready', 'w').close(); time.sleep(30)",
        line: "stty -g > \"$TMPFILE\"; sh -c '(while [ ! -e \"$1.ready\" ]; do sleep 0.05; done; kill -TERM \"$(cat \"$1.pid\")\") >/dev/null 2>&1 &' x \"$TMPFILE\"; bash -c 'echo $$ > \"$TMPFILE.pid\"; exec \"$@\"' x $RUN",
        steps: &[Step::Expect("raw")],
        status: "status=$? restored=$(stty -g | cmp -s - \"$TMPFILE\" && echo yes || echo no)$(stty \"$(cat \"$TMPFILE\")\")",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_matches_anywhere() {
        assert_eq!(find(b"abc", b"bc"), Some(1));
        assert_eq!(find(b"abc", b"x"), None);
    }
}
