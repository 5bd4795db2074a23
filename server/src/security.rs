//! Listener security: the private runtime directory, safe Unix socket binding, and the
//! peer-uid check every accepted connection goes through.
//!
//! `ngd` runs commands with its owner's rights, so it must only ever serve its owner
//! (DESIGN.md decision 2). This module owns the three guards that make that true by default:
//!
//! - [`RuntimeDir`]: the directory holding the default socket is created with mode 0700 and,
//!   when it already exists, must be a real directory (not a symlink) that we own. A wrong
//!   (too open) mode on our own directory is repaired; anything else is refused with a
//!   [`SecurityError`] that names the path and the problem.
//! - [`bind_unix`]: binds a Unix socket with mode 0600 set explicitly (never left to the
//!   umask), replaces a dead server's leftover socket file but refuses to touch a live
//!   server's socket or a file that is not a socket, and checks the `sun_path` limit up
//!   front. The returned [`SocketFileGuard`] removes the socket file on drop, but only if the
//!   path still names the very socket we created.
//! - [`PeerCheck`]: given an accepted connection, finds out which uid is on the other end
//!   (`SO_PEERCRED` for Unix sockets; on Linux, the owner of the client's socket in
//!   `/proc/net/tcp{,6}` for TCP) and decides [`PeerVerdict::Allow`] or
//!   [`PeerVerdict::Refuse`] with a message meant for the user at the other end. A peer whose
//!   uid cannot be determined is refused: the check fails closed.
//!
//! The mode bits are defence in depth; the uid check is what actually keeps other users out,
//! and it runs on every connection whatever the socket's mode or address.
//!
//! The `/proc/net/tcp` parsing is a pure function over the file's text
//! ([`parse_proc_net_tcp`], [`find_socket_owner`]) so it can be tested on fixture lines.
//! Peer lookups for TCP are Linux-only; elsewhere [`peer_uid_tcp`] reports `Unsupported`
//! and loopback TCP peers are therefore refused.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ng_proto::paths;

/// Mode of the runtime directory: owner only.
pub const RUNTIME_DIR_MODE: u32 = 0o700;

/// Mode of every Unix socket file `ngd` creates: owner read/write only.
pub const SOCKET_MODE: u32 = 0o600;

/// The size of `sockaddr_un.sun_path` on this system. A path must be at most one byte
/// shorter, leaving room for the terminating NUL (std and the stock C client both insist).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub const SUN_PATH_LEN: usize = 108;
/// The size of `sockaddr_un.sun_path` on this system (104 on macOS and the BSDs).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub const SUN_PATH_LEN: usize = 104;

/// How long [`bind_unix`] waits for another process holding the bind lock before going on
/// without it.
const BIND_LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Why a runtime directory or socket could not be set up safely.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecurityError {
    /// `mkdir` of the runtime directory (or one of its missing parents) failed.
    #[error("cannot create runtime directory {}: {source}", .path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `lstat`/`open` of a path we had to inspect failed.
    #[error("cannot inspect {}: {source}", .path.display())]
    Inspect {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The runtime directory is a symbolic link, which could point anywhere.
    #[error(
        "refusing to use runtime directory {}: it is a symbolic link, not a directory; \
         remove it and start ngd again",
        .path.display()
    )]
    DirIsSymlink {
        /// The directory path.
        path: PathBuf,
    },
    /// The runtime directory path exists but is not a directory.
    #[error("refusing to use runtime directory {}: it exists and is not a directory", .path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// The runtime directory belongs to another user, who could read or replace our socket.
    #[error(
        "refusing to use runtime directory {}: it belongs to uid {owner}, not to uid {uid} \
         (this server's user); remove it or point XDG_RUNTIME_DIR elsewhere",
        .path.display()
    )]
    DirNotOwned {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our effective uid.
        uid: u32,
    },
    /// The runtime directory's parent lets other users rename or replace entries in it.
    #[error(
        "refusing to use runtime directory {}: its parent {} is writable by other users \
         (mode {mode:04o}, owner uid {owner}) and not sticky",
        .path.display(), .parent.display()
    )]
    UnsafeParent {
        /// The runtime directory.
        path: PathBuf,
        /// Its parent.
        parent: PathBuf,
        /// The parent's permission bits.
        mode: u32,
        /// The parent's owner.
        owner: u32,
    },
    /// The runtime directory was ours but too open, and `chmod 0700` failed.
    #[error("cannot restrict runtime directory {} to mode 0700: {source}", .path.display())]
    Chmod {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The directory changed under us between two checks (someone is racing us).
    #[error("refusing to use runtime directory {}: it was replaced while being checked", .path.display())]
    DirReplaced {
        /// The directory.
        path: PathBuf,
    },
    /// The socket path does not fit in `sockaddr_un.sun_path`.
    #[error(
        "socket path {} is {len} bytes long; Unix socket paths are limited to {max} bytes \
         on this system; choose a shorter path",
        .path.display()
    )]
    SocketPathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The longest path this system accepts.
        max: usize,
    },
    /// A live server answers on the socket path.
    #[error("another ngd is already listening on {}", .path.display())]
    AlreadyListening {
        /// The socket path.
        path: PathBuf,
    },
    /// Something that is not a socket sits where the socket should go; we never delete it.
    #[error(
        "refusing to bind {}: a file that is not a socket is in the way (not removing it)",
        .path.display()
    )]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// Probing an existing socket file failed in a way that says neither "dead" nor "live".
    #[error(
        "cannot tell whether {} belongs to a running server: {source}; remove it if no ngd \
         is running",
        .path.display()
    )]
    ProbeSocket {
        /// The socket path.
        path: PathBuf,
        /// The error from `connect`.
        source: io::Error,
    },
    /// Removing a dead server's socket file failed.
    #[error("cannot remove stale socket {}: {source}", .path.display())]
    RemoveStale {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `bind` itself failed.
    #[error("cannot bind {}: {source}", .path.display())]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `chmod 0600` on the fresh socket failed.
    #[error("cannot set mode 0600 on socket {}: {source}", .path.display())]
    SocketMode {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// Our effective uid: the owner files we create get, and what `SO_PEERCRED` reports.
pub fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

// ---------------------------------------------------------------------------------------
// Runtime directory
// ---------------------------------------------------------------------------------------

/// The private runtime directory that holds the default socket, checked or created.
///
/// Holding a `RuntimeDir` means the directory existed, was a real directory owned by us with
/// mode 0700 when it was opened. It is not removed on drop: it is shared by successive
/// servers and by the client, which computes the same path with
/// [`ng_proto::paths::runtime_dir`].
#[derive(Clone, Debug)]
pub struct RuntimeDir {
    /// The checked directory.
    path: PathBuf,
}

impl RuntimeDir {
    /// The default runtime directory for this process: `$XDG_RUNTIME_DIR/ngd` when
    /// `XDG_RUNTIME_DIR` is absolute, else `/tmp/ngd-<uid>`.
    pub fn default_path() -> PathBuf {
        paths::runtime_dir(
            std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
            current_uid(),
        )
    }

    /// Creates or checks [`RuntimeDir::default_path`].
    pub fn open_default() -> Result<Self, SecurityError> {
        Self::open(Self::default_path())
    }

    /// Creates `path` (and any missing parents) with mode 0700, or checks the existing one.
    ///
    /// An existing directory must be a real directory (checked with `lstat`, so a symlink is
    /// refused), owned by our effective uid, inside a parent that other users cannot write
    /// to (or that is sticky, like `/tmp`). If it is ours with any other mode than 0700 (too
    /// open, or unusable), the mode is reset to 0700 and a warning is logged.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, SecurityError> {
        let path = path.into();
        let uid = current_uid();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if fs::symlink_metadata(parent).is_err() {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(RUNTIME_DIR_MODE)
                    .create(parent)
                    .map_err(|source| SecurityError::CreateDir {
                        path: parent.to_path_buf(),
                        source,
                    })?;
            }
        }
        match fs::DirBuilder::new().mode(RUNTIME_DIR_MODE).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(SecurityError::CreateDir { path, source }),
        }
        check_private_dir(&path, uid)?;
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The default socket path inside it ([`ng_proto::paths::SOCKET_NAME`]).
    pub fn socket_path(&self) -> PathBuf {
        self.path.join(paths::SOCKET_NAME)
    }
}

