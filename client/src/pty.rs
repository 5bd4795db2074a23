//! A controlling terminal for the command (`ctty`, docs/protocol.md): a pseudo-terminal
//! that `ng` allocates and relays to the user's terminal.
//!
//! The user's terminal is the controlling terminal of the user's shell session, and a
//! terminal belongs to one session, so a warm command running in the worker's session can
//! never have it as its own. When one of fds 0–2 is that terminal (`ng`'s controlling
//! terminal, with `ng` in its foreground process group), `ng` offers a pseudo-terminal.
//! When the server asks for it (`P`: the command's worker can take it), `ng` opens one
//! with the terminal's modes and window size ([`Terminal::open_pty`]) and passes its
//! slave. If the server then answers `ctty`, the command put the slave in place of the
//! terminal and made it its controlling terminal; `ng` puts the user's terminal in raw
//! mode and copies bytes both ways ([`Relay`]): the keys reach the pseudo-terminal, whose
//! line discipline echoes them and turns `^C`, `^\` and `^Z` into signals for the
//! command's foreground process group, as the user's terminal does for a cold command.
//! Otherwise (not asked, or no `ctty` in the answer) the command runs on the user's
//! terminal itself: nothing is relayed.
//!
//! `ng` never holds the user's terminal raw while no process group gets its keys'
//! signals: if a key the pseudo-terminal would turn into a signal is typed while the
//! pseudo-terminal has no foreground process group (it is no session's controlling
//! terminal: `TIOCGPGRP` on the master gives 0), the key is not written to it, and `ng`
//! forwards the signal as `K` itself ([`key_signal`], [`Relay::take_signals`]), as it does
//! without a pseudo-terminal.
//!
//! Every way out of the session that can be caught restores the user's terminal modes
//! ([`Relay`]'s `Drop`, and [`Relay::suspend`] before `ng` stops); the relay holds at most
//! one read of each direction ([`INPUT_LEN`], [`OUTPUT_LEN`]).
//!
//! The relay's raw system calls are in the platform layer (`ng_sys::term`, `ng_sys::fd`).

use crate::exit::ClientError;
use ng_proto::FdMap;
use ng_sys::fd::file_type;
use ng_sys::term::{self, When};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

/// The most keyboard input read at once (and held while the pseudo-terminal is full).
pub const INPUT_LEN: usize = 4096;

/// The most output read from the pseudo-terminal at once.
pub const OUTPUT_LEN: usize = 64 * 1024;

/// After the command's exit: how long the pseudo-terminal may stay silent before `ng`
/// stops relaying it (a process the command left running holds it open).
pub const DRAIN_IDLE: Duration = Duration::from_millis(100);

/// The user's terminal, as fds 0–2 have it.
#[derive(Debug)]
pub struct Terminal {
    /// A descriptor of it that can be read and written: one of fds 0–2, or `_owned`.
    fd: RawFd,
    /// The terminal reopened for reading and writing, when no fd 0–2 of it is both.
    _owned: Option<OwnedFd>,
    /// Which of fds 0–2 are this terminal.
    map: FdMap,
}

