//! A connection's plugin command: queued in its pool (holding its request and any stdin the
//! client sent meanwhile), then relayed to a worker's session until its `X`.
//!
//! The connection hands stdin, signals and window sizes to its [`PluginState`], which keeps
//! them while queued and forwards them to the [`PluginHost`] once bound; the host binds and
//! refuses queued sessions through `Conn::bind` and `Conn::take_queued`.

use super::{Conn, ConnState, Env, Launch, RELAYED};
use crate::plugin::{session::FdOffer, Bound, PluginHost, Queued, WorkerKey};
use bytes::Bytes;
use ng_proto::ext::{Features, SignalName, WinSize};
use std::time::Instant;

/// A plugin command, as the connection sees it: waiting for a worker (holding its request
/// and any stdin sent meanwhile), then relayed to one.
#[derive(Debug)]
pub enum PluginState {
    /// Queued in its pool.
    Queued(Box<Queued>),
    /// Bound to a worker's session until its `X`.
    Bound(Bound),
}

/// What a client's signal did to a plugin session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Signalled {
    /// Forwarded to the worker, or nothing to do.
    Handled,
    /// The command has not started: as a cold run, the session ends by this signal number.
    Ends(i32),
}

impl PluginState {
    /// The worker session this state is relayed to, if bound.
    pub(super) fn bound(&self) -> Option<&Bound> {
        match self {
            PluginState::Bound(b) => Some(b),
            PluginState::Queued(_) => None,
        }
    }

    /// Stdin from the client: kept while queued, handed to the worker once bound. Returns
    /// the stdin backlog, and whether to ask the client for more.
    pub(super) fn stdin(&mut self, host: &mut PluginHost, data: Bytes) -> (usize, bool) {
        match self {
            PluginState::Queued(q) => {
                q.stdin.push(data);
                (q.stdin.bytes(), false)
            }
            PluginState::Bound(b) => host.stdin(b, data),
        }
    }

    /// The client's stdin ended.
    pub(super) fn stdin_eof(&mut self, host: &mut PluginHost) {
        match self {
            PluginState::Queued(q) => q.stdin.set_eof(),
            PluginState::Bound(b) => host.stdin_eof(b),
        }
    }

    /// A signal the client forwarded; `kills` is its number when it ends a process that
    /// does not handle it. A worker that ignores interrupts has its session hung up when the
    /// signal kills: the command is cancelled as if the client had gone.
    pub(super) fn signal(
        &self,
        host: &mut PluginHost,
        name: &SignalName,
        kills: Option<i32>,
    ) -> Signalled {
        match self {
            PluginState::Bound(b) => {
                if !host.signal(b, name) && kills.is_some() {
                    host.hang_up(b, Instant::now());
                }
                Signalled::Handled
            }
            PluginState::Queued(_) => kills.map_or(Signalled::Handled, Signalled::Ends),
        }
    }

    /// The client's window changed: kept for the header while queued, forwarded once bound.
    pub(super) fn window_size(&mut self, host: &mut PluginHost, size: WinSize) {
        match self {
            PluginState::Bound(b) => host.window_size(b, size),
            PluginState::Queued(q) => q.request.client.winsize = Some(size),
        }
    }

    /// The server's shutdown grace is over: a bound session's worker forwards SIGTERM to
    /// the command.
    pub(super) fn terminate(&self, host: &mut PluginHost) {
        if let PluginState::Bound(bound) = self {
            host.signal(bound, &SignalName::from(ng_proto::Signal::Term));
        }
    }
}

impl Conn {
    /// Queues the command in its plugin's pool; a full or disabled pool refuses it.
    pub(super) fn queue_plugin(&mut self, env: &mut Env<'_>, launch: Launch, pool: usize) {
        let Launch {
            name,
            request,
            umask,
            passed,
        } = launch;
        match env.host.queue(env.key, pool, env.now) {
            Ok(()) => {
                if passed.is_none() {
                    // Nothing waits on the worker's answer: settled now, so signals and
                    // window changes are forwarded even while the session is queued.
                    self.session.accept_extensions(RELAYED);
                }
                self.state = ConnState::Plugin(PluginState::Queued(Box::new(Queued {
                    pool,
                    command: name,
                    request,
                    umask,
                    stdin: Default::default(),
                    fds: passed,
                })));
            }
            Err(refusal) => {
                let message = refusal.message(&name);
                tracing::info!(conn = self.serial, "{message}");
                self.finish(refusal.code(), &message);
            }
        }
    }

    /// Binds the queued session to `session` of `worker`, and returns what it held; `None`
    /// if it no longer waits.
    pub(crate) fn bind(&mut self, worker: WorkerKey, session: u64) -> Option<Queued> {
        let ConnState::Plugin(PluginState::Queued(q)) = &self.state else {
            return None;
        };
        let bound = Bound {
            worker,
            session,
            command: q.command.clone(),
        };
        match std::mem::replace(
            &mut self.state,
            ConnState::Plugin(PluginState::Bound(bound)),
        ) {
            ConnState::Plugin(PluginState::Queued(q)) => Some(*q),
            _ => None,
        }
    }

    /// Takes the queued session the host refuses (it answers the client through
    /// [`Conn::finish`]); `None` if it no longer waits.
    pub(crate) fn take_queued(&mut self) -> Option<Queued> {
        if !matches!(self.state, ConnState::Plugin(PluginState::Queued(_))) {
            return None;
        }
        match std::mem::replace(&mut self.state, ConnState::Finishing) {
            ConnState::Plugin(PluginState::Queued(q)) => Some(*q),
            _ => None,
        }
    }

    /// The worker answered the client's descriptors offer: the extensions the session
    /// honours follow from it.
    pub(crate) fn settle_extensions(&mut self, answer: FdOffer) {
        let server = match answer {
            FdOffer::TakenWithCtty => Features::ALL,
            FdOffer::Taken => Features::ALL.without(Features::CTTY),
            _ => RELAYED,
        };
        self.session.accept_extensions(server);
    }

    /// The worker's session ended with `report` (its `X`).
    pub(crate) fn exit_relayed(&mut self, report: &ng_proto::ext::ExitReport) {
        self.session.exit_with(report);
        self.state = ConnState::Finishing;
        self.stdin_backlog = 0;
    }
}
