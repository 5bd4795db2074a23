//! The I/O shell around one plugin process: spawning it as Nu does (`--stdio`, its own
//! directory, a new process group, stderr to the bridge's stderr, which is the plugin
//! log), a reader thread that decodes its messages and hands each to the call it belongs
//! to ([`crate::host::Router`]), a shared writer, and the [`Manager`] that keeps one
//! process warm, restarts it on demand and stops it after an idle period (GC).

use crate::codec::{read_preamble, Decoder, Encoding};
use crate::host::{Event, Routed, Router};
use crate::json::J;
use crate::msg;
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use ngw_vocab::restart::{Backoff, Decision, GiveUp, RestartPolicy};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Events a call may have queued before the plugin is considered to ignore flow control.
const CALL_QUEUE: usize = 4096;
/// How long a plugin gets to say its encoding and Hello.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// How long a plugin gets to exit after `Goodbye` before its group is killed.
const GOODBYE_GRACE: Duration = Duration::from_secs(10);

/// Why a plugin is unusable, and the exit code a session ends with because of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// A sentence for the client's stderr.
    pub reason: String,
    /// The session's exit code.
    pub code: i32,
}

impl Failure {
    fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            code: 1,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How a plugin file is run.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The plugin's executable.
    pub path: PathBuf,
    /// The largest message accepted from it.
    pub max_message: usize,
}

impl Spec {
    /// The file name, for messages.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string())
    }
}

#[derive(Debug)]
struct Sink {
    events: Sender<Event>,
    input: Option<Sender<Event>>,
}

#[derive(Debug)]
struct Inner {
    router: Router,
    sinks: HashMap<u64, Sink>,
    dead: Option<Failure>,
}

/// One running plugin process.
#[derive(Debug)]
pub struct Conn {
    name: String,
    encoding: Encoding,
    pgid: i32,
    stdin: Mutex<Option<ChildStdin>>,
    inner: Mutex<Inner>,
    gc_disabled: AtomicBool,
    interrupted: AtomicBool,
    exited: AtomicBool,
}

/// A running call: its id, its events, and (with an input stream) that stream's id and
/// the plugin's `Ack`/`Drop` for it.
#[derive(Debug)]
pub struct Call {
    /// The call id.
    pub id: u64,
    /// Events for the call.
    pub events: Receiver<Event>,
    /// The input stream's id and its flow-control events.
    pub input: Option<(u64, Receiver<Event>)>,
}

enum Handshake {
    Encoding(Encoding),
    Ready,
    Failed(Failure),
}

