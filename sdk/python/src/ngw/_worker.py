"""The worker: registration, the handshake, and the loop between sessions."""

import gc
import importlib
import json
import os
import platform
import sys
import threading
import time
import traceback
import warnings

from . import _adaptive, _argv, _exact, _rules, _stale, _wire, _zygotes
from ._channel import Channel, close_fds
from ._session import HeaderBuilder

PROTOCOL = 1
VERSION = "0.1.0"

#: Exit status of a worker that could not start (preload failed, nothing to serve).
EXIT_STARTUP = 78  # EX_CONFIG
#: Exit status after a protocol error or a bad spawn environment.
EXIT_PROTOCOL = 2


class Command:
    """A registered command. `cold`: the argv prefix that runs the program the cold way
    (exec'd in the child, with the session's arguments appended) when a warm run cannot
    be exact (docs/ngw.md 12.4); None for functions with no program of their own."""

    __slots__ = ("name", "fn", "fork", "argv0", "cold", "check")

    def __init__(self, name, fn, fork, argv0, cold=None, check=None):
        self.check = check  # check(info) -> why a warm run cannot be exact, or None
        self.name = name
        self.fn = fn
        self.fork = fork
        self.argv0 = argv0 if argv0 is not None else name
        self.cold = list(cold) if cold else None


#: What the worker's log lines start with ("ngw (zygote for KEY): " in a sub-zygote).
_LOG_PREFIX = ["ngw: "]


def log(message):
    """One line (or block) for the plugin's log: the worker's own stderr."""
    stream = sys.__stderr__ or sys.stderr
    if message.startswith("ngw: ") and _LOG_PREFIX[0] != "ngw: ":
        message = _LOG_PREFIX[0] + message[5:]
    try:
        stream.write(message.rstrip("\n") + "\n")
        stream.flush()
    except (OSError, ValueError, AttributeError):
        pass


