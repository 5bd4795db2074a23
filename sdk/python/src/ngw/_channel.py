"""The worker's end of the ngw channel: a non-blocking stream socket with an inbound
decoder and an outbound buffer, so the worker never blocks on a peer that stops reading.

Descriptors (docs/ngw.md 15.4). The socket is read with `recvmsg`, room for a few
descriptors and `MSG_CMSG_CLOEXEC`. The kernel hands descriptors to the read that returns
the first byte they were sent with and ends that read with their message, so ngd's header,
sent with one `sendmsg`, starts inside the bytes of the read that carried them; bytes
before it in the same read are earlier chunks (a ping, a stdin answer crossing an `X`),
never a header, since ngd sends a header only after the previous session's `X`. So the
descriptors belong to the first header chunk (`A E D C`) that starts within that read; the
decoder returns it as a `_wire.Chunk` carrying them. Descriptors whose read has no header
chunk starting in it, or that came truncated (`MSG_CTRUNC`), are closed at once.
"""

import array
import collections
import fcntl
import os
import select
import socket
import stat
import time

from . import _wire

_REPORT_PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

_READ_SIZE = 256 << 10
_FD_SIZE = array.array("i").itemsize
_CMSG_SPACE = socket.CMSG_SPACE(5 * _FD_SIZE)  # ngd sends at most 4; one more shows excess
_MAX_PENDING = 16  # reads with descriptors not yet matched to a chunk; more are closed
_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
_HEADER = (_wire.ARG, _wire.ENV, _wire.DIR, _wire.CMD)


