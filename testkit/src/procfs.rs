//! What `/proc` says about a process, and signals to one.
//!
//! Tests use these to watch a server under test from outside: whether it (and every
//! process it started) is still there, its descriptors, resident memory, threads and CPU
//! time, its environment, and whether it still holds a given TCP connection. Readings
//! return `None` (or an error) once the process is gone; none of them panics.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// One process, from `/proc/<pid>/stat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proc {
    /// Process id.
    pub pid: u32,
    /// Parent's pid.
    pub ppid: u32,
    /// Process group.
    pub pgrp: u32,
    /// Session.
    pub sid: u32,
    /// `R`, `S`, `Z`...
    pub state: char,
    /// Start time in clock ticks since boot.
    pub start: u64,
    /// The command line, or `[comm]`.
    pub cmdline: String,
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces and
/// `)`): index 0 is the state, 1 the parent's pid, 11 and 12 utime and stime, 19 the
/// start time.
fn stat_fields(pid: u32) -> Option<(String, Vec<String>)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_string();
    let rest = stat[close + 1..]
        .split_whitespace()
        .map(str::to_string)
        .collect();
    Some((comm, rest))
}

/// `/proc/<pid>/stat` of one process, if it exists.
pub fn proc_info(pid: u32) -> Option<Proc> {
    let (comm, rest) = stat_fields(pid)?;
    let field = |i: usize| rest.get(i).and_then(|v| v.parse::<u64>().ok());
    let id = |i: usize| field(i).and_then(|v| u32::try_from(v).ok());
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .trim_end_matches('\0')
                .replace('\0', " ")
        })
        .unwrap_or_default();
    Some(Proc {
        pid,
        state: rest.first()?.chars().next()?,
        ppid: id(1)?,
        pgrp: id(2)?,
        sid: id(3)?,
        start: field(19)?,
        cmdline: if cmdline.is_empty() {
            format!("[{comm}]")
        } else {
            cmdline
        },
    })
}

/// Every process now.
pub fn all_processes() -> Vec<Proc> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(proc_info)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether process `pid` exists (zombies included).
pub fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether process `pid` exists and is neither a zombie nor dead.
pub fn running(pid: u32) -> bool {
    proc_info(pid).is_some_and(|p| p.state != 'Z' && p.state != 'X')
}

/// Waits until process `pid` is gone entirely (reaped), for at most `timeout`.
pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while exists(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Whether `pid` descends from `ancestor` (a child, grandchild...), by `parents`
/// (pid → parent pid); at most 64 generations are followed.
pub fn descends_from(parents: &BTreeMap<u32, u32>, pid: u32, ancestor: u32) -> bool {
    let mut pid = pid;
    for _ in 0..64 {
        match parents.get(&pid) {
            Some(&parent) if parent == ancestor => return true,
            Some(&parent) if parent > 1 => pid = parent,
            _ => return false,
        }
    }
    false
}

/// Every process that descends from `ancestor` and still exists.
pub fn descendants(ancestor: u32) -> Vec<Proc> {
    let all = all_processes();
    let parents: BTreeMap<u32, u32> = all.iter().map(|p| (p.pid, p.ppid)).collect();
    all.into_iter()
        .filter(|p| descends_from(&parents, p.pid, ancestor))
        .collect()
}

/// One line per process, for messages.
pub fn describe(procs: &[Proc]) -> String {
    if procs.is_empty() {
        return "  (none)".to_string();
    }
    procs
        .iter()
        .map(|p| {
            format!(
                "  pid {} ppid {} pgrp {} sid {} state {} {}",
                p.pid, p.ppid, p.pgrp, p.sid, p.state, p.cmdline
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `pid`'s environment holds exactly the entry `entry` (`NAME=value`).
pub fn environ_has(pid: u32, entry: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|e| e == entry.as_bytes()))
}

/// The first number of the line `name:` of `/proc/<pid>/status`.
fn status_number(pid: u32, name: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The resident set size in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_number(pid, "VmRSS")
}

/// The number of threads.
pub fn threads(pid: u32) -> Option<u64> {
    status_number(pid, "Threads")
}

/// CPU time so far (user + system) in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let (_, rest) = stat_fields(pid)?;
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`_SC_CLK_TCK`).
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).unwrap_or(100).max(1)
}

