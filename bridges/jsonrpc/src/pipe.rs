//! The plugin's stdin: each frame is written whole and in order, by the thread that made it
//! when the pipe takes it at once, else by a writer thread, and never blocks its caller.
//!
//! A session that starts a call writes its request itself ([`Stdin::write_or_queue`]): one
//! thread hand-off less per call than passing every frame to the writer thread, which on a
//! busy machine is a context switch and a wake-up of latency saved. The pipe is
//! non-blocking, so a plugin that stops reading never blocks a session or the bridge's
//! state lock: what the pipe does not take goes to the writer thread, which waits for room
//! with `poll`, and every later frame queues behind it, so frames never interleave or
//! overtake one another. Frames made under the state lock (pings, answers to the plugin's
//! requests, cancellations, `shutdown`) always go through the writer thread
//! ([`Stdin::queue`]).

use crossbeam_channel::{Receiver, Sender};
use std::io::{ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::process::ChildStdin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

enum Msg {
    /// A frame to write after everything before it.
    Frame(Vec<u8>),
    /// A session left the rest of a frame in [`Inner::rest`].
    Rest,
    /// Close stdin after everything before it.
    Close,
}

struct Inner {
    /// `None` once closed.
    pipe: Option<ChildStdin>,
    /// The unwritten end of a frame a session began to write; written before anything else.
    rest: Option<Vec<u8>>,
    /// A write failed (the plugin is gone): everything else is dropped.
    broken: bool,
}

/// The plugin's stdin, shared by the sessions, the bridge's threads and its writer thread.
pub struct Stdin {
    inner: Mutex<Inner>,
    /// Frames sent to the writer thread and not yet written.
    backlog: AtomicUsize,
    tx: Sender<Msg>,
}

impl std::fmt::Debug for Stdin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stdin")
            .field("backlog", &self.backlog.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Stdin {
    /// Makes `pipe` non-blocking and starts its writer thread (named `name`).
    pub fn start(pipe: ChildStdin, name: String) -> std::io::Result<Arc<Self>> {
        let fd = pipe.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own; only its status flags change.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) >= 0
        };
        if !ok {
            return Err(std::io::Error::last_os_error());
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        let stdin = Arc::new(Self {
            inner: Mutex::new(Inner {
                pipe: Some(pipe),
                rest: None,
                broken: false,
            }),
            backlog: AtomicUsize::new(0),
            tx,
        });
        let me = stdin.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || me.writer(rx))?;
        Ok(stdin)
    }

    /// Hands a frame to the writer thread. Never blocks (callers hold the state lock).
    pub fn queue(&self, frame: Vec<u8>) {
        self.backlog.fetch_add(1, Ordering::SeqCst);
        let _ = self.tx.send(Msg::Frame(frame));
    }

    /// Writes a frame now if nothing is ahead of it and the pipe takes it; what the pipe
    /// does not take is finished by the writer thread. Never blocks on the pipe.
    pub fn write_or_queue(&self, frame: Vec<u8>) {
        let Ok(mut inner) = self.inner.try_lock() else {
            // The writer thread is busy with earlier frames.
            return self.queue(frame);
        };
        if inner.rest.is_some() || inner.broken || self.backlog.load(Ordering::SeqCst) > 0 {
            drop(inner);
            return self.queue(frame);
        }
        let Some(pipe) = inner.pipe.as_mut() else {
            return;
        };
        let mut written = 0;
        while written < frame.len() {
            match pipe.write(&frame[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    // Still under the lock: the rest goes out before any other frame.
                    inner.rest = Some(frame[written..].to_vec());
                    let _ = self.tx.send(Msg::Rest);
                    return;
                }
                Err(_) => {
                    inner.broken = true;
                    return;
                }
            }
        }
    }

    /// Closes stdin once every frame before this is written.
    pub fn close(&self) {
        let _ = self.tx.send(Msg::Close);
    }

    fn writer(&self, rx: Receiver<Msg>) {
        while let Ok(msg) = rx.recv() {
            let mut inner = lock(&self.inner);
            if let Some(rest) = inner.rest.take() {
                write_all(&mut inner, &rest);
            }
            match msg {
                Msg::Frame(frame) => {
                    write_all(&mut inner, &frame);
                    self.backlog.fetch_sub(1, Ordering::SeqCst);
                }
                Msg::Rest => {}
                Msg::Close => {
                    inner.pipe = None;
                    return;
                }
            }
        }
    }
}

/// Writes all of `bytes`, waiting for room in the pipe; a failure marks it broken.
fn write_all(inner: &mut Inner, bytes: &[u8]) {
    if inner.broken {
        return;
    }
    let Some(pipe) = inner.pipe.as_mut() else {
        return;
    };
    let mut written = 0;
    while written < bytes.len() {
        match pipe.write(&bytes[written..]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd {
                    fd: pipe.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; EINTR and readiness both lead to a retry.
                unsafe {
                    libc::poll(&mut pfd, 1, -1);
                }
            }
            Err(_) => {
                inner.broken = true;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::process::{Command, Stdio};

    /// Frames written directly and queued, some larger than the pipe holds while the
    /// reader is not reading, arrive whole and in order.
    #[test]
    fn frames_arrive_whole_and_in_order_when_the_pipe_is_full() {
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = Stdin::start(child.stdin.take().unwrap(), "test-writer".into()).unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut expected = Vec::new();
        for i in 0..40u8 {
            // 0..40 KiB frames: the pipe (64 KiB) fills while nobody reads.
            let frame = vec![b'a' + i % 26; usize::from(i) * 1024 + 1];
            expected.extend_from_slice(&frame);
            if i % 3 == 0 {
                stdin.queue(frame);
            } else {
                stdin.write_or_queue(frame);
            }
        }
        stdin.close();
        let mut got = Vec::new();
        stdout.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "frames interleaved or reordered");
        child.wait().unwrap();
    }
}
