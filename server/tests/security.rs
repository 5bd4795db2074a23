//! Listener security against the real kernel: runtime directory checks, Unix socket
//! binding, and peer uids over Unix sockets and loopback TCP, including a connection from
//! another user (uid 65534, which needs root to set up).

use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ng_server::security::{
    bind_unix, current_uid, peer_uid_tcp, peer_uid_unix, PeerCheck, PeerIdentity, PeerVerdict,
    RuntimeDir, SecurityError, SUN_PATH_LEN,
};

const NOBODY: u32 = 65534;

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// True when running as root; otherwise says loudly that a root-only check is skipped.
fn running_as_root(what: &str) -> bool {
    if current_uid() == 0 {
        return true;
    }
    eprintln!();
    eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    eprintln!("!!! NOT RUN: {what}");
    eprintln!("!!! this check needs root (to chown or to switch to uid {NOBODY});");
    eprintln!("!!! run the tests as root to exercise it.");
    eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    false
}

// ---------------------------------------------------------------------------------------
// Runtime directory
// ---------------------------------------------------------------------------------------

#[test]
fn runtime_dir_is_created_private_with_missing_parents() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("a/b/ngd");
    let dir = RuntimeDir::open(&path).unwrap();
    assert_eq!(dir.path(), path);
    assert_eq!(mode(&path), 0o700);
    assert_eq!(mode(&tmp.path().join("a")), 0o700);
    assert_eq!(dir.socket_path(), path.join("ngd.sock"));
    // Opening again is fine and changes nothing.
    RuntimeDir::open(&path).unwrap();
    assert_eq!(mode(&path), 0o700);
}

#[test]
fn runtime_dir_too_open_is_repaired() {
    let tmp = tempfile::tempdir().unwrap();
    for bad in [0o777, 0o755, 0o710, 0o701, 0o500, 0o000] {
        let path = tmp.path().join(format!("ngd-{bad:o}"));
        fs::create_dir(&path).unwrap();
        chmod(&path, bad);
        RuntimeDir::open(&path).unwrap();
        assert_eq!(mode(&path), 0o700, "mode {bad:o} was not repaired");
    }
}

#[test]
fn runtime_dir_symlink_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("elsewhere");
    fs::create_dir(&target).unwrap();
    chmod(&target, 0o700);
    let link = tmp.path().join("ngd");
    symlink(&target, &link).unwrap();
    let err = RuntimeDir::open(&link).unwrap_err();
    assert!(matches!(err, SecurityError::DirIsSymlink { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&link.display().to_string()), "{msg}");
    assert!(msg.contains("symbolic link"), "{msg}");
    // A dangling symlink too.
    let dangling = tmp.path().join("dangling");
    symlink(tmp.path().join("missing"), &dangling).unwrap();
    let err = RuntimeDir::open(&dangling).unwrap_err();
    assert!(matches!(err, SecurityError::DirIsSymlink { .. }), "{err:?}");
    assert!(!tmp.path().join("missing").exists());
}

#[test]
fn runtime_dir_that_is_a_file_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ngd");
    fs::write(&path, "keep me").unwrap();
    let err = RuntimeDir::open(&path).unwrap_err();
    assert!(
        matches!(err, SecurityError::NotADirectory { .. }),
        "{err:?}"
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), "keep me");
}

#[test]
fn runtime_dir_of_another_user_is_refused_even_if_world_writable() {
    if !running_as_root("runtime_dir_of_another_user_is_refused_even_if_world_writable") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ngd");
    fs::create_dir(&path).unwrap();
    std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
    chmod(&path, 0o777);
    let err = RuntimeDir::open(&path).unwrap_err();
    match &err {
        SecurityError::DirNotOwned { owner, uid, .. } => {
            assert_eq!(*owner, NOBODY);
            assert_eq!(*uid, current_uid());
        }
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("belongs to uid 65534"), "{msg}");
    // Refused, not "repaired".
    assert_eq!(mode(&path), 0o777);
}

