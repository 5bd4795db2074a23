"""The worker's side of fork mode: forking children (the spare ahead of time, or one at
session time), handing a spare its session, relaying the session (relay.py), reaping, exit
reports (docs/ngw.md 11). The worker is single-threaded: one poll() loop per session.
Which spares exist and what is asked of them is `spares.Spares`'s; this module does the
forking and the socket work it asks for (`ForkRunner` is its `SpareIO`). What a session
asks of the spares when it starts and after its X (`take_spare`, `after_session`) and
when sessions come back to back (`Pace`) do no I/O either."""

import collections
import dataclasses
import marshal
import os
import signal
import socket
import sys
import threading
import time

from .. import _adaptive, _pages, _rules, _wire
from .._channel import close_fds
from .._signals import exit_payload
from .._sys import CEnviron, Cloner, libc_handle, load_libc
from . import stdio
from .child import AtFork, Child, ChildConfig
from .common import FD, LEN, REPORT, Inbox, Place, placement, sigmask
from .relay import Relay, exit_code_of_status
from .spares import NOT_YET, SpareIO, Spares
from .stdio import (Stream, close_fd, close_streams, configure_pty, make_streams,
                    winsize_of)

_HAND_OVER_TIMEOUT = 5.0  # seconds a spare may take to read its session
# A session this soon after the previous X comes back to back: its spare's successor is
# asked for at X, or while the session runs if the command's last session was short.
_BACK_TO_BACK = 0.005
# A session at most this long from the hand-over to its X is short: a successor cloned
# during a longer one would compete for the CPUs with the command's own work.
_SHORT_SESSION = 0.005
_ANSWER_SPACE = socket.CMSG_SPACE(4 * FD.size)  # a successor's socket and three pipes

#: A session the worker forks a child for at once: its record, command and streams.
#: `fds`: [(0-2, descriptor)] of the client's, when the command takes them.
ForkSession = collections.namedtuple("ForkSession", "info cmd streams fds")


@dataclasses.dataclass(frozen=True)
class ForkConfig:
    """What the worker tells its fork runner once, before the hello."""

    #: {name: value, or None if removed}: what preloading did to the environment,
    #: re-applied on top of each session's (docs/ngw.md 11).
    env_delta: dict = dataclasses.field(default_factory=dict)
    #: Fork the next session's child ahead of time (the spare, docs/ngw.md 11.5).
    prefork: bool = True
    conditions: object = None  # _exact.Conditions: when a session runs cold
    notices: object = None  # _exact.Notices
    #: name -> Command: the fork-mode commands (spares learn the name over the socket).
    commands: dict = dataclasses.field(default_factory=dict)
    #: The worker's own plumbing (its channel, inotify, the learner's pipe, the in-process
    #: runner's), closed in every child.
    private_fds: tuple = ()
    #: () -> the client descriptors the worker holds for a session that has not started
    #: (received with a header still being read): a child forked meanwhile closes its
    #: copies, since that session may run elsewhere (another child, a sub-zygote) and a
    #: copy left open would keep the client's pipes and terminal open after it.
    held_fds: object = None
    #: (installation roots, report pipe's path) with adaptive preloading, else None: the
    #: children report what they import and compile (_adaptive.Learned).
    learning: tuple = None
    signals: bool = False  # `signals` negotiated (docs/ngw.md 15.5)
    stdin_window: bool = False  # `stdin-window` negotiated (docs/ngw.md 15.6)


@dataclasses.dataclass(frozen=True)
class NextSpare:
    """How the next spare is forked: as the last session had it, since the next one
    likely has it too."""

    #: How it builds its stdio ahead of time (`stdio.stdio_key` of the session's env).
    stdio_key: tuple = (False, "")
    #: It leads its session, with its anchor, before its session comes: the last session
    #: was on the client's terminal (docs/ngw.md 15.7).
    lead: bool = False


