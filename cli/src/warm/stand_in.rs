//! Learning a shell launcher's `java` command line with a stand-in `java`: the way taken
//! where watching the launcher's `exec`s ([`super::launcher`]) is denied, and the way a
//! launcher that runs `java` from `PATH`, `JAVA_HOME` or `JAVACMD` is learned there. It
//! depends on nothing else of `ngd warm`, so both [`super::kind`] and [`super::launcher`]
//! use it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// How long a launcher may take to reach its `java` when probed.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The arguments the shell launcher `path` gives `java` (options, class path, main class
/// and its own arguments before the user's), learned by running it once with one marker
/// argument and a stand-in `java` first: on `PATH`, as `$JAVA_HOME/bin/java` and as
/// `$JAVACMD`. The stand-in records the arguments of the call that ends with the marker and
/// runs `real_java` for any other (a launcher may ask `java -version` first). Paths under
/// the stand-in's `JAVA_HOME` are given back under `real_java`'s.
pub fn probe_java_launcher(path: &Path, real_java: &Path) -> Result<Vec<String>, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new()
        .prefix("ngd-warm-java-")
        .tempdir()
        .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    let home = dir.path().join("jdk");
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    let out = dir.path().join("args");
    let marker = format!("ngd-warm-probe-{}", std::process::id());
    let stand_in = bin.join("java");
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do :; done\nif [ \"$a\" = {marker} ]; then\n  \
         for x in \"$@\"; do printf '%s\\0' \"$x\"; done > {out}\n  exit 0\nfi\n\
         exec {real} \"$@\"\n",
        out = sh_quote(&out.to_string_lossy()),
        real = sh_quote(&real_java.to_string_lossy()),
    );
    std::fs::write(&stand_in, script).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let mut search = std::ffi::OsString::from(&bin);
    search.push(":");
    search.push(path_var);
    let mut child = std::process::Command::new(path)
        .arg(&marker)
        .env("JAVA_HOME", &home)
        .env("JAVACMD", &stand_in)
        .env("PATH", search)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let started = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < PROBE_TIMEOUT => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("it did not reach java within {PROBE_TIMEOUT:?}"));
            }
        }
    }
    let recorded = std::fs::read(&out).map_err(|_| {
        "a shell script that did not run java when tried (with JAVA_HOME, JAVACMD and PATH          pointing at a stand-in): ngd cannot serve it warm exactly"
            .to_owned()
    })?;
    let mut args: Vec<String> = recorded
        .split(|&b| b == 0)
        .map(|w| OsStr::from_bytes(w).to_string_lossy().into_owned())
        .collect();
    if args.last().is_some_and(String::is_empty) {
        args.pop();
    }
    if args.pop().as_deref() != Some(marker.as_str()) {
        return Err("its java command line does not end with the user's arguments".to_owned());
    }
    let real_home = real_java
        .parent()
        .and_then(Path::parent)
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fake_home = home.to_string_lossy().into_owned();
    Ok(args
        .into_iter()
        .map(|a| a.replace(&fake_home, &real_home))
        .collect())
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
