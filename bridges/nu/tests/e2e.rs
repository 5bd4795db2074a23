//! End to end: a real `ngd serve --config` with a `protocol = "nu"` plugin table, and the
//! real `ng` client reached through `inc` and `from` symlinks, against the real plugins.
//!
//! `ngd` and `ng` are found next to the test executable (`target/<profile>/`), or through
//! `NGD_BIN` / `NG_BIN`; build them first (`cargo build -p ngd -p ng-client`, or
//! `cargo build --workspace --bins` as `scripts/test` does).

mod common;

use common::{nu, peer};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn our_binary(name: &str, var: &str) -> PathBuf {
    ngw::testing::workspace_binary(name, var)
}

struct Server {
    child: Child,
    dir: tempfile::TempDir,
    sock: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(plugins: &[&Path]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ngd.sock");
    let config = dir.path().join("ngd.toml");
    let list: Vec<String> = plugins
        .iter()
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    std::fs::write(
        &config,
        format!(
            "listen = [\"local:{}\"]\n\n[[plugin]]\nname = \"nu\"\nprotocol = \"nu\"\ncommand = [{}]\nlog = \"{}\"\n",
            sock.display(),
            list.join(", "),
            dir.path().join("nu.log").display()
        ),
    )
    .unwrap();
    let out = std::fs::File::create(dir.path().join("ngd.out")).unwrap();
    let child = Command::new(our_binary("ngd", "NGD_BIN"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let s = Server { child, dir, sock };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(s.dir.path().join("ngd.out"))
        .unwrap_or_default()
        .contains("listening on")
    {
        assert!(Instant::now() < deadline, "ngd did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

impl Server {
    /// Runs `name args` through a symlink `name` -> ng.
    fn run(&self, name: &str, args: &[&str], stdin: &[u8]) -> (String, String, i32) {
        ngw::testing::run_symlinked_ng(self.dir.path(), name, &self.sock, args, stdin, |_| {})
    }
}

#[test]
fn inc_and_from_ini_through_ngd_and_ng() {
    let inc = peer("nu_plugin_inc");
    let formats = peer("nu_plugin_formats");
    let s = serve(&[&inc, &formats]);
    let (out, err, code) = s.run("inc", &["--major"], b"1.2.3");
    assert_eq!((out.as_str(), code), ("2.0.0\n", 0), "{err}");
    let (out, err, code) = s.run(
        "inc",
        &["v", "--minor", "--nu-input", "json"],
        br#"{"v":"1.2.3"}"#,
    );
    let (want, _, _) = nu(&inc, "{v: '1.2.3'} | inc v --minor | to json", None);
    assert_eq!((out, code), (want, 0), "{err}");
    let ini = b"[a]\nk = v\nn = 1\n";
    let (out, err, code) = s.run("from", &["ini"], ini);
    let (want, _, _) = nu(&formats, "'[a]\nk = v\nn = 1\n' | from ini | to json", None);
    assert_eq!((out, code), (want, 0), "{err}");
    let (_, err, code) = s.run("inc", &["x", "y"], b"");
    assert_eq!(code, 2);
    assert!(err.contains("Extra positional argument."), "{err}");
}

/// Ctrl-C from a real client: `ng` forwards SIGINT (the exact-session `signals`
/// extension), ngd sends the bridge `i SIGINT`, and the plugin gets `Signal Interrupt`.
/// The plugin here is the protocol fake in `wait` mode (it waits for a signal and says
/// which it got): no real plugin has a call that runs long enough to interrupt.
#[test]
fn ctrl_c_from_ng_reaches_the_plugin_as_signal_interrupt() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = common::fake(dir.path(), "wait");
    let s = serve(&[&plugin]);
    let link = s.dir.path().join("fake");
    std::os::unix::fs::symlink(our_binary("ng", "NG_BIN"), &link).unwrap();
    let child = Command::new(&link)
        .arg("--nailgun-server")
        .arg(format!("local:{}", s.sock.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("got Interrupt"), "{out:?}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}