class Pace:
    """When fork-mode sessions come and how long they take, and what that asks of the
    spares around a session (docs/ngw.md 11.5). It does no I/O: the runner gives it the
    times."""

    __slots__ = ("last_x", "took")

    def __init__(self):
        self.last_x = None  # when the last session ended (time.monotonic())
        self.took = {}  # command name -> its last session's hand-over to X, in seconds

    def starts(self, now):
        """A session starts at `now`: whether it comes back to back with the last."""
        return self.last_x is not None and now - self.last_x < _BACK_TO_BACK

    def ask_during(self, back_to_back, name):
        """Whether the next spare's successor is asked for while this session (of command
        `name`) runs: back to back, and the command's last session was short. The worker
        has nothing to do meanwhile, and after X it would compete with the client
        receiving X and with the next client's start; a longer command would share the
        CPUs with the clone."""
        return back_to_back and self.took.get(name, 1.0) <= _SHORT_SESSION

    def ended(self, name, handed, now):
        """The session of `name`, handed to its child at `handed`, sent its X at `now`."""
        self.last_x = now
        self.took[name] = now - handed


def take_spare(spares, on_terminal):
    """A session starts: its spare from `spares`, or None. A spare that leads a session
    of its own serves only a session on the client's terminal (`on_terminal`): it cannot
    join the worker's session again, nor leave its own; it is discarded."""
    child = spares.take()
    if child is not None and child.led and not on_terminal:
        spares.discard_taken(child)
        return None
    return child


def after_session(spares, resume, back_to_back):
    """After a session's X: the next session's spare. It is forked once the session's
    child has been reaped (`Spares.fork_if_due`, from the idle loop on SIGCHLD), so that
    its fork does not compete for the CPU with the client still receiving X; right away
    when sessions come back to back, so that it is ready sooner, and then the spare is
    asked for its successor at once, so that the session after it finds one ready too
    (docs/ngw.md 11.5). `resume`: the worker goes on with spares (they are wanted, no
    quit, the channel is there)."""
    if resume and spares.spare is None:
        spares.make_due()
    else:
        spares.not_due()
    if resume and back_to_back:
        if spares.spare is None:
            spares.fork_spare(rehearse=False)  # the session would interrupt it anyway
        spares.ask()


class ExitReports:
    """The pipe children report their exit status on, right before _exit(), after closing
    their standard streams, so that X need not wait for the kernel to tear the child
    down. A child holds no descriptor for it while the command runs: it opens the write
    end through /proc/<worker>/fd/<n> at exit (Linux; elsewhere the exit is seen by
    waitpid(), and `path` is None)."""

    def __init__(self, pid):
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        path = "/proc/%d/fd/%d" % (pid, self.w)
        self.path = path if os.path.exists(path) else None
        self._buf = b""

    def read(self, pid=None):
        """Reads the reports that arrived; returns the exit code `pid` reported."""
        code = None
        while True:
            try:
                data = os.read(self.r, 4096)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                break
            data = self._buf + data
            whole = len(data) - len(data) % REPORT.size
            self._buf = data[whole:]
            for rpid, rcode in REPORT.iter_unpack(data[:whole]):
                if pid is not None and rpid == pid:
                    code = rcode
        return code


def _noop(signum, frame):
    pass


class _Forked:
    """A forked child as the parent sees it: `ctl` is the parent's end of the socket a
    spare reads its session from, `streams` the parent's ends of its pipes (both None
    once handed over, and for a child forked with its session already in memory).
    `stamp`: the learned pages' stamp when the worker forked it or the spare it was
    cloned from. `led`: a spare that leads a session of its own (docs/ngw.md 15.7), as
    its successors do; it can serve only a session on the client's terminal."""

    __slots__ = ("pid", "ctl", "streams", "stamp", "led")

    def __init__(self, pid, ctl, streams, stamp=0, led=False):
        self.pid = pid
        self.ctl = ctl
        self.streams = streams
        self.stamp = stamp
        self.led = led