/// Verifies that `path` is a private directory of `uid`, repairing a too-open mode.
fn check_private_dir(path: &Path, uid: u32) -> Result<(), SecurityError> {
    let inspect = |source| SecurityError::Inspect {
        path: path.to_path_buf(),
        source,
    };
    let meta = fs::symlink_metadata(path).map_err(inspect)?;
    if meta.file_type().is_symlink() {
        return Err(SecurityError::DirIsSymlink {
            path: path.to_path_buf(),
        });
    }
    if !meta.is_dir() {
        return Err(SecurityError::NotADirectory {
            path: path.to_path_buf(),
        });
    }
    if meta.uid() != uid {
        return Err(SecurityError::DirNotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    check_parent(path, uid)?;
    // Exactly rwx for the owner: more lets others in; less (a umask of 0777 at creation)
    // would leave a directory we cannot use.
    if meta.mode() & 0o777 == RUNTIME_DIR_MODE {
        return Ok(());
    }
    // Repair through a descriptor opened without following links, and make sure it is the
    // same directory we just inspected, so a swap between the checks cannot redirect the
    // chmod.
    let dir = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(inspect)?;
    let fmeta = dir.metadata().map_err(inspect)?;
    if fmeta.dev() != meta.dev() || fmeta.ino() != meta.ino() || fmeta.uid() != uid {
        return Err(SecurityError::DirReplaced {
            path: path.to_path_buf(),
        });
    }
    dir.set_permissions(Permissions::from_mode(RUNTIME_DIR_MODE))
        .map_err(|source| SecurityError::Chmod {
            path: path.to_path_buf(),
            source,
        })?;
    tracing::warn!(
        path = %path.display(),
        old_mode = format_args!("{:04o}", meta.mode() & 0o7777),
        "runtime directory had the wrong mode; reset it to 0700"
    );
    Ok(())
}

/// Refuses a runtime directory whose parent other users could use to swap it out.
///
/// The parent must be owned by root or by us, and if group or others may write to it, it
/// must be sticky (so they cannot rename or delete our entries), as `/tmp` is.
fn check_parent(path: &Path, uid: u32) -> Result<(), SecurityError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let meta = fs::metadata(&parent).map_err(|source| SecurityError::Inspect {
        path: parent.clone(),
        source,
    })?;
    let mode = meta.mode() & 0o7777;
    let writable_by_others = mode & 0o022 != 0;
    let sticky = mode & 0o1000 != 0;
    let trusted_owner = meta.uid() == 0 || meta.uid() == uid;
    if !trusted_owner || (writable_by_others && !sticky) {
        return Err(SecurityError::UnsafeParent {
            path: path.to_path_buf(),
            parent,
            mode,
            owner: meta.uid(),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Unix socket binding
// ---------------------------------------------------------------------------------------

/// Removes a bound socket file when dropped, if the path still names the socket we created.
///
/// The guard remembers the socket file's device and inode. If the file has since been
/// replaced (say our socket was deleted by hand and another server bound the same path),
/// the guard leaves the new file alone. On Linux it also holds an `O_PATH` descriptor on
/// the file, which keeps the inode allocated, so a replacement can never reuse its number
/// and be mistaken for ours; elsewhere inode reuse is improbable but not excluded. Held by
/// the server's listener next to the socket itself.
#[derive(Debug)]
pub struct SocketFileGuard {
    /// The socket path (made absolute at bind time, so a later `chdir` does not matter).
    path: PathBuf,
    /// Device of the socket file we created.
    dev: u64,
    /// Inode of the socket file we created.
    ino: u64,
    /// Linux: an `O_PATH` descriptor pinning that inode (see above).
    _pin: Option<File>,
}

impl SocketFileGuard {
    /// Makes a guard for the socket file just bound at `path`, after checking that it is a
    /// socket (someone could have swapped it in the instant after `bind`).
    fn new(path: &Path) -> Result<Self, SecurityError> {
        let inspect = |source| SecurityError::Inspect {
            path: path.to_path_buf(),
            source,
        };
        let pin = pin_file(path).map_err(inspect)?;
        let meta = match &pin {
            Some(file) => file.metadata(),
            None => fs::symlink_metadata(path),
        }
        .map_err(inspect)?;
        if !meta.file_type().is_socket() {
            return Err(SecurityError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        Ok(Self {
            path: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
            dev: meta.dev(),
            ino: meta.ino(),
            _pin: pin,
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `path` still names the socket file this guard was made for.
    pub fn is_intact(&self) -> bool {
        fs::symlink_metadata(&self.path)
            .map(|m| m.dev() == self.dev && m.ino() == self.ino)
            .unwrap_or(false)
    }
}

impl Drop for SocketFileGuard {
    fn drop(&mut self) {
        if self.is_intact() {
            if let Err(e) = fs::remove_file(&self.path) {
                tracing::debug!(path = %self.path.display(), error = %e, "could not remove socket file");
            }
        }
    }
}

/// Opens `path` itself (not a symlink's target) with `O_PATH`, which works on sockets.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn pin_file(path: &Path) -> io::Result<Option<File>> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map(Some)
}

/// No `O_PATH` here: the guard goes by device and inode alone.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn pin_file(_path: &Path) -> io::Result<Option<File>> {
    Ok(None)
}

/// Checks that `path` fits in `sockaddr_un.sun_path` with its terminating NUL.
pub fn check_socket_path_len(path: &Path) -> Result<(), SecurityError> {
    let len = path.as_os_str().len();
    let max = SUN_PATH_LEN - 1;
    if len > max {
        return Err(SecurityError::SocketPathTooLong {
            path: path.to_path_buf(),
            len,
            max,
        });
    }
    Ok(())
}

/// What is at a socket path before we bind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Occupant {
    /// Nothing.
    Nobody,
    /// A socket nobody listens on: a dead server's leftover.
    Stale,
    /// A server accepts (or has a full backlog, which also means it is alive).
    Live,
}

/// Binds a listening Unix socket at `path` with mode 0600, replacing a stale socket file.
///
/// - If a socket file exists and a connection to it is refused, it is a dead server's
///   leftover: it is removed and the bind proceeds.
/// - If a server answers there, the result is [`SecurityError::AlreadyListening`].
/// - If the path holds anything that is not a socket, the result is
///   [`SecurityError::NotASocket`] and the file is left alone.
/// - A path too long for `sun_path` is [`SecurityError::SocketPathTooLong`].
///
/// The check-then-bind sequence holds an advisory `flock` on the parent directory so two
/// servers started at once cannot both decide a socket is stale and delete each other's
/// fresh one. The mode is set with `chmod` right after `bind` (not through the process-wide
/// umask, which other threads may rely on); the peer uid check covers the instant between.
///
/// The listener is blocking, as std creates it; call `set_nonblocking(true)` before handing
/// it to an event loop.
pub fn bind_unix(path: &Path) -> Result<(UnixListener, SocketFileGuard), SecurityError> {
    check_socket_path_len(path)?;
    let _lock = DirLock::acquire(path.parent());

    match probe_socket(path)? {
        Occupant::Nobody => {}
        Occupant::Live => {
            return Err(SecurityError::AlreadyListening {
                path: path.to_path_buf(),
            })
        }
        Occupant::Stale => {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(SecurityError::RemoveStale {
                        path: path.to_path_buf(),
                        source,
                    })
                }
            }
            tracing::info!(path = %path.display(), "removed a stale socket left by a dead server");
        }
    }

    let listener = UnixListener::bind(path).map_err(|source| {
        if source.kind() == io::ErrorKind::AddrInUse {
            SecurityError::AlreadyListening {
                path: path.to_path_buf(),
            }
        } else {
            SecurityError::Bind {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    // From here on, an error drops the guard, which removes the socket we just created.
    let guard = SocketFileGuard::new(path)?;
    fs::set_permissions(path, Permissions::from_mode(SOCKET_MODE)).map_err(|source| {
        SecurityError::SocketMode {
            path: path.to_path_buf(),
            source,
        }
    })?;
    Ok((listener, guard))
}

/// Finds out what currently occupies `path`.
fn probe_socket(path: &Path) -> Result<Occupant, SecurityError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Occupant::Nobody),
        Err(source) => {
            return Err(SecurityError::Inspect {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(SecurityError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    // A non-blocking connect never hangs on a wedged server with a full backlog: that
    // comes back as EAGAIN, which means "alive" just as much as a completed connect.
    let probe_err = |source| SecurityError::ProbeSocket {
        path: path.to_path_buf(),
        source,
    };
    let addr = socket2::SockAddr::unix(path).map_err(probe_err)?;
    let sock = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)
        .map_err(probe_err)?;
    sock.set_nonblocking(true).map_err(probe_err)?;
    match sock.connect(&addr) {
        Ok(()) => Ok(Occupant::Live),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Occupant::Live),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(Occupant::Live),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(Occupant::Stale),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Occupant::Nobody),
        Err(source) => Err(probe_err(source)),
    }
}

/// An advisory exclusive `flock` on a directory, released on drop.
///
/// Best effort: if the directory cannot be opened or the lock stays taken for
/// [`BIND_LOCK_PATIENCE`] (anyone who can read the directory can hold it), binding goes on
/// unlocked; the lock only narrows a start-up race between two servers.
#[derive(Debug)]
struct DirLock {
    /// The locked directory; closing it releases the lock.
    _dir: Option<File>,
}

impl DirLock {
    fn acquire(dir: Option<&Path>) -> Self {
        let dir = match dir {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)
        {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "bind lock unavailable");
                return Self { _dir: None };
            }
        };
        let deadline = Instant::now() + BIND_LOCK_PATIENCE;
        loop {
            // SAFETY: a valid open descriptor owned by `file`.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Self { _dir: Some(file) };
            }
            let err = io::Error::last_os_error();
            let busy =
                err.kind() == io::ErrorKind::WouldBlock || err.kind() == io::ErrorKind::Interrupted;
            if !busy || Instant::now() >= deadline {
                tracing::debug!(dir = %dir.display(), error = %err, "binding without the bind lock");
                return Self { _dir: None };
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

// ---------------------------------------------------------------------------------------
// Peer credentials
// ---------------------------------------------------------------------------------------

/// The effective uid of the process at the other end of a connected Unix socket.
///
/// Linux uses `SO_PEERCRED` (the credentials at `connect` time); macOS and the BSDs use
/// `getpeereid`. Elsewhere this returns an `Unsupported` error, which the peer check treats
/// as "unknown" and refuses. Accepts a socket or a bare `RawFd`.
pub fn peer_uid_unix(sock: &impl AsRawFd) -> io::Result<u32> {
    peer_uid_fd(sock.as_raw_fd())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn peer_uid_fd(fd: RawFd) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are live locals; the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<libc::ucred>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "SO_PEERCRED returned a short credentials structure",
        ));
    }
    Ok(cred.uid)
}

#[cfg(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
))]
fn peer_uid_fd(fd: RawFd) -> io::Result<u32> {
    let mut uid: libc::uid_t = 0;
    let mut gid: libc::gid_t = 0;
    // SAFETY: both out-pointers are live locals.
    let rc = unsafe { libc::getpeereid(fd, &mut uid, &mut gid) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(uid)
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
)))]
fn peer_uid_fd(_fd: RawFd) -> io::Result<u32> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this system offers no way to read a Unix socket peer's uid",
    ))
}