class Worker:
    """A set of commands and the loop that serves them over the ngw channel."""

    def __init__(self):
        self.commands = {}  # name -> Command
        # Set by serve(), before the hello:
        self.notices = None  # _exact.Notices
        self._chan = None  # the channel to ngd
        self._conditions = None  # _exact.Conditions: the zygote's key, when sessions run cold
        self._learner = None  # _adaptive.Learner, with adaptive preloading
        self._code = None  # _stale.CodeWatch over the loaded code's files
        self._umask = 0
        self._inline = None  # _inline.InlineRunner, with in-process commands
        self._fork = None  # _fork.ForkRunner, with fork-mode commands
        self._fds = False  # sessions may bring the client's descriptors (docs/ngw.md 15.4)
        self._ctty = False  # ... and a pseudo-terminal to make the controlling terminal (15.7)
        self._zygotes = None  # _zygotes.Zygotes: the sub-zygotes for other keys
        # Another worker's sub-zygote: its sessions come as records (docs/ngw.md 12.4).
        self._sub_zygote = False
        # Between sessions:
        self._header = HeaderBuilder()  # the session header being read (_loop)
        self._idle_since = time.monotonic()
        self._retiring = None  # why this worker retires (ngd replaces it), or None
        self._restart_due = False  # modules to preload from the next start were learned
        self._after_due = False  # after_imports functions have work since the last import

    def command(self, name, *, fork=False, argv0=None, cold=None, check=None):
        """Decorator registering `fn(ctx)` as command `name`.

        fork=False: the function runs inside the worker process (fast; the context's
        streams are the only way to reach the client). fork=True: each session runs in a
        fresh child forked from the worker, with sys.argv, os.environ, cwd, umask and fds
        0-2 set up as a cold run would have them; `argv0` becomes sys.argv[0]
        (default: the command name); `cold` (fork mode): the argv prefix of the program
        the cold way, run instead when a warm run cannot be exact; `check(info)`: a
        command's own reason a session cannot run warm (None: it can)."""
        if not name or "\0" in name:
            raise ValueError("bad command name %r" % (name,))

        def register(fn):
            self.commands[name] = Command(name, fn, fork, argv0, cold, check)
            return fn

        return register

    def _program_files(self):
        """The files fork-mode commands run as `__main__` (a console script, a script),
        compiled once: a change to one is stale code, as a module's is."""
        return [c.argv0 for c in self.commands.values() if c.fork and os.path.isabs(c.argv0)]

    def add(self, name, fn, *, fork=False, argv0=None, cold=None, check=None):
        """Registers `fn` as command `name` (the decorator's non-decorator form)."""
        self.command(name, fork=fork, argv0=argv0, cold=cold, check=check)(fn)

    def serve(self, preload=(), *, kill_grace=2.0, max_chunk=_wire.DEFAULT_MAX_CHUNK,
              prefork=True, learn=True):
        """Runs the worker until ngd says quit or goes away; never returns (exits the
        process). `preload`: module names to import (or callables to call) before the
        hello; a failure is reported to ngd and the log. `kill_grace`: seconds
        between SIGHUP and SIGKILL when a fork-mode session is hung up. `prefork`: after
        each fork-mode session, fork the next session's child ahead of time (one idle
        process per worker; docs/ngw.md section 11.5). `learn`: adaptive preloading of
        what fork-mode children import (docs/ngw.md 12.5)."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("ngw: serve() must run in the main thread (it handles signals)")
        key = _zygotes.as_sub_zygote()  # another worker's zygote for that key, or None
        if key is not None:
            _LOG_PREFIX[0] = "ngw (zygote for %s): " % key
            self._sub_zygote = True
        chan = self._chan = _open_channel(max_chunk, records=key is not None)
        if key is not None:
            chan.mark = _zygotes.exit_mark()
        # As the interpreter was given it: a cold run starts from that, as this one did.
        env_before, set_by_startup = _exact.as_started(os.environ)
        self._conditions = _exact.Conditions(env_before)
        if set_by_startup and env_before.get("PYTHONCOERCECLOCALE") == "warn":
            self._conditions.refuse("PYTHONCOERCECLOCALE=warn: a cold run warns on its "
                                    "stderr that it coerced the locale")
        self._preload(preload, learn, env_before)
        if not self.commands:
            _refuse(chan, "no commands registered")
        for line in _argv.scan():
            log("ngw: a preloaded module copied argv; re-pointed in each session: %s" % line)
        offered = _exact.host_features()
        self.notices = _exact.Notices(chan, log, offered)
        self._idle_since = time.monotonic()
        self._code = _stale.CodeWatch(log)
        self._code.record(self._program_files())
        self._umask = _current_umask()
        self._start_runners(kill_grace, prefork, offered, _env_delta(env_before, os.environ))
        hello = self._hello(key, kill_grace, offered)
        # Sessions with another key than this zygote's go to a zygote for theirs.
        self._zygotes = _zygotes.Zygotes(log, self._conditions, self.notices, env_before,
                                         offered & set(hello["features"]),
                                         enabled=self._fork is not None and key is None,
                                         private_fds=getattr(self._fork, "private_fds", None))
        chan.send(_wire.HELLO, json.dumps(hello, separators=(",", ":")).encode())
        try:
            status = self._loop(chan)
        except _wire.ProtocolError as e:
            log("ngw: protocol error: %s; exiting" % e)
            status = EXIT_PROTOCOL
        except _zygotes.InDoubt as e:
            log("ngw: %s; exiting, so that ngd ends the session if it is still open" % e)
            status = 1
        finally:
            self._zygotes.shutdown()
            if self._fork is not None:
                self._fork.shutdown()
        chan.flush_all(timeout=5)
        chan.close()
        sys.exit(status)

    def _preload(self, preload, learn, env_before):
        """Imports the configured preloads, then what earlier sessions taught the learner,
        while the recorder notes what the imports read: that becomes the zygote's key."""
        conditions = self._conditions
        if learn and any(c.fork for c in self.commands.values()):
            self._learner = _adaptive.Learner(log, _adaptive.cache_path(sys.argv))
            if self._learner.report_path is None:
                self._learner = None
        shown = _capture_warnings(conditions.warnings)
        recorder = _exact.Recorder(conditions, env_before)
        recorder.start()
        for item in preload:
            try:
                if callable(item):
                    item()
                else:
                    importlib.import_module(item)
            except BaseException as e:
                detail = "".join(traceback.format_exception_only(type(e), e)).strip()
                log(traceback.format_exc())
                what = "cannot import %r" % item if not callable(item) else getattr(
                    item, "description", repr(item))
                _refuse(self._chan, "preload failed: %s: %s" % (what, detail))
        warnings.showwarning = shown
        if self._learner is not None:
            self._preload_learned()
        _adaptive.warm_metadata()
        _adaptive.run_after_imports(log)
        recorder.stop()
        conditions.exempt = set(_rules.RULES) | set(_env_delta(env_before, os.environ))
        if conditions.env_read or conditions.tty_asked:
            log("ngw: the preloaded imports read %s; asked isatty of %s: a session whose "
                "values differ runs the cold way" % (
                    ", ".join(sorted(conditions.env_read)) or "no variable",
                    sorted(conditions.tty_asked) or "no descriptor"))

    def _preload_learned(self):
        """The modules, patterns and memo keys earlier sessions taught the learner. The
        modules that read the environment (or asked isatty) at import come last: here,
        while the recorder runs, what they read becomes part of the zygote's key exactly
        as for the configured preloads (docs/ngw.md 12.4, 12.5)."""
        learner = self._learner
        modules = learner.load()
        at_start, learner.at_start = learner.at_start, []
        for name, later in [(n, False) for n in modules] + [(n, True) for n in at_start]:
            if name in learner.excluded:
                continue
            try:
                importlib.import_module(name)
                (learner.at_start if later else learner.learned).append(name)
            except BaseException as e:
                log("ngw: learned preload %s failed (%s); left to the children" % (name, e))
                learner.excluded.add(name)
        if learner.learned or learner.at_start:
            log("ngw: imported %d modules that earlier sessions imported, %d of them "
                "read the environment or asked isatty at import (%s)"
                % (len(learner.learned) + len(learner.at_start), len(learner.at_start),
                   learner.path))
        if learner.compile_patterns():
            if learner.patterns:
                log("ngw: compiled %d patterns that earlier sessions compiled"
                    % len(learner.patterns))
            if learner.memo_keys:
                log("ngw: filled %d memo keys that earlier sessions computed"
                    % len(learner.memo_keys))
        learner.patterns_done, learner.patterns_dirty = 0, False

    def _start_runners(self, kill_grace, prefork, offered, env_delta):
        """The in-process runner and the fork runner, for the commands that need them; the
        session extensions (docs/ngw.md 15.4-15.7) they take."""
        signals = "signals" in offered
        window = "stdin-window" in offered
        if any(not c.fork for c in self.commands.values()):
            from ._inline import InlineRunner

            self._inline = InlineRunner(log, signals=signals, stdin_window=window)
        if any(c.fork for c in self.commands.values()):
            from ._fork import ForkConfig, ForkRunner

            private = [self._chan.fileno()]
            if self._code.fileno() >= 0:
                private.append(self._code.fileno())
            learning = None
            if self._learner is not None:
                private.extend([self._learner.r, self._learner.w])
                learning = (self._learner.roots, self._learner.report_path)
            if self._inline is not None:
                private.extend(self._inline.private_fds())
            config = ForkConfig(env_delta=env_delta, prefork=prefork,
                                conditions=self._conditions, notices=self.notices,
                                commands={n: c for n, c in self.commands.items() if c.fork},
                                private_fds=tuple(private), held_fds=self._held_fds,
                                learning=learning, signals=signals, stdin_window=window)
            self._fork = ForkRunner(log, kill_grace, config)
            # Preloaded objects stay out of the collector: fewer copy-on-write faults.
            gc.collect()
            if hasattr(gc, "freeze"):
                gc.freeze()
        # Descriptors only where a command can take them (fork mode); a controlling
        # terminal (15.7) needs the child's own process group (`signals`).
        self._fds = "fds" in offered and self._fork is not None
        self._ctty = self._fds and signals and "ctty" in offered

    def _hello(self, key, kill_grace, offered):
        """The hello (docs/ngw.md 6): what this worker serves and the features it takes."""
        features = ["interrupt"] + (["fork"] if self._fork else []) + (
            ["notices"] if self.notices.enabled else []) + (["fds"] if self._fds else []) + (
            ["ctty"] if self._ctty else []) + (
            ["signals"] if "signals" in offered else []) + (
            ["stdin-window"] if "stdin-window" in offered else [])
        hello = {
            "protocol": PROTOCOL,
            "pid": os.getpid(),
            "commands": sorted(self.commands),
            "features": features,
            "max_chunk": self._chan.decoder.max_chunk,
            "kill_grace_ms": int(kill_grace * 1000),
            "sdk": "ngw-python/" + VERSION,
            "runtime": "%s %s" % (platform.python_implementation(), platform.python_version()),
        }
        if key is not None:
            # For the root only (it reads this hello; ngd never sees it): the key this
            # zygote ended up with, which the interpreter's start-up may have changed.
            hello[_zygotes.KEY_FIELD] = self._conditions.key()
            hello[_zygotes.RECORDS_FIELD] = True
            if self._chan.mark is not None:
                hello[_zygotes.EXIT_FIELD] = True
        return hello

    def _recv(self, chan):
        """The next chunk between sessions (None at end of stream); meanwhile reaps the
        fork runner's children as they exit, so none stays a zombie while idle."""
        runner = self._fork
        learner = self._learner
        while True:
            c = chan.next_chunk()
            if c is not None or chan.eof:
                return c
            chan.flush_some()
            timeout = None
            if learner is not None:
                learner.read_reports()
                if learner.probe is not None:
                    self._learn_collect()
                    if self._retiring is not None:
                        return None  # retired while idle: exit 0 now
                    timeout = 0.02 if learner.probe is not None else None
                if learner.queue and self._retiring is None and not chan.out and \
                        learner.probe is None:
                    idle = time.monotonic() - self._idle_since
                    if idle >= _adaptive.IDLE_BEFORE:
                        self._learn_one()
                        continue
                    timeout = _adaptive.IDLE_BEFORE - idle
                elif (learner.pattern_queue or learner.memo_queue or learner.patterns_dirty) \
                        and self._retiring is None and not chan.out and \
                        learner.probe is None and not learner.queue:
                    idle = time.monotonic() - self._idle_since
                    if idle < _adaptive.IDLE_BEFORE:
                        timeout = _adaptive.IDLE_BEFORE - idle
                    elif learner.pattern_queue or learner.memo_queue:
                        learner.compile_patterns(_adaptive.PATTERN_SLICE)
                        timeout = 0  # read what ngd sent meanwhile, then go on
                    else:
                        self._learn_patterns_finish()
                        if self._after_due:
                            timeout = 0  # the preloads' after-import work is next
                elif self._after_due and self._retiring is None and not chan.out and \
                        learner.probe is None and not learner.queue:
                    idle = time.monotonic() - self._idle_since
                    if idle < _adaptive.IDLE_BEFORE:
                        timeout = _adaptive.IDLE_BEFORE - idle
                    elif _adaptive.run_after_imports(log, _adaptive.PATTERN_SLICE):
                        timeout = 0  # read what ngd sent meanwhile, then go on
                    else:
                        self._after_imports_finish()
            if runner is not None and runner.watching():
                if chan.poll(timeout, extra=runner.wake_r.fileno()):
                    runner.reap()
            else:
                chan.poll(timeout)

    def _learn_one(self):
        """Vets what children reported in a forked probe (it imports each module with the
        checks of _learn_check and writes a verdict per module), so that the zygote never
        imports a module that misbehaves; `_learn_collect` then imports the good ones."""
        learner = self._learner
        batch = [n for n in learner.queue if n not in sys.modules]
        learner.queue = []
        if not batch or learner.probe is not None:
            learner.queue = batch
            return
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the probe: nothing of the worker's is used but its memory
            try:
                os.close(r)
                os.close(self._chan.fileno())
                close_fds(self._held_fds())  # a client's, for the next session
                for name in batch:
                    try:
                        verdict = self._learn_check(name)
                    except BaseException as e:  # noqa: B902
                        verdict = _adaptive.Verdict(_adaptive.Misbehaviour.CHECK_FAILED, str(e))
                    os.write(w, ("%s\t%s\n" % (name, verdict.encode() if verdict else ""))
                             .encode("utf-8", "surrogateescape"))
                    if verdict:
                        # What it loaded is in this probe now: later modules that need it
                        # would look innocent. They wait for the next batch (children
                        # report them again), judged without it.
                        break
            finally:
                os._exit(0)
        os.close(w)
        os.set_blocking(r, False)
        learner.probe = (pid, r, bytearray())

    def _learn_collect(self):
        """Reads the probe's verdicts; once it is done, imports the modules that behaved
        (in the zygote, checked again) while nothing arrives from ngd."""
        learner = self._learner
        pid, r, buf = learner.probe
        while True:
            try:
                data = os.read(r, 65536)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                break
            buf += data
        os.close(r)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        learner.probe = None
        started = time.monotonic()
        done = []
        for line in bytes(buf).decode("utf-8", "surrogateescape").splitlines():
            name, _, field = line.partition("\t")
            verdict = _adaptive.Verdict.decode(field)
            if verdict is not None and verdict.at_start:
                if name not in learner.at_start:
                    learner.at_start.append(name)
                    self._restart_due = True
                    log("ngw: preloading %s from the next start: %s" % (name, verdict.reason))
            elif verdict is not None:
                learner.excluded.add(name)
                log("ngw: not preloading %s: %s" % (name, verdict.reason))
            elif name not in sys.modules and self._retiring is None:
                if self._learn_import(name):
                    done.append(name)
        learner.save()
        if done:
            self._learn_finish(done, started)
        if self._restart_due and not learner.queue and self._retiring is None and \
                self.notices.enabled:
            # Modules whose import reads the environment are preloaded only at start
            # (where what they read joins the zygote's key): ngd replaces this worker
            # once its sessions are done, with one that imports them.
            self._restart_due = False
            self.notices.send("retire", "adaptive preloading: %d modules that read the "
                              "environment at import are preloaded from the next start"
                              % len(learner.at_start))

    @staticmethod
    def _learn_check(name):
        """Imports `name`; None if it behaved as a preload must, else the
        `_adaptive.Verdict` saying what it did."""
        conditions = _exact.Conditions(dict(os.environ))
        env_before = dict(os.environ)
        threads = threading.active_count()
        shown = []
        previous = warnings.showwarning
        warnings.showwarning = lambda message, *rest, **kw: shown.append(str(message))
        recorder = _exact.Recorder(conditions, env_before, streams=False)
        recorder.start()
        error = None
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: B902 - any failure leaves it to the children
            error = e
        finally:
            recorder.stop()
            warnings.showwarning = previous
        kind = _adaptive.Misbehaviour
        if error is not None:
            return _adaptive.Verdict(kind.IMPORT_FAILED, str(error))
        if shown:
            return _adaptive.Verdict(kind.WARNED, shown[0])
        if dict(os.environ) != env_before:
            return _adaptive.Verdict(kind.CHANGED_ENV)
        if threading.active_count() != threads:
            return _adaptive.Verdict(kind.STARTED_THREAD)
        if set(conditions.env_read) - set(_exact.INTERPRETER_ENV):
            return _adaptive.Verdict(kind.READ_ENV, ", ".join(sorted(conditions.env_read)))
        if conditions.tty_asked:
            return _adaptive.Verdict(kind.ASKED_TTY)
        return None

    def _learn_import(self, name):
        learner = self._learner
        verdict = self._learn_check(name)
        if verdict is not None:
            learner.excluded.add(name)
            learner.save()
            if name in sys.modules:
                self._retiring = "adaptive preload of %s misbehaved: %s" % (name,
                                                                          verdict.reason)
                self.notices.send("retire", self._retiring + "; the next worker leaves it out")
                self._conditions.refuse(self._retiring)
            else:
                log("ngw: not preloading %s: %s" % (name, verdict.reason))
            return False
        learner.learned.append(name)
        return True

    def _learn_finish(self, done, started):
        self._learner.save()
        # Preloads that fill state from what is imported (docs/ngw.md 12.5) go on from the
        # idle loop, in slices.
        self._after_due = bool(_adaptive.AFTER_IMPORTS)
        _adaptive.warm_metadata()
        for line in _argv.scan():
            log("ngw: a preloaded module copied argv; re-pointed in each session: %s" % line)
        self._code.record(self._program_files())
        gc.collect()
        if hasattr(gc, "freeze"):
            gc.freeze()
        # The spare is a copy of the zygote without the modules: the next one is forked now.
        self._fork.renew_spare(self._fork.learn.with_modules())
        log("ngw: preloaded %d modules that sessions imported (%s; %.1f ms)"
            % (len(done), ", ".join(done[:5]) + (", ..." if len(done) > 5 else ""),
               (time.monotonic() - started) * 1000))

    def _learn_patterns_finish(self):
        """After compiling learned patterns and filling memo keys: saved, frozen, in the next
        spare."""
        learner = self._learner
        done, learner.patterns_done, learner.patterns_dirty = learner.patterns_done, 0, False
        learner.save()
        if not done:
            return  # only exclusions: nothing new in the zygote
        if hasattr(gc, "freeze"):
            gc.freeze()
        # The spare is a copy of the zygote without the patterns: the next one is forked now.
        self._fork.renew_spare(self._fork.learn.with_patterns())
        log("ngw: precompiled %d patterns and memo keys that sessions computed (%d "
            "patterns, %d memo keys learned)" % (done, len(learner.patterns),
                                                 len(learner.memo_keys)))

    def _after_imports_finish(self):
        """After the after_imports functions' slices: frozen, in the next spare."""
        self._after_due = False
        if hasattr(gc, "freeze"):
            gc.freeze()
        # The spare is a copy of the zygote without what they filled in: the next one is
        # forked now.
        self._fork.renew_spare()
        log("ngw: the preloads' after-import work is done")

    def _held_fds(self):
        """The client descriptors received for a session that has not started yet: in
        the channel, or with the header being read. Children forked now close them."""
        return self._chan.held_fds() + list(self._header.fds)

    def _loop(self, chan):
        header = self._header = HeaderBuilder()
        while True:
            c = self._recv(chan)
            if c is None:
                return 0  # ngd closed the channel
            ty, payload = c
            if isinstance(c, _wire.Chunk):
                # Descriptors ride with the header's first chunk only (docs/ngw.md 15.4).
                fds = c.take_fds()
                if header.empty() and not header.fds:
                    header.fds = fds
                else:
                    close_fds(fds)
            if ty in (_wire.ARG, _wire.ENV, _wire.DIR, _wire.LONGARG):
                header.add(ty, payload)
            elif ty == _wire.CMD or (ty == _wire.RECORD and self._sub_zygote):
                if ty == _wire.CMD:
                    info = header.finish(payload, self._umask)
                elif header.empty():
                    # A session the root read, routed here and answered ngd's `t` for;
                    # with ngd's channel after the client's descriptors when its X may
                    # go there.
                    info, direct = _zygotes.from_record(payload, header.fds)
                    if direct is not None:
                        chan.take_direct(direct)
                else:
                    raise _wire.ProtocolError("a session record inside a header")
                fds, header = header.fds, HeaderBuilder()
                self._header = header
                try:
                    quit_, gone = self._session(chan, info, fds, answered=ty == _wire.RECORD)
                finally:
                    close_fds(fds)  # whatever the session did not take
                    chan.drop_direct()
                self._idle_since = time.monotonic()
                if quit_ or gone:
                    return 0
            elif ty == _wire.PING:
                chan.send(_wire.PONG, payload)
            elif ty == _wire.QUIT:
                return 0
            elif ty in (_wire.STDIN, _wire.STDIN_EOF, _wire.INTERRUPT, _wire.HEARTBEAT):
                pass  # stale answers and interrupts for a session that already ended
            else:
                log("ngw: ignoring chunk %s between sessions" % _wire.type_name(ty))

    def _session(self, chan, info, fds, answered=False):
        """Runs one session to its X. `fds`: the descriptors that came with its header; a
        fork-mode command takes them (removed from the list), anything else leaves them
        to the caller, which closes them. `answered`: a sub-zygote's session record,
        whose `t` the root sent (`info.fds` and `info.pty` say what it took)."""
        cmd = self.commands.get(info.command)
        stale = self._code.changed() if cmd is not None else None
        if stale is not None and self._retiring is None:
            # Never a session on code older than its files: this worker retires (ngd
            # starts a fresh one) and what it still runs, it runs the cold way.
            self._retiring = "the worker's code is stale (%s)" % stale
            self.notices.send("stale", "code changed on disk: %s" % stale, info.session)
            self.notices.send("retire", "stale code; the next worker loads it afresh",
                              info.session)
            self._conditions.refuse(self._retiring)
        if fds and not answered:
            self._answer_fds(chan, info, cmd, fds)
        if cmd is None:
            msg = "ngw: unknown command '%s' (this worker serves: %s)\n" % (
                info.command, ", ".join(sorted(self.commands)))
            chan.send(_wire.STDERR, msg.encode("utf-8", "surrogateescape"))
            chan.send(_wire.EXIT, b"127\n")
            return False, False
        if self._retiring is not None and (not cmd.fork or cmd.cold is None):
            msg = ("ngw: %s: %s and the command has no cold form; the worker is being "
                   "replaced: run it again\n" % (info.command, self._retiring))
            chan.send(_wire.STDERR, msg.encode("utf-8", "surrogateescape"))
            chan.send(_wire.EXIT, b"75\n")
            return True, False
        if cmd.fork:
            taken = None
            if info.fds is not None:
                taken, fds[:] = list(fds), []  # the runners own them now
            quit_, gone = self._zygotes.run(
                chan, info, cmd, lambda c, i, m: self._fork.run(c, i, m, taken), taken)
        else:
            if self._fork is not None:
                self._fork.discard_spare()
            quit_, gone = self._inline.run(chan, info, cmd)
        return quit_ or self._retiring is not None, gone

    def _answer_fds(self, chan, info, cmd, fds):
        """Chunk `t` for a session that came with descriptors, before any other of its
        chunks (docs/ngw.md 15.4): taken (empty) when a fork-mode command will run on them
        (`info.fds` is then their map), else `relay`: the descriptors are closed now and
        the session is relayed as in 7. A session with descriptors that `NGW_CLIENT_FDS`
        does not describe is answered `relay` too: ngd learns at once that it relays."""
        if not self._fds:  # ngd did not offer `fds` (or no command could take them)
            log("ngw: session %s came with %d descriptors without the fds feature; closed"
                % (info.session, len(fds)))
            close_fds(fds)
            fds[:] = []
            return
        fd_map = info.fd_map(len(fds))
        pty = None
        if fd_map is None and "NGW_CLIENT_PTY" in info.meta:
            # The client's pseudo-terminal rides last (15.7).
            fd_map = info.fd_map(len(fds) - 1)
            pty = info.pty_map(fd_map) if fd_map is not None else None
            fd_map = fd_map if pty is not None else None
        takes = (fd_map is not None and cmd is not None and cmd.fork
                 and (cmd.cold is not None or self._retiring is None))
        if takes:
            info.fds = fd_map
            answer = b""
            if pty is not None:
                slave = fds.pop()
                if self._ctty:
                    # The pseudo-terminal in place of the client's terminal; the child
                    # makes it its controlling terminal.
                    for i, n in enumerate(fd_map):
                        if n in pty:
                            os.close(fds[i])
                            fds[i] = os.dup(slave)
                    info.pty = pty
                    answer = b"ctty"
                os.close(slave)
            chan.send(_wire.TAKEN, answer)
            chan.flush_some()  # ngd holds the client's F until it has this
        else:
            if fd_map is None:
                log("ngw: session %s came with %d descriptors that NGW_CLIENT_FDS=%r does "
                    "not describe; relayed" % (info.session, len(fds),
                                               info.meta.get("NGW_CLIENT_FDS")))
            close_fds(fds)
            fds[:] = []
            chan.send(_wire.TAKEN, b"relay")
            chan.flush_some()