#[test]
fn runtime_dir_in_a_world_writable_non_sticky_parent_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("shared");
    fs::create_dir(&parent).unwrap();
    chmod(&parent, 0o777);
    let err = RuntimeDir::open(parent.join("ngd")).unwrap_err();
    assert!(matches!(err, SecurityError::UnsafeParent { .. }), "{err:?}");
    assert!(err.to_string().contains("writable by other users"), "{err}");
    // The same parent with the sticky bit, like /tmp, is fine.
    chmod(&parent, 0o1777);
    RuntimeDir::open(parent.join("ngd")).unwrap();
}

// ---------------------------------------------------------------------------------------
// Unix socket binding
// ---------------------------------------------------------------------------------------

fn private_tmp() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o700);
    tmp
}

#[test]
fn bind_unix_sets_mode_0600_and_accepts() {
    let tmp = private_tmp();
    let path = tmp.path().join("ngd.sock");
    let (listener, guard) = bind_unix(&path).unwrap();
    let meta = fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    // The process umask (typically 022) would have left 0755: the mode is set explicitly.
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!(guard.path(), path);
    assert!(guard.is_intact());
    let mut client = UnixStream::connect(&path).unwrap();
    let (mut served, _) = listener.accept().unwrap();
    client.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    served.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"x");
    drop(guard);
    assert!(!path.exists(), "the guard did not remove the socket");
}

#[test]
fn bind_unix_replaces_a_stale_socket() {
    let tmp = private_tmp();
    let path = tmp.path().join("ngd.sock");
    // A dead server's leftover: bound, then the listener closed without unlinking.
    drop(UnixListener::bind(&path).unwrap());
    assert!(UnixStream::connect(&path).is_err());
    let (listener, guard) = bind_unix(&path).unwrap();
    let meta = fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o7777, 0o600);
    // The path now reaches the new listener (the filesystem may reuse the inode number).
    let mut client = UnixStream::connect(&path).unwrap();
    let (mut served, _) = listener.accept().unwrap();
    client.write_all(b"y").unwrap();
    let mut b = [0u8; 1];
    served.read_exact(&mut b).unwrap();
    drop(guard);
    assert!(!path.exists());
}

#[test]
fn bind_unix_refuses_a_live_server() {
    let tmp = private_tmp();
    let path = tmp.path().join("ngd.sock");
    let (_live, _guard) = bind_unix(&path).unwrap();
    let ino = fs::symlink_metadata(&path).unwrap().ino();
    let err = bind_unix(&path).unwrap_err();
    assert!(
        matches!(err, SecurityError::AlreadyListening { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("another ngd is already listening on {}", path.display())
    );
    // The live server's socket is untouched.
    assert_eq!(fs::symlink_metadata(&path).unwrap().ino(), ino);
    UnixStream::connect(&path).unwrap();
}

#[test]
fn bind_unix_treats_a_full_backlog_as_live() {
    let tmp = private_tmp();
    let path = tmp.path().join("ngd.sock");
    // A wedged server that never accepts: fill its backlog with non-blocking connects.
    let sock = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).unwrap();
    sock.bind(&socket2::SockAddr::unix(&path).unwrap()).unwrap();
    sock.listen(1).unwrap();
    let mut pending = Vec::new();
    let mut full = false;
    for _ in 0..64 {
        let c = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).unwrap();
        c.set_nonblocking(true).unwrap();
        full = c.connect(&socket2::SockAddr::unix(&path).unwrap()).is_err();
        pending.push(c);
        if full {
            break;
        }
    }
    assert!(full, "the backlog never filled up");
    let started = Instant::now();
    let err = bind_unix(&path).unwrap_err();
    assert!(
        matches!(err, SecurityError::AlreadyListening { .. }),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the probe blocked"
    );
}

#[test]
fn bind_unix_never_deletes_a_file_that_is_not_a_socket() {
    let tmp = private_tmp();
    let path = tmp.path().join("ngd.sock");
    fs::write(&path, "precious").unwrap();
    let err = bind_unix(&path).unwrap_err();
    assert!(matches!(err, SecurityError::NotASocket { .. }), "{err:?}");
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(fs::read_to_string(&path).unwrap(), "precious");

    // Nor a symlink, even one that points at a stale socket.
    let stale = tmp.path().join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    let link = tmp.path().join("link.sock");
    symlink(&stale, &link).unwrap();
    let err = bind_unix(&link).unwrap_err();
    assert!(matches!(err, SecurityError::NotASocket { .. }), "{err:?}");
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(stale.exists());

    // Nor a directory.
    let dir = tmp.path().join("dir.sock");
    fs::create_dir(&dir).unwrap();
    assert!(matches!(
        bind_unix(&dir).unwrap_err(),
        SecurityError::NotASocket { .. }
    ));
    assert!(dir.is_dir());
}

