//! The command line: `--nailgun-*` options, the command and its arguments.
//!
//! Parsing follows the reference C client, so scripts written for it keep working:
//!
//! * `--nailgun-*` options are recognised **anywhere** in argv, also after the command, and
//!   are removed from what is sent. There is no `--` terminator (as in the reference, a
//!   command can never receive a literal `--nailgun-port`). Unknown `--nailgun-*` words are
//!   passed on like any argument.
//! * The command is the basename of `argv[0]` unless that is `ng` (the "symlink" rule:
//!   `ln -s ng aws; aws s3 ls` runs `aws`); otherwise it is the first argument that is not an
//!   option.
//! * `ng` alone prints the usage (exit 0). `-h`/`--help` print it only when it is the *only*
//!   argument and the client was invoked as `ng`: through a symlink, `--help` belongs to the
//!   command.
//! * Options are handled left to right, and the first one that ends the client wins:
//!   `--nailgun-version` (version line on stdout, exit 0) and `--nailgun-help` (usage, exit 0)
//!   end it even after the command; an option missing its value ends it with 226.
//!
//! Two bugs of the reference are fixed, as the protocol intends:
//!
//! * `--nailgun-filearg FILE` before the command does not make FILE the command, as the
//!   reference's does; the file becomes the first argument.
//! * `--nailgun-D<name>=<value>` (advertised but forwarded as a literal argument by the
//!   reference) sets or overrides `<name>` in the environment sent to the server.
//!   `--nailgun-D<name>` without `=` sets it to the empty string; an empty name is a bad
//!   argument.
//!
//! Everything stays bytes ([`OsString`]): nothing here assumes UTF-8.

use crate::exit::ClientError;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The name under which `argv[0]` means "the client itself" rather than a command.
pub const CLIENT_NAME: &[u8] = b"ng";

/// The line `--nailgun-version` and `--nailgun-showversion` print on stdout. It starts like
/// the reference client's, so `awk '{print $4}'` still finds the version.
pub const VERSION_LINE: &str = concat!(
    "NailGun client version ",
    env!("CARGO_PKG_VERSION"),
    " (ngd)\n"
);

/// One argument for the command, in command-line order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    /// Sent as it is, in one `A` chunk.
    Plain(OsString),
    /// The path of a `--nailgun-filearg` file, whose contents are sent as `L` chunks.
    File(OsString),
}

/// A command line that runs a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// The command name sent in `C`.
    pub command: OsString,
    /// The command's arguments, options removed.
    pub args: Vec<Arg>,
    /// `--nailgun-server`, if given (the last one wins).
    pub server: Option<OsString>,
    /// `--nailgun-port`, if given (the last one wins).
    pub port: Option<OsString>,
    /// `--nailgun-D` entries, `(name, value)`, in order; applied after the real environment.
    pub env_overrides: Vec<(OsString, OsString)>,
    /// `--nailgun-showversion` was given: print the version line, then run.
    pub show_version: bool,
    /// `--nailgun-no-autostart` was given: never start a server ([`crate::autostart`]).
    pub no_autostart: bool,
    /// The command is `argv[0]`'s name: `ng` runs as a shim ([`crate::shim`]).
    pub shim: bool,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Run a command.
    Run(Invocation),
    /// Print the usage on stderr and exit 0.
    Help,
    /// Print [`VERSION_LINE`] on stdout and exit 0.
    Version,
}

