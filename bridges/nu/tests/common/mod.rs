//! What the nu bridge's tests share: the peers (real `nu` and plugins from the peers
//! cache, installed by `scripts/peers/nu`), a bridge served in-process on a socket pair
//! and driven by `ngw::testing::Driver`, and the reference host `nu -c`.

#![allow(dead_code)]

use ngw::testing::{Driver, Request};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The peers cache.
pub fn peers() -> PathBuf {
    std::env::var_os("NGD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/ngd-peers")
        })
}

/// A peer binary; panics with how to install it when missing.
pub fn peer(name: &str) -> PathBuf {
    let p = peers().join("bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/peers/nu (or scripts/install-peers)",
        p.display()
    );
    p
}

/// A fake plugin for faults (`mode` as in `fixtures/nu_plugin_fake.py`), linked under a
/// name of its own in a temporary directory.
pub fn fake(dir: &Path, mode: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nu_plugin_fake.py");
    let link = dir.join(format!("nu_plugin_fake_{mode}"));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(src, &link).unwrap();
    link
}

/// Serves the bridge for `plugins` in a thread and drives it; `options` is the JSON of the
/// protocol keys. Returns the driver and the bridge's thread.
pub fn bridge(plugins: &[&Path], options: &str) -> (Driver, std::thread::JoinHandle<i32>) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let options: serde_json::Value = serde_json::from_str(options).unwrap();
    let config = ngw_vocab::BridgeConfig {
        name: "nu-test".into(),
        options: options.as_object().unwrap().clone(),
        ..Default::default()
    };
    let command: Vec<OsString> = plugins.iter().map(|p| p.as_os_str().to_owned()).collect();
    let handle = std::thread::spawn(move || {
        let channel = ngw::Channel::from_stream(theirs).host_features("mux,notices");
        ng_bridge_nu::serve(channel, command, &config)
    });
    let driver = Driver::over(ours).unwrap();
    (driver, handle)
}

/// A request for `command args...` with `stdin`, from this directory.
pub fn req(command: &str, args: &[&str], stdin: &[u8]) -> Request {
    Request::new(command, args.iter().copied())
        .stdin(stdin.to_vec())
        .cwd(std::env::current_dir().unwrap())
}

/// What `nu --no-config-file --plugins '[plugin]' -c script` prints (stdout), with `stdin`.
pub fn nu(plugin: &Path, script: &str, stdin: Option<&[u8]>) -> (String, String, i32) {
    let mut cmd = Command::new(peer("nu"));
    cmd.arg("--no-config-file")
        .arg("--plugins")
        .arg(format!("[{}]", plugin.display()))
        .arg("-c")
        .arg(script)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(data) = stdin {
        child.stdin.take().unwrap().write_all(data).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

/// Pids of running processes whose executable is `exe` and whose parent is this process.
pub fn plugin_pids(exe: &Path) -> Vec<i32> {
    let me = std::process::id().to_string();
    let exe = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // Fields after the command's closing parenthesis: state, ppid, ...
        let Some(rest) = stat.rsplit(')').next() else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1) != Some(&me.as_str()) || fields.first() == Some(&"Z") {
            continue;
        }
        if std::fs::read_link(e.path().join("exe")).ok().as_deref() == Some(exe.as_path()) {
            out.push(pid);
        }
    }
    out
}

/// A private copy of a peer binary in `dir` (same file name), so tests that count a
/// plugin's processes do not see each other's.
pub fn private_copy(name: &str, dir: &Path) -> PathBuf {
    let to = dir.join(name);
    ng_testkit::exe::copy_executable(&peer(name), &to);
    to
}

/// Small real files for the formats plugin: (command, file name, contents).
pub const FORMAT_SAMPLES: [(&str, &str, &str); 4] = [
    ("from ini", "a.ini", "[server]\nhost = example.org\nport = 8080\n\n[client]\nretries=3\nname = \"x y\"\n"),
    ("from eml", "a.eml", "From: Alice <alice@example.org>\r\nTo: Bob <bob@example.org>\r\nSubject: Lunch\r\nDate: Mon, 23 Nov 2026 12:00:00 +0000\r\n\r\nSee you at noon.\r\n"),
    ("from ics", "a.ics", "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//ngd//test//EN\r\nBEGIN:VEVENT\r\nUID:1@example.org\r\nDTSTAMP:20261123T120000Z\r\nDTSTART:20261124T090000Z\r\nSUMMARY:Standup\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"),
    ("from vcf", "a.vcf", "BEGIN:VCARD\r\nVERSION:3.0\r\nFN:Alice Example\r\nEMAIL:alice@example.org\r\nEND:VCARD\r\n"),
];
