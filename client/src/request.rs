//! The request header: arguments, environment, working directory and command, as bytes.
//!
//! The header goes out in the reference C client's order (`ClientSession::send_header` does
//! the framing):
//!
//! 1. the arguments, `A` for a plain one, `L` pieces and an empty `L` for a file argument;
//! 2. `NAILGUN_FILESEPARATOR=/`, `NAILGUN_PATHSEPARATOR=:`;
//! 3. `NAILGUN_TTY_0..2=<0|1>`, whether stdin, stdout and stderr are terminals;
//! 4. the client's real environment, byte for byte and in its own order (an inherited
//!    `NAILGUN_TTY_*` therefore overrides the computed one, as with the reference);
//! 5. the `--nailgun-D` definitions, so they win (the real entries they override are left
//!    out);
//! 6. `NGD_CLIENT_UMASK=<octal>`, the client's umask: an ngd extension (a stock server just
//!    passes it on as one more variable; ngd strips it and gives a plugin command the
//!    client's umask, as a cold run would have);
//! 7. the extension entries ([`Extensions`]; docs/protocol.md, "Negotiated extensions"):
//!    `NGD_CLIENT_SIGIGN` (signals the parent left ignored, if any), `NGD_CLIENT_WINSIZE`
//!    (if a stdio fd is a terminal), `NGD_CLIENT_FDS` (on a Unix socket: which of fds 0, 1,
//!    2 ride with the header; a closed one is left out), `NGD_CLIENT_VERSION` (this
//!    binary's version, [`ng_proto::version`]) and, last of all `E`s,
//!    `NGD_CLIENT_FEATURES`. A stock server passes them on as variables; ngd strips them;
//! 8. `D <cwd>` (empty if the working directory is gone) and `C <command>`.
//!
//! Nothing is ever converted to UTF-8: the server gets the OS's bytes.
//!
//! `--nailgun-filearg` files are read by [`load_args`] *before* connecting, so an unreadable
//! file fails the client without leaving the server a half-sent header.

use crate::args::Arg;
use crate::exit::{strerror, ClientError};
use ng_proto::{Header, HeaderArg};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// Turns command-line arguments into header arguments, reading `--nailgun-filearg` files.
pub fn load_args(args: Vec<Arg>) -> Result<Vec<HeaderArg>, ClientError> {
    args.into_iter()
        .map(|arg| match arg {
            Arg::Plain(a) => Ok(HeaderArg::Plain(a.into_vec())),
            Arg::File(path) => std::fs::read(&path).map(HeaderArg::File).map_err(|e| {
                ClientError::ConnectionBroken(format!(
                    "--nailgun-filearg: {}: {}",
                    path.to_string_lossy(),
                    strerror(&e)
                ))
            }),
        })
        .collect()
}

/// What the header is built from, gathered from the process.
#[derive(Debug)]
pub struct Context {
    /// `isatty` of fds 0, 1 and 2.
    pub ttys: [bool; 3],
    /// The environment, in the process's order.
    pub env: Vec<(OsString, OsString)>,
    /// The working directory; empty if it cannot be determined.
    pub cwd: Vec<u8>,
    /// The process's umask.
    pub umask: u32,
}

impl Context {
    /// The current process's terminals, environment and working directory.
    pub fn current() -> Context {
        let tty = ng_sys::fd::is_tty;
        Context {
            ttys: [tty(0), tty(1), tty(2)],
            env: std::env::vars_os().collect(),
            cwd: std::env::current_dir()
                .map(|d| d.into_os_string().into_vec())
                .unwrap_or_default(),
            umask: ng_sys::process::umask(),
        }
    }
}

/// The environment entry carrying the client's umask to ngd.
pub const UMASK_VAR: &str = "NGD_CLIENT_UMASK";

/// The environment entry naming the signals the client's parent left ignored.
pub const SIGIGN_VAR: &str = "NGD_CLIENT_SIGIGN";

