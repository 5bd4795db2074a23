//! The negotiated extensions of `ng` and `ngd` (docs/protocol.md, "Negotiated
//! extensions"), byte for byte on both sides, plus properties: the client's events do not
//! depend on how the server's bytes are cut, and windowed stdin never exceeds the credit.

use bytes::BytesMut;
use ng_proto::codec::to_bytes;
use ng_proto::server_session::DEFAULT_STDIN_WINDOW;
use ng_proto::{
    ChunkType, ClientConfig, ClientEvent, ClientSession, ExitReport, ExtensionEvent, FdMap,
    Features, Header, ProtocolError, ServerConfig, ServerEvent, ServerSession, SignalName, WinSize,
};
use proptest::prelude::*;
use std::time::{Duration, Instant};

fn wire(chunks: &[(u8, &[u8])]) -> BytesMut {
    let mut out = BytesMut::new();
    for (ty, payload) in chunks {
        out.extend_from_slice(&to_bytes(ChunkType(*ty), payload));
    }
    out
}

fn sig(name: &str) -> SignalName {
    SignalName::new(name.as_bytes()).unwrap()
}

/// `ng`'s header on a Unix socket: umask, window size, descriptor map, features last.
fn announcing_header() -> BytesMut {
    wire(&[
        (b'A', b"x"),
        (b'E', b"HOME=/home/u"),
        (b'E', b"NGD_CLIENT_UMASK=0022"),
        (b'E', b"NGD_CLIENT_SIGIGN=SIGHUP,bogus"),
        (b'E', b"NGD_CLIENT_WINSIZE=120 40 0 0"),
        (b'E', b"NGD_CLIENT_FDS=0,1,2"),
        (b'E', b"NGD_CLIENT_VERSION=0.4.0-rc.1"),
        (
            b'E',
            b"NGD_CLIENT_FEATURES=fds,signals,winsize,stdin-window",
        ),
        (b'D', b"/tmp"),
        (b'C', b"cmd"),
    ])
}

