//! `ng`: a fast Nailgun client, a drop-in for the reference C client.
//!
//! `ng CMD ARGS...` (or a symlink named `CMD` pointing at `ng`) runs `CMD` on a Nailgun
//! server (`ngd`, or the reference Java server) with this process's arguments, environment,
//! working directory and stdin/stdout/stderr, and exits with the command's exit code.
//!
//! # Layout
//!
//! * [`args`]: the command line (`--nailgun-*` options anywhere, the symlink rule).
//! * [`transport`]: where the server is (options, `NAILGUN_SERVER`/`NAILGUN_PORT`, ngd's
//!   default socket) and the connected socket.
//! * [`request`]: the header sent before the command runs: arguments, environment, cwd.
//! * [`session`]: the I/O loop around `ng_proto::ClientSession`: output, stdin credit,
//!   heartbeats, forwarded signals; also how a broken stdout pipe ends the client.
//! * [`signals`]: the forwarded signals, and stopping or dying by a signal like the command.
//! * [`pty`]: the controlling terminal (`ctty`): a pseudo-terminal relayed to the user's.
//! * [`io`]: whole writes and stdin reads on the user's descriptors, for both of those.
//! * [`sys`]: the client's own raw system call (the rest are `ng_sys`'s).
//! * [`exit`]: every client failure and its exit code (226–231, 141, 69).
//! * [`usage`]: the usage text.
//! * [`anchor`]: `ng` as the anchor that keeps job control working for a warm command that
//!   leads its own session (run by the worker's child, never by users).
//! * [`autostart`]: starting `ngd` when no server answers at the default address (runs only
//!   after connecting failed).
//! * [`help`]: `ng --help` lists the server's commands after the usage.
//! * [`shim`]: `ng` under another name: the program the shell would run for it, sent with
//!   the header, and run directly when ngd says so.
//!
//! # Extensions
//!
//! After connecting, `ng` announces what it can do (docs/protocol.md, "Negotiated
//! extensions"): `signals`, `winsize` and `stdin-window` always, and `fds` on a Unix
//! socket, where fds 0, 1, 2 ride with the header (a descriptor that was closed when `ng`
//! started is left out, so the command's stays closed too). When one of them is `ng`'s
//! own terminal and `ng` is in its foreground, a pseudo-terminal's slave rides after them
//! (`ctty`), relayed only if the server says the command made it its controlling terminal.
//! A stock server passes the announcement on as environment entries and nothing else
//! changes.
//!
//! Start-up does nothing the exchange does not need, and as little as possible between
//! connecting and sending the header: argv is parsed, the terminals, environment, cwd,
//! umask and window size are gathered and the signal handlers set
//! ([`signals::Catcher::install`]) before connecting; once connected, `ng` arms the
//! handlers (one system call) and the header leaves in one write. The server, woken by
//! the connection, then finds the whole header waiting and serves it in one go instead
//! of waking a second time for it. Until armed, the handlers act like the default
//! actions, so `^C` during a slow connect or an autostart ends `ng` as it always did.

//! # Entry point
//!
//! `ng` is `#![no_main]`: the C runtime calls [`main`] directly and Rust's own start-up is
//! skipped. That start-up finds the main thread's stack guard (glibc reads and parses
//! `/proc/self/maps` for it), installs a signal stack and SIGSEGV/SIGBUS handlers for stack
//! overflow messages: about twenty system calls and a tenth of a millisecond, which is a
//! tenth of a whole `ng` run. Of what it does, `ng` needs two things, and [`init`] does
//! them: stdin, stdout and stderr are reopened on `/dev/null` if they are closed (otherwise
//! the socket could become fd 1 and output would be written into the protocol; which ones
//! were closed is remembered, for `NGD_CLIENT_FDS`), and SIGPIPE is ignored (so a closed
//! stdout is an `EPIPE` that `ng` answers by dying of SIGPIPE after all, quietly; whether
//! it was ignored before is remembered, for `NGD_CLIENT_SIGIGN`).
//! `std::env::args_os` keeps working: on Linux the standard library takes argv from the C
//! runtime itself.

#![cfg_attr(not(test), no_main)]

// The C library, linked statically into the `ng` binary (and its unit tests) when build.rs
// found `libc.a`: a static PIE (see build.rs).
#[cfg(ng_static_libc)]
#[link(name = "c", kind = "static")]
extern "C" {}

mod anchor;
mod args;
mod autostart;
mod exit;
mod help;
mod io;
mod pty;
mod request;
mod session;
mod shim;
mod signals;
mod sys;
mod transport;
mod usage;

use args::{Invocation, Parsed};
use exit::ClientError;
use ng_proto::{FdMap, Features};
use session::Ending;
use std::ffi::OsString;
use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};

/// Bits 0–2: fds 0–2 were closed when `ng` started; bit 3: SIGPIPE was ignored.
static STARTUP: AtomicU8 = AtomicU8::new(0);

/// The process entry point, called by the C runtime (see "Entry point" above).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    init();
    let status = match run() {
        Ok(Ending::Status(status)) => status,
        // Only a shim's session ends so, and it execs the program instead of returning.
        Ok(Ending::Exec) => exit::CANNOT_EXEC,
        Ok(Ending::Signal {
            signo,
            core,
            status,
        }) => {
            signals::die_by(signo, core);
            status
        }
        Err(ClientError::BrokenPipe) => {
            // The C client is killed by SIGPIPE here; so is `ng`, quietly.
            signals::die_by(libc::SIGPIPE, false);
            exit::BROKEN_PIPE
        }
        Err(e) => e.report(),
    };
    std::process::exit(i32::from(status));
}

