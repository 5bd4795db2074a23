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