impl Terminal {
    /// The terminal among fds 0–2 (`ttys`: which are terminals) when the command should
    /// get a controlling terminal: they are all the same terminal, it is `ng`'s
    /// controlling terminal and `ng` is in its foreground process group (a command run
    /// cold in the background would not own the keyboard either), and stdout is not a
    /// pipe or socket (`cmd | less`: the pager reads the keyboard, and a relay would take
    /// its keys). `None` otherwise.
    pub fn detect(ttys: [bool; 3]) -> Option<Terminal> {
        let first = (0..3).find(|&fd| ttys[fd])? as RawFd;
        let (_, dev) = file_type(first)?;
        if (0..3).any(|fd| ttys[fd] && file_type(fd as RawFd).map(|k| k.1) != Some(dev)) {
            return None;
        }
        if !ttys[1]
            && matches!(
                file_type(1),
                Some((libc::S_IFIFO | libc::S_IFSOCK, _)) | None
            )
        {
            return None;
        }
        if !term::in_foreground(first) {
            return None;
        }
        let readable = ng_sys::fd::access_mode;
        let rdwr = (0..3).find(|&fd| ttys[fd as usize] && readable(fd) == Some(libc::O_RDWR));
        let (fd, owned) = match rdwr {
            Some(fd) => (fd, None),
            None => {
                let owned: OwnedFd = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_NOCTTY)
                    .open(format!("/proc/self/fd/{first}"))
                    .ok()?
                    .into();
                (owned.as_raw_fd(), Some(owned))
            }
        };
        Some(Terminal {
            fd,
            _owned: owned,
            map: FdMap::new(ttys),
        })
    }

    /// Which of fds 0–2 are the terminal (`NGD_CLIENT_PTY`).
    pub fn map(&self) -> FdMap {
        self.map
    }

    /// A new pseudo-terminal with this terminal's modes and window size: the master, kept
    /// for the relay, and the slave, to pass to the server.
    pub fn open_pty(self) -> io::Result<(Relay, OwnedFd)> {
        let (master, slave) = term::open_pty()?;
        let saved = term::modes(self.fd)?;
        term::set_modes(slave.as_raw_fd(), &saved, When::Now)?;
        copy_size(self.fd, master.as_raw_fd());
        Ok((
            Relay {
                terminal: self,
                saved,
                master,
                state: RelayState::Offered,
                input: Vec::new(),
                input_at: 0,
                output: vec![0; OUTPUT_LEN].into_boxed_slice(),
                signals: Vec::new(),
            },
            slave,
        ))
    }
}

/// The signal key `key` makes on a terminal with `modes` (`ISIG` on, and the key is its
/// `VINTR`, `VQUIT` or `VSUSP`), when `foreground`, the terminal's foreground process
/// group, is `Some(0)`: no group would get it, so `ng` forwards it itself. `None`: the key
/// goes to the pseudo-terminal (a plain key, signals off, or a group that gets the
/// signal; also when the group is not known).
pub fn key_signal(
    key: u8,
    modes: &libc::termios,
    foreground: Option<libc::pid_t>,
) -> Option<libc::c_int> {
    if foreground != Some(0) || modes.c_lflag & libc::ISIG == 0 {
        return None;
    }
    // A control character of 0 is disabled (`_POSIX_VDISABLE`).
    [
        (libc::VINTR, libc::SIGINT),
        (libc::VQUIT, libc::SIGQUIT),
        (libc::VSUSP, libc::SIGTSTP),
    ]
    .into_iter()
    .find(|&(i, _)| modes.c_cc[i] != 0 && modes.c_cc[i] == key)
    .map(|(_, signo)| signo)
}

/// Sets `to`'s window size (a pseudo-terminal master) to `from`'s (a terminal).
fn copy_size(from: RawFd, to: RawFd) {
    if let Some(ws) = term::window_size(from) {
        let _ = term::set_window_size(to, &ws);
    }
}

/// Where the relay is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayState {
    /// The pseudo-terminal was offered; the server has not answered.
    Offered,
    /// Relaying, with the user's terminal raw.
    Raw,
    /// Relaying output only: `ng` is not in its terminal's foreground (continued with
    /// `bg`), so the terminal keeps its modes and the keyboard is not read.
    Background,
    /// Every holder of the slave closed it: nothing more comes.
    Ended,
}

/// The relay between the user's terminal and the command's pseudo-terminal.
#[derive(Debug)]
pub struct Relay {
    terminal: Terminal,
    /// The terminal's modes when `ng` started, restored whenever `ng` leaves raw mode.
    saved: libc::termios,
    master: OwnedFd,
    state: RelayState,
    /// Keyboard input read and not yet written to the pseudo-terminal, from `input_at`.
    input: Vec<u8>,
    input_at: usize,
    output: Box<[u8]>,
    /// The signals of keys typed while the pseudo-terminal had no foreground process
    /// group, for the session to forward ([`Relay::take_signals`]); at most one per key
    /// of one read.
    signals: Vec<libc::c_int>,
}

impl Relay {
    /// The server made the pseudo-terminal the command's controlling terminal: the master
    /// is made non-blocking and the user's terminal raw (when `ng` is in its foreground).
    pub fn start(&mut self) -> io::Result<()> {
        ng_sys::fd::set_nonblocking(self.master.as_raw_fd())?;
        self.state = RelayState::Background;
        self.resume();
        Ok(())
    }

    /// Whether it relays (the server answered `ctty` and the pseudo-terminal is open).
    pub fn relaying(&self) -> bool {
        matches!(self.state, RelayState::Raw | RelayState::Background)
    }

