//! A plugin without `protocol`: its arguments on the command line, the client's stdio.
//!
//! On the client's descriptors the process gets them as its own; otherwise its pipes are
//! copied to and from the relayed streams. Signals ngd forwards reach its process group
//! (or the process, for `SIGNAME process`); a stop is reported (`z`) unless the client
//! stopped itself ([`ClientJob`]), and a death by signal ends the session as one
//! (`signals`).

use super::process::{
    exit_code, is_stopped, spawn_plugin, wait_reporting_stops, Launch, PluginStdio, Waited,
};
use super::{EXIT_CANNOT_RUN, EXIT_HOST};
use crate::discover::Resolved;
use crate::streams::{Sink, Streams};
use crate::sys::{self, Pid, Signal};
use crossbeam_channel::{unbounded, RecvError};
use ngw_vocab::Effect;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::thread::JoinHandle;

/// Runs `r` for session `s` to its exit; the session's exit code.
pub(super) fn relay(s: &mut ngw::Session, streams: &mut Streams, r: &Resolved) -> i32 {
    let launch = Launch::new(r.binary.clone(), s.env.clone(), s);
    let dir = plugin_dir(&r.binary);
    let mut child = match spawn_plugin(&launch, &s.args, dir.as_deref(), stdio(streams)) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(streams.err, "error: running plugin '{}': {e}", r.command);
            return EXIT_CANNOT_RUN;
        }
    };
    let copies = Copies::start(&mut child, s, streams);
    let status = supervise(s, child.id() as Pid);
    copies.join();
    finish(s, status)
}

/// fledge sets `FLEDGE_PLUGIN_DIR` two levels above the real program.
fn plugin_dir(binary: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(binary)
        .ok()
        .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
}

/// The client's descriptors when the session took them (closed ones stay closed), else
/// pipes.
fn stdio(streams: &Streams) -> PluginStdio {
    if !streams.on_client() {
        return PluginStdio::piped();
    }
    let (i, o, e) = (streams.dup(0), streams.dup(1), streams.dup(2));
    let closed = [i.is_none(), o.is_none(), e.is_none()];
    PluginStdio {
        stdin: i,
        stdout: o,
        stderr: e,
        closed,
    }
}

/// The threads copying the plugin's pipes, when it has them (relayed streams).
struct Copies {
    out: JoinHandle<()>,
    err: JoinHandle<()>,
}

impl Copies {
    /// Copies `child`'s stdout and stderr to the session's streams, and the session's
    /// stdin to it (that thread is not waited for).
    fn start(child: &mut Child, s: &mut ngw::Session, streams: &Streams) -> Self {
        let copy = |from: Option<Box<dyn Read + Send>>, mut to: Sink| {
            std::thread::spawn(move || {
                if let Some(mut from) = from {
                    let _ = std::io::copy(&mut from, &mut to);
                }
            })
        };
        let out = copy(
            child.stdout.take().map(|o| Box::new(o) as _),
            streams.out.clone(),
        );
        let err = copy(
            child.stderr.take().map(|o| Box::new(o) as _),
            streams.err.clone(),
        );
        if let Some(mut stdin) = child.stdin.take() {
            let mut input = s.take_stdin();
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut input, &mut stdin);
            });
        }
        Self { out, err }
    }

    fn join(self) {
        let _ = (self.out.join(), self.err.join());
    }
}

/// Whether the client's job is stopped by its own doing: it forwarded a stop and has not
/// been continued. Then the plugin's stop is not reported back (a late `z` would stop
/// the client again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientJob {
    Running,
    Stopped,
}

impl ClientJob {
    /// The state after the client forwarded `sig`.
    fn after(self, sig: Option<Signal>) -> Self {
        match sig.and_then(ngw::Signal::from_number).map(Effect::of) {
            Some(Effect::Continues) => ClientJob::Running,
            Some(Effect::Stops) => ClientJob::Stopped,
            _ => self,
        }
    }
}

/// Where an interrupt ngd forwarded goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forward {
    /// To the plugin's process group, as a terminal would send it.
    Group(Signal),
    /// To the plugin's process alone (`SIGNAME process`).
    Process(Signal),
    /// Nowhere (an unknown signal, or the session's interrupts ended).
    Nowhere,
}

