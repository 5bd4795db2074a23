//! Our `ng`'s negotiated extensions against the reference Java server (a stock server):
//! the announcement arrives as ordinary environment entries, the descriptors attached to
//! the header on a Unix socket are dropped unseen, the session is classic, and a signal
//! has its default action on `ng` (the server never answers with `F`).

use ng_tests::{Client, Dump, JavaServer, Nail, Transport};
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

#[test]
fn the_java_server_passes_the_announcement_on_and_ignores_the_fds() {
    for transport in Transport::ALL {
        let server = JavaServer::shared(transport);
        let out = Client::Ours
            .cmd()
            .nail(server, Nail::Dump)
            .args(["a", "b"])
            .run();
        out.assert_success();
        let dump = Dump::parse(&out.stdout);
        assert_eq!(dump.args, ["a", "b"], "{out:?}");
        let features = dump.env.get("NGD_CLIENT_FEATURES").map(String::as_str);
        let fds = dump.env.get("NGD_CLIENT_FDS").map(String::as_str);
        match transport {
            Transport::Unix => {
                assert_eq!(features, Some("fds,signals,winsize,stdin-window"));
                assert_eq!(fds, Some("0,1,2"));
            }
            Transport::Tcp => {
                assert_eq!(features, Some("signals,winsize,stdin-window"));
                assert_eq!(fds, None);
            }
        }
    }
}

#[test]
fn stdin_still_flows_classically_through_the_java_server() {
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    for transport in Transport::ALL {
        let server = JavaServer::shared(transport);
        let out = Client::Ours
            .cmd()
            .nail(server, Nail::Echo)
            .stdin_bytes(data.clone())
            .run();
        out.assert_success();
        assert!(
            out.stdout == data,
            "{} bytes back over {transport:?}",
            out.stdout.len()
        );
    }
}

#[test]
fn sigint_kills_ours_by_default_against_the_java_server() {
    for transport in Transport::ALL {
        let server = JavaServer::shared(transport);
        let running = Client::Ours
            .cmd()
            .nail(server, Nail::Sleep)
            .arg("20000")
            .timeout(Duration::from_secs(15))
            .spawn();
        running.wait_for_stdout("sleeping", Duration::from_secs(15));
        // SAFETY: signalling our own child.
        assert_eq!(
            unsafe { libc::kill(running.pid() as libc::pid_t, libc::SIGINT) },
            0
        );
        let out = running.wait();
        assert_eq!(out.status.signal(), Some(libc::SIGINT), "{out:?}");
    }
}
