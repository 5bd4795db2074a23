//! Giving freed heap memory back to the kernel once the server goes quiet.
//!
//! `ngd` uses the system allocator. With glibc, memory a burst of sessions freed (a header
//! of 100 000 arguments, sixteen of them at once, say) stays resident whenever a live block
//! sits above it in the heap: a heap's top can only shrink down to its highest live block,
//! and each command thread allocates from an arena of its own. A long-lived daemon should
//! not keep the high-water mark of its worst minute forever, so once no connection has
//! been open for [`QUIET_AFTER`] (and at least one closed since the last time), the event
//! loop calls [`release_free_memory`], which asks glibc (`malloc_trim`) to return every
//! whole free page of every arena. That costs about a millisecond after a burst that left
//! many holes and a few microseconds otherwise, and happens only while nothing runs.
//! With other C libraries it does nothing.

use std::time::Duration;

/// How long the server must have had no connection before free memory is released.
pub const QUIET_AFTER: Duration = Duration::from_secs(1);

/// Returns whole free pages of every heap arena to the kernel; true if any was returned.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() -> bool {
    crate::sys::malloc_trim()
}

/// Returns whole free pages of every heap arena to the kernel; true if any was returned.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident pages of this process, from `/proc/self/statm`.
    fn resident_pages() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        statm.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn holes_below_a_live_block_are_given_back() {
        // Run on a thread of its own so that its arena is not shared with other tests.
        std::thread::spawn(|| {
            let page = 4096;
            // 8 MiB in 2 KiB blocks, then a live block above them all; the blocks are freed.
            let mut blocks: Vec<Vec<u8>> = (0..4096).map(|i| vec![i as u8; 2048]).collect();
            let pin = vec![1u8; 2048];
            blocks.truncate(0);
            blocks.shrink_to_fit();
            let before = resident_pages();
            assert!(release_free_memory(), "nothing was given back");
            let after = resident_pages();
            assert!(
                before.saturating_sub(after) * page >= 4 << 20,
                "resident pages {before} -> {after}"
            );
            drop(pin);
        })
        .join()
        .unwrap();
    }
}
