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
}

impl PassedFds {
    /// Pairs the descriptors read from a connection with the client's map; `None` (and the
    /// descriptors closed) unless they match one to one.
    pub fn new(map: FdMap, fds: Vec<OwnedFd>) -> Option<Self> {
        (map.count() == fds.len() && !fds.is_empty()).then_some(Self { map, fds })
    }

    /// The map, as `NGD_CLIENT_FDS` / `NGW_CLIENT_FDS` spell it.
    pub fn map(&self) -> FdMap {
        self.map
    }

    /// The raw descriptors in map order, for `sendmsg`.
    pub fn raw(&self) -> Vec<RawFd> {
        self.fds.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// The descriptors as the command's fds 0, 1, 2 (`None`: closed for the command).
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
}
