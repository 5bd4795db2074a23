//! The Node worker's native piece (`sdk/node`): an N-API addon, loaded with
//! `process.dlopen`, that gives JavaScript the system calls Node lacks, each a thin
//! synchronous wrapper over a safe function of `ng-sys`.
//!
//! Node has no `recvmsg`/`sendmsg` with `SCM_RIGHTS`, no `dup2`, `setsid`, `TIOCSCTTY`
//! or `tcsetpgrp`, no `waitpid` that reports stops, and no way to start a process with
//! given descriptors on given numbers in a new session: the worker (`lib/worker.js`)
//! reads its channel and the client's descriptors with [`recv`], starts each session's
//! Node process with [`spawn`], hands a spare its session with [`send`], and follows it
//! with [`wait`]; the spare (`lib/spare.js`) puts the client's descriptors on 0–2 with
//! `putOn` before anything in it has opened its stdio.
//!
//! Every function is synchronous and never blocks unless asked to (`poll` with a
//! timeout, `wait` with `block`). A failure is thrown as an `Error` whose `code` is the
//! errno's name (`EAGAIN`, `ECHILD`, ...); `EAGAIN` from a read is `null` instead.
//! Descriptors are plain numbers, owned by the JavaScript side once returned.

mod sys;

use ng_sys::process::{Change, Placement};
use std::ffi::OsStr;
use std::io;
use std::os::fd::IntoRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use sys::napi::{Call, Result, Thrown, Value};

/// The largest single read or receive, in bytes.
const MAX_READ: usize = 1 << 24;

/// The name of errno `code` (`EAGAIN`), or `E<n>` for one this table lacks.
fn errno_name(code: Option<i32>) -> String {
    let Some(code) = code else {
        return "EIO".to_owned();
    };
    let name = match code {
        libc::EAGAIN => "EAGAIN",
        libc::EINTR => "EINTR",
        libc::EBADF => "EBADF",
        libc::ECHILD => "ECHILD",
        libc::EPIPE => "EPIPE",
        libc::ENOENT => "ENOENT",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ESRCH => "ESRCH",
        libc::EINVAL => "EINVAL",
        libc::ENOTTY => "ENOTTY",
        libc::ECONNRESET => "ECONNRESET",
        libc::EIO => "EIO",
        libc::EMFILE => "EMFILE",
        libc::ENOTDIR => "ENOTDIR",
        libc::ENOEXEC => "ENOEXEC",
        _ => return format!("E{code}"),
    };
    name.to_owned()
}

/// Whether `e` is "would block".
fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// A byte count as a JavaScript number (reads are capped far below `i32::MAX`).
fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A read size from JavaScript, at least 1 and at most [`MAX_READ`].
fn size(n: i32) -> usize {
    usize::try_from(n).unwrap_or(1).clamp(1, MAX_READ)
}

/// `recv(fd, size, maxFds)`: one `recvmsg`; `{data, fds}` (`data` empty at end of
/// stream), or `null` when nothing is there (non-blocking).
fn recv(c: &Call) -> Result<Value> {
    let fd = c.int(0)?;
    let mut buf = vec![0u8; size(c.int(1)?)];
    let max = usize::try_from(c.int(2)?).unwrap_or(0);
    match ng_sys::scm::recv_with_fds(fd, &mut buf, max) {
        Ok(r) => {
            let fds: Vec<Value> = r
                .fds
                .into_iter()
                .map(|f| c.int_value(f.into_raw_fd()))
                .collect();
            Ok(c.object(&[
                ("data", c.buffer(&buf[..r.len])),
                ("fds", c.array(&fds)),
                ("truncated", c.bool_value(r.truncated)),
            ]))
        }
        Err(e) if would_block(&e) || e.kind() == io::ErrorKind::Interrupted => Ok(c.null()),
        Err(e) => Err(e.into()),
    }
}

/// `send(fd, data, fds)`: one `sendmsg` with `fds` on the first byte; the bytes written,
/// or -1 when the socket is full.
fn send(c: &Call) -> Result<Value> {
    let fd = c.int(0)?;
    let data = c.bytes(1)?;
    let fds = if c.is_nullish(2) {
        Vec::new()
    } else {
        c.int_list(2)?
    };
    match ng_sys::scm::send_with_fds(fd, &data, &fds) {
        Ok(n) => Ok(c.int_value(count(n))),
        Err(e) if would_block(&e) => Ok(c.int_value(-1)),
        Err(e) => Err(e.into()),
    }
}

