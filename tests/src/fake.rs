//! A scripted Nailgun server that records what clients send.
//!
//! The reference Java server cannot show everything a client does: it cannot bind IPv6
//! literals, and it drops `L` (`--nailgun-filearg`) chunks. [`FakeServer`] listens on any
//! TCP address (e.g. `[::1]:0`), serves connections one at a time on a thread of its own,
//! records each session's header chunks (everything up to and including `C`) as a
//! [`Request`], then answers with a fixed [`Reply`]: optional stdout and stderr chunks and
//! an `X`, each in one write. Like a well-behaved server it then shuts down its write
//! side and drains the client's bytes (heartbeats, say) until end of file, so the client
//! never sees a reset.
//!
//! [`RefusingPort`] is the opposite: a loopback port where nothing listens.

use std::collections::BTreeMap;
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::server::Address;
use crate::wire::{read_chunk, Chunk};

/// What the fake server answers to every session.
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
        self.payloads(b'C').last().map(lossy)
    }

    /// The `A` chunks' payloads, in order.
    pub fn args(&self) -> Vec<String> {
        self.payloads(b'A').map(lossy).collect()
    }

    /// The `E` chunks, split at the first `=` (a later entry wins, as on the Java server).
    pub fn env(&self) -> BTreeMap<String, String> {
        self.payloads(b'E')
            .filter_map(|entry| {
                let text = lossy(entry);
                text.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect()
    }

    /// The last `D` chunk's payload.
    pub fn cwd(&self) -> Option<String> {
        self.payloads(b'D').last().map(lossy)
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
        for payload in self.payloads(b'L') {
            if payload.is_empty() {
                files.push(std::mem::take(&mut current));
            } else {
                current.extend_from_slice(payload);
            }
        }
        files
    }

    fn payloads(&self, ty: u8) -> impl Iterator<Item = &[u8]> {
        self.chunks
            .iter()
            .filter(move |c| c.ty == ty)
            .map(|c| c.payload.as_slice())
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A running fake server; stops when dropped.
#[derive(Debug)]
pub struct FakeServer {
    address: Address,
    local: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeServer {
    /// Listens on `bind` (port 0 picks a free port) and answers every session with
    /// `reply`. Fails if the address cannot be bound (e.g. no IPv6 on this machine).
    pub fn tcp(bind: SocketAddr, reply: Reply) -> io::Result<FakeServer> {
        let listener = TcpListener::bind(bind)?;
        let local = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let requests = Arc::clone(&requests);
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        serve(stream, &reply, &requests);
                    }
                }
            })
        };
        Ok(FakeServer {
            address: Address::Tcp(local),
            local,
            requests,
            stop,
            thread: Some(thread),
        })
    }

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

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.local);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(mut stream: TcpStream, reply: &Reply, requests: &Mutex<Vec<Request>>) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut request = Request::default();
    loop {
        match read_chunk(&mut stream) {
            Ok(Some(chunk)) => {
                let done = chunk.ty == b'C';
                request.chunks.push(chunk);
                if done {
                    break;
                }
            }
            // The client went away before `C` (e.g. the wake-up connection on drop).
            Ok(None) | Err(_) => return,
        }
    }
    requests.lock().unwrap().push(request);

    let mut out = Vec::new();
    if !reply.stdout.is_empty() {
        out.push(Chunk::new(b'1', reply.stdout.clone()));
    }
    if !reply.stderr.is_empty() {
        out.push(Chunk::new(b'2', reply.stderr.clone()));
    }
    out.push(Chunk::new(b'X', reply.exit.clone()));
    for chunk in out {
        if stream.write_all(&chunk.encode()).is_err() {
            return;
        }
    }
    let _ = stream.shutdown(Shutdown::Write);
    // Drain until the client closes, so unread bytes never turn our close into a reset.
    while let Ok(Some(_)) = read_chunk(&mut stream) {}
}

/// A loopback TCP port where nothing listens, reserved while the guard lives.
///
/// The socket is bound, so no other test or process can take the port, but it never
/// listens, so every connection to it is refused: "nothing listening" without a race.
#[derive(Debug)]
pub struct RefusingPort {
    _socket: OwnedFd,
    address: Address,
}

impl RefusingPort {
    /// Reserves a port on 127.0.0.1.
    pub fn new() -> RefusingPort {
        // SAFETY: plain socket calls on a descriptor we own, with correctly sized
        // `sockaddr_in` buffers.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
            let socket = OwnedFd::from_raw_fd(fd);
            let mut sin: libc::sockaddr_in = std::mem::zeroed();
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let addr = &mut sin as *mut libc::sockaddr_in as *mut libc::sockaddr;
            assert!(
                libc::bind(fd, addr, len) == 0,
                "bind: {}",
                io::Error::last_os_error()
            );
            assert!(
                libc::getsockname(fd, addr, &mut len) == 0,
                "getsockname: {}",
                io::Error::last_os_error()
            );
            let port = u16::from_be(sin.sin_port);
            RefusingPort {
                _socket: socket,
                address: Address::Tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
            }
        }
    }

    /// The refusing address.
    pub fn address(&self) -> &Address {
        &self.address
    }
}

impl Default for RefusingPort {
    fn default() -> Self {
        RefusingPort::new()
    }
}
