//! The fake Nailgun server: a listener whose connections a test drives chunk by chunk,
//! or that answers every session on its own.
//!
//! [`FakeServer`] listens on TCP (IPv4 or IPv6, any address the machine has) or a Unix
//! socket. [`FakeServer::accept`] hands the test the server's end of one connection as a
//! [`Peer`]: read the client's chunks, assert on them, send `1`/`2`/`S`/`X` or any bytes at
//! all. Every blocking step has a timeout, so a misbehaving client fails the test instead
//! of hanging it.
//!
//! [`FakeServer::record`] turns the listener into a [`Recording`]: a thread that serves
//! connections one at a time, records each session's header chunks (everything up to and
//! including `C`) as a [`Request`], then answers with a fixed [`Reply`] (optional stdout
//! and stderr chunks and an `X`, each in one write). Like a well-behaved server it then
//! shuts down its write side and drains the client's bytes (heartbeats, say) until end of
//! file, so the client never sees a reset. It shows what the reference Java server cannot:
//! IPv6 literals, and the `L` (`--nailgun-filearg`) chunks it drops.

use std::collections::BTreeMap;
use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::net::{Address, Stream};
use crate::wire::{frame, take_chunk, Chunk};

/// How long any single step may take before the test fails.
pub const STEP: Duration = Duration::from_secs(10);

#[derive(Debug)]
enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// A listening fake server.
#[derive(Debug)]
pub struct FakeServer {
    listener: Listener,
    address: Address,
}

impl FakeServer {
    /// Listens on `bind` (port 0 picks a free port). Fails if the address cannot be bound
    /// (e.g. no IPv6 on this machine).
    pub fn tcp(bind: SocketAddr) -> io::Result<FakeServer> {
        let listener = TcpListener::bind(bind)?;
        let address = Address::Tcp(listener.local_addr()?);
        listener.set_nonblocking(true)?;
        Ok(FakeServer {
            listener: Listener::Tcp(listener),
            address,
        })
    }

    /// Listens on a Unix socket at `path`.
    pub fn unix(path: &Path) -> io::Result<FakeServer> {
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        Ok(FakeServer {
            listener: Listener::Unix(listener),
            address: Address::Unix(path.to_path_buf()),
        })
    }

    /// Where the fake listens.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Accepts a client's connection, waiting at most [`STEP`].
    #[track_caller]
    pub fn accept(&self) -> Peer {
        self.try_accept(STEP).expect("the client did not connect")
    }

    /// Accepts a connection if one arrives within `timeout`.
    pub fn try_accept(&self, timeout: Duration) -> Option<Peer> {
        let deadline = Instant::now() + timeout;
        loop {
            let accepted = match &self.listener {
                Listener::Tcp(l) => l.accept().and_then(|(s, _)| {
                    s.set_nodelay(true)?;
                    Ok(Stream::Tcp(s))
                }),
                Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
            };
            match accepted {
                Ok(stream) => {
                    stream.set_nonblocking(false).expect("blocking socket");
                    return Some(Peer {
                        stream,
                        buf: Vec::new(),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return None;
                    }
                    thread::sleep(Duration::from_millis(2));
                }
                Err(e) => panic!("accept: {e}"),
            }
        }
    }

    /// Serves every session from now on with `reply`, on a thread, recording the headers.
    pub fn record(self, reply: Reply) -> Recording {
        let address = self.address.clone();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let requests = Arc::clone(&requests);
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if let Some(peer) = self.try_accept(Duration::from_millis(20)) {
                        serve(peer, &reply, &requests);
                    }
                }
            })
        };
        Recording {
            address,
            requests,
            stop,
            thread: Some(thread),
        }
    }
}

/// What a read from the client came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Got {
    /// A whole chunk.
    Chunk(Chunk),
    /// The client closed (or reset) the connection.
    Closed,
    /// Nothing complete arrived in time.
    Timeout,
}

/// The server's end of one accepted connection.
#[derive(Debug)]
pub struct Peer {
    stream: Stream,
    /// Bytes received but not yet returned as a chunk (survives timeouts).
    buf: Vec<u8>,
}