impl Forward {
    fn of(interrupt: Result<ngw::Interrupt, RecvError>) -> Self {
        let number = |name: &ngw::SignalName| name.number();
        match interrupt {
            Ok(ngw::Interrupt::Signal(name)) => {
                number(&name).map_or(Forward::Nowhere, Forward::Group)
            }
            Ok(ngw::Interrupt::ProcessSignal(name)) => {
                number(&name).map_or(Forward::Nowhere, Forward::Process)
            }
            Ok(ngw::Interrupt::WindowSize(_)) => Forward::Group(libc::SIGWINCH),
            Ok(ngw::Interrupt::Hangup) => Forward::Group(libc::SIGHUP),
            Err(_) => Forward::Nowhere,
        }
    }

    fn signal(self) -> Option<Signal> {
        match self {
            Forward::Group(sig) | Forward::Process(sig) => Some(sig),
            Forward::Nowhere => None,
        }
    }

    /// Sends it to plugin `pid`, which is not reaped before its waiter reports it.
    fn send(self, pid: Pid) {
        let _ = match self {
            Forward::Group(sig) => sys::signal_group(pid, sig),
            Forward::Process(sig) => sys::signal_process(pid, sig),
            Forward::Nowhere => Ok(()),
        };
    }
}

/// Forwards the session's interrupts to plugin `pid` and reports its stops until it
/// ends; its status, or `None` when it could not be waited for.
fn supervise(s: &mut ngw::Session, pid: Pid) -> Option<ExitStatus> {
    let (wait_tx, wait_rx) = unbounded();
    std::thread::spawn(move || wait_reporting_stops(pid, &wait_tx));
    let mut client = ClientJob::Running;
    loop {
        crossbeam_channel::select! {
            recv(wait_rx) -> w => match w {
                // A stop the waiter saw before a SIGCONT was sent is over already.
                Ok(Waited::Stopped(sig)) if client == ClientJob::Running && is_stopped(pid) => {
                    if let Some(name) = ngw::Signal::from_number(sig).map(ngw::Signal::name) {
                        let _ = s.stopped(name);
                    }
                }
                Ok(Waited::Stopped(_)) => {}
                Ok(Waited::Exited(st)) => return Some(st),
                Err(_) => return None,
            },
            recv(s.interrupts()) -> i => {
                let forward = Forward::of(i);
                client = client.after(forward.signal());
                forward.send(pid);
            }
        }
    }
}

/// The session's exit code for the plugin's `status`; a death by signal ends the session
/// as one.
fn finish(s: &mut ngw::Session, status: Option<ExitStatus>) -> i32 {
    let Some(st) = status else {
        return EXIT_HOST;
    };
    if let Some(name) = st
        .signal()
        .and_then(ngw::Signal::from_number)
        .map(ngw::Signal::name)
    {
        s.exit_by_signal(name, st.core_dumped());
    }
    exit_code(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ngw::Interrupt;

    #[test]
    fn client_job_steps() {
        let running = ClientJob::Running;
        for stop in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU, libc::SIGSTOP] {
            assert_eq!(running.after(Some(stop)), ClientJob::Stopped);
        }
        let stopped = ClientJob::Stopped;
        assert_eq!(stopped.after(Some(libc::SIGINT)), ClientJob::Stopped);
        assert_eq!(stopped.after(None), ClientJob::Stopped);
        assert_eq!(stopped.after(Some(libc::SIGCONT)), ClientJob::Running);
        assert_eq!(running.after(Some(libc::SIGWINCH)), ClientJob::Running);
    }

    #[test]
    fn forwarded_interrupts_reach_the_group_or_the_process() {
        let f = |i: Interrupt| Forward::of(Ok(i));
        let name = |n: &str| ngw::SignalName::new(n.as_bytes()).unwrap();
        assert_eq!(
            f(Interrupt::Signal(name("SIGINT"))),
            Forward::Group(libc::SIGINT)
        );
        assert_eq!(
            f(Interrupt::ProcessSignal(name("SIGTERM"))),
            Forward::Process(libc::SIGTERM)
        );
        assert_eq!(f(Interrupt::Hangup), Forward::Group(libc::SIGHUP));
        assert_eq!(f(Interrupt::Signal(name("SIGNOPE"))), Forward::Nowhere);
        assert_eq!(Forward::of(Err(RecvError)), Forward::Nowhere);
        assert_eq!(Forward::Nowhere.signal(), None);
        assert_eq!(Forward::Process(libc::SIGINT).signal(), Some(libc::SIGINT));
    }
}
