//! Watching the programs a process tree executes: a seccomp filter whose `execve` and
//! `execveat` calls wait for a supervisor (seccomp user notification, Linux 5.5 and
//! later), and the supervisor's side of it.
//!
//! [`watch_execs`] installs the filter on the calling thread only (with `no_new_privs`,
//! which an unprivileged filter needs) and returns its listener; every process the thread
//! starts afterwards inherits the filter. Each of their `exec`s then waits until the
//! supervisor reads it ([`receive`]) and answers it: [`let_run`] lets the call go on
//! unchanged, [`refuse`] makes it fail with an error number. Reading the call's arguments
//! from the caller's memory is the caller's business (`/proc/PID/mem`); [`still_waiting`]
//! tells whether the call read is still the one waiting (the process may have been killed
//! and its id reused). [`forbid_filters`] makes `seccomp(2)` fail with `EPERM` for the
//! calling thread and its children, as a system that denies it would.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Which `exec` a watched process called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecCall {
    /// `execve(path, argv, envp)`.
    Execve,
    /// `execveat(dirfd, path, argv, envp, flags)`.
    Execveat,
}

/// One `exec` waiting for an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// The notification's id, for the answer.
    pub id: u64,
    /// The calling thread's id (in the supervisor's pid namespace).
    pub pid: u32,
    /// Which call.
    pub call: ExecCall,
    /// The call's six arguments, as the kernel passed them.
    pub args: [u64; 6],
}

/// This machine's audit architecture (`AUDIT_ARCH_*`), which the filter checks first: a
/// call made through another ABI has other system call numbers.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const NATIVE_ARCH: u32 = 0xC000_003E;
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
const NATIVE_ARCH: u32 = 0xC000_00B7;

/// x86-64's x32 ABI marks its system call numbers with this bit.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const X32_BIT: u32 = 0x4000_0000;
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
const X32_BIT: u32 = 0;

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// Installs `filter` on the calling thread with `flags`, after `no_new_privs`.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn install(filter: &mut [libc::sock_filter], flags: libc::c_ulong) -> io::Result<libc::c_long> {
    let (on, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
    // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integers; it only restricts this thread and
    // what it starts.
    crate::check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, on, unused, unused, unused) })?;
    let prog = libc::sock_fprog {
        len: u16::try_from(filter.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: `prog` points at `filter`, valid for its length during the call; the kernel
    // copies the program.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Makes every `exec` of the processes the calling thread starts from now on wait for the
/// supervisor holding the returned listener; a call through another ABI (a 32-bit program)
/// kills its process, since its calls cannot be read. The calling thread itself is filtered
/// too (give it nothing else to do than starting the watched process) and gets
/// `no_new_privs` (set-user-id programs it starts do not gain privileges). Fails where the
/// system denies seccomp filters or user notification (`EPERM`, `EINVAL`, `ENOSYS`).
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub fn watch_execs() -> io::Result<OwnedFd> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    const BPF_JSET: u32 = 0x40;
    // struct seccomp_data: nr at 0, arch at 4.
    let mut filter = [
        stmt(BPF_LD | BPF_W | BPF_ABS, 4),
        jump(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD | BPF_W | BPF_ABS, 0),
        jump(BPF_JMP | BPF_JSET | BPF_K, X32_BIT, 0, 1),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_KILL_PROCESS),
        jump(BPF_JMP | BPF_JEQ | BPF_K, libc::SYS_execve as u32, 2, 0),
        jump(BPF_JMP | BPF_JEQ | BPF_K, libc::SYS_execveat as u32, 1, 0),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_USER_NOTIF),
    ];
    let fd = install(&mut filter, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER)?;
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    crate::fd::set_cloexec(fd)?;
    // SAFETY: the kernel just returned this descriptor, which nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Where seccomp filters cannot be read here: always unsupported.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub fn watch_execs() -> io::Result<OwnedFd> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Makes `seccomp(2)` fail with `EPERM` for the calling thread and what it starts from
