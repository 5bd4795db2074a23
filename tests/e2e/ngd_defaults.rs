//! Default addresses: `ngd serve` with no `--listen` listens on its private runtime
//! directory's socket and on `127.0.0.1:2113`, and our `ng` with no server named finds it
//! there.
//!
//! `XDG_RUNTIME_DIR` points into a temporary directory for the server and the clients, so
//! the test never meets a developer's real server socket. Port 2113 is global, though: if
//! something else holds it, the TCP half is skipped with a loud message and the server is
//! started on the default socket alone (`--listen` naming it), which still exercises the
//! private directory.

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use ng_tests::client::ClientCmd;
use ng_tests::{bins, eqnice, Address, Client, Flavor, NgdServer, Server};

/// The default TCP address.
const DEFAULT_TCP: &str = ng_proto::paths::DEFAULT_TCP_ADDR;

#[test]
fn serve_with_no_listen_uses_the_defaults() {
    let _default_tcp = ng_tests::DEFAULT_TCP_ADDR_LOCK
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let xdg = tempfile::Builder::new()
        .prefix("ngd-xdg-")
        .tempdir()
        .unwrap();
    let runtime = xdg.path().join("ngd");
    let socket = runtime.join("ngd.sock");
    let start = |listen: Option<String>| {
        let mut builder = NgdServer::builder(Flavor::Ngd).env("XDG_RUNTIME_DIR", xdg.path());
        if let Some(addr) = listen {
            builder = builder.listen(addr);
        }
        builder.try_start()
    };

    let (server, with_tcp) = match start(None) {
        Ok(server) => (server, true),
        Err(log) if log.contains(&format!("cannot listen on {DEFAULT_TCP}")) => {
            eprintln!(
                "\n!!!!!!!! ngd_defaults: {DEFAULT_TCP} is taken by another process on this \
                 machine, so the TCP half of the default-address test is SKIPPED; checking \
                 the default Unix socket only. !!!!!!!!\n{log}\n"
            );
            let server = start(Some(format!("local:{}", socket.display())))
                .unwrap_or_else(|e| panic!("{e}"));
            (server, false)
        }
        Err(log) => panic!("{log}"),
    };

    // The ready line names the default socket (and the default TCP address).
    let mut expected = vec![Address::Unix(socket.clone())];
    if with_tcp {
        expected.push(Address::Tcp(DEFAULT_TCP.parse().unwrap()));
    }
    let mut got = server.addresses().to_vec();
    got.sort_by_key(|a| a.to_string());
    expected.sort_by_key(|a| a.to_string());
    assert_eq!(got, expected, "{}", server.log());

    // A private directory and socket.
    let dir_meta = std::fs::symlink_metadata(&runtime).unwrap();
    assert!(dir_meta.is_dir(), "{}", runtime.display());
    assert_eq!(
        dir_meta.mode() & 0o7777,
        0o700,
        "mode of {}",
        runtime.display()
    );
    assert_eq!(
        dir_meta.uid(),
        current_uid(),
        "owner of {}",
        runtime.display()
    );
    let sock_meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(sock_meta.file_type().is_socket(), "{}", socket.display());
    assert_eq!(
        sock_meta.mode() & 0o777,
        0o600,
        "mode of {}",
        socket.display()
    );

    // Our ng, with no server named, connects to the default socket, over Unix.
    let ours = || {
        Client::Ours
            .cmd()
            .env("XDG_RUNTIME_DIR", xdg.path())
            .env_remove("NAILGUN_SERVER")
            .env_remove("NAILGUN_PORT")
    };
    let out = ours().arg("ng-version").run();
    out.assert_success();
    eqnice!(server.version_output(), out.stdout_text(), "{out:?}");
    let running = ours().arg("ng-cat").stdin_open().spawn();
    let kinds = wait_for_socket_kinds(running.pid());
    assert_eq!(
        kinds,
        ["unix"],
        "our ng with no server named should reach the default Unix socket first"
    );
    drop(running);

    if with_tcp {
        // Stock clients work unchanged: the C client's default is 127.0.0.1:2113.
        let out = Client::CClient.cmd().arg("ng-version").run();
        out.assert_success();
        eqnice!(server.version_output(), out.stdout_text(), "{out:?}");
        // With no socket in its runtime directory, our ng falls back to 127.0.0.1:2113.
        let empty = tempfile::tempdir().unwrap();
        let out = Client::Ours
            .cmd()
            .env("XDG_RUNTIME_DIR", empty.path())
            .arg("ng-version")
            .run();
        out.assert_success();
        eqnice!(server.version_output(), out.stdout_text(), "{out:?}");
    }

    // `ngd status` and `ngd stop` find the server at the default socket as well.
    let ngd = |args: &[&str]| {
        ClientCmd::new("ngd", bins::ngd())
            .env("XDG_RUNTIME_DIR", xdg.path())
            .args(args)
            .run()
    };
    let out = ngd(&["status"]);
    out.assert_success();
    assert!(
        out.stdout_text().contains(&format!("pid {}", server.pid())),
        "{out:?}"
    );
    ngd(&["stop"]).assert_success();
    let status = server
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("the server still runs after `ngd stop`\n{}", server.log()));
    assert_eq!(status.code(), Some(0), "{}", server.log());
    assert!(!socket.exists(), "{} survived `ngd stop`", socket.display());
}

fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The kinds (`unix`, `tcp`) of the sockets process `pid` has open, once it has any.
fn wait_for_socket_kinds(pid: u32) -> Vec<&'static str> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let kinds = socket_kinds(pid);
        if !kinds.is_empty() || Instant::now() >= deadline {
            return kinds;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// The kinds of the sockets process `pid` has open, looked up by inode in
/// `/proc/net/{unix,tcp,tcp6}`.
fn socket_kinds(pid: u32) -> Vec<&'static str> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|target| {
            let t = target.to_string_lossy();
            t.strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .map(str::to_string)
        })
        .collect();
    let unix = table_inodes(Path::new("/proc/net/unix"), 6);
    let mut tcp = table_inodes(Path::new("/proc/net/tcp"), 9);
    tcp.extend(table_inodes(Path::new("/proc/net/tcp6"), 9));
    inodes
        .iter()
        .map(|inode| {
            if unix.contains(inode) {
                "unix"
            } else if tcp.contains(inode) {
                "tcp"
            } else {
                "other"
            }
        })
        .collect()
}

/// The inode column (`column`, counting from 0) of a `/proc/net` table.
fn table_inodes(table: &Path, column: usize) -> Vec<String> {
    let text = std::fs::read_to_string(table).unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(column).map(str::to_string))
        .collect()
}
