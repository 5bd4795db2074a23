//! The private runtime directory that holds the default socket: created 0700, or checked
//! (a real directory, ours, a safe parent) and its mode repaired.

#[allow(unused_imports)]
use super::*;

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