def _env_delta(before, after):
    """What start-up and preloading did to the environment: {name: new value, or None if
    removed}. Fork-mode children re-apply it on top of the client's environment, because a
    cold run would have made the same change as it started (CPython coerces LC_CTYPE) or
    imported (awscli sets AWS_DATA_PATH, say)."""
    delta = {k: v for k, v in after.items() if before.get(k) != v}
    delta.update((k, None) for k in before if k not in after)
    return delta


def _capture_warnings(into):
    """Records the warnings shown while preloading (they still reach the log); returns
    the previous `warnings.showwarning`, to put back afterwards."""
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        into.append(warnings.formatwarning(message, category, filename, lineno,
                                           line).strip().splitlines()[0])
        previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    return previous


def _current_umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _ensure_std_fds():
    # With 0-2 open, no pipe or pty the SDK creates can land on them.
    for fd in range(3):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)


def _open_channel(max_chunk, records=False):
    raw = os.environ.get("NGW_FD")
    version = os.environ.get("NGW_VERSION")
    if raw is None:
        log("ngw: NGW_FD is not set: this program is an ngd worker and must be started by "
            "ngd (see docs/ngw.md)")
        sys.exit(EXIT_PROTOCOL)
    if version is not None and version.strip() != str(PROTOCOL):
        log("ngw: ngd offers worker protocol %r; this SDK speaks %d" % (version, PROTOCOL))
        sys.exit(EXIT_PROTOCOL)
    try:
        fd = int(raw)
        if fd < 3:
            raise ValueError("descriptors 0-2 are the standard streams")
        _ensure_std_fds()
        chan = Channel(fd, max_chunk, records)
    except (ValueError, OSError) as e:
        log("ngw: NGW_FD=%s is not a usable channel: %s" % (raw, e))
        sys.exit(EXIT_PROTOCOL)
    for name in ("NGW_FD", "NGW_VERSION"):
        os.environ.pop(name, None)
    return chan


def _refuse(chan, reason):
    """Tells ngd (hello with an error) and the log why the worker cannot start; exits."""
    log("ngw: worker cannot start: %s" % reason)
    hello = {"protocol": PROTOCOL, "pid": os.getpid(), "error": reason}
    chan.send(_wire.HELLO, json.dumps(hello, separators=(",", ":")).encode())
    chan.flush_all(timeout=5)
    chan.close()
    sys.exit(EXIT_STARTUP)