impl Conn {
    /// Starts the plugin and completes the handshake.
    pub fn spawn(spec: &Spec) -> Result<Arc<Conn>, Failure> {
        let name = spec.name();
        let dir = spec
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut child = Command::new(&spec.path)
            .arg("--stdio")
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .map_err(|e| Failure::new(format!("cannot start {}: {e}", spec.path.display())))?;
        let pgid = i32::try_from(child.id()).unwrap_or(0);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let (hs_tx, hs_rx) = bounded::<Handshake>(2);
        let (conn_tx, conn_rx) = bounded::<Arc<Conn>>(1);
        let max = spec.max_message;
        let reader_name = name.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("nu-reader-{name}"))
            .spawn(move || {
                let Some(stdout) = stdout else { return };
                reader(stdout, child, max, &reader_name, hs_tx, conn_rx);
            });
        if let Err(e) = spawned {
            kill_group(pgid);
            return Err(Failure::new(format!("cannot start a reader thread: {e}")));
        }
        let fail = |f: Failure| {
            kill_group(pgid);
            Err(f)
        };
        let encoding = match hs_rx.recv_timeout(HANDSHAKE) {
            Ok(Handshake::Encoding(e)) => e,
            Ok(Handshake::Failed(f)) => return fail(f),
            Ok(Handshake::Ready) | Err(_) => {
                return fail(Failure::new(format!(
                    "{name} did not say its encoding within {} s",
                    HANDSHAKE.as_secs()
                )))
            }
        };
        let conn = Arc::new(Conn {
            name: name.clone(),
            encoding,
            pgid,
            stdin: Mutex::new(stdin),
            inner: Mutex::new(Inner {
                router: Router::new(),
                sinks: HashMap::new(),
                dead: None,
            }),
            gc_disabled: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
            exited: AtomicBool::new(false),
        });
        let _ = conn_tx.send(conn.clone());
        // The plugin's Hello may already be on its way; ours goes out regardless.
        let _ = conn.send(&msg::hello());
        match hs_rx.recv_timeout(HANDSHAKE) {
            Ok(Handshake::Ready) => {}
            Ok(Handshake::Failed(f)) => return fail(f),
            Ok(Handshake::Encoding(_)) | Err(_) => {
                return fail(Failure::new(format!(
                    "{name} did not send Hello within {} s",
                    HANDSHAKE.as_secs()
                )))
            }
        }
        Ok(conn)
    }

    /// The plugin's file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The encoding the plugin chose.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// The Nu version the plugin targets.
    pub fn plugin_version(&self) -> String {
        lock(&self.inner)
            .router
            .plugin_version()
            .unwrap_or("")
            .to_owned()
    }

    /// Why the plugin is unusable, if it is.
    pub fn dead(&self) -> Option<Failure> {
        lock(&self.inner).dead.clone()
    }

    /// Whether the plugin asked not to be garbage-collected.
    pub fn gc_disabled(&self) -> bool {
        self.gc_disabled.load(Ordering::SeqCst)
    }

    /// Sends one message.
    pub fn send(&self, v: &J) -> Result<(), Failure> {
        let bytes = self.encoding.encode(v);
        let mut stdin = lock(&self.stdin);
        let Some(w) = stdin.as_mut() else {
            return Err(self
                .dead()
                .unwrap_or_else(|| Failure::new(format!("{} was stopped", self.name))));
        };
        w.write_all(&bytes).and_then(|()| w.flush()).map_err(|e| {
            self.dead()
                .unwrap_or_else(|| Failure::new(format!("cannot write to {}: {e}", self.name)))
        })
    }

    /// Starts a call, with an input stream when `input` says so.
    pub fn start_call(&self, input: bool) -> Result<Call, Failure> {
        if self.interrupted.swap(false, Ordering::SeqCst) {
            self.send(&msg::signal("Reset"))?;
        }
        let mut inner = lock(&self.inner);
        if let Some(f) = &inner.dead {
            return Err(f.clone());
        }
        let id = inner.router.start_call();
        // Unbounded, with the cap checked by the reader before each send: a bounded
        // channel would allocate and initialise all CALL_QUEUE slots for every call.
        let (tx, rx) = unbounded();
        let input = input.then(|| {
            let sid = inner.router.start_input_stream(id);
            let (itx, irx) = unbounded();
            (sid, itx, irx)
        });
        inner.sinks.insert(
            id,
            Sink {
                events: tx,
                input: input.as_ref().map(|(_, t, _)| t.clone()),
            },
        );
        Ok(Call {
            id,
            events: rx,
            input: input.map(|(sid, _, r)| (sid, r)),
        })
    }

    /// Ends a call: later messages for it are ignored.
    pub fn finish(&self, id: u64) {
        let mut inner = lock(&self.inner);
        inner.router.finish_call(id);
        inner.sinks.remove(&id);
    }

    /// Relays Ctrl-C: `Signal Interrupt` now, `Signal Reset` before the next call.
    pub fn interrupt(&self) {
        self.interrupted.store(true, Ordering::SeqCst);
        let _ = self.send(&msg::signal("Interrupt"));
    }

    /// Calls in progress.
    pub fn active_calls(&self) -> usize {
        lock(&self.inner).sinks.len()
    }

    /// Says `Goodbye` and closes the plugin's stdin; kills its group if it has not exited
    /// after a grace period.
    pub fn goodbye(self: &Arc<Self>) {
        let _ = self.send(&msg::goodbye());
        lock(&self.stdin).take();
        let me = self.clone();
        let _ = std::thread::Builder::new()
            .name("nu-goodbye".into())
            .spawn(move || {
                let deadline = Instant::now() + GOODBYE_GRACE;
                while Instant::now() < deadline {
                    if me.exited.load(Ordering::SeqCst) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                eprintln!(
                    "nu bridge: {} did not exit after Goodbye; killing it",
                    me.name
                );
                kill_group(me.pgid);
            });
    }

    /// Kills the plugin's process group.
    pub fn kill(&self) {
        kill_group(self.pgid);
    }

    /// Marks the connection failed and tells every call.
    fn fail(&self, f: Failure) {
        let sinks: Vec<Sink> = {
            let mut inner = lock(&self.inner);
            if inner.dead.is_none() {
                inner.dead = Some(f.clone());
            }
            inner.sinks.drain().map(|(_, s)| s).collect()
        };
        for s in sinks {
            let _ = s.events.try_send(Event::Failed(f.reason.clone(), f.code));
            if let Some(i) = s.input {
                let _ = i.send(Event::Failed(f.reason.clone(), f.code));
            }
        }
        lock(&self.stdin).take();
    }
}

