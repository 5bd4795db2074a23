"""Fork-per-session: the worker (the zygote) has imported what it was told to preload;
each session runs in a fresh child forked from it, with exact argv, environment, working
directory and umask, and fd-level standard streams (pipes, or ptys where the client's
streams are terminals) that the parent relays to and from the channel.

The parent is single-threaded: one poll() loop over the channel, the child's streams and
a SIGCHLD wakeup. It never blocks on a write, so an `i` from ngd is seen even while the
client is not reading and the child is flooding output.
"""

import errno
import fcntl
import io
import os
import select
import signal
import socket
import struct
import sys
import termios
import threading
import time

from . import _pyexit, _wire
from ._context import Context
from ._inline import signal_for

_HIGH_WATER = 1 << 20  # outbound channel bytes before the child's output is left unread
_DRAIN_IDLE = 0.1  # after the child exits: how long silent streams stay open (grandchildren)
_CHILD_POLL = 0.5  # seconds between waitpid() checks when no event arrives
_READ_SIZE = _wire.MAX_OUTPUT_CHUNK
_PR_SET_PDEATHSIG = 1


def _noop(signum, frame):
    pass


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None


def exit_code_of_status(status):
    """Wait status to shell-style exit code: exit n is n, death by signal N is 128+N."""
    code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else (
        os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
    return code if code >= 0 else 128 - code


def _winsize(env):
    try:
        rows, cols = int(env.get("LINES", "")), int(env.get("COLUMNS", ""))
        if rows > 0 and cols > 0:
            return rows, cols
    except ValueError:
        pass
    return 24, 80


def _configure_pty(slave, for_input, winsize):
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
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", winsize[0], winsize[1], 0, 0))


class _Stream:
    """One of the child's standard streams, seen from the parent."""

    __slots__ = ("fd", "child_fd", "pty", "ty")

    def __init__(self, fd, child_fd, pty, ty=None):
        self.fd = fd
        self.child_fd = child_fd
        self.pty = pty
        self.ty = ty


class ForkRunner:
    """Runs fork-mode commands. One per worker; the worker must be single-threaded."""

    def __init__(self, log, kill_grace, env_delta=None):
        self.log = log
        self.kill_grace = kill_grace
        self.env_delta = env_delta or {}
        self.private_fds = []  # the rest of the worker's plumbing, closed in every child
        self._prctl = _load_prctl()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        signal.signal(signal.SIGCHLD, _noop)
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        self._warned_threads = False

    # -- session --------------------------------------------------------------------------

    def run(self, chan, info, cmd):
        """Runs one session to its X. Returns (quit_requested, channel_gone)."""
        self._drain_wakeups()
        streams = []
        try:
            streams = self._make_streams(info)
        except OSError as e:
            for s in streams:
                self._close(s.fd)
                self._close(s.child_fd)
            return self._fail(chan, "ngw: cannot create the standard streams: %s\n" % e)
        if threading.active_count() > 1 and not self._warned_threads:
            self._warned_threads = True
            self.log("ngw: warning: forking while %d threads run; only the forking thread "
                     "exists in the child" % threading.active_count())
        for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                if f is not None:
                    f.flush()
            except (OSError, ValueError):
                pass
        parent = os.getpid()
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            pid = os.fork()
        except OSError as e:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            for s in streams:
                self._close(s.fd)
                self._close(s.child_fd)
            return self._fail(chan, "ngw: cannot fork: %s\n" % e)
        if pid == 0:
            self._child(chan, info, cmd, streams, parent)  # never returns
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        for s in streams:
            self._close(s.child_fd)
            s.child_fd = -1
        relay = _Relay(self, chan, pid, streams)
        try:
            status = relay.loop()
        finally:
            relay.cleanup()
        chan.send(_wire.EXIT, b"%d\n" % status)
        if relay.error is not None:
            raise relay.error
        return relay.quit, chan.eof or chan.dead

    def _fail(self, chan, message):
        self.log(message.rstrip())
        chan.send(_wire.STDERR, message.encode())
        chan.send(_wire.EXIT, b"126\n")
        return False, chan.eof or chan.dead

    def _drain_wakeups(self):
        try:
            while self.wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    @staticmethod
    def _close(fd):
        if fd is not None and fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def _make_streams(self, info):
        streams = []
        winsize = _winsize(info.env)
        for n in range(3):
            if info.tty[n]:
                master, slave = os.openpty()
                streams.append(_Stream(master, slave, True))
                _configure_pty(slave, n == 0, winsize)
            else:
                r, w = os.pipe()
                streams.append(_Stream(w, r, False) if n == 0 else _Stream(r, w, False))
            os.set_blocking(streams[-1].fd, False)
        streams[1].ty = _wire.STDOUT
        streams[2].ty = _wire.STDERR
        return streams

    # -- child ----------------------------------------------------------------------------

    def _child(self, chan, info, cmd, streams, parent):
        status = 126
        try:
            self._child_setup(chan, info, cmd, streams, parent)
            ctx = Context(info, sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer,
                          forked=True)

            def main():
                result = cmd.fn(ctx)
                return ctx.exit_code if result is None else result

            _pyexit.run_main(main)  # never returns
        except BaseException as e:
            try:
                os.write(2, ("ngw: cannot start %s: %s\n" % (info.command, e)).encode(
                    "utf-8", "backslashreplace"))
            except BaseException:
                pass
        finally:
            os._exit(status)

    def _child_setup(self, chan, info, cmd, streams, parent):
        # Signals: the parent blocked them all around fork(); reset every disposition to
        # what a fresh interpreter has, then unblock.
        signal.set_wakeup_fd(-1)
        for sig in signal.valid_signals():
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                continue
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError, RuntimeError):
                pass
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        if hasattr(signal, "SIGXFSZ"):
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        # Own session and process group, so the parent can signal everything the command
        # starts; a stdin pty becomes the controlling terminal (/dev/tty works).
        os.setsid()
        if streams[0].pty:
            fcntl.ioctl(streams[0].child_fd, termios.TIOCSCTTY, 0)
        if self._prctl is not None:
            self._prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the worker died before the request took effect
                os._exit(128 + signal.SIGKILL)
        # fd-level stdio; nothing else of the worker's plumbing stays open.
        for n, s in enumerate(streams):
            os.dup2(s.child_fd, n)
        for s in streams:
            for fd in (s.fd, s.child_fd):
                if fd > 2:
                    os.close(fd)
        for fd in [chan.fileno(), self.wake_r.fileno(), self.wake_w.fileno()] + self.private_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        os.umask(info.umask)
        if info.cwd is not None:
            os.chdir(info.cwd)
        os.environ.clear()
        os.environ.update(info.env)
        for name, value in self.env_delta.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        sys.argv = [cmd.argv0] + list(info.args)
        _rebuild_stdio(info)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())


