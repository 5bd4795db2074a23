//! What `/proc` says of other processes' trees and memory (Linux; empty answers elsewhere).
//! Plain file reads, no raw calls: here so that every reading of another process's state
//! is in one place. Reading `smaps_rollup` walks the process's page tables (milliseconds
//! for a large interpreter), so callers do it off the event loop ([`crate::plugin::footprint`]).

/// The executable a process runs (`/proc/PID/exe`); `None` if it is gone, not ours to
/// read, or its file was deleted or replaced since it started.
pub fn exe_of(pid: u32) -> Option<std::path::PathBuf> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let deleted = exe.as_os_str().as_encoded_bytes().ends_with(b" (deleted)");
    (exe.is_absolute() && !deleted).then_some(exe)
}

/// The most processes [`descendants`] returns: a fork bomb under a worker does not make the
/// walk unbounded.
pub const MAX_DESCENDANTS: usize = 4096;

/// The pids of `pid`'s descendants (children, their children, ...), from every thread's
/// `/proc/PID/task/TID/children`; at most [`MAX_DESCENDANTS`]. Processes that exit during
/// the walk are simply missing.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut next = 0;
    let mut parent = pid;
    loop {
        for child in children_of(parent) {
            if found.len() >= MAX_DESCENDANTS {
                return found;
            }
            if child != pid && !found.contains(&child) {
                found.push(child);
            }
        }
        let Some(&p) = found.get(next) else {
            return found;
        };
        parent = p;
        next += 1;
    }
}

/// The direct children of `pid`, over all its threads (unsorted; empty if it is gone).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    pids
}

/// A process's proportional set size in bytes (`Pss:` of `/proc/PID/smaps_rollup`): its
/// private pages, plus each page it shares with others divided by their number, so that
/// the PSS of a zygote and its forked children add up to what they hold together.
pub fn pss_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Pss:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn descendants_reach_grandchildren() {
        let mut sh = Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = sh.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            seen = descendants(pid);
            if seen.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = Command::new("pkill")
            .args(["-P", &pid.to_string()])
            .status();
        let _ = sh.kill();
        let _ = sh.wait();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(!seen.contains(&pid));
        assert!(descendants(u32::MAX).is_empty());
    }

    #[test]
    fn pss_of_this_process_is_some_and_of_no_process_none() {
        let pss = pss_bytes(std::process::id()).unwrap();
        assert!(pss > 0);
        assert_eq!(pss_bytes(u32::MAX), None);
    }
}
