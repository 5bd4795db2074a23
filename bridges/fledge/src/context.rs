//! Project context for `init` and the answers to `metadata`, computed from the client's
//! working directory and environment with the same git commands fledge 1.8.0 runs. The
//! git queries of `init` run at once (the remote's URL asked for `origin` alongside the
//! remote's name, and again only when the first remote has another name).

use crate::protocol::{Git, Project};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The client's directory and environment, for subprocesses run on its behalf.
#[derive(Debug, Clone)]
pub struct Client<'a> {
    /// Working directory (the project root, as fledge uses its own cwd).
    pub cwd: &'a Path,
    /// Environment.
    pub env: &'a [(OsString, OsString)],
}

impl Client<'_> {
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(args)
            .current_dir(self.cwd)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        c
    }

    fn git(&self, args: &[&str]) -> Option<Output> {
        self.command("git", args).output().ok()
    }
}

/// fledge's project type detection (`run::detect_project_type`).
pub fn language(dir: &Path) -> &'static str {
    let has = |f: &str| dir.join(f).exists();
    if has("Cargo.toml") {
        "rust"
    } else if has("package.json") {
        "node"
    } else if has("go.mod") {
        "go"
    } else if has("pyproject.toml") || has("setup.py") {
        "python"
    } else if has("Gemfile") {
        "ruby"
    } else if has("build.gradle") || has("build.gradle.kts") {
        "java-gradle"
    } else if has("pom.xml") {
        "java-maven"
    } else if has("Package.swift") {
        "swift"
    } else {
        "generic"
    }
}

/// `init.project` for the client's directory.
pub fn project(client: &Client<'_>) -> Project {
    let root = client.cwd;
    Project {
        name: root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "unknown".into()),
        root: root.to_string_lossy().into_owned(),
        language: language(root).into(),
        git: git(client),
    }
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Whether git could find a repository from the client's directory. `false` only when
/// certainly not: no `GIT_DIR`/`GIT_WORK_TREE` in the environment and no directory from
/// here up holding `.git` or looking like a bare repository. Saves starting git where
/// there is nothing to find.
fn maybe_in_repository(client: &Client<'_>) -> bool {
    if client
        .env
        .iter()
        .any(|(k, _)| k == "GIT_DIR" || k == "GIT_WORK_TREE" || k == "GIT_COMMON_DIR")
    {
        return true;
    }
    let looks = |dir: &Path| {
        dir.ancestors().any(|d| {
            d.join(".git").exists()
                || (d.join("HEAD").is_file()
                    && d.join("objects").is_dir()
                    && d.join("refs").is_dir())
        })
    };
    // Both the path as given and the physical one (git walks the latter).
    looks(client.cwd) || std::fs::canonicalize(client.cwd).is_ok_and(|p| looks(&p))
}

/// `init.project.git`: `None` outside a repository.
pub fn git(client: &Client<'_>) -> Option<Git> {
    if !maybe_in_repository(client) {
        return None;
    }
    // The remote's URL depends on the first remote's name; it is asked for `origin` (the
    // usual name, and the one used when there is no remote) at the same time as the rest,
    // and asked again only for another name.
    let (branch, dirty, remote, origin_url) = std::thread::scope(|s| {
        let dirty = s.spawn(|| client.git(&["status", "--porcelain"]));
        let remote = s.spawn(|| client.git(&["remote"]));
        let origin_url = s.spawn(|| client.git(&["remote", "get-url", "origin"]));
        let branch = client.git(&["rev-parse", "--abbrev-ref", "HEAD"]);
        (
            branch,
            dirty.join().ok().flatten(),
            remote.join().ok().flatten(),
            origin_url.join().ok().flatten(),
        )
    });
    let branch = branch
        .filter(|o| o.status.success())
        .map(|o| text(&o).trim().to_owned())?;
    let dirty = dirty.map(|o| !o.stdout.is_empty()).unwrap_or(false);
    let remote = remote
        .map(|o| text(&o).lines().next().unwrap_or("origin").to_owned())
        .unwrap_or_else(|| "origin".into());
    let url = if remote == "origin" {
        origin_url
    } else {
        client.git(&["remote", "get-url", &remote])
    };
    let remote_url = url
        .filter(|o| o.status.success())
        .map(|o| sanitize_remote_url(text(&o).trim()))
        .unwrap_or_default();
    Some(Git {
        branch,
        dirty,
        remote,
        remote_url,
    })
}

/// Drops credentials from an http(s) URL, as fledge does.
pub fn sanitize_remote_url(url: &str) -> String {
    for scheme in ["https://", "http://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            if let Some(at) = rest.find('@') {
                return format!("{scheme}{}", &rest[at + 1..]);
            }
            return url.to_owned();
        }
    }
    url.to_owned()
}

