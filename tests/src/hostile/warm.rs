//! Before and between attacks: `ng-true` as a probe, and the warm-up that sets the
//! baseline (see the module docs of [`hostile`](super)).

use std::io::Write as _;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use ng_testkit::{frame, frames, procfs, Address, Stream};

use super::attempt::payloads;
use super::response::{classify, read_response, End, ReadOpts};
use super::Plan;
use super::Target;

/// Runs `ng-true` with a bare client; the time from connect to `X 0`.
pub fn probe(address: &Address, timeout: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let mut s = Stream::connect_timeout(address, timeout).map_err(|e| format!("connect: {e}"))?;
    s.write_all(&frames(&[(b'D', b"/"), (b'C', b"ng-true")]))
        .map_err(|e| format!("write: {e}"))?;
    let r = read_response(
        &mut s,
        ReadOpts {
            deadline: started + timeout,
            keep_stdout: 4096,
            stop_after: None,
        },
    );
    match r.end {
        End::Exit(0) if r.stderr.is_empty() && r.stdout.is_empty() => Ok(started.elapsed()),
        _ => {
            let seen = classify(&r);
            Err(format!("{}: {}", seen.outcome, seen.detail))
        }
    }
}

/// What the warm-up left: the idle server's descriptors and RSS.
#[derive(Clone, Copy, Debug)]
pub struct Baseline {
    /// Descriptors.
    pub fds: usize,
    /// `VmRSS` in KiB.
    pub rss_kib: u64,
}

/// Runs every legitimate path `concurrency` wide a few times (see the module docs), waits
/// until the server is idle, and returns its vital signs.
pub fn warm_up(target: &Target, plan: &Plan) -> Result<Baseline, String> {
    let failures = Mutex::new(Vec::new());
    for round in 0..3 {
        thread::scope(|scope| {
            for i in 0..plan.concurrency.max(1) {
                let address = &target.addresses[(i + round) % target.addresses.len()];
                let failures = &failures;
                scope.spawn(move || {
                    if let Err(e) = warm_one(address, i + round) {
                        failures.lock().unwrap().push(format!("{address}: {e}"));
                    }
                });
            }
        });
    }
    let failures = failures.into_inner().unwrap();
    if !failures.is_empty() {
        return Err(format!("warm-up failed:\n{}", failures.join("\n")));
    }
    let deadline = Instant::now() + plan.settle;
    let mut last = (usize::MAX, 0);
    loop {
        let fds = procfs::fd_count(target.pid).map_err(|_| "the server is gone")?;
        let rss = procfs::rss_kib(target.pid).ok_or("the server is gone")?;
        let idle = cpu_idle(target.pid);
        if idle && (fds, rss) == last {
            return Ok(Baseline { fds, rss_kib: rss });
        }
        if Instant::now() > deadline {
            return Ok(Baseline { fds, rss_kib: rss });
        }
        last = (fds, rss);
    }
}

fn warm_one(address: &Address, i: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let opts = ReadOpts {
        deadline,
        keep_stdout: 1 << 20,
        stop_after: None,
    };
    probe(address, Duration::from_secs(10))?;
    // A big header: 100 000 arguments. With the short limits it must arrive whole within
    // the header timeout (1 s), which a machine busy with other tests can miss; the
    // warm-up only has to have run this path, so a header the server timed out is sent
    // again (the attacks themselves are judged without retries).
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut s =
            Stream::connect_timeout(address, Duration::from_secs(5)).map_err(|e| e.to_string())?;
        let mut writer = s.try_clone().map_err(|e| e.to_string())?;
        let r = thread::scope(|scope| {
            scope.spawn(move || {
                let _ = writer.write_all(&payloads().args_100k);
                let _ = writer.write_all(&frame(b'C', b"ng-true"));
            });
            read_response(&mut s, opts)
        });
        match r.end {
            End::Exit(0) => break,
            End::Exit(ng_server::exit_codes::PROTOCOL) if attempts < 5 => continue,
            end => return Err(format!("100 000 arguments (attempt {attempts}): {end:?}")),
        }
    }
    // ng-cat: 200 KiB through, stdin sent eagerly, read back in parallel.
    let data = crate::data::binary(200 << 10);
    let mut s =
        Stream::connect_timeout(address, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let mut writer = s.try_clone().map_err(|e| e.to_string())?;
    let echoed = thread::scope(|scope| {
        scope.spawn(|| {
            let _ = writer.write_all(&frame(b'C', b"ng-cat"));
            for piece in data.chunks(2048) {
                if writer.write_all(&frame(b'0', piece)).is_err() {
                    return;
                }
            }
            let _ = writer.write_all(&frame(b'.', b""));
        });
        read_response(&mut s, opts)
    });
    if !matches!(echoed.end, End::Exit(0)) || echoed.stdout != data {
        return Err(format!(
            "ng-cat: {:?}, {} of {} bytes back",
            echoed.end,
            echoed.stdout_len,
            data.len()
        ));
    }
    drop(s);
    // ng-yes read in full, and ng-yes cut off.
    let size: &[u8] = if i % 2 == 0 { b"16M" } else { b"3M" };
    let mut s =
        Stream::connect_timeout(address, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.write_all(&frames(&[(b'A', size), (b'C', b"ng-yes")]))
        .map_err(|e| e.to_string())?;
    let r = read_response(
        &mut s,
        ReadOpts {
            keep_stdout: 0,
            ..opts
        },
    );
    if !matches!(r.end, End::Exit(0)) {
        return Err(format!("ng-yes: {:?}", r.end));
    }
    drop(s);
    let mut s =
        Stream::connect_timeout(address, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.write_all(&frames(&[(b'A', b"1G"), (b'C', b"ng-yes")]))
        .map_err(|e| e.to_string())?;
    let _ = read_response(
        &mut s,
        ReadOpts {
            keep_stdout: 0,
            stop_after: Some(2 << 20),
            ..opts
        },
    );
    s.set_linger_zero();
    drop(s);
    Ok(())
}

/// True if the server used at most a fifth of a core over the next 250 ms.
pub(super) fn cpu_idle(pid: u32) -> bool {
    let window = Duration::from_millis(250);
    let before = procfs::cpu_ticks(pid);
    thread::sleep(window);
    let after = procfs::cpu_ticks(pid);
    let hz = procfs::ticks_per_second();
    match (before, after) {
        (Some(b), Some(a)) => (a - b) * 1000 / hz <= window.as_millis() as u64 / 5,
        _ => false,
    }
}