#[test]
fn bind_unix_rejects_paths_longer_than_sun_path() {
    let tmp = private_tmp();
    let base = tmp.path().display().to_string();
    // base + "/" + fill = SUN_PATH_LEN bytes: no room left for the NUL.
    let fill = SUN_PATH_LEN - base.len() - 1;
    let long = PathBuf::from(format!("{base}/{}", "s".repeat(fill)));
    let err = bind_unix(&long).unwrap_err();
    match &err {
        SecurityError::SocketPathTooLong { len, max, .. } => {
            assert_eq!(*len, SUN_PATH_LEN);
            assert_eq!(*max, SUN_PATH_LEN - 1);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("choose a shorter path"), "{err}");
    // One byte shorter fits.
    let ok = PathBuf::from(format!("{base}/{}", "s".repeat(fill - 1)));
    let (_l, _g) = bind_unix(&ok).unwrap();
}

/// Linux only: elsewhere the replacement may legitimately get the same inode number.
#[test]
#[cfg(target_os = "linux")]
fn socket_guard_leaves_a_replaced_file_alone() {
    let tmp = private_tmp();
    let path = tmp.path().join("ngd.sock");
    let (listener, guard) = bind_unix(&path).unwrap();
    drop(listener);
    // Someone removed our socket and another server bound the same path.
    fs::remove_file(&path).unwrap();
    let (_other, other_guard) = bind_unix(&path).unwrap();
    assert!(!guard.is_intact());
    drop(guard);
    assert!(
        path.exists(),
        "the old guard removed the new server's socket"
    );
    drop(other_guard);
    assert!(!path.exists());
}

#[test]
fn runtime_dir_and_bind_unix_together() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = RuntimeDir::open(tmp.path().join("ngd")).unwrap();
    let (_listener, guard) = bind_unix(&dir.socket_path()).unwrap();
    assert_eq!(mode(guard.path()), 0o600);
    assert_eq!(mode(dir.path()), 0o700);
}

// ---------------------------------------------------------------------------------------
// Peer credentials, same user
// ---------------------------------------------------------------------------------------

#[test]
fn so_peercred_reports_our_uid() {
    let (a, b) = UnixStream::pair().unwrap();
    assert_eq!(peer_uid_unix(&a).unwrap(), current_uid());
    assert_eq!(peer_uid_unix(&b.as_raw_fd()).unwrap(), current_uid());
    assert_eq!(
        PeerCheck::for_current_user().check_unix(&a),
        PeerVerdict::Allow
    );
    // Through a real listener as well.
    let tmp = private_tmp();
    let path = tmp.path().join("ngd.sock");
    let (listener, _guard) = bind_unix(&path).unwrap();
    let _client = UnixStream::connect(&path).unwrap();
    let (served, _) = listener.accept().unwrap();
    assert_eq!(peer_uid_unix(&served).unwrap(), current_uid());
}

#[test]
fn so_peercred_on_a_non_socket_is_an_error() {
    let file = tempfile::tempfile().unwrap();
    assert!(peer_uid_unix(&file).is_err());
    match PeerIdentity::of_unix(&file) {
        PeerIdentity::Unknown { why } => assert!(why.contains("credentials"), "{why}"),
        other => panic!("{other:?}"),
    }
}

fn accept_tcp(listener: &TcpListener) -> (TcpStream, SocketAddr, SocketAddr) {
    let (s, peer) = listener.accept().unwrap();
    let local = s.local_addr().unwrap();
    (s, local, peer)
}

#[test]
fn loopback_tcp_v4_resolves_to_our_uid() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (_served, local, peer) = accept_tcp(&listener);
    assert_eq!(peer_uid_tcp(local, peer).unwrap(), Some(current_uid()));
    assert_eq!(
        PeerIdentity::of_tcp(local, peer),
        PeerIdentity::Uid(current_uid())
    );
    assert!(PeerCheck::for_current_user()
        .check_tcp(local, peer)
        .is_allowed());
}