/// Whether an environment variable may be shown to a plugin (fledge's filter: no names
/// that look secret, no loader variables, no connection strings, no credentials in values).
pub fn env_is_safe(name: &str, value: &str) -> bool {
    const SENSITIVE: [&str; 9] = [
        "secret",
        "token",
        "password",
        "key",
        "credential",
        "auth",
        "private",
        "session",
        "cookie",
    ];
    const DANGEROUS: [&str; 4] = ["ld_preload", "ld_library_path", "dyld_", "kubeconfig"];
    let lower = name.to_lowercase();
    !(SENSITIVE.iter().any(|p| lower.contains(p))
        || DANGEROUS.iter().any(|p| lower.starts_with(p))
        || lower.ends_with("_url")
        || lower.ends_with("_uri")
        || lower.ends_with("_dsn")
        || (value.contains('@') && value.contains(':')))
}

fn lines(o: Option<Output>, need_success: bool, take: usize) -> Value {
    let v: Vec<Value> = o
        .filter(|o| !need_success || o.status.success())
        .map(|o| {
            text(&o)
                .lines()
                .take(take)
                .map(|l| Value::String(l.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    Value::Array(v)
}

/// The answer to a `metadata` request.
pub fn metadata(client: &Client<'_>, keys: &[String]) -> Value {
    let mut out = Map::new();
    for key in keys {
        let v = match key.as_str() {
            "fledge_config" => std::fs::read_to_string(client.cwd.join("fledge.toml"))
                .ok()
                .and_then(|t| t.parse::<toml::Value>().ok())
                .and_then(|t| serde_json::to_value(t).ok())
                .unwrap_or(Value::Null),
            "git_tags" => lines(
                client.git(&["tag", "--sort=-v:refname", "--no-column"]),
                true,
                100,
            ),
            "git_status" => lines(client.git(&["status", "--porcelain"]), false, usize::MAX),
            "git_log" => lines(client.git(&["log", "--oneline", "-20"]), false, usize::MAX),
            "env" => {
                let safe: BTreeMap<String, Value> = client
                    .env
                    .iter()
                    .filter_map(|(k, v)| Some((k.to_str()?, v.to_str()?)))
                    .filter(|(k, v)| env_is_safe(k, v))
                    .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                    .collect();
                Value::Object(safe.into_iter().collect())
            }
            _ => Value::Null,
        };
        out.insert(key.clone(), v);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_lose_credentials() {
        assert_eq!(
            sanitize_remote_url("https://user:tok@github.com/o/r"),
            "https://github.com/o/r"
        );
        assert_eq!(
            sanitize_remote_url("git@github.com:o/r"),
            "git@github.com:o/r"
        );
    }

    #[test]
    fn env_filter_drops_secrets() {
        assert!(env_is_safe("PATH", "/usr/bin"));
        for (k, v) in [
            ("GITHUB_TOKEN", "x"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("LD_PRELOAD", "x"),
            ("DATABASE_URL", "x"),
            ("PROXY", "http://u:p@host"),
            ("SSH_AUTH_SOCK", "/tmp/s"),
        ] {
            assert!(!env_is_safe(k, v), "{k}");
        }
    }

    #[test]
    fn the_remote_url_is_the_first_remotes() {
        let tmp = tempfile::tempdir().unwrap();
        let env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| k == "PATH")
            .chain([
                ("HOME".into(), tmp.path().into()),
                ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
            ])
            .collect();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        let client = Client {
            cwd: &repo,
            env: &env,
        };
        let git = |args: &[&str]| {
            let o = client.git(args).unwrap();
            assert!(o.status.success(), "git {args:?}");
        };
        let remote = || {
            let g = project(&client).git.unwrap();
            (g.branch, g.remote, g.remote_url)
        };
        git(&["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("a"), "a").unwrap();
        git(&["add", "a"]);
        git(&[
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "a",
        ]);
        // No remote: `origin`, whose URL git cannot give.
        assert_eq!(remote(), ("main".into(), "origin".into(), "".into()));
        // Another name: its own URL.
        git(&[
            "remote",
            "add",
            "upstream",
            "https://u:p@example.com/up.git",
        ]);
        assert_eq!(
            remote(),
            (
                "main".into(),
                "upstream".into(),
                "https://example.com/up.git".into()
            )
        );
        git(&["remote", "remove", "upstream"]);
        git(&["remote", "add", "origin", "git@example.com:o/r.git"]);
        assert_eq!(
            remote(),
            (
                "main".into(),
                "origin".into(),
                "git@example.com:o/r.git".into()
            )
        );
    }

    #[test]
    fn project_outside_a_repository_has_no_git() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("go.mod"), "module x").unwrap();
        let env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| k == "PATH" || k == "HOME")
            .chain([("GIT_CEILING_DIRECTORIES".into(), tmp.path().into())])
            .collect();
        let p = project(&Client {
            cwd: tmp.path(),
            env: &env,
        });
        assert_eq!(p.language, "go");
        assert_eq!(p.git, None);
        let meta = metadata(
            &Client {
                cwd: tmp.path(),
                env: &env,
            },
            &["env".into(), "nope".into(), "fledge_config".into()],
        );
        assert_eq!(meta["nope"], Value::Null);
        assert_eq!(meta["fledge_config"], Value::Null);
        assert!(meta["env"]["PATH"].is_string());
    }
}
