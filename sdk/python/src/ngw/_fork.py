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
import marshal
import os
import select
import signal
import socket
import struct
import sys
import termios
import threading
import time

from . import _pyexit, _rules, _wire

try:  # the C functions: signal's wrappers turn every signal of a mask into an enum member
    from _signal import getsignal as _getsignal  # (~2 us each: 0.1 ms for a full mask)
    from _signal import pthread_sigmask as _sigmask
    from _signal import signal as _setsignal
except ImportError:  # pragma: no cover
    _getsignal, _sigmask, _setsignal = signal.getsignal, signal.pthread_sigmask, signal.signal
from ._context import Context
from ._inline import signal_for
from ._session import SessionInfo

_HIGH_WATER = 1 << 20  # outbound channel bytes before the child's output is left unread
_DRAIN_IDLE = 0.1  # after the child exits: how long silent streams stay open (grandchildren)
_CHILD_POLL = 0.5  # seconds between waitpid() checks when no event arrives
_READ_SIZE = _wire.MAX_OUTPUT_CHUNK
_PR_SET_PDEATHSIG = 1
_HAND_OVER_TIMEOUT = 5.0  # seconds a spare may take to read its session
_BACK_TO_BACK = 0.005  # a session this soon after the previous X: fork the next spare at X
_LEN = struct.Struct("=Q")  # the length of a spare's session, before the payload
_REPORT = struct.Struct("=iI")  # a child's exit report: pid, exit status
_FD = struct.Struct("=i")
_CMSG_SPACE = socket.CMSG_SPACE(3 * _FD.size)  # room for three descriptors
_DFL, _IGN = int(signal.SIG_DFL), int(signal.SIG_IGN)  # _signal's functions take ints
_FRESH = {int(signal.SIGINT): signal.default_int_handler, int(signal.SIGPIPE): _IGN}
if hasattr(signal, "SIGXFSZ"):
    _FRESH[int(signal.SIGXFSZ)] = _IGN


def _noop(signum, frame):
    pass


def _load_libc():
    """(prctl, the C `environ` variable, ctypes) on Linux; Nones where unavailable."""
    if not sys.platform.startswith("linux"):
        return None, None, None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (ImportError, OSError, AttributeError):
        return None, None, None
    try:
        environ = ctypes.c_void_p.in_dll(libc, "environ")
    except (ValueError, AttributeError):
        return prctl, None, None
    return prctl, environ, ctypes


#: In a child: what must outlive it (the C environment's strings), and what it need not
#: free (the worker's os.environ data: freeing it writes to memory shared with the worker).
_KEEP = []


def _environ_plan(env, delta, rules=None):
    """The child's environment as os.environ's data ({bytes: bytes}) and as C `environ`
    entries (b"NAME=VALUE"): the client's environment, in its order, then the preload
    delta applied as os.environ assignments would apply it, except for variables with a
    rule (ngw.environ_rule), which the rule computes from the client's environment."""
    final = dict(env)
    for name, value in delta.items():
        if rules and name in rules:
            continue
        if value is None:
            final.pop(name, None)
        else:
            final[name] = value
    for name, rule in (rules or {}).items():
        value = rule(env.get(name), env)
        if value is None:
            final.pop(name, None)
        else:
            final[name] = value
    ek, ev = os.environ.encodekey, os.environ.encodevalue
    data = {ek(k): ev(v) for k, v in final.items()}
    return data, [k + b"=" + v for k, v in data.items()]


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


class _Child:
    """A forked child as the parent sees it: `ctl` is the parent's end of the socket a
    spare reads its session from, `streams` the parent's ends of its pipes (both None
    once handed over, and for a child forked with its session already in memory)."""

    __slots__ = ("pid", "ctl", "streams")

    def __init__(self, pid, ctl, streams):
        self.pid = pid
        self.ctl = ctl
        self.streams = streams


