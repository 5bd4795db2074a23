//! Clients that mishandle the server's output: reset it mid-stream, never read it, or keep
//! sending after `X`.

use std::io::{self, Write as _};
use std::thread;
use std::time::{Duration, Instant};

use ng_testkit::{frame, frames, procfs, Stream};

use crate::hostile::attempt::{zeros, Attempt};
use crate::hostile::kind::{sit_time, FINISHED_OUTPUT};
use crate::hostile::response::{classify, read_response, End, ReadOpts, Seen};
use crate::hostile::{Kind, Outcome};

/// Connects and sends `request`, or says why not.
fn connect_and_send(a: &Attempt<'_>, request: &[u8]) -> Result<Stream, Seen> {
    let mut s = a.connect()?;
    match s.write_all(request) {
        Ok(()) => Ok(s),
        Err(e) => Err(Seen::now(Outcome::Closed, format!("write: {e}"))),
    }
}

/// `rst-mid-output`: `ng-yes 1G`, read 1 MiB, close with a reset.
pub(in crate::hostile) fn rst_mid_output(a: &Attempt<'_>) -> Seen {
    let mut s = match connect_and_send(a, &frames(&[(b'A', b"1G"), (b'C', b"ng-yes")])) {
        Ok(s) => s,
        Err(seen) => return seen,
    };
    let r = read_response(
        &mut s,
        ReadOpts {
            stop_after: Some(1 << 20),
            keep_stdout: 0,
            ..a.opts()
        },
    );
    s.set_linger_zero();
    drop(s);
    classify(&r)
}

/// Whether the server has closed its end of `s`, seen without reading from `s`.
///
/// A Unix socket reports `POLLHUP` once its peer is closed, however much unread data it
/// holds. A TCP peer's close queues its FIN behind the unsent data, so for TCP the server's
/// side is looked up instead: its socket (local = the server's address, remote = ours)
/// must still be one of the server's descriptors.
fn server_closed(s: &Stream, pid: u32) -> Result<bool, String> {
    match s {
        Stream::Unix(_) => Ok(s.peer_hung_up()),
        Stream::Tcp(t) => {
            let ours = t.local_addr().map_err(|e| format!("local_addr: {e}"))?;
            let theirs = t.peer_addr().map_err(|e| format!("peer_addr: {e}"))?;
            procfs::holds_tcp(pid, theirs, ours).map(|held| !held)
        }
    }
}

/// `never-reads`, `never-reads-finished`: `ng-yes` (1 GiB, or just under the output mark
/// so that the command finishes with its output still queued), then never read or send;
/// the server must close its end at the heartbeat timeout.
pub(in crate::hostile) fn never_reads(a: &Attempt<'_>) -> Seen {
    let size = if a.kind == Kind::NeverReads {
        "1G".to_string()
    } else {
        // Under the output mark, so the command finishes without ever waiting and the
        // rest of its output stays queued in the server.
        format!("{}", FINISHED_OUTPUT)
    };
    let mut s = match a.connect() {
        Ok(s) => s,
        Err(seen) => return seen,
    };
    // A small receive buffer, so the output stays queued in the server rather than in the
    // kernel.
    s.set_recv_buffer(4096);
    if let Err(e) = s.write_all(&frames(&[(b'A', size.as_bytes()), (b'C', b"ng-yes")])) {
        return Seen::now(Outcome::Closed, format!("write: {e}"));
    }
    // Never read: watch the server's side of the connection instead.
    let sit_until = a.started + sit_time(a.limits, a.plan);
    loop {
        match server_closed(&s, a.pid) {
            Ok(true) => {
                s.set_linger_zero();
                return Seen::now(Outcome::Closed, "the server closed its end");
            }
            Ok(false) => {}
            Err(e) => return Seen::now(Outcome::Broken, e),
        }
        if Instant::now() >= sit_until {
            s.set_linger_zero();
            return Seen::now(
                Outcome::Hung,
                format!(
                    "the server still holds the connection {:.1?} after the client went \
                     silent without reading (heartbeat timeout {:?})",
                    a.started.elapsed(),
                    a.limits.heartbeat_timeout
                ),
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// `never-reads-alive`: `ng-yes 1G`, a heartbeat every 200 ms, never read; give up after
/// the heartbeat timeout and the slack.
pub(in crate::hostile) fn never_reads_alive(a: &Attempt<'_>) -> Seen {
    let mut s = match a.connect() {
        Ok(s) => s,
        Err(seen) => return seen,
    };
    s.set_recv_buffer(4096);
    if let Err(e) = s.write_all(&frames(&[(b'A', b"1G"), (b'C', b"ng-yes")])) {
        return Seen::now(Outcome::Closed, format!("write: {e}"));
    }
    let until = Instant::now() + sit_time(a.limits, a.plan);
    let mut sent = 0;
    while Instant::now() < until && sent < 10_000 {
        thread::sleep(Duration::from_millis(200));
        if let Err(e) = s.write_all(&frame(b'H', b"")) {
            return Seen::now(Outcome::Closed, format!("heartbeat: {e}"));
        }
        sent += 1;
    }
    s.set_linger_zero();
    drop(s);
    Seen::now(Outcome::Dropped, format!("gave up after {sent} heartbeats"))
}

/// `junk-after-exit`: `C ng-true`, read its `X 0`, then junk at full speed or heartbeats;
/// the server must close within its drain.
pub(in crate::hostile) fn junk_after_exit(a: &Attempt<'_>) -> Seen {
    let mut s = match connect_and_send(a, &frame(b'C', b"ng-true")) {
        Ok(s) => s,
        Err(seen) => return seen,
    };
    let r = read_response(&mut s, a.opts());
    if !matches!(r.end, End::Exit(0)) {
        let seen = classify(&r);
        return Seen::now(
            Outcome::Broken,
            format!(
                "ng-true did not answer X 0: {} {}",
                seen.outcome, seen.detail
            ),
        );
    }
    let _ = s.set_write_timeout(Duration::from_millis(500));
    let junk = zeros(1 << 16);
    let h = frame(b'H', b"");
    let mut writes = 0u64;
    while Instant::now() < a.deadline && writes < 1_000_000 {
        let result = if a.index % 2 == 0 {
            s.write_all(junk)
        } else {
            thread::sleep(Duration::from_millis(100));
            s.write_all(&h)
        };
        writes += 1;
        match result {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Seen::now(Outcome::Closed, format!("write {writes}: {e}")),
        }
    }
    Seen::now(
        Outcome::Hung,
        format!(
            "the server still took input {:?} after X",
            a.deadline - a.started
        ),
    )
}
