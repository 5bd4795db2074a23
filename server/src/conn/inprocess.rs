//! A connection's in-process command: a [`crate::Nail`] run on the nails' thread pool (or
//! inline on the loop thread), sharing a [`SessionIo`] with its connection.
//!
//! The command writes its output and takes its stdin through the [`SessionIo`]; the
//! connection collects the output into its write buffer (`Running::collect`), pushes the
//! client's stdin (`Running::stdin`) and wakes a writer blocked on a full buffer once the
//! client has read enough (`Running::output_written`).

use super::{Conn, ConnState, Env, Launch, RELAYED};
use crate::nail::Context;
use crate::session_io::{CancelReason, SessionIo, OUTPUT_LOW_WATER, STDIN_PREFETCH};
use crate::ServerHandle;
use bytes::{Bytes, BytesMut};
use ng_proto::ext::{Features, SignalName};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

/// A running command, as the connection sees it.
#[derive(Debug)]
pub struct Running {
    /// Shared with the command's thread.
    pub io: Arc<SessionIo>,
    /// The resolved command name (for statistics and logs).
    pub command: String,
    /// The client forwarded a signal that ends a command, and the command was cancelled
    /// for it: the session ends as the signal would have ended a cold run.
    pub interrupted: Option<(SignalName, i32)>,
}

/// What a running command produced since the loop last looked, besides its output.
#[derive(Debug)]
pub(super) struct Produced {
    /// Stdin bytes the command has not read yet.
    pub(super) stdin_backlog: usize,
    /// The command waits for stdin, or reads it and has less than the prefetch waiting.
    pub(super) wants_stdin: bool,
    /// Its exit code, once it returned.
    pub(super) finished: Option<i32>,
}

impl Running {
    /// Moves the command's output to the end of `wbuf` (by swapping buffers when `wbuf` is
    /// empty, so without a copy) and reports the rest of what it produced.
    pub(super) fn collect(&self, wbuf: &mut BytesMut) -> Produced {
        let mut st = self.io.lock();
        st.notified = false;
        if !st.out.is_empty() {
            let n = st.out.len();
            if wbuf.is_empty() {
                std::mem::swap(wbuf, &mut st.out);
            } else {
                wbuf.extend_from_slice(&st.out);
                st.out.clear();
            }
            st.unsent += n;
        }
        Produced {
            stdin_backlog: st.stdin_bytes,
            wants_stdin: !st.stdin_eof
                && (st.reader_waiting || (st.stdin_started && st.stdin_bytes < STDIN_PREFETCH)),
            finished: st.finished,
        }
    }

    /// Hands the client's stdin to the command; returns the stdin backlog.
    pub(super) fn stdin(&self, data: Bytes) -> usize {
        let mut st = self.io.lock();
        st.stdin_bytes += data.len();
        st.stdin.push_back(data);
        let backlog = st.stdin_bytes;
        drop(st);
        self.io.wake_command();
        backlog
    }

    /// The client's stdin ended.
    pub(super) fn stdin_eof(&self) {
        self.io.lock().stdin_eof = true;
        self.io.wake_command();
    }

    /// The client forwarded a signal that ends a command: an in-process command cannot
    /// catch it, so it is cancelled, and the session ends as the signal ends a command
    /// that does not handle it.
    pub(super) fn interrupt(&mut self, name: SignalName, number: i32) {
        self.interrupted.get_or_insert((name, number));
        self.io.cancel(CancelReason::Interrupted);
    }

    /// Bytes went out to the client and `unsent` are left in the write buffer: a command
    /// blocked on a full buffer resumes below the low-water mark.
    pub(super) fn output_written(&self, unsent: usize) {
        let mut st = self.io.lock();
        st.unsent = unsent;
        if st.writer_waiting && st.out.len() + st.unsent < OUTPUT_LOW_WATER {
            st.writer_waiting = false;
            drop(st);
            self.io.wake_command();
        }
    }
}

impl Conn {
    /// Takes what the running command produced: output into the write buffer, the stdin
    /// backlog, requests for stdin, and its exit code.
    pub(super) fn pull_io(&mut self) {
        let ConnState::Running(running) = &self.state else {
            return;
        };
        let produced = running.collect(&mut self.wbuf);
        self.stdin_backlog = produced.stdin_backlog;
        if produced.wants_stdin {
            self.session.request_stdin();
        }
        if let Some(code) = produced.finished {
            match running.interrupted.clone() {
                Some((signal, number)) => self.finish_by_signal(&signal, number),
                None => {
                    self.session.exit(code);
                    self.state = ConnState::Finishing;
                }
            }
        }
    }

    /// Starts `nail` for this connection, inline on the loop thread or on the pool. It
    /// gets the client's descriptors when it takes them and the client passed them, but
    /// never makes the pseudo-terminal a controlling terminal.
    pub(super) fn start_nail(
        &mut self,
        env: &mut Env<'_>,
        launch: Launch,
        nail: Arc<dyn crate::Nail>,
        inline: bool,
        client_fds: bool,
    ) {
        let Launch {
            name,
            request,
            passed,
            ..
        } = launch;
        let core = env.core;
        let handle = &core.handle;
        let offer = passed
            .filter(|_| client_fds)
            .map(crate::passed_fds::PassedFds::without_pty);
        let server = if offer.is_some() {
            Features::ALL.without(Features::CTTY)
        } else {
            RELAYED
        };
        let accepted = self.session.accept_extensions(server);
        // `F` goes before anything the command writes (which bypasses the session).
        let f = self.session.take_transmit();
        self.wbuf.extend_from_slice(&f);
        let fds = offer
            .filter(|_| accepted.contains(Features::FDS))
            .map(crate::passed_fds::PassedFds::into_slots);
        let io = SessionIo::new(env.key, core.notifier.clone(), inline);
        if fds.is_some() {
            // The client sends no stdin once the command has its descriptors.
            io.lock().stdin_eof = true;
        }
        handle.stats().started(&name);
        let ctx = Context::new(request, io.clone(), handle.clone()).with_client_fds(fds);
        self.state = ConnState::Running(Running {
            io: io.clone(),
            command: name.clone(),
            interrupted: None,
        });
        let stats_handle = handle.clone();
        let job = move || run_nail(nail, ctx, io, name, stats_handle);
        if inline {
            job();
        } else {
            core.pool.execute(job);
        }
    }
}

fn run_nail(
    nail: Arc<dyn crate::Nail>,
    mut ctx: Context,
    io: Arc<SessionIo>,
    name: String,
    handle: ServerHandle,
) {
    let started = Instant::now();
    let code = match catch_unwind(AssertUnwindSafe(|| nail.run(&mut ctx))) {
        Ok(code) => code,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_owned());
            tracing::error!(command = %name, "command panicked: {message}");
            let _ = writeln!(ctx.stderr(), "ngd: command '{name}' panicked: {message}");
            1
        }
    };
    handle.stats().finished(&name, code, started.elapsed());
    io.finish(code);
}