#[test]
fn loopback_tcp_v6_resolves_to_our_uid() {
    let listener = match TcpListener::bind("[::1]:0") {
        Ok(l) => l,
        Err(e) => {
            eprintln!("!!! NOT RUN: loopback_tcp_v6_resolves_to_our_uid: no IPv6 loopback ({e})");
            return;
        }
    };
    let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (_served, local, peer) = accept_tcp(&listener);
    assert!(peer.is_ipv6());
    assert_eq!(peer_uid_tcp(local, peer).unwrap(), Some(current_uid()));
}

#[test]
fn loopback_tcp_v4_mapped_resolves_to_our_uid() {
    // A dual-stack AF_INET6 listener bound to ::ffff:127.0.0.1 sees an AF_INET client as a
    // v4-mapped peer, while the client's socket is listed in /proc/net/tcp (not tcp6).
    let sock = match socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("!!! NOT RUN: loopback_tcp_v4_mapped_resolves_to_our_uid: no IPv6 ({e})");
            return;
        }
    };
    sock.set_only_v6(false).unwrap();
    let mapped: SocketAddr = "[::ffff:127.0.0.1]:0".parse().unwrap();
    sock.bind(&mapped.into()).unwrap();
    sock.listen(8).unwrap();
    let listener: TcpListener = sock.into();
    let port = listener.local_addr().unwrap().port();
    let _client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (_served, local, peer) = accept_tcp(&listener);
    assert!(peer.is_ipv6(), "expected a mapped peer, got {peer}");
    assert_eq!(peer_uid_tcp(local, peer).unwrap(), Some(current_uid()));
    assert!(PeerCheck::for_current_user()
        .check_tcp(local, peer)
        .is_allowed());
}

#[test]
fn unattributable_loopback_tcp_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let local = listener.local_addr().unwrap();
    // A peer port nothing is connected from.
    let ghost: SocketAddr = "127.0.0.1:1".parse().unwrap();
    assert_eq!(peer_uid_tcp(local, ghost).unwrap(), None);
    match PeerCheck::for_current_user()
        .allow_remote(true)
        .check_tcp(local, ghost)
    {
        PeerVerdict::Refuse { reason } => {
            assert!(reason.starts_with("ngd: connection refused: "), "{reason}");
            assert!(reason.contains("cannot tell which user"), "{reason}");
            assert!(reason.contains("127.0.0.1:1"), "{reason}");
        }
        PeerVerdict::Allow => panic!("an unattributable loopback peer was allowed"),
    }
    // A remote address absent from the tables is remote, refused by default.
    let remote: SocketAddr = "192.0.2.1:40000".parse().unwrap();
    assert_eq!(
        PeerIdentity::of_tcp(local, remote),
        PeerIdentity::Remote { peer: remote }
    );
    assert!(!PeerCheck::for_current_user()
        .check_tcp(local, remote)
        .is_allowed());
}

// ---------------------------------------------------------------------------------------
// Peer credentials, another user
// ---------------------------------------------------------------------------------------

/// Forks a child that drops to `uid`/`gid` (no supplementary groups), connects to `addr`
/// and waits until we close the connection. Its exit status: 0 after a normal session, the
/// errno if `connect` failed, 100+ if dropping privileges failed.
///
/// The child only makes raw system calls (no allocation, no locks) between fork and
/// `_exit`, so forking this multi-threaded test process is sound.
fn connect_as(uid: u32, addr: &socket2::SockAddr) -> libc::pid_t {
    let family = libc::c_int::from(addr.family());
    // SAFETY: see above; the child never returns from this block.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid != 0 {
            return pid;
        }
        if libc::setgroups(0, std::ptr::null()) != 0 {
            libc::_exit(101);
        }
        if libc::setgid(uid) != 0 {
            libc::_exit(102);
        }
        if libc::setuid(uid) != 0 {
            libc::_exit(103);
        }
        if libc::geteuid() != uid {
            libc::_exit(104);
        }
        let fd = libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            libc::_exit(105);
        }
        if libc::connect(fd, addr.as_ptr(), addr.len()) != 0 {
            let errno = io::Error::last_os_error().raw_os_error().unwrap_or(99);
            libc::_exit(if (1..100).contains(&errno) { errno } else { 99 });
        }
        let mut byte = 0u8;
        libc::read(fd, (&mut byte as *mut u8).cast(), 1);
        libc::_exit(0)
    }
}

