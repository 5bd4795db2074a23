"""The worker's end of the ngw channel: a non-blocking stream socket with an inbound
decoder and an outbound buffer, so the worker never blocks on a peer that stops reading."""

import collections
import os
import select
import socket
import stat
import time

from . import _wire

_READ_SIZE = 256 << 10


class Channel:
    def __init__(self, fd, max_chunk=_wire.DEFAULT_MAX_CHUNK):
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
        self.out = bytearray()
        self.deferred = collections.deque()
        self.eof = False  # ngd closed its sending side (or the socket failed)
        self.dead = False  # writing failed: ngd is gone

    def fileno(self):
        return self.fd

    # -- outbound -------------------------------------------------------------------------

    def send(self, ty, payload=b""):
        if self.dead:
            return
        self.out += _wire.encode(ty, payload)

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
            data = self.sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.decoder.feed(data)
        return True

    def next_chunk(self):
        """The next decoded chunk, (type, payload), or None. Raises ProtocolError."""
        if self.deferred:
            return self.deferred.popleft()
        return self.decoder.next()

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
        try:
            self.sock.close()
        except OSError:
            pass
