//! Server configuration: the `ngd.toml` file, its defaults, and listen addresses.
//!
//! `ngd` reads one TOML file: the one named by `--config FILE`, or
//! else `$XDG_CONFIG_HOME/ngd/ngd.toml` (`~/.config/ngd/ngd.toml` when `XDG_CONFIG_HOME` is
//! unset or relative). With no file at the default place `ngd` runs on the defaults below; a
//! file named explicitly must exist. Unknown keys are errors, reported with their line and
//! column, so a typo never silently falls back to a default.
//!
//! A complete file, every key at its default except the examples in `listen` and
//! `[aliases]`:
//!
//! ```toml
//! # Where to listen. Absent or empty: the default Unix socket
//! # ($XDG_RUNTIME_DIR/ngd/ngd.sock or /tmp/ngd-<uid>/ngd.sock) and 127.0.0.1:2113.
//! listen = ["127.0.0.1:2113", "[::1]:2113", "local:/run/user/1000/ngd/ngd.sock"]
//! allow_remote = false          # required to listen on a non-loopback address
//! heartbeat_timeout_ms = 10000  # client silent this long while running: gone (0: never)
//! header_timeout_ms = 10000     # the A/E/D.../C header must arrive within this (0: no limit)
//! max_chunk_bytes = 8388608     # largest single chunk accepted (8 MiB)
//! max_header_bytes = 16777216   # largest header (all A/E/D/L chunks together, 16 MiB)
//! max_connections = 1024        # connections served at once; the next 64 are refused (exit 69)
//! nail_threads = 512            # in-process commands running at once (an elastic bound)
//! shutdown_grace_ms = 5000      # how long running commands get to finish on shutdown
//! log_level = "info"            # tracing filter; absent: RUST_LOG, else "info"
//! memory_budget_mb = 1024       # all plugins' workers together; least recently used give way
//!
//! [aliases]                     # alias = "command"; an alias never names another alias
//! cat = "ng-cat"
//! ```
//!
//! [`ServerConfig`] is the parsed file. Validation that needs no I/O (ranges, remote
//! addresses without `allow_remote`, alias chains) happens in [`ServerConfig::validate`],
//! which [`ServerConfig::load`] runs; call it again after overriding fields from the command
//! line. This module does not bind anything: see [`crate::security`].

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use ng_proto::paths;

/// The config file's name inside `$XDG_CONFIG_HOME/ngd/`.
pub const CONFIG_FILE_NAME: &str = "ngd.toml";

/// The prefix that marks a Unix socket path in a listen address, as in the stock client's
/// `--nailgun-server local:/path`.
pub const UNIX_PREFIX: &str = "local:";

/// Chunk lengths at or above 2^31 are protocol errors (docs/protocol.md, "Framing").
const MAX_CHUNK_CEILING: u32 = i32::MAX as u32;

/// Why the configuration could not be loaded or is not acceptable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `--config FILE` names a file that does not exist.
    #[error("config file {} does not exist", .path.display())]
    NotFound {
        /// The file.
        path: PathBuf,
    },
    /// The file exists but could not be read.
    #[error("cannot read config file {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The file is not valid TOML or does not fit the schema (unknown key, wrong type, bad
    /// listen address). The message carries the line and column.
    #[error("invalid config file {}: {source}", .path.display())]
    Parse {
        /// The file (`<inline>` for text parsed with [`ServerConfig::from_toml_str`]).
        path: PathBuf,
        /// The TOML error, whose message shows the offending line.
        source: toml::de::Error,
    },
    /// A non-loopback TCP address without `allow_remote = true`.
    #[error(
        "refusing to listen on {addr}: it is reachable from other machines, and ngd runs \
         commands with your rights; set allow_remote = true in the config to allow it"
    )]
    RemoteNotAllowed {
        /// The address.
        addr: SocketAddr,
    },
    /// A numeric setting outside its allowed range.
    #[error("{field} = {value} is out of range: {expected}")]
    OutOfRange {
        /// The key.
        field: &'static str,
        /// The value given.
        value: u64,
        /// What is allowed.
        expected: &'static str,
    },
    /// A `[[plugin]]` table that cannot work.
    #[error("{message}")]
    BadPlugin {
        /// What is wrong, naming the plugin.
        message: String,
    },
    /// An `[aliases]` entry that cannot work.
    #[error("alias {name:?} = {target:?}: {problem}")]
    BadAlias {
        /// The alias name.
        name: String,
        /// The command it names.
        target: String,
        /// What is wrong.
        problem: &'static str,
    },
}

/// Why a listen address did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ListenAddrError {
    /// `local:` with nothing after it.
    #[error("`local:` needs a socket path after it, e.g. local:/tmp/ngd.sock")]
    EmptyUnixPath,
    /// Neither `IP:PORT` nor `local:PATH`.
    #[error(
        "invalid listen address {input:?}: {hint}; expected e.g. 127.0.0.1:2113, [::1]:2113 \
         or local:/path/ngd.sock"
    )]
    Invalid {
        /// What was given.
        input: String,
        /// What looks wrong.
        hint: &'static str,
    },
}

