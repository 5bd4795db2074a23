"""Several zygotes per worker: one per *key*, least recently used retired (docs/ngw.md
12.4, "Several zygotes").

What a zygote's imports may have captured (whether fds 0-2 are terminals, the
environment variables they read, the interpreter-wide settings and the locale,
`Conditions.key`) is its key. A fork-mode session whose key is not the worker's own
cannot be served by forking the worker, so the worker (the *root* zygote) keeps up to
`NGW_MAX_ZYGOTES - 1` (default 3) **sub-zygotes**: fresh interpreters running the
worker's own command line (`sys.orig_argv`) with the key's environment (and a
pseudo-terminal on each fd that is a terminal in the sessions it is for: a sub-zygote's
key always says which of fds 0-2 are terminals), each connected to the root over a
socketpair that speaks ngw itself. The root plays ngd's part for them and stays ngd's
only peer, so ngd knows nothing of any of this:

* a sub-zygote's hello is read by the root; its channel is offered the features the
  root itself agreed with ngd, so everything it sends may go to ngd as it is;
* a session whose key has a sub-zygote that said hello is forwarded to it: its record
  as the root read it (`RECORD`, with the client's descriptors when the session has
  some; the root answered ngd's `t`); then, chunk by chunk, ngd's `0 . i` to it
  and its `1 2 S X` (and any extension chunk) to ngd; its notices go to ngd too, except
  `retire`, which concerns the sub-zygote alone (the root drops it from its table; it
  exits after the session). A session on the client's descriptors gets a descriptor of
  ngd's channel too, and when its X is the first thing it sends, the sub-zygote writes
  it there itself and tells the root (`EXIT_SENT`); it marks a page it shares with the
  root first, so that a root that finds it dead with the mark set knows the X may have
  gone, and writes nothing more (`InDoubt`: the worker exits, ngd ends the session);
* a session whose key has no sub-zygote yet runs the cold way in the root, and says so
  (`fallback` notice: "...; started a zygote for PYTHONHASHSEED='1'"); the sub-zygote is
  started when that session has ended, so it never competes with it, and preloads while
  the root serves others. No session ever waits for a preload;
* at most `NGW_MAX_ZYGOTES` zygotes, the root included (default 4): starting one more
  retires the least recently used sub-zygote (its channel is closed: it finishes and
  exits 0);
* the root reads a session's header, and the client's descriptors that came with it,
  before it knows where the session runs: a child it forks meanwhile (its next spare)
  closes its copies first thing, so a session forwarded here leaves none behind in a
  spare that never gets it;
* a sub-zygote dies with the root (`PR_SET_PDEATHSIG`, set by the sub-zygote itself
  first thing, `as_sub_zygote`); it is in the root's process group, which ngd kills
  when it stops a worker; the root ends them all when it exits;
* a sub-zygote that dies during a session: that session ends with
  `ngw: the zygote for KEY died during the command (...)` on its stderr and exit code
  128+N if signal N killed it, else 1 (as ngd reports a worker that dies during a
  command, docs/ngw.md 9); the next session with that key runs cold and starts another.
  One that cannot start (an error hello, or no hello), or whose key is not the one it
  was started for (its hello's `zygote_key` differs), is not started again for that
  key: its sessions run cold and their notices say why.

Sub-zygotes start no sub-zygotes of their own. The root is single-threaded: it forwards
a session in one poll() loop, as the fork relay does, never blocking on a write.
"""

import json
import marshal
import mmap
import os
import select
import signal
import socket
import subprocess
import sys
import time

from . import _sys, _wire
from ._channel import Channel
from ._exact import SDK_DIR, python_path
from ._fork.stdio import configure_pty, winsize_of
from ._session import SessionInfo