fn launch(s: &mut ServerSession, mut bytes: BytesMut, fds: usize) -> ng_proto::Request {
    let now = Instant::now();
    if fds > 0 {
        assert!(s.handle_passed_fds(fds));
    }
    s.handle_bytes(&mut bytes, now).unwrap();
    match s.poll_event() {
        Some(ServerEvent::Launch(r)) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn server_reads_the_announcement_and_strips_it() {
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let r = launch(&mut s, announcing_header(), 3);
    let names: Vec<&[u8]> = r.env.iter().map(|(k, _)| k.as_ref()).collect();
    assert_eq!(names, vec![&b"HOME"[..], b"NGD_CLIENT_UMASK"]);
    assert_eq!(r.client.features, Features::ALL.without(Features::CTTY));
    assert_eq!(r.client.fds, Some(FdMap::new([true; 3])));
    assert_eq!(r.client.pty, None);
    assert_eq!(r.client.fds_received, 3);
    assert_eq!(
        r.client.winsize,
        Some(WinSize {
            cols: 120,
            rows: 40,
            xpixel: 0,
            ypixel: 0
        })
    );
    assert_eq!(r.client.ignored_signals, vec![sig("SIGHUP")]);
    assert_eq!(
        r.client.version.as_ref().map(|v| v.as_str()),
        Some("0.4.0-rc.1")
    );
    assert!(
        s.take_transmit().is_empty(),
        "nothing before accept_extensions"
    );
}

#[test]
fn server_answers_f_first_then_takes_k_and_w() {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    launch(&mut s, announcing_header(), 3);
    let accepted = s.accept_extensions(Features::ALL);
    assert_eq!(accepted, Features::ALL.without(Features::CTTY));
    assert_eq!(
        &s.take_transmit()[..],
        &b"\x00\x00\x00\x20Ffds,signals,winsize,stdin-window"[..]
    );
    // Settled once.
    assert_eq!(s.accept_extensions(Features::ALL), Features::NONE);
    let mut input = wire(&[(b'K', b"SIGINT"), (b'W', b"100 30 0 0"), (b'0', b"typed")]);
    s.handle_bytes(&mut input, now).unwrap();
    assert_eq!(s.poll_event(), Some(ServerEvent::Stdin("typed".into())));
    assert_eq!(
        s.poll_extension(),
        Some(ExtensionEvent::Signal(sig("SIGINT")))
    );
    assert_eq!(
        s.poll_extension(),
        Some(ExtensionEvent::WindowSize(WinSize {
            cols: 100,
            rows: 30,
            xpixel: 0,
            ypixel: 0
        }))
    );
    assert_eq!(s.poll_extension(), None);
    let mut bad = wire(&[(b'K', b"INT")]);
    assert_eq!(
        s.handle_bytes(&mut bad, now),
        Err(ProtocolError::BadExtensionPayload {
            ty: ChunkType::SIGNAL
        })
    );
}

#[test]
fn server_grants_a_stdin_window_and_tops_it_up() {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    launch(&mut s, announcing_header(), 3);
    s.accept_extensions(Features::STDIN_WINDOW);
    s.take_transmit();
    s.set_stdin_window(1000);
    assert!(s.request_stdin());
    assert_eq!(&s.take_transmit()[..], b"\x00\x00\x00\x04S1000");
    // More than half still outstanding: no new grant.
    let mut input = wire(&[(b'0', &[7u8; 400])]);
    s.handle_bytes(&mut input, now).unwrap();
    assert!(!s.request_stdin());
    let mut input = wire(&[(b'0', &[7u8; 200]), (b'0', &[7u8; 100])]);
    s.handle_bytes(&mut input, now).unwrap();
    assert!(s.request_stdin());
    assert_eq!(&s.take_transmit()[..], b"\x00\x00\x00\x03S700");
    let mut eof = wire(&[(b'.', b"")]);
    s.handle_bytes(&mut eof, now).unwrap();
    assert!(!s.request_stdin());
    assert_eq!(DEFAULT_STDIN_WINDOW, 1 << 20);
}

#[test]
fn server_reports_death_by_signal_only_to_a_client_that_accepted_signals() {
    let segv = ExitReport::Signal {
        code: 139,
        signal: sig("SIGSEGV"),
        core: true,
    };
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    launch(&mut s, announcing_header(), 3);
    s.accept_extensions(Features::SIGNALS);
    s.take_transmit();
    assert!(s.stopped(&sig("SIGTSTP")));
    s.exit_with(&segv);
    assert_eq!(
        &s.take_transmit()[..],
        &b"\x00\x00\x00\x07ZSIGTSTP\x00\x00\x00\x11X139 SIGSEGV core\n"[..]
    );

    // A stock client's header: no F, the classic X, and `K` is an unknown chunk.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let r = launch(&mut s, wire(&[(b'D', b"/"), (b'C', b"cmd")]), 0);
    assert!(r.client.features.is_empty());
    assert_eq!(s.accept_extensions(Features::ALL), Features::NONE);
    assert!(!s.stopped(&sig("SIGTSTP")));
    let mut k = wire(&[(b'K', b"SIGINT")]);
    assert!(matches!(
        s.handle_bytes(&mut k, Instant::now()),
        Err(ProtocolError::UnexpectedChunk { .. })
    ));
    s.exit_with(&segv);
    assert_eq!(&s.take_transmit()[..], b"\x00\x00\x00\x04X139\n");
}

#[test]
fn server_honours_the_announcement_only_as_the_last_e() {
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let r = launch(
        &mut s,
        wire(&[
            (b'E', b"NGD_CLIENT_FEATURES=signals"),
            (b'E', b"LATER=1"),
            (b'C', b"cmd"),
        ]),
        0,
    );
    assert!(r.client.features.is_empty());
    assert_eq!(r.env.len(), 1, "the entry is stripped anyway");
    assert_eq!(s.accept_extensions(Features::ALL), Features::NONE);
}

#[test]
fn server_validates_the_passed_descriptors() {
    // Fewer descriptors than the map names: none are used.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let r = launch(&mut s, announcing_header(), 2);
    assert_eq!(r.client.fds, None);
    assert_eq!(r.client.fds_received, 2);
    assert_eq!(
        s.accept_extensions(Features::ALL),
        Features::ALL.without(Features::FDS.union(Features::CTTY))
    );
    // Descriptors without `fds` announced.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let header = wire(&[
        (b'E', b"NGD_CLIENT_FDS=0,1,2"),
        (b'E', b"NGD_CLIENT_FEATURES=signals"),
        (b'C', b"cmd"),
    ]);
    assert_eq!(launch(&mut s, header, 3).client.fds, None);
    // More than four, or after `C`: close them.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    assert!(s.handle_passed_fds(4));
    assert!(!s.handle_passed_fds(1));
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    launch(&mut s, announcing_header(), 3);
    assert!(!s.handle_passed_fds(3));
    // A closed stdin: two descriptors for `1,2`.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let header = wire(&[
        (b'E', b"NGD_CLIENT_FDS=1,2"),
        (b'E', b"NGD_CLIENT_FEATURES=fds"),
        (b'C', b"cmd"),
    ]);
    let map = launch(&mut s, header, 2).client.fds.unwrap();
    assert_eq!(map.index_of(0), None);
    assert_eq!(map.index_of(2), Some(1));
}