impl Peer {
    /// The next chunk, waiting at most `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Got {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(chunk) = take_chunk(&mut self.buf) {
                return Got::Chunk(chunk);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Got::Timeout;
            }
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .expect("set_read_timeout");
            let mut tmp = [0u8; 64 * 1024];
            match self.stream.read(&mut tmp) {
                Ok(0) => return Got::Closed,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Got::Timeout
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Got::Closed,
            }
        }
    }

    /// The next chunk other than a heartbeat, within `timeout`.
    pub fn next_data(&mut self, timeout: Duration) -> Got {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left) {
                Got::Chunk(c) if c.ty == b'H' => continue,
                other => return other,
            }
        }
    }

    /// The first read of a Unix connection, with `recvmsg`: the header's first bytes and
    /// the descriptors that ride with them (`SCM_RIGHTS`). Call before anything else.
    pub fn recv_fds(&mut self) -> Vec<std::os::fd::OwnedFd> {
        use std::os::fd::AsRawFd as _;
        let Stream::Unix(s) = &self.stream else {
            panic!("descriptors need a Unix socket");
        };
        s.set_read_timeout(Some(STEP)).unwrap();
        let mut data = vec![0u8; 64 * 1024];
        let got = ng_sys::scm::recv_with_fds(s.as_raw_fd(), &mut data, ng_sys::scm::MAX_FDS)
            .unwrap_or_else(|e| panic!("recvmsg: {e}"));
        assert!(got.len > 0, "recvmsg: end of stream");
        self.buf.extend_from_slice(&data[..got.len]);
        got.fds
    }

    /// The next chunk, which must arrive within [`STEP`].
    #[track_caller]
    pub fn chunk(&mut self) -> Chunk {
        match self.next(STEP) {
            Got::Chunk(c) => c,
            other => panic!("expected a chunk, got {other:?}"),
        }
    }

    /// Every chunk up to and including `C`, each within [`STEP`].
    #[track_caller]
    pub fn header(&mut self) -> Vec<Chunk> {
        self.try_header(STEP)
            .unwrap_or_else(|got| panic!("expected a header chunk, got {got:?}"))
    }

    /// Every chunk up to and including `C`, each within `timeout`; what came instead of
    /// the next one if the client closed or went silent first.
    pub fn try_header(&mut self, timeout: Duration) -> Result<Vec<Chunk>, Got> {
        let mut chunks = Vec::new();
        loop {
            match self.next(timeout) {
                Got::Chunk(c) => {
                    let done = c.ty == b'C';
                    chunks.push(c);
                    if done {
                        return Ok(chunks);
                    }
                }
                other => return Err(other),
            }
        }
    }

    /// The raw bytes of the header, up to and including the `C` chunk.
    #[track_caller]
    pub fn raw_header(&mut self) -> Vec<u8> {
        self.header().iter().flat_map(Chunk::encode).collect()
    }

    /// Sends one chunk (in one write).
    #[track_caller]
    pub fn send(&mut self, ty: u8, payload: &[u8]) {
        self.send_raw(&frame(ty, payload));
    }

    /// Sends raw bytes.
    #[track_caller]
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send to the client");
    }

    /// Sends `X` with this payload.
    #[track_caller]
    pub fn exit(&mut self, payload: &str) {
        self.send(b'X', payload.as_bytes());
    }

    /// Closes our sending side (the client reads end of stream), keeping the connection
    /// open for reading, so nothing we sent is lost to a reset.
    pub fn shutdown_write(&mut self) {
        self.stream.shutdown(Shutdown::Write);
    }

    /// Skips whatever the client sends until it closes; `false` if it sends nothing for
    /// `quiet` first.
    pub fn drain(&mut self, quiet: Duration) -> bool {
        loop {
            match self.next(quiet) {
                Got::Chunk(_) => continue,
                Got::Closed => return true,
                Got::Timeout => return false,
            }
        }
    }

    /// Waits until the client closes the connection (skipping whatever it sends).
    #[track_caller]
    pub fn expect_closed(&mut self) {
        let deadline = Instant::now() + STEP;
        loop {
            match self.next(deadline.saturating_duration_since(Instant::now())) {
                Got::Chunk(_) => continue,
                Got::Closed => return,
                Got::Timeout => panic!("the client did not close the connection"),
            }
        }
    }
}

/// The payloads of the chunks of type `ty`, in order.
fn payloads(header: &[Chunk], ty: u8) -> impl DoubleEndedIterator<Item = &[u8]> {
    header
        .iter()
        .filter(move |c| c.ty == ty)
        .map(|c| c.payload.as_slice())
}

/// The environment entries (`E` payloads) of a header, in order.
pub fn env_of(header: &[Chunk]) -> Vec<Vec<u8>> {
    payloads(header, b'E').map(<[u8]>::to_vec).collect()
}

/// The value of `name` in a header's environment (the last one, as the server keeps).
pub fn env_value(header: &[Chunk], name: &str) -> Option<Vec<u8>> {
    let prefix = format!("{name}=");
    payloads(header, b'E')
        .rev()
        .find_map(|e| e.strip_prefix(prefix.as_bytes()))
        .map(<[u8]>::to_vec)
}

/// What a [`Recording`] answers to every session.
#[derive(Clone, Debug)]
pub struct Reply {
    /// Sent as one `1` chunk, if not empty.
    pub stdout: Vec<u8>,
    /// Sent as one `2` chunk, if not empty.
    pub stderr: Vec<u8>,
    /// The `X` chunk's payload, e.g. `b"0\n"`.
    pub exit: Vec<u8>,
}

