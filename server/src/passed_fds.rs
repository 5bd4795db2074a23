//! The client's own descriptors, passed with its header (`SCM_RIGHTS`, the `fds`
//! extension of docs/protocol.md): held from the read that carried them until a command
//! takes them or the session goes on without them (then they are closed).

use ng_proto::ext::FdMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The descriptors one client passed, with the map saying which of its fds 0, 1, 2 each is.
#[derive(Debug)]
pub struct PassedFds {
    map: FdMap,
    fds: Vec<OwnedFd>,
    /// With `ctty`: the slave of the client's pseudo-terminal and which of its fds it
    /// stands for (`NGD_CLIENT_PTY`).
    pty: Option<(FdMap, OwnedFd)>,
}

impl PassedFds {
    /// Pairs the descriptors read from a connection with the client's map; `None` (and the
    /// descriptors closed) unless they match one to one.
    pub fn new(map: FdMap, fds: Vec<OwnedFd>) -> Option<Self> {
        (map.count() == fds.len() && !fds.is_empty()).then_some(Self {
            map,
            fds,
            pty: None,
        })
    }

    /// As [`PassedFds::new`], with `pty` (`NGD_CLIENT_PTY`) naming which descriptors the
    /// last one, a pseudo-terminal, stands for; without a map, as `new`.
    pub fn with_pty(map: FdMap, pty: Option<FdMap>, mut fds: Vec<OwnedFd>) -> Option<Self> {
        let Some(pty_map) = pty else {
            return Self::new(map, fds);
        };
        if fds.len() != map.count() + 1 || pty_map.fds().any(|fd| map.index_of(fd).is_none()) {
            return None;
        }
        let slave = fds.pop()?;
        let mut passed = Self::new(map, fds)?;
        passed.pty = Some((pty_map, slave));
        Some(passed)
    }

    /// The same descriptors without the pseudo-terminal (closed), for a command that does
    /// not make it its controlling terminal.
    pub fn without_pty(mut self) -> Self {
        self.pty = None;
        self
    }

    /// Which descriptors the pseudo-terminal stands for, when one came.
    pub fn pty_map(&self) -> Option<FdMap> {
        self.pty.as_ref().map(|(map, _)| *map)
    }

    /// The map, as `NGD_CLIENT_FDS` / `NGW_CLIENT_FDS` spell it.
    pub fn map(&self) -> FdMap {
        self.map
    }

    /// The raw descriptors in map order, then the pseudo-terminal, for `sendmsg`.
    pub fn raw(&self) -> Vec<RawFd> {
        let pty = self.pty.as_ref().map(|(_, fd)| fd);
        self.fds.iter().chain(pty).map(AsRawFd::as_raw_fd).collect()
    }

    /// The descriptors as the command's fds 0, 1, 2 (`None`: closed for the command); a
    /// pseudo-terminal is closed.
    pub fn into_slots(self) -> [Option<OwnedFd>; 3] {
        let mut slots: [Option<OwnedFd>; 3] = [None, None, None];
        for (fd, owned) in self.map.fds().zip(self.fds) {
            slots[fd] = Some(owned);
        }
        slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devnull() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn descriptors_go_to_the_slots_the_map_names() {
        let map = FdMap::parse(b"1,2").unwrap();
        assert!(PassedFds::new(map, vec![devnull()]).is_none());
        let passed = PassedFds::new(map, vec![devnull(), devnull()]).unwrap();
        assert_eq!(passed.map().to_value(), "1,2");
        let slots = passed.into_slots();
        assert!(slots[0].is_none() && slots[1].is_some() && slots[2].is_some());
        assert!(PassedFds::new(FdMap::parse(b"").unwrap(), vec![]).is_none());
    }

    #[test]
    fn a_pseudo_terminal_rides_last() {
        let map = FdMap::parse(b"0,1,2").unwrap();
        let pty = FdMap::parse(b"1,2");
        assert!(PassedFds::with_pty(map, pty, vec![devnull(), devnull(), devnull()]).is_none());
        let fds = vec![devnull(), devnull(), devnull(), devnull()];
        let last = fds[3].as_raw_fd();
        let passed = PassedFds::with_pty(map, pty, fds).unwrap();
        assert_eq!(passed.pty_map(), pty);
        assert_eq!(passed.raw().len(), 4);
        assert_eq!(passed.raw()[3], last);
        let plain = passed.without_pty();
        assert_eq!((plain.pty_map(), plain.raw().len()), (None, 3));
        // It must stand for descriptors that were passed.
        let map = FdMap::parse(b"1,2").unwrap();
        let fds = vec![devnull(), devnull(), devnull()];
        assert!(PassedFds::with_pty(map, FdMap::parse(b"0"), fds).is_none());
    }
}