fn ctty_header(fds: &[u8], pty: &[u8], features: &[u8]) -> BytesMut {
    let fds = [&b"NGD_CLIENT_FDS="[..], fds].concat();
    let pty = [&b"NGD_CLIENT_PTY="[..], pty].concat();
    let features = [&b"NGD_CLIENT_FEATURES="[..], features].concat();
    wire(&[
        (b'E', &fds),
        (b'E', &pty),
        (b'E', &features),
        (b'C', b"cmd"),
    ])
}

#[test]
fn server_reads_the_pseudo_terminal_after_the_descriptors() {
    // Three descriptors and the pty: `ctty` can be accepted.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let r = launch(
        &mut s,
        ctty_header(b"0,1,2", b"0,1,2", b"fds,ctty,signals"),
        4,
    );
    assert!(r.env.is_empty(), "NGD_CLIENT_PTY is stripped: {:?}", r.env);
    assert_eq!(r.client.fds, Some(FdMap::new([true; 3])));
    assert_eq!(r.client.pty, Some(FdMap::new([true; 3])));
    assert_eq!(
        s.accept_extensions(Features::ALL),
        Features::FDS | Features::CTTY | Features::SIGNALS
    );
    // A server that does not make it the controlling terminal leaves `ctty` out.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    launch(&mut s, ctty_header(b"0,1,2", b"1,2", b"fds,ctty"), 4);
    assert_eq!(
        s.accept_extensions(Features::ALL.without(Features::CTTY)),
        Features::FDS
    );
    // The map's descriptors alone: the pty is offered, to be asked for.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let r = launch(&mut s, ctty_header(b"0,1,2", b"1,2", b"fds,ctty"), 3);
    assert_eq!(r.client.pty, FdMap::parse(b"1,2"));
    assert!(r.client.pty_offered);
    // Any other count is wrong: no descriptors at all.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let r = launch(&mut s, ctty_header(b"0,1,2", b"0,1,2", b"fds,ctty"), 2);
    assert_eq!((r.client.fds, r.client.pty), (None, None));
    assert_eq!(s.accept_extensions(Features::ALL), Features::NONE);
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let r = launch(&mut s, ctty_header(b"1,2", b"1,2", b"fds,ctty"), 4);
    assert_eq!((r.client.fds, r.client.pty), (None, None));
    // The pty must stand for passed descriptors only.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let r = launch(&mut s, ctty_header(b"1,2", b"0", b"fds,ctty"), 3);
    assert_eq!((r.client.fds, r.client.pty), (None, None));
    // Without `ctty` announced, the entry means nothing and the count is the map's.
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    let r = launch(&mut s, ctty_header(b"0,1,2", b"0,1,2", b"fds"), 3);
    assert_eq!(r.client.pty, None);
    assert_eq!(r.client.fds, Some(FdMap::new([true; 3])));
    assert_eq!(s.accept_extensions(Features::ALL), Features::FDS);
}