/// One address to listen on: a TCP socket address or a Unix socket path.
///
/// Written `IP:PORT` (`127.0.0.1:2113`, `[::1]:2113`) or `local:PATH`, in the config's
/// `listen` list and in `ngd serve --listen`. Host names are not resolved: a listener's
/// address must be unambiguous, and "localhost" may name both families.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    /// A TCP listener.
    Tcp(SocketAddr),
    /// A Unix socket at this path.
    Unix(PathBuf),
}

impl ListenAddr {
    /// The addresses used when none are configured: the default Unix socket for `uid` and
    /// the stock clients' `127.0.0.1:2113`.
    pub fn defaults(xdg_runtime_dir: Option<&OsStr>, uid: u32) -> Vec<ListenAddr> {
        vec![
            ListenAddr::Unix(paths::default_socket_path(xdg_runtime_dir, uid)),
            ListenAddr::Tcp(default_tcp_addr()),
        ]
    }

    /// Whether only this machine can reach it: a Unix socket or a loopback TCP address.
    pub fn is_local(&self) -> bool {
        match self {
            ListenAddr::Tcp(addr) => crate::security::is_loopback(addr.ip()),
            ListenAddr::Unix(_) => true,
        }
    }
}

/// `127.0.0.1:2113`, the same as [`ng_proto::paths::DEFAULT_TCP_ADDR`] (a test pins it).
fn default_tcp_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 2113))
}

impl FromStr for ListenAddr {
    type Err = ListenAddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix(UNIX_PREFIX) {
            if path.is_empty() {
                return Err(ListenAddrError::EmptyUnixPath);
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(ListenAddr::Tcp(addr));
        }
        Err(ListenAddrError::Invalid {
            input: s.to_owned(),
            hint: listen_addr_hint(s),
        })
    }
}

