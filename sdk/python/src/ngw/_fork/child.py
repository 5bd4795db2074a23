"""The session child's side of fork mode: everything from the fork to `_exit`, run in
the forked process (docs/ngw.md 11.1): the signal reset, `setsid`, `PR_SET_PDEATHSIG`,
closing the worker's descriptors, a spare's wait for its session, the session's
descriptors, umask, directory, environment and argv, the rehearsal (11.5), the spare's
copy-on-write pre-faulting and a child's page report (11.7), and the exit report.
Nothing here runs in the worker. What a child decides without I/O is apart: whether it
leads its session (`lead.Leading`), where it runs (`common.placement`), its messages from
the worker (`common.Inbox`)."""

import dataclasses
import fcntl
import marshal
import os
import select
import signal
import socket
import sys
import termios
import threading
import time

from .. import _argv, _exact, _pages, _pyexit
from .._context import Context
from .._session import SessionInfo
from .._sys import die_with_parent
from . import stdio
from .common import (CMSG_SPACE, LEN, REPORT, STOP_REPORT, Inbox, Place, getsignal,
                     placement, setsignal, sigmask)
from .lead import Leading
from .stdio import close_fd, make_streams

_DFL, _IGN = int(signal.SIG_DFL), int(signal.SIG_IGN)  # _signal's functions take ints
_FRESH = {int(signal.SIGINT): signal.default_int_handler, int(signal.SIGPIPE): _IGN}
if hasattr(signal, "SIGXFSZ"):
    _FRESH[int(signal.SIGXFSZ)] = _IGN

#: In a child: what must outlive it (the C environment's strings), and what it need not
#: free (the worker's os.environ data: freeing it writes to memory shared with the worker).
_KEEP = []
#: argv[0] that makes `ng` a job's anchor (client/src/anchor.rs).
ANCHOR_ARGV0 = "ng:anchor"
#: Seconds a spare waits for the successor it cloned to say it is ready.
_SUCCESSOR_START = 2.0


@dataclasses.dataclass(frozen=True)
class ChildConfig:
    """What every child of one fork runner is forked with: fixed when the runner
    starts."""

    log: object
    #: name -> Command: the fork-mode commands (a spare learns the name over its socket).
    commands: dict
    #: What preloading did to the environment, and the variables with a rule
    #: (`_environ_plan`).
    env_delta: dict
    env_rules: dict
    #: The signals whose dispositions a child resets (every one but SIGKILL and SIGSTOP).
    signals: tuple
    worker_pid: int
    worker_pgrp: int
    #: The path a child opens to write its exit report (the worker's pipe), or None.
    report_path: object
    #: `signals` negotiated: the process group is chosen with the session (15.5).
    job_control: bool
    cloner: object  # _sys.Cloner: a spare clones its successor (11.5) with it, or None
    anchor: object  # the job's anchor (`ng`) a child that leads its session runs, or None
    environ: object  # _sys.CEnviron: the C environment, or None
    pages: object  # _pages.Pages: the learned pages (docs/ngw.md 11.7)


@dataclasses.dataclass(frozen=True)
class AtFork:
    """What one child is forked with besides its runner's `ChildConfig`: what the runner
    holds at the fork."""

    #: The worker's descriptors the child closes first thing (`ForkRunner.child_closes`).
    closes: tuple
    worker_stdio: object  # stdio.worker_stdio(), read right before the fork
    learn: object = None  # an _adaptive.Learned, with adaptive preloading
    # A spare's: how it builds its stdio ahead of time (as the last session had it),
    # whether it rehearses the session's set-up, whether it leads its session ahead
    # (a led spare serves only a session on the client's terminal, 15.7).
    stdio_key: tuple = (False, "")
    rehearse: bool = True
    lead_ahead: bool = False


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