/// CPU time so far (user + system).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    Some(Duration::from_millis(
        cpu_ticks(pid)? * 1000 / ticks_per_second(),
    ))
}

/// The number of entries in `/proc/<pid>/fd`.
pub fn fd_count(pid: u32) -> io::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// `fd -> target` lines for `/proc/<pid>/fd`, for failure messages.
pub fn fd_listing(pid: u32) -> String {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return format!("(cannot read /proc/{pid}/fd)");
    };
    let mut lines: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| {
            let target = std::fs::read_link(e.path())
                .map(|t| t.display().to_string())
                .unwrap_or_else(|e| format!("? ({e})"));
            format!("  {} -> {target}", e.file_name().to_string_lossy())
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// Whether process `pid` still holds the TCP socket whose local end is `local` and whose
/// remote end is `remote` (a server's side of a connection: local = the server's address):
/// the socket's inode, from `/proc/net/tcp{,6}`, among `/proc/<pid>/fd`. `false` once the
/// socket is gone from the table or no longer one of the process's descriptors.
pub fn holds_tcp(pid: u32, local: SocketAddr, remote: SocketAddr) -> Result<bool, String> {
    let file = if local.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let (local, remote) = (proc_net_hex(&local), proc_net_hex(&remote));
    let table = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let inode = table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&local.as_str()) && f.get(2) == Some(&remote.as_str()))
            .then(|| f.get(9).map(|i| i.to_string()))
            .flatten()
    });
    let Some(inode) = inode.filter(|i| i != "0") else {
        return Ok(false);
    };
    let link = format!("socket:[{inode}]");
    let held = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map_err(|e| format!("/proc/{pid}/fd: {e}"))?
        .filter_map(Result::ok)
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == link.as_str()));
    Ok(held)
}

/// An address as `/proc/net/tcp{,6}` writes it: the address's 32-bit words in host order,
/// in hex, then the port.
fn proc_net_hex(addr: &SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match addr.ip() {
        IpAddr::V4(ip) => vec![ip.octets()],
        IpAddr::V6(ip) => ip
            .octets()
            .chunks(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
    };
    let mut out: String = words
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
    let _ = write!(out, ":{:04X}", addr.port());
    out
}

/// Samples the RSS of `pid` every 10 ms on a thread until [`RssProbe::stop`].
#[derive(Debug)]
pub struct RssProbe {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<u64>>,
}

impl RssProbe {
    /// Starts sampling.
    pub fn start(pid: u32) -> RssProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            let mut max = 0;
            while !flag.load(Ordering::Relaxed) {
                max = max.max(rss_kib(pid).unwrap_or(0));
                thread::sleep(Duration::from_millis(10));
            }
            max.max(rss_kib(pid).unwrap_or(0))
        });
        RssProbe {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the largest RSS seen, in KiB.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap_or(0))
    }
}

impl Drop for RssProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Sends `signal` to process `pid`; panics on a pid that would signal a group.
pub fn send_signal(pid: u32, signal: i32) {
    let pid = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
    assert!(pid > 0, "refusing to signal pid {pid}");
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener, TcpStream};

    #[test]
    fn this_process_reads_back() {
        let me = std::process::id();
        let p = proc_info(me).unwrap();
        assert_eq!(p.pid, me);
        assert!(running(me));
        assert!(rss_kib(me).unwrap() > 0);
        assert!(threads(me).unwrap() >= 1);
        assert!(cpu_ticks(me).is_some());
        assert!(fd_count(me).unwrap() >= 3);
        assert!(all_processes().iter().any(|q| q.pid == me));
        assert!(!exists(u32::MAX));
    }

    #[test]
    fn a_held_tcp_socket_is_found() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let (local, remote) = (server.local_addr().unwrap(), client.local_addr().unwrap());
        assert_eq!(holds_tcp(std::process::id(), local, remote), Ok(true));
        drop(server);
        assert_eq!(holds_tcp(std::process::id(), local, remote), Ok(false));
    }

    #[test]
    fn descent_is_followed_through_generations() {
        let parents = BTreeMap::from([(10, 5), (11, 10), (12, 1)]);
        assert!(descends_from(&parents, 11, 5));
        assert!(!descends_from(&parents, 12, 5));
    }
}