/// What the client announces after its environment.
#[derive(Debug, Default)]
pub struct Extensions<'a> {
    /// The features announced.
    pub features: ng_proto::Features,
    /// With `fds`: which of fds 0, 1, 2 are passed.
    pub fds: Option<ng_proto::FdMap>,
    /// With `ctty`: which of them the pseudo-terminal passed after them stands for.
    pub pty: Option<ng_proto::FdMap>,
    /// The terminal's size, if a stdio fd is a terminal.
    pub winsize: Option<ng_proto::WinSize>,
    /// Signals the parent left ignored.
    pub ignored: Vec<ng_proto::SignalName>,
    /// With `exec`: the program the shell would run (`NGD_CLIENT_PROGRAM`).
    pub program: Option<&'a [u8]>,
}

/// Builds the header for `command`.
pub fn header(
    command: OsString,
    args: Vec<HeaderArg>,
    overrides: &[(OsString, OsString)],
    context: Context,
    extensions: &Extensions<'_>,
) -> Header {
    let mut env = Vec::with_capacity(6 + context.env.len() + overrides.len());
    env.push(b"NAILGUN_FILESEPARATOR=/".to_vec());
    env.push(b"NAILGUN_PATHSEPARATOR=:".to_vec());
    for (fd, &tty) in context.ttys.iter().enumerate() {
        env.push(format!("NAILGUN_TTY_{fd}={}", u8::from(tty)).into_bytes());
    }
    let overridden = |name: &OsStr| overrides.iter().any(|(n, _)| n == name);
    for (name, value) in &context.env {
        if !overridden(name) {
            env.push(entry(name, value));
        }
    }
    for (name, value) in overrides {
        env.push(entry(name, value));
    }
    env.push(format!("{UMASK_VAR}={:04o}", context.umask & 0o7777).into_bytes());
    if !extensions.features.is_empty() {
        if !extensions.ignored.is_empty() {
            let names: Vec<&str> = extensions.ignored.iter().map(|s| s.as_str()).collect();
            env.push(format!("{SIGIGN_VAR}={}", names.join(",")).into_bytes());
        }
        if let Some(size) = extensions.winsize {
            env.push(format!("NGD_CLIENT_WINSIZE={}", size.to_value()).into_bytes());
        }
        if let Some(fds) = extensions.fds {
            env.push(format!("NGD_CLIENT_FDS={}", fds.to_value()).into_bytes());
        }
        if let Some(pty) = extensions.pty {
            env.push(format!("NGD_CLIENT_PTY={}", pty.to_value()).into_bytes());
        }
        if let Some(program) = extensions.program {
            let mut e = b"NGD_CLIENT_PROGRAM=".to_vec();
            e.extend_from_slice(program);
            env.push(e);
        }
        env.push(format!("NGD_CLIENT_VERSION={}", ng_proto::version::current_text()).into_bytes());
        env.push(format!("NGD_CLIENT_FEATURES={}", extensions.features.to_list()).into_bytes());
    }
    Header {
        command: command.into_vec(),
        args,
        env,
        cwd: context.cwd,
    }
}