class Child:
    """One forked child, built in the child right after the fork from its runner's
    `ChildConfig` and what the runner held at the fork (`AtFork`); the runner's own
    object is never used on this side. Whether it leads a session is its `Leading`."""

    def __init__(self, config, at_fork):
        self.config = config
        self.at_fork = at_fork
        self._closes = list(at_fork.closes)
        self._command = None  # the session's command name, once it has one
        self._null_stdio = None  # a spare's stdio objects for the null device on fds 0-2
        self._inbox = Inbox()  # a spare's messages from the worker
        self._lead = Leading()

    def run(self, ctl, session, streams):
        status = 126
        name = None
        try:
            if session is None:  # a spare: its pipes on 0-2 now, its session later
                self.prepare(ctl, streams)
                info, cmd, fds = self.wait(ctl)
                prebuilt = True
            else:
                info, cmd, streams = session.info, session.cmd, session.streams
                own = {fd for _, fd in session.fds or ()}  # this session's client fds
                self._closes = [fd for fd in self._closes if fd not in own]
                self.prepare(None, streams)
                fds = session.fds or [(n, s.child_fd) for n, s in enumerate(streams)]
                prebuilt = False
            name = self._command = info.command
            self.set_up_session(info, cmd, fds, prebuilt)
            ctx = Context(info, *(getattr(f, "buffer", None)
                                  for f in (sys.stdin, sys.stdout, sys.stderr)),
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

    def prepare(self, ctl, streams):
        """What does not depend on the session. Signals stay blocked until the command."""
        signal.set_wakeup_fd(-1)
        _reset_signals(self.config.signals)
        # Own session and process group, so the parent can signal everything the command
        # starts. With `signals` the session decides (set_up_session): a process group
        # of its own in the worker's session, where stops work, unless the command needs
        # an emulated terminal as its controlling terminal.
        if not self.config.job_control:
            os.setsid()
        # Dies with the worker (exits at once if the worker is gone already).
        die_with_parent(self.config.worker_pid, 128 + signal.SIGKILL)
        # Nothing of the worker's plumbing stays open.
        for fd in self._closes + [s.fd for s in streams]:
            try:
                os.close(fd)
            except OSError:
                pass
        if ctl is None:
            return
        # A spare: its pipes become fds 0-2 and sys.stdin/stdout/stderr are built on them
        # now, as for a session whose streams are all pipes (most are); the session
        # replaces what differs.
        env = stdio.stdio_env(self.at_fork.stdio_key)
        try:
            self._null_stdio = stdio.null_stdio(env, self.at_fork.worker_stdio)
        except OSError:
            self._null_stdio = None
        for n, s in enumerate(streams):
            os.dup2(s.child_fd, n)
        for s in streams:
            if s.child_fd > 2:
                os.close(s.child_fd)
        stdio.install_stdio(env, self.at_fork.worker_stdio)
        ctl.setblocking(True)
        if self.at_fork.lead_ahead:
            self._lead_session()
        if self.at_fork.rehearse:
            try:
                self._rehearse(ctl)
            except Exception:
                pass

    def _prefault(self, ctl):
        """In a spare, before it waits: the copy-on-write faults the previous sessions'
        children took, taken now (docs/ngw.md 11.7), until the session arrives. Not at
        once: a session that comes within IDLE_BEFORE finds the CPUs free of it (sessions
        in a loop, where it would compete with the client and ngd for them)."""
        p = select.poll()
        p.register(ctl, select.POLLIN)
        try:
            pages = self.config.pages
            if pages.sample or not pages.pages or p.poll(int(_pages.IDLE_BEFORE * 1000)):
                return
            pages.prefault(lambda: bool(p.poll(0)))
        except Exception:
            pass

    def wait(self, ctl):
        """A spare's wait for its session: pre-faulting while idle (11.7), cloning its
        successor when the worker asks (11.5), until the session comes. A spare that
        leads its session first waits for its anchor (a successor too, for its own)."""
        while True:
            self._settle_anchor()
            if self.config.pages.enabled and not self._inbox.buf:  # nothing read ahead waits
                self._prefault(ctl)
            record, fds = self.receive(ctl)
            if "clone" not in record:
                ctl.close()
                return self.session_of(record, fds)
            ctl = self._successor(ctl, record)

    def receive(self, ctl):
        """The next message from the worker, and the descriptors that came with it. Exits
        quietly when the worker discards the spare."""
        inbox = self._inbox
        while not inbox.whole():
            try:
                # 64 KiB: a session record is most often smaller, and a bigger buffer
                # would be a fresh mapping for every read
                data, ancdata, _, _ = ctl.recvmsg(1 << 16, CMSG_SPACE)
            except OSError:
                os._exit(0)
            if not data:
                os._exit(0)
            inbox.feed(data, ancdata)
        record = inbox.take()
        if "clone" in record:  # a request carries no descriptors: any are the session's
            return record, []
        return record, inbox.take_fds()

    def session_of(self, record, fds):
        """(info, command, [(0-2, descriptor)]) from a session record."""
        info = SessionInfo.from_wire(record["info"])
        numbers = record["fds"]
        if len(fds) != len(numbers):
            raise OSError("received %d descriptors instead of %d" % (len(fds), len(numbers)))
        return info, self.config.commands[record["command"]], list(zip(numbers, fds))

    def set_up_session(self, info, cmd, fds, prebuilt):
        """The session's part. `fds`: [(0-2, descriptor)] to put on fds 0-2; `prebuilt`:
        sys.stdin/stdout/stderr were built on pipes already (a spare's). A session on the
        client's descriptors (`info.fds`) has exactly those: an fd its map leaves out is
        closed, as it was for the client."""
        taken = info.fds is not None
        for n, fd in fds:
            os.dup2(fd, n)
        for _, fd in fds:
            if fd > 2:
                os.close(fd)
        if taken:
            for n in range(3):
                if n not in info.fds:
                    try:
                        os.close(n)
                    except OSError:
                        pass
        place = placement(info, self.config.job_control)
        if place is Place.TERMINAL:
            # Returns in the command's process only (docs/ngw.md 15.7).
            self._controlling_terminal(info.pty[0])
        elif place is Place.GROUP:
            try:
                os.setpgid(0, 0)  # the worker does the same; whichever runs first
            except OSError:
                pass
        elif place is Place.EMULATED:
            # A stdin pty becomes the controlling terminal (/dev/tty works), in a session
            # of its own (which a child has already without job control).
            if self.config.job_control:
                os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        ignored = info.ignored_signals()
        for sig in ignored:
            setsignal(sig, _IGN)
        os.umask(info.umask)
        if info.cwd is not None:
            _chdir(info.cwd, info.client_pid)
        if info.cold is not None:
            self._ready_to_run()
            _exact.cold_exec(cmd.cold + list(info.args), info.env, ignored)
        self._set_environ(info.env)
        _argv.apply([cmd.argv0] + list(info.args))
        if not prebuilt or stdio.stdio_key(info.env) != self.at_fork.stdio_key:
            stdio.install_stdio(info.env, self.at_fork.worker_stdio)
        elif fds or taken:
            self._session_stdio(info.env)
        self._ready_to_run()
        sigmask(signal.SIG_SETMASK, ())

    def _controlling_terminal(self, fd):
        """The client's pseudo-terminal (on `fd`) as the controlling terminal, with job
        control as under a shell (docs/ngw.md 15.7). This process leads a session (a
        spare may lead one already, `AtFork.lead_ahead`) and takes the terminal; its group
        is the terminal's foreground group. A group whose members' parents are all outside
        its session is orphaned, and the kernel discards the terminal's SIGTSTP for it.
        The job's anchor (`ng`, NGW_ANCHOR) puts a member with a parent in the session
        into this group; it works while the session is set up, and `_ready_to_run` waits
        for it before the command runs. Without one, this process stays as the session
        leader and forks the command (`_fork_leader`)."""
        if not self._lead.leads():
            self._lead_session()
        # A terminal is one session's at a time: the leader of an earlier session on the
        # same pseudo-terminal may still be exiting (the command's end is reported before
        # its leader is gone). Wait for it, briefly.
        deadline = time.monotonic() + 2.0
        while True:
            try:
                fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
                break
            except PermissionError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)
        if self._lead.took_terminal(fd):
            self._fork_leader(fd)

    def _lead_session(self):
        """Starts a session led by this process, and the job's anchor for it."""
        os.setsid()
        self._lead.started(self._spawn_anchor())

    def _spawn_anchor(self):
        """Starts the job's anchor for this process (client/src/anchor.rs); its pid, or
        None without one."""
        if self.config.anchor is None:
            return None
        try:
            return os.posix_spawn(self.config.anchor, [ANCHOR_ARGV0, str(os.getpid())], {})
        except OSError:
            return None

    def _settle_anchor(self):
        """Waits for the anchor `_lead_session` started, whose process is then gone (no
        SIGCHLD of it is left pending): ANCHORED if it put its member in this group, else
        ALONE. Nothing is logged here: in a session, fd 2 is the session's (the worker
        checked the anchor when it started)."""
        pid = self._lead.to_settle()
        if pid is None:
            return
        try:
            _, status = os.waitpid(pid, 0)
        except OSError:
            status = -1
        signal.sigtimedwait((signal.SIGCHLD,), 0)
        self._lead.settled(status == 0)

    def _ready_to_run(self):
        """Right before the command (or its cold form) runs: the job's anchor settled, so
        that the command has no child it did not start. If the anchor failed, a leader
        is forked after all (returns in the command's process only)."""
        self._settle_anchor()
        if self._lead.at_run():
            self._fork_leader(self._lead.terminal)

    def _fork_leader(self, fd):
        """This process stays as the session leader and forks the command's process, which
        returns from here in a process group of its own that is the terminal's foreground
        group: the leader, its parent in the session, forwards the worker's signals and
        reports the command's stops and its end (`_lead`), and never returns."""
        leader = os.getpid()
        pid = os.fork()
        if pid == 0:
            # Signals are blocked until the command runs: no SIGTTOU for tcsetpgrp.
            os.setpgid(0, 0)
            os.tcsetpgrp(fd, os.getpgrp())
            die_with_parent(leader, 128 + signal.SIGKILL)
            # The exit report in the leader's name: the worker has the status as soon as
            # the command reports it, not after the leader saw it exit.
            self._lead.follows(leader)
            return
        try:
            os.setpgid(pid, pid)  # as the child does: whichever runs first
        except OSError:
            pass
        _lead(pid, self.config.report_path)

    def _session_stdio(self, env):
        """A spare's sys.stdin/stdout/stderr for descriptors other than its pipes: its
        prebuilt objects where they are what make_stdio() would build on the session's
        descriptor (a pipe or socket: the pipe objects; the null device: those built on
        it), new ones for the rest (terminals, files, closed descriptors)."""
        current = (sys.stdin, sys.stdout, sys.stderr)
        made, rebuild = [], []
        for n in range(3):
            kind = stdio.fd_kind(n)
            if kind == "pipe":
                made.append(current[n])
            elif kind == "null" and self._null_stdio is not None:
                made.append(self._null_stdio[n])
            else:
                made.append(None)
                rebuild.append(n)
        if rebuild:
            fresh = stdio.make_stdio(env, self.at_fork.worker_stdio, rebuild)
            for n in rebuild:
                made[n] = fresh[n]
        if made != list(current):
            stdio.install_stdio(env, self.at_fork.worker_stdio, made)

    def _set_environ(self, env):
        """Replaces os.environ (and os.environb, which shares its data) and the C
        environment with the client's. Same result as clearing os.environ and updating
        it, in ~1/5 of the time in a fresh child: the old data is left alone rather than
        freed, and on Linux the C `environ` is pointed at a new array instead of ~2
        setenv() calls' worth of page faults per variable."""
        c = self.config
        data, entries = _environ_plan(env, c.env_delta, c.env_rules)
        _KEEP.append(os.environ._data)
        if c.environ is not None:
            array = c.environ.array(entries)
            _KEEP.append((entries, array))
            c.environ.point(array)
        else:
            for name in list(os.environ._data):
                os.unsetenv(name)
            for name, value in data.items():
                os.putenv(name, value)
        os.environ._data = data
        if getattr(os, "environb", None) is not None:
            os.environb._data = data

    def _successor(self, ctl, request):
        """In a spare the worker asked for its successor (docs/ngw.md 11.5): a copy of this
        prepared spare, made with `clone(CLONE_PARENT)` so that it is the worker's child
        as a spare the worker forks is, with its own socket and pipes. The worker gets
        its pid and its ends of them; or None and why, when this spare cannot be cloned
        exactly or its session is already here (the clone would delay it). Returns the
        socket to wait on: this spare's, or in the copy the copy's."""
        pid, why, theirs, streams = None, None, None, []
        ours = None
        # Whether not cloning is worth a word in the log: not when the session is here.
        expected = False
        cloner = self.config.cloner
        if cloner is None:
            why = "cloning is off"
        elif self._inbox.buf or select.select([ctl], [], [], 0)[0]:
            why, expected = "its session came first", True
        elif not cloner.ready():
            why = "it has threads"
        else:
            try:
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                streams = make_streams(None)
                pid = cloner.clone()
            except OSError as e:
                why = "cannot clone: %s" % e
                pid = None
        if pid == 0:
            ctl.close()
            ours.close()
            for s in streams:
                close_fd(s.fd)
            self._become_successor(theirs, streams, request)
            return theirs
        for s in streams:
            close_fd(s.child_fd)
        if theirs is not None:
            theirs.close()
        give = [ours.fileno()] + [s.fd for s in streams] if pid else []
        if pid and not _ready(ours):
            # Killed, and its pid sent without descriptors: the worker, its parent,
            # reaps it.
            why = "its successor did not start"
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            give = []
        payload = marshal.dumps({"pid": pid, "why": why, "expected": expected})
        data = LEN.pack(len(payload)) + payload
        try:
            n = socket.send_fds(ctl, [data], give) if give else ctl.send(data)
            if n < len(data):
                ctl.sendall(memoryview(data)[n:])
        except OSError:
            if pid:  # the worker let this spare go meanwhile: no one would use the copy
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        finally:
            if ours is not None:
                ours.close()
            for s in streams:
                close_fd(s.fd)
        return ctl

    def _become_successor(self, ctl, streams, request):
        """In the copy: what is per process in a spare's preparation, done again: its
        own session (or the worker's process group, as the spare it copies), the
        parent-death signal, its own pipes on fds 0-2, and the job's anchor of a spare that
        leads its session. sys.stdin/stdout/stderr stay: they were built on fds 0-2 as
        pipes, which these are too. A signal that reached it before it left the spare's
        session or process group (the worker may have handed the spare its session and
        signalled that group meanwhile) was meant for the spare's session: then it exits,
        and the spare answers that it has no successor."""
        c = self.config
        if self._lead.copied():  # the spare's anchor is the spare's: its own
            self._lead_session()
        elif not c.job_control:
            os.setsid()
        else:
            os.setpgid(0, c.worker_pgrp)  # the worker's group, as a spare it forks
        if _sigpending():
            os._exit(0)
        die_with_parent(c.worker_pid, 128 + signal.SIGKILL)
        for n, s in enumerate(streams):
            os.dup2(s.child_fd, n)
        for s in streams:
            if s.child_fd > 2:
                os.close(s.child_fd)
        ctl.setblocking(True)
        # Ready: out of the spare's session, so that the terminal the spare's session may
        # give it (and that terminal's hangup at the end) is not this copy's too.
        ctl.sendall(b"r")
        self._inbox = Inbox()
        c.pages.sample = bool(request.get("sample"))
        c.pages.prefaulted = False

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
        c = self.config
        data, entries = _environ_plan(env, c.env_delta, c.env_rules)
        if c.environ is not None:
            c.environ.array(entries)
        if p.poll(0):
            return
        info = SessionInfo.blank(env)
        marshal.loads(marshal.dumps({"command": "", "info": info.to_wire(), "ptys": []}))
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
        the worker the exit status; then reports what the session loaded that the zygote
        lacks (adaptive preloading, docs/ngw.md 12.5)."""
        if self._lead.leads_command():
            # The terminal hangs up once the client has the status (its master closes):
            # what follows the report must not die of that.
            sigmask(signal.SIG_BLOCK, (signal.SIGHUP,))
        try:
            _write_report(self.config.report_path, status, close_stdio=True,
                          pid=self._lead.report_pid())
        finally:
            # What the session loaded that the zygote lacks (adaptive preloading), after
            # the exit report: off the path to the session's X.
            if self.at_fork.learn is not None:
                try:
                    self.at_fork.learn.report()
                except Exception:
                    pass
            # The pages this child wrote, for the spares to pre-fault (docs/ngw.md 11.7).
            if self._command is not None and self.config.pages.enabled:
                try:
                    self.config.pages.child_report()
                except Exception:
                    pass



def _sigpending():
    try:
        from _signal import sigpending  # the C function: no enum members built
    except ImportError:  # pragma: no cover
        sigpending = signal.sigpending
    return bool(sigpending())


def _ready(sock, timeout=_SUCCESSOR_START):
    """Whether a successor said it is ready (one byte) on `sock` within `timeout`."""
    try:
        sock.settimeout(timeout)
        return sock.recv(1) == b"r"
    except OSError:
        return False
    finally:
        try:
            sock.setblocking(True)
        except OSError:
            pass


def _chdir(path, client_pid):
    """The client's directory. One that has been deleted (the client's shell is still in
    it, and a cold run would start there) is reached through the client's own
    /proc/<pid>/cwd when ngd told us the client's pid."""
    try:
        os.chdir(path)
    except OSError:
        if client_pid is None:
            raise
        try:
            os.chdir("/proc/%d/cwd" % client_pid)
        except OSError:
            pass
        else:
            return
        raise


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
        if getsignal(sig) == want:
            if want == _DFL:
                if not (caught | ignored) & bit:
                    continue
            elif want == _IGN:
                if ignored & bit and not caught & bit:
                    continue
            elif caught & bit and not ignored & bit:
                continue
        try:
            setsignal(sig, want)
        except (OSError, ValueError, RuntimeError):
            pass



