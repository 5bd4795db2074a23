"""Every call into the C library that the standard library does not offer: the one module
of the SDK that uses ctypes. Linux only; elsewhere (or without ctypes) each helper says
it could not, and its callers do without.

* `load_libc`: the C library's handle, loaded once (the worker loads it before it forks,
  so that no child loads it again);
* `die_with_parent`: `PR_SET_PDEATHSIG`, for every process that must not outlive its
  parent (a session's child, a spare's successor, the command of a session leader, a
  sub-zygote);
* `set_thread_name`, `rewrite_cmdline`: what `ps` shows (`_argv.set_process_identity`);
* `CEnviron`: the C `environ` pointed at a new array (a fork-mode child's environment);
* `bind_madvise`: `madvise` for the learned pages' pre-faulting (`_pages`);
* `inotify_init`, `inotify_add_watch`: the stale-code watch (`_stale`);
* `Cloner`: `clone(CLONE_PARENT)` with CPython's fork hooks (a spare's successor).
"""

import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_MM = 35
PR_SET_MM_ARG_END = 9

_LIBC = []  # (the C library's handle, ctypes), once load_libc() has loaded it


def load_libc():
    """Loads the C library (once): whether it is there (Linux, with ctypes)."""
    if _LIBC:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl  # noqa: B018  (no prctl: no C library worth using)
    except (ImportError, OSError, AttributeError):
        return False
    _LIBC[:] = [(libc, ctypes)]
    return True


def libc_handle():
    """(the C library's handle, loaded with use_errno, and ctypes), or None: what
    load_libc() loaded."""
    return _LIBC[0] if _LIBC else None


def _prctl(*args):
    """prctl(2) with `args` (ints, or ctypes values); False without a C library."""
    if not load_libc():
        return False
    _LIBC[0][0].prctl(*args)
    return True


def die_with_parent(parent, status):
    """This process gets SIGKILL when its parent exits (`PR_SET_PDEATHSIG`). If the
    parent, whose pid is `parent`, exited before the request took effect, this process
    exits at once with `status`. Returns False, having done nothing, where the request
    cannot be made."""
    if not _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0):
        return False
    if os.getppid() != parent:
        os._exit(status)
    return True


def set_thread_name(name):
    """`PR_SET_NAME`: the thread's name, at most 15 bytes of `name` (bytes)."""
    if not load_libc():
        return
    _LIBC[0][0].prctl(PR_SET_NAME, _LIBC[0][1].c_char_p(name[:15]), 0, 0, 0)


def rewrite_cmdline(start, size, data):
    """Overwrites the original argv area (`size` bytes at `start`) with `data` (at most
    `size` bytes, NUL-terminated) and NULs, and moves the area's end to `data`'s, which
    the kernel allows with CAP_SYS_RESOURCE only (`PR_SET_MM_ARG_END`; without it the
    rest of the area stays NULs)."""
    if not load_libc():
        return
    libc, ctypes = _LIBC[0]
    ctypes.memset(start, 0, size)
    ctypes.memmove(start, data, len(data))
    libc.prctl(PR_SET_MM, PR_SET_MM_ARG_END, ctypes.c_ulong(start + len(data)), 0, 0)


class CEnviron:
    """The C library's `environ` variable, pointed at arrays built here. An array type
    per capacity is made once (making one costs ~25 us): the worker makes the common ones
    before it forks, a child makes others."""

    def __init__(self, variable, ctypes):
        self._variable = variable
        self._ctypes = ctypes
        self._types = {cap: ctypes.c_char_p * cap for cap in (64, 128, 256)}

    @classmethod
    def find(cls):
        """The C `environ`, or None where it cannot be reached."""
        if not load_libc():
            return None
        libc, ctypes = _LIBC[0]
        try:
            return cls(ctypes.c_void_p.in_dll(libc, "environ"), ctypes)
        except (ValueError, AttributeError):
            return None

    def array(self, entries):
        """A C array of `entries` (bytes, b"NAME=VALUE") and a terminating NULL."""
        cap = 64
        while cap <= len(entries):
            cap *= 2
        t = self._types.get(cap)
        if t is None:
            t = self._types[cap] = self._ctypes.c_char_p * cap
        return t(*entries)

    def point(self, array):
        """`environ` becomes `array` (the caller keeps it, and its entries, alive)."""
        self._variable.value = self._ctypes.addressof(array)


def bind_madvise(libc):
    """madvise(2) from `libc`, a (handle, ctypes) pair as `libc_handle()` gives: a
    function (address, length, advice) -> 0, or the errno of its failure."""
    handle, ctypes = libc
    fn = handle.madvise
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    get_errno = ctypes.get_errno

    def madvise(address, length, advice):
        return 0 if fn(address, length, advice) == 0 else get_errno()

    return madvise


