//! Negotiated extensions between our `ng` and `ngd` (docs/protocol.md, "Negotiated
//! extensions"): the feature list, the client's descriptor map, window sizes, signal names
//! and the end-of-session report.
//!
//! Everything here is text on the wire, so a stock server that receives the client's
//! announcement just passes it on as environment entries:
//!
//! * `E NGD_CLIENT_FEATURES=fds,signals,winsize,stdin-window`: what the client can do
//!   ([`Features`]). Honoured only when it is the last `E` of the header.
//! * `E NGD_CLIENT_FDS=0,1,2`: which of the client's descriptors ride with the header as
//!   `SCM_RIGHTS`, in order ([`FdMap`]); a closed descriptor is left out of the list.
//! * `E NGD_CLIENT_PTY=0,1,2`: with `ctty`, the client offers a pseudo-terminal it would
//!   relay to its own terminal, which is the client's descriptors this list names
//!   ([`FdMap`]). Its slave rides with the client's `P`, the answer to the server's `P`
//!   (or, from an older client, right after the descriptors of `NGD_CLIENT_FDS`).
//! * `E NGD_CLIENT_WINSIZE=<cols> <rows> <xpixel> <ypixel>`: the terminal's size at start
//!   ([`WinSize`]).
//! * `E NGD_CLIENT_SIGIGN=SIGHUP,...`: signals the client's parent left ignored, which a
//!   cold command would have inherited as ignored.
//! * `E NGD_CLIENT_PROGRAM=/abs/path`: with `exec`, the program a shell would have run for
//!   the command's name, found by a client run under that name (a shim); the server serves
//!   it, or answers `F exec` and the client runs it itself.
//! * `E NGD_CLIENT_VERSION=0.4.0`: the client's version ([`crate::version`]); a server
//!   older than its client hands over to the client's own `ngd`.
//! * `P` (server to client, before `F`): send the offered pseudo-terminal; `P` (client to
//!   server): its slave rides with it.
//! * `F <features>` (server to client, first chunk but `P`): what the server does for this
//!   session.
//! * `K <SIGNAME>` (client to server): a signal for the command ([`SignalName`]).
//! * `W <cols> <rows> <xpixel> <ypixel>` (client to server): the terminal was resized.
//! * `Z <SIGNAME>` (server to client): the command stopped itself; stop the client too.
//! * `S <n>` (server to client, `stdin-window`): `n` more bytes of stdin credit.
//! * `X "<n> <SIGNAME>[ core]\n"` (server to client, `signals`): the command died of a
//!   signal ([`ExitReport`]).
//!
//! Names of signals travel as text (`SIGINT`), never as numbers: numbers differ between
//! systems, and the names are what ngw's `i` chunk already carries.

use std::fmt;

pub use crate::signal::SignalName;

/// The environment entry that announces the client's features.
pub const FEATURES_VAR: &[u8] = b"NGD_CLIENT_FEATURES";
/// The environment entry that names the descriptors passed with the header.
pub const FDS_VAR: &[u8] = b"NGD_CLIENT_FDS";
/// The environment entry naming the client's descriptors a passed pseudo-terminal stands
/// for (`ctty`).
pub const PTY_VAR: &[u8] = b"NGD_CLIENT_PTY";
/// The environment entry with the terminal's size at start.
pub const WINSIZE_VAR: &[u8] = b"NGD_CLIENT_WINSIZE";
/// The environment entry naming the signals the client's parent left ignored.
pub const SIGIGN_VAR: &[u8] = b"NGD_CLIENT_SIGIGN";

/// The environment entry naming the program a shell would run for the command's name.
pub const PROGRAM_VAR: &[u8] = b"NGD_CLIENT_PROGRAM";

/// The environment entry with the client's version.
pub const VERSION_VAR: &[u8] = b"NGD_CLIENT_VERSION";

/// True for the names of the extension entries a server strips from the environment
/// (`NGD_CLIENT_FEATURES`, `NGD_CLIENT_FDS`, `NGD_CLIENT_PTY`, `NGD_CLIENT_WINSIZE`,
/// `NGD_CLIENT_SIGIGN`, `NGD_CLIENT_PROGRAM`, `NGD_CLIENT_VERSION`).
pub fn is_extension_var(name: &[u8]) -> bool {
    name == FEATURES_VAR
        || name == VERSION_VAR
        || name == FDS_VAR
        || name == PTY_VAR
        || name == WINSIZE_VAR
        || name == SIGIGN_VAR
        || name == PROGRAM_VAR
}

/// Parses `NGD_CLIENT_SIGIGN`: comma-separated signal names; malformed names are skipped,
/// and at most 32 are kept.
pub fn parse_signal_list(value: &[u8]) -> Vec<SignalName> {
    value
        .split(|&b| b == b',')
        .filter_map(SignalName::new)
        .take(32)
        .collect()
}