def _rebuild_stdio(info):
    """New sys.stdin/stdout/stderr on fds 0-2, built the way CPython builds them at startup
    (line buffering on terminals, stderr always line-buffered, PYTHONUNBUFFERED and
    PYTHONIOENCODING from the client's environment; otherwise the worker's encoding)."""
    env = info.env
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    enc_override, _, err_override = env.get("PYTHONIOENCODING", "").partition(":")
    made = []
    for fd, name, old in ((0, "<stdin>", sys.__stdin__), (1, "<stdout>", sys.__stdout__),
                          (2, "<stderr>", sys.__stderr__)):
        encoding = enc_override or getattr(old, "encoding", None) or "utf-8"
        if fd == 2:
            errors = "backslashreplace"
        else:
            errors = err_override or getattr(old, "errors", None) or "strict"
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
    # Objects that preloaded modules may still hold also write to fds 0-2 now; flush
    # them at exit like the new ones.
    _pyexit.also_flush.extend(f for f in (sys.stdout, sys.__stdout__) if f is not None)
    _pyexit.also_flush_err.extend(f for f in (sys.stderr, sys.__stderr__) if f is not None)
    sys.stdin = sys.__stdin__ = made[0]
    sys.stdout = sys.__stdout__ = made[1]
    sys.stderr = sys.__stderr__ = made[2]