def inotify_init(flags):
    """inotify_init1(2): a descriptor, or -1 (None where there is no C library)."""
    if not load_libc():
        return None
    return _LIBC[0][0].inotify_init1(flags)


def inotify_add_watch(fd, path, mask):
    """inotify_add_watch(2) of `path` (bytes): a watch descriptor, or -1."""
    return _LIBC[0][0].inotify_add_watch(fd, path, mask)


CLONE_PARENT = 0x00008000
CLONE_CHILD_SETTID = 0x01000000
#: The clone system call's number, and the offset of the thread id that the C library
#: keeps in its thread descriptor (glibc's `struct pthread`, `tid`), per machine. Where
#: either is unknown, spares are not cloned.
_CLONE = {"x86_64": (56, 0x2D0)}
#: The environment variable that turns cloning spares off (`0`).
CLONE_ENV = "NGW_CLONE"


class Cloner:
    """`clone(CLONE_PARENT)` for Python: a copy of this process whose parent is this
    process's parent (docs/ngw.md 11.5, "The spare's successor"). It is `os.fork()`
    with one flag more: CPython's own fork hooks run as os.fork runs them
    (`PyOS_BeforeFork`, `PyOS_AfterFork_Child`/`_Parent`: the import lock, the thread
    states, `os.register_at_fork` functions such as `random`'s reseeding), and the C
    library's cached thread id is set by the kernel (`CLONE_CHILD_SETTID`), as glibc's
    fork sets it. What glibc's fork does besides is for processes with several threads
    or `pthread_atfork` handlers: a process clones only while it has one thread.

    `Cloner.probe(log)` returns one, or None (and logs why) where it cannot be exact:
    not Linux on a known machine, `NGW_CLONE=0`, no ctypes, or a C library whose thread
    descriptor does not hold this thread's id where expected."""

    __slots__ = ("_syscall", "_api", "_tid", "_ctypes", "_flags")

    @classmethod
    def probe(cls, log):
        import platform

        if os.environ.get(CLONE_ENV, "") == "0":
            log("ngw: spares are forked by the worker only (%s=0)" % CLONE_ENV)
            return None
        known = _CLONE.get(platform.machine()) if sys.platform.startswith("linux") else None
        if known is None:
            return None
        try:
            import ctypes

            lib = ctypes.PyDLL(None, use_errno=True)  # keeps the GIL across the call
            syscall = lib.syscall
            syscall.restype = ctypes.c_long
            syscall.argtypes = [ctypes.c_long, ctypes.c_ulong] + [ctypes.c_void_p] * 4
            pthread_self = lib.pthread_self
            pthread_self.restype = ctypes.c_void_p
            api = ctypes.pythonapi
            hooks = (api.PyOS_BeforeFork, api.PyOS_AfterFork_Child, api.PyOS_AfterFork_Parent)
            for fn in hooks:
                fn.restype = None
                fn.argtypes = []
            tid = pthread_self() + known[1]
            if ctypes.c_int.from_address(tid).value != _native_thread_id():
                log("ngw: spares are forked by the worker only: the C library keeps its "
                    "thread id elsewhere")
                return None
        except (ImportError, OSError, AttributeError, TypeError, ValueError) as e:
            log("ngw: spares are forked by the worker only: %s" % e)
            return None
        self = cls()
        self._syscall = (syscall, known[0])
        self._api = hooks
        self._tid = tid
        self._ctypes = ctypes
        self._flags = CLONE_PARENT | CLONE_CHILD_SETTID | int(signal.SIGCHLD)
        return self

    def ready(self):
        """Whether this process can be cloned now: one thread, and the C library's
        thread id is this process's id (a single-threaded process forked by glibc, or
        cloned here)."""
        try:
            if len(os.listdir("/proc/self/task")) != 1:
                return False
            return self._ctypes.c_int.from_address(self._tid).value == os.getpid()
        except OSError:
            return False

    def clone(self):
        """Like os.fork(): 0 in the copy, its pid here (OSError if it failed). The copy
        is a child of this process's parent."""
        before, after_child, after_parent = self._api
        syscall, number = self._syscall
        sys.audit("os.fork")
        before()
        pid = syscall(number, self._flags, None, None, self._tid, None)
        if pid == 0:
            after_child()
            return 0
        errno = self._ctypes.get_errno() if pid < 0 else 0
        after_parent()
        if pid < 0:
            raise OSError(errno, "clone(CLONE_PARENT) failed")
        return pid


def _native_thread_id():
    import threading

    return threading.get_native_id()