/// Parses a full argv, `argv[0]` included.
pub fn parse<I>(argv: I) -> Result<Parsed, ClientError>
where
    I: IntoIterator<Item = OsString>,
{
    let mut argv = argv.into_iter();
    let argv0 = argv.next().unwrap_or_default();
    let mut rest = argv.peekable();
    let mut command = command_from_argv0(&argv0);
    let shim = command.is_some();

    if command.is_none() {
        match rest.peek() {
            None => return Ok(Parsed::Help),
            Some(first) if first == "-h" || first == "--help" => {
                let first = rest.next().unwrap_or_default();
                if rest.peek().is_none() {
                    return Ok(Parsed::Help);
                }
                // Not the only argument: `-h` is the command, as in the reference.
                command = Some(first);
            }
            Some(_) => {}
        }
    }

    let mut args = Vec::new();
    let mut server = None;
    let mut port = None;
    let mut env_overrides = Vec::new();
    let mut show_version = false;
    let mut no_autostart = false;

    while let Some(arg) = rest.next() {
        match arg.as_bytes() {
            b"--nailgun-server" => server = Some(value(&mut rest, "--nailgun-server")?),
            b"--nailgun-port" => port = Some(value(&mut rest, "--nailgun-port")?),
            b"--nailgun-filearg" => args.push(Arg::File(value(&mut rest, "--nailgun-filearg")?)),
            b"--nailgun-version" => return Ok(Parsed::Version),
            b"--nailgun-showversion" => show_version = true,
            b"--nailgun-no-autostart" => no_autostart = true,
            b"--nailgun-help" => return Ok(Parsed::Help),
            [b'-', b'-', b'n', b'a', b'i', b'l', b'g', b'u', b'n', b'-', b'D', define @ ..] => {
                env_overrides.push(definition(define)?);
            }
            _ if command.is_none() => command = Some(arg),
            _ => args.push(Arg::Plain(arg)),
        }
    }

    let command =
        command.ok_or_else(|| ClientError::BadArguments("ng: no command given".into()))?;
    Ok(Parsed::Run(Invocation {
        command,
        args,
        server,
        port,
        env_overrides,
        show_version,
        no_autostart,
        shim,
    }))
}

/// The command named by `argv[0]`, or `None` when `argv[0]` is the client itself.
fn command_from_argv0(argv0: &OsString) -> Option<OsString> {
    let bytes = argv0.as_bytes();
    let base = match bytes.iter().rposition(|&b| b == b'/') {
        Some(slash) => &bytes[slash + 1..],
        None => bytes,
    };
    if base == CLIENT_NAME || base.is_empty() {
        None
    } else {
        Some(OsString::from_vec(base.to_vec()))
    }
}

/// The value following an option.
fn value<I>(rest: &mut I, option: &str) -> Result<OsString, ClientError>
where
    I: Iterator<Item = OsString>,
{
    rest.next()
        .ok_or_else(|| ClientError::BadArguments(format!("ng: {option} needs a value")))
}

