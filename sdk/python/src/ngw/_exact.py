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
  `sys.path`, optimisation, dev mode, UTF-8 mode, ...). `PYTHONPATH` is compared without
  the SDK's own directory, which a configuration adds to the worker's only;
* the zygote's imports printed warnings (a cold run would print them too, and the
  zygote's warnings registry would keep a child from printing them again);
* the command's interpreter (from its script's `#!` line) is not the worker's;
* anything a preload or the SDK marks with `Conditions.refuse(reason)`.
"""

import json
import os
import sys

from . import _wire

#: Variables CPython reads once at start-up, so a zygote cannot honour a client's value.
INTERPRETER_ENV = (
    "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONPATH", "PYTHONOPTIMIZE", "PYTHONDEVMODE",
    "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONHOME", "PYTHONUTF8",
    "PYTHONCOERCECLOCALE", "PYTHONMALLOC", "PYTHONFAULTHANDLER", "PYTHONTRACEMALLOC",
    "PYTHONPROFILEIMPORTTIME", "PYTHONVERBOSE", "PYTHONDEBUG", "PYTHONINSPECT",
    "PYTHONINTMAXSTRDIGITS", "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX",
    "PYTHONWARNDEFAULTENCODING", "PYTHONNODEBUGRANGES", "PYTHONEXECUTABLE",
)
# Not among them: PYTHONDONTWRITEBYTECODE (whether imports write .pyc files: nothing a run
# shows), PYTHONUNBUFFERED and PYTHONIOENCODING (each child builds its stdio from the
# client's values), PYTHONSTARTUP (interactive only), PYTHONBREAKPOINT (read per call).

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

    def refuse(self, reason):
        if self.refused is None:
            self.refused = reason

    def reason(self, info):
        """Why this session cannot run warm, or None."""
        if self.refused is not None:
            return self.refused
        if self.warnings:
            return ("the worker's imports printed %d warning(s) that a cold run would print "
                    "(first: %s)" % (len(self.warnings), self.warnings[0]))
        env = info.env
        for name in INTERPRETER_ENV:
            mine, theirs = self.env[name], env.get(name)
            if name == "PYTHONPATH":
                if _python_path(mine) != _python_path(theirs):
                    return "PYTHONPATH differs from the worker's (%r, worker %r)" % (
                        theirs, mine)
            elif (mine or None) != (theirs or None):  # empty is unset for CPython
                return "%s differs from the worker's (%r, worker %r)" % (name, theirs, mine)
        return None


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


def cold_exec(argv, env):
    """In a child set up for its session: runs `argv` the cold way (never returns on
    success). Signal dispositions and mask become what a shell gives a program it runs."""
    import signal

    for sig in (signal.SIGPIPE, signal.SIGINT, getattr(signal, "SIGXFSZ", None)):
        if sig is not None:
            signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)