/// A set of extension features.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Features(u8);

impl Features {
    /// No feature: the classic protocol.
    pub const NONE: Self = Self(0);
    /// `fds`: the client's descriptors 0, 1, 2 are passed with `SCM_RIGHTS` and the command
    /// uses them directly.
    pub const FDS: Self = Self(1);
    /// `signals`: `K` from the client, `Z` and the signal form of `X` from the server.
    pub const SIGNALS: Self = Self(2);
    /// `winsize`: `NGD_CLIENT_WINSIZE` and `W`.
    pub const WINSIZE: Self = Self(4);
    /// `stdin-window`: `S` carries a byte count; stdin moves in large chunks.
    pub const STDIN_WINDOW: Self = Self(8);
    /// `ctty`: with `fds`, the client also passes the slave of a pseudo-terminal it relays
    /// to its terminal (`NGD_CLIENT_PTY`), and the command makes it its controlling
    /// terminal.
    pub const CTTY: Self = Self(16);
    /// `exec`: the client can run the program itself (`NGD_CLIENT_PROGRAM`). Named in `F`
    /// alone, it means "run it yourself": no command runs on the server, and the client
    /// execs the program with its own argv, environment, directory and descriptors.
    pub const EXEC: Self = Self(32);
    /// Every feature a session can run with (all but `exec`, which replaces the session).
    pub const ALL: Self = Self(31);

    const NAMES: [(Self, &'static str); 6] = [
        (Self::FDS, "fds"),
        (Self::CTTY, "ctty"),
        (Self::SIGNALS, "signals"),
        (Self::WINSIZE, "winsize"),
        (Self::STDIN_WINDOW, "stdin-window"),
        (Self::EXEC, "exec"),
    ];

    /// Parses a comma-separated list; unknown names and empty items are ignored, so a
    /// newer peer's list is read as far as it is understood.
    pub fn parse(list: &[u8]) -> Self {
        let mut features = Self::NONE;
        for item in list.split(|&b| b == b',') {
            for (feature, name) in Self::NAMES {
                if item == name.as_bytes() {
                    features = features | feature;
                }
            }
        }
        features
    }

    /// The comma-separated list, in a fixed order.
    pub fn to_list(self) -> String {
        let mut out = String::new();
        for (feature, name) in Self::NAMES {
            if self.contains(feature) {
                if !out.is_empty() {
                    out.push(',');
                }
                out.push_str(name);
            }
        }
        out
    }

    /// True if every feature of `other` is in `self`.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if no feature is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The features in both sets.
    pub fn intersect(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// `self` without the features of `other`.
    pub fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// The features in either set (usable in constants).
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl std::ops::BitOr for Features {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Features({})", self.to_list())
    }
}

/// Which client descriptor each passed descriptor stands for, in the order they ride in
/// the `SCM_RIGHTS` message. A closed client descriptor is simply absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FdMap {
    /// Bit `fd` set: client descriptor `fd` is passed.
    slots: u8,
}

impl FdMap {
    /// A map of the given client descriptors (0, 1, 2) that are open.
    pub fn new(open: [bool; 3]) -> Self {
        Self {
            slots: (0..3).filter(|&fd| open[fd]).fold(0, |b, fd| b | 1 << fd),
        }
    }

    /// Parses `NGD_CLIENT_FDS`: a strictly increasing comma-separated list drawn from
    /// `0`, `1`, `2`; the empty string passes nothing. Anything else is `None`.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let mut slots = 0u8;
        if value.is_empty() {
            return Some(Self { slots });
        }
        let mut last: Option<usize> = None;
        for item in value.split(|&b| b == b',') {
            let fd = match item {
                b"0" => 0,
                b"1" => 1,
                b"2" => 2,
                _ => return None,
            };
            if last.is_some_and(|l| fd <= l) {
                return None;
            }
            slots |= 1 << fd;
            last = Some(fd);
        }
        Some(Self { slots })
    }

    /// The entry's value, e.g. `0,1,2` or `1,2`.
    pub fn to_value(self) -> String {
        let fds: Vec<String> = self.fds().map(|fd| fd.to_string()).collect();
        fds.join(",")
    }

    /// The client descriptors passed, in order.
    pub fn fds(self) -> impl Iterator<Item = usize> {
        (0..3).filter(move |&fd| self.slots & 1 << fd != 0)
    }

    /// How many descriptors ride with the header.
    pub fn count(self) -> usize {
        self.slots.count_ones() as usize
    }

    /// For client descriptor `fd` (0, 1, 2): its index among the passed descriptors, or
    /// `None` if the client's descriptor was closed (the command's stays closed too).
    pub fn index_of(self, fd: usize) -> Option<usize> {
        if fd < 3 && self.slots & 1 << fd != 0 {
            Some((self.slots & ((1 << fd) - 1)).count_ones() as usize)
        } else {
            None
        }
    }
}