/// The part of Rust's start-up that `ng` needs.
fn init() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // A zero timeout only reports descriptors that are closed.
    let mut startup = 0;
    if ng_sys::fd::poll(&mut fds, 0).is_ok_and(|n| n > 0) {
        for pfd in fds.iter().filter(|p| p.revents & libc::POLLNVAL != 0) {
            startup |= 1 << pfd.fd;
            // The lowest free descriptor is the closed one: the lower ones are open or were
            // reopened by earlier iterations.
            let fd = ng_sys::fd::open_dev_null_at_lowest();
            if fd != pfd.fd {
                // Cannot even reopen it: better to stop than to talk over a socket at fd 1.
                std::process::abort();
            }
        }
    }
    if ng_sys::signal::ignore(libc::SIGPIPE) {
        startup |= 8;
    }
    STARTUP.store(startup, Ordering::Relaxed);
}

/// Runs the client and returns how it ends.
fn run() -> Result<Ending, ClientError> {
    let mut argv = std::env::args_os();
    match argv.next() {
        Some(a) if a == anchor::ARGV0 => anchor::run(argv.next()),
        Some(a) if a == anchor::ARGV0_EXEC => {
            anchor::run_then_exec(argv, STARTUP.load(Ordering::Relaxed))
        }
        _ => {}
    }
    let invocation = match args::parse(std::env::args_os())? {
        Parsed::Run(invocation) => invocation,
        Parsed::Help => {
            let _ = std::io::stderr().write_all(usage::USAGE.as_bytes());
            let _ = std::io::stderr().write_all(help::server_commands().as_bytes());
            return Ok(Ending::Status(0));
        }
        Parsed::Version => {
            print_version()?;
            return Ok(Ending::Status(0));
        }
    };
    let Invocation {
        command,
        args,
        server,
        port,
        env_overrides,
        show_version,
        no_autostart,
        shim,
    } = invocation;
    if show_version {
        print_version()?;
    }
    let server = server.or_else(|| env_nonempty("NAILGUN_SERVER"));
    let port = port.or_else(|| env_nonempty("NAILGUN_PORT"));
    let target = transport::Target::resolve(
        server.as_deref(),
        port.as_deref(),
        transport::default_socket_path,
    )?;
    // A shim stands for what the shell would run; `NGD_CLIENT_PROGRAM` names it.
    let program = if shim { shim::find(&command) } else { None };
    let args = request::load_args(args)?;
    let context = request::Context::current();
    let winsize = if context.ttys.contains(&true) {
        signals::window_size()
    } else {
        None
    };
    let startup = STARTUP.load(Ordering::Relaxed);
    let catcher = signals::Catcher::install(startup & 8 != 0).ok();
    let socket = match transport::connect(&target) {
        Ok(socket) => socket,
        Err(e) => autostart_and_connect(&target, e, no_autostart)?,
    };
    let ignored = catcher
        .as_ref()
        .map(signals::Catcher::ignored)
        .unwrap_or_default();
    // A catcher that cannot be armed leaves its handlers acting like the default actions,
    // which is what the session gives every signal without one.
    let catcher = catcher.and_then(|mut c| c.arm().ok().map(|()| c));
    let mut features = Features::SIGNALS | Features::WINSIZE | Features::STDIN_WINDOW;
    if program.is_some() {
        features = features | Features::EXEC;
    }
    let mut fds = None;
    let mut pty = None;
    if socket.is_unix() {
        features = features | Features::FDS;
        fds = Some(FdMap::new([0, 1, 2].map(|fd| startup & (1 << fd) == 0)));
        // A controlling terminal for the command when one of fds 0-2 is ours (module
        // `pty`): offered, and opened only if the server asks for it.
        pty = pty::Terminal::detect(context.ttys);
        if pty.is_some() {
            features = features | Features::CTTY;
        }
    }
    let extensions = request::Extensions {
        features,
        fds,
        pty: pty.as_ref().map(pty::Terminal::map),
        winsize,
        ignored,
        program: program.as_deref(),
    };
    let header = request::header(command, args, &env_overrides, context, &extensions);
    let passed: Vec<i32> = fds.map_or_else(Vec::new, |map| map.fds().map(|fd| fd as i32).collect());
    let options = session::Options {
        announced: features,
        fds: passed,
        pty,
        catcher,
    };
    let ending = session::run(socket, &header, options)?;
    if let (Ending::Exec, Some(program)) = (&ending, &program) {
        let err = shim::exec(program, startup & 7, startup & 8 != 0);
        return Err(ClientError::Exec(format!(
            "ng: cannot run {}: {err}",
            String::from_utf8_lossy(program)
        )));
    }
    Ok(ending)
}

/// After a failed connection to `target`: starts a server and connects to it, when that
/// applies (the default address, a connection failure, no opt-out); else returns `error`.
fn autostart_and_connect(
    target: &transport::Target,
    error: ClientError,
    no_autostart: bool,
) -> Result<transport::Socket, ClientError> {
    let transport::Target::Default { socket } = target else {
        return Err(error);
    };
    let opted_out =
        no_autostart || autostart::opted_out(std::env::var_os(autostart::OPT_OUT_VAR).as_deref());
    if opted_out || error.code() != exit::CONNECT_FAILED {
        return Err(error);
    }
    autostart::start(socket)?;
    transport::connect(&transport::Target::Unix(socket.clone()))
}

/// An environment variable, if set and not empty.
fn env_nonempty(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// Prints the version line on stdout.
fn print_version() -> Result<(), ClientError> {
    match std::io::stdout().write_all(args::VERSION_LINE.as_bytes()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(ClientError::BrokenPipe),
        Err(e) => Err(ClientError::broken("write", &e)),
    }
}