    /// The descriptors to wait for, with their events: the master (readable; writable while
    /// input waits), the terminal (readable, in raw mode and while no input waits).
    pub fn poll_fds(&self, out: &mut Vec<libc::pollfd>) {
        if !self.relaying() {
            return;
        }
        let waiting = self.input_at < self.input.len();
        out.push(libc::pollfd {
            fd: self.master.as_raw_fd(),
            events: libc::POLLIN | if waiting { libc::POLLOUT } else { 0 },
            revents: 0,
        });
        if self.state == RelayState::Raw && !waiting {
            out.push(libc::pollfd {
                fd: self.terminal.fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
    }

    /// Acts on what [`Relay::poll_fds`]'s descriptors reported.
    pub fn service(&mut self, ready: &[libc::pollfd]) -> Result<(), ClientError> {
        for p in ready.iter().filter(|p| p.revents != 0) {
            if p.fd == self.master.as_raw_fd() {
                if p.revents & libc::POLLOUT != 0 {
                    self.write_input();
                }
                if p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                    self.read_output()?;
                }
            } else if p.fd == self.terminal.fd && self.state == RelayState::Raw {
                self.read_input();
            }
        }
        Ok(())
    }

    /// Reads what the master has, up to [`OUTPUT_LEN`] (a pseudo-terminal gives at most a
    /// few KiB per read), and writes it to the terminal in one piece. At end (`EIO`: no
    /// process holds the slave any more) the relay has [`RelayState::Ended`].
    fn read_output(&mut self) -> Result<usize, ClientError> {
        let mut filled = 0;
        let mut ended = false;
        while filled < self.output.len() {
            let rest = &mut self.output[filled..];
            match ng_sys::fd::read(self.master.as_raw_fd(), rest) {
                Ok(n) if n > 0 => {
                    filled += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                _ => ended = true,
            }
            break;
        }
        if filled > 0 {
            crate::io::write_out(self.terminal.fd, &self.output[..filled])?;
        }
        if ended {
            self.end();
        }
        Ok(filled)
    }

    /// Reads what the keyboard has (the terminal is raw: bytes as typed).
    fn read_input(&mut self) {
        self.input.resize(INPUT_LEN, 0);
        let n = ng_sys::fd::read(self.terminal.fd, &mut self.input).unwrap_or(0);
        self.input.truncate(n);
        self.input_at = 0;
        self.take_signal_keys();
        self.write_input();
    }

    /// Takes out of the input just read the keys whose signal no process group would get
    /// ([`key_signal`]): their signals wait in `signals` for the session to forward.
    fn take_signal_keys(&mut self) {
        let master = self.master.as_raw_fd();
        let Ok(modes) = term::modes(master) else {
            return;
        };
        let foreground = Some(0);
        if !self
            .input
            .iter()
            .any(|&k| key_signal(k, &modes, foreground).is_some())
        {
            return;
        }
        let foreground = term::foreground_group(master);
        let signals = &mut self.signals;
        self.input
            .retain(|&k| match key_signal(k, &modes, foreground) {
                Some(signo) => {
                    signals.push(signo);
                    false
                }
                None => true,
            });
    }

    /// The signals of keys that no process group would have got, in the order typed: the
    /// session forwards them (`K`).
    pub fn take_signals(&mut self) -> Vec<libc::c_int> {
        std::mem::take(&mut self.signals)
    }

    /// Writes the waiting input to the master as far as it takes it.
    fn write_input(&mut self) {
        while self.input_at < self.input.len() {
            let rest = &self.input[self.input_at..];
            match ng_sys::fd::write(self.master.as_raw_fd(), rest) {
                Ok(n) if n > 0 => {
                    self.input_at += n;
                    continue;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {}
            }
            // The pseudo-terminal is gone: the keys go nowhere, as after a cold exit.
            self.input.clear();
            self.input_at = 0;
            return;
        }
        self.input.clear();
        self.input_at = 0;
    }

    /// Relays whatever output is waiting now, without blocking.
    pub fn flush_output(&mut self) -> Result<(), ClientError> {
        while self.relaying() && self.read_output()? > 0 {}
        Ok(())
    }

    /// After the command's exit: relays its last output, until every holder of the slave
    /// closed it or it stayed silent for [`DRAIN_IDLE`]; then restores the terminal.
    pub fn drain(&mut self) -> Result<(), ClientError> {
        let mut quiet_since = Instant::now();
        while self.relaying() {
            let left = DRAIN_IDLE.saturating_sub(quiet_since.elapsed());
            if left.is_zero() {
                break;
            }
            let mut p = [libc::pollfd {
                fd: self.master.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            let _ = ng_sys::fd::poll(&mut p, left.as_millis().max(1) as libc::c_int);
            if p[0].revents != 0 && self.read_output()? > 0 {
                quiet_since = Instant::now();
            }
        }
        self.end();
        Ok(())
    }

    /// Before `ng` stops: the output so far is shown and the terminal gets its modes back.
    pub fn suspend(&mut self) -> Result<(), ClientError> {
        self.flush_output()?;
        if self.state == RelayState::Raw {
            self.restore();
            self.state = RelayState::Background;
        }
        Ok(())
    }

    /// Once `ng` runs again (or the relay starts): raw mode if `ng` is in its terminal's
    /// foreground, the window size copied to the pseudo-terminal.
    pub fn resume(&mut self) {
        if self.state != RelayState::Background {
            return;
        }
        copy_size(self.terminal.fd, self.master.as_raw_fd());
        if !term::in_foreground(self.terminal.fd) {
            return;
        }
        let mut raw = self.saved;
        term::make_raw(&mut raw);
        if term::set_modes(self.terminal.fd, &raw, When::Now).is_ok() {
            self.state = RelayState::Raw;
        }
    }

    /// The user's terminal changed size: the pseudo-terminal takes it (the kernel sends
    /// SIGWINCH to its foreground process group).
    pub fn resize(&self) {
        if self.relaying() {
            copy_size(self.terminal.fd, self.master.as_raw_fd());
        }
    }

    /// The relay is over: the terminal gets its modes back.
    fn end(&mut self) {
        if self.state == RelayState::Raw {
            self.restore();
        }
        self.state = RelayState::Ended;
    }

    fn restore(&self) {
        // Drain: the output written in raw mode is shown before the terminal processes
        // output again.
        let _ = term::set_modes(self.terminal.fd, &self.saved, When::Drain);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_terminal_means_no_relay() {
        assert!(Terminal::detect([false; 3]).is_none());
    }

    /// A pseudo-terminal pair standing for the user's terminal: (its master, the
    /// [`Terminal`] on its slave).
    fn user_terminal() -> (OwnedFd, Terminal) {
        let (master, slave) = term::open_pty().unwrap();
        let ws = libc::winsize {
            ws_row: 33,
            ws_col: 111,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        term::set_window_size(slave.as_raw_fd(), &ws).unwrap();
        let terminal = Terminal {
            fd: slave.as_raw_fd(),
            _owned: Some(slave),
            map: FdMap::new([true; 3]),
        };
        (master, terminal)
    }

    fn modes(fd: RawFd) -> libc::termios {
        term::modes(fd).unwrap()
    }

    fn read_some(fd: RawFd) -> Vec<u8> {
        let mut p = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut buf = vec![0u8; 4096];
        let _ = ng_sys::fd::poll(&mut p, 2000);
        let n = ng_sys::fd::read(fd, &mut buf).unwrap_or(0);
        buf.truncate(n);
        buf
    }

    #[test]
    fn the_pseudo_terminal_starts_with_the_terminals_modes_and_size() {
        let (_user, terminal) = user_terminal();
        let user_fd = terminal.fd;
        let (relay, slave) = terminal.open_pty().unwrap();
        let (want, got) = (modes(user_fd), modes(slave.as_raw_fd()));
        assert_eq!(
            (got.c_lflag, got.c_iflag, got.c_oflag),
            (want.c_lflag, want.c_iflag, want.c_oflag)
        );
        let ws = term::window_size(slave.as_raw_fd()).unwrap();
        assert_eq!((ws.ws_col, ws.ws_row), (111, 33));
        assert_eq!(relay.state, RelayState::Offered);
        assert!(!relay.relaying());
    }

    #[test]
    fn output_is_relayed_and_the_end_restores_nothing_it_did_not_change() {
        let (user, terminal) = user_terminal();
        let user_fd = terminal.fd;
        let before = modes(user_fd);
        let (mut relay, slave) = terminal.open_pty().unwrap();
        relay.start().unwrap();
        // Not our controlling terminal: output only, the terminal's modes untouched.
        assert_eq!(relay.state, RelayState::Background);
        let text = b"hello\n";
        ng_sys::fd::write(slave.as_raw_fd(), text).unwrap();
        drop(slave);
        relay.drain().unwrap();
        assert_eq!(relay.state, RelayState::Ended);
        // The pseudo-terminal turned \n into \r\n (its modes are the terminal's); the
        // user's terminal did it once more.
        assert_eq!(read_some(user.as_raw_fd()), b"hello\r\r\n");
        assert_eq!(modes(user_fd).c_lflag, before.c_lflag);
    }

    fn cooked() -> libc::termios {
        let (_user, terminal) = user_terminal();
        modes(terminal.fd)
    }

    #[test]
    fn a_signal_key_is_forwarded_only_when_no_group_gets_it() {
        let m = cooked();
        let (intr, quit, susp) = (
            m.c_cc[libc::VINTR],
            m.c_cc[libc::VQUIT],
            m.c_cc[libc::VSUSP],
        );
        assert_eq!(key_signal(intr, &m, Some(0)), Some(libc::SIGINT));
        assert_eq!(key_signal(quit, &m, Some(0)), Some(libc::SIGQUIT));
        assert_eq!(key_signal(susp, &m, Some(0)), Some(libc::SIGTSTP));
        assert_eq!(key_signal(b'a', &m, Some(0)), None);
        // A foreground group gets it from the line discipline; unknown: left to it too.
        assert_eq!(key_signal(intr, &m, Some(1234)), None);
        assert_eq!(key_signal(intr, &m, None), None);
        // Keys make no signals (raw mode), or the key is disabled.
        let mut raw = m;
        term::make_raw(&mut raw);
        assert_eq!(key_signal(intr, &raw, Some(0)), None);
        let mut off = m;
        off.c_cc[libc::VINTR] = 0;
        assert_eq!(key_signal(intr, &off, Some(0)), None);
        assert_eq!(key_signal(0, &off, Some(0)), None);
    }

    #[test]
    fn keys_of_a_pty_that_is_no_ones_terminal_become_signals() {
        let (user, terminal) = user_terminal();
        let user_fd = terminal.fd;
        let (mut relay, _slave) = terminal.open_pty().unwrap();
        relay.start().unwrap();
        // The user's terminal raw, as `resume` makes it in the foreground.
        let intr = modes(user_fd).c_cc[libc::VINTR];
        let mut raw = modes(user_fd);
        term::make_raw(&mut raw);
        term::set_modes(user_fd, &raw, When::Now).unwrap();
        // The slave is no session's controlling terminal: no foreground group.
        ng_sys::fd::write(user.as_raw_fd(), &[b'a', intr, b'b']).unwrap();
        let mut p = [libc::pollfd {
            fd: relay.terminal.fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        let _ = ng_sys::fd::poll(&mut p, 2000);
        relay.read_input();
        assert_eq!(relay.take_signals(), vec![libc::SIGINT]);
        assert!(relay.take_signals().is_empty());
    }

    #[test]
    fn raw_mode_is_left_on_suspend_and_on_drop() {
        let (_user, terminal) = user_terminal();
        // A copy to look at the modes with once the relay (and its descriptor) is gone.
        let user = terminal._owned.as_ref().unwrap().try_clone().unwrap();
        let user_fd = user.as_raw_fd();
        let before = modes(user_fd);
        let (mut relay, _slave) = terminal.open_pty().unwrap();
        relay.start().unwrap();
        // As `resume` does in the foreground (here the terminal is no process's).
        let mut raw = before;
        term::make_raw(&mut raw);
        term::set_modes(user_fd, &raw, When::Now).unwrap();
        relay.state = RelayState::Raw;
        relay.suspend().unwrap();
        assert_eq!(relay.state, RelayState::Background);
        assert_eq!(modes(user_fd).c_lflag, before.c_lflag);
        term::set_modes(user_fd, &raw, When::Now).unwrap();
        relay.state = RelayState::Raw;
        drop(relay);
        assert_eq!(modes(user_fd).c_lflag, before.c_lflag);
    }
}
