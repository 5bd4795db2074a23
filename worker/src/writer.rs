//! The write half of the channel to ngd, shared by the reader (pongs) and every session.

use crate::feature::Negotiated;
use bytes::BytesMut;
use ng_proto::codec::encode;
use ng_proto::ChunkType;
use ngw_vocab::NoticeKind;
use serde_json::json;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

/// Locks `m`, taking over a lock a panicking thread left poisoned.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The write half, shared by the reader (pongs) and every session.
#[derive(Debug)]
pub(crate) struct Writer {
    inner: Mutex<WriterState>,
    /// What the hello negotiated.
    pub(crate) negotiated: Negotiated,
}

#[derive(Debug)]
struct WriterState {
    stream: UnixStream,
    mux: bool,
    notices: bool,
    selected: Option<u64>,
    buf: BytesMut,
}

impl Writer {
    /// The writer of a channel that negotiated `negotiated`.
    pub(crate) fn new(stream: UnixStream, negotiated: Negotiated) -> Self {
        Self {
            inner: Mutex::new(WriterState {
                stream,
                mux: negotiated.mux,
                notices: negotiated.notices,
                selected: None,
                buf: BytesMut::new(),
            }),
            negotiated,
        }
    }

    /// A writer on a plain (not `mux`) channel, for tests of what sessions send.
    #[cfg(test)]
    pub(crate) fn plain(stream: UnixStream, negotiated: Negotiated) -> Self {
        Self {
            inner: Mutex::new(WriterState {
                stream,
                mux: false,
                notices: false,
                selected: None,
                buf: BytesMut::new(),
            }),
            negotiated,
        }
    }

    /// Sends a session chunk, selecting the session first on a `mux` channel.
    pub(crate) fn send(&self, session: u64, ty: ChunkType, payload: &[u8]) -> io::Result<()> {
        let mut w = lock(&self.inner);
        let w = &mut *w;
        w.buf.clear();
        if w.mux && w.selected != Some(session) {
            encode(
                ChunkType::WORKER_SELECT,
                session.to_string().as_bytes(),
                &mut w.buf,
            );
            w.selected = Some(session);
        }
        encode(ty, payload, &mut w.buf);
        w.stream.write_all(&w.buf)
    }

    /// Sends a notice (`docs/ngw.md` §15.3) when the host takes them; otherwise writes it
    /// to stderr, the plugin's log.
    pub(crate) fn notice(&self, kind: &NoticeKind, message: &str, session: Option<u64>) {
        let notices = lock(&self.inner).notices;
        if !notices {
            eprintln!("ngw: {kind}: {message}");
            return;
        }
        let mut v = json!({"kind": kind.as_str(), "message": message});
        if let Some(id) = session {
            v["session"] = json!(id);
        }
        let _ = self.send_control(ChunkType::WORKER_NOTICE, v.to_string().as_bytes());
    }

    /// Sends a chunk that belongs to no session (hello, pong).
    pub(crate) fn send_control(&self, ty: ChunkType, payload: &[u8]) -> io::Result<()> {
        let mut w = lock(&self.inner);
        let w = &mut *w;
        w.buf.clear();
        encode(ty, payload, &mut w.buf);
        w.stream.write_all(&w.buf)
    }

    /// Closes the write half.
    pub(crate) fn shutdown(&self) {
        let w = lock(&self.inner);
        let _ = w.stream.shutdown(std::net::Shutdown::Write);
    }
}