/// then on, as on a system whose policy denies it (for tests of that refusal: a thread of
/// their own that starts the program under test).
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub fn forbid_filters() -> io::Result<()> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let mut filter = [
        stmt(BPF_LD | BPF_W | BPF_ABS, 0),
        jump(BPF_JMP | BPF_JEQ | BPF_K, libc::SYS_seccomp as u32, 0, 1),
        stmt(
            BPF_RET | BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    install(&mut filter, 0).map(drop)
}

/// Where seccomp filters are not supported there is nothing to forbid.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub fn forbid_filters() -> io::Result<()> {
    Ok(())
}

/// Waits for the next `exec` of a watched process (blocks: poll the listener first).
/// `ENOENT` when the caller died before it was read.
#[cfg(target_os = "linux")]
pub fn receive(listener: &OwnedFd) -> io::Result<Waiting> {
    // SAFETY: seccomp_notif is plain data; the kernel requires it zeroed.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl writes one seccomp_notif into `notif`, which is valid and sized
    // for it.
    let rc = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV as _,
            &mut notif as *mut libc::seccomp_notif,
        )
    };
    crate::check(rc)?;
    let call = if i64::from(notif.data.nr) == libc::SYS_execveat {
        ExecCall::Execveat
    } else {
        ExecCall::Execve
    };
    Ok(Waiting {
        id: notif.id,
        pid: notif.pid,
        call,
        args: notif.data.args,
    })
}

/// Whether the call `id` still waits (its process has not died meanwhile).
#[cfg(target_os = "linux")]
pub fn still_waiting(listener: &OwnedFd, id: u64) -> bool {
    // SAFETY: the ioctl reads one u64 from the pointer, valid for the call.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _,
            &id as *const u64,
        ) == 0
    }
}

#[cfg(target_os = "linux")]
fn answer(listener: &OwnedFd, id: u64, error: i32, flags: u32) -> io::Result<()> {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error,
        flags,
    };
    // SAFETY: the ioctl reads one seccomp_notif_resp from `resp`, valid for the call.
    let rc = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &mut resp as *mut libc::seccomp_notif_resp,
        )
    };
    crate::check(rc).map(drop)
}

/// Lets the waiting call `id` go on as if nothing had watched it.
#[cfg(target_os = "linux")]
pub fn let_run(listener: &OwnedFd, id: u64) -> io::Result<()> {
    answer(
        listener,
        id,
        0,
        libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    )
}

/// Makes the waiting call `id` fail with error number `errno`.
#[cfg(target_os = "linux")]
pub fn refuse(listener: &OwnedFd, id: u64, errno: i32) -> io::Result<()> {
    answer(listener, id, -errno, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    #[test]
    fn a_watched_childs_exec_waits_for_its_answer() {
        use std::os::unix::process::ExitStatusExt as _;
        // The filter goes on a thread of its own, which only starts the child.
        let (tx, rx) = std::sync::mpsc::channel();
        let starter = std::thread::spawn(move || {
            let listener = match watch_execs() {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return None;
                }
            };
            let _ = tx.send(listener.try_clone());
            std::process::Command::new("/bin/sh")
                .args(["-c", "exec /bin/true"])
                .stderr(std::process::Stdio::null())
                .spawn()
                .ok()
                .map(|c| (c, listener))
        });
        let listener = rx.recv().unwrap().expect("seccomp user notification");
        let mut execs = Vec::new();
        // The spawn's own exec, then the shell's; answered from here.
        for _ in 0..2 {
            let w = receive(&listener).unwrap();
            assert!(still_waiting(&listener, w.id));
            execs.push(w.call);
            if execs.len() == 1 {
                let_run(&listener, w.id).unwrap();
            } else {
                refuse(&listener, w.id, libc::EACCES).unwrap();
            }
        }
        let (mut child, _l) = starter.join().unwrap().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(execs, [ExecCall::Execve, ExecCall::Execve]);
        // The shell's `exec /bin/true` failed: it exits 126 (or 2, by shell).
        assert!(
            status.code().is_some_and(|c| c != 0),
            "{:?}",
            status.signal()
        );
    }
}