#[test]
fn server_asks_for_an_offered_pseudo_terminal() {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    let r = launch(
        &mut s,
        ctty_header(b"0,1,2", b"1,2", b"fds,ctty,signals"),
        3,
    );
    assert!(r.client.pty_offered);
    assert!(!s.awaits_pty());
    assert!(!s.handle_passed_fds(1), "a descriptor nobody asked for");
    assert!(s.request_pty());
    assert_eq!(&s.take_transmit()[..], &wire(&[(b'P', b"")])[..]);
    assert!(!s.request_pty(), "asked once");
    assert!(s.awaits_pty());
    // The answer: one descriptor rides with it.
    assert!(!s.handle_passed_fds(2));
    assert!(s.handle_passed_fds(1));
    s.handle_bytes(&mut wire(&[(b'P', b"")]), now).unwrap();
    assert_eq!(s.poll_event(), Some(ServerEvent::Pty));
    assert!(!s.awaits_pty());
    // Then `F` as for a pty passed with the header.
    assert_eq!(
        s.accept_extensions(Features::ALL),
        Features::FDS | Features::CTTY | Features::SIGNALS
    );
    // A `P` that was not asked for breaks the protocol.
    let err = s.handle_bytes(&mut wire(&[(b'P', b"")]), now).unwrap_err();
    assert!(
        matches!(err, ProtocolError::UnexpectedChunk { .. }),
        "{err:?}"
    );
}

#[test]
fn a_withdrawn_request_ignores_a_late_answer() {
    let now = Instant::now();
    let mut s = ServerSession::new(ServerConfig::default(), now);
    launch(&mut s, ctty_header(b"0,1,2", b"1,2", b"fds,ctty"), 3);
    assert!(s.request_pty());
    s.withdraw_pty();
    assert!(!s.awaits_pty());
    assert!(!s.handle_passed_fds(1), "to be closed");
    s.handle_bytes(&mut wire(&[(b'P', b"")]), now).unwrap();
    assert_eq!(s.poll_event(), None);
    // Asked for nothing: no `P` before other output, nor to a client without `ctty`.
    let mut s = ServerSession::new(ServerConfig::default(), now);
    launch(&mut s, ctty_header(b"0,1,2", b"1,2", b"fds,ctty"), 3);
    s.write_stderr(b"x");
    assert!(!s.request_pty());
    let mut s = ServerSession::new(ServerConfig::default(), now);
    launch(&mut s, announcing_header(), 3);
    assert!(!s.request_pty());
}

#[test]
fn client_answers_p_before_f() {
    let now = Instant::now();
    let mut c = announcing_client();
    c.handle_bytes(&mut wire(&[(b'P', b""), (b'F', b"fds,ctty")]))
        .unwrap();
    assert_eq!(
        events(&mut c),
        [
            ClientEvent::PtyWanted,
            ClientEvent::Extensions(Features::FDS | Features::CTTY)
        ]
    );
    c.send_pty(now);
    assert_eq!(&c.take_transmit()[..], &wire(&[(b'P', b"")])[..]);
    // After `F`, or to a client that did not announce `ctty`, `P` is an error.
    assert!(c.handle_bytes(&mut wire(&[(b'P', b"")])).is_err());
    let config = ClientConfig {
        announced: Features::FDS,
        ..ClientConfig::default()
    };
    let mut c = ClientSession::new(config, now);
    c.send_header(&Header::default(), now);
    assert!(c.handle_bytes(&mut wire(&[(b'P', b"")])).is_err());
}

#[test]
fn server_sends_f_only_before_other_output() {
    let mut s = ServerSession::new(ServerConfig::default(), Instant::now());
    launch(&mut s, announcing_header(), 3);
    s.write_stderr(b"ngd: something\n");
    assert_eq!(s.accept_extensions(Features::ALL), Features::NONE);
    assert_eq!(s.extensions(), Features::NONE);
}

#[test]
fn a_stopped_client_is_not_timed_out() {
    let now = Instant::now();
    let config = ServerConfig {
        heartbeat_timeout: Some(Duration::from_secs(10)),
        ..ServerConfig::default()
    };
    let mut s = ServerSession::new(config, now);
    launch(&mut s, announcing_header(), 3);
    s.accept_extensions(Features::SIGNALS);
    let mut tstp = wire(&[(b'K', b"SIGTSTP")]);
    s.handle_bytes(&mut tstp, now).unwrap();
    assert_eq!(s.poll_timeout(), None);
    s.handle_timeout(now + Duration::from_secs(60)).unwrap();
    assert_eq!(s.poll_event(), None, "no ClientGone while stopped");
    let later = now + Duration::from_secs(61);
    let mut cont = wire(&[(b'K', b"SIGCONT")]);
    s.handle_bytes(&mut cont, later).unwrap();
    assert_eq!(s.poll_timeout(), Some(later + Duration::from_secs(10)));
}

