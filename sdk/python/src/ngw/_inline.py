"""In-process sessions: the command function runs in the worker's main thread while a
helper thread moves chunks between the channel and the context's streams.

Stdin is lazy, with true Nailgun credit semantics: a read that finds no buffered data
sends one `S` and waits for the `0` or `.` that answers it. Interrupts (`i`) are
delivered to the main thread as a SIGINT that the SDK turns into `Interrupted`, so a
command blocked in sleep() or a system call wakes up.

An interrupt is never raised inside the SDK's own stream code once output has been handed
to the I/O thread, or stdin taken from its buffer, by the call at hand (`_Pump.busy`):
until that call has returned, the handler leaves the interrupt pending, and the I/O
thread, which sends SIGINT again every `_FOLLOW_UP` seconds while an interrupt it
delivered is pending, has it raised in the command's own code (typically in the blocking
call the command went on to, as for a cold run signalled after its write(2)). Raised
inside, it would tell the caller that output already on its way to the client was not
written (a buffered stream then sends it again) or lose stdin already taken. The I/O
thread ships output while the main thread is still returning from that call (it has to
get the GIL back, and a CPU), so the client can see it, and be interrupted, before the
call has returned to the command.
"""

import collections
import io
import os
import select
import signal
import threading
import traceback

from . import _dispatch, _pyexit, _wire
from ._context import Context, Interrupted
from ._signals import HARMLESS, Interrupt

_HIGH_WATER = 1 << 20  # bytes queued for ngd before writers block
_FOLLOW_UP = 0.01  # seconds between SIGINTs while a delivered interrupt is pending
#: With `stdin-window`: the most stdin asked for ahead of the command's reads (docs/ngw.md
#: 15.6); a read tops it up once less than half of it is outstanding or buffered.
STDIN_WINDOW = 256 << 10


