"""When a warm (forked) run cannot be exact, and what the worker does then.

A fork-mode child inherits what the zygote's interpreter fixed when it started and what
its imports did. A session whose client would have started the interpreter differently
runs **the cold way** instead: the child, with the session's descriptors, directory,
umask and environment already in place, `exec`s the command's own program (the console
script, the script with its interpreter), exactly what a shell would have run. The worker
says why in its log and, when ngd offers `notices` (docs/ngw.md 15.3), in a `fallback`
notice. Commands without a program of their own (functions registered with
`ngw.command(fork=True)`) have no cold form: they run warm and the log says what differs.

The reasons (`Conditions.reason`):

* an interpreter-wide setting in the client's environment differs from the zygote's
  (`INTERPRETER_ENV`: read once, when CPython starts: hash seed, warnings filters,
  `sys.path`, optimisation, dev mode, UTF-8 mode, ...). `PYTHONPATH` is compared only when
  the client sets one, and without the SDK's own directory: a worker's search path comes
  from its plugin's `env` table (where the plugin's code is), and a client that sets none
  runs the plugin as configured;
* the zygote's imports printed warnings (a cold run would print them too, and the
  zygote's warnings registry would keep a child from printing them again);
* the command's interpreter (from its script's `#!` line) is not the worker's;
* anything a preload or the SDK marks with `Conditions.refuse(reason)`.

The interpreter-wide settings and what the preload read (the variables its imports
looked up, whether they asked if fds 0-2 are terminals: `Conditions.key_reason`) are the
session's *key* (`Conditions.key`). For a key that is not the worker's, the worker starts
another zygote with that key, and later sessions with it run warm there (`_zygotes.py`).
"""

import json
import os
import sys

from . import _pyexit, _wire

#: Streams made while preloading that modules may keep (see Recorder).
_KEEP = []

#: Variables CPython reads once at start-up, so a zygote cannot honour a client's value.
INTERPRETER_ENV = (
    "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONPATH", "PYTHONOPTIMIZE", "PYTHONDEVMODE",
    "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONHOME", "PYTHONUTF8",
    "PYTHONCOERCECLOCALE", "PYTHONMALLOC", "PYTHONFAULTHANDLER", "PYTHONTRACEMALLOC",
    "PYTHONPROFILEIMPORTTIME", "PYTHONVERBOSE", "PYTHONDEBUG", "PYTHONINSPECT",
    "PYTHONINTMAXSTRDIGITS", "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX",
    "PYTHONWARNDEFAULTENCODING", "PYTHONNODEBUGRANGES", "PYTHONEXECUTABLE",
    # The locale CPython sets up at start-up (stdio and filesystem encodings, coercion).
    "LC_ALL", "LC_CTYPE", "LANG",
)
# Not among them: PYTHONDONTWRITEBYTECODE (whether imports write .pyc files: nothing a run
# shows), PYTHONUNBUFFERED and PYTHONIOENCODING (each child builds its stdio from the
# client's values), PYTHONSTARTUP (interactive only), PYTHONBREAKPOINT (read per call).

#: What CPython itself sets in its environment as it starts: LC_CTYPE, when it coerces a
#: C or POSIX locale to a UTF-8 one (PEP 538). A cold run does the same from the same
#: environment, so a session is compared with what the worker was *given*, and its child
#: gets what start-up set.
STARTUP_SETS = ("LC_CTYPE",)


def as_started(env, given=None):
    """`env` (the interpreter's environment now) as the process was given it, for the
    variables start-up sets (`STARTUP_SETS`), and what start-up set: ({name: value},
    {name: value or None}). `given`: the environment execve passed, as bytes
    (/proc/self/environ unless said); where it cannot be read, `env` as it is and {}."""
    if given is None:
        try:
            with open("/proc/self/environ", "rb") as f:
                given = f.read()
        except OSError:
            return dict(env), {}
    original = {}
    for entry in given.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq and os.fsdecode(name) in STARTUP_SETS:
            original[os.fsdecode(name)] = os.fsdecode(value)
    before, set_by_startup = dict(env), {}
    for name in STARTUP_SETS:
        if env.get(name) != original.get(name):
            set_by_startup[name] = env.get(name)
            if name in original:
                before[name] = original[name]
            else:
                before.pop(name, None)
    return before, set_by_startup


#: The directory holding the ngw package (the configuration's PYTHONPATH entry for it).
SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_path(value):
    """A PYTHONPATH value as a list of absolute entries."""
    if not value:
        return []
    return [os.path.abspath(p) for p in value.split(os.pathsep) if p]


