"""The session child's standard streams, from both sides: the pipes and ptys the parent
creates (`Stream`, `make_streams`, pty modes and window size, docs/ngw.md 11.3) and the
`sys.stdin/stdout/stderr` objects the child builds on fds 0-2 the way CPython builds them at
start-up (docs/ngw.md 11.1 step 8)."""

import fcntl
import io
import os
import stat
import struct
import sys
import termios

from .. import _pyexit, _wire


def close_fd(fd):
    """Closes `fd` unless it is None or negative; errors are ignored."""
    if fd is not None and fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def close_streams(streams):
    for s in streams:
        close_fd(s.fd)
        close_fd(s.child_fd)
        s.fd = s.child_fd = -1


def make_streams(info):
    """The session's stdin, stdout and stderr: pipes, or ptys where the client's are
    terminals. Without `info` (a spare's, made before its session is known): pipes."""
    streams = []
    winsize = winsize_of(info.env, info.meta) if info is not None else None
    try:
        for n in range(3):
            if info is not None and info.tty[n]:
                master, slave = os.openpty()
                streams.append(Stream(master, slave, True))
                configure_pty(slave, n == 0, winsize)
            else:
                r, w = os.pipe()
                streams.append(Stream(w, r, False) if n == 0 else Stream(r, w, False))
            os.set_blocking(streams[-1].fd, False)
    except OSError:
        close_streams(streams)
        raise
    streams[1].ty = _wire.STDOUT
    streams[2].ty = _wire.STDERR
    return streams


def winsize_of(env, meta=None):
    """An emulated terminal's size, (rows, cols, xpixel, ypixel): the client's terminal's
    when ngd passes it (`NGW_CLIENT_WINSIZE=<cols> <rows> <xpixel> <ypixel>`), else
    `LINES`x`COLUMNS` from the client's environment, else 24x80."""
    raw = (meta or {}).get("NGW_CLIENT_WINSIZE", "").split()
    if len(raw) == 4 and all(w.isdigit() for w in raw):
        cols, rows, xpixel, ypixel = (int(w) for w in raw)
        if 0 < rows <= 0xFFFF and 0 < cols <= 0xFFFF and xpixel <= 0xFFFF and ypixel <= 0xFFFF:
            return rows, cols, xpixel, ypixel
    try:
        rows, cols = int(env.get("LINES", "")), int(env.get("COLUMNS", ""))
        if 0 < rows <= 0xFFFF and 0 < cols <= 0xFFFF:
            return rows, cols, 0, 0
    except ValueError:
        pass
    return 24, 80, 0, 0


def configure_pty(slave, for_input, winsize):
    attrs = termios.tcgetattr(slave)
    iflag, oflag, cflag, lflag, ispeed, ospeed, cc = attrs
    # No input translation, no flow control, no output processing: bytes pass unchanged
    # (the client's own terminal does the CR/LF work, as it would for a cold run).
    iflag &= ~(termios.IGNBRK | termios.BRKINT | termios.PARMRK | termios.ISTRIP
               | termios.INLCR | termios.IGNCR | termios.ICRNL | termios.IXON | termios.IXOFF)
    oflag &= ~termios.OPOST
    cflag = (cflag & ~(termios.CSIZE | termios.PARENB)) | termios.CS8
    lflag &= ~(termios.ECHO | termios.ECHOE | termios.ECHOK | termios.ECHONL | termios.ISIG
               | termios.IEXTEN)
    cc = list(cc)
    if for_input:
        # Canonical, no echo: the client's terminal already edited and echoed the line;
        # canonical mode lets the parent deliver end-of-file as VEOF, like a real terminal.
        lflag |= termios.ICANON
        for name in ("VERASE", "VKILL", "VEOL", "VEOL2", "VWERASE", "VREPRINT", "VLNEXT"):
            idx = getattr(termios, name, None)
            if idx is not None:
                cc[idx] = b"\0"
        cc[termios.VEOF] = b"\x04"
    else:
        lflag &= ~termios.ICANON
        cc[termios.VMIN] = 1
        cc[termios.VTIME] = 0
    termios.tcsetattr(slave, termios.TCSANOW, [iflag, oflag, cflag, lflag, ispeed, ospeed, cc])
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *winsize))


class Stream:
    """One of the child's standard streams, seen from the parent."""

    __slots__ = ("fd", "child_fd", "pty", "ty")

    def __init__(self, fd, child_fd, pty, ty=None):
        self.fd = fd
        self.child_fd = child_fd
        self.pty = pty
        self.ty = ty