class ForkRunner(SpareIO):
    """Runs fork-mode commands. One per worker; the worker must be single-threaded.

    With `prefork`, the next session's child (the *spare*) is forked after each fork-mode
    session, with three pipes of its own: it does everything that does not depend on the
    session (signal reset, setsid, PR_SET_PDEATHSIG, closing the worker's descriptors, its
    pipes on fds 0-2 and sys.stdin/stdout/stderr built on them), then blocks reading its
    session (argv, environment, cwd, umask, ttys; ptys by SCM_RIGHTS) from a socket. An
    in-process session discards the spare, since it may change the worker that the spare
    is a copy of. docs/ngw.md section 11.5.

    Its state: the spares (`Spares`), the pace of sessions (`Pace`), how the next spare
    is forked (`NextSpare`, replaced by each session), the children not reaped yet
    (`zombies`). Its children get its `ChildConfig`, made once."""

    def __init__(self, log, kill_grace, config=None):
        self.config = config = config if config is not None else ForkConfig()
        self.log = log
        self.kill_grace = kill_grace  # seconds between SIGHUP and SIGKILL at hang-up
        # The worker's plumbing, closed in every child; the sub-zygotes' channels and
        # terminals join it while they live (_zygotes.Zygotes).
        self.private_fds = list(config.private_fds)
        self.held_fds = config.held_fds  # ForkConfig.held_fds
        load_libc()  # here: no child loads the C library again
        self.cloner = Cloner.probe(log) if config.prefork else None
        self.spares = Spares(self, can_clone=self.cloner is not None)
        self.pace = Pace()
        self.next_spare = NextSpare()
        self.forked = self.cloned = 0  # spares the worker forked, and spares cloned
        self.zombies = []  # children that are gone or going but not reaped yet
        self._said = set()  # what was logged once: ("warm", reason), ("clone", why), ...
        # The pages children write: learned from their reports, pre-faulted by spares
        # (copy-on-write pre-faulting, docs/ngw.md 11.7); nothing to do without spares.
        self.pages = _pages.Pages(log, cap=None if config.prefork else 0, libc=libc_handle())
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.reports = ExitReports(os.getpid())
        self._all_signals = tuple(int(s) for s in signal.valid_signals())
        self.child_config = ChildConfig(
            log=log, commands=dict(config.commands), env_delta=dict(config.env_delta),
            env_rules=dict(_rules.RULES),
            signals=tuple(s for s in self._all_signals
                          if s not in (signal.SIGKILL, signal.SIGSTOP)),
            worker_pid=os.getpid(), worker_pgrp=os.getpgrp(), report_path=self.reports.path,
            job_control=config.signals, cloner=self.cloner, anchor=self._anchor(log),
            environ=CEnviron.find(), pages=self.pages)
        signal.signal(signal.SIGCHLD, _noop)
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        # What the children's reports are measured against (adaptive preloading), taken
        # last: what this constructor imported is the zygote's too.
        self.learn = _adaptive.Learned.now(*config.learning) if config.learning else None

    @staticmethod
    def _anchor(log):
        """The `ng` a command that leads its own session runs as its job's anchor (15.7),
        or None."""
        anchor = os.environ.get("NGW_ANCHOR") or None
        if anchor is not None and not os.access(anchor, os.X_OK):
            log("ngw: the job's anchor %s cannot be run; on a terminal, a session leader "
                "forks each command" % anchor)
            return None
        return anchor

    def _log_once(self, key, message):
        if key not in self._said:
            self._said.add(key)
            self.log(message)

    # -- session --------------------------------------------------------------------------

    def run(self, chan, info, cmd, client_fds=None):
        """Runs one session to its X. Returns (quit_requested, channel_gone).
        `client_fds`: the client's descriptors, in the order of `info.fds` (their fd
        numbers), when the command takes them (docs/ngw.md 15.4); the child gets them and
        the worker keeps no copy."""
        try:
            return self._run(chan, info, cmd, client_fds or [])
        finally:
            close_fds(client_fds or [])

    def _run(self, chan, info, cmd, client_fds):
        back_to_back = self.pace.starts(time.monotonic())
        self.spares.not_due()  # too late for one: this session forks its own child
        self.reap()
        self.reports.read()
        spare = take_spare(self.spares, on_terminal=info.pty is not None)
        self._plan(info, cmd, client_fds)
        child, streams = self._hand_spare(spare, info, cmd, client_fds)
        if child is None:
            child, streams, failure = self._fork_for(info, cmd, client_fds)
            if child is None:
                return self._fail(chan, failure)
        close_fds(client_fds)  # the child has them now
        client_fds[:] = []
        if placement(info, self.config.signals) is Place.GROUP:
            # A process group of its own in the worker's session (the child does the same:
            # whichever runs first), so that signals to the group reach everything it
            # starts from the first instruction on.
            try:
                os.setpgid(child.pid, child.pid)
            except OSError:
                pass
        for s in streams:
            close_fd(s.child_fd)
            s.child_fd = -1
        handed = time.monotonic()
        if self.pace.ask_during(back_to_back, cmd.name):
            self.spares.ask()  # the next spare's successor now, while the child runs
        relay = Relay(self, chan, child.pid, streams)
        try:
            status = relay.loop()
        finally:
            relay.cleanup()
        chan.send(_wire.EXIT, exit_payload(relay.status, status, self.config.signals))
        chan.flush_some()
        self.pace.ended(cmd.name, handed, time.monotonic())
        self.spares.session_ended()  # the successor the session's child made as a spare
        if relay.error is not None:
            raise relay.error
        gone = chan.eof or chan.dead
        after_session(self.spares, self.config.prefork and not relay.quit and not gone,
                      back_to_back)
        self.reap()
        return relay.quit, gone

    def _plan(self, info, cmd, client_fds):
        """What the session's record says before it is handed over: its terminals, when
        it runs on the client's descriptors (what the child sees is what it gets), and
        whether it runs cold; and how the next spare is forked, as this session is."""
        if info.fds is not None:
            given = dict(zip(info.fds, client_fds))
            info.tty = tuple(n in given and os.isatty(given[n]) for n in range(3))
        info.cold = self._cold_reason(info, cmd)
        self.next_spare = NextSpare(
            stdio_key=stdio.stdio_key(info.env),
            lead=info.pty is not None and self.child_config.anchor is not None)

    def _hand_spare(self, child, info, cmd, client_fds):
        """Hands `child` (the spare, or None) its session: (the child, the worker's ends
        of the session's streams), or (None, None) when there is no spare or it could not
        take the session (it is discarded)."""
        if child is None:
            return None, None
        streams = send = None
        if info.fds is not None:
            close_streams(child.streams)  # no pipes: the client's descriptors instead
            child.streams = None
            streams, send = [], list(zip(info.fds, client_fds))
        else:
            try:
                streams, send = self._session_streams(child, info)
            except OSError as e:
                self.log("ngw: cannot create the standard streams: %s" % e)
        if send is not None and self._hand_over(child, info, cmd, send):
            return child, streams
        if send is not None:
            close_streams(streams)
        self.spares.discard_taken(child)
        return None, None

    def _fork_for(self, info, cmd, client_fds):
        """A child forked for the session: (the child, the worker's ends of its streams,
        None), or (None, None, the message to the client) if it could not be."""
        streams = []
        if info.fds is None:
            try:
                streams = make_streams(info)
            except OSError as e:
                close_streams(streams)
                return None, None, "ngw: cannot create the standard streams: %s\n" % e
        session = ForkSession(info, cmd, streams, list(zip(info.fds or (), client_fds)))
        try:
            return self._fork(session), streams, None
        except OSError as e:
            close_streams(streams)
            return None, None, "ngw: cannot fork: %s\n" % e

    def _cold_reason(self, info, cmd):
        """Why this session runs the cold way (docs/ngw.md 12.4), or None: warm."""
        conditions, notices = self.config.conditions, self.config.notices
        if conditions is None:
            return None
        reason = conditions.reason(info)
        if reason is None and cmd.check is not None:
            reason = cmd.check(info)
        if reason is None:
            return None
        if cmd.cold is None:
            self._log_once(("warm", reason), "ngw: %s runs warm although %s (it has no "
                                             "cold form)" % (cmd.name, reason))
            return None
        if notices is not None:
            notices.send("fallback", "%s; ran %s the cold way" % (reason, cmd.name),
                         info.session)
        return reason

    def _fork_spare(self, rehearse=True):
        """Forks the spare now."""
        self.spares.fork_spare(rehearse)

    def renew_spare(self, learn=None):
        """The worker changed (it imported or compiled what sessions did, or filled memos):
        the spare and its standby, copies of the worker without that, go, and the next
        spare is forked now. `learn`: the children's `_adaptive.Learned` from now on, if
        it changed."""
        self.spares.discard()
        if self.config.prefork:
            self.spares.make_due()
        if learn is not None:
            self.learn = learn
        self.reap()

    # -- SpareIO: the spares' forks and sockets (docs/ngw.md 11.5) ---------------------------

    def fork(self, rehearse):
        try:
            child = self._fork(None, rehearse)
        except OSError as e:
            self.log("ngw: cannot fork the next session's child ahead of time: %s" % e)
            return None
        self.forked += 1
        return child

    def ask(self, child):
        """Asks a spare to clone its successor. Not while the learned pages are still
        being learned (fewer than _pages.FIRST reports when the spare's lineage was forked)
        and changed since: the copies would carry an empty or early set; the worker forks
        the next spare instead. Later the set changes little, and a copy's set is renewed
        whenever the worker forks."""
        if child.ctl is None:
            return False
        self.pages.absorb()
        if self.pages.stamp != child.stamp and child.stamp < _pages.FIRST:
            return False
        self.pages.note_fork()
        payload = marshal.dumps({"clone": True, "sample": self.pages.sample})
        try:
            child.ctl.setblocking(False)
            child.ctl.send(LEN.pack(len(payload)) + payload)  # small: it fits at once
            return True
        except OSError:
            return False  # gone: reap() notices

    def answer(self, spare, timeout):
        """Reads `spare`'s answer to `ask`: its successor, None, or NOT_YET (timeout 0 and
        no answer so far: it is still cloning)."""
        ctl = spare.ctl
        if ctl is None:
            return None
        inbox = Inbox()
        try:
            ctl.settimeout(timeout)
            while not inbox.whole():
                data, ancdata, _, _ = ctl.recvmsg(4096, _ANSWER_SPACE)
                inbox.feed(data, ancdata)
                if not data:
                    break
        except (BlockingIOError, socket.timeout):
            if not inbox.buf and not inbox.fds and timeout == 0:
                return NOT_YET
        except OSError:
            pass
        fds = inbox.take_fds()
        try:
            answer = inbox.take() if inbox.whole() else {"pid": None}
            pid = answer.get("pid")
            why = answer.get("why")
            expected = answer.get("expected", False)
        except (EOFError, ValueError, TypeError, AttributeError):
            pid = why = None
            expected = False
        if why and not expected:
            self._log_once(("clone", why), "ngw: a spare did not clone its successor: %s; "
                                           "the worker forks the next spare" % why)
        if not pid or len(fds) != 4:  # none, or one the spare gave up on: killed here, reaped
            close_fds(fds)
            if pid:
                self._kill(pid)
            return None
        streams = [Stream(fds[1], -1, False), Stream(fds[2], -1, False, _wire.STDOUT),
                   Stream(fds[3], -1, False, _wire.STDERR)]
        self.cloned += 1
        return _Forked(pid, socket.socket(fileno=fds[0]), streams, spare.stamp, spare.led)

    def exited(self, child):
        try:
            done, st = os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:
            done, st = child.pid, 0
        if done:
            self.log("ngw: the session child forked ahead of time exited (status %d)"
                     % exit_code_of_status(st))
        return bool(done)

    def release(self, child):
        if child.ctl is not None:
            child.ctl.close()
            child.ctl = None
        if child.streams:
            close_streams(child.streams)
            child.streams = None

    def kill(self, child):
        self.release(child)
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.zombies.append(child.pid)

    def _kill(self, pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.zombies.append(pid)

    def _fail(self, chan, message):
        self.log(message.rstrip())
        chan.send(_wire.STDERR, message.encode())
        chan.send(_wire.EXIT, b"126\n")
        return False, chan.eof or chan.dead

    def drain_wakeups(self):
        try:
            while self.wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    # -- children: forking, handing a session over, reaping --------------------------------

    def _fork(self, session, rehearse=True):
        """Forks a child. `session` (a ForkSession): it runs that session at once. None: a
        spare, with three pipes of its own, that waits for its session on a socket (and
        rehearses the session's set-up meanwhile, with `rehearse`)."""
        if threading.active_count() > 1:
            self._log_once("threads", "ngw: warning: forking while %d threads run; only the "
                                      "forking thread exists in the child"
                           % threading.active_count())
        for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                if f is not None:
                    f.flush()
            except (OSError, ValueError):
                pass
        worker_stdio = stdio.worker_stdio()
        if session is None:
            self.pages.absorb()  # what the last children reported, for this spare
        self.pages.note_fork()
        ctl = theirs = None
        streams = []
        if session is None:
            ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                streams = make_streams(None)
            except OSError:
                close_streams(streams)
                ctl.close()
                theirs.close()
                raise
        old_mask = sigmask(signal.SIG_BLOCK, self._all_signals)
        try:
            pid = os.fork()
        except OSError:
            sigmask(signal.SIG_SETMASK, old_mask)
            if ctl is not None:
                close_streams(streams)
                ctl.close()
                theirs.close()
            raise
        if pid == 0:
            if ctl is not None:
                ctl.close()
            at_fork = AtFork(closes=tuple(self.child_closes()), worker_stdio=worker_stdio,
                             learn=self.learn, stdio_key=self.next_spare.stdio_key,
                             rehearse=rehearse, lead_ahead=self.next_spare.lead)
            Child(self.child_config, at_fork).run(theirs, session, streams)  # never returns
        sigmask(signal.SIG_SETMASK, old_mask)
        if theirs is not None:
            theirs.close()
        for s in streams:
            close_fd(s.child_fd)
            s.child_fd = -1
        led = session is None and self.next_spare.lead
        return _Forked(pid, ctl, streams, self.pages.stamp, led)

    def _session_streams(self, child, info):
        """A spare's pipes, with a pty instead where the session has a terminal: (the
        streams, [(fd number, pty slave)] to send it)."""
        streams = child.streams
        child.streams = None
        replaced = []
        winsize = winsize_of(info.env, info.meta)
        try:
            for n in range(3):
                if info.tty[n]:
                    master, slave = os.openpty()
                    old, streams[n] = streams[n], Stream(master, slave, True, streams[n].ty)
                    close_fd(old.fd)
                    os.set_blocking(master, False)
                    configure_pty(slave, n == 0, winsize)
                    replaced.append((n, slave))
        except OSError:
            close_streams(streams)
            raise
        return streams, replaced

    def _hand_over(self, child, info, cmd, replaced):
        """Sends a spare its session and the descriptors to put on its fds 0-2 (ptys, or
        the client's own), if any. False if it is gone (or stuck)."""
        payload = marshal.dumps({"command": cmd.name, "info": info.to_wire(),
                                 "fds": [n for n, _ in replaced]})
        data = LEN.pack(len(payload)) + payload
        ctl = child.ctl
        owes = child is self.spares.pending  # its ctl is kept for the answer it owes
        if not owes:
            child.ctl = None
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
            if not owes:
                ctl.close()

    def discard_spare(self):
        """Before an in-process session: it may change the worker, and a child forked
        before that change would not see what a child forked at session time sees."""
        self.spares.discard()

    def watching(self):
        """Whether the idle loop should watch wake_r (SIGCHLD) and call reap()."""
        return self.spares.spare is not None or bool(self.zombies)

    def reap(self):
        """Reaps what has exited, without blocking; notices a spare that died."""
        self.drain_wakeups()
        for pid in list(self.zombies):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.zombies.remove(pid)
        self.spares.reap()
        if not self.zombies:
            self.spares.fork_if_due()

    def shutdown(self):
        """The worker is exiting: ends the spare and reaps every child (bounded wait)."""
        self.discard_spare()
        if self.cloned:
            self.log("ngw: fork mode: %d spares forked by the worker, %d cloned by spares"
                     % (self.forked, self.cloned))
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

    def child_closes(self):
        """The worker's descriptors that a child closes first thing: its plumbing, and
        the client descriptors it holds for sessions not yet started."""
        held = self.held_fds() if self.held_fds is not None else []
        spares = []
        for spare in self.spares.children():
            if spare.ctl is not None:
                spares.append(spare.ctl.fileno())
            spares.extend(st.fd for st in spare.streams or ())
        return [self.wake_r.fileno(), self.wake_w.fileno(), self.reports.r,
                self.reports.w] + self.pages.fds() + self.private_fds + held + spares