class ForkRunner:
    """Runs fork-mode commands. One per worker; the worker must be single-threaded.

    With `prefork`, the next session's child (the *spare*) is forked after each fork-mode
    session, with three pipes of its own: it does everything that does not depend on the
    session (signal reset, setsid, PR_SET_PDEATHSIG, closing the worker's descriptors, its
    pipes on fds 0-2 and sys.stdin/stdout/stderr built on them), then blocks reading its
    session (argv, environment, cwd, umask, ttys; ptys by SCM_RIGHTS) from a socket. An
    in-process session discards the spare, since it may change the worker that the spare
    is a copy of. docs/ngw.md section 11.5."""

    def __init__(self, log, kill_grace, env_delta=None, prefork=True):
        self.log = log
        self.kill_grace = kill_grace
        self.env_delta = env_delta or {}
        self.env_rules = dict(_rules.RULES)
        self.prefork = prefork
        self.commands = {}  # name -> Command, for spares (they learn the name over the socket)
        self.private_fds = []  # the rest of the worker's plumbing, closed in every child
        self.spare = None  # a _Child waiting for its session
        self._spare_due = False  # fork a spare once the previous session's child is reaped
        self._last_x = None  # when the last fork-mode session ended (time.monotonic())
        self._rehearse_spare = True
        # How spares build their stdio ahead of time: as the last session had it.
        self._stdio_key = (False, "")
        self._worker_stdio = None  # _worker_stdio(), read right before each fork
        self.zombies = []  # children that are gone or going but not reaped yet
        self._pid = os.getpid()
        self._prctl, self._environ, self._ctypes = _load_libc()
        # ctypes array types for the C environment, by capacity (creating one costs ~25 us)
        self._environ_types = {}
        if self._ctypes is not None:
            for cap in (64, 128, 256):
                self._environ_types[cap] = self._ctypes.c_char_p * cap
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        # Children report their exit status here right before _exit(), after closing their
        # standard streams, so X need not wait for the kernel to tear the child down. The
        # child holds no descriptor for it while the command runs: it opens the write end
        # through /proc/<worker>/fd/<n> at exit (Linux; elsewhere, waitpid() as before).
        self.report_r, self.report_w = os.pipe()
        os.set_blocking(self.report_r, False)
        self._report_path = None
        if os.path.exists("/proc/%d/fd/%d" % (self._pid, self.report_w)):
            self._report_path = "/proc/%d/fd/%d" % (self._pid, self.report_w)
        self._report_buf = b""
        self._all_signals = tuple(int(s) for s in signal.valid_signals())
        self._signals = [s for s in self._all_signals
                         if s not in (signal.SIGKILL, signal.SIGSTOP)]
        signal.signal(signal.SIGCHLD, _noop)
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        self._warned_threads = False

    # -- session --------------------------------------------------------------------------

    def run(self, chan, info, cmd):
        """Runs one session to its X. Returns (quit_requested, channel_gone)."""
        started = time.monotonic()
        back_to_back = self._last_x is not None and started - self._last_x < _BACK_TO_BACK
        self._spare_due = False  # too late for one: this session forks its own child
        self.reap()
        self._read_reports()
        child, self.spare = self.spare, None
        self._stdio_key = _stdio_key(info.env)  # for the next spare
        streams = None
        if child is not None:
            try:
                streams, replaced = self._session_streams(child, info)
            except OSError as e:
                self.log("ngw: cannot create the standard streams: %s" % e)
                replaced = None
            if replaced is not None and not self._hand_over(child, info, cmd, replaced):
                self._close_streams(streams)
                replaced = None
            if replaced is None:
                self._discard(child)
                child = streams = None
        if child is None:
            streams = []
            try:
                streams = self._make_streams(info)
            except OSError as e:
                self._close_streams(streams)
                return self._fail(chan, "ngw: cannot create the standard streams: %s\n" % e)
            try:
                child = self._fork((info, cmd, streams))
            except OSError as e:
                self._close_streams(streams)
                return self._fail(chan, "ngw: cannot fork: %s\n" % e)
        for s in streams:
            self._close(s.child_fd)
            s.child_fd = -1
        relay = _Relay(self, chan, child.pid, streams)
        try:
            status = relay.loop()
        finally:
            relay.cleanup()
        chan.send(_wire.EXIT, b"%d\n" % status)
        chan.flush_some()
        self._last_x = time.monotonic()
        if relay.error is not None:
            raise relay.error
        gone = chan.eof or chan.dead
        # The next session's spare: forked once this child has been reaped (reap(), from
        # the idle loop on SIGCHLD), so that its fork does not compete for the CPU with the
        # client still receiving this X; right away when sessions come back to back, so
        # that it is ready sooner (docs/ngw.md 11.5).
        self._spare_due = self.prefork and not relay.quit and not gone
        if self._spare_due and back_to_back:
            self._fork_spare(rehearse=False)  # the session would interrupt it anyway
        self.reap()
        return relay.quit, gone

    def _fork_spare(self, rehearse=True):
        self._spare_due = False
        self._rehearse_spare = rehearse
        try:
            self.spare = self._fork(None)
        except OSError as e:
            self.log("ngw: cannot fork the next session's child ahead of time: %s" % e)

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

    def _close_streams(self, streams):
        for s in streams:
            self._close(s.fd)
            self._close(s.child_fd)
            s.fd = s.child_fd = -1

    def _make_streams(self, info):
        """The session's stdin, stdout and stderr: pipes, or ptys where the client's are
        terminals. Without `info` (a spare's, made before its session is known): pipes."""
        streams = []
        winsize = _winsize(info.env) if info is not None else None
        for n in range(3):
            if info is not None and info.tty[n]:
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

    # -- children: forking, handing a session over, reaping --------------------------------

    def _fork(self, session):
        """Forks a child. `session` (info, cmd, streams): it runs that session at once.
        None: a spare, with three pipes of its own, that waits for its session on a
        socket."""
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
        self._worker_stdio = _worker_stdio()
        ctl = theirs = None
        streams = []
        if session is None:
            ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                streams = self._make_streams(None)
            except OSError:
                self._close_streams(streams)
                ctl.close()
                theirs.close()
                raise
        old_mask = _sigmask(signal.SIG_BLOCK, self._all_signals)
        try:
            pid = os.fork()
        except OSError:
            _sigmask(signal.SIG_SETMASK, old_mask)
            if ctl is not None:
                self._close_streams(streams)
                ctl.close()
                theirs.close()
            raise
        if pid == 0:
            if ctl is not None:
                ctl.close()
            self._child(theirs, session, streams)  # never returns
        _sigmask(signal.SIG_SETMASK, old_mask)
        if theirs is not None:
            theirs.close()
        for s in streams:
            self._close(s.child_fd)
            s.child_fd = -1
        return _Child(pid, ctl, streams)

    def _session_streams(self, child, info):
        """A spare's pipes, with a pty instead where the session has a terminal: (the
        streams, [(fd number, pty slave)] to send it)."""
        streams = child.streams
        child.streams = None
        replaced = []
        winsize = _winsize(info.env)
        try:
            for n in range(3):
                if info.tty[n]:
                    master, slave = os.openpty()
                    old, streams[n] = streams[n], _Stream(master, slave, True, streams[n].ty)
                    self._close(old.fd)
                    os.set_blocking(master, False)
                    _configure_pty(slave, n == 0, winsize)
                    replaced.append((n, slave))
        except OSError:
            self._close_streams(streams)
            raise
        return streams, replaced

    def _hand_over(self, child, info, cmd, replaced):
        """Sends a spare its session and its ptys, if any. False if it is gone (or
        stuck)."""
        payload = marshal.dumps((cmd.name, info.command, info.args, info.env, info.cwd,
                                 info.umask, info.tty, info.session, info.client_pid,
                                 info.meta, info.nailgun, [n for n, _ in replaced]))
        data = _LEN.pack(len(payload)) + payload
        ctl, child.ctl = child.ctl, None
        try:
            ctl.settimeout(_HAND_OVER_TIMEOUT)
            if replaced:
                n = socket.send_fds(ctl, [data], [fd for _, fd in replaced])
            else:
                n = ctl.send(data)
            if n < len(data):
                ctl.sendall(memoryview(data)[n:])
            return True
        except OSError as e:  # it died (EPIPE, ECONNRESET), or it does not read
            self.log("ngw: the session child forked ahead of time is unusable (%s); "
                     "forking another" % e)
            return False
        finally:
            ctl.close()

    def _discard(self, child):
        if child.ctl is not None:
            child.ctl.close()
            child.ctl = None
        if child.streams:
            self._close_streams(child.streams)
            child.streams = None
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.zombies.append(child.pid)

    def discard_spare(self):
        """Before an in-process session: it may change the worker, and a child forked
        before that change would not see what a child forked at session time sees."""
        self._spare_due = False
        if self.spare is not None:
            spare, self.spare = self.spare, None
            self._discard(spare)

    def watching(self):
        """Whether the idle loop should watch wake_r (SIGCHLD) and call reap()."""
        return self.spare is not None or bool(self.zombies)

    def reap(self):
        """Reaps what has exited, without blocking; notices a spare that died."""
        self._drain_wakeups()
        for pid in list(self.zombies):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.zombies.remove(pid)
        if self._spare_due and not self.zombies:
            self._fork_spare()
        if self.spare is not None:
            try:
                done, st = os.waitpid(self.spare.pid, os.WNOHANG)
            except ChildProcessError:
                done, st = self.spare.pid, 0
            if done:
                self.log("ngw: the session child forked ahead of time exited (status %d)"
                         % exit_code_of_status(st))
                spare, self.spare = self.spare, None
                spare.ctl.close()
                self._close_streams(spare.streams)

    def shutdown(self):
        """The worker is exiting: ends the spare and reaps every child (bounded wait)."""
        self.discard_spare()
        self._spare_due = False
        deadline = time.monotonic() + 2.0
        while self.zombies:
            self.reap()
            if not self.zombies:
                break
            if time.monotonic() >= deadline:
                for pid in self.zombies:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                    except OSError:
                        pass
                self.zombies = []
                break
            time.sleep(0.002)

    def _read_reports(self, pid=None):
        """Reads the exit reports that arrived; returns the exit code `pid` reported."""
        code = None
        while True:
            try:
                data = os.read(self.report_r, 4096)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                break
            data = self._report_buf + data
            whole = len(data) - len(data) % _REPORT.size
            self._report_buf = data[whole:]
            for rpid, rcode in _REPORT.iter_unpack(data[:whole]):
                if pid is not None and rpid == pid:
                    code = rcode
        return code

    # -- child ----------------------------------------------------------------------------

    def _child(self, ctl, session, streams):
        status = 126
        name = None
        try:
            if session is None:  # a spare: its pipes on 0-2 now, its session later
                self._child_prepare(ctl, streams)
                info, cmd, fds = self._child_receive(ctl)
                prebuilt = True
            else:
                info, cmd, streams = session
                self._child_prepare(None, streams)
                fds = [(n, s.child_fd) for n, s in enumerate(streams)]
                prebuilt = False
            name = info.command
            self._child_session(info, cmd, fds, prebuilt)
            ctx = Context(info, sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer,
                          forked=True)

            def main():
                result = cmd.fn(ctx)
                return ctx.exit_code if result is None else result

            _pyexit.run_main(main, self._report)  # never returns
        except BaseException as e:
            try:
                if name is None:
                    msg = "ngw: cannot prepare a session child: %s\n" % e
                else:
                    msg = "ngw: cannot start %s: %s\n" % (name, e)
                os.write(2, msg.encode("utf-8", "backslashreplace"))
            except BaseException:
                pass
        finally:
            os._exit(status)

    def _child_prepare(self, ctl, streams):
        """What does not depend on the session. Signals stay blocked until the command."""
        signal.set_wakeup_fd(-1)
        _reset_signals(self._signals)
        # Own session and process group, so the parent can signal everything the command
        # starts.
        os.setsid()
        if self._prctl is not None:
            self._prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != self._pid:  # the worker died before the request took effect
                os._exit(128 + signal.SIGKILL)
        # Nothing of the worker's plumbing stays open.
        for fd in ([self.wake_r.fileno(), self.wake_w.fileno(), self.report_r, self.report_w]
                   + self.private_fds + [s.fd for s in streams]):
            try:
                os.close(fd)
            except OSError:
                pass
        if ctl is None:
            return
        # A spare: its pipes become fds 0-2 and sys.stdin/stdout/stderr are built on them
        # now, as for a session whose streams are all pipes (most are); the session
        # replaces what differs.
        for n, s in enumerate(streams):
            os.dup2(s.child_fd, n)
        for s in streams:
            if s.child_fd > 2:
                os.close(s.child_fd)
        _install_stdio(_stdio_env(self._stdio_key), self._worker_stdio)
        ctl.setblocking(True)
        if self._rehearse_spare:
            try:
                self._rehearse(ctl)
            except Exception:
                pass

    def _child_receive(self, ctl):
        """A spare's wait for its session. Exits quietly when the worker discards it."""
        try:
            data, ancdata, _, _ = ctl.recvmsg(1 << 16, _CMSG_SPACE)
        except OSError:
            os._exit(0)
        if not data:
            os._exit(0)
        fds = []
        for level, kind, cdata in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(_FD.unpack_from(cdata, i)[0]
                           for i in range(0, len(cdata) - len(cdata) % 4, 4))
        buf = bytearray(data)
        while len(buf) < _LEN.size or len(buf) < _LEN.size + _LEN.unpack_from(buf)[0]:
            more = ctl.recv(1 << 20)
            if not more:
                os._exit(0)
            buf += more
        ctl.close()
        (cmd_name, command, args, env, cwd, umask, tty, session, client_pid, meta,
         nailgun, numbers) = marshal.loads(memoryview(buf)[_LEN.size:])
        if len(fds) != len(numbers):
            raise OSError("received %d descriptors instead of %d" % (len(fds), len(numbers)))
        info = SessionInfo()
        info.command = command
        info.args = args
        info.env = env
        info.cwd = cwd
        info.umask = umask
        info.tty = tty
        info.session = session
        info.client_pid = client_pid
        info.meta = meta
        info.nailgun = nailgun
        return info, self.commands[cmd_name], list(zip(numbers, fds))

    def _child_session(self, info, cmd, fds, prebuilt):
        """The session's part. `fds`: [(0-2, descriptor)] to put on fds 0-2; `prebuilt`:
        sys.stdin/stdout/stderr were built on pipes already (a spare's)."""
        for n, fd in fds:
            os.dup2(fd, n)
        for _, fd in fds:
            if fd > 2:
                os.close(fd)
        # A stdin pty becomes the controlling terminal (/dev/tty works).
        if info.tty[0]:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        os.umask(info.umask)
        if info.cwd is not None:
            os.chdir(info.cwd)
        self._set_environ(info.env)
        sys.argv = [cmd.argv0] + list(info.args)
        if not prebuilt or fds or _stdio_key(info.env) != self._stdio_key:
            _install_stdio(info.env, self._worker_stdio)
        _sigmask(signal.SIG_SETMASK, ())

    def _set_environ(self, env):
        """Replaces os.environ (and os.environb, which shares its data) and the C
        environment with the client's. Same result as clearing os.environ and updating
        it, in ~1/5 of the time in a fresh child: the old data is left alone rather than
        freed, and on Linux the C `environ` is pointed at a new array instead of ~2
        setenv() calls' worth of page faults per variable."""
        data, entries = _environ_plan(env, self.env_delta, self.env_rules)
        _KEEP.append(os.environ._data)
        if self._environ is not None:
            array = self._environ_array(len(entries))(*entries)
            _KEEP.append((entries, array))
            self._environ.value = self._ctypes.addressof(array)
        else:
            for name in list(os.environ._data):
                os.unsetenv(name)
            for name, value in data.items():
                os.putenv(name, value)
        os.environ._data = data
        if getattr(os, "environb", None) is not None:
            os.environb._data = data

    def _environ_array(self, n):
        """A ctypes array type for n entries and the terminating NULL (the rest is NULL
        too): a few capacities, so that the type exists already."""
        cap = 64
        while cap <= n:
            cap *= 2
        t = self._environ_types.get(cap)
        if t is None:
            t = self._environ_types[cap] = self._ctypes.c_char_p * cap
        return t

    def _rehearse(self, ctl):
        """In a spare, before it waits: the session set-up's work once, on stand-in data,
        keeping nothing. The first write to each page of memory shared with the worker
        costs a copy-on-write fault (~3 us on the machine measured, docs/benchmarks.md),
        and most of a fresh child's set-up time is such faults (reference counts of the
        objects and types it uses, allocator pages); taking them here, off the session's
        path, cuts a spare's session set-up from ~1.4 ms to ~0.4. Nothing observable
        changes: no descriptor, variable, stream or signal is touched. It stops as soon
        as the session has arrived (back-to-back sessions): then it would only delay it."""
        p = select.poll()
        p.register(ctl, select.POLLIN)
        env = dict(os.environ)
        data, entries = _environ_plan(env, self.env_delta, self.env_rules)
        if self._environ is not None:
            self._environ_array(len(entries))(*entries)
        if p.poll(0):
            return
        info = SessionInfo()
        info.command, info.args, info.env, info.cwd = "", [], env, None
        info.umask, info.tty, info.session, info.client_pid = 0o022, (False,) * 3, "", None
        info.meta, info.nailgun = {}, {}
        marshal.loads(marshal.dumps(("", "", [], env, None, 0, (False,) * 3, "", None, {},
                                     {})))
        Context(info, None, None, None, forked=True)
        if p.poll(0):
            return
        threading.enumerate()
        for f in [sys.stdout, sys.__stdout__, sys.stderr, sys.__stderr__] + (
                _pyexit.also_flush + _pyexit.also_flush_err):
            if f is not None:
                f.flush()  # nothing to write: the worker flushed them before forking
        try:
            ctl.recvmsg(1, 0, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            pass

    def _report(self, status):
        """In the child, right before _exit(): closes the standard streams (so the parent
        sees their end now, not after the kernel has freed the child's memory) and tells
        the worker the exit status."""
        if self._report_path is None:
            return
        try:
            fd = os.open(self._report_path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            return  # waitpid() will tell
        try:
            os.closerange(0, 3)
            os.write(fd, _REPORT.pack(os.getpid(), status))
        except OSError:
            pass
        finally:
            os.close(fd)


def _reset_signals(signals):
    """Every disposition back to what a fresh CPython has: SIG_DFL, except SIGINT ->
    default_int_handler, SIGPIPE and SIGXFSZ -> SIG_IGN. One sigaction per signal costs
    ~5 us in a fresh child, so only the signals not already right are set: those whose
    Python-level handler differs, and, from /proc/self/status, those the kernel says are
    caught or ignored when they should not be (a C extension's sigaction)."""
    caught = ignored = -1  # unknown: set every one
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
        try:
            status = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
        i, j = status.index(b"\nSigIgn:"), status.index(b"\nSigCgt:")
        ignored = int(status[i + 8 : status.index(b"\n", i + 8)], 16)
        caught = int(status[j + 8 : status.index(b"\n", j + 8)], 16)
    except (OSError, ValueError):
        caught = ignored = -1
    for sig in signals:
        want = _FRESH.get(sig, _DFL)
        bit = 1 << (sig - 1)
        if _getsignal(sig) == want:
            if want == _DFL:
                if not (caught | ignored) & bit:
                    continue
            elif want == _IGN:
                if ignored & bit and not caught & bit:
                    continue
            elif caught & bit and not ignored & bit:
                continue
        try:
            _setsignal(sig, want)
        except (OSError, ValueError, RuntimeError):
            pass


def _stdio_key(env):
    """What of the client's environment decides how CPython builds its stdio."""
    return bool(env.get("PYTHONUNBUFFERED")), env.get("PYTHONIOENCODING", "")


def _stdio_env(key):
    """An environment with just what `key` (from _stdio_key) says."""
    env = {}
    if key[0]:
        env["PYTHONUNBUFFERED"] = "1"
    if key[1]:
        env["PYTHONIOENCODING"] = key[1]
    return env


def _worker_stdio():
    """The worker's own stdin/stdout/stderr encodings and error handlers, which session
    children use unless PYTHONIOENCODING says otherwise. Read before forking: in a spare,
    sys.__stdout__ is already one built for a session."""
    return tuple((getattr(f, "encoding", None), getattr(f, "errors", None))
                 for f in (sys.__stdin__, sys.__stdout__, sys.__stderr__))


def _rebuild_stdio(info):
    """_install_stdio() for a session in this process, as it was before spares existed
    (benches/plugin/fork_probe.py times it)."""
    _install_stdio(info.env, _worker_stdio())


def _install_stdio(env, worker_stdio):
    """New sys.stdin/stdout/stderr on fds 0-2, built the way CPython builds them at startup
    (line buffering on terminals, stderr always line-buffered, PYTHONUNBUFFERED and
    PYTHONIOENCODING from the client's environment; otherwise the worker's encoding)."""
    made = _make_stdio(env, worker_stdio)
    # Objects that preloaded modules may still hold also write to fds 0-2 now; flush
    # them at exit like the new ones.
    _pyexit.also_flush.extend(f for f in (sys.stdout, sys.__stdout__) if f is not None)
    _pyexit.also_flush_err.extend(f for f in (sys.stderr, sys.__stderr__) if f is not None)
    sys.stdin = sys.__stdin__ = made[0]
    sys.stdout = sys.__stdout__ = made[1]
    sys.stderr = sys.__stderr__ = made[2]


def _make_stdio(env, worker_stdio):
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    enc_override, _, err_override = env.get("PYTHONIOENCODING", "").partition(":")
    made = []
    names = ("<stdin>", "<stdout>", "<stderr>")
    for fd, name, (old_encoding, old_errors) in zip((0, 1, 2), names, worker_stdio):
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


class _Relay:
    """The parent's side of one fork session."""

    def __init__(self, runner, chan, pid, streams):
        self.runner = runner
        self.chan = chan
        self.pid = pid
        self.status = None  # wait status, from waitpid() or the child's exit report
        self.reaped = False
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
            if self.status is None:
                p.register(self.runner.report_r, select.POLLIN)
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
                elif fd == self.runner.report_r:
                    code = self.runner._read_reports(self.pid)
                    if code is not None and self.status is None:
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
        try:
            pid, st = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.status = 255 << 8
            self.reaped = True
            return
        if pid:
            self.status = st
            self.reaped = True

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
        elif not self.reaped:
            # It reported its status and is exiting: reaped later, without waiting now.
            self.runner.zombies.append(self.pid)
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