class _Relay:
    """The parent's side of one fork session."""

    def __init__(self, runner, chan, pid, streams):
        self.runner = runner
        self.chan = chan
        self.pid = pid
        self.status = None
        self.stdin = streams[0]
        self.stdin_buf = bytearray()
        self.stdin_done = False  # no more S: EOF relayed, stdin closed, or hangup
        self.stdin_last_nl = True
        self.credit = False
        self.outs = [streams[1], streams[2]]
        self.all_streams = streams
        self.hangup = False
        self.kill_at = None
        self.quit = False
        self.error = None
        self.quiet_since = None

    def log(self, msg):
        self.runner.log(msg)

    def loop(self):
        chan = self.chan
        self._grant()
        while True:
            if self.status is None:
                self._reap()
            now = time.monotonic()
            if self.status is not None:
                self._close_stdin()
                if self.quiet_since is None:
                    self.quiet_since = now
                if not self.outs:
                    break
                if now - self.quiet_since >= _DRAIN_IDLE:
                    break  # grandchildren hold the streams open: stop relaying them
            if self.kill_at is not None and now >= self.kill_at:
                self.kill_at = None
                self._signal(signal.SIGKILL)
            if (chan.eof or chan.dead) and not self.hangup:
                self._interrupt("hangup")
            backpressured = len(chan.out) >= _HIGH_WATER and not chan.dead
            if backpressured and self.quiet_since is not None:
                self.quiet_since = now
            p = select.poll()
            cev = (0 if chan.eof else select.POLLIN) | (
                select.POLLOUT if chan.out and not chan.dead else 0)
            if cev:
                p.register(chan.fd, cev)
            p.register(self.runner.wake_r.fileno(), select.POLLIN)
            if not backpressured:
                for s in self.outs:
                    p.register(s.fd, select.POLLIN)
            if self.stdin.fd >= 0 and self.stdin_buf:
                p.register(self.stdin.fd, select.POLLOUT)
            # While the child runs, wake up now and then anyway: if a command replaced the
            # process-wide signal wakeup fd, SIGCHLD alone would not wake this loop.
            timeout = _CHILD_POLL
            if self.status is not None:
                timeout = self.quiet_since + _DRAIN_IDLE - now
            if self.kill_at is not None:
                k = self.kill_at - now
                timeout = k if timeout is None else min(timeout, k)
            events = p.poll(None if timeout is None else max(0.0, timeout) * 1000 + 1)
            for fd, ev in events:
                if fd == chan.fd:
                    if ev & select.POLLOUT or (ev & (select.POLLERR | select.POLLHUP) and chan.out):
                        chan.flush_some()
                    if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                        chan.read_some()
                        self._dispatch()
                elif fd == self.runner.wake_r.fileno():
                    self.runner._drain_wakeups()
                elif fd == self.stdin.fd:
                    self._write_stdin()
                else:
                    for s in self.outs:
                        if s.fd == fd:
                            self._read_out(s)
                            break
            if chan.out:
                chan.flush_some()
        return exit_code_of_status(self.status)

    # -- child lifecycle ------------------------------------------------------------------

    def _reap(self):
        try:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.status = 255 << 8
            return
        if pid:
            self.status = st

    def _signal(self, sig):
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            # The child has not called setsid() yet (or its group is gone).
            if self.status is None:
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    pass
        except PermissionError:
            pass

    def _interrupt(self, reason):
        sig = signal_for(reason)
        if sig is None:
            self.log("ngw: ignoring interrupt with unknown reason %r" % reason)
            return
        if reason == "hangup":
            if self.hangup:
                return
            self.hangup = True
            self.stdin_buf.clear()
            self.stdin_done = True
            if not self.stdin.pty:
                self._close_stdin()
            self.kill_at = time.monotonic() + self.runner.kill_grace
        self._signal(sig)

    def cleanup(self):
        if self.status is None:
            # Only after a protocol error: don't leave the session behind.
            self._signal(signal.SIGKILL)
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        for s in self.all_streams:
            ForkRunner._close(s.fd)
            s.fd = -1
        self.outs = []

    # -- channel --------------------------------------------------------------------------

    def _dispatch(self):
        chan = self.chan
        while True:
            try:
                c = chan.next_chunk()
            except _wire.ProtocolError as e:
                self.error = e
                chan.eof = True
                self._interrupt("hangup")
                self.kill_at = time.monotonic()
                return
            if c is None:
                return
            ty, payload = c
            if ty == _wire.STDIN:
                self.credit = False
                if not self.stdin_done and self.stdin.fd >= 0:
                    self.stdin_buf += payload
                    if payload:
                        self.stdin_last_nl = payload.endswith(b"\n")
                    self._write_stdin()
            elif ty == _wire.STDIN_EOF:
                self.credit = False
                if not self.stdin_done and self.stdin.fd >= 0:
                    self.stdin_done = True
                    if self.stdin.pty:
                        # VEOF ends a pending partial line; a second one at the start of a
                        # line makes read() return 0.
                        self.stdin_buf += b"\x04" if self.stdin_last_nl else b"\x04\x04"
                    self._write_stdin()
            elif ty == _wire.INTERRUPT:
                self._interrupt(payload.decode("ascii", "replace").strip())
            elif ty == _wire.HEARTBEAT:
                pass
            elif ty == _wire.PING:
                chan.send(_wire.PONG, payload)
            elif ty == _wire.QUIT:
                self.quit = True
            else:
                self.log("ngw: ignoring chunk %s during a session" % _wire.type_name(ty))

    def _grant(self):
        if (self.stdin.fd >= 0 and not self.stdin_done and not self.credit
                and not self.stdin_buf and self.status is None):
            self.credit = True
            self.chan.send(_wire.SEND_INPUT)

    # -- child's streams ------------------------------------------------------------------

    def _write_stdin(self):
        fd = self.stdin.fd
        while self.stdin_buf and fd >= 0:
            try:
                n = os.write(fd, self.stdin_buf[:65536])
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EPIPE: the child closed its stdin; EIO: pty gone
                self.stdin_buf.clear()
                self.stdin_done = True
                self._close_stdin()
                return
            del self.stdin_buf[:n]
        if self.stdin_done:
            if not self.stdin.pty:
                self._close_stdin()
        else:
            self._grant()

    def _close_stdin(self):
        if self.stdin.fd >= 0 and not (self.stdin.pty and self.status is None):
            ForkRunner._close(self.stdin.fd)
            self.stdin.fd = -1
        self.stdin_buf.clear()
        self.stdin_done = True

    def _read_out(self, s):
        try:
            data = os.read(s.fd, _READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            if e.errno != errno.EIO:  # EIO: a pty whose other side is all closed
                self.log("ngw: reading the child's output: %s" % e)
            data = b""
        if data:
            self.chan.send(s.ty, data)
            if self.quiet_since is not None:
                self.quiet_since = time.monotonic()
        else:
            ForkRunner._close(s.fd)
            s.fd = -1
            self.outs.remove(s)