/// Guesses what is wrong with a listen address that did not parse.
fn listen_addr_hint(s: &str) -> &'static str {
    const BAD_PORT: &str = "the port must be a number from 0 to 65535";
    const NO_PORT: &str = "the port is missing";
    const HOST_NAME: &str = "host names are not resolved; give an IP address";
    if s.is_empty() {
        return "it is empty";
    }
    if s.contains('/') {
        return "a Unix socket path needs the local: prefix";
    }
    if let Some(rest) = s.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((ip, _)) if ip.parse::<std::net::Ipv6Addr>().is_err() => {
                "the part in brackets is not an IPv6 address"
            }
            Some((_, "")) => NO_PORT,
            Some((_, port)) if port.starts_with(':') => BAD_PORT,
            _ => "write an IPv6 address in brackets followed by the port, as [::1]:2113",
        };
    }
    if s.parse::<std::net::Ipv4Addr>().is_ok() {
        return NO_PORT;
    }
    if s.matches(':').count() > 1 {
        return "write an IPv6 address in brackets followed by the port, as [::1]:2113";
    }
    match s.split_once(':') {
        Some((host, _)) if host.parse::<std::net::Ipv4Addr>().is_ok() => BAD_PORT,
        Some(_) => HOST_NAME,
        None if s.bytes().all(|b| b.is_ascii_digit()) => {
            "give an address as well as the port, as 127.0.0.1:PORT"
        }
        None => HOST_NAME,
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => write!(f, "{addr}"),
            ListenAddr::Unix(path) => write!(f, "{UNIX_PREFIX}{}", path.display()),
        }
    }
}

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for ListenAddr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The log line format (`log_format`, `ngd serve --log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "unknown log format '{other}' (expected text or json)"
            )),
        }
    }
}

/// Everything `ngd.toml` can set. Each field's doc names its key and default.
///
/// Unknown keys are rejected. New sections extend this struct as new fields (the plugin
/// host will add `[[plugin]]` entries as a `plugin: Vec<PluginConfig>` field here); until a
/// section exists, using it is an "unknown field" error rather than being ignored.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerConfig {
    /// `listen`: addresses to listen on. Empty (the default) means
    /// [`ListenAddr::defaults`]: the default Unix socket in the private runtime directory,
    /// and `127.0.0.1:2113` where stock clients look. `ngd serve --listen` replaces it.
    pub listen: Vec<ListenAddr>,
    /// `allow_remote` (default `false`): whether a non-loopback TCP address may be listened
    /// on. There is no authentication for remote peers, only for local ones (by uid), so
    /// this opens the server to anyone who can reach the address.
    pub allow_remote: bool,
    /// `heartbeat_timeout_ms` (default 10 000): while a command runs, a client that sends
    /// nothing (not even a heartbeat) for this long is considered gone. The C client sends
    /// heartbeats about once a second, the Python client twice. 0 disables the check.
    pub heartbeat_timeout_ms: u64,
    /// `header_timeout_ms` (default 10 000): a connection must finish its header (arguments,
    /// environment, working directory, up to the command) within this long. 0 disables the
    /// limit.
    pub header_timeout_ms: u64,
    /// `max_chunk_bytes` (default 8 MiB): the largest chunk payload accepted; a larger
    /// length closes the connection before anything is allocated. Below 2^31.
    pub max_chunk_bytes: u32,
    /// `max_header_bytes` (default 16 MiB): the most bytes of header chunks accepted before
    /// the command chunk (a whole environment and argv fit in a few hundred KiB).
    pub max_header_bytes: u64,
    /// `max_connections` (default 1024): connections served at once. Beyond it the server
    /// stops accepting until one closes; further clients wait in the kernel backlog.
    pub max_connections: usize,
    /// `nail_threads` (default 512): the most threads running in-process commands at
    /// once (the pool grows on demand and shrinks when idle). Commands beyond it queue.
    pub nail_threads: usize,
    /// `shutdown_grace_ms` (default 5000): on shutdown, running commands get this long to
    /// finish before they are cancelled and their clients told.
    pub shutdown_grace_ms: u64,
    /// `log_level` (default unset): a `tracing` filter such as `"info"` or
    /// `"ng_server=debug"`. Unset: `RUST_LOG` if set, else `info`.
    pub log_level: Option<String>,
    /// `log_file` (default unset: stderr): append the log to this file instead.
    pub log_file: Option<PathBuf>,
    /// `log_format` (default `"text"`): `"text"` lines, or `"json"`, one object per line.
    pub log_format: LogFormat,
    /// `idle_exit_ms` (default unset): stop after this long without any connection; 0
    /// never. Unset: a server started by `ng`'s auto-start stops after
    /// [`ServerConfig::DEFAULT_AUTOSTART_IDLE_EXIT_MS`], one started by hand never does.
    pub idle_exit_ms: Option<u64>,
    /// `memory_budget_mb` (default 1024): the most memory all plugins' workers may hold
    /// together, each with its descendants (their summed PSS: `plugin::footprint`); above it, the least recently used idle plugins stop their workers
    /// until their next session. 0: no budget. Changing it needs a restart.
    pub memory_budget_mb: u64,
    /// `[aliases]`: alias name → command name, as `ng-alias` would add. An alias must name
    /// a command, not another alias.
    pub aliases: BTreeMap<String, String>,
    /// `[[plugin]]`: warm worker pools (`docs/ngw.md` §10).
    #[serde(rename = "plugin")]
    pub plugins: Vec<crate::plugin::PluginConfig>,
}

impl ServerConfig {
    /// Default `heartbeat_timeout_ms`.
    pub const DEFAULT_HEARTBEAT_TIMEOUT_MS: u64 = 10_000;
    /// Default `header_timeout_ms`.
    pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;
    /// Default `max_chunk_bytes`: 8 MiB, as [`ng_proto::codec::Limits`].
    pub const DEFAULT_MAX_CHUNK_BYTES: u32 = 8 << 20;
    /// Default `max_header_bytes`: 16 MiB.
    pub const DEFAULT_MAX_HEADER_BYTES: u64 = 16 << 20;
    /// Default `max_connections`.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
    /// Default `shutdown_grace_ms`.
    pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 5_000;
    /// Default `memory_budget_mb`: 1 GiB, what a laptop spares for twenty warm programs'
    /// recently used few.
    pub const DEFAULT_MEMORY_BUDGET_MB: u64 = 1024;
    /// `idle_exit_ms` of an auto-started server when the file does not set it: 15 minutes.
    pub const DEFAULT_AUTOSTART_IDLE_EXIT_MS: u64 = 15 * 60 * 1000;

    /// The default `nail_threads`: 512.
    pub fn default_nail_threads() -> usize {
        // The pool is elastic: threads start on demand and exit when idle, so this is only
        // a bound. It must be generous: commands may block on a client's interactive stdin,
        // and a small bound would let a few of them starve every other command.
        512
    }

    /// Loads the configuration: from `explicit` (`--config FILE`) if given, which must
    /// exist; else from [`default_config_path`] if that file exists; else the defaults.
    /// Then the drop-in files of the `conf.d` directory next to that file (whether or not
    /// the file exists) are added ([`conf_d_of`]). The result is validated.
    pub fn load(explicit: Option<&Path>) -> Result<LoadedConfig, ConfigError> {
        let (path, required) = match explicit {
            Some(p) => (Some(p.to_path_buf()), true),
            None => (default_config_path(), false),
        };
        let Some(path) = path else {
            return Ok(LoadedConfig {
                config: ServerConfig::default(),
                path: None,
                fragments: Vec::new(),
            });
        };
        let (mut config, found) = match std::fs::read_to_string(&path) {
            Ok(text) => (Self::parse_unvalidated(&text, &path)?, true),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !required => {
                (ServerConfig::default(), false)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ConfigError::NotFound { path })
            }
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        let fragments = config.add_fragments(&conf_d_of(&path))?;
        config.validate()?;
        Ok(LoadedConfig {
            config,
            path: found.then_some(path),
            fragments,
        })
    }

    /// Adds the `*.toml` files of `dir` (in name order; hidden files are skipped, and a
    /// missing directory has none) and returns their paths. Each holds `[[plugin]]` tables
    /// and `[aliases]` (see [`Fragment`]); plugin paths are relative to `dir`. A plugin or
    /// alias defined twice is an error naming both places.
    pub fn add_fragments(&mut self, dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
        let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|x| x == "toml")
                        && p.file_name()
                            .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
                })
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: dir.to_path_buf(),
                    source,
                })
            }
        };
        files.sort();
        let mut origin: BTreeMap<String, String> = self
            .plugins
            .iter()
            .map(|p| (p.name.clone(), "the configuration file".to_owned()))
            .collect();
        for file in &files {
            let fragment = Fragment::from_file(file)?;
            for plugin in fragment.plugins {
                let here = file.display().to_string();
                if let Some(there) = origin.insert(plugin.name.clone(), here.clone()) {
                    return Err(ConfigError::BadPlugin {
                        message: format!(
                            "plugin '{}' is defined twice: in {there} and in {here}",
                            plugin.name
                        ),
                    });
                }
                self.plugins.push(plugin);
            }
            for (name, target) in fragment.aliases {
                if self.aliases.contains_key(&name) {
                    return Err(ConfigError::BadAlias {
                        name,
                        target,
                        problem: "defined twice (also in another file)",
                    });
                }
                self.aliases.insert(name, target);
            }
        }
        Ok(files)
    }

    /// Reads and validates one file, which must exist.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        Self::load(Some(path)).map(|loaded| loaded.config)
    }

    /// Parses and validates config text (errors name the file as `<inline>`).
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Self::parse(text, Path::new("<inline>"))
    }

    fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config = Self::parse_unvalidated(text, path)?;
        config.validate()?;
        Ok(config)
    }

    /// Parses one file and resolves its plugins' paths against its directory.
    fn parse_unvalidated(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let mut config: ServerConfig =
            toml::from_str(text).map_err(|source| ConfigError::Parse {
                path: path.to_path_buf(),
                source,
            })?;
        // Plugin paths are relative to the config file's directory.
        let base = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() && path != Path::new("<inline>") => {
                dir.to_path_buf()
            }
            _ => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        };
        let base = std::fs::canonicalize(&base).unwrap_or(base);
        for plugin in &mut config.plugins {
            if !plugin.command.is_empty() {
                plugin.resolve_paths(&base);
            }
        }
        Ok(config)
    }

    /// Checks the rules the types cannot express: a non-loopback listen address needs
    /// `allow_remote`; size limits, `max_connections` and `nail_threads` are positive (and
    /// the chunk limit below 2^31); aliases are non-empty and do not chain.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for addr in &self.listen {
            if let ListenAddr::Tcp(tcp) = addr {
                if !addr.is_local() && !self.allow_remote {
                    return Err(ConfigError::RemoteNotAllowed { addr: *tcp });
                }
            }
        }
        let positive = |field, value: u64| {
            if value == 0 {
                Err(ConfigError::OutOfRange {
                    field,
                    value,
                    expected: "must be greater than 0",
                })
            } else {
                Ok(())
            }
        };
        positive("max_chunk_bytes", u64::from(self.max_chunk_bytes))?;
        positive("max_header_bytes", self.max_header_bytes)?;
        positive("max_connections", self.max_connections as u64)?;
        positive("nail_threads", self.nail_threads as u64)?;
        if self.max_chunk_bytes > MAX_CHUNK_CEILING {
            return Err(ConfigError::OutOfRange {
                field: "max_chunk_bytes",
                value: u64::from(self.max_chunk_bytes),
                expected: "must be below 2^31 (2147483648)",
            });
        }
        let mut names = std::collections::BTreeSet::new();
        for plugin in &self.plugins {
            plugin
                .validate()
                .map_err(|message| ConfigError::BadPlugin { message })?;
            if !names.insert(plugin.name.as_str()) {
                return Err(ConfigError::BadPlugin {
                    message: format!("two plugins are named '{}'", plugin.name),
                });
            }
        }
        for (name, target) in &self.aliases {
            let problem = if name.is_empty() {
                Some("the alias name is empty")
            } else if target.is_empty() {
                Some("the command name is empty")
            } else if name == target {
                Some("an alias cannot name itself")
            } else if self.aliases.contains_key(target) {
                Some("an alias must name a command, not another alias")
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(ConfigError::BadAlias {
                    name: name.clone(),
                    target: target.clone(),
                    problem,
                });
            }
        }
        Ok(())
    }

    /// The addresses to listen on: `listen`, or [`ListenAddr::defaults`] for this process
    /// (`$XDG_RUNTIME_DIR` and its effective uid) when `listen` is empty.
    pub fn listen_addrs(&self) -> Vec<ListenAddr> {
        if self.listen.is_empty() {
            ListenAddr::defaults(
                std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
                crate::security::current_uid(),
            )
        } else {
            self.listen.clone()
        }
    }

    /// `heartbeat_timeout_ms` as a duration; `None` when disabled (0).
    pub fn heartbeat_timeout(&self) -> Option<Duration> {
        nonzero_millis(self.heartbeat_timeout_ms)
    }

    /// `header_timeout_ms` as a duration; `None` when disabled (0).
    pub fn header_timeout(&self) -> Option<Duration> {
        nonzero_millis(self.header_timeout_ms)
    }

    /// `shutdown_grace_ms` as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }
}

/// `ms` milliseconds, or `None` for 0 (which turns a timeout off).
fn nonzero_millis(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: Vec::new(),
            allow_remote: false,
            heartbeat_timeout_ms: Self::DEFAULT_HEARTBEAT_TIMEOUT_MS,
            header_timeout_ms: Self::DEFAULT_HEADER_TIMEOUT_MS,
            max_chunk_bytes: Self::DEFAULT_MAX_CHUNK_BYTES,
            max_header_bytes: Self::DEFAULT_MAX_HEADER_BYTES,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            nail_threads: Self::default_nail_threads(),
            shutdown_grace_ms: Self::DEFAULT_SHUTDOWN_GRACE_MS,
            log_level: None,
            log_file: None,
            log_format: LogFormat::Text,
            idle_exit_ms: None,
            memory_budget_mb: Self::DEFAULT_MEMORY_BUDGET_MB,
            aliases: BTreeMap::new(),
            plugins: Vec::new(),
        }
    }
}

/// A configuration and the file it came from.
#[derive(Clone, Debug)]
pub struct LoadedConfig {
    /// The validated configuration.
    pub config: ServerConfig,
    /// The file read, or `None` when running on defaults (no file at the default place).
    pub path: Option<PathBuf>,
    /// The drop-in files added, in the order read.
    pub fragments: Vec<PathBuf>,
}

/// The drop-in directory's name, next to the configuration file.
pub const CONF_D: &str = "conf.d";

/// The drop-in directory for the configuration file `config`: `conf.d` beside it.
pub fn conf_d_of(config: &Path) -> PathBuf {
    config
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(CONF_D)
}

/// One file of the drop-in directory: `[[plugin]]` tables and `[aliases]`, nothing that
/// concerns the server as a whole, and optionally the `[warm]` record of `ngd warm`, which
/// wrote the file. Unknown keys are errors, as in the configuration file; the `[warm]`
/// table is the tool's own, kept as it is and read by `ngd warm`, `unwarm` and `list`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fragment {
    /// `[[plugin]]`.
    #[serde(rename = "plugin")]
    pub plugins: Vec<crate::plugin::PluginConfig>,
    /// `[aliases]`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub aliases: BTreeMap<String, String>,
    /// `[warm]`: what `ngd warm` made this file for, uninterpreted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm: Option<toml::Table>,
}

impl Fragment {
    /// Reads and parses one drop-in file, resolving its plugins' paths against its
    /// directory.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses a drop-in file's text; `path` names it in errors and gives the directory
    /// plugin paths are relative to.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let mut fragment: Fragment = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let base = conf_d_base(path);
        for plugin in &mut fragment.plugins {
            if !plugin.command.is_empty() {
                plugin.resolve_paths(&base);
            }
        }
        Ok(fragment)
    }
}

/// The directory a drop-in file's relative paths start from: its own.
fn conf_d_base(path: &Path) -> PathBuf {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(
            || std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            Path::to_path_buf,
        );
    std::fs::canonicalize(&dir).unwrap_or(dir)
}

/// The default config file for this process, from `XDG_CONFIG_HOME` and `HOME`.
pub fn default_config_path() -> Option<PathBuf> {
    config_path_for(
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

/// The default config file given the two variables: `$XDG_CONFIG_HOME/ngd/ngd.toml` when
/// `XDG_CONFIG_HOME` is an absolute path (the XDG spec says to ignore a relative one), else
/// `$HOME/.config/ngd/ngd.toml`; `None` with neither.
pub fn config_path_for(xdg_config_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    let base = match xdg_config_home.map(Path::new) {
        Some(dir) if dir.is_absolute() => dir.to_path_buf(),
        _ => Path::new(home.filter(|h| !h.is_empty())?).join(".config"),
    };
    Some(base.join("ngd").join(CONFIG_FILE_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_formats_parse() {
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert!("xml".parse::<LogFormat>().unwrap_err().contains("xml"));
    }

    #[test]
    fn defaults_are_the_documented_values() {
        let c = ServerConfig::default();
        assert!(c.listen.is_empty());
        assert!(!c.allow_remote);
        assert_eq!(c.heartbeat_timeout(), Some(Duration::from_secs(10)));
        assert_eq!(c.header_timeout(), Some(Duration::from_secs(10)));
        assert_eq!(c.max_chunk_bytes, 8 * 1024 * 1024);
        assert_eq!(c.max_header_bytes, 16 * 1024 * 1024);
        assert_eq!(c.max_connections, 1024);
        assert_eq!(c.nail_threads, 512);
        assert_eq!(c.shutdown_grace(), Duration::from_secs(5));
        assert_eq!(c.log_level, None);
        assert!(c.aliases.is_empty());
        c.validate().unwrap();
        // Same limit as the codec's own default.
        assert_eq!(
            c.max_chunk_bytes,
            ng_proto::codec::Limits::default().max_chunk_len
        );
        assert_eq!(
            default_tcp_addr(),
            ng_proto::paths::DEFAULT_TCP_ADDR
                .parse::<SocketAddr>()
                .unwrap()
        );
    }

    #[test]
    fn empty_text_gives_the_defaults() {
        assert_eq!(
            ServerConfig::from_toml_str("").unwrap(),
            ServerConfig::default()
        );
        assert_eq!(
            ServerConfig::from_toml_str("# nothing\n\nlisten = []\n").unwrap(),
            ServerConfig::default()
        );
    }

    #[test]
    fn default_listen_addrs_are_the_unix_socket_and_loopback_2113() {
        let addrs = ListenAddr::defaults(Some(OsStr::new("/run/user/1000")), 1000);
        assert_eq!(
            addrs,
            vec![
                ListenAddr::Unix(PathBuf::from("/run/user/1000/ngd/ngd.sock")),
                ListenAddr::Tcp("127.0.0.1:2113".parse().unwrap()),
            ]
        );
        let c = ServerConfig::default();
        assert_eq!(c.listen_addrs().len(), 2);
        assert!(c.listen_addrs().iter().all(ListenAddr::is_local));
    }

    #[test]
    fn full_example_file_parses() {
        let text = r#"
listen = ["127.0.0.1:2113", "[::1]:2114", "local:/run/user/1000/ngd/ngd.sock"]
allow_remote = false
heartbeat_timeout_ms = 2500
header_timeout_ms = 3000
max_chunk_bytes = 1048576
max_header_bytes = 4194304
max_connections = 64
nail_threads = 3
shutdown_grace_ms = 100
log_level = "ng_server=debug"

[aliases]
cat = "ng-cat"
version = "ng-version"
"#;
        let c = ServerConfig::from_toml_str(text).unwrap();
        assert_eq!(
            c.listen,
            vec![
                ListenAddr::Tcp("127.0.0.1:2113".parse().unwrap()),
                ListenAddr::Tcp("[::1]:2114".parse().unwrap()),
                ListenAddr::Unix(PathBuf::from("/run/user/1000/ngd/ngd.sock")),
            ]
        );
        assert_eq!(c.heartbeat_timeout(), Some(Duration::from_millis(2500)));
        assert_eq!(c.header_timeout_ms, 3000);
        assert_eq!(c.max_chunk_bytes, 1 << 20);
        assert_eq!(c.max_header_bytes, 4 << 20);
        assert_eq!(c.max_connections, 64);
        assert_eq!(c.nail_threads, 3);
        assert_eq!(c.shutdown_grace_ms, 100);
        assert_eq!(c.log_level.as_deref(), Some("ng_server=debug"));
        assert_eq!(c.aliases.get("cat").map(String::as_str), Some("ng-cat"));
        assert_eq!(c.aliases.len(), 2);
        // And it round-trips through the serializer.
        let again = toml::to_string(&c).unwrap();
        assert_eq!(ServerConfig::from_toml_str(&again).unwrap(), c);
    }

    #[test]
    fn the_module_doc_example_parses() {
        let doc = include_str!("config.rs");
        let start = doc.find("//! ```toml\n").unwrap() + "//! ```toml\n".len();
        let end = start + doc[start..].find("//! ```\n").unwrap();
        let text: String = doc[start..end]
            .lines()
            .map(|l| {
                l.strip_prefix("//! ")
                    .unwrap_or(l.trim_start_matches("//!"))
            })
            .collect::<Vec<_>>()
            .join("\n");
        let c = ServerConfig::from_toml_str(&text).unwrap();
        assert_eq!(c.listen.len(), 3);
        assert_eq!(c.log_level.as_deref(), Some("info"));
    }

    #[test]
    fn unknown_key_is_an_error_with_line_and_column() {
        let text = "allow_remote = false\nheartbeat_timeout_ms = 5\nheartbeat_timout_ms = 7\n";
        let err = ServerConfig::from_toml_str(text).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ConfigError::Parse { .. }), "{err:?}");
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("column 1"), "{msg}");
        assert!(msg.contains("heartbeat_timout_ms"), "{msg}");
        assert!(msg.contains("unknown field"), "{msg}");
    }

    #[test]
    fn unknown_section_is_an_error_too() {
        let text = "[[plugins]]\nname = \"x\"\n";
        let msg = ServerConfig::from_toml_str(text).unwrap_err().to_string();
        assert!(msg.contains("unknown field `plugins`"), "{msg}");
        assert!(msg.contains("line 1"), "{msg}");
    }

    #[test]
    fn plugin_tables_parse_resolve_and_validate() {
        let text = "[[plugin]]\nname = \"py\"\ncommand = [\"./w.py\"]\ncwd = \"/srv\"\n";
        let c = ServerConfig::from_toml_str(text).unwrap();
        assert_eq!(c.plugins[0].command[0], "/srv/./w.py");
        assert_eq!(c.plugins[0].max_workers(), 2);
        let twice = format!("{text}{text}");
        let msg = ServerConfig::from_toml_str(&twice).unwrap_err().to_string();
        assert!(msg.contains("two plugins are named 'py'"), "{msg}");
        let bad = "[[plugin]]\nname = \"p\"\ncommand = [\"x\"]\nmin_workers = 3\n";
        let msg = ServerConfig::from_toml_str(bad).unwrap_err().to_string();
        assert!(msg.contains("min_workers"), "{msg}");
        let unknown = "[[plugin]]\nname = \"p\"\ncommand = [\"x\"]\nworkerz = 3\n";
        let msg = ServerConfig::from_toml_str(unknown)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("unknown field `workerz`"), "{msg}");
    }

    #[test]
    fn wrong_type_is_an_error_with_position() {
        let msg = ServerConfig::from_toml_str("\nmax_connections = \"many\"\n")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("line 2"), "{msg}");
        let msg = ServerConfig::from_toml_str("max_chunk_bytes = -1\n")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("line 1"), "{msg}");
    }

    #[test]
    fn bad_listen_address_in_file_names_it_and_its_position() {
        let text = "heartbeat_timeout_ms = 5\nlisten = [\"127.0.0.1:2113\", \"localhost:2113\"]\n";
        let msg = ServerConfig::from_toml_str(text).unwrap_err().to_string();
        assert!(msg.contains("line 2"), "{msg}");
        assert!(msg.contains("localhost:2113"), "{msg}");
        assert!(msg.contains("host names are not resolved"), "{msg}");
    }

    #[test]
    fn listen_addr_parses_and_displays() {
        for text in [
            "127.0.0.1:2113",
            "[::1]:2113",
            "0.0.0.0:0",
            "local:/tmp/ngd.sock",
        ] {
            let addr: ListenAddr = text.parse().unwrap();
            assert_eq!(addr.to_string(), text);
        }
        assert_eq!(
            "local:rel/ngd.sock".parse::<ListenAddr>().unwrap(),
            ListenAddr::Unix(PathBuf::from("rel/ngd.sock"))
        );
    }

    #[test]
    fn listen_addr_errors_explain_themselves() {
        let hint = |s: &str| match s.parse::<ListenAddr>().unwrap_err() {
            ListenAddrError::Invalid { hint, input } => {
                assert_eq!(input, s);
                hint
            }
            ListenAddrError::EmptyUnixPath => "empty unix path",
        };
        assert_eq!(hint("local:"), "empty unix path");
        assert_eq!(hint(""), "it is empty");
        assert_eq!(
            hint("/tmp/ngd.sock"),
            "a Unix socket path needs the local: prefix"
        );
        assert_eq!(hint("127.0.0.1"), "the port is missing");
        assert_eq!(
            hint("::1:2113"),
            "write an IPv6 address in brackets followed by the port, as [::1]:2113"
        );
        assert_eq!(
            hint("::1"),
            "write an IPv6 address in brackets followed by the port, as [::1]:2113"
        );
        assert_eq!(
            hint("localhost:2113"),
            "host names are not resolved; give an IP address"
        );
        assert_eq!(
            hint("127.0.0.1:99999"),
            "the port must be a number from 0 to 65535"
        );
        assert_eq!(
            hint("127.0.0.1:http"),
            "the port must be a number from 0 to 65535"
        );
        assert_eq!(hint("[::1]"), "the port is missing");
        assert_eq!(hint("[::1]:x"), "the port must be a number from 0 to 65535");
        assert_eq!(
            hint("[nope]:1"),
            "the part in brackets is not an IPv6 address"
        );
        assert_eq!(
            hint("2113"),
            "give an address as well as the port, as 127.0.0.1:PORT"
        );
        assert_eq!(
            hint("localhost"),
            "host names are not resolved; give an IP address"
        );
        let msg = "nope".parse::<ListenAddr>().unwrap_err().to_string();
        assert!(msg.contains("127.0.0.1:2113"), "{msg}");
        assert!(msg.contains("local:"), "{msg}");
    }

    #[test]
    fn remote_address_needs_allow_remote() {
        let err = ServerConfig::from_toml_str("listen = [\"0.0.0.0:2113\"]\n").unwrap_err();
        assert!(
            matches!(err, ConfigError::RemoteNotAllowed { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("allow_remote = true"), "{err}");
        let c = ServerConfig::from_toml_str("allow_remote = true\nlisten = [\"0.0.0.0:2113\"]\n")
            .unwrap();
        assert!(c.allow_remote);
        // Loopback in either family and Unix sockets never need it.
        ServerConfig::from_toml_str(
            "listen = [\"127.0.0.2:1\", \"[::1]:1\", \"[::ffff:127.0.0.1]:1\", \"local:/x\"]\n",
        )
        .unwrap();
    }

    #[test]
    fn ranges_are_checked() {
        for (text, field) in [
            ("max_header_bytes = 0", "max_header_bytes"),
            ("max_chunk_bytes = 0", "max_chunk_bytes"),
            ("max_connections = 0", "max_connections"),
            ("nail_threads = 0", "nail_threads"),
            ("max_chunk_bytes = 2147483648", "max_chunk_bytes"),
        ] {
            match ServerConfig::from_toml_str(text).unwrap_err() {
                ConfigError::OutOfRange { field: f, .. } => assert_eq!(f, field),
                other => panic!("{text}: {other:?}"),
            }
        }
        ServerConfig::from_toml_str("max_chunk_bytes = 2147483647").unwrap();
        // Zero turns the timeouts off.
        let c =
            ServerConfig::from_toml_str("heartbeat_timeout_ms = 0\nheader_timeout_ms = 0").unwrap();
        assert_eq!(c.heartbeat_timeout(), None);
        assert_eq!(c.header_timeout(), None);
    }

    #[test]
    fn aliases_must_name_commands() {
        let err =
            ServerConfig::from_toml_str("[aliases]\na = \"b\"\nb = \"ng-cat\"\n").unwrap_err();
        assert!(err.to_string().contains("not another alias"), "{err}");
        let err = ServerConfig::from_toml_str("[aliases]\na = \"a\"\n").unwrap_err();
        assert!(err.to_string().contains("itself"), "{err}");
        let err = ServerConfig::from_toml_str("[aliases]\na = \"\"\n").unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }

    #[test]
    fn config_path_follows_xdg_rules() {
        assert_eq!(
            config_path_for(Some(OsStr::new("/cfg")), Some(OsStr::new("/home/u"))),
            Some(PathBuf::from("/cfg/ngd/ngd.toml"))
        );
        assert_eq!(
            config_path_for(Some(OsStr::new("relative")), Some(OsStr::new("/home/u"))),
            Some(PathBuf::from("/home/u/.config/ngd/ngd.toml"))
        );
        assert_eq!(
            config_path_for(None, Some(OsStr::new("/home/u"))),
            Some(PathBuf::from("/home/u/.config/ngd/ngd.toml"))
        );
        assert_eq!(config_path_for(None, None), None);
        assert_eq!(
            config_path_for(Some(OsStr::new("")), Some(OsStr::new(""))),
            None
        );
    }

    #[test]
    fn explicit_file_must_exist_and_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.toml");
        let err = ServerConfig::load(Some(&missing)).unwrap_err();
        assert!(matches!(err, ConfigError::NotFound { .. }), "{err:?}");
        assert!(err.to_string().contains("nope.toml"), "{err}");
        assert!(err.to_string().contains("does not exist"), "{err}");

        let file = dir.path().join("ngd.toml");
        std::fs::write(&file, "max_connections = 7\n").unwrap();
        let loaded = ServerConfig::load(Some(&file)).unwrap();
        assert_eq!(loaded.config.max_connections, 7);
        assert_eq!(loaded.path.as_deref(), Some(file.as_path()));

        std::fs::write(&file, "max_connections = 7\nbogus = 1\n").unwrap();
        let msg = ServerConfig::from_file(&file).unwrap_err().to_string();
        assert!(msg.contains(&file.display().to_string()), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");

        // A directory is not a config file.
        let err = ServerConfig::load(Some(dir.path())).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
    }

    #[test]
    fn drop_in_files_are_added_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ngd.toml");
        std::fs::write(
            &file,
            "[[plugin]]\nname = \"main\"\ncommand = [\"m\"]\n[aliases]\nx = \"main\"\n",
        )
        .unwrap();
        let conf_d = dir.path().join(CONF_D);
        std::fs::create_dir(&conf_d).unwrap();
        let plugin =
            |name: &str| format!("[[plugin]]\nname = \"{name}\"\ncommand = [\"./{name}\"]\n");
        std::fs::write(conf_d.join("b.toml"), plugin("b")).unwrap();
        std::fs::write(
            conf_d.join("a.toml"),
            format!("{}[aliases]\ny = \"a\"\n", plugin("a")),
        )
        .unwrap();
        // Hidden files (temporary ones) and other extensions are skipped.
        std::fs::write(conf_d.join(".c.toml.tmp-1-0"), "garbage [").unwrap();
        std::fs::write(conf_d.join("README"), "garbage [").unwrap();
        let loaded = ServerConfig::load(Some(&file)).unwrap();
        let names: Vec<&str> = loaded
            .config
            .plugins
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, ["main", "a", "b"]);
        assert_eq!(
            loaded.fragments,
            [conf_d.join("a.toml"), conf_d.join("b.toml")]
        );
        assert_eq!(loaded.config.aliases.len(), 2);
        // Paths are relative to the drop-in directory.
        let real = std::fs::canonicalize(&conf_d).unwrap();
        assert_eq!(
            loaded.config.plugins[1].command[0],
            real.join("./a").to_string_lossy()
        );

        // Without the configuration file at the default place, its drop-ins still count.
        std::fs::remove_file(&file).unwrap();
        let mut config = ServerConfig::default();
        assert_eq!(config.add_fragments(&conf_d).unwrap().len(), 2);
        assert_eq!(config.plugins.len(), 2);

        // A plugin defined twice names both files; a syntax error names its file and line.
        std::fs::write(conf_d.join("c.toml"), plugin("a")).unwrap();
        std::fs::write(&file, "").unwrap();
        let msg = ServerConfig::load(Some(&file)).unwrap_err().to_string();
        assert!(msg.contains("plugin 'a' is defined twice"), "{msg}");
        assert!(msg.contains("a.toml") && msg.contains("c.toml"), "{msg}");
        std::fs::write(conf_d.join("c.toml"), "[[plugin]\n").unwrap();
        let msg = ServerConfig::load(Some(&file)).unwrap_err().to_string();
        assert!(msg.contains("c.toml"), "{msg}");
        assert!(msg.contains("line 1"), "{msg}");
        // Only plugins and aliases belong in a drop-in file.
        std::fs::write(conf_d.join("c.toml"), "max_connections = 3\n").unwrap();
        let msg = ServerConfig::load(Some(&file)).unwrap_err().to_string();
        assert!(msg.contains("unknown field `max_connections`"), "{msg}");
    }
}
