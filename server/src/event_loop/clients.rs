//! The plugin host's view of the loop's connections ([`Clients`]): what a worker's session
//! sends reaches its connection, which is then serviced before the turn ends.

use crate::conn::Conn;
use crate::plugin::{session::FdOffer, Clients, Queued, WorkerKey};
use crate::session_io::{ConnKey, OUTPUT_HIGH_WATER};
use slab::Slab;

/// The connections, and the slots the host wrote to during its call.
pub(super) struct ConnClients<'a> {
    conns: &'a mut Slab<Conn>,
    dirty: &'a mut Vec<usize>,
}

impl<'a> ConnClients<'a> {
    /// A view of `conns` that records the slots it touches in `dirty`.
    pub(super) fn new(conns: &'a mut Slab<Conn>, dirty: &'a mut Vec<usize>) -> Self {
        Self { conns, dirty }
    }

    /// The connection `key` names, if it is still open, marked to be serviced.
    fn live(&mut self, key: ConnKey) -> Option<&mut Conn> {
        let conn = self
            .conns
            .get_mut(key.slot)
            .filter(|c| c.serial == key.serial)?;
        self.dirty.push(key.slot);
        Some(conn)
    }
}

impl Clients for ConnClients<'_> {
    fn stdout(&mut self, conn: ConnKey, data: &[u8]) {
        if let Some(c) = self.live(conn) {
            c.session.write_stdout(data);
        }
    }

    fn stderr(&mut self, conn: ConnKey, data: &[u8]) {
        if let Some(c) = self.live(conn) {
            c.session.write_stderr(data);
        }
    }

    fn request_stdin(&mut self, conn: ConnKey) -> bool {
        match self.live(conn) {
            Some(c) => c.session.request_stdin() || !c.session.stdin_ended(),
            None => false,
        }
    }

    fn stdin_backlog(&mut self, conn: ConnKey, bytes: usize) {
        if let Some(c) = self.live(conn) {
            c.stdin_backlog = bytes;
        }
    }

    fn exit(&mut self, conn: ConnKey, report: &ng_proto::ext::ExitReport) {
        if let Some(c) = self.live(conn) {
            c.exit_relayed(report);
        }
    }

    fn settle(&mut self, conn: ConnKey, answer: FdOffer) {
        if let Some(c) = self.live(conn) {
            c.settle_extensions(answer);
        }
    }

    fn stopped(&mut self, conn: ConnKey, signal: &ng_proto::ext::SignalName) {
        if let Some(c) = self.live(conn) {
            c.session.stopped(signal);
        }
    }

    fn finish(&mut self, conn: ConnKey, code: i32, message: &str) {
        if let Some(c) = self.live(conn) {
            c.finish(code, message);
            c.stdin_backlog = 0;
        }
    }

    fn output_full(&self, conn: ConnKey) -> bool {
        self.conns
            .get(conn.slot)
            .filter(|c| c.serial == conn.serial)
            .is_some_and(|c| c.wbuf.len() + c.session.transmit().len() > OUTPUT_HIGH_WATER)
    }

    fn bind(&mut self, conn: ConnKey, worker: WorkerKey, session: u64) -> Option<Queued> {
        self.live(conn)?.bind(worker, session)
    }

    fn take_queued(&mut self, conn: ConnKey) -> Option<Queued> {
        self.live(conn)?.take_queued()
    }
}