/// A terminal's size, as `TIOCGWINSZ` reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WinSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
    /// Width in pixels (0 when unknown).
    pub xpixel: u16,
    /// Height in pixels (0 when unknown).
    pub ypixel: u16,
}

impl WinSize {
    /// `<cols> <rows> <xpixel> <ypixel>`, ASCII decimal.
    pub fn to_value(self) -> String {
        format!(
            "{} {} {} {}",
            self.cols, self.rows, self.xpixel, self.ypixel
        )
    }

    /// Parses exactly four space-separated decimal numbers of at most 5 digits, each
    /// fitting in 16 bits.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let mut numbers = [0u16; 4];
        let mut items = value.split(|&b| b == b' ');
        for slot in &mut numbers {
            *slot = parse_u16(items.next()?)?;
        }
        if items.next().is_some() {
            return None;
        }
        let [cols, rows, xpixel, ypixel] = numbers;
        Some(Self {
            cols,
            rows,
            xpixel,
            ypixel,
        })
    }
}

fn parse_u16(digits: &[u8]) -> Option<u16> {
    if digits.is_empty() || digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    u16::try_from(n).ok()
}

/// Parses the payload of a windowed `S`: ASCII decimal, 1 to 10 digits, at most
/// [`MAX_STDIN_GRANT`]. Anything else is `None`.
pub fn parse_grant(payload: &[u8]) -> Option<u32> {
    if payload.is_empty() || payload.len() > 10 || !payload.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = payload
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    u32::try_from(n).ok().filter(|&n| n <= MAX_STDIN_GRANT)
}

/// The most stdin credit one `S` may grant, and the most a client may hold: 64 MiB.
pub const MAX_STDIN_GRANT: u32 = 64 << 20;

/// Where a forwarded signal goes on the server (docs/protocol.md, "Signals").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalTarget {
    /// The command's whole process group, as a terminal signals a foreground job:
    /// `SIGINT`, `SIGQUIT`, `SIGHUP`, `SIGTSTP`, `SIGCONT`, `SIGWINCH`.
    Group,
    /// The command's own process only: everything else (`SIGTERM`, `SIGUSR1`, `SIGUSR2`).
    Process,
}

impl SignalTarget {
    /// The target for a forwarded signal.
    pub fn of(name: &SignalName) -> Self {
        use crate::Signal;
        match name.signal() {
            Some(
                Signal::Int
                | Signal::Quit
                | Signal::Hup
                | Signal::Tstp
                | Signal::Cont
                | Signal::Winch,
            ) => SignalTarget::Group,
            _ => SignalTarget::Process,
        }
    }
}

/// How a command ended, as the `X` payload tells a client that accepted `signals`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitReport {
    /// An ordinary exit code.
    Code(i32),
    /// Killed by a signal; `code` is what a classic client gets (128 + its number).
    Signal {
        /// The classic exit code.
        code: i32,
        /// The signal.
        signal: SignalName,
        /// The kernel wrote a core dump.
        core: bool,
    },
}

impl ExitReport {
    /// The `X` payload: `"<code>\n"`, or `"<code> <SIGNAME>[ core]\n"`.
    pub fn to_payload(&self) -> Vec<u8> {
        match self {
            ExitReport::Code(code) => crate::exit::format(*code),
            ExitReport::Signal { code, signal, core } => {
                let mut out = format!("{code} {signal}").into_bytes();
                if *core {
                    out.extend_from_slice(b" core");
                }
                out.push(b'\n');
                out
            }
        }
    }

    /// Reads an `X` payload. The code is parsed as `atoi` does ([`crate::exit::parse`]);
    /// the signal form is recognised only when the payload is exactly
    /// `<digits> <SIGNAME>[ core]` with an optional final newline.
    pub fn parse(payload: &[u8]) -> Self {
        let code = crate::exit::parse(payload);
        let text = payload.strip_suffix(b"\n").unwrap_or(payload);
        let mut words = text.split(|&b| b == b' ');
        let number = words.next().unwrap_or_default();
        let signal = words.next().and_then(SignalName::new);
        let core = match words.next() {
            None => Some(false),
            Some(b"core") => Some(true),
            Some(_) => None,
        };
        let digits = !number.is_empty() && number.iter().all(u8::is_ascii_digit);
        match (digits, signal, core, words.next()) {
            (true, Some(signal), Some(core), None) => ExitReport::Signal { code, signal, core },
            _ => ExitReport::Code(code),
        }
    }