/// `read(fd, size)`: one `read`; a `Buffer` (empty at end of file) or `null` when
/// nothing is there.
fn read(c: &Call) -> Result<Value> {
    let fd = c.int(0)?;
    let mut buf = vec![0u8; size(c.int(1)?)];
    match ng_sys::fd::read(fd, &mut buf) {
        Ok(n) => Ok(c.buffer(&buf[..n])),
        Err(e) if would_block(&e) || e.kind() == io::ErrorKind::Interrupted => Ok(c.null()),
        Err(e) => Err(e.into()),
    }
}

/// `write(fd, data)`: one `write`; the bytes written, or -1 when it would block.
fn write(c: &Call) -> Result<Value> {
    let fd = c.int(0)?;
    let data = c.bytes(1)?;
    match ng_sys::fd::write(fd, &data) {
        Ok(n) => Ok(c.int_value(count(n))),
        Err(e) if would_block(&e) || e.kind() == io::ErrorKind::Interrupted => Ok(c.int_value(-1)),
        Err(e) => Err(e.into()),
    }
}

/// `poll(fds, events, timeoutMs)`: one `poll`; each descriptor's `revents` (all 0 on a
/// timeout or a signal).
fn poll(c: &Call) -> Result<Value> {
    let fds = c.int_list(0)?;
    let events = c.int_list(1)?;
    if fds.len() != events.len() {
        return Err(Thrown::invalid("poll: as many events as descriptors"));
    }
    let mut set: Vec<libc::pollfd> = fds
        .iter()
        .zip(&events)
        .map(|(&fd, &ev)| libc::pollfd {
            fd,
            events: ev as libc::c_short,
            revents: 0,
        })
        .collect();
    match ng_sys::fd::poll(&mut set, c.int(2)?) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
        Err(e) => return Err(e.into()),
    }
    let out: Vec<Value> = set
        .iter()
        .map(|p| c.int_value(i32::from(p.revents)))
        .collect();
    Ok(c.array(&out))
}

/// `close(fd)`.
fn close(c: &Call) -> Result<Value> {
    ng_sys::process::close(c.int(0)?);
    Ok(c.undefined())
}

/// `pipe()`: `[read end, write end]`, close-on-exec.
fn pipe(c: &Call) -> Result<Value> {
    let (r, w) = ng_sys::fd::pipe()?;
    Ok(c.array(&[c.int_value(r.into_raw_fd()), c.int_value(w.into_raw_fd())]))
}

/// `socketpair()`: a connected pair of Unix stream sockets, close-on-exec.
fn socketpair(c: &Call) -> Result<Value> {
    let (a, b) = UnixStream::pair()?;
    Ok(c.array(&[c.int_value(a.into_raw_fd()), c.int_value(b.into_raw_fd())]))
}

/// `ptyPair()`: a new pseudo-terminal, `[master, slave]`, close-on-exec.
fn pty_pair(c: &Call) -> Result<Value> {
    let (m, s) = ng_sys::term::open_pty()?;
    Ok(c.array(&[c.int_value(m.into_raw_fd()), c.int_value(s.into_raw_fd())]))
}

/// `nonblock(fd)`.
fn nonblock(c: &Call) -> Result<Value> {
    ng_sys::fd::set_nonblocking(c.int(0)?)?;
    Ok(c.undefined())
}

/// `isNonblocking(fd)`: whether `O_NONBLOCK` is set on `fd`'s open file description.
fn is_nonblocking(c: &Call) -> Result<Value> {
    Ok(c.bool_value(ng_sys::fd::is_nonblocking(c.int(0)?)?))
}

/// `setNonblocking(fd, on)`.
fn set_nonblocking(c: &Call) -> Result<Value> {
    ng_sys::fd::set_nonblocking_to(c.int(0)?, c.bool(1)?)?;
    Ok(c.undefined())
}

/// `cloexec(fd, on)`.
fn cloexec(c: &Call) -> Result<Value> {
    let fd = c.int(0)?;
    if c.bool(1)? {
        ng_sys::fd::set_cloexec(fd)?;
    } else {
        ng_sys::fd::clear_cloexec(fd)?;
    }
    Ok(c.undefined())
}