class _Pump(threading.Thread):
    def __init__(self, chan, log, wake, window=0):
        super().__init__(name="ngw-session-io", daemon=True)
        self.window = window  # 0: classic stdin credit (one S, one answer)
        self.stdin_bytes = 0  # bytes in self.stdin
        self.chan = chan
        self.log = log
        self.cond = threading.Condition()
        self.outq = collections.deque()
        self.queued = 0
        self.stdin = collections.deque()
        self.stdin_eof = False
        self.credit = 0  # classic: 1 while an S is unanswered; windowed: bytes granted
        self.finishing = False
        self.gone = False
        self.quit = False
        self.error = None
        self.ctx = None
        self.deliver = None  # (signum, reason) -> None: tells the main thread
        # () -> bool: sends SIGINT again if the delivered interrupt is still pending
        # (False once it was raised); the I/O thread calls it while `delivered`.
        self.redeliver = None
        self.delivered = False
        # True from the moment the main thread's current write queued output, or its
        # current read took stdin, until it returns; `deferred`: an interrupt waits for
        # that (see the module's doc and InlineRunner._on_sigint). Other threads' calls
        # leave them alone (the interrupt is raised in the main thread only).
        self.main = threading.main_thread().ident
        self.busy = False
        self.deferred = False
        self.wake_r, self.wake_w = wake
        self._drain_wake()

    # -- main-thread side -----------------------------------------------------------------

    def _wake(self):
        try:
            os.write(self.wake_w, b"x")
        except (BlockingIOError, InterruptedError):
            pass

    def send(self, ty, payload=b""):
        """Queues one chunk for ngd, waiting while too much is queued. False when it gave
        up waiting because an interrupt waits for the write that already queued part of
        its output (it returns that part's length, as write(2) interrupted would)."""
        data = _wire.encode(ty, payload)
        with self.cond:
            while self.queued > _HIGH_WATER and not self.gone:
                if self.busy and self.deferred and threading.get_ident() == self.main:
                    return False
                self.cond.wait(0.5)
            if self.gone:
                return True
            if threading.get_ident() == self.main:
                self.busy = True  # queued: an interrupt now waits until the write returns
            self.outq.append(data)
            self.queued += len(data)
        self._wake()
        return True

    def _ask(self):
        """Called with the lock held by a read: classic, one S when nothing is buffered or
        asked for; windowed, an S topping what is asked for and buffered up to the window
        once it is below half (the command keeps reading, so stdin keeps flowing)."""
        if self.stdin_eof or self.gone:
            return
        if self.window:
            ahead = self.credit + self.stdin_bytes
            if ahead > self.window // 2:
                return
            grant = self.window - ahead
            self.credit += grant
            data = _wire.encode(_wire.SEND_INPUT, b"%d" % grant)
        elif self.credit or self.stdin:
            return
        else:
            self.credit = 1
            data = _wire.encode(_wire.SEND_INPUT)
        self.outq.append(data)
        self.queued += len(data)
        self._wake()

    def readinto(self, b):
        with self.cond:
            while not self.stdin and not self.stdin_eof and not self.gone:
                self._ask()
                self.cond.wait()
            if not self.stdin:
                return 0
            if threading.get_ident() == self.main:
                self.busy = True  # taken: an interrupt now waits until the read returns
            first = self.stdin[0]
            n = min(len(b), len(first))
            b[:n] = first[:n]
            if n == len(first):
                self.stdin.popleft()
            else:
                self.stdin[0] = first[n:]
            self.stdin_bytes -= n
            if self.window:
                self._ask()
            return n

    def finish(self, status):
        self.send(_wire.EXIT, b"%d\n" % status)
        with self.cond:
            self.finishing = True
        self._wake()
        self.join()

    # -- I/O thread -----------------------------------------------------------------------

    def run(self):
        chan = self.chan
        try:
            while True:
                with self.cond:
                    while self.outq:
                        chan.out += self.outq.popleft()
                    finishing = self.finishing
                chan.flush_some()
                with self.cond:
                    self.queued = len(chan.out)
                    if chan.dead:
                        self._gone()
                    self.cond.notify_all()
                if finishing and not self.outq and (not chan.out or chan.dead):
                    return
                p = select.poll()
                reading = not chan.eof and not chan.deferred
                if reading:
                    p.register(chan.fd, select.POLLIN | (select.POLLOUT if chan.out else 0))
                elif chan.out and not chan.dead:
                    p.register(chan.fd, select.POLLOUT)
                p.register(self.wake_r, select.POLLIN)
                if self.delivered:
                    self.delivered = self.redeliver()
                for fd, ev in p.poll(_FOLLOW_UP * 1000 if self.delivered else None):
                    if fd == self.wake_r:
                        self._drain_wake()
                    elif ev & (select.POLLIN | select.POLLHUP | select.POLLERR) and reading:
                        chan.read_some()
                        self._dispatch()
                        if chan.eof:
                            with self.cond:
                                self._gone()
        except BaseException as e:  # a protocol error or a bug: end the session cleanly
            with self.cond:
                self.error = e
                self._gone()
            if isinstance(e, _wire.ProtocolError):
                return
            self.log("ngw: session I/O thread failed:\n" + traceback.format_exc())

    def _drain_wake(self):
        try:
            while os.read(self.wake_r, 4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _gone(self):
        # Called with the lock held: ngd is gone, so stdin ends and the command is told.
        if not self.gone:
            self.gone = True
            self.cond.notify_all()
            self.on_interrupt("hangup")

    def _dispatch(self):
        _dispatch.dispatch(self.chan, self, self.log)

    def on_stdin(self, payload):
        with self.cond:
            self.credit = max(0, self.credit - len(payload)) if self.window else 0
            if payload:
                self.stdin.append(payload)
                self.stdin_bytes += len(payload)
            self.cond.notify_all()

    def on_stdin_eof(self):
        with self.cond:
            self.credit = 0
            self.stdin_eof = True
            self.cond.notify_all()

    def on_interrupt(self, reason):
        what = Interrupt(reason)
        if what.kind is None:
            self.log("ngw: ignoring interrupt with unknown reason %r" % reason)
            return
        if what.kind == "winsize" or what.signum in HARMLESS:
            return  # nothing to resize; a signal that ignores or stops does not interrupt
        sig = what.signum
        ctx = self.ctx
        if ctx is not None and ctx.interrupt_reason is None:
            ctx.interrupt_reason = "hangup" if what.kind == "hangup" else sig.name
            ctx.interrupted.set()
            if self.deliver is not None:
                self.deliver(sig, ctx.interrupt_reason)
                self.delivered = self.redeliver is not None
            with self.cond:
                self.cond.notify_all()  # a write waiting for room sees it at once
            self._wake()  # the I/O thread follows the delivery up


class _OutRaw(io.RawIOBase):
    def __init__(self, pump, ty):
        self._pump = pump
        self._ty = ty

    def writable(self):
        return True

    def write(self, b):
        data = bytes(b)
        pump = self._pump
        done = len(data)
        try:
            for i in range(0, len(data), _wire.MAX_OUTPUT_CHUNK):
                if not pump.send(self._ty, data[i : i + _wire.MAX_OUTPUT_CHUNK]):
                    done = i  # interrupted after part of it was queued
                    break
        finally:
            if threading.get_ident() == pump.main:
                pump.busy = False  # the last step: the interrupt may surface after it
        return done


class _InRaw(io.RawIOBase):
    def __init__(self, pump, before_read):
        self._pump = pump
        self._before_read = before_read

    def readable(self):
        return True

    def readinto(self, b):
        self._before_read()
        pump = self._pump
        try:
            return pump.readinto(memoryview(b).cast("B"))
        finally:
            if threading.get_ident() == pump.main:
                pump.busy = False


class InlineRunner:
    """Runs non-fork commands. One per worker; must be used from the main thread."""

    def __init__(self, log, signals=False, stdin_window=False):
        self.log = log
        self._pending = None  # (signum, reason) waiting to be raised in the main thread
        self._armed = False
        self._pump = None  # the running session's
        self._main = threading.main_thread().ident
        self.signals_on = signals  # `signals` negotiated: X stays a code in-process
        self.stdin_window = stdin_window  # `stdin-window` negotiated (docs/ngw.md 15.6)
        # One wakeup pipe for all sessions' I/O threads (no per-session descriptors).
        self._wake = os.pipe()
        for fd in self._wake:
            os.set_blocking(fd, False)
        signal.signal(signal.SIGINT, self._on_sigint)

    def private_fds(self):
        return list(self._wake)

    def _on_sigint(self, signum, frame):
        pump = self._pump
        if self._pending is not None and self._armed and pump is not None and pump.busy:
            # Inside a write that queued output (or a read that took stdin): raised here
            # it would undo what the caller already did. It stays pending; the I/O thread
            # sends SIGINT again until it is raised outside.
            pump.deferred = True
            return
        pending, self._pending = self._pending, None
        if pending is not None and self._armed:
            self._armed = False
            if pump is not None:
                pump.deferred = False
            raise Interrupted(*pending)
        # A SIGINT from outside (ngd spawns workers in their own session, so this is
        # somebody's kill): the worker itself is stopped with `q` or SIGTERM, not SIGINT.

    def _redeliver(self):
        """I/O thread: SIGINT again while the delivered interrupt is pending; False once
        it was raised (or the command ended)."""
        if self._pending is None or not self._armed:
            return False
        try:
            signal.pthread_kill(self._main, signal.SIGINT)
        except (OSError, ValueError):
            return False
        return True

    def _deliver(self, sig, reason):
        # I/O thread: wake the main thread with a real signal so blocking calls return.
        self._pending = (sig, reason)
        try:
            signal.pthread_kill(self._main, signal.SIGINT)
        except (OSError, ValueError):
            pass

    def run(self, chan, info, cmd):
        """Runs one session to its X. Returns (quit_requested, channel_gone)."""
        pump = _Pump(chan, self.log, self._wake, STDIN_WINDOW if self.stdin_window else 0)
        stdout = io.BufferedWriter(_OutRaw(pump, _wire.STDOUT), 65536)
        stderr = _OutRaw(pump, _wire.STDERR)

        def before_read():
            try:
                stdout.flush()
            except (OSError, ValueError):
                pass

        stdin = io.BufferedReader(_InRaw(pump, before_read), 65536)
        ctx = Context(info, stdin, stdout, stderr, forked=False)
        pump.ctx = ctx
        pump.deliver = self._deliver
        pump.redeliver = self._redeliver
        self._pump = pump
        self._pending = None
        pump.start()
        status = 1
        try:
            self._armed = True
            try:
                status = self._call(cmd, ctx)
            except Interrupted as e:  # landed between the command's end and disarming
                status = 128 + int(e.signum)
        finally:
            self._armed = False
            self._pending = None
            self._pump = None
            for s in (stdout, stderr):
                try:
                    s.flush()
                except (OSError, ValueError):
                    pass
            pump.finish(status)
        if isinstance(pump.error, _wire.ProtocolError):
            raise pump.error
        return pump.quit, pump.gone and (chan.eof or chan.dead)

    def _call(self, cmd, ctx):
        try:
            try:
                result = cmd.fn(ctx)
                code = ctx.exit_code if result is None else result
            except SystemExit as e:
                code = e.code
            status, message = _pyexit.status_of_exit_code(code)
            if message is not None:
                ctx.stderr.write(os.fsencode(message + "\n"))
            return status
        except Interrupted as e:
            self._armed = False
            return 128 + int(e.signum)
        except BaseException as e:
            self._armed = False
            try:
                ctx.stdout.flush()
            except Exception:
                pass
            text = "".join(
                traceback.format_exception(type(e), e, _pyexit.user_traceback(e.__traceback__))
            )
            ctx.stderr.write(text.encode("utf-8", "backslashreplace"))
            return 130 if isinstance(e, KeyboardInterrupt) else 1
