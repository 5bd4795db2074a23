//! The client's own descriptors, passed with its header (`SCM_RIGHTS`, the `fds`
//! extension of docs/protocol.md): held from the read that carried them until a command
//! takes them or the session goes on without them (then they are closed). With `ctty`,
//! the client's pseudo-terminal too: passed with them, or offered and passed later.

use ng_proto::ext::FdMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The descriptors one client passed, with the map saying which of its fds 0, 1, 2 each is.
#[derive(Debug)]
pub struct PassedFds {
    map: FdMap,
    fds: Vec<OwnedFd>,
    /// With `ctty`: the client's pseudo-terminal.
    pty: Pty,
}

/// The client's pseudo-terminal (`ctty`), by which of its fds it stands for
/// (`NGD_CLIENT_PTY`).
#[derive(Debug)]
enum Pty {
    /// None offered, or not for this command.
    None,
    /// Offered: the client passes its slave when asked (`P`).
    Offered(FdMap),
    /// Its slave.
    Passed(FdMap, OwnedFd),
}

impl PassedFds {
    /// Pairs the descriptors read from a connection with the client's map; `None` (and the
    /// descriptors closed) unless they match one to one.
    pub fn new(map: FdMap, fds: Vec<OwnedFd>) -> Option<Self> {
        (map.count() == fds.len() && !fds.is_empty()).then_some(Self {
            map,
            fds,
            pty: Pty::None,
        })
    }

    /// As [`PassedFds::new`], with `pty` (`NGD_CLIENT_PTY`) naming which descriptors the
    /// client's pseudo-terminal stands for: its slave is the last descriptor, or, with
    /// none more than the map names, it is offered. Without a map, as `new`.
    pub fn with_pty(map: FdMap, pty: Option<FdMap>, mut fds: Vec<OwnedFd>) -> Option<Self> {
        let Some(pty_map) = pty else {
            return Self::new(map, fds);
        };
        if pty_map.fds().any(|fd| map.index_of(fd).is_none()) {
            return None;
        }
        if fds.len() == map.count() {
            let mut passed = Self::new(map, fds)?;
            passed.pty = Pty::Offered(pty_map);
            return Some(passed);
        }
        if fds.len() != map.count() + 1 {
            return None;
        }
        let slave = fds.pop()?;
        let mut passed = Self::new(map, fds)?;
        passed.pty = Pty::Passed(pty_map, slave);
        Some(passed)
    }

    /// The same descriptors without the pseudo-terminal (closed, or no longer asked for),
    /// for a command that does not make it its controlling terminal.
    pub fn without_pty(mut self) -> Self {
        self.pty = Pty::None;
        self
    }

    /// Which descriptors the pseudo-terminal stands for, when its slave came.
    pub fn pty_map(&self) -> Option<FdMap> {
        match &self.pty {
            Pty::Passed(map, _) => Some(*map),
            _ => None,
        }
    }

    /// Whether the pseudo-terminal is offered and not passed yet.
    pub fn pty_offered(&self) -> bool {
        matches!(self.pty, Pty::Offered(_))
    }

    /// The offered pseudo-terminal's slave came (`P`): the same descriptors with it.
    /// Without an offer, the slave is closed.
    pub fn with_slave(mut self, slave: OwnedFd) -> Self {
        if let Pty::Offered(map) = self.pty {
            self.pty = Pty::Passed(map, slave);
        }
        self
    }

    /// The map, as `NGD_CLIENT_FDS` / `NGW_CLIENT_FDS` spell it.
    pub fn map(&self) -> FdMap {
        self.map
    }

    /// The raw descriptors in map order, then the pseudo-terminal, for `sendmsg`.
    pub fn raw(&self) -> Vec<RawFd> {
        let pty = match &self.pty {
            Pty::Passed(_, fd) => Some(fd),
            _ => None,
        };
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
        assert!(PassedFds::with_pty(map, pty, vec![devnull(), devnull()]).is_none());
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

    #[test]
    fn an_offered_pseudo_terminal_is_passed_later() {
        let map = FdMap::parse(b"0,1,2").unwrap();
        let pty = FdMap::parse(b"1,2");
        let offered = PassedFds::with_pty(map, pty, vec![devnull(), devnull(), devnull()]).unwrap();
        assert!(offered.pty_offered());
        assert_eq!((offered.pty_map(), offered.raw().len()), (None, 3));
        let slave = devnull();
        let raw = slave.as_raw_fd();
        let passed = offered.with_slave(slave);
        assert!(!passed.pty_offered());
        assert_eq!(passed.pty_map(), pty);
        assert_eq!(passed.raw()[3], raw);
        // Without an offer, a slave is not taken.
        let plain = PassedFds::new(map, vec![devnull(), devnull(), devnull()]).unwrap();
        assert_eq!(plain.with_slave(devnull()).raw().len(), 3);
        let withdrawn =
            PassedFds::with_pty(map, pty, vec![devnull(), devnull(), devnull()]).unwrap();
        assert!(!withdrawn.without_pty().pty_offered());
    }
}