/// `NAME=VALUE` as bytes.
fn entry(name: &OsStr, value: &OsStr) -> Vec<u8> {
    let (name, value) = (name.as_bytes(), value.as_bytes());
    let mut e = Vec::with_capacity(name.len() + 1 + value.len());
    e.extend_from_slice(name);
    e.push(b'=');
    e.extend_from_slice(value);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(env: &[(&[u8], &[u8])]) -> Context {
        Context {
            ttys: [true, false, true],
            env: env
                .iter()
                .map(|(n, v)| (OsStr::from_bytes(n).into(), OsStr::from_bytes(v).into()))
                .collect(),
            cwd: b"/work/\xffdir".to_vec(),
            umask: 0o027,
        }
    }

    fn strings(env: &[Vec<u8>]) -> Vec<&[u8]> {
        env.iter().map(|e| e.as_slice()).collect()
    }

    #[test]
    fn synthetic_entries_come_first_then_the_environment_in_order() {
        let h = header(
            "cmd".into(),
            vec![HeaderArg::Plain(b"a".to_vec())],
            &[],
            context(&[(b"ZED", b"1"), (b"ALPHA", b"x=y"), (b"NAILGUN_TTY_0", b"0")]),
            &Extensions::default(),
        );
        assert_eq!(h.command, b"cmd");
        assert_eq!(h.args, vec![HeaderArg::Plain(b"a".to_vec())]);
        assert_eq!(h.cwd, b"/work/\xffdir");
        assert_eq!(
            strings(&h.env),
            vec![
                &b"NAILGUN_FILESEPARATOR=/"[..],
                b"NAILGUN_PATHSEPARATOR=:",
                b"NAILGUN_TTY_0=1",
                b"NAILGUN_TTY_1=0",
                b"NAILGUN_TTY_2=1",
                b"ZED=1",
                b"ALPHA=x=y",
                b"NAILGUN_TTY_0=0",
                b"NGD_CLIENT_UMASK=0027",
            ]
        );
    }

    #[test]
    fn overrides_replace_real_entries_and_come_last() {
        let overrides = [
            (OsString::from("HOME"), OsString::from("/elsewhere")),
            (OsString::from("NEW"), OsString::from("")),
        ];
        let h = header(
            "cmd".into(),
            vec![],
            &overrides,
            context(&[
                (b"HOME", b"/home/u"),
                (b"PATH", b"/bin"),
                (b"HOME", b"/dup"),
            ]),
            &Extensions::default(),
        );
        assert_eq!(
            strings(&h.env[5..]),
            vec![
                &b"PATH=/bin"[..],
                b"HOME=/elsewhere",
                b"NEW=",
                b"NGD_CLIENT_UMASK=0027"
            ]
        );
    }

    #[test]
    fn extension_entries_follow_the_umask_and_features_come_last() {
        let extensions = Extensions {
            features: ng_proto::Features::ALL,
            fds: Some(ng_proto::FdMap::new([false, true, true])),
            pty: Some(ng_proto::FdMap::new([false, true, false])),
            winsize: Some(ng_proto::WinSize {
                cols: 120,
                rows: 40,
                xpixel: 0,
                ypixel: 0,
            }),
            ignored: vec![ng_proto::SignalName::new(b"SIGHUP").unwrap()],
            program: None,
        };
        let h = header(
            "cmd".into(),
            vec![],
            &[],
            context(&[(b"A", b"1")]),
            &extensions,
        );
        let version = format!("NGD_CLIENT_VERSION={}", env!("CARGO_PKG_VERSION"));
        assert_eq!(
            strings(&h.env[5..]),
            vec![
                &b"A=1"[..],
                b"NGD_CLIENT_UMASK=0027",
                b"NGD_CLIENT_SIGIGN=SIGHUP",
                b"NGD_CLIENT_WINSIZE=120 40 0 0",
                b"NGD_CLIENT_FDS=1,2",
                b"NGD_CLIENT_PTY=1",
                version.as_bytes(),
                b"NGD_CLIENT_FEATURES=fds,ctty,signals,winsize,stdin-window",
            ]
        );
    }

    #[test]
    fn environment_bytes_are_not_utf8_checked() {
        let h = header(
            "cmd".into(),
            vec![],
            &[],
            context(&[(b"RAW", b"\xff\xfe")]),
            &Extensions::default(),
        );
        assert_eq!(h.env[5], b"RAW=\xff\xfe");
    }

    #[test]
    fn file_arguments_are_read_and_missing_files_fail() {
        let dir = std::env::temp_dir().join(format!("ng-client-request-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("arg.txt");
        std::fs::write(&file, b"contents\n").unwrap();
        let args = load_args(vec![
            Arg::Plain("a".into()),
            Arg::File(file.clone().into_os_string()),
        ])
        .unwrap();
        assert_eq!(
            args,
            vec![
                HeaderArg::Plain(b"a".to_vec()),
                HeaderArg::File(b"contents\n".to_vec())
            ]
        );
        let missing = dir.join("missing");
        let err = load_args(vec![Arg::File(missing.clone().into_os_string())]).unwrap_err();
        assert_eq!(err.code(), crate::exit::CONNECTION_BROKEN);
        assert_eq!(
            err.message().unwrap(),
            format!(
                "--nailgun-filearg: {}: No such file or directory",
                missing.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