def stdio_key(env):
    """What of the client's environment decides how CPython builds its stdio."""
    return bool(env.get("PYTHONUNBUFFERED")), env.get("PYTHONIOENCODING", "")


def stdio_env(key):
    """An environment with just what `key` (from stdio_key) says."""
    env = {}
    if key[0]:
        env["PYTHONUNBUFFERED"] = "1"
    if key[1]:
        env["PYTHONIOENCODING"] = key[1]
    return env


def worker_stdio():
    """The worker's own stdin/stdout/stderr encodings and error handlers, which session
    children use unless PYTHONIOENCODING says otherwise. Read before forking: in a spare,
    sys.__stdout__ is already one built for a session."""
    return tuple((getattr(f, "encoding", None), getattr(f, "errors", None))
                 for f in (sys.__stdin__, sys.__stdout__, sys.__stderr__))


def rebuild_stdio(info):
    """install_stdio() for a session in this process, building every object afresh
    rather than reusing a spare's prebuilt ones (benches/plugin/fork_probe.py times it)."""
    install_stdio(info.env, worker_stdio())


try:
    _NULL_RDEV = os.stat(os.devnull).st_rdev
except OSError:  # pragma: no cover
    _NULL_RDEV = None


def fd_kind(fd):
    """Which of a spare's prebuilt objects is what make_stdio() would build on `fd` now:
    "pipe" for a pipe, FIFO or socket (never a terminal, never seekable: what the spare's
    own pipes are), "null" for the null device (seekable, always at offset 0, not a
    terminal), None for anything else (a terminal, a file at some offset, closed)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        return "pipe"
    if stat.S_ISCHR(st.st_mode) and _NULL_RDEV is not None and st.st_rdev == _NULL_RDEV:
        return "null"
    return None


def null_stdio(env, inherited):
    """In a spare, before its pipes go on fds 0-2: the objects make_stdio() builds when
    fds 0-2 are the null device, for sessions whose descriptors are (`ng ... >/dev/null`).
    Built with the null device on fds 0-2 for the while; fds 0-2 are left on it."""
    fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        for n in range(3):
            os.dup2(fd, n)
    finally:
        if fd > 2:
            os.close(fd)
    return make_stdio(env, inherited)


def install_stdio(env, inherited, made=None):
    """New sys.stdin/stdout/stderr on fds 0-2, built the way CPython builds them at startup
    (line buffering on terminals, stderr always line-buffered, PYTHONUNBUFFERED and
    PYTHONIOENCODING from the client's environment; otherwise the worker's encoding); None
    for a closed descriptor. `made`: the three objects, when the caller has them."""
    if made is None:
        made = make_stdio(env, inherited)
    # Objects that preloaded modules may still hold also write to fds 0-2 now; flush
    # them at exit like the new ones.
    _pyexit.also_flush.extend(f for f in (sys.stdout, sys.__stdout__) if f is not None)
    _pyexit.also_flush_err.extend(f for f in (sys.stderr, sys.__stderr__) if f is not None)
    sys.stdin = sys.__stdin__ = made[0]
    sys.stdout = sys.__stdout__ = made[1]
    sys.stderr = sys.__stderr__ = made[2]


def make_stdio(env, inherited, only=(0, 1, 2)):
    """The objects for fds 0-2 (for the fds not in `only`: None)."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    enc_override, _, err_override = env.get("PYTHONIOENCODING", "").partition(":")
    made = []
    names = ("<stdin>", "<stdout>", "<stderr>")
    for fd, name, (old_encoding, old_errors) in zip((0, 1, 2), names, inherited):
        if fd not in only:
            made.append(None)
            continue
        try:
            os.fstat(fd)
        except OSError:  # closed (the client's map left it out): None, as CPython has it
            made.append(None)
            continue
        encoding = enc_override or old_encoding or "utf-8"
        if fd == 2:
            errors = "backslashreplace"
        else:
            errors = err_override or old_errors or "strict"
        write = fd != 0
        raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
        raw.name = name
        if write and unbuffered:
            buf = raw
        elif write:
            buf = io.BufferedWriter(raw)
        else:
            buf = io.BufferedReader(raw)
        tty = raw.isatty()
        text = io.TextIOWrapper(buf, encoding=encoding, errors=errors, newline="\n",
                                line_buffering=write and not unbuffered and (tty or fd == 2),
                                write_through=write and unbuffered)
        text.mode = "w" if write else "r"
        made.append(text)
    return made