#: The environment variable bounding the zygotes of one worker, the root included.
MAX_ENV = "NGW_MAX_ZYGOTES"
#: The root and up to three sub-zygotes: the keys a plugin's users commonly mix (a
#: terminal or a pipe on stdout, a second locale or hash seed) stay warm, and at most
#: three extra interpreters' memory is spent on them (docs/ngw.md 12.4).
DEFAULT_MAX = 4
#: Set in a sub-zygote's environment (and removed at once by it): the root's pid, and its
#: key for people (its log lines say which zygote wrote them).
PARENT_ENV = "NGW_ZYGOTE_OF"
LABEL_ENV = "NGW_ZYGOTE_KEY"
#: The field of a sub-zygote's hello with its own key (`Conditions.key()`).
KEY_FIELD = "zygote_key"
#: The field of a sub-zygote's hello saying it takes sessions as records (`RECORD`).
RECORDS_FIELD = "records"
#: Set in a sub-zygote's environment (and removed at once by it): the descriptor of a
#: page it shares with the root, where it marks that a session's X may have gone to ngd.
MARK_ENV = "NGW_ZYGOTE_MARK"
#: The field of a sub-zygote's hello saying it writes a session's X to ngd's channel
#: itself when the root sends that with the record.
EXIT_FIELD = "exit_direct"

_HIGH_WATER = 1 << 20  # unsent bytes towards ngd before the sub-zygote is left unread
_MAX_RECORD_FDS = 4  # descriptors a channel takes with one chunk (_channel)
_STOP_WAIT = 2.0  # seconds a sub-zygote may take to exit after its channel closed
_FAILED_KEPT = 16  # keys whose zygote could not start, remembered (oldest forgotten)
_HELLO_TIMEOUT = 120.0  # seconds a sub-zygote may preload before it is given up

STARTING = "starting"
READY = "ready"


def as_sub_zygote():
    """First thing in a worker: when it is another worker's sub-zygote, arranges to die
    with it (PR_SET_PDEATHSIG on Linux; exits at once if the root is already gone) and
    returns its key for people (PYTHONHASHSEED='1'); otherwise None."""
    raw = os.environ.pop(PARENT_ENV, None)
    what = os.environ.pop(LABEL_ENV, None) or "another key"
    if raw is None:
        return None
    try:
        root = int(raw)
    except ValueError:
        return None
    _sys.die_with_parent(root, 0)
    if os.getppid() != root:  # (also where the signal cannot be asked for)
        os._exit(0)  # the root is gone already
    return what