fn announcing_client() -> ClientSession {
    let now = Instant::now();
    let config = ClientConfig {
        announced: Features::ALL,
        ..ClientConfig::default()
    };
    let mut c = ClientSession::new(config, now);
    c.send_header(
        &Header {
            command: b"cmd".to_vec(),
            ..Header::default()
        },
        now,
    );
    c.take_transmit();
    c
}

fn events(c: &mut ClientSession) -> Vec<ClientEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

#[test]
fn client_takes_f_then_sends_k_and_w() {
    let now = Instant::now();
    let mut c = announcing_client();
    assert!(!c.send_signal(&sig("SIGINT"), now), "nothing before F");
    let mut input = wire(&[(b'F', b"signals,winsize,future")]);
    c.handle_bytes(&mut input).unwrap();
    assert_eq!(
        events(&mut c),
        vec![ClientEvent::Extensions(
            Features::SIGNALS | Features::WINSIZE
        )]
    );
    assert!(c.send_signal(&sig("SIGINT"), now));
    let size = WinSize {
        cols: 80,
        rows: 24,
        xpixel: 0,
        ypixel: 0,
    };
    assert!(c.send_window_size(size, now));
    assert_eq!(
        &c.take_transmit()[..],
        &b"\x00\x00\x00\x06KSIGINT\x00\x00\x00\x09W80 24 0 0"[..]
    );
    let mut input = wire(&[(b'Z', b"SIGTSTP"), (b'X', b"137 SIGKILL\n")]);
    c.handle_bytes(&mut input).unwrap();
    assert_eq!(
        events(&mut c),
        vec![
            ClientEvent::Stopped(sig("SIGTSTP")),
            ClientEvent::ExitBySignal {
                code: 137,
                signal: sig("SIGKILL"),
                core: false
            }
        ]
    );
    assert_eq!(c.exit_code(), Some(137));
}

#[test]
fn client_treats_a_server_without_f_as_classic() {
    let now = Instant::now();
    let mut c = announcing_client();
    let mut input = wire(&[(b'1', b"hi"), (b'S', b""), (b'X', b"137 SIGKILL\n")]);
    c.handle_bytes(&mut input).unwrap();
    assert_eq!(
        events(&mut c),
        vec![
            ClientEvent::Extensions(Features::NONE),
            ClientEvent::Stdout("hi".into()),
            ClientEvent::StdinRequested,
            ClientEvent::Exit(137),
        ]
    );
    assert!(!c.send_signal(&sig("SIGINT"), now));
}

#[test]
fn client_rejects_extension_chunks_it_did_not_ask_for() {
    // A classic client: `F` is an unknown type (229 in `ng`).
    let now = Instant::now();
    let mut c = ClientSession::new(ClientConfig::default(), now);
    c.send_header(&Header::default(), now);
    let mut input = wire(&[(b'F', b"signals")]);
    assert!(matches!(
        c.handle_bytes(&mut input),
        Err(ProtocolError::UnexpectedChunk { .. })
    ));
    // `F` not first.
    let mut c = announcing_client();
    let mut input = wire(&[(b'2', b"e"), (b'F', b"signals")]);
    assert!(c.handle_bytes(&mut input).is_err());
    // `Z` without `signals`.
    let mut c = announcing_client();
    let mut input = wire(&[(b'F', b"winsize"), (b'Z', b"SIGTSTP")]);
    assert!(c.handle_bytes(&mut input).is_err());
    // An oversized `F`.
    let mut c = announcing_client();
    let mut input = wire(&[(b'F', &[b'x'; 2000])]);
    assert_eq!(
        c.handle_bytes(&mut input),
        Err(ProtocolError::BadExtensionPayload {
            ty: ChunkType::FEATURES
        })
    );
}