/// Exact lookups of one TCP socket through `NETLINK_SOCK_DIAG` (`inet_diag_req_v2` without
/// `NLM_F_DUMP`), which needs no privileges for a uid.
#[cfg(target_os = "linux")]
mod sock_diag {
    use std::io;
    use std::net::{IpAddr, SocketAddr};

    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const HDR: usize = 16; // struct nlmsghdr
    const REQ: usize = 56; // struct inet_diag_req_v2
    /// Offset of `idiag_uid` in `struct inet_diag_msg`: 4 + sockid (48) + expires, rqueue,
    /// wqueue (12).
    const UID_AT: usize = 64;

    /// The uid of the socket whose local end is `peer` and remote end `local`, searching
    /// AF_INET and then (for IPv4 peers, dual-stack sockets) AF_INET6 with mapped addresses.
    pub(super) fn peer_uid(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<u32>> {
        let fd = Fd::netlink()?;
        match (peer.ip(), local.ip()) {
            (IpAddr::V4(p), IpAddr::V4(l)) => {
                let mut src = [0u8; 16];
                let mut dst = [0u8; 16];
                src[..4].copy_from_slice(&p.octets());
                dst[..4].copy_from_slice(&l.octets());
                if let Some(uid) = query(&fd, libc::AF_INET, src, peer.port(), dst, local.port())? {
                    return Ok(Some(uid));
                }
                let src = p.to_ipv6_mapped().octets();
                let dst = l.to_ipv6_mapped().octets();
                query(&fd, libc::AF_INET6, src, peer.port(), dst, local.port())
            }
            (p, l) => {
                let v6 = |ip: IpAddr| match ip {
                    IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                    IpAddr::V6(a) => a.octets(),
                };
                query(&fd, libc::AF_INET6, v6(p), peer.port(), v6(l), local.port())
            }
        }
    }

    struct Fd(libc::c_int);

    impl Fd {
        fn netlink() -> io::Result<Self> {
            // SAFETY: plain socket(2) call.
            let fd = unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                    libc::NETLINK_SOCK_DIAG,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = Fd(fd);
            // Never wait long on the kernel.
            let tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 200_000,
            };
            // SAFETY: a live timeval of the size passed.
            unsafe {
                libc::setsockopt(
                    fd.0,
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    (&tv as *const libc::timeval).cast(),
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                );
            }
            Ok(fd)
        }
    }

