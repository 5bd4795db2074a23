//! No descriptor passed to a worker outlives its use: every way descriptors can arrive
//! (taken, declined, a wrong map, a truncated control message, no map, a stdin chunk,
//! garbage) leaves the process with the descriptors it had before. One test in a binary
//! of its own, so that no other test opens descriptors meanwhile.

use ngw::testing::{Driver, Request};
use ngw::{Channel, Hello, Session};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn handler(s: &mut Session) -> i32 {
    match s.take_client_fds() {
        Some(mut fds) => {
            if let Some(fd) = fds.take(1) {
                let _ = File::from(fd).write_all(b"x");
            }
            0
        }
        None => {
            let mut v = Vec::new();
            let _ = s.stdin().read_to_end(&mut v);
            1
        }
    }
}

fn null(n: usize) -> Vec<OwnedFd> {
    (0..n)
        .map(|_| {
            File::options()
                .write(true)
                .open("/dev/null")
                .unwrap()
                .into()
        })
        .collect()
}

#[test]
fn no_passed_descriptor_is_leaked() {
    // Warm up what the runtime opens once (thread stacks do not use descriptors, but the
    // first spawn may open /proc or /sys entries).
    let run = |garbage: bool| {
        let (a, b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            Channel::from_stream(b)
                .host_features("mux,fds,signals,stdin-window")
                .serve(
                    Hello::new(["take", "keep"])
                        .max_sessions(4)
                        .client_fds_when(|c| c == "take"),
                    handler,
                )
        });
        let mut d = Driver::over(a).unwrap();
        for (cmd, n, map) in [
            ("take", 3, "0,1,2"),
            ("take", 2, "1,2"),
            ("keep", 3, "0,1,2"),
            ("take", 2, "0,1,2"),
            ("take", 7, "0,1,2"),
        ] {
            let out = d
                .run(&Request::new(cmd, [""; 0]).fds(null(n), map))
                .unwrap();
            assert!(out.taken.is_some());
        }
        // Descriptors with a header that has no map, and with a stdin chunk.
        let id = d
            .start(&Request::new("keep", [""; 0]).hold_stdin())
            .unwrap();
        let mut raw = bytes::BytesMut::new();
        ng_proto::codec::encode(
            ng_proto::ChunkType(b's'),
            id.to_string().as_bytes(),
            &mut raw,
        );
        ng_proto::codec::encode(ng_proto::ChunkType(b'0'), b"x", &mut raw);
        let extra = null(3);
        let raw_fds: Vec<_> = extra.iter().map(AsRawFd::as_raw_fd).collect();
        d.send_raw(&raw, &raw_fds).unwrap();
        drop(extra);
        d.release_stdin(id).unwrap();
        assert_eq!(d.finish(id).unwrap().code, 1);
        if garbage {
            // A chunk over the cap with descriptors: a protocol error, not a panic.
            let extra = null(3);
            let raw_fds: Vec<_> = extra.iter().map(AsRawFd::as_raw_fd).collect();
            d.send_raw(b"\xff\xff\xff\xffA", &raw_fds).unwrap();
            drop(extra);
            let served = t.join().unwrap();
            assert!(served.is_err());
            drop(d);
        } else {
            d.quit().unwrap();
            t.join().unwrap().unwrap();
        }
    };
    run(false);
    let before = open_fds();
    for _ in 0..3 {
        run(false);
        run(true);
    }
    assert_eq!(open_fds(), before);
}