fn kill_group(pgid: i32) {
    // The plugin's own process group.
    if let Ok(pgid @ 2..) = u32::try_from(pgid) {
        ng_sys::signal::kill_group(pgid, libc::SIGKILL);
    }
}

/// Describes how the plugin ended and the exit code a session gets for it.
fn describe_exit(name: &str, status: Option<ExitStatus>) -> Failure {
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => Failure {
                reason: format!("{name} exited with status {c}"),
                code: 1,
            },
            (None, Some(sig)) => Failure {
                reason: format!("{name} was killed by signal {sig}"),
                code: 128 + sig,
            },
            _ => Failure::new(format!("{name} ended")),
        },
        None => Failure::new(format!("{name} closed its output")),
    }
}

/// The reader thread: preamble, then messages until the plugin's stdout ends.
fn reader(
    mut out: impl Read,
    mut child: Child,
    max: usize,
    name: &str,
    hs: Sender<Handshake>,
    conn_rx: Receiver<Arc<Conn>>,
) {
    let mut buf = vec![0u8; 256 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    // The preamble.
    let (encoding, used) = loop {
        match read_preamble(&pending) {
            Ok(Some(found)) => break found,
            Ok(None) => {}
            Err(e) => {
                let _ = hs.send(Handshake::Failed(Failure::new(format!("{name}: {e}"))));
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
        }
        match out.read(&mut buf) {
            Ok(0) | Err(_) => {
                let status = wait_briefly(&mut child);
                let mut f = describe_exit(name, status);
                f.reason = format!("{} before saying its encoding", f.reason);
                let _ = hs.send(Handshake::Failed(f));
                return;
            }
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
    };
    let _ = hs.send(Handshake::Encoding(encoding));
    let Ok(conn) = conn_rx.recv() else {
        let _ = child.kill();
        let _ = child.wait();
        return;
    };
    let mut decoder = Decoder::new(encoding, max);
    decoder.feed(&pending[used..]);
    let mut ready = false;
    let end: Failure = 'outer: loop {
        loop {
            let v = match decoder.next_message() {
                Ok(Some(v)) => v,
                Ok(None) => break,
                Err(e) => break 'outer Failure::new(format!("{name}: {e}")),
            };
            let routed = lock(&conn.inner).router.on_message(v);
            match routed {
                Routed::Ready => {
                    ready = true;
                    let _ = hs.send(Handshake::Ready);
                }
                Routed::ToCall(id, ev) => {
                    let inner = lock(&conn.inner);
                    if let Some(s) = inner.sinks.get(&id) {
                        if s.events.len() < CALL_QUEUE {
                            // An error only when the call has gone: nothing to tell it.
                            let _ = s.events.send(ev);
                        } else {
                            drop(inner);
                            break 'outer Failure::new(format!(
                                "{name} sent more than {CALL_QUEUE} messages to one call without waiting for acknowledgements"
                            ));
                        }
                    }
                }
                Routed::ToInput(id, ev) => {
                    let inner = lock(&conn.inner);
                    if let Some(Some(i)) = inner.sinks.get(&id).map(|s| s.input.as_ref()) {
                        let _ = i.send(ev);
                    }
                }
                Routed::Reply(r) => {
                    let _ = conn.send(&r);
                }
                Routed::GcDisabled(b) => conn.gc_disabled.store(b, Ordering::SeqCst),
                Routed::Ignore(_) => {}
                Routed::Fatal(why) => break 'outer Failure::new(format!("{name}: {why}")),
            }
        }
        match out.read(&mut buf) {
            Ok(0) => {
                let status = wait_briefly(&mut child);
                break describe_exit(name, status);
            }
            Ok(n) => decoder.feed(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Failure::new(format!("reading from {name}: {e}")),
        }
    };
    if !ready {
        let _ = hs.send(Handshake::Failed(end.clone()));
    }
    let stopped = lock(&conn.stdin).is_none() && conn.dead().is_none() && conn.active_calls() == 0;
    if !stopped {
        eprintln!("nu bridge: {}", end.reason);
    }
    conn.fail(end);
    kill_group(conn.pgid);
    let _ = child.wait();
    conn.exited.store(true, Ordering::SeqCst);
}

/// Waits up to two seconds for the plugin to exit after its output closed; kills it
/// after that.
fn wait_briefly(child: &mut Child) -> Option<ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                return child.wait().ok();
            }
        }
    }
}

/// The plugin's restart policy, as Nu has it: a dead or unstartable plugin is started again
/// by the next call that needs it, at once, however often it fails.
fn restart_policy() -> RestartPolicy {
    RestartPolicy::new(Backoff::Immediate, GiveUp::Never)
}

