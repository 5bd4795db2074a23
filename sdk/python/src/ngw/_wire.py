"""Nailgun chunk framing for the ngw channel.

A chunk is a 4-byte big-endian payload length, one type byte, then the payload. The
decoder checks every length against its cap as soon as the 5-byte header is complete,
before it buffers a single payload byte beyond what the socket already delivered.
"""

import struct

HEADER = struct.Struct(">IB")
HEADER_LEN = HEADER.size  # 5

#: Lengths at or above this are always refused: Nailgun peers read them as signed.
HARD_LIMIT = 1 << 31

#: The SDK's default cap on one inbound payload (ngd's own default is 8 MiB).
DEFAULT_MAX_CHUNK = 16 << 20

#: The SDK never sends an output chunk larger than this.
MAX_OUTPUT_CHUNK = 64 << 10

# Nailgun chunk types.
ARG = ord("A")
ENV = ord("E")
DIR = ord("D")
CMD = ord("C")
LONGARG = ord("L")
STDIN = ord("0")
STDIN_EOF = ord(".")
HEARTBEAT = ord("H")
STDOUT = ord("1")
STDERR = ord("2")
SEND_INPUT = ord("S")
EXIT = ord("X")
# ngw control types (lowercase; Nailgun itself never uses them).
HELLO = ord("h")
INTERRUPT = ord("i")
PING = ord("p")
PONG = ord("o")
QUIT = ord("q")
# Negotiated extensions (docs/ngw.md 15).
NOTICE = ord("n")
TAKEN = ord("t")  # descriptors taken (empty) or declined ("relay"), 15.4
STOPPED = ord("z")  # the command stopped itself, 15.5
# The Python SDK's own, from a worker to its sub-zygote only, never on ngd's channel
# (docs/ngw.md 12.4): a session's record (SessionInfo.to_wire, marshal) in place of its
# header, the client's descriptors with it.
RECORD = ord("r")
# From a sub-zygote to its worker only: the session's X went to ngd's channel itself
# (the payload is the X's); the session is over (docs/ngw.md 12.4).
EXIT_SENT = ord("x")


class Chunk(tuple):
    """A decoded chunk, (type, payload), that came with descriptors (SCM_RIGHTS,
    docs/ngw.md 15.4): `fds` lists the descriptors, which whoever holds the chunk owns
    and must close or hand on (`take_fds`)."""

    def __new__(cls, ty, payload, fds):
        self = super().__new__(cls, (ty, payload))
        self.fds = list(fds)
        return self

    def take_fds(self):
        """The descriptors, now the caller's (an empty list once taken)."""
        fds, self.fds = self.fds, []
        return fds


class ProtocolError(Exception):
    """The peer broke the framing or the session rules."""


def encode(ty, payload=b""):
    """One whole chunk as bytes."""
    return HEADER.pack(len(payload), ty) + payload


def type_name(ty):
    c = chr(ty)
    return repr(c) if c.isprintable() else "0x%02x" % ty


class Decoder:
    """Incremental chunk decoder with a payload cap."""

    def __init__(self, max_chunk=DEFAULT_MAX_CHUNK):
        self.max_chunk = min(max_chunk, HARD_LIMIT - 1)
        self._buf = bytearray()
        self._pos = 0
        self._base = 0  # stream offset of _buf[0]
        self.start = 0  # stream offset of the chunk next() returned last

    def feed(self, data):
        if self._pos and self._pos == len(self._buf):
            self._base += self._pos
            self._buf.clear()
            self._pos = 0
        elif self._pos > 65536 and self._pos * 2 > len(self._buf):
            self._base += self._pos
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def end(self):
        """The stream offset after the last byte fed."""
        return self._base + len(self._buf)

    def buffered(self):
        return len(self._buf) - self._pos

    def next(self):
        """The next whole chunk as (type, payload bytes), or None if more bytes are needed."""
        avail = len(self._buf) - self._pos
        if avail < HEADER_LEN:
            return None
        length, ty = HEADER.unpack_from(self._buf, self._pos)
        if length >= HARD_LIMIT or length > self.max_chunk:
            raise ProtocolError(
                "chunk %s announces a %d-byte payload, over the %d-byte limit"
                % (type_name(ty), length, self.max_chunk)
            )
        if avail < HEADER_LEN + length:
            return None
        self.start = self._base + self._pos
        start = self._pos + HEADER_LEN
        payload = bytes(self._buf[start : start + length])
        self._pos = start + length
        return ty, payload