    impl Drop for Fd {
        fn drop(&mut self) {
            // SAFETY: we own the descriptor.
            unsafe {
                libc::close(self.0);
            }
        }
    }

    fn query(
        fd: &Fd,
        family: libc::c_int,
        src: [u8; 16],
        sport: u16,
        dst: [u8; 16],
        dport: u16,
    ) -> io::Result<Option<u32>> {
        let mut msg = [0u8; HDR + REQ];
        let len = (HDR + REQ) as u32;
        msg[0..4].copy_from_slice(&len.to_ne_bytes());
        msg[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        msg[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
        msg[8..12].copy_from_slice(&1u32.to_ne_bytes()); // sequence
        let r = &mut msg[HDR..];
        r[0] = family as u8;
        r[1] = libc::IPPROTO_TCP as u8;
        r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
        r[8..10].copy_from_slice(&sport.to_be_bytes());
        r[10..12].copy_from_slice(&dport.to_be_bytes());
        r[12..28].copy_from_slice(&src);
        r[28..44].copy_from_slice(&dst);
        // idiag_if = 0; idiag_cookie = INET_DIAG_NOCOOKIE (all ones).
        r[48..56].copy_from_slice(&[0xff; 8]);
        // SAFETY: a zeroed sockaddr_nl addresses the kernel; the buffers are live.
        let sent = unsafe {
            let mut kernel: libc::sockaddr_nl = std::mem::zeroed();
            kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
            libc::sendto(
                fd.0,
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&kernel as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = [0u8; 1024];
        // SAFETY: the buffer is live and as long as passed.
        let n = unsafe { libc::recv(fd.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let reply = &buf[..n as usize];
        if reply.len() < HDR {
            return Err(io::Error::other("short sock_diag reply"));
        }
        let ty = u16::from_ne_bytes([reply[4], reply[5]]);
        if ty == NLMSG_ERROR {
            let errno = reply
                .get(HDR..HDR + 4)
                .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .unwrap_or(0);
            return match -errno {
                0 | libc::ENOENT => Ok(None),
                e => Err(io::Error::from_raw_os_error(e)),
            };
        }
        if ty != SOCK_DIAG_BY_FAMILY {
            return Err(io::Error::other(format!(
                "unexpected sock_diag reply type {ty}"
            )));
        }
        let uid = reply
            .get(HDR + UID_AT..HDR + UID_AT + 4)
            .ok_or_else(|| io::Error::other("short inet_diag_msg"))?;
        Ok(Some(u32::from_ne_bytes([uid[0], uid[1], uid[2], uid[3]])))
    }
}

/// The uid owning the client end of a TCP connection we accepted, when it is on this host.
///
/// `local` is our address on the connection and `peer` the client's. The client's socket is
/// the row of `/proc/net/tcp` (or `tcp6`) whose local address is `peer` and whose remote
/// address is `local`. Returns `Ok(None)` when no such live row exists (the client is on
/// another machine, in another network namespace, or already gone), and an error when the
/// tables cannot be read. Linux only: elsewhere the error is `Unsupported`.
pub fn peer_uid_tcp(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<u32>> {
    peer_uid_tcp_impl(local, peer)
}

#[cfg(target_os = "linux")]
fn peer_uid_tcp_impl(local: SocketAddr, peer: SocketAddr) -> io::Result<Option<u32>> {
    // The fast path: ask the kernel for exactly this socket over netlink (sock_diag). It
    // costs tens of microseconds whatever the number of sockets, where producing
    // /proc/net/tcp walks the whole connection table (milliseconds with a few thousand
    // TIME_WAIT entries). The tables stay as the fallback when netlink is unavailable.
    match sock_diag::peer_uid(canonical(local), canonical(peer)) {
        Ok(found) => return Ok(found),
        Err(e) => tracing::debug!("sock_diag lookup failed, reading /proc/net/tcp: {e}"),
    }
    let peer = canonical(peer);
    // An IPv4 client may own an AF_INET socket (in `tcp`) or a dual-stack AF_INET6 socket
    // talking to a v4-mapped address (in `tcp6`); an IPv6 client only the latter.
    let tables: &[&str] = if peer.is_ipv4() {
        &["/proc/net/tcp", "/proc/net/tcp6"]
    } else {
        &["/proc/net/tcp6"]
    };
    for table in tables {
        let text = match fs::read_to_string(table) {
            Ok(t) => t,
            // No IPv6 in this kernel or namespace.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{table}: {e}"))),
        };
        if let Some(uid) = find_socket_owner(&text, peer, local) {
            return Ok(Some(uid));
        }
    }
    Ok(None)
}

#[cfg(not(target_os = "linux"))]
fn peer_uid_tcp_impl(_local: SocketAddr, _peer: SocketAddr) -> io::Result<Option<u32>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "looking up the owner of a TCP connection is only implemented on Linux",
    ))
}

/// One row of `/proc/net/tcp` or `/proc/net/tcp6`, the fields the peer check needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcTcpEntry {
    /// The socket's own address (`local_address`), v4-mapped addresses kept as written.
    pub local: SocketAddr,
    /// The address it is connected to (`rem_address`).
    pub remote: SocketAddr,
    /// The TCP state (`st`): 0x01 established, 0x06 time-wait, 0x0A listen, ...
    pub state: u8,
    /// The owning uid.
    pub uid: u32,
    /// The socket inode; 0 for sockets no process holds (time-wait, orphans).
    pub inode: u64,
}

/// `st` values of rows that cannot be a client's live socket.
const TCP_TIME_WAIT: u8 = 0x06;
const TCP_LISTEN: u8 = 0x0A;
const TCP_NEW_SYN_RECV: u8 = 0x0C;

/// Parses the text of `/proc/net/tcp` or `/proc/net/tcp6`, skipping the header and any
/// line that does not have the expected shape.
///
/// Addresses are hex in the kernel's in-memory order: each 32-bit word of the address is
/// printed as a host-endian integer (so `127.0.0.1` is `0100007F` on little-endian
/// machines), and ports are plain hex numbers.
pub fn parse_proc_net_tcp(text: &str) -> impl Iterator<Item = ProcTcpEntry> + '_ {
    text.lines().filter_map(parse_proc_net_tcp_line)
}

fn parse_proc_net_tcp_line(line: &str) -> Option<ProcTcpEntry> {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
    let mut fields = line.split_whitespace();
    let slot = fields.next()?;
    if !slot.ends_with(':') {
        return None;
    }
    let local = parse_hex_sockaddr(fields.next()?)?;
    let remote = parse_hex_sockaddr(fields.next()?)?;
    let state = u8::from_str_radix(hex_digits(fields.next()?)?, 16).ok()?;
    let _queues = fields.next()?;
    let _timer = fields.next()?;
    let _retransmits = fields.next()?;
    let uid = fields.next()?.parse::<u32>().ok()?;
    let _timeout = fields.next()?;
    let inode = fields.next()?.parse::<u64>().ok()?;
    Some(ProcTcpEntry {
        local,
        remote,
        state,
        uid,
        inode,
    })
}

/// `s` if it is non-empty and all hex digits (`from_str_radix` would also take a sign).
fn hex_digits(s: &str) -> Option<&str> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())).then_some(s)
}