/// `putOn(fd, target)`: `dup2`, the copy inheritable.
fn put_on(c: &Call) -> Result<Value> {
    ng_sys::fd::put_on(c.int(0)?, c.int(1)?)?;
    Ok(c.undefined())
}

/// `kind(fd)`: `"tty"`, `"fifo"`, `"socket"`, `"file"`, `"char"`, `"dir"`, `"other"`, or
/// `null` when `fd` is not open.
fn kind(c: &Call) -> Result<Value> {
    let fd = c.int(0)?;
    let Some((mode, _)) = ng_sys::fd::file_type(fd) else {
        return Ok(c.null());
    };
    let name = match mode & libc::S_IFMT {
        _ if ng_sys::fd::is_tty(fd) => "tty",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFREG => "file",
        libc::S_IFCHR => "char",
        libc::S_IFDIR => "dir",
        _ => "other",
    };
    Ok(c.string(name))
}

/// `spawn(file, argv, env, cwd, fds, opts)`: starts `file` with `argv` (its first item
/// is argv[0]), exactly the environment `env` (`NAME=VALUE` items), in `cwd` (`null`: ours),
/// with each `[ours, theirs]` of `fds` on its descriptor `theirs` and no other of ours;
/// `opts`: `session` (`setsid`), `dieWithParent`, `umask` (a number), `ignore` (signal
/// numbers left ignored; every other signal at its default), `controlling` (its
/// descriptor that becomes its controlling terminal, with `session`). Its pid; it is ours
/// to `wait` for.
fn spawn(c: &Call) -> Result<Value> {
    let file = c.bytes(0)?;
    let argv = c.bytes_list(1)?;
    let env = c.bytes_list(2)?;
    let mut cmd = Command::new(OsStr::from_bytes(&file));
    if let Some((first, rest)) = argv.split_first() {
        cmd.arg0(OsStr::from_bytes(first));
        cmd.args(rest.iter().map(|a| OsStr::from_bytes(a)));
    }
    cmd.env_clear();
    for entry in &env {
        if let Some(eq) = entry.iter().position(|&b| b == b'=') {
            if eq > 0 {
                cmd.env(
                    OsStr::from_bytes(&entry[..eq]),
                    OsStr::from_bytes(&entry[eq + 1..]),
                );
            }
        }
    }
    if !c.is_nullish(3) {
        cmd.current_dir(OsStr::from_bytes(&c.bytes(3)?));
    }
    let mut placement = Placement::default();
    placement.new_session = c.bool_prop(5, "session");
    placement.die_with_parent = c.bool_prop(5, "dieWithParent");
    placement.umask = c.int_prop(5, "umask").and_then(|m| u32::try_from(m).ok());
    placement.controlling = c.int_prop(5, "controlling");
    let pairs = c.int_list(4)?;
    if pairs.len() % 2 != 0 {
        return Err(Thrown::invalid(
            "spawn: fds is a flat list of [ours, theirs] pairs",
        ));
    }
    for pair in pairs.chunks(2) {
        if !placement.put(pair[0], pair[1]) {
            return Err(Thrown::invalid("spawn: too many descriptors"));
        }
    }
    for signo in c.int_list_prop(5, "ignore") {
        placement.ignore(signo);
    }
    ng_sys::process::on_spawn_placed(&mut cmd, placement);
    let child = cmd.spawn()?;
    Ok(c.int_value(child.id() as i32))
}

/// `wait(pid, block)`: one `waitpid` that sees stops too; `null` while nothing changed,
/// else `["exited", code]`, `["killed", signo, core]`, `["stopped", signo]` or
/// `["continued"]`.
fn wait(c: &Call) -> Result<Value> {
    let pid = u32::try_from(c.int(0)?).map_err(|_| Thrown::invalid("wait: a pid"))?;
    let change = ng_sys::process::wait_change(pid, c.bool(1)?)?;
    Ok(match change {
        None => c.null(),
        Some(Change::Exited(code)) => c.array(&[c.string("exited"), c.int_value(code)]),
        Some(Change::Killed(sig, core)) => {
            c.array(&[c.string("killed"), c.int_value(sig), c.bool_value(core)])
        }
        Some(Change::Stopped(sig)) => c.array(&[c.string("stopped"), c.int_value(sig)]),
        Some(Change::Continued) => c.array(&[c.string("continued")]),
    })
}