def _python_path(value):
    """A PYTHONPATH value as the list of entries that matter (without the SDK's)."""
    return [p for p in python_path(value) if p != SDK_DIR]


class Conditions:
    """What the zygote was started with, against which sessions are checked."""

    def __init__(self, env):
        self.env = {k: env.get(k) for k in INTERPRETER_ENV}
        self.warnings = []  # warnings the zygote's imports printed
        self.refused = None  # a reason every session runs cold
        self.env_read = {}  # variables the zygote's imports read: name -> value then
        self.tty_asked = {}  # descriptors whose isatty() the imports asked: fd -> answer
        self.exempt = set()  # variables computed per session anyway (environment rules)
        # Said after a key reason for the session at hand (what the worker does about
        # the difference: a zygote it started for this key, _zygotes.py); None: nothing.
        self.note = None

    def refuse(self, reason):
        if self.refused is None:
            self.refused = reason

    def reason(self, info):
        """Why this session cannot run warm, or None."""
        reason = self.other_reason()
        if reason is not None:
            return reason
        reason = self.key_reason(info)
        if reason is not None and self.note:
            reason = "%s; %s" % (reason, self.note)
        return reason

    def other_reason(self):
        """A reason every session runs cold whatever its key (no other zygote of this
        worker's would do better), or None."""
        if self.refused is not None:
            return self.refused
        if self.warnings:
            return ("the worker's imports printed %d warning(s) that a cold run would print "
                    "(first: %s)" % (len(self.warnings), self.warnings[0]))
        return None

    def key(self, info=None):
        """What an import may have captured, as this session has it (None: as this
        zygote has it): a tuple of (kind, name, value), equal for two sessions exactly
        when `key_reason` judges them alike. The key of the zygote a session needs."""
        env = None if info is None else info.env
        parts = []
        for fd, answer in sorted(self.tty_asked.items()):
            if fd < 3:
                parts.append(("tty", fd, answer if info is None else bool(info.tty[fd])))
        for name, value in sorted(self.env_read.items()):
            if name in self.exempt or name in INTERPRETER_ENV:
                continue
            parts.append(("env", name, value if env is None else env.get(name)))
        for name in INTERPRETER_ENV:
            mine = self.env[name]
            theirs = mine if env is None else env.get(name)
            if name == "PYTHONPATH":
                # A client without one runs the plugin with the worker's (see key_reason).
                value = tuple(_python_path(theirs) or _python_path(mine))
            else:
                value = theirs or None  # empty is unset for CPython
            parts.append(("env", name, value))
        return tuple(parts)

    def key_reason(self, info):
        """Why this session's key (`key`) is not this zygote's, or None."""
        env = info.env
        for fd, answer in self.tty_asked.items():
            if fd < 3 and bool(info.tty[fd]) != answer:
                return ("the worker's imports asked whether fd %d is a terminal (%s); this "
                        "session's %s" % (fd, "it was" if answer else "it was not",
                                          "is" if info.tty[fd] else "is not"))
        for name, value in self.env_read.items():
            if name in self.exempt or name in INTERPRETER_ENV:
                continue  # computed per session, or compared below
            if env.get(name) != value:
                return "the worker's imports read %s, and this session's differs (%r, worker %r)" % (
                    name, env.get(name), value)
        for name in INTERPRETER_ENV:
            mine, theirs = self.env[name], env.get(name)
            if name == "PYTHONPATH":
                # A client without one runs the plugin as configured: the worker's entries
                # come from the plugin's own `env` table (where its code is). A client that
                # sets one asks for that search path, which the zygote must have had.
                if _python_path(theirs) and _python_path(mine) != _python_path(theirs):
                    return "PYTHONPATH differs from the worker's (%r, worker %r)" % (
                        theirs, mine)
            elif (mine or None) != (theirs or None):  # empty is unset for CPython
                return "%s differs from the worker's (%r, worker %r)" % (name, theirs, mine)
        return None


#: Variables the standard library reads on every call rather than keeping: argparse
#: builds a HelpFormatter (shutil.get_terminal_size: COLUMNS, LINES) for each argument
#: added, and gettext looks up catalogues (LANGUAGE, LC_MESSAGES) per call. Reading them
#: while importing is no sign that a module kept their value; a module that does keep
#: one (WIDTH = shutil.get_terminal_size().columns at import) is not detected.
READ_PER_CALL = frozenset(("COLUMNS", "LINES", "LANGUAGE", "LC_MESSAGES"))