/// Parses `ADDR:PORT` as printed by the kernel: 8 hex digits for IPv4, 32 for IPv6.
fn parse_hex_sockaddr(field: &str) -> Option<SocketAddr> {
    let (addr, port) = field.split_once(':')?;
    if port.len() != 4 {
        return None;
    }
    let port = u16::from_str_radix(hex_digits(port)?, 16).ok()?;
    let word = |hex: &str| -> Option<[u8; 4]> {
        Some(
            u32::from_str_radix(hex_digits(hex)?, 16)
                .ok()?
                .to_ne_bytes(),
        )
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(addr)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(addr.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The uid owning the live socket whose local address is `local` and whose remote address
/// is `remote`, in the text of a `/proc/net/tcp{,6}` file.
///
/// Addresses compare by IP and port after unmapping IPv4-mapped IPv6 addresses, so an
/// AF_INET6 socket talking to `::ffff:127.0.0.1` matches `127.0.0.1`. Rows no process holds
/// (inode 0: time-wait and orphaned sockets, which report uid 0) and listening or
/// half-open rows are ignored. If several rows match with different uids, the answer is
/// `None`: ambiguity must not resolve to a guess.
pub fn find_socket_owner(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let (local, remote) = (canonical(local), canonical(remote));
    let mut owner = None;
    for entry in parse_proc_net_tcp(table) {
        if entry.inode == 0
            || matches!(entry.state, TCP_TIME_WAIT | TCP_LISTEN | TCP_NEW_SYN_RECV)
            || !same_endpoint(canonical(entry.local), local)
            || !same_endpoint(canonical(entry.remote), remote)
        {
            continue;
        }
        match owner {
            None => owner = Some(entry.uid),
            Some(uid) if uid == entry.uid => {}
            Some(_) => return None,
        }
    }
    owner
}

/// Unmaps `::ffff:a.b.c.d` to `a.b.c.d`; other addresses are returned unchanged.
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, v6.port())),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

/// Same IP and port (IPv6 flow info and scope are not in the tables).
fn same_endpoint(a: SocketAddr, b: SocketAddr) -> bool {
    a.ip() == b.ip() && a.port() == b.port()
}

/// Whether `ip` is a loopback address (127.0.0.0/8, `::1`, or `::ffff:127.x.y.z`).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.is_loopback(),
            None => v6.is_loopback(),
        },
    }
}

