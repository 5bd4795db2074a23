"""Session headers: what ngd sends before `C`, turned into a SessionInfo."""

import os
import signal

from . import _wire

#: Environment entries that describe the Nailgun client rather than the user's
#: environment. The stock C client synthesises them; the SDK removes them from the
#: command's environment and exposes them on the context instead.
NAILGUN_SYNTHETIC = (
    "NAILGUN_FILESEPARATOR",
    "NAILGUN_PATHSEPARATOR",
    "NAILGUN_TTY_0",
    "NAILGUN_TTY_1",
    "NAILGUN_TTY_2",
)


class SessionInfo:
    """Everything the header says about one invocation."""

    __slots__ = ("command", "args", "env", "cwd", "umask", "tty", "session", "client_pid",
                 "meta", "nailgun", "cold", "fds", "pty")

    def __repr__(self):
        return "<SessionInfo %s %r session=%s>" % (self.command, self.args, self.session)

    def to_wire(self):
        """The record as a dict of plain values, by field name (what the worker sends a
        forked-ahead child with marshal)."""
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_wire(cls, fields):
        """The record `to_wire` made. A missing or unknown field is an error."""
        if set(fields) != set(cls.__slots__):
            raise ValueError("session record with fields %s" % sorted(fields))
        info = cls()
        for name in cls.__slots__:
            setattr(info, name, fields[name])
        return info

    @classmethod
    def blank(cls, env):
        """A stand-in record (no arguments, no directory, `env`): the rehearsal's."""
        info = cls()
        info.command, info.args, info.env, info.cwd = "", [], env, None
        info.umask, info.tty, info.session, info.client_pid = 0o022, (False,) * 3, "", None
        info.meta, info.nailgun, info.cold, info.fds = {}, {}, None, None
        info.pty = None
        return info

    def pty_map(self, fd_map):
        """Which of fds 0-2 the client's pseudo-terminal stands for (`NGW_CLIENT_PTY`,
        docs/ngw.md 15.7), as a tuple: a non-empty strictly increasing subset of `fd_map`;
        None when the entry is missing or malformed."""
        raw = self.meta.get("NGW_CLIENT_PTY")
        if not raw:
            return None
        try:
            numbers = tuple(int(p) for p in raw.split(","))
        except ValueError:
            return None
        if (any(n not in fd_map for n in numbers)
                or list(numbers) != sorted(set(numbers))):
            return None
        return numbers

    def fd_map(self, count):
        """Which of fds 0-2 the `count` descriptors that came with the header become
        (`NGW_CLIENT_FDS`, docs/ngw.md 15.4), as a tuple; None when the entry is missing,
        malformed (not a strictly increasing subset of 0,1,2) or names another count."""
        raw = self.meta.get("NGW_CLIENT_FDS")
        if raw is None:
            return None
        try:
            numbers = tuple(int(p) for p in raw.split(",")) if raw else ()
        except ValueError:
            return None
        if (len(numbers) != count or any(n not in (0, 1, 2) for n in numbers)
                or list(numbers) != sorted(set(numbers))):
            return None
        return numbers

    def ignored_signals(self):
        """The signals `NGW_SIGIGN` names (docs/ngw.md 15.5), as numbers; unknown names
        are left out."""
        found = []
        for name in self.meta.get("NGW_SIGIGN", "").split(","):
            sig = getattr(signal.Signals, name.strip(), None) if name.strip() else None
            if sig is not None and sig not in (signal.SIGKILL, signal.SIGSTOP):
                found.append(int(sig))
        return found


def _flag(value):
    # The C client sends "0"/"1"; be generous with anything int-like.
    try:
        return int(value.strip() or "0") != 0
    except ValueError:
        return False


class HeaderBuilder:
    """Accumulates A/E/D chunks until C."""

    def __init__(self):
        self.args = []
        self.env = {}
        self.meta = {}
        self.nailgun = {}
        self.cwd = None
        self.fds = []  # descriptors that came with the header's first chunk

    def empty(self):
        return not (self.args or self.env or self.meta or self.nailgun or self.cwd is not None)

    def add(self, ty, payload):
        if ty == _wire.ARG:
            self.args.append(os.fsdecode(payload))
        elif ty == _wire.ENV:
            name, sep, value = payload.partition(b"=")
            if not sep or not name or b"\0" in payload:
                return  # malformed entries are dropped (no environment can hold them)
            name = os.fsdecode(name)
            value = os.fsdecode(value)
            if name.startswith("NGW_"):
                self.meta[name] = value
            elif name in NAILGUN_SYNTHETIC:
                self.nailgun[name] = value
            else:
                self.env[name] = value
        elif ty == _wire.DIR:
            self.cwd = os.fsdecode(payload)
        # anything else before C (L, H, unknown) is ignored

    def finish(self, command_payload, default_umask):
        info = SessionInfo()
        info.command = os.fsdecode(command_payload)
        info.args = self.args
        info.env = self.env
        info.cwd = self.cwd
        info.meta = self.meta
        info.nailgun = self.nailgun
        umask = self.meta.get("NGW_UMASK")
        try:
            info.umask = int(umask, 8) & 0o777 if umask is not None else default_umask
        except ValueError:
            info.umask = default_umask
        info.tty = tuple(_flag(self.nailgun.get("NAILGUN_TTY_%d" % i, "0")) for i in range(3))
        info.session = self.meta.get("NGW_SESSION", "")
        info.cold = None  # set by the worker: why this session runs the cold way
        info.fds = None  # set by the worker: the fd map when the command takes the client's
        info.pty = None  # set by the worker: the fds its pseudo-terminal replaces (ctty)
        try:
            info.client_pid = int(self.meta["NGW_CLIENT_PID"])
        except (KeyError, ValueError):
            info.client_pid = None
        return info
