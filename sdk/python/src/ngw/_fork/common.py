"""What the worker side and the child side of fork mode share: the sizes of the records
they exchange, Linux's `prctl`, C `environ` and the C library itself (for `madvise`),
and `_signal`'s C functions."""

import signal
import socket
import struct
import sys

try:  # the C functions: signal's wrappers turn every signal of a mask into an enum member
    from _signal import getsignal  # (~2 us each: 0.1 ms for a full mask)
    from _signal import pthread_sigmask as sigmask
    from _signal import signal as setsignal
except ImportError:  # pragma: no cover
    getsignal, sigmask, setsignal = signal.getsignal, signal.pthread_sigmask, signal.signal

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
LEN = struct.Struct("=Q")  # the length of a spare's session record, before the record
REPORT = struct.Struct("=iI")  # a child's exit report: pid, exit status
#: In an exit report's status: the command stopped with the signal in the low byte (sent
#: by the session leader of a session with a controlling terminal, docs/ngw.md 15.7).
STOP_REPORT = 1 << 16
FD = struct.Struct("=i")
CMSG_SPACE = socket.CMSG_SPACE(3 * FD.size)  # room for three descriptors


_LIBC = []  # (the C library's handle, ctypes), once load_libc() has loaded it


def load_libc():
    """(prctl, the C `environ` variable, ctypes) on Linux; Nones where unavailable."""
    if not sys.platform.startswith("linux"):
        return None, None, None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (ImportError, OSError, AttributeError):
        return None, None, None
    _LIBC[:] = [(libc, ctypes)]
    try:
        environ = ctypes.c_void_p.in_dll(libc, "environ")
    except (ValueError, AttributeError):
        return prctl, None, None
    return prctl, environ, ctypes


def libc_handle():
    """(the C library's handle, loaded with use_errno, and ctypes), or None: what
    load_libc() loaded."""
    return _LIBC[0] if _LIBC else None


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
        import os
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
            if ctypes.c_int.from_address(tid).value != threading_native_id():
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
        import os

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


def threading_native_id():
    import threading

    return threading.get_native_id()