/// Tells `policy` the plugin failed; the failure a call ends with if the policy gives up.
/// The bridge's policy neither waits nor gives up.
fn restart_refused(policy: &mut RestartPolicy) -> Option<Failure> {
    match policy.on_failure(Instant::now()) {
        Decision::RestartAfter(_) => None,
        Decision::GiveUp { failures } => Some(Failure::new(format!(
            "the plugin failed {failures} times in a row; not starting it again"
        ))),
    }
}

/// When an idle plugin is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gc {
    /// After this long without calls.
    After(Duration),
    /// Never.
    Never,
}

#[derive(Debug)]
struct MState {
    conn: Option<Arc<Conn>>,
    /// Counts the plugin's deaths and failed starts; see [`restart_policy`].
    restart: RestartPolicy,
    active: usize,
    last_used: Instant,
    starting: bool,
    stopping: bool,
}

/// Keeps one plugin process warm: starts it on demand, restarts it after a crash, stops
/// it after the GC period.
#[derive(Debug)]
pub struct Manager {
    spec: Spec,
    gc: Gc,
    state: Mutex<MState>,
    changed: Condvar,
}

impl Manager {
    /// A manager, optionally with an already started connection.
    pub fn new(spec: Spec, gc: Gc, conn: Option<Arc<Conn>>) -> Arc<Self> {
        let m = Arc::new(Self {
            spec,
            gc,
            state: Mutex::new(MState {
                conn,
                restart: restart_policy(),
                active: 0,
                last_used: Instant::now(),
                starting: false,
                stopping: false,
            }),
            changed: Condvar::new(),
        });
        let weak = Arc::downgrade(&m);
        let _ = std::thread::Builder::new()
            .name("nu-gc".into())
            .spawn(move || gc_loop(&weak));
        m
    }

    /// The plugin's spec.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// A live connection for one call (starting the plugin if needed); pair with
    /// [`Manager::release`].
    pub fn acquire(&self) -> Result<Arc<Conn>, Failure> {
        let mut st = lock(&self.state);
        loop {
            if let Some(c) = &st.conn {
                if c.dead().is_none() {
                    let c = c.clone();
                    st.active += 1;
                    return Ok(c);
                }
                st.conn = None;
                if let Some(failure) = restart_refused(&mut st.restart) {
                    return Err(failure);
                }
            }
            if !st.starting {
                break;
            }
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.starting = true;
        drop(st);
        let started = Conn::spawn(&self.spec);
        let mut st = lock(&self.state);
        st.starting = false;
        self.changed.notify_all();
        let c = match started {
            Ok(c) => c,
            Err(failure) => {
                let _ = restart_refused(&mut st.restart);
                return Err(failure);
            }
        };
        st.restart.on_success();
        st.conn = Some(c.clone());
        st.active += 1;
        Ok(c)
    }

    /// A call finished. The GC thread is not woken for it: it checks again by itself
    /// (at the latest a second later) and a later `last_used` only postpones a stop.
    pub fn release(&self) {
        let mut st = lock(&self.state);
        st.active = st.active.saturating_sub(1);
        st.last_used = Instant::now();
    }

    /// Whether a plugin process is running now.
    pub fn running(&self) -> bool {
        lock(&self.state)
            .conn
            .as_ref()
            .is_some_and(|c| c.dead().is_none())
    }

    /// Stops the plugin (`Goodbye`) and the GC thread.
    pub fn stop(&self) {
        let mut st = lock(&self.state);
        st.stopping = true;
        if let Some(c) = st.conn.take() {
            c.goodbye();
        }
        self.changed.notify_all();
    }
}

fn gc_loop(weak: &std::sync::Weak<Manager>) {
    loop {
        let Some(m) = weak.upgrade() else { return };
        let mut st = lock(&m.state);
        if st.stopping {
            return;
        }
        let idle_conn = st
            .conn
            .as_ref()
            .filter(|c| st.active == 0 && c.dead().is_none() && !c.gc_disabled())
            .cloned();
        let wait = match (m.gc, idle_conn) {
            (Gc::After(after), Some(c)) => {
                let idle = st.last_used.elapsed();
                if idle >= after {
                    st.conn = None;
                    drop(st);
                    c.goodbye();
                    continue;
                }
                after - idle
            }
            // Busy (or never collected): look again soon, at most a second from now.
            (Gc::After(after), None) => {
                after.clamp(Duration::from_millis(50), Duration::from_secs(1))
            }
            (Gc::Never, _) => Duration::from_secs(1),
        };
        let _unused = m
            .changed
            .wait_timeout(st, wait)
            .unwrap_or_else(|p| p.into_inner());
    }
}