def report_pipe():
    """A pipe that forked children report to: (read end, non-blocking; write end; the
    path a child opens the write end by, `/proc/<worker>/fd/<n>`, or None where /proc
    does not show it). Enlarged to 1 MiB where the kernel allows, so that a report is
    rarely cut short by a full pipe."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        fcntl.fcntl(w, _F_SETPIPE_SZ, _REPORT_PIPE_SIZE)
    except OSError:
        pass
    path = "/proc/%d/fd/%d" % (os.getpid(), w)
    return r, w, (path if os.path.exists(path) else None)


def close_fds(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Channel:
    """One end of an ngw channel. `records`: a sub-zygote's, from the worker it serves,
    whose session records (`_wire.RECORD`, docs/ngw.md 12.4) bring descriptors as a
    header's first chunk does."""

    def __init__(self, fd, max_chunk=_wire.DEFAULT_MAX_CHUNK, records=False):
        st = os.fstat(fd)
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError("NGW_FD=%d is not a socket" % fd)
        self.sock = socket.socket(fileno=fd)
        if self.sock.type != socket.SOCK_STREAM:
            raise OSError("NGW_FD=%d is not a stream socket" % fd)
        self.sock.set_inheritable(False)
        self.sock.setblocking(False)
        self.fd = fd
        self.decoder = _wire.Decoder(max_chunk)
        # Every read lands here: a fresh buffer of _READ_SIZE per read would be a fresh
        # mapping (above malloc's mmap threshold), with its page faults and munmap, on
        # every chunk's way in (~35 us per read on the machine measured).
        self._rbuf = bytearray(_READ_SIZE)
        self.out = bytearray()
        # A sub-zygote's, for one session: ngd's channel itself (a descriptor the worker
        # sent with the session's record), where the session's X goes when nothing else
        # of the session went to the worker; and the page shared with the worker where
        # it marks, before that write, that the X may have gone (docs/ngw.md 12.4).
        self.direct = None
        self.mark = None
        self.deferred = collections.deque()
        self.eof = False  # ngd closed its sending side (or the socket failed)
        self.dead = False  # writing failed: ngd is gone
        # Descriptors not yet matched to a chunk: [stream offset where their read began,
        # offset where it ended, descriptors], in stream order.
        self.pending_fds = []
        self._takes_fds = _HEADER + ((_wire.RECORD,) if records else ())

    def fileno(self):
        return self.fd

    # -- outbound -------------------------------------------------------------------------

    def send(self, ty, payload=b""):
        if self.dead:
            return
        if self.direct is not None:
            if ty == _wire.EXIT and not self.out and self._exit_direct(payload):
                return
            self.drop_direct()  # the session's chunks go to the worker, its X after them
        self.out += _wire.encode(ty, payload)

    def take_direct(self, fd):
        """A session's descriptor of ngd's channel, with its record (a sub-zygote's)."""
        self.drop_direct()
        if self.mark is None:
            os.close(fd)
        else:
            self.direct = fd

    def drop_direct(self):
        fd, self.direct = self.direct, None
        if fd is not None:
            os.close(fd)

    def _exit_direct(self, payload):
        """Writes the session's X to ngd's channel itself, then tells the worker that it
        did (`EXIT_SENT`). The mark goes first: a worker that finds its sub-zygote dead
        with the mark set cannot know whether the X arrived. False when ngd's channel
        failed before any of it was written (the X then goes through the worker, which
        finds ngd gone too)."""
        fd, self.direct = self.direct, None
        data = memoryview(_wire.encode(_wire.EXIT, payload))
        sent = 0
        self.mark[0] = 1
        try:
            while sent < len(data):
                try:
                    sent += os.write(fd, data[sent:])
                except (BlockingIOError, InterruptedError):
                    # Non-blocking, as the worker's end is (one open file); ngd reads its
                    # workers' channels as they fill.
                    select.select([], [fd], [], 1.0)
        except OSError:
            if not sent:
                self.mark[0] = 0
                return False
        finally:
            os.close(fd)
        self.out += _wire.encode(_wire.EXIT_SENT, payload)
        return True

    def flush_some(self):
        """Writes what the socket takes now. True when nothing is left to write."""
        while self.out and not self.dead:
            try:
                n = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:
                self.dead = True
                self.out.clear()
                return True
            del self.out[:n]
        return True

    # -- inbound --------------------------------------------------------------------------

    def read_some(self):
        """Reads what the socket has now into the decoder. False at end of stream."""
        if self.eof:
            return False
        try:
            n, anc, flags, _ = self.sock.recvmsg_into([self._rbuf], _CMSG_SPACE, _CLOEXEC)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            n, anc, flags = 0, [], 0
        fds = _received_fds(anc)
        if fds and (flags & socket.MSG_CTRUNC or not n or len(fds) > 4
                    or len(self.pending_fds) >= _MAX_PENDING):
            close_fds(fds)
            fds = []
        if not n:
            self.eof = True
            self.drop_pending_fds()
            return False
        start = self.decoder.end()
        with memoryview(self._rbuf) as view:
            self.decoder.feed(view[:n])
        if fds:
            self.pending_fds.append([start, start + n, fds])
        return True

    def next_chunk(self):
        """The next decoded chunk, (type, payload), or None. Raises ProtocolError. A
        header chunk (or a sub-zygote's record) that came with descriptors is a
        `_wire.Chunk` carrying them."""
        if self.deferred:
            return self.deferred.popleft()
        c = self.decoder.next()
        if c is not None and self.pending_fds:
            c = self._match_fds(c, self.decoder.start)
        return c

    def _match_fds(self, chunk, start):
        pending = self.pending_fds
        while pending:
            begin, end, fds = pending[0]
            if start >= end:  # no header chunk started in their read
                close_fds(fds)
                pending.pop(0)
                continue
            if start >= begin and chunk[0] in self._takes_fds:
                pending.pop(0)
                return _wire.Chunk(chunk[0], chunk[1], fds)
            break
        return chunk

    def held_fds(self):
        """The descriptors received and not yet handed on: those waiting for their chunk
        and those of chunks put back. A child forked meanwhile must close its copies."""
        fds = [fd for _, _, some in self.pending_fds for fd in some]
        if self.direct is not None:
            fds.append(self.direct)
        for c in self.deferred:
            if isinstance(c, _wire.Chunk):
                fds.extend(c.fds)
        return fds

    def drop_pending_fds(self):
        for _, _, fds in self.pending_fds:
            close_fds(fds)
        self.pending_fds = []

    def push_back(self, chunk):
        self.deferred.appendleft(chunk)

    # -- blocking helpers for the idle loop ------------------------------------------------

    def poll(self, timeout, read=True, extra=None):
        """Waits until the socket is readable (if read) or writable with pending output,
        or until descriptor `extra` is readable: then returns True."""
        events = (select.POLLIN if read and not self.eof else 0) | (
            select.POLLOUT if self.out and not self.dead else 0
        )
        if not events and extra is None:
            return False
        p = select.poll()
        if events:
            p.register(self.fd, events)
        if extra is not None:
            p.register(extra, select.POLLIN)
        extra_ready = False
        for fd, ev in p.poll(None if timeout is None else max(0, timeout) * 1000):
            if fd == extra:
                extra_ready = True
                continue
            if ev & select.POLLOUT or (ev & (select.POLLERR | select.POLLHUP) and self.out):
                self.flush_some()
            if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                self.read_some()
        return extra_ready

    def recv_chunk(self, timeout=None):
        """The next chunk, flushing output meanwhile. None at end of stream or timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            c = self.next_chunk()
            if c is not None:
                return c
            if self.eof:
                return None
            self.flush_some()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            self.poll(left)

    def flush_all(self, timeout=None):
        """Blocks until all output is written (or ngd is gone); keeps reading meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.flush_some():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.poll(left, read=self.decoder.buffered() < (1 << 20))
        return True

    def close(self):
        self.drop_pending_fds()
        for c in self.deferred:
            if isinstance(c, _wire.Chunk):
                close_fds(c.take_fds())
        try:
            self.sock.close()
        except OSError:
            pass


def _received_fds(ancdata):
    fds = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[: len(data) - len(data) % _FD_SIZE])
            fds.extend(a)
    if fds and not _CLOEXEC:
        for fd in fds:
            os.set_inheritable(fd, False)
    return fds