def limit_from_env(log):
    """NGW_MAX_ZYGOTES: how many zygotes a worker may have, itself included (1: none
    besides itself, every session with another key runs cold)."""
    raw = os.environ.get(MAX_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX
    try:
        value = int(raw)
        if value < 1:
            raise ValueError
    except ValueError:
        log("ngw: %s=%r is not a positive integer; using %d" % (MAX_ENV, raw, DEFAULT_MAX))
        return DEFAULT_MAX
    return value


def with_ttys(key, ttys):
    """`key` with a part for each of fds 0-2 saying whether it is a terminal (`ttys`),
    where the key has none. Sub-zygotes are keyed and started with the session's
    terminals, not only those the root's imports asked about: a sub-zygote's own
    imports (modules learned since the root started, docs/ngw.md 12.5) may ask about
    another fd, and must get the answer the sessions routed to it have."""
    asked = {name for kind, name, _ in key if kind == "tty"}
    extra = tuple(("tty", n, bool(ttys[n])) for n in range(3) if n not in asked)
    return tuple(sorted(p for p in key + extra if p[0] == "tty")) + tuple(
        p for p in key if p[0] != "tty")


def _isatty(fd):
    try:
        return os.isatty(fd)
    except OSError:
        return False


def label(key, own):
    """The parts of `key` that differ from `own`, for people: PYTHONHASHSEED='1', fd 1
    a terminal."""
    mine = {(kind, name): value for kind, name, value in own}
    words = []
    for kind, name, value in key:
        if mine.get((kind, name), value) == value and (kind, name) in mine:
            continue
        if kind == "tty":
            words.append("fd %d %s" % (name, "a terminal" if value else "not a terminal"))
        elif value is None:
            words.append("%s unset" % name)
        elif isinstance(value, tuple):
            words.append("%s=%r" % (name, os.pathsep.join(value)))
        else:
            words.append("%s=%r" % (name, value))
    return ", ".join(words) or "the worker's own key"


class Zygote:
    """A sub-zygote as the root sees it."""

    __slots__ = ("key", "label", "proc", "chan", "pty", "state", "used", "started",
                 "retiring", "mark", "mark_fd", "direct", "sent_direct")

    def __init__(self, key, label_, proc, chan, pty, mark=None, mark_fd=-1):
        self.key = key
        self.label = label_
        self.proc = proc
        self.chan = chan  # the root's end of its ngw channel (a _channel.Channel)
        self.pty = pty  # master of the pseudo-terminal on its tty fds, or -1
        self.state = STARTING
        self.used = self.started = time.monotonic()
        self.retiring = False  # it sent `retire`: no new session; it exits after this one
        # The page it marks before it writes a session's X to ngd's channel (`exit_mark`),
        # and the root's descriptor of it; whether its hello says it does that; whether
        # the session it runs now came with ngd's channel.
        self.mark = mark
        self.mark_fd = mark_fd
        self.direct = False
        self.sent_direct = False


class _SubDied(Exception):
    """The sub-zygote's channel ended (or broke) before its X."""


class InDoubt(Exception):
    """A sub-zygote died while it wrote a session's X to ngd's channel: the root cannot
    know whether the X arrived, and writes nothing more there; the worker exits, and
    ngd ends the session if it is still open."""


class Zygotes:
    """The root's sub-zygotes, by key. One per worker, used from its main thread only."""

    def __init__(self, log, conditions, notices, env, features, enabled=True,
                 private_fds=None):
        self.log = log
        # The fork runner's list of descriptors its children close first thing: the
        # root's ends of the sub-zygotes' channels and terminals join it while they live.
        self.private_fds = private_fds if private_fds is not None else []
        self.conditions = conditions
        self.notices = notices
        self.env = dict(env)  # the worker's environment when it started
        self.features = sorted(features)  # what the sub-zygotes' channels offer
        self.limit = limit_from_env(log) if enabled else 1
        self.argv = [sys.executable] + list(getattr(sys, "orig_argv", [None])[1:])
        self.enabled = enabled and self.limit > 1 and hasattr(sys, "orig_argv")
        self.table = {}  # key -> Zygote
        self.failed = {}  # key -> why its zygote could not start
        self.retired = []  # Popen objects of sub-zygotes told to go, not reaped yet
        self.root_ttys = [_isatty(n) for n in range(3)]

    # -- routing ---------------------------------------------------------------------------

    def run(self, chan, info, cmd, local, fds=None):
        """Runs a fork-mode session: in the sub-zygote for its key when one is ready,
        else with `local(chan, info, cmd)` (the root's fork runner, which runs it the
        cold way when its key differs). `fds` are the client's descriptors the session
        runs on (docs/ngw.md 15.4; the root already answered `t`), passed on to the
        sub-zygote with the session. Returns (quit_requested, channel_gone)."""
        if not self.enabled:
            return local(chan, info, cmd)
        self.collect()
        c = self.conditions
        if c.other_reason() is not None:
            return local(chan, info, cmd)  # no zygote would do better
        # The session's key against the root's (`key_reason` judges them alike exactly
        # when they are equal): one computation of each on the way to a sub-zygote.
        key = c.key(info)
        root = c.key()
        if key == root:
            return local(chan, info, cmd)  # warm here
        key = with_ttys(key, [bool(t) for t in info.tty[:3]])
        z = self.table.get(key)
        note = None
        if z is not None and z.state == READY and not z.retiring:
            # The command's own check (`cmd.check`) is the sub-zygote's to make, as it
            # plans the session: a command that cannot run warm runs cold there as here.
            z.used = time.monotonic()
            result = self._forward(z, chan, info, fds)
            if result is not None:
                return result
            note = "its zygote had exited"
            z = None
        if cmd.check is not None and cmd.check(info) is not None:
            return local(chan, info, cmd)  # no zygote would do better: none is started
        what = label(key, with_ttys(root, self.root_ttys))
        start = z is None and key not in self.failed
        if start:
            note = "%sstarted a zygote for %s" % (note + "; " if note else "", what)
            # Room for it: the least recently used sub-zygote goes now (its memory too).
            while self.table and len(self.table) >= self.limit - 1:
                lru = min(self.table.values(), key=lambda z: z.used)
                self._retire(lru, "the least recently used, at most %d zygotes" % self.limit)
                note += " (retired the one for %s, the least recently used)" % lru.label
        elif z is None:
            note = "the zygote for %s could not start (%s)" % (what, self.failed[key])
        else:
            note = "the zygote for %s is still starting" % what
        c.note = note
        try:
            result = local(chan, info, cmd)
        finally:
            c.note = None
        if start and not (result[0] or result[1]):
            self._start(key, what, info)
        return result

    # -- starting, retiring, watching -------------------------------------------------------

    def _start(self, key, what, info):
        """Starts a sub-zygote for `key` (this session's); `run` made room for it."""
        env = dict(self.env)
        mine = {(kind, name): value for kind, name, value in self.conditions.key()}
        ttys = []
        for kind, name, value in key:
            if kind == "tty":
                if value:
                    ttys.append(name)
                continue
            if mine.get((kind, name)) == value:
                continue
            raw = info.env.get(name)
            if name == "PYTHONPATH" and raw is not None and SDK_DIR in python_path(
                    self.env.get("PYTHONPATH")) and SDK_DIR not in python_path(raw):
                raw = os.pathsep.join([raw, SDK_DIR])  # it runs the SDK, as the root does
            if raw is None:
                env.pop(name, None)
            else:
                env[name] = raw
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        master = slave = mark_fd = -1
        mark = None
        try:
            try:
                mark_fd = os.memfd_create("ngw-zygote-exit", os.MFD_CLOEXEC)
                os.ftruncate(mark_fd, mmap.PAGESIZE)
                mark = mmap.mmap(mark_fd, mmap.PAGESIZE)
            except (AttributeError, OSError, ValueError):
                # No shared page: its sessions' X come through here.
                if mark_fd >= 0:
                    os.close(mark_fd)
                mark, mark_fd = None, -1
            if ttys:
                master, slave = os.openpty()
                configure_pty(slave, False, winsize_of(info.env))
                os.set_blocking(master, False)
            env.update({"NGW_FD": str(theirs.fileno()), "NGW_VERSION": "1",
                        "NGW_HOST_FEATURES": ",".join(self.features),
                        PARENT_ENV: str(os.getpid()), LABEL_ENV: what})
            if mark is not None:
                env[MARK_ENV] = str(mark_fd)
            std = [slave if n in ttys else None for n in range(3)]
            proc = subprocess.Popen(
                self.argv, env=env,
                pass_fds=[theirs.fileno()] + ([mark_fd] if mark is not None else []),
                stdin=std[0] if std[0] is not None else subprocess.DEVNULL,
                stdout=std[1], stderr=std[2])
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            ours.close()
            if master >= 0:
                os.close(master)
            if mark is not None:
                mark.close()
                os.close(mark_fd)
            self._failed(key, "cannot start it: %s" % e)
            self.log("ngw: cannot start a zygote for %s: %s" % (what, e))
            return
        finally:
            theirs.close()
            if slave >= 0:
                os.close(slave)
        chan = Channel(ours.detach())
        self.table[key] = Zygote(key, what, proc, chan, master, mark, mark_fd)
        self.private_fds.extend(fd for fd in (chan.fileno(), master, mark_fd) if fd >= 0)
        self.log("ngw: started a zygote (pid %d) for %s: %s" % (
            proc.pid, what, " ".join(self.argv)))

    def _failed(self, key, why):
        self.failed.pop(key, None)
        self.failed[key] = why
        while len(self.failed) > _FAILED_KEPT:
            del self.failed[next(iter(self.failed))]

    def _retire(self, z, why):
        self._drop(z)
        self.log("ngw: retiring the zygote (pid %d) for %s: %s" % (z.proc.pid, z.label, why))

    def _drop(self, z):
        """Forgets `z` and closes its channel (an idle sub-zygote then exits 0); it is
        reaped later."""
        if self.table.get(z.key) is z:
            del self.table[z.key]
        self._drain_pty(z)
        for fd in (z.chan.fileno(), z.pty, z.mark_fd):
            if fd in self.private_fds:
                self.private_fds.remove(fd)
        if z.mark is not None:
            z.mark.close()
            os.close(z.mark_fd)
            z.mark, z.mark_fd = None, -1
        try:
            # The end of stream reaches it even if a child forked meanwhile holds a copy.
            z.chan.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        z.chan.close()
        if z.pty >= 0:
            os.close(z.pty)
            z.pty = -1
        self.retired.append(z.proc)

    def collect(self):
        """Between sessions: reads what the sub-zygotes sent (hellos, notices, their
        end), without blocking; reaps those that were told to go."""
        self.retired = [p for p in self.retired if p.poll() is None]
        for z in list(self.table.values()):
            self._drain_pty(z)
            z.chan.flush_some()
            z.chan.read_some()
            try:
                while True:
                    c = z.chan.next_chunk()
                    if c is None:
                        break
                    ty, payload = c
                    if ty == _wire.HELLO and z.state == STARTING:
                        self._hello(z, payload)
                    elif ty == _wire.NOTICE:
                        self._notice(z, payload)
                    else:
                        raise _wire.ProtocolError(
                            "chunk %s while idle" % _wire.type_name(ty))
            except _wire.ProtocolError as e:
                self._kill(z)
                self._gone(z, "it broke the protocol: %s" % e)
                continue
            if z.chan.eof:
                self._gone(z, "it exited (%s)" % self._status(z.proc, wait=0.5))
            elif z.state == STARTING and time.monotonic() - z.started > _HELLO_TIMEOUT:
                self._kill(z)
                self._gone(z, "no hello within %d s" % _HELLO_TIMEOUT)
            elif z.retiring and self.table.get(z.key) is z:
                self._drop(z)

    def _hello(self, z, payload):
        try:
            hello = json.loads(payload)
            if not isinstance(hello, dict):
                raise ValueError("not an object")
        except ValueError as e:
            raise _wire.ProtocolError("hello is not a JSON object: %s" % e) from None
        if hello.get("error"):
            self._failed(z.key, str(hello["error"]))
            self._drop(z)
            self.log("ngw: the zygote for %s could not start: %s" % (z.label, hello["error"]))
            return
        differs = _key_differs(z.key, hello.get(KEY_FIELD))
        if differs is not None:
            # Its interpreter has other values than the session's key names: it cannot
            # serve that key.
            why = "its interpreter started with %s" % differs
            self._failed(z.key, why)
            self._drop(z)
            self.log("ngw: the zygote for %s cannot serve its key: %s" % (z.label, why))
            return
        if hello.get(RECORDS_FIELD) is not True:
            # Another SDK's interpreter (its files changed under the root, which is stale
            # code then): it would not understand the sessions the root sends.
            why = "it does not take session records (another version of ngw)"
            self._failed(z.key, why)
            self._drop(z)
            self.log("ngw: the zygote for %s cannot serve its key: %s" % (z.label, why))
            return
        z.direct = hello.get(EXIT_FIELD) is True and z.mark is not None
        z.state = READY
        self.log("ngw: the zygote (pid %d) for %s is ready" % (z.proc.pid, z.label))

    def _gone(self, z, why):
        if self.table.get(z.key) is not z:
            return
        if z.state == STARTING:
            self._failed(z.key, "%s before its hello" % why)
        self._drop(z)
        self.log("ngw: the zygote (pid %d) for %s is gone: %s" % (z.proc.pid, z.label, why))

    def _notice(self, z, payload):
        """A sub-zygote's notice: to ngd as it is, except `retire` (the sub-zygote's own
        business: it takes no new session and exits; the root goes on)."""
        try:
            body = json.loads(payload)
            kind = body.get("kind") if isinstance(body, dict) else None
        except ValueError:
            kind = None
        if not isinstance(kind, str):
            raise _wire.ProtocolError("notice is not an object with a string kind")
        if kind == "retire":
            z.retiring = True
            return
        if self.notices.enabled and self.notices.chan is not None:
            self.notices.chan.send(_wire.NOTICE, payload)

    def _drain_pty(self, z):
        """What the sub-zygote wrote on its terminal (its own log lines) goes to the log."""
        while z.pty >= 0:
            try:
                data = os.read(z.pty, 65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EIO: nothing holds the terminal's other side any more
                return
            if not data:
                return
            self.log(data.decode("utf-8", "replace"))

    @staticmethod
    def _status(proc, wait=0.0):
        try:
            code = proc.wait(wait) if wait else proc.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            return "still running"
        if code < 0:
            try:
                return "killed by %s" % signal.Signals(-code).name
            except ValueError:
                return "killed by signal %d" % -code
        return "exit status %d" % code

    @staticmethod
    def _kill(z):
        try:
            z.proc.kill()
        except OSError:
            pass

    # -- forwarding one session --------------------------------------------------------------

    def _forward(self, z, chan, info, fds=None):
        """Runs `info` in sub-zygote `z`, relaying between ngd's channel and its. Returns
        (quit_requested, channel_gone), or None when the sub-zygote turned out to be gone
        before it got the session (nothing was sent to ngd: the session can run here)."""
        sub = z.chan
        if not self._send_record(z, chan, info, fds or []):
            return None
        quit_ = False
        hung = False
        error = None
        try:
            while True:
                if (chan.eof or chan.dead) and not hung:
                    hung = True
                    sub.send(_wire.INTERRUPT, b"hangup")
                drained, ended = self._to_ngd(z, chan, sub)
                if ended:
                    break
                if drained and sub.eof:
                    raise _SubDied()
                if error is None:
                    asked_quit, error = self._to_sub(chan, sub)
                    quit_ = quit_ or asked_quit
                sub.flush_some()
                chan.flush_some()
                self._wait(z, chan, sub)
        except (_SubDied, _wire.ProtocolError) as e:
            why = "it broke the protocol: %s" % e if isinstance(e, _wire.ProtocolError) else None
            self._died(z, chan, why, info)
        else:
            if z.retiring:
                self._drop(z)
        if error is not None:
            raise error  # ngd broke the protocol: the worker exits (status 2)
        return quit_, chan.eof or chan.dead

    def _send_record(self, z, chan, info, fds):
        """Sends the session to sub-zygote `z` as the root read and answered it (`record`),
        with the client's descriptors `fds` (which are the sub-zygote's then: closed
        here). False if it is gone. A session on the client's pseudo-terminal has its
        slave in their place and `info.pty` (the root answered `t ctty`): the sub-zygote's
        child makes it its controlling terminal as the root's would (docs/ngw.md 15.7).

        A session on the client's descriptors sends nothing through the relay but its X,
        most of the time, so ngd's channel `chan` goes with them when nothing the root
        wrote is still queued there: the sub-zygote may write the X there itself, which
        spares the root a wake-up on the way to it (`_channel.Channel.send`)."""
        sub = z.chan
        data = record(info)
        z.sent_direct = bool(z.direct and fds and len(fds) < _MAX_RECORD_FDS
                             and not chan.out and not chan.dead)
        extra = []
        if z.mark is not None:
            z.mark[0] = 0
        try:
            if z.sent_direct:
                extra = [os.dup(chan.fileno())]
            n = socket.send_fds(sub.sock, [data], fds + extra) if fds else sub.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as e:
            self._gone(z, "its channel failed (%s)" % e)
            return False
        finally:
            for fd in extra:
                os.close(fd)
        if fds:
            if n == 0:
                self._gone(z, "its channel did not take the session")
                return False
            for fd in fds:  # they are the sub-zygote's now
                try:
                    os.close(fd)
                except OSError:
                    pass
            fds[:] = []
        sub.out += data[n:]
        return True

    def _to_ngd(self, z, chan, sub):
        """What the sub-zygote sent, to ngd, while ngd takes it: (drained: nothing more
        to pass on now, ended: its X went)."""
        while len(chan.out) < _HIGH_WATER:
            c = sub.next_chunk()
            if c is None:
                return True, False
            ty, payload = c
            if ty == _wire.EXIT:
                chan.send(_wire.EXIT, payload)
                chan.flush_some()
                return False, True
            if ty == _wire.EXIT_SENT:
                if not z.sent_direct:
                    raise _wire.ProtocolError("x for a session without ngd's channel")
                return False, True  # it wrote the X to ngd itself
            if ty == _wire.NOTICE:
                self._notice(z, payload)
            elif ty == _wire.TAKEN:
                pass  # the root answered the descriptors already
            elif ty in (_wire.HELLO, _wire.PONG):
                raise _wire.ProtocolError("chunk %s during a session" % _wire.type_name(ty))
            else:
                chan.send(ty, payload)
        return False, False

    @staticmethod
    def _to_sub(chan, sub):
        """What ngd sent, to the sub-zygote: (whether ngd asked to quit, ngd's protocol
        error or None). A header's chunk stays for the worker: the next session's header
        crossed this X (7.4)."""
        quit_ = False
        while True:
            try:
                c = chan.next_chunk()
            except _wire.ProtocolError as e:
                chan.eof = True
                return quit_, e
            if c is None:
                return quit_, None
            ty, payload = c
            if ty == _wire.PING:
                chan.send(_wire.PONG, payload)
            elif ty == _wire.QUIT:
                quit_ = True
            elif ty in (_wire.HEARTBEAT, _wire.LONGARG):
                pass
            elif ty in (_wire.ARG, _wire.ENV, _wire.DIR, _wire.CMD):
                chan.push_back(c)
                return quit_, None
            else:
                sub.send(ty, payload)  # 0 . i, and extension chunks

    def _wait(self, z, chan, sub):
        p = select.poll()
        cev = (select.POLLIN if not chan.eof and not chan.deferred else 0) | (
            select.POLLOUT if chan.out and not chan.dead else 0)
        if cev:
            p.register(chan.fd, cev)
        sev = (select.POLLIN if not sub.eof and len(chan.out) < _HIGH_WATER else 0) | (
            select.POLLOUT if sub.out and not sub.dead else 0)
        if sev:
            p.register(sub.fd, sev)
        if z.pty >= 0:
            p.register(z.pty, select.POLLIN)
        for fd, ev in p.poll(1000):
            if fd == chan.fd:
                if ev & select.POLLOUT or (ev & (select.POLLERR | select.POLLHUP) and chan.out):
                    chan.flush_some()
                if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    chan.read_some()
            elif fd == sub.fd:
                if ev & select.POLLOUT or (ev & (select.POLLERR | select.POLLHUP) and sub.out):
                    sub.flush_some()
                if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    sub.read_some()
            else:
                self._drain_pty(z)

    def _died(self, z, chan, why, info):
        """The sub-zygote ended (or broke the protocol: `why`) during the session: the
        session ends with a message and 128+N (signal N killed it) or 1. If it died while
        it wrote the session's X to ngd's channel, whether the X arrived cannot be known,
        and anything more the root wrote there could be taken for the next session's:
        the root writes nothing more (`InDoubt`)."""
        if z.sent_direct and z.mark is not None and z.mark[0]:
            self._kill(z)
            status = self._status(z.proc, wait=_STOP_WAIT)
            self._gone(z, "it died during session %s" % info.session)
            chan.out.clear()
            chan.dead = True
            raise InDoubt("the zygote for %s died (%s) while it wrote session %s's exit "
                          "status to ngd" % (z.label, why or status, info.session))
        if why is not None:
            self._kill(z)
        status = self._status(z.proc, wait=_STOP_WAIT)
        if status == "still running":
            self._kill(z)
            status = self._status(z.proc, wait=_STOP_WAIT)
        code = z.proc.returncode
        exit_code = 128 - code if why is None and code is not None and code < 0 else 1
        what = why or status
        self._gone(z, "it died during session %s (%s)" % (info.session, what))
        said = "the zygote for %s died during the command (%s)" % (z.label, what)
        message = "ngw: %s; run it again\n" % said
        self.notices.send("zygote", said, info.session)
        chan.send(_wire.STDERR, message.encode("utf-8", "surrogateescape"))
        chan.send(_wire.EXIT, b"%d\n" % exit_code)
        chan.flush_some()

    # -- the end ------------------------------------------------------------------------------

    def shutdown(self):
        """The root is exiting: every sub-zygote's channel is closed (it exits 0); those
        still there after a short wait are killed. All are reaped."""
        for z in list(self.table.values()):
            self._drop(z)
        deadline = time.monotonic() + _STOP_WAIT
        for proc in self.retired:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.retired = []


def _key_differs(wanted, got):
    """What of key `wanted` the sub-zygote's own key `got` (its hello's, as JSON) has
    otherwise, for people (LC_CTYPE='C.UTF-8'); None when it has every value `wanted`
    names (parts its imports did not capture are not there, and do not matter)."""
    if not isinstance(got, list):
        return None  # no key in its hello: nothing to check
    have = {}
    for part in got:
        if isinstance(part, list) and len(part) == 3:
            kind, name, value = part
            have[(kind, name)] = tuple(value) if isinstance(value, list) else value
    words = []
    for kind, name, value in wanted:
        if (kind, name) in have and have[(kind, name)] != value:
            theirs = have[(kind, name)]
            if kind == "tty":
                words.append("fd %s %s" % (name, "a terminal" if theirs else "not a terminal"))
            elif theirs is None:
                words.append("%s unset" % name)
            else:
                words.append("%s=%r" % (name, theirs))
    return ", ".join(words) or None


def record(info):
    """The session `info` as one `RECORD` chunk: its fields as a spare's hand-over has
    them (docs/ngw.md 11.5), so that the sub-zygote neither decodes a header nor answers
    the descriptors again."""
    return _wire.encode(_wire.RECORD, marshal.dumps(info.to_wire()))


def from_record(payload, fds):
    """In a sub-zygote: the SessionInfo of a `RECORD` chunk's payload, which came with
    descriptors `fds` (as many as its `fds` map names, none without one; and then
    possibly ngd's channel, taken off the list): (the SessionInfo, ngd's channel or
    None)."""
    try:
        info = SessionInfo.from_wire(marshal.loads(payload))
    except (EOFError, ValueError, TypeError) as e:
        raise _wire.ProtocolError("a session record that does not decode: %s" % e) from None
    want = len(info.fds or ())
    if want and len(fds) == want + 1:
        return info, fds.pop()
    if len(fds) != want:
        raise _wire.ProtocolError("a session record for %d descriptors came with %d"
                                  % (want, len(fds)))
    return info, None


def exit_mark():
    """In a sub-zygote: the page shared with the root where a session's X is marked
    before it goes to ngd's channel (`MARK_ENV`), or None."""
    raw = os.environ.pop(MARK_ENV, None)
    if raw is None:
        return None
    try:
        fd = int(raw)
    except ValueError:
        return None
    try:
        return mmap.mmap(fd, mmap.PAGESIZE)
    except (OSError, ValueError):
        return None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
