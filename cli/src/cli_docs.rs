//! Shell completions and man pages for `ngd` and `ng`.
//!
//! `ngd`'s own command line is a clap parser, so its completions (`clap_complete`) and man
//! pages (`clap_mangen`) come from it directly. `ng`'s parser is hand-written (it must start
//! as fast as a C program, and follows the reference client's rules: options anywhere, no
//! `--`), so its man page comes from [`ng_command`], a clap description of the same
//! command line that lives here, outside the `ng` binary, and costs `ng` nothing. A test
//! checks that every option of `ng --help` appears in it and the other way round.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The `ng` command line, for its man page.
pub fn ng_command() -> clap::Command {
    use clap::{Arg, ArgAction, Command};
    let value = |name: &'static str, value: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name(value)
            .help(help)
            .action(ArgAction::Append)
    };
    let flag = |name: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .help(help)
            .action(ArgAction::SetTrue)
    };
    Command::new("ng")
        .version(env!("CARGO_PKG_VERSION"))
        .about("a fast Nailgun client: run a command on ngd or another Nailgun server")
        .long_about(
            "ng runs COMMAND on a Nailgun server (ngd, or the reference Java server) with this \
             process's arguments, environment, working directory and stdin/stdout/stderr, and \
             exits with the command's exit code. A symbolic link to ng named COMMAND runs \
             COMMAND. Options are recognised anywhere on the command line and never passed \
             on; -h and --help are ng's own only as its sole argument.\n\n\
             With no server and no port given, ng tries ngd's private Unix socket \
             ($XDG_RUNTIME_DIR/ngd/ngd.sock, else /tmp/ngd-$UID/ngd.sock), then \
             127.0.0.1:2113. When neither answers, ng starts ngd in the background with the \
             default configuration (the ngd next to ng, else the one on PATH), waits until it \
             is ready, and runs the command; the server exits after 15 idle minutes. ngd's \
             log is $XDG_STATE_HOME/ngd/ngd.log (else ~/.local/state/ngd/ngd.log).",
        )
        .disable_help_flag(true)
        .disable_version_flag(true)
        .arg(
            Arg::new("COMMAND")
                .help("the command to run on the server (an alias or a class name for Java servers)"),
        )
        .arg(
            Arg::new("ARGS")
                .help("its arguments")
                .num_args(0..)
                .trailing_var_arg(true),
        )
        .arg(value(
            "nailgun-server",
            "HOST",
            "the server: a host name, an IPv4 or IPv6 address ([::1] or ::1), or local:PATH \
             for a Unix socket (default: $NAILGUN_SERVER)",
        ))
        .arg(value(
            "nailgun-port",
            "PORT",
            "the server's TCP port (default: $NAILGUN_PORT, otherwise 2113)",
        ))
        .arg(value(
            "nailgun-filearg",
            "FILE",
            "send the whole contents of FILE as the next argument; may be given more than once",
        ))
        .arg(
            Arg::new("nailgun-D")
                .long("nailgun-D")
                .value_name("NAME=VALUE")
                .help("set or override an environment variable for the command (written --nailgun-DNAME=VALUE)")
                .action(ArgAction::Append),
        )
        .arg(flag(
            "nailgun-no-autostart",
            "never start ngd when no server answers (also: NG_NO_AUTOSTART=1)",
        ))
        .arg(flag("nailgun-version", "print the client version and exit"))
        .arg(flag(
            "nailgun-showversion",
            "print the client version and continue",
        ))
        .arg(flag(
            "nailgun-help",
            "print the usage and the server's commands, and exit",
        ))
        .after_long_help(
            "ENVIRONMENT: NAILGUN_SERVER and NAILGUN_PORT name the server; NG_NO_AUTOSTART \
             (any non-empty value) turns auto-start off; XDG_RUNTIME_DIR places the default \
             socket.\n\n\
             EXIT STATUS: the command's exit code; 0 after usage or version; 69 the server \
             could not be started (the message quotes its log); 141 stdout was a closed pipe; \
             226 bad arguments; 227 the connection broke; 229 an unexpected chunk; 230 no \
             server could be reached; 231 the socket could not be created.",
        )
}

/// Writes `shell`'s completion script for `ngd` (whose clap command is `cmd`) to `out`.
pub fn completions(shell: clap_complete::Shell, mut cmd: clap::Command, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut cmd, "ngd", out);
}

/// Writes `ng.1`, `ngd.1` and one page per `ngd` subcommand (`ngd-serve.1`, ...) into
/// `dir`, creating it; returns the files written.
pub fn write_man_pages(dir: &Path, ngd: clap::Command) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut page = |cmd: clap::Command, file: String| -> std::io::Result<()> {
        let path = dir.join(file);
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut buf)?;
        std::fs::write(&path, buf)?;
        written.push(path);
        Ok(())
    };
    page(ng_command(), "ng.1".to_owned())?;
    let ngd = ngd.name("ngd");
    for sub in ngd.get_subcommands() {
        let name = format!("ngd-{}", sub.get_name());
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        // clap names are `&'static str` here; a handful of pages, once per process.
        let static_name: &'static str = Box::leak(name.clone().into_boxed_str());
        page(sub.clone().name(static_name), format!("{name}.1"))?;
    }
    page(ngd, "ngd.1".to_owned())?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ng_description_is_consistent() {
        ng_command().debug_assert();
    }

    #[test]
    fn man_pages_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let cmd = clap::Command::new("ngd")
            .subcommand(clap::Command::new("serve").about("Run the server."));
        let files = write_man_pages(dir.path(), cmd).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["ng.1", "ngd-serve.1", "ngd.1"]);
        let ng = std::fs::read_to_string(dir.path().join("ng.1")).unwrap();
        assert!(ng.starts_with(".ie"), "{ng}");
        assert!(ng.contains("nailgun\\-server"), "{ng}");
    }
}