/// Splits the text after `--nailgun-D` into a name and a value.
fn definition(define: &[u8]) -> Result<(OsString, OsString), ClientError> {
    let (name, value) = match define.iter().position(|&b| b == b'=') {
        Some(eq) => (&define[..eq], &define[eq + 1..]),
        None => (define, &[][..]),
    };
    if name.is_empty() {
        return Err(ClientError::BadArguments(
            "ng: --nailgun-D needs a variable name, as in --nailgun-DNAME=VALUE".into(),
        ));
    }
    Ok((
        OsString::from_vec(name.to_vec()),
        OsString::from_vec(value.to_vec()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::BAD_ARGUMENTS;
    use crate::usage::USAGE;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn run(words: &[&str]) -> Invocation {
        match parse(argv(words)) {
            Ok(Parsed::Run(inv)) => inv,
            other => panic!("{words:?} did not parse as a run: {other:?}"),
        }
    }

    fn plain(words: &[&str]) -> Vec<Arg> {
        words.iter().map(|w| Arg::Plain(w.into())).collect()
    }

    fn bad(words: &[&str]) -> String {
        match parse(argv(words)) {
            Err(e) => {
                assert_eq!(e.code(), BAD_ARGUMENTS);
                e.message().unwrap()
            }
            other => panic!("{words:?} parsed: {other:?}"),
        }
    }

    #[test]
    fn first_non_option_is_the_command() {
        let inv = run(&["ng", "cmd", "a", "-x", "--flag"]);
        assert_eq!(inv.command, "cmd");
        assert_eq!(inv.args, plain(&["a", "-x", "--flag"]));
        assert_eq!(inv.server, None);
        assert_eq!(inv.port, None);
        assert!(!inv.show_version);
        assert!(!inv.no_autostart);
        assert!(!inv.shim);
    }

    #[test]
    fn no_autostart_is_an_option_anywhere() {
        let inv = run(&["ng", "cmd", "a", "--nailgun-no-autostart", "b"]);
        assert!(inv.no_autostart);
        assert_eq!(inv.args, plain(&["a", "b"]));
    }

    #[test]
    fn options_are_recognised_anywhere_and_removed() {
        let inv = run(&[
            "ng",
            "--nailgun-server",
            "h1",
            "cmd",
            "a",
            "--nailgun-port",
            "99",
            "b",
            "--nailgun-showversion",
            "--nailgun-server",
            "h2",
        ]);
        assert_eq!(inv.command, "cmd");
        assert_eq!(inv.args, plain(&["a", "b"]));
        assert_eq!(inv.server, Some("h2".into()));
        assert_eq!(inv.port, Some("99".into()));
        assert!(inv.show_version);
    }

    #[test]
    fn option_values_are_taken_verbatim() {
        let inv = run(&["ng", "--nailgun-server", "--nailgun-version", "cmd"]);
        assert_eq!(inv.server, Some("--nailgun-version".into()));
        assert_eq!(inv.command, "cmd");
    }

    #[test]
    fn filearg_keeps_its_position() {
        let inv = run(&["ng", "cmd", "a", "--nailgun-filearg", "f", "b"]);
        assert_eq!(inv.command, "cmd");
        assert_eq!(
            inv.args,
            vec![
                Arg::Plain("a".into()),
                Arg::File("f".into()),
                Arg::Plain("b".into())
            ]
        );
    }

    #[test]
    fn filearg_before_the_command_is_the_first_argument() {
        let inv = run(&["ng", "--nailgun-filearg", "f", "cmd", "a"]);
        assert_eq!(inv.command, "cmd");
        assert_eq!(
            inv.args,
            vec![Arg::File("f".into()), Arg::Plain("a".into())]
        );
    }

    #[test]
    fn nailgun_d_sets_environment_overrides() {
        let inv = run(&[
            "ng",
            "--nailgun-DFOO=bar=baz",
            "cmd",
            "--nailgun-DEMPTY=",
            "--nailgun-DBARE",
            "a",
        ]);
        assert_eq!(inv.command, "cmd");
        assert_eq!(inv.args, plain(&["a"]));
        assert_eq!(
            inv.env_overrides,
            vec![
                ("FOO".into(), "bar=baz".into()),
                ("EMPTY".into(), "".into()),
                ("BARE".into(), "".into())
            ]
        );
    }

    #[test]
    fn nailgun_d_needs_a_name() {
        assert!(bad(&["ng", "cmd", "--nailgun-D=x"]).contains("--nailgun-D"));
        assert!(bad(&["ng", "cmd", "--nailgun-D"]).contains("--nailgun-D"));
    }

    #[test]
    fn unknown_nailgun_options_are_passed_on() {
        let inv = run(&["ng", "cmd", "--nailgun-bogus"]);
        assert_eq!(inv.args, plain(&["--nailgun-bogus"]));
    }

    #[test]
    fn symlink_name_is_the_command() {
        let inv = run(&["/usr/local/bin/ng-version", "ng-stats", "-h"]);
        assert_eq!(inv.command, "ng-version");
        assert!(inv.shim);
        assert_eq!(inv.args, plain(&["ng-stats", "-h"]));
        let inv = run(&["aws"]);
        assert_eq!(inv.command, "aws");
        assert!(inv.args.is_empty());
    }

    #[test]
    fn only_ng_itself_is_the_client() {
        assert_eq!(run(&["./bin/ng", "cmd"]).command, "cmd");
        assert_eq!(run(&["ng.exe", "cmd"]).command, "ng.exe");
        assert_eq!(run(&["NG", "cmd"]).command, "NG");
        assert_eq!(run(&["ng-nailgun", "cmd"]).command, "ng-nailgun");
    }

    #[test]
    fn symlink_invocation_keeps_help_for_the_command() {
        let inv = run(&["mytool", "--help"]);
        assert_eq!(inv.command, "mytool");
        assert_eq!(inv.args, plain(&["--help"]));
        let inv = run(&["mytool", "-h"]);
        assert_eq!(inv.args, plain(&["-h"]));
    }

    #[test]
    fn help_only_as_the_sole_argument_of_ng() {
        assert_eq!(parse(argv(&["ng"])).unwrap(), Parsed::Help);
        assert_eq!(parse(argv(&["/x/ng", "-h"])).unwrap(), Parsed::Help);
        assert_eq!(parse(argv(&["ng", "--help"])).unwrap(), Parsed::Help);
        assert_eq!(parse(argv(&[])).unwrap(), Parsed::Help);
        let inv = run(&["ng", "-h", "x"]);
        assert_eq!(inv.command, "-h");
        assert_eq!(inv.args, plain(&["x"]));
        let inv = run(&["ng", "cmd", "--help"]);
        assert_eq!(inv.args, plain(&["--help"]));
    }

    #[test]
    fn nailgun_help_anywhere() {
        assert_eq!(
            parse(argv(&["ng", "cmd", "a", "--nailgun-help"])).unwrap(),
            Parsed::Help
        );
        assert_eq!(
            parse(argv(&["tool", "--nailgun-help"])).unwrap(),
            Parsed::Help
        );
    }

    #[test]
    fn version_anywhere_even_after_the_command() {
        assert_eq!(
            parse(argv(&["ng", "cmd", "a", "--nailgun-version", "b"])).unwrap(),
            Parsed::Version
        );
        assert_eq!(
            parse(argv(&["ng", "--nailgun-version"])).unwrap(),
            Parsed::Version
        );
        // Left to right: the version comes before the missing value is noticed.
        assert_eq!(
            parse(argv(&["ng", "--nailgun-version", "--nailgun-port"])).unwrap(),
            Parsed::Version
        );
    }

    #[test]
    fn missing_values_are_bad_arguments() {
        assert!(bad(&["ng", "cmd", "--nailgun-port"]).contains("--nailgun-port"));
        assert!(bad(&["ng", "cmd", "--nailgun-server"]).contains("--nailgun-server"));
        assert!(bad(&["ng", "cmd", "--nailgun-filearg"]).contains("--nailgun-filearg"));
        assert!(bad(&["tool", "--nailgun-port"]).contains("--nailgun-port"));
    }

    #[test]
    fn no_command_is_a_bad_argument() {
        assert!(bad(&["ng", "--nailgun-port", "1"]).contains("no command"));
        assert!(bad(&["ng", "--nailgun-showversion"]).contains("no command"));
    }

    #[test]
    fn arguments_stay_bytes() {
        let raw = OsString::from_vec(vec![0xff, b'a', 0xfe]);
        let inv = match parse(vec!["ng".into(), "cmd".into(), raw.clone()]).unwrap() {
            Parsed::Run(inv) => inv,
            other => panic!("{other:?}"),
        };
        assert_eq!(inv.args, vec![Arg::Plain(raw)]);
        let link = OsString::from_vec(b"/bin/\xffcmd".to_vec());
        match parse(vec![link]).unwrap() {
            Parsed::Run(inv) => assert_eq!(inv.command.as_bytes(), b"\xffcmd"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn empty_arguments_are_kept() {
        let inv = run(&["ng", "cmd", "", "x"]);
        assert_eq!(inv.args, plain(&["", "x"]));
    }

    #[test]
    fn usage_and_version_texts() {
        assert!(VERSION_LINE.starts_with("NailGun client version "));
        assert!(VERSION_LINE.ends_with('\n'));
        for option in [
            "--nailgun-server",
            "--nailgun-port",
            "--nailgun-filearg",
            "--nailgun-D",
            "--nailgun-version",
            "--nailgun-showversion",
            "--nailgun-no-autostart",
            "--nailgun-help",
        ] {
            assert!(USAGE.contains(option), "{option}");
        }
    }
}
