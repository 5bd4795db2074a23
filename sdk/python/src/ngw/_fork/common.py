"""What the worker side and the child side of fork mode share: the sizes of the records
they exchange, and `_signal`'s C functions. The C library's own functions are `_sys`'s
(`load_libc` and `libc_handle` are named here too, as the page tests import them)."""

import signal
import socket
import struct

from .._sys import libc_handle, load_libc  # noqa: F401  (tests/test_pages.py)

try:  # the C functions: signal's wrappers turn every signal of a mask into an enum member
    from _signal import getsignal  # (~2 us each: 0.1 ms for a full mask)
    from _signal import pthread_sigmask as sigmask
    from _signal import signal as setsignal
except ImportError:  # pragma: no cover
    getsignal, sigmask, setsignal = signal.getsignal, signal.pthread_sigmask, signal.signal

LEN = struct.Struct("=Q")  # the length of a spare's session record, before the record
REPORT = struct.Struct("=iI")  # a child's exit report: pid, exit status
#: In an exit report's status: the command stopped with the signal in the low byte (sent
#: by the session leader of a session with a controlling terminal, docs/ngw.md 15.7).
STOP_REPORT = 1 << 16
FD = struct.Struct("=i")
CMSG_SPACE = socket.CMSG_SPACE(3 * FD.size)  # room for three descriptors
