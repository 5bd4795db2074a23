"""The worker's side of one running fork-mode session: one poll() loop over the channel,
the child's stdout/stderr, its stdin, the SIGCHLD wakeup and the exit-report pipe; stdin by
grant-and-prefetch; interrupts turned into signals to the child's process group
(docs/ngw.md 11.2, 11.4, 8). It never blocks on a write, so an `i` from ngd is seen even
while the client is not reading and the child is flooding output."""

import errno
import fcntl
import os
import select
import signal
import struct
import termios
import time

from .. import _dispatch, _wire
from .._signals import Interrupt, signal_name
from .common import STOP_REPORT
from .stdio import Stream, close_fd

_HIGH_WATER = 1 << 20  # outbound channel bytes before the child's output is left unread
_DRAIN_IDLE = 0.1  # after the child exits: how long silent streams stay open (grandchildren)
_CHILD_POLL = 0.5  # seconds between waitpid() checks when no event arrives
_READ_SIZE = _wire.MAX_OUTPUT_CHUNK
#: With `stdin-window`: the most stdin the worker asks for ahead of the child (docs/ngw.md
#: 15.6); topped up once less than half of it is outstanding or waiting for the pipe.
STDIN_WINDOW = 256 << 10
# Signals whose default action stops a process.
_STOPS = frozenset((signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGSTOP))