class Recorder:
    """While the zygote preloads: which environment variables its imports read
    (`os.environ` lookups, `os.getenv`) and which descriptors' `isatty()` they asked
    (`os.isatty`, and `isatty()` of sys.stdin/stdout/stderr). C code that calls getenv()
    or isatty() directly is not seen."""

    def __init__(self, conditions, start_env, streams=True):
        self.conditions = conditions
        self.start_env = start_env
        self.wrap_streams = streams
        self.on = False

    def start(self):
        rec = self
        environ = os.environ
        base = type(environ)

        class RecordingEnviron(base):
            def __getitem__(self, key):
                if (rec.on and isinstance(key, str) and key not in rec.conditions.env_read
                        and key not in READ_PER_CALL):
                    rec.conditions.env_read[key] = rec.start_env.get(key)
                return base.__getitem__(self, key)

        self._base = base
        environ.__class__ = RecordingEnviron
        real_isatty = os.isatty

        def isatty(fd):
            answer = real_isatty(fd)
            if rec.on and isinstance(fd, int):
                rec.conditions.tty_asked.setdefault(fd, answer)
            return answer

        self._real_isatty = real_isatty
        os.isatty = isatty
        self._streams = []
        for fd, name in enumerate(("stdin", "stdout", "stderr") if self.wrap_streams else ()):
            stream = getattr(sys, name)
            if stream is None or type(stream) is not _io_TextIOWrapper():
                continue
            wrapped = _recording_stream(stream, fd, self)
            if wrapped is not None:
                self._streams.append((name, stream))
                _KEEP.append(wrapped)  # never collected: closing it would close the fd
                (_pyexit.also_flush_err if fd == 2 else _pyexit.also_flush).append(wrapped)
                setattr(sys, name, wrapped)
        self.on = True

    def stop(self):
        self.on = False
        os.environ.__class__ = self._base
        os.isatty = self._real_isatty
        for name, stream in self._streams:
            if getattr(sys, name) is not stream:
                setattr(sys, name, stream)
        for name in list(self.conditions.env_read):
            if name.startswith("NGW_"):
                del self.conditions.env_read[name]


def _io_TextIOWrapper():
    import io

    return io.TextIOWrapper


def _recording_stream(stream, fd, rec):
    """A TextIOWrapper on the same buffer whose isatty() is recorded (while preloading).
    It stays a working stream afterwards: modules may keep it."""
    import io

    class RecordingStream(io.TextIOWrapper):
        def isatty(self):
            answer = io.TextIOWrapper.isatty(self)
            if rec.on:
                rec.conditions.tty_asked.setdefault(fd, answer)
            return answer

    try:
        wrapped = RecordingStream(stream.buffer, encoding=stream.encoding,
                                  errors=stream.errors, newline="\n",
                                  line_buffering=stream.line_buffering,
                                  write_through=getattr(stream, "write_through", False))
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return None
    wrapped.mode = getattr(stream, "mode", "r" if fd == 0 else "w")
    return wrapped


class Notices:
    """Notices for ngd (docs/ngw.md 15.3) when the host offers them; the log always."""

    def __init__(self, chan, log, host_features):
        self.chan = chan
        self.log = log
        self.enabled = "notices" in host_features

    def send(self, kind, message, session=None):
        self.log("ngw: %s: %s%s" % (kind, message,
                                    "" if session in (None, "") else " (session %s)" % session))
        if not self.enabled or self.chan is None:
            return
        body = {"kind": kind, "message": message}
        if session not in (None, ""):
            try:
                body["session"] = int(session)
            except ValueError:
                pass
        self.chan.send(_wire.NOTICE, json.dumps(body, separators=(",", ":")).encode())


def host_features():
    """What ngd offers (NGW_HOST_FEATURES, comma-separated)."""
    return {f.strip() for f in os.environ.get("NGW_HOST_FEATURES", "").split(",") if f.strip()}


def cold_exec(argv, env, ignored=()):
    """In a child set up for its session: runs `argv` the cold way (never returns on
    success). Signal dispositions and mask become what a shell gives a program it runs:
    the defaults, except `ignored` (the client's ignored signals, NGW_SIGIGN)."""
    import signal

    for sig in (signal.SIGPIPE, signal.SIGINT, getattr(signal, "SIGXFSZ", None)):
        if sig is not None and int(sig) not in ignored:
            signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)
