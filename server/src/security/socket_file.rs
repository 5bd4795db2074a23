//! Binding a Unix socket safely: mode 0600, the `sun_path` limit, a dead server's socket
//! replaced but never a live one or another file, a guard that removes only our own
//! socket file, and the bind lock that narrows a start-up race.

#[allow(unused_imports)]
use super::*;

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
            let Err(err) = crate::sys::try_lock_exclusive(file.as_raw_fd()) else {
                return Self { _dir: Some(file) };
            };
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