// ---------------------------------------------------------------------------------------
// Policy
// ---------------------------------------------------------------------------------------

/// Who is at the other end of a connection, as far as we could tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerIdentity {
    /// The peer's effective uid is known (Unix socket credentials, or the owner of a TCP
    /// client socket on this host).
    Uid(u32),
    /// A peer on this host whose uid could not be determined; `why` says what went wrong.
    Unknown {
        /// A short explanation for the refusal message, e.g. the lookup error.
        why: String,
    },
    /// A TCP peer on another machine (its socket is not in this host's tables).
    Remote {
        /// The client's address.
        peer: SocketAddr,
    },
}

impl PeerIdentity {
    /// Identifies the peer of an accepted Unix socket through its credentials.
    pub fn of_unix(sock: &impl AsRawFd) -> Self {
        match peer_uid_unix(sock) {
            Ok(uid) => PeerIdentity::Uid(uid),
            Err(e) => PeerIdentity::Unknown {
                why: format!("reading the Unix socket peer's credentials failed: {e}"),
            },
        }
    }

    /// Identifies the peer of an accepted TCP connection (`local` is our side).
    ///
    /// A peer absent from the host's tables is [`PeerIdentity::Remote`] only if its address
    /// is neither loopback nor our own address on the connection; otherwise it is on this
    /// host and merely unattributable, which is [`PeerIdentity::Unknown`].
    pub fn of_tcp(local: SocketAddr, peer: SocketAddr) -> Self {
        let on_this_host = is_loopback(peer.ip()) || canonical(peer).ip() == canonical(local).ip();
        match peer_uid_tcp(local, peer) {
            Ok(Some(uid)) => PeerIdentity::Uid(uid),
            Ok(None) if !on_this_host => PeerIdentity::Remote { peer },
            Ok(None) => PeerIdentity::Unknown {
                why: format!("no live socket for {peer} in /proc/net/tcp or /proc/net/tcp6"),
            },
            Err(e) => PeerIdentity::Unknown {
                why: format!("looking up the owner of {peer} failed: {e}"),
            },
        }
    }
}

/// The outcome of a [`PeerCheck`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerVerdict {
    /// Serve the connection.
    Allow,
    /// Close it after telling the peer why.
    Refuse {
        /// One line for the user at the other end (no trailing newline), starting
        /// `ngd: connection refused: `.
        reason: String,
    },
}

impl PeerVerdict {
    /// Whether this is [`PeerVerdict::Allow`].
    pub fn is_allowed(&self) -> bool {
        matches!(self, PeerVerdict::Allow)
    }
}

/// The server's peer policy: only its owner is served.
///
/// A peer with another uid is refused, a local peer whose uid cannot be established is
/// refused (fail closed), and a peer on another machine is served only when remote access
/// was explicitly enabled (`allow_remote` in the config). Root gets no exception: a server
/// runs commands as its owner, and root can become that owner when it really wants to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCheck {
    /// The uid allowed in: the server's effective uid.
    owner_uid: u32,
    /// Whether peers on other machines (uid unknowable) are served.
    allow_remote: bool,
}

