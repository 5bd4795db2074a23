"""What the worker side and the child side of fork mode share: the sizes of the records
they exchange and their reader (`Inbox`), where a session's child runs (`Place`), and
`_signal`'s C functions. The C library's own functions are `_sys`'s (`load_libc` and
`libc_handle` are named here too, as the page tests import them)."""

import enum
import marshal
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


class Place(enum.Enum):
    """Where a session's child runs, in sessions and process groups (docs/ngw.md 15.5,
    15.7): the child and the worker both act on it."""

    #: On the client's own terminal (`ctty`): the child leads a session of its own, with
    #: the terminal as its controlling terminal (`lead.Leading`).
    TERMINAL = "terminal"
    #: Stdin is a pseudo-terminal of the worker's: its own session, with that terminal as
    #: its controlling terminal.
    EMULATED = "emulated"
    #: With `signals`: a process group of its own in the worker's session (set by the
    #: worker and by the child, whichever runs first), where stops work.
    GROUP = "group"
    #: Without `signals`: the session of its own it started when it was forked.
    SESSION = "session"


def placement(info, job_control):
    """The `Place` of a session (`info`, a SessionInfo). `job_control`: `signals` was
    negotiated."""
    if info.pty is not None:  # (only with the client's descriptors, `info.fds`)
        return Place.TERMINAL
    if info.tty[0] and info.fds is None:
        return Place.EMULATED
    return Place.GROUP if job_control else Place.SESSION


class Inbox:
    """Records read from a socket (each a LEN-prefixed marshal dump), and the descriptors
    that came with them (SCM_RIGHTS). It does no I/O itself: the reader feeds it what
    `recvmsg` returned."""

    __slots__ = ("buf", "fds")

    def __init__(self):
        self.buf = bytearray()  # what was read past the records taken
        self.fds = []  # descriptors received and not taken

    def feed(self, data, ancdata=()):
        """What one `recvmsg` returned: its data and its ancillary data."""
        for level, kind, cdata in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                self.fds.extend(FD.unpack_from(cdata, i)[0]
                                for i in range(0, len(cdata) - len(cdata) % 4, 4))
        self.buf += data

    def whole(self):
        """Whether a whole record is there."""
        buf = self.buf
        return len(buf) >= LEN.size and len(buf) >= LEN.size + LEN.unpack_from(buf)[0]

    def take(self):
        """The first record (there must be a whole one: `whole`); the descriptors stay
        until `take_fds`."""
        end = LEN.size + LEN.unpack_from(self.buf)[0]
        record = marshal.loads(memoryview(self.buf)[LEN.size:end])
        del self.buf[:end]
        return record

    def take_fds(self):
        """The descriptors received so far."""
        fds, self.fds = self.fds, []
        return fds
