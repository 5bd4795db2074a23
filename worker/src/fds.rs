//! The client's descriptors (`docs/ngw.md` §15.4): reading the channel with `recvmsg`,
//! deciding which session a batch of passed descriptors belongs to, and the
//! [`ClientFds`] a session gets when it takes them.
//!
//! ngd sends a session's header (with `mux`, the `s` chunk before it and the header) in one
//! `sendmsg` whose `SCM_RIGHTS` message rides on its first byte. On a Unix stream socket
//! the kernel hands the descriptors to the read that returns the first byte of that
//! message, and ends that read with the message, so the descriptors of a read belong to
//! the **last** session start (`s`, or on a plain channel the first chunk of a header)
//! that begins inside the bytes of that read. [`Batches`] applies that rule on stream
//! offsets: a session start inside a batch's range claims it (a later one in the same
//! range takes it over), the claimed header's `C` takes it when no byte of the range
//! follows the `C` (otherwise the header was an earlier one sharing the read), and a
//! batch nobody claimed by the end of its range is closed.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// The most descriptors one read may bring (the three of the client); more are closed and
/// the read reported truncated.
const MAX_FDS: usize = 3;

pub(crate) use ng_sys::scm::Received;

/// Reads from `fd` into `buf` with `recvmsg`, collecting the descriptors passed with the
/// bytes (close-on-exec).
pub(crate) fn recv_with_fds(fd: RawFd, buf: &mut [u8]) -> io::Result<Received> {
    ng_sys::scm::recv_with_fds(fd, buf, MAX_FDS)
}

/// Descriptors that arrived with one read, waiting for the session they belong to.
#[derive(Debug)]
struct Batch {
    /// Stream offset of the read's first byte.
    start: u64,
    /// Stream offset just past the read's last byte.
    end: u64,
    fds: Vec<OwnedFd>,
    /// The session whose start claimed the batch (its id on the channel).
    owner: Option<u64>,
}

/// The batches of descriptors not yet given to a session or closed.
#[derive(Debug, Default)]
pub(crate) struct Batches {
    pending: VecDeque<Batch>,
}

/// At most this many batches wait at once; older ones are closed (ngd sends one per
/// header, and a header is read long before the next one's descriptors).
const MAX_PENDING: usize = 4;

impl Batches {
    /// Descriptors arrived with the bytes at stream offsets `start..end`.
    pub(crate) fn arrived(&mut self, start: u64, end: u64, fds: Vec<OwnedFd>) {
        if fds.is_empty() {
            return;
        }
        if start >= end {
            // Descriptors with no byte: nothing to attach them to.
            return;
        }
        while self.pending.len() >= MAX_PENDING {
            self.pending.pop_front();
        }
        self.pending.push_back(Batch {
            start,
            end,
            fds,
            owner: None,
        });
    }

    /// A chunk starts at stream offset `at`; `starts_session` names the session it starts
    /// (an `s`, or a plain channel's first header chunk), if it starts one. `pending`
    /// says whether a session's header is still being received. Batches whose range ended
    /// before `at` without an owner still receiving its header are closed.
    pub(crate) fn chunk_at(
        &mut self,
        at: u64,
        starts_session: Option<u64>,
        pending: impl Fn(u64) -> bool,
    ) {
        self.pending
            .retain(|b| at < b.end || b.owner.is_some_and(&pending));
        if let Some(id) = starts_session {
            for b in &mut self.pending {
                if (b.start..b.end).contains(&at) {
                    b.owner = Some(id);
                }
            }
        }
    }

    /// Session `id`'s header ended with a `C` whose last byte is just before stream offset
    /// `end`: the descriptors its start claimed, if no byte of their read follows.
    pub(crate) fn header_done(&mut self, id: u64, end: u64) -> Option<Vec<OwnedFd>> {
        let i = self.pending.iter().position(|b| b.owner == Some(id))?;
        if end < self.pending[i].end {
            // More of the read follows this header: the descriptors came with a later
            // session start in it.
            self.pending[i].owner = None;
            return None;
        }
        self.pending.remove(i).map(|b| b.fds)
    }

    /// How many descriptors are waiting (tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.pending.iter().map(|b| b.fds.len()).sum()
    }
}

/// The client's descriptors a session took: its command's fds 0, 1 and 2 (an entry is
/// `None` when the client's descriptor was closed, so the command's stays closed too).
#[derive(Debug, Default)]
pub struct ClientFds {
    fds: [Option<OwnedFd>; 3],
}

impl ClientFds {
    pub(crate) fn new(fds: [Option<OwnedFd>; 3]) -> Self {
        Self { fds }
    }

    /// The descriptor for the command's fd `n` (0, 1, 2).
    pub fn get(&self, n: usize) -> Option<BorrowedFd<'_>> {
        self.fds.get(n)?.as_ref().map(AsFd::as_fd)
    }

    /// Takes the descriptor for fd `n` out.
    pub fn take(&mut self, n: usize) -> Option<OwnedFd> {
        self.fds.get_mut(n)?.take()
    }

    /// A new descriptor for fd `n` (`dup`), leaving this one in place.
    pub fn dup(&self, n: usize) -> Option<io::Result<OwnedFd>> {
        self.get(n).map(|fd| fd.try_clone_to_owned())
    }

    /// Whether fd `n` is open and a terminal.
    pub fn is_tty(&self, n: usize) -> bool {
        self.get(n)
            .is_some_and(|fd| ng_sys::fd::is_tty(fd.as_raw_fd()))
    }

    /// The three descriptors, for fds 0, 1, 2.
    pub fn into_array(self) -> [Option<OwnedFd>; 3] {
        self.fds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fds(n: usize) -> Vec<OwnedFd> {
        (0..n)
            .map(|_| std::fs::File::open("/dev/null").unwrap().into())
            .collect()
    }

    #[test]
    fn the_last_session_start_of_the_read_takes_the_batch() {
        let mut b = Batches::default();
        b.arrived(100, 200, fds(3));
        // An earlier header shares the read: its `C` ends before the read does.
        b.chunk_at(100, Some(5), |_| true);
        assert!(b.header_done(5, 150).is_none());
        b.chunk_at(150, Some(6), |_| true);
        b.chunk_at(160, None, |_| true);
        assert_eq!(b.header_done(6, 200).map(|f| f.len()), Some(3));
        assert_eq!(b.waiting(), 0);
    }

    #[test]
    fn a_header_longer_than_its_read_keeps_its_claim() {
        let mut b = Batches::default();
        b.arrived(0, 10, fds(2));
        b.chunk_at(0, Some(1), |_| true);
        b.chunk_at(40, None, |id| id == 1);
        assert_eq!(b.header_done(1, 400).map(|f| f.len()), Some(2));
    }

    #[test]
    fn unclaimed_batches_are_closed_when_their_range_is_past() {
        let mut b = Batches::default();
        b.arrived(0, 10, fds(3));
        b.chunk_at(0, None, |_| true);
        assert_eq!(b.waiting(), 3);
        b.chunk_at(10, None, |_| true);
        assert_eq!(b.waiting(), 0);
        // A claim by a session whose header is no longer pending ends too.
        b.arrived(20, 30, fds(1));
        b.chunk_at(20, Some(9), |_| true);
        b.chunk_at(30, None, |_| false);
        assert_eq!(b.waiting(), 0);
    }
}