/// Waits for `pid` and returns its exit code.
fn wait_exit(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `status` is a live local.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid, "waitpid: {}", io::Error::last_os_error());
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    libc::WEXITSTATUS(status)
}

/// Whether `pid` has exited (reaping it), with its exit code.
fn try_wait_exit(pid: libc::pid_t) -> Option<i32> {
    let mut status = 0;
    // SAFETY: `status` is a live local.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    (rc == pid).then(|| libc::WEXITSTATUS(status))
}

/// Accepts one connection within 10 s, failing early if the child `pid` gave up.
fn accept_from<T>(pid: libc::pid_t, mut accept: impl FnMut() -> io::Result<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match accept() {
            Ok(v) => return v,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("accept: {e}"),
        }
        if let Some(code) = try_wait_exit(pid) {
            panic!("the child running as uid {NOBODY} exited with {code} before connecting");
        }
        assert!(Instant::now() < deadline, "no connection from the child");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn another_user_over_unix_socket_is_seen_and_refused() {
    if !running_as_root("another_user_over_unix_socket_is_seen_and_refused") {
        return;
    }
    // Reachable for nobody on purpose, so the credential check itself is what is tested.
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let path = tmp.path().join("open.sock");
    let (listener, _guard) = bind_unix(&path).unwrap();
    chmod(&path, 0o666);
    listener.set_nonblocking(true).unwrap();

    let pid = connect_as(NOBODY, &socket2::SockAddr::unix(&path).unwrap());
    let (served, _) = accept_from(pid, || listener.accept());
    served.set_nonblocking(false).unwrap();
    assert_eq!(peer_uid_unix(&served).unwrap(), NOBODY);
    assert_eq!(
        PeerCheck::new(current_uid()).check_unix(&served),
        PeerVerdict::Refuse {
            reason: format!(
                "ngd: connection refused: this server belongs to uid {}, you are uid {NOBODY}",
                current_uid()
            )
        }
    );
    drop(served);
    assert_eq!(wait_exit(pid), 0);
}

#[test]
fn another_user_over_loopback_tcp_is_seen_and_refused() {
    if !running_as_root("another_user_over_loopback_tcp_is_seen_and_refused") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();

    let pid = connect_as(NOBODY, &addr.into());
    let (served, local, peer) = accept_from(pid, || {
        let (s, peer) = listener.accept()?;
        let local = s.local_addr()?;
        Ok((s, local, peer))
    });
    assert_eq!(peer_uid_tcp(local, peer).unwrap(), Some(NOBODY));
    match PeerCheck::for_current_user().check_tcp(local, peer) {
        PeerVerdict::Refuse { reason } => assert_eq!(
            reason,
            format!(
                "ngd: connection refused: this server belongs to uid {}, you are uid {NOBODY}",
                current_uid()
            )
        ),
        PeerVerdict::Allow => panic!("uid {NOBODY} was allowed in"),
    }
    drop(served);
    assert_eq!(wait_exit(pid), 0);
}

#[test]
fn another_user_cannot_reach_a_default_socket() {
    if !running_as_root("another_user_cannot_reach_a_default_socket") {
        return;
    }
    // The default layout: 0700 directory, 0600 socket. Even with the directory opened up,
    // the socket's own mode keeps nobody out before any credential check.
    let tmp = tempfile::tempdir().unwrap();
    let dir = RuntimeDir::open(tmp.path().join("ngd")).unwrap();
    let (_listener, guard) = bind_unix(&dir.socket_path()).unwrap();
    let addr = socket2::SockAddr::unix(guard.path()).unwrap();
    assert_eq!(wait_exit(connect_as(NOBODY, &addr)), libc::EACCES);

    chmod(tmp.path(), 0o755);
    chmod(dir.path(), 0o755);
    assert_eq!(wait_exit(connect_as(NOBODY, &addr)), libc::EACCES);
}
