//! A pseudo-terminal for the terminal tests: the master side read into a buffer by a
//! thread (what the screen shows), the slave side handed to what is tested.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// See the module docs.
pub struct Pty {
    /// Keys are written here.
    pub master: File,
    screen: Arc<Mutex<Vec<u8>>>,
    /// The terminal side (taken by a test that hands it on).
    pub slave: Option<OwnedFd>,
}

impl Pty {
    /// A pty of `cols` × `rows`.
    pub fn open(cols: u16, rows: u16) -> Self {
        let (mut m, mut s) = (0, 0);
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty fills two descriptors we then own.
        let rc = unsafe {
            libc::openpty(
                &mut m,
                &mut s,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &ws,
            )
        };
        assert_eq!(rc, 0, "openpty");
        // SAFETY: fresh descriptors from openpty.
        let (master, slave) = unsafe { (File::from_raw_fd(m), OwnedFd::from_raw_fd(s)) };
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Self {
            master,
            screen,
            slave: Some(slave),
        }
    }

    /// Everything shown so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits until `what` is on the screen after byte `from`; returns where it ends.
    pub fn wait_for(&self, what: &str, from: usize) -> usize {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text();
            if let Some(i) = text.get(from..).and_then(|t| t.find(what)) {
                return from + i + what.len();
            }
            assert!(Instant::now() < end, "{what:?} never appeared in {text:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `k`, then gives the program `pause_ms` to take it.
    pub fn keys(&mut self, k: &[u8], pause_ms: u64) {
        self.master.write_all(k).unwrap();
        std::thread::sleep(Duration::from_millis(pause_ms));
    }
}