    /// The classic exit code.
    pub fn code(&self) -> i32 {
        match self {
            ExitReport::Code(code) | ExitReport::Signal { code, .. } => *code,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_round_trip_and_ignore_unknown_names() {
        assert_eq!(
            Features::ALL.to_list(),
            "fds,ctty,signals,winsize,stdin-window"
        );
        assert_eq!(
            Features::parse(b"fds,ctty,signals,winsize,stdin-window"),
            Features::ALL
        );
        let f = Features::parse(b"future,,signals,FDS,stdin-window");
        assert_eq!(f, Features::SIGNALS | Features::STDIN_WINDOW);
        assert_eq!(f.to_list(), "signals,stdin-window");
        assert!(Features::parse(b"").is_empty());
        assert_eq!(Features::parse(b"signals,exec").to_list(), "signals,exec");
        assert!(!Features::ALL.contains(Features::EXEC));
        assert_eq!(
            Features::ALL.without(Features::FDS).intersect(f),
            Features::SIGNALS | Features::STDIN_WINDOW
        );
    }

    #[test]
    fn fd_maps_leave_closed_descriptors_out() {
        let all = FdMap::parse(b"0,1,2").unwrap();
        assert_eq!(all, FdMap::new([true; 3]));
        assert_eq!(all.count(), 3);
        let no_stdin = FdMap::parse(b"1,2").unwrap();
        assert_eq!(no_stdin.index_of(0), None);
        assert_eq!(no_stdin.index_of(1), Some(0));
        assert_eq!(no_stdin.index_of(2), Some(1));
        assert_eq!(no_stdin.to_value(), "1,2");
        assert_eq!(FdMap::parse(b"").unwrap().count(), 0);
        assert_eq!(FdMap::new([true, false, true]).to_value(), "0,2");
        for bad in [&b"2,1"[..], b"0,0", b"3", b"0,", b",1", b" 0", b"01"] {
            assert_eq!(FdMap::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn window_sizes_are_four_numbers() {
        let ws = WinSize {
            cols: 120,
            rows: 40,
            xpixel: 0,
            ypixel: 65535,
        };
        assert_eq!(ws.to_value(), "120 40 0 65535");
        assert_eq!(WinSize::parse(b"120 40 0 65535"), Some(ws));
        for bad in [
            &b"120 40 0"[..],
            b"120 40 0 0 0",
            b"120  40 0 0",
            b"1 2 3 65536",
            b"-1 2 3 4",
            b"",
        ] {
            assert_eq!(WinSize::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn grants_are_bounded_decimals() {
        assert_eq!(parse_grant(b"65536"), Some(65536));
        assert_eq!(parse_grant(b"67108864"), Some(MAX_STDIN_GRANT));
        for bad in [&b""[..], b"67108865", b"99999999999", b"1 ", b"+1", b"-1"] {
            assert_eq!(parse_grant(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn signal_names_are_checked() {
        assert_eq!(SignalName::new(b"SIGINT").unwrap().as_str(), "SIGINT");
        assert!(SignalName::new(b"SIGRTMIN+3").is_some());
        for bad in [
            &b"SIG"[..],
            b"INT",
            b"sigint",
            b"SIGint",
            b"SIG INT",
            b"SIGABCDEFGHIJKLM",
        ] {
            assert!(SignalName::new(bad).is_none(), "{bad:?}");
        }
        let name = |n: &[u8]| SignalName::new(n).unwrap();
        assert_eq!(SignalTarget::of(&name(b"SIGINT")), SignalTarget::Group);
        assert_eq!(SignalTarget::of(&name(b"SIGCONT")), SignalTarget::Group);
        assert_eq!(SignalTarget::of(&name(b"SIGTERM")), SignalTarget::Process);
        assert_eq!(SignalTarget::of(&name(b"SIGUSR1")), SignalTarget::Process);
    }

    #[test]
    fn exit_reports_keep_the_classic_code_in_front() {
        let segv = ExitReport::Signal {
            code: 139,
            signal: SignalName::new(b"SIGSEGV").unwrap(),
            core: true,
        };
        assert_eq!(segv.to_payload(), b"139 SIGSEGV core\n");
        assert_eq!(ExitReport::parse(b"139 SIGSEGV core\n"), segv);
        // A classic client reads the same status from it.
        assert_eq!(crate::exit::parse(&segv.to_payload()), 139);
        let kill = ExitReport::parse(b"137 SIGKILL\n");
        assert_eq!(
            kill,
            ExitReport::Signal {
                code: 137,
                signal: SignalName::new(b"SIGKILL").unwrap(),
                core: false
            }
        );
        assert_eq!(ExitReport::Code(0).to_payload(), b"0\n");
        for classic in [
            &b"0\n"[..],
            b"137",
            b" 137 SIGKILL\n",
            b"137 SIGKILL core extra\n",
            b"137 SIGKILL dumped\n",
            b"-9 SIGKILL\n",
            b"137 KILL\n",
        ] {
            assert_eq!(
                ExitReport::parse(classic),
                ExitReport::Code(crate::exit::parse(classic)),
                "{classic:?}"
            );
        }
    }
}