/// `kill(pid, signo)`: to one process.
fn kill(c: &Call) -> Result<Value> {
    let pid = u32::try_from(c.int(0)?).map_err(|_| Thrown::invalid("kill: a pid"))?;
    ng_sys::signal::kill(pid, c.int(1)?);
    Ok(c.undefined())
}

/// `killGroup(pgid, signo)`: to a process group.
fn kill_group(c: &Call) -> Result<Value> {
    let pgid = u32::try_from(c.int(0)?).map_err(|_| Thrown::invalid("killGroup: a pgid"))?;
    ng_sys::signal::kill_group(pgid, c.int(1)?);
    Ok(c.undefined())
}

/// `pidfd(pid)`: a descriptor readable once `pid` has ended.
fn pidfd(c: &Call) -> Result<Value> {
    let pid = u32::try_from(c.int(0)?).map_err(|_| Thrown::invalid("pidfd: a pid"))?;
    Ok(c.int_value(ng_sys::process::watch_end(pid)?.into_raw_fd()))
}

/// `umask(mask)`: sets it; the previous one.
fn umask(c: &Call) -> Result<Value> {
    let mask = u32::try_from(c.int(0)?).map_err(|_| Thrown::invalid("umask: a mask"))?;
    Ok(c.int_value(ng_sys::process::set_umask(mask) as i32))
}

/// `setsid()`.
fn setsid(c: &Call) -> Result<Value> {
    ng_sys::process::new_session()?;
    Ok(c.undefined())
}

/// `ctty(fd)`: makes terminal `fd` our controlling terminal and our group its
/// foreground group.
fn ctty(c: &Call) -> Result<Value> {
    let fd = c.int(0)?;
    ng_sys::term::take_controlling(fd)?;
    ng_sys::term::set_foreground(fd, ng_sys::process::pid())?;
    Ok(c.undefined())
}

/// `signatures(paths)`: for each path, `"ino:size:mtime:ctime"` (nanoseconds), or
/// `"missing"`: what a later call compares to see a file changed.
fn signatures(c: &Call) -> Result<Value> {
    use std::os::unix::fs::MetadataExt;
    let out: Vec<Value> = c
        .bytes_list(0)?
        .iter()
        .map(|p| {
            let sig = match std::fs::metadata(OsStr::from_bytes(p)) {
                Ok(m) => format!(
                    "{}:{}:{}.{}:{}.{}",
                    m.ino(),
                    m.size(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec()
                ),
                Err(_) => "missing".to_owned(),
            };
            c.string(&sig)
        })
        .collect();
    Ok(c.array(&out))
}

/// `ignoreSignal(signo)`: its disposition becomes "ignore".
fn ignore_signal(c: &Call) -> Result<Value> {
    Ok(c.bool_value(ng_sys::signal::ignore(c.int(0)?)))
}

/// `copyModes(from, to)`: terminal `to` gets terminal `from`'s modes.
fn copy_modes(c: &Call) -> Result<Value> {
    let modes = ng_sys::term::modes(c.int(0)?)?;
    ng_sys::term::set_modes(c.int(1)?, &modes, ng_sys::term::When::Now)?;
    Ok(c.undefined())
}

/// `setWinsize(fd, cols, rows)`.
fn set_winsize(c: &Call) -> Result<Value> {
    let ws = libc::winsize {
        ws_col: u16::try_from(c.int(1)?).unwrap_or(80),
        ws_row: u16::try_from(c.int(2)?).unwrap_or(24),
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    ng_sys::term::set_window_size(c.int(0)?, &ws)?;
    Ok(c.undefined())
}

sys::callbacks! {
    "recv" => recv,
    "send" => send,
    "read" => read,
    "write" => write,
    "poll" => poll,
    "close" => close,
    "pipe" => pipe,
    "socketpair" => socketpair,
    "ptyPair" => pty_pair,
    "nonblock" => nonblock,
    "isNonblocking" => is_nonblocking,
    "setNonblocking" => set_nonblocking,
    "cloexec" => cloexec,
    "putOn" => put_on,
    "kind" => kind,
    "spawn" => spawn,
    "wait" => wait,
    "kill" => kill,
    "killGroup" => kill_group,
    "pidfd" => pidfd,
    "umask" => umask,
    "setsid" => setsid,
    "ctty" => ctty,
    "setWinsize" => set_winsize,
    "ignoreSignal" => ignore_signal,
    "copyModes" => copy_modes,
    "signatures" => signatures,
}