impl PeerCheck {
    /// A policy serving `owner_uid` only, with remote peers refused.
    pub fn new(owner_uid: u32) -> Self {
        Self {
            owner_uid,
            allow_remote: false,
        }
    }

    /// A policy serving this process's effective uid only.
    pub fn for_current_user() -> Self {
        Self::new(current_uid())
    }

    /// Also serve TCP peers on other machines (whose uid cannot be known).
    pub fn allow_remote(mut self, allow: bool) -> Self {
        self.allow_remote = allow;
        self
    }

    /// The uid this server serves.
    pub fn owner_uid(&self) -> u32 {
        self.owner_uid
    }

    /// Decides about a peer already identified.
    pub fn decide(&self, peer: &PeerIdentity) -> PeerVerdict {
        match peer {
            PeerIdentity::Uid(uid) if *uid == self.owner_uid => PeerVerdict::Allow,
            PeerIdentity::Uid(uid) => PeerVerdict::Refuse {
                reason: format!(
                    "ngd: connection refused: this server belongs to uid {}, you are uid {uid}",
                    self.owner_uid
                ),
            },
            PeerIdentity::Unknown { why } => PeerVerdict::Refuse {
                reason: format!(
                    "ngd: connection refused: cannot tell which user opened this connection \
                     ({why}); this server only serves uid {}",
                    self.owner_uid
                ),
            },
            PeerIdentity::Remote { .. } if self.allow_remote => PeerVerdict::Allow,
            PeerIdentity::Remote { peer } => PeerVerdict::Refuse {
                reason: format!(
                    "ngd: connection refused: {peer} is not on this machine and this server \
                     does not accept remote connections (allow_remote = false)"
                ),
            },
        }
    }

    /// Identifies and judges the peer of an accepted Unix socket.
    pub fn check_unix(&self, sock: &impl AsRawFd) -> PeerVerdict {
        self.decide(&PeerIdentity::of_unix(sock))
    }

