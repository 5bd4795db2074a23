//! `ngd warm` of a shell script that launches `java`: the `java` command line it runs,
//! served by `ngw-java`.
//!
//! [`learn`] runs the launcher once in `ngd warm`'s own directory and environment with its
//! `exec`s watched ([`ng_server::plugin::launcher::learn`]): whatever way it reaches
//! `java` (from `PATH`, `JAVA_HOME`, `JAVACMD`, or by an absolute path such as Debian's
//! `/usr/bin/rhino` running `/usr/bin/java`), that `exec` is recorded and stopped before
//! the JVM starts, so the program's `main` never runs. The table it makes ([`Learned`])
//! runs `ngw-java` with those arguments and the JDK the launcher chose (`JAVA_HOME`), and
//! says `launcher = true`: the server learns the command line again in each directory
//! and environment a shim's session comes from (a launcher may read the project's
//! configuration).
//!
//! Where the system denies watching (no seccomp user notification), a launcher whose
//! text names no absolute `java` is run with a stand-in `java` first on `PATH`, as
//! `$JAVA_HOME/bin/java` and as `$JAVACMD` ([`super::stand_in::probe_java_launcher`]); its
//! table then keeps the command line learned here, whatever the directory. One that names
//! a `java` by its path is refused with the reason, since running it could run the
//! program.

use std::path::{Path, PathBuf};

use ng_server::plugin::launcher::{self, Context, LearnError};

/// How long a launcher may take to reach its `java` when learned.
const LEARN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What was learned of a launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    /// `java`'s arguments before the user's.
    pub java_args: Vec<String>,
    /// The JDK the launcher runs (`None`: the one on the worker's `PATH`).
    pub java_home: Option<PathBuf>,
    /// Whether the server learns it again in each directory and environment.
    pub relearn: bool,
}

/// The `java` command line of the shell launcher `path`; `find_java` finds the `java` on
/// `PATH` for the stand-in's other calls where watching is denied. The error is the
/// reason for the user.
pub fn learn(path: &Path, find_java: impl FnOnce() -> Option<PathBuf>) -> Result<Learned, String> {
    let context = Context::current().map_err(|e| format!("cannot read the directory: {e}"))?;
    match launcher::learn(path, &context, LEARN_TIMEOUT) {
        Ok(jvm) => Ok(Learned {
            java_args: jvm.args,
            java_home: Some(jvm.java_home),
            relearn: true,
        }),
        Err(LearnError::Denied(e)) => without_watching(path, find_java, &e),
        Err(e) => Err(e.to_string()),
    }
}

/// Where watching is denied (`denied`): the stand-in `java`, unless the launcher's text
/// names a `java` by its path.
fn without_watching(
    path: &Path,
    find_java: impl FnOnce() -> Option<PathBuf>,
    denied: &std::io::Error,
) -> Result<Learned, String> {
    let denial = LearnError::Denied(std::io::Error::new(denied.kind(), denied.to_string()));
    if names_java_by_path(path) {
        return Err(format!(
            "it runs java by its path, and {denial}; ngd cannot serve it warm here"
        ));
    }
    let Some(java) = find_java() else {
        return Err(format!("no java on PATH, and {denial}"));
    };
    let java_args = super::stand_in::probe_java_launcher(path, &java)
        .map_err(|reason| format!("{reason} ({denial})"))?;
    Ok(Learned {
        java_args,
        java_home: None,
        relearn: false,
    })
}

/// True when a launcher's text names a `java` by a path (`/usr/bin/java`,
/// `/usr/lib/jvm/...`, `.../bin/java`): the stand-in on `PATH` would not be run.
fn names_java_by_path(path: &Path) -> bool {
    let Ok(text) = std::fs::read(path) else {
        return true;
    };
    let has = |needle: &[u8]| text.windows(needle.len()).any(|w| w == needle);
    has(b"/bin/java") || has(b"/jvm/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launcher_naming_java_by_its_path_is_refused_where_watching_is_denied() {
        let d = tempfile::tempdir().unwrap();
        let rhino = d.path().join("rhino");
        std::fs::write(
            &rhino,
            "#!/bin/sh\nJAVA_CMD=\"/usr/bin/java\"\n$JAVA_CMD -cp x Main \"$@\"\n",
        )
        .unwrap();
        assert!(names_java_by_path(&rhino));
        let denied = std::io::Error::from_raw_os_error(libc::EPERM);
        let reason = without_watching(&rhino, || None, &denied).unwrap_err();
        assert!(reason.contains("runs java by its path"), "{reason}");
        assert!(reason.contains("seccomp"), "{reason}");
        let on_path = d.path().join("tool");
        std::fs::write(&on_path, "#!/bin/sh\nexec java -cp x Main \"$@\"\n").unwrap();
        assert!(!names_java_by_path(&on_path));
        let reason = without_watching(&on_path, || None, &denied).unwrap_err();
        assert!(reason.contains("no java on PATH"), "{reason}");
    }
}