#[test]
fn client_spends_a_stdin_window() {
    let now = Instant::now();
    let mut c = announcing_client();
    let mut input = wire(&[(b'F', b"stdin-window"), (b'S', b"5000")]);
    c.handle_bytes(&mut input).unwrap();
    assert_eq!(
        events(&mut c),
        vec![
            ClientEvent::Extensions(Features::STDIN_WINDOW),
            ClientEvent::StdinRequested
        ]
    );
    assert_eq!(c.stdin_budget(), 5000);
    assert_eq!(
        c.send_stdin(&[1; 5001], now),
        ng_proto::client_session::StdinSend::NoCredit
    );
    assert_eq!(
        c.send_stdin(&[1; 3000], now),
        ng_proto::client_session::StdinSend::Sent
    );
    assert_eq!(c.stdin_budget(), 2000);
    // A grant while credit is left raises no new request.
    let mut input = wire(&[(b'S', b"1000")]);
    c.handle_bytes(&mut input).unwrap();
    assert_eq!(events(&mut c), vec![]);
    assert_eq!(c.stdin_budget(), 3000);
    assert_eq!(
        c.send_stdin_eof(now),
        ng_proto::client_session::StdinSend::Sent
    );
    assert_eq!(c.stdin_budget(), 0);
    let tx = c.take_transmit();
    assert_eq!(tx.len(), 5 + 3000 + 5);
    assert_eq!(&tx[..5], b"\x00\x00\x0b\xb80");
    assert_eq!(&tx[3005..], b"\x00\x00\x00\x00.");
}

/// The server's side of an extended session, as wire bytes.
fn extended_server_stream() -> Vec<u8> {
    wire(&[
        (b'F', b"signals,winsize,stdin-window"),
        (b'S', b"65536"),
        (b'1', b"out"),
        (b'Z', b"SIGTSTP"),
        (b'2', b"err"),
        (b'S', b"100"),
        (b'X', b"134 SIGABRT core\n"),
    ])
    .to_vec()
}

proptest! {
    #[test]
    fn client_events_do_not_depend_on_how_bytes_are_cut(cuts in proptest::collection::vec(0usize..200, 0..8)) {
        let stream = extended_server_stream();
        let mut whole = announcing_client();
        whole.handle_bytes(&mut BytesMut::from(&stream[..])).unwrap();
        let want = events(&mut whole);

        let mut c = announcing_client();
        let mut got = Vec::new();
        let mut buf = BytesMut::new();
        let mut points: Vec<usize> = cuts.iter().map(|&k| k % (stream.len() + 1)).collect();
        points.sort_unstable();
        let mut at = 0;
        for p in points.into_iter().chain([stream.len()]) {
            buf.extend_from_slice(&stream[at..p]);
            at = p;
            c.handle_bytes(&mut buf).unwrap();
            got.extend(events(&mut c));
        }
        // Output may come in more pieces; compare it joined.
        let join = |evs: &[ClientEvent]| {
            let mut out: Vec<String> = Vec::new();
            let mut last = None;
            for e in evs {
                let (kind, text) = match e {
                    ClientEvent::Stdout(b) => (1, String::from_utf8_lossy(b).into_owned()),
                    ClientEvent::Stderr(b) => (2, String::from_utf8_lossy(b).into_owned()),
                    other => (0, format!("{other:?}")),
                };
                match out.last_mut() {
                    Some(prev) if kind != 0 && last == Some(kind) => prev.push_str(&text),
                    _ => out.push(format!("{kind}:{text}")),
                }
                last = Some(kind);
            }
            out.join("|")
        };
        prop_assert_eq!(join(&got), join(&want));
    }

    #[test]
    fn windowed_stdin_never_exceeds_the_credit(
        steps in proptest::collection::vec((any::<bool>(), 1u32..5000), 1..40)
    ) {
        let now = Instant::now();
        let mut c = announcing_client();
        c.handle_bytes(&mut wire(&[(b'F', b"stdin-window")])).unwrap();
        let mut credit: u64 = 0;
        let mut sent: u64 = 0;
        for (grant, n) in steps {
            if grant {
                c.handle_bytes(&mut wire(&[(b'S', n.to_string().as_bytes())])).unwrap();
                credit += u64::from(n);
            } else {
                let data = vec![0u8; n as usize];
                if c.send_stdin(&data, now) == ng_proto::client_session::StdinSend::Sent {
                    sent += u64::from(n);
                }
            }
            prop_assert!(sent <= credit);
            prop_assert_eq!(c.stdin_budget() as u64, credit - sent);
        }
    }
}
