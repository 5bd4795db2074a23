//! Two installs of ngd of different versions on one machine (npm's and pip's, say) share
//! the user's default socket and hand over as an upgrade does: a server that a newer `ng`
//! connects to records that client's own `ngd` and exits once idle, and every `ng`'s
//! auto-start then starts the newest `ngd` known, so they never restart each other.
//!
//! An install here is a directory with a copy of the built `ng` and `ngd`, as npm and pip
//! put them side by side. The "newer" install is the same build with the version marker
//! rewritten in both binaries ([`ng_proto::version::MARKER`]: same length, NUL-padded), so
//! no runtime switch exists that a user could trip on.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ng_proto::version::{MARKER_LEN, MARKER_PREFIX};
use ng_tests::client::ClientCmd;
use ng_tests::{bins, Output};

use crate::ops::User;

/// The version the newer install says it is.
const NEWER: &str = "999.0.0";

/// Copies `from` to `to`, with the marker's version rewritten to `version` when given.
fn copy_binary(from: &Path, to: &Path, version: Option<&str>) {
    let mut bytes = std::fs::read(from).unwrap();
    if let Some(version) = version {
        let at: Vec<usize> = bytes
            .windows(MARKER_PREFIX.len())
            .enumerate()
            .filter(|(_, w)| *w == MARKER_PREFIX)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(at.len(), 1, "{}: one version marker", from.display());
        let field = &mut bytes[at[0] + MARKER_PREFIX.len()..at[0] + MARKER_LEN];
        field.fill(0);
        field[..version.len()].copy_from_slice(version.as_bytes());
    }
    std::fs::write(to, bytes).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An install in `user`'s directory: `NAME/ng`, and `NAME/ngd` unless `with_ngd` is false.
fn install(user: &User, name: &str, version: Option<&str>, with_ngd: bool) -> PathBuf {
    let dir = user.dir.path().join(name);
    std::fs::create_dir(&dir).unwrap();
    copy_binary(&bins::ng(), &dir.join("ng"), version);
    if with_ngd {
        copy_binary(&bins::ngd(), &dir.join("ngd"), version);
    }
    dir
}

/// `ng ng-stats --json` from the install in `dir`, no server named.
fn stats(user: &User, dir: &Path) -> serde_json::Value {
    let out: Output = user
        .with_env(ClientCmd::new("ng", dir.join("ng")))
        .args(["ng-stats", "--json"])
        .timeout(Duration::from_secs(30))
        .run();
    out.assert_success();
    serde_json::from_str(&out.stdout_text()).unwrap()
}

fn pid(stats: &serde_json::Value) -> u64 {
    stats["pid"].as_u64().unwrap()
}

/// The `ngd serve` processes running from `user`'s directory: (pid, executable).
fn servers(user: &User) -> Vec<(u32, PathBuf)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        let Ok(exe) = std::fs::read_link(entry.path().join("exe")) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let serving = cmdline.split(|&b| b == 0).any(|a| a == b"serve");
        if exe.starts_with(user.dir.path()) && serving && !zombie(pid) {
            found.push((pid, exe));
        }
    }
    found
}

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn wait_gone(pid: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !zombie(pid as u32) {
        assert!(Instant::now() < deadline, "server {pid} did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Calls from each install in turn for `secs` seconds: every one answered by `server`.
fn alternate(user: &User, installs: &[&Path], server: u64, secs: u64) -> usize {
    let until = Instant::now() + Duration::from_secs(secs);
    let mut calls = 0;
    while Instant::now() < until {
        for dir in installs {
            let s = stats(user, dir);
            assert_eq!(
                pid(&s),
                server,
                "another server answered {}: {s}",
                dir.display()
            );
            calls += 1;
        }
    }
    calls
}

#[test]
fn an_older_auto_started_server_hands_over_to_a_newer_install_once() {
    let user = User::new();
    let old = install(&user, "old", None, true);
    let new = install(&user, "new", Some(NEWER), true);
    let ours = env!("CARGO_PKG_VERSION");

    let first = stats(&user, &old);
    assert_eq!(first["version"], ours);
    let old_pid = pid(&first);
    // The newer client's call is served by the old server, which then hands over.
    let served = stats(&user, &new);
    assert_eq!(pid(&served), old_pid, "the newer client's call is served");
    assert_eq!(served["version"], ours);
    wait_gone(old_pid);
    let record = std::fs::read_to_string(user.runtime().join("ngd/newest-ngd")).unwrap();
    assert!(
        record.contains(&format!("version {NEWER}\n"))
            && record.ends_with(&format!("path {}\n", new.join("ngd").display())),
        "{record}"
    );
    // The old install's ng starts the newer ngd, which serves both from then on.
    let next = stats(&user, &old);
    assert_eq!(next["version"], NEWER, "{next}");
    assert_eq!(next["outdated"], false);
    let new_pid = pid(&next);
    let calls = alternate(&user, &[&old, &new], new_pid, 3);
    assert_eq!(
        servers(&user),
        [(new_pid as u32, new.join("ngd"))],
        "one server, the newer, after {calls} calls"
    );
    let log = user.log_text();
    assert!(
        log.contains(&format!("a client of ngd {NEWER} connected"))
            && log.contains("handing over to it once no client is connected"),
        "{log}"
    );
    assert_eq!(log.matches(" listening on ").count(), 2, "{log}");
}

#[test]
fn a_newer_client_without_its_own_ngd_changes_nothing() {
    let user = User::new();
    let old = install(&user, "old", None, true);
    let lone = install(&user, "lone", Some(NEWER), false);
    let server = pid(&stats(&user, &old));
    alternate(&user, &[&lone, &old], server, 2);
    let s = stats(&user, &lone);
    assert_eq!(s["outdated"], false, "{s}");
    assert!(!user.runtime().join("ngd/newest-ngd").exists());
    assert_eq!(servers(&user).len(), 1);
}

#[test]
fn installs_of_one_version_change_nothing() {
    let user = User::new();
    let a = install(&user, "a", None, true);
    let b = install(&user, "b", None, true);
    let server = pid(&stats(&user, &a));
    alternate(&user, &[&b, &a], server, 2);
    assert_eq!(stats(&user, &b)["outdated"], false);
    assert!(!user.runtime().join("ngd/newest-ngd").exists());
    assert_eq!(servers(&user).len(), 1);
}

#[test]
fn a_server_started_by_hand_is_only_marked_outdated() {
    let user = User::new();
    let old = install(&user, "old", None, true);
    let new = install(&user, "new", Some(NEWER), true);
    std::fs::create_dir(user.runtime().join("ngd")).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        user.runtime().join("ngd"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let address = format!("local:{}", user.socket().display());
    let server = user
        .with_env(ClientCmd::new("ngd", old.join("ngd")))
        .args(["serve", "--listen", &address])
        .timeout(Duration::from_secs(60))
        .spawn();
    server.wait_for_stdout("listening on", Duration::from_secs(20));
    let by_hand = pid(&stats(&user, &old));
    stats(&user, &new);
    // Outdated, told, and still serving both installs.
    let s = stats(&user, &old);
    assert_eq!(s["outdated"], true, "{s}");
    assert_eq!(s["newer_ngd"]["version"], NEWER);
    let status = user.ngd().arg("status").run();
    assert!(
        status.stdout_text().contains(&format!(
            "outdated: a newer ngd ({NEWER}, {}) is installed",
            new.join("ngd").display()
        )),
        "{}",
        status.stdout_text()
    );
    alternate(&user, &[&new, &old], by_hand, 2);
    user.ngd().arg("stop").run().assert_success();
    server.wait().assert_success();
}