impl Reply {
    /// Prints `stdout` and exits with `code`.
    pub fn stdout(stdout: impl Into<Vec<u8>>, code: i32) -> Reply {
        Reply {
            stdout: stdout.into(),
            stderr: Vec::new(),
            exit: format!("{code}\n").into_bytes(),
        }
    }
}

/// The header of one session, as the client sent it.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// Every chunk up to and including `C`, in order.
    pub chunks: Vec<Chunk>,
}

impl Request {
    /// The `C` chunk's payload.
    pub fn command(&self) -> Option<String> {
        payloads(&self.chunks, b'C').last().map(lossy)
    }

    /// The `A` chunks' payloads, in order.
    pub fn args(&self) -> Vec<String> {
        payloads(&self.chunks, b'A').map(lossy).collect()
    }

    /// The `E` chunks, split at the first `=` (a later entry wins, as on the Java server).
    pub fn env(&self) -> BTreeMap<String, String> {
        payloads(&self.chunks, b'E')
            .filter_map(|entry| {
                let text = lossy(entry);
                text.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect()
    }

    /// The last `D` chunk's payload.
    pub fn cwd(&self) -> Option<String> {
        payloads(&self.chunks, b'D').last().map(lossy)
    }

    /// The header's type bytes in order, e.g. `"LLAAEEEEEDC"`: where chunks went.
    pub fn shape(&self) -> String {
        self.chunks.iter().map(|c| c.ty as char).collect()
    }

    /// Each `--nailgun-filearg` file as the client sent it: the `L` payloads up to each
    /// empty `L` terminator, concatenated.
    pub fn fileargs(&self) -> Vec<Vec<u8>> {
        let mut files = Vec::new();
        let mut current = Vec::new();
        for payload in payloads(&self.chunks, b'L') {
            if payload.is_empty() {
                files.push(std::mem::take(&mut current));
            } else {
                current.extend_from_slice(payload);
            }
        }
        files
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fake server answering every session on a thread of its own; stops when dropped.
#[derive(Debug)]
pub struct Recording {
    address: Address,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Recording {
    /// Where the fake listens.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// The headers of the sessions seen so far (each is recorded as soon as its `C`
    /// arrives, before the reply is sent).
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(mut peer: Peer, reply: &Reply, requests: &Mutex<Vec<Request>>) {
    // A client that goes away before `C` leaves nothing to record.
    let Ok(chunks) = peer.try_header(STEP) else {
        return;
    };
    requests.lock().unwrap().push(Request { chunks });
    let mut out = Vec::new();
    if !reply.stdout.is_empty() {
        out.push(Chunk::new(b'1', reply.stdout.clone()));
    }
    if !reply.stderr.is_empty() {
        out.push(Chunk::new(b'2', reply.stderr.clone()));
    }
    out.push(Chunk::new(b'X', reply.exit.clone()));
    for chunk in out {
        if peer.stream.write_all(&chunk.encode()).is_err() {
            return;
        }
    }
    peer.shutdown_write();
    // Drain until the client closes, so unread bytes never turn our close into a reset.
    peer.drain(STEP);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::frames;
    use std::net::Ipv4Addr;

    #[test]
    fn a_peer_reads_chunks_split_across_writes() {
        let fake = FakeServer::tcp((Ipv4Addr::LOCALHOST, 0).into()).unwrap();
        let mut client = Stream::connect(fake.address()).unwrap();
        let mut peer = fake.accept();
        let bytes = frames(&[(b'A', b"x"), (b'E', b"K=v"), (b'C', b"cmd")]);
        client.write_all(&bytes[..7]).unwrap();
        assert_eq!(
            peer.next(Duration::from_millis(50)),
            Got::Chunk(Chunk::new(b'A', "x"))
        );
        assert_eq!(peer.next(Duration::from_millis(50)), Got::Timeout);
        client.write_all(&bytes[7..]).unwrap();
        let header = peer.header();
        assert_eq!(env_value(&header, "K"), Some(b"v".to_vec()));
        drop(client);
        peer.expect_closed();
    }

    #[test]
    fn a_recording_records_and_replies() {
        let fake = FakeServer::tcp((Ipv4Addr::LOCALHOST, 0).into())
            .unwrap()
            .record(Reply::stdout("out", 3));
        let mut client = Stream::connect(fake.address()).unwrap();
        client
            .write_all(&frames(&[(b'A', b"a"), (b'D', b"/"), (b'C', b"c")]))
            .unwrap();
        let mut got = Vec::new();
        while let Some(c) = crate::wire::read_chunk(&mut client).unwrap() {
            got.push(c);
        }
        assert_eq!(got, [Chunk::new(b'1', "out"), Chunk::new(b'X', "3\n")]);
        let requests = fake.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].shape(), "ADC");
        assert_eq!(requests[0].command().as_deref(), Some("c"));
    }
}