    /// Identifies and judges the peer of an accepted TCP connection (`local` is our side).
    pub fn check_tcp(&self, local: SocketAddr, peer: SocketAddr) -> PeerVerdict {
        self.decide(&PeerIdentity::of_tcp(local, peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows captured on an x86-64 Linux host: a listener on 127.0.0.1:2113, a client
    /// (uid 1000) at 127.0.0.1:45678 connected to it, the server's accepted socket, and a
    /// time-wait leftover of an earlier connection from the same client port.
    const TCP4: &str = "\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0841 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 31337 1 0000000000000000 100 0 0 10 0
   1: 0100007F:B26E 0100007F:0841 01 00000000:00000000 00:00000000 00000000  1000        0 40001 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:0841 0100007F:B26E 01 00000000:00000000 00:00000000 00000000  1000        0 40002 1 0000000000000000 20 4 31 10 -1
   3: 0100007F:B26F 0100007F:0841 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000
";

    /// IPv6: a client (uid 1001) at [::1]:40000 talking to [::1]:2113, and a dual-stack
    /// socket (uid 1002) at ::ffff:127.0.0.1:40001 talking to ::ffff:127.0.0.1:2113.
    const TCP6: &str = "\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:9C40 00000000000000000000000001000000:0841 01 00000000:00000000 00:00000000 00000000  1001        0 50001 1 0000000000000000 20 4 30 10 -1
   1: 0000000000000000FFFF00000100007F:9C41 0000000000000000FFFF00000100007F:0841 01 00000000:00000000 00:00000000 00000000  1002        0 50002 1 0000000000000000 20 4 30 10 -1
";

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn parse_proc_net_tcp_reads_v4_rows_and_skips_the_header() {
        let rows: Vec<_> = parse_proc_net_tcp(TCP4).collect();
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows[1],
            ProcTcpEntry {
                local: sa("127.0.0.1:45678"),
                remote: sa("127.0.0.1:2113"),
                state: 0x01,
                uid: 1000,
                inode: 40001,
            }
        );
        assert_eq!(rows[0].state, TCP_LISTEN);
        assert_eq!(rows[0].remote, sa("0.0.0.0:0"));
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn find_socket_owner_picks_the_client_row() {
        // Client at :45678, our side at :2113 → the client's socket is row 1.
        assert_eq!(
            find_socket_owner(TCP4, sa("127.0.0.1:45678"), sa("127.0.0.1:2113")),
            Some(1000)
        );
        // The time-wait row (uid 0, inode 0) never answers.
        assert_eq!(
            find_socket_owner(TCP4, sa("127.0.0.1:45679"), sa("127.0.0.1:2113")),
            None
        );
        // No such connection.
        assert_eq!(
            find_socket_owner(TCP4, sa("127.0.0.1:1"), sa("127.0.0.1:2113")),
            None
        );
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn find_socket_owner_reads_v6_and_v4_mapped_rows() {
        assert_eq!(
            find_socket_owner(TCP6, sa("[::1]:40000"), sa("[::1]:2113")),
            Some(1001)
        );
        // The mapped row matches both plain IPv4 and mapped spellings.
        assert_eq!(
            find_socket_owner(TCP6, sa("127.0.0.1:40001"), sa("127.0.0.1:2113")),
            Some(1002)
        );
        assert_eq!(
            find_socket_owner(
                TCP6,
                sa("[::ffff:127.0.0.1]:40001"),
                sa("[::ffff:127.0.0.1]:2113")
            ),
            Some(1002)
        );
        let rows: Vec<_> = parse_proc_net_tcp(TCP6).collect();
        assert_eq!(rows[1].local, sa("[::ffff:127.0.0.1]:40001"));
    }

    #[test]
    fn find_socket_owner_refuses_to_guess_between_owners() {
        let a = "   0: 0100007F:B26E 0100007F:0841 01 00000000:00000000 00:00000000 00000000  1000        0 7 1";
        let b = "   1: 0100007F:B26E 0100007F:0841 01 00000000:00000000 00:00000000 00000000  2000        0 8 1";
        let table = format!("{a}\n{b}\n");
        let local = parse_proc_net_tcp_line(a).unwrap().local;
        let remote = parse_proc_net_tcp_line(a).unwrap().remote;
        assert_eq!(find_socket_owner(&table, local, remote), None);
        assert_eq!(find_socket_owner(a, local, remote), Some(1000));
    }

    #[test]
    fn parse_proc_net_tcp_skips_malformed_lines() {
        let junk = "\
garbage
   0:
   0: 0100007F:0841
   0: 0100007F:0841 00000000:0000 ZZ 00000000:00000000 00:00000000 00000000 1000 0 1
   0: 0100007F:+841 00000000:0000 01 00000000:00000000 00:00000000 00000000 1000 0 1
   0: +100007F:0841 00000000:0000 01 00000000:00000000 00:00000000 00000000 1000 0 1
   0: 0100007F0:0841 00000000:0000 01 00000000:00000000 00:00000000 00000000 1000 0 1
   0: 0100007F:0841 00000000:0000 01 00000000:00000000 00:00000000 00000000 -1 0 1
   0: 0100007F:0841 00000000:0000 01 00000000:00000000 00:00000000 00000000 1000 0
   0: 0000000000000000000000000100000:0841 00000000:0000 01 0:0 0:0 0 1000 0 1
   \u{e9}: \u{e9}\u{e9}\u{e9}\u{e9}:0841 x y z w 1 2 3
";
        assert_eq!(parse_proc_net_tcp(junk).count(), 0);
        // And one good line among them is still found.
        let good = "   0: 0100007F:0841 00000000:0000 01 0:0 0:0 0 1000 0 1";
        let text = format!("{junk}{good}\n");
        assert_eq!(parse_proc_net_tcp(&text).count(), 1);
    }

    #[test]
    fn hex_addresses_use_host_order_words() {
        let word = u32::from_ne_bytes([127, 0, 0, 1]);
        let field = format!("{word:08X}:0841");
        assert_eq!(parse_hex_sockaddr(&field), Some(sa("127.0.0.1:2113")));
    }

    #[test]
    fn is_loopback_covers_v4_v6_and_mapped() {
        assert!(is_loopback("127.0.0.1".parse().unwrap()));
        assert!(is_loopback("127.8.9.10".parse().unwrap()));
        assert!(is_loopback("::1".parse().unwrap()));
        assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!is_loopback("0.0.0.0".parse().unwrap()));
        assert!(!is_loopback("::".parse().unwrap()));
        assert!(!is_loopback("192.168.1.5".parse().unwrap()));
        assert!(!is_loopback("::ffff:10.0.0.1".parse().unwrap()));
        // `::0.0.0.1`-style compatible addresses are not loopback.
        assert!(!is_loopback("::7f00:1".parse().unwrap()));
    }

    #[test]
    fn peer_check_allows_only_the_owner() {
        let check = PeerCheck::new(1000);
        assert_eq!(check.decide(&PeerIdentity::Uid(1000)), PeerVerdict::Allow);
        assert_eq!(
            check.decide(&PeerIdentity::Uid(65534)),
            PeerVerdict::Refuse {
                reason:
                    "ngd: connection refused: this server belongs to uid 1000, you are uid 65534"
                        .into()
            }
        );
        // Root is not special.
        assert!(!check.decide(&PeerIdentity::Uid(0)).is_allowed());
    }

    #[test]
    fn peer_check_fails_closed_on_unknown_peers() {
        let check = PeerCheck::new(1000).allow_remote(true);
        let verdict = check.decide(&PeerIdentity::Unknown {
            why: "no live socket for 127.0.0.1:5 in /proc/net/tcp".into(),
        });
        match verdict {
            PeerVerdict::Refuse { reason } => {
                assert!(reason.starts_with("ngd: connection refused: cannot tell which user"));
                assert!(reason.contains("/proc/net/tcp"), "{reason}");
                assert!(reason.contains("only serves uid 1000"), "{reason}");
            }
            PeerVerdict::Allow => panic!("an unknown peer was allowed"),
        }
    }

    #[test]
    fn peer_check_serves_remote_peers_only_when_allowed() {
        let remote = PeerIdentity::Remote {
            peer: sa("192.0.2.7:50000"),
        };
        match PeerCheck::new(1).decide(&remote) {
            PeerVerdict::Refuse { reason } => {
                assert!(reason.contains("192.0.2.7:50000"), "{reason}");
                assert!(reason.contains("allow_remote"), "{reason}");
            }
            PeerVerdict::Allow => panic!("a remote peer was allowed by default"),
        }
        assert!(PeerCheck::new(1)
            .allow_remote(true)
            .decide(&remote)
            .is_allowed());
        // allow_remote never lets another local user in.
        assert!(!PeerCheck::new(1)
            .allow_remote(true)
            .decide(&PeerIdentity::Uid(2))
            .is_allowed());
    }

    #[test]
    fn socket_path_length_limit() {
        let max = SUN_PATH_LEN - 1;
        let ok = PathBuf::from(format!("/{}", "a".repeat(max - 1)));
        assert!(check_socket_path_len(&ok).is_ok());
        let long = PathBuf::from(format!("/{}", "a".repeat(max)));
        let err = check_socket_path_len(&long).unwrap_err();
        assert!(
            matches!(err, SecurityError::SocketPathTooLong { len, max: m, .. } if len == max + 1 && m == max)
        );
        assert!(err.to_string().contains("limited to"), "{err}");
    }
}
