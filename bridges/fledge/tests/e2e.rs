//! End to end: a real `ngd serve --config` with one `protocol = "fledge-v1"` table naming a
//! plugins directory, and the real `ng` client reached through symlinks named after the
//! plugins' commands.
//!
//! `ngd` and `ng` are found next to the test executable (`target/<profile>/`), or through
//! `NGD_BIN` / `NG_BIN`; build them first (`cargo build --workspace --bins`, as
//! `scripts/test` does).

mod common;

use common::World;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn our_binary(name: &str, var: &str) -> PathBuf {
    ngw::testing::workspace_binary(name, var)
}

struct Server {
    child: Child,
    world: World,
    sock: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve() -> Server {
    let world = World::new();
    let dir = world.tmp.path();
    let sock = dir.join("ngd.sock");
    let config = dir.join("ngd.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"local:{}\"]\n\n[[plugin]]\nname = \"fledge\"\nprotocol = \"fledge-v1\"\n\
             command = [\"fledge\"]\nplugins_dir = \"{}\"\nlog = \"{}\"\n",
            sock.display(),
            world.plugins.display(),
            dir.join("fledge.log").display()
        ),
    )
    .unwrap();
    let out = std::fs::File::create(dir.join("ngd.out")).unwrap();
    let child = Command::new(our_binary("ngd", "NGD_BIN"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env("HOME", &world.home)
        .env("XDG_CONFIG_HOME", &world.xdg)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let s = Server { child, world, sock };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(s.world.tmp.path().join("ngd.out"))
        .unwrap_or_default()
        .contains("listening on")
    {
        assert!(Instant::now() < deadline, "ngd did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

impl Server {
    /// Runs `name args` through a symlink `name` -> ng, in the test project.
    fn run(&self, name: &str, args: &[&str], stdin: &[u8]) -> (String, String, i32) {
        ngw::testing::run_symlinked_ng(self.world.tmp.path(), name, &self.sock, args, stdin, |c| {
            c.current_dir(&self.world.project)
                .env("HOME", &self.world.home)
                .env("XDG_CONFIG_HOME", &self.world.xdg);
        })
    }
}

#[test]
fn fledge_plugins_through_ngd_and_ng() {
    let s = serve();
    // Twice: the second run may be served by the spare started after the first.
    for _ in 0..2 {
        let (out, err, code) = s.run("hello", &["a", "b"], b"");
        assert_eq!((out.as_str(), code), ("hello a b\n", 0), "{err}");
    }
    // The plugin's own exit code reaches the client (fledge itself would say 1).
    let (out, err, code) = s.run("exitwith", &["3"], b"");
    assert_eq!((out.as_str(), code), ("about to exit\n", 3), "{err}");
    assert!(err.contains("failing on purpose"), "{err}");
    // Storage persists across invocations, in the plugin's state.json.
    let (out, err, code) = s.run("kv", &["set", "k", "v1"], b"");
    assert_eq!((out.as_str(), code), ("stored\n", 0), "{err}");
    let (out, err, code) = s.run("kv", &["get", "k"], b"");
    assert_eq!((out.as_str(), code), ("\"v1\"\n", 0), "{err}");
    assert_eq!(s.world.state("fledge-kv").unwrap()["k"], "v1");
}