#: Signals the session leader forwards to the command's process group (what a terminal
#: or ngd sends to a whole job) or, for the others, to the command's process.
_TO_GROUP = frozenset((signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTSTP,
                       signal.SIGCONT, signal.SIGWINCH))
_FORWARDED = _TO_GROUP | {signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM}
_SI_KERNEL = 0x80  # si_code of a signal the kernel sent (a terminal's hangup)


def _lead(pid, report_path):
    """The session leader of a session with a controlling terminal, once it forked the
    command's process `pid`: with every signal still blocked, it waits for the forwarded
    ones (but the terminal's own hangup) and SIGCHLD. A stop of the command is reported to the worker (a `STOP_REPORT`
    exit report, which the worker turns into `z`), and the command's end becomes the
    leader's own: the same exit code, reported, or a death by the same signal."""
    os.closerange(0, 3)
    wanted = _FORWARDED | {signal.SIGCHLD}

    def report(code):
        _write_report(report_path, code)

    try:
        while True:
            info = signal.sigwaitinfo(wanted)
            sig = info.si_signo
            if sig == signal.SIGHUP and info.si_code == _SI_KERNEL:
                # The terminal's own hangup: its master closed, which the client does after
                # the command's exit report (or the client is gone, and the worker sends
                # the hangup itself). The command may still be finishing up.
                continue
            if sig != signal.SIGCHLD:
                try:
                    if sig in _TO_GROUP:
                        os.killpg(pid, sig)
                    else:
                        os.kill(pid, sig)
                except OSError:
                    pass
                continue
            while True:
                try:
                    got, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
                except ChildProcessError:
                    os._exit(255)
                if not got:
                    break
                if os.WIFSTOPPED(status):
                    report(STOP_REPORT | os.WSTOPSIG(status))
                    continue
                if os.WIFSIGNALED(status):
                    _die_by(os.WTERMSIG(status))
                code = os.WEXITSTATUS(status)
                report(code)
                os._exit(code)
    finally:
        os._exit(255)


def _write_report(path, status, close_stdio=False, pid=None):
    """Writes the exit report (`status`) of `pid` (this process by default) to the
    worker's pipe at `path`, in one atomic write, closing fds 0-2 first when
    `close_stdio`. Without a path, or when the pipe cannot be opened, nothing: waitpid()
    will tell."""
    if path is None:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if close_stdio:
            os.closerange(0, 3)
        os.write(fd, REPORT.pack(os.getpid() if pid is None else pid, status))
    except OSError:
        pass
    finally:
        os.close(fd)


def _die_by(sig):
    """Dies of `sig` as the command did (no core of the leader's own)."""
    import resource
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError):
        pass
    if sig != signal.SIGKILL:
        setsignal(sig, _DFL)
    os.kill(os.getpid(), sig)
    sigmask(signal.SIG_UNBLOCK, (sig,))
    os._exit(128 + sig)