def exit_code_of_status(status):
    """Wait status to shell-style exit code: exit n is n, death by signal N is 128+N."""
    code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else (
        os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
    return code if code >= 0 else 128 - code



class Relay:
    """The parent's side of one fork session. `streams`: the child's stdin, stdout and
    stderr as pipes or ptys; empty when it runs on the client's own descriptors (no stdin
    is relayed, no output comes through the worker)."""

    def __init__(self, runner, chan, pid, streams):
        self.runner = runner
        self.chan = chan
        self.pid = pid
        self.status = None  # wait status, from waitpid() or the child's exit report
        self.reaped = False
        self.stopped = False  # stopped (WUNTRACED, `signals`) and not continued since
        # The client forwarded a stop signal and has not forwarded SIGCONT since: it stopped
        # itself already, so a stop of the command is not reported back to it.
        self.client_stopped = False
        self.stdin = streams[0] if streams else Stream(-1, -1, False)
        self.stdin_buf = bytearray()
        self.stdin_done = not streams  # no more S: EOF relayed, stdin closed, or hangup
        self.stdin_last_nl = True
        # Stdin asked for and not yet received: classic, True while one S is unanswered;
        # windowed, the bytes still granted.
        self.window = STDIN_WINDOW if runner.config.stdin_window else 0
        self.credit = 0
        self.outs = [streams[1], streams[2]] if streams else []
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
                self.on_interrupt("hangup")
            backpressured = len(chan.out) >= _HIGH_WATER and not chan.dead
            if backpressured and self.quiet_since is not None:
                self.quiet_since = now
            p = select.poll()
            cev = (0 if chan.eof or chan.deferred else select.POLLIN) | (
                select.POLLOUT if chan.out and not chan.dead else 0)
            if cev:
                p.register(chan.fd, cev)
            p.register(self.runner.wake_r.fileno(), select.POLLIN)
            if self.status is None:
                p.register(self.runner.reports.r, select.POLLIN)
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
                    self.runner.drain_wakeups()
                elif fd == self.runner.reports.r:
                    code = self.runner.reports.read(self.pid)
                    if code is not None and code & STOP_REPORT:
                        self._stopped(code & 0xFF)
                    elif code is not None and self.status is None:
                        self.status = (code & 0xFF) << 8
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
        flags = os.WNOHANG | (os.WUNTRACED if self.runner.config.signals else 0)
        while True:
            try:
                pid, st = os.waitpid(self.pid, flags)
            except ChildProcessError:
                self.status = 255 << 8
                self.reaped = True
                return
            if not pid:
                return
            if os.WIFSTOPPED(st):
                self._stopped(os.WSTOPSIG(st))
                continue
            self.status = st
            self.reaped = True
            return

    def _stopped(self, sig):
        """The command stopped: ngd stops the client and continues the command with
        `i SIGCONT` (docs/ngw.md 15.5). A stop that answers the client's own is not
        reported: by the time ngd read it, the client could have been continued, and it
        would stop again."""
        self.stopped = True
        if not self.client_stopped:
            name = signal_name(sig) or "SIGSTOP"
            self.chan.send(_wire.STOPPED, name.encode())

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

    def on_interrupt(self, reason):
        what = Interrupt(reason)
        if what.kind is None:
            self.log("ngw: ignoring interrupt with unknown reason %r" % reason)
            return
        if what.kind == "winsize":
            self._resize(what.size)
            return
        if what.kind == "hangup":
            if self.hangup:
                return
            self.hangup = True
            self.stdin_buf.clear()
            self.stdin_done = True
            if not self.stdin.pty:
                self._close_stdin()
            self.kill_at = time.monotonic() + self.runner.kill_grace
        if what.signum == signal.SIGCONT:
            self.stopped = False
            self.client_stopped = False
        elif what.kind == "signal" and what.signum in _STOPS:
            self.client_stopped = True
        if what.process:
            try:
                os.kill(self.pid, what.signum)
            except OSError:
                pass
        else:
            self._signal(what.signum)
        if what.kind == "hangup" and self.stopped:
            self.stopped = False
            self._signal(signal.SIGCONT)  # a stopped command could not see its SIGHUP

    def _resize(self, size):
        """The client's window changed: an emulated terminal takes the size (the kernel
        signals a controlling terminal's foreground group itself); the command's group
        gets SIGWINCH when it runs on the client's terminal, or its emulated terminals
        are only output ones (which are nobody's controlling terminal)."""
        cols, rows, xpixel, ypixel = size
        resized = ctty = False
        for n, s in enumerate(self.all_streams):
            if s.pty and s.fd >= 0:
                try:
                    fcntl.ioctl(s.fd, termios.TIOCSWINSZ,
                                struct.pack("HHHH", rows, cols, xpixel, ypixel))
                    resized = True
                    ctty = ctty or n == 0
                except OSError:
                    pass
        if not self.all_streams or (resized and not ctty):
            self._signal(signal.SIGWINCH)

    def cleanup(self):
        if self.status is None:
            # Only after a protocol error: don't leave the session behind.
            self._signal(signal.SIGKILL)
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        elif not self.reaped:
            # It reported its status and is exiting: reaped later, without waiting now.
            self.runner.zombies.append(self.pid)
        for s in self.all_streams:
            close_fd(s.fd)
            s.fd = -1
        self.outs = []

    # -- channel --------------------------------------------------------------------------

    def _dispatch(self):
        try:
            _dispatch.dispatch(self.chan, self, self.log)
        except _wire.ProtocolError as e:
            self.error = e
            self.chan.eof = True
            self.on_interrupt("hangup")
            self.kill_at = time.monotonic()

    def on_stdin(self, payload):
        self.credit = max(0, self.credit - len(payload)) if self.window else 0
        if not self.stdin_done and self.stdin.fd >= 0:
            self.stdin_buf += payload
            if payload:
                self.stdin_last_nl = payload.endswith(b"\n")
            self._write_stdin()

    def on_stdin_eof(self):
        self.credit = 0
        if not self.stdin_done and self.stdin.fd >= 0:
            self.stdin_done = True
            if self.stdin.pty:
                # VEOF ends a pending partial line; a second one at the start of a line
                # makes read() return 0.
                self.stdin_buf += b"\x04" if self.stdin_last_nl else b"\x04\x04"
            self._write_stdin()

    def _grant(self):
        """Grant-and-prefetch (docs/ngw.md 11.4): classic, one S whenever nothing is asked
        for and everything received is in the pipe; windowed, an S topping the bytes
        asked for and not yet in the pipe up to the window, once they are below half."""
        if self.stdin.fd < 0 or self.stdin_done or self.status is not None:
            return
        if self.window:
            ahead = self.credit + len(self.stdin_buf)
            if ahead <= self.window // 2:
                self.credit += self.window - ahead
                self.chan.send(_wire.SEND_INPUT, b"%d" % (self.window - ahead))
        elif not self.credit and not self.stdin_buf:
            self.credit = 1
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
            close_fd(self.stdin.fd)
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
            close_fd(s.fd)
            s.fd = -1
            self.outs.remove(s)
