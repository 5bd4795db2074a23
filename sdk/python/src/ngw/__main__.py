"""python3 -m ngw: serve existing programs as warm fork-mode commands.

    python3 -m ngw entrypoint aws=awscli.clidriver:main --preload awscli.clidriver
    python3 -m ngw script aws=/usr/local/bin/aws --preload awscli.clidriver
"""

import argparse
import builtins
import functools
import importlib
import os
import runpy
import shutil
import sys
import types

from . import Worker
from ._worker import VERSION


class EntryPoint:
    """`module:attr` as in a console_scripts entry: the child runs sys.exit(attr())."""

    def __init__(self, name, target):
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise ValueError("%s=%s: expected NAME=MODULE:FUNCTION" % (name, target))
        self.name = name
        self.module = module
        self.attr = attr
        self.func = None
        self.description = "entry point %s=%s" % (name, target)

    def __call__(self):  # startup: import and resolve, so a bad target fails before hello
        obj = importlib.import_module(self.module)
        self.func = functools.reduce(getattr, self.attr.split("."), obj)
        if not callable(self.func):
            raise TypeError("%s:%s is not callable" % (self.module, self.attr))

    def run(self, ctx):
        # A cold run's __main__ is the console script, not this runner: give the child a
        # fresh one (multiprocessing's spawn and pickling of __main__ objects look at it).
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        if os.path.isfile(sys.argv[0]):
            main.__file__ = sys.argv[0]
        sys.modules["__main__"] = main
        return self.func()


class Script:
    """A Python script file, run in the child as `python3 PATH args...` would run it."""

    def __init__(self, name, path):
        self.name = name
        self.path = os.path.abspath(path)
        self.description = "script %s=%s" % (name, path)

    def __call__(self):
        with open(self.path, "rb"):
            pass

    def run(self, ctx):
        runpy.run_path(self.path, run_name="__main__")


def default_argv0(name):
    """Where a shell would find `name`: the interpreter's own bin directory first (where
    pip installs console scripts), then PATH. Falls back to the bare name."""
    path = os.pathsep.join(
        p for p in (os.path.dirname(sys.executable), os.environ.get("PATH", "")) if p)
    found = shutil.which(name, path=path)
    return os.path.abspath(found) if found else name


def _pair(text, what):
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError("%s: expected NAME=%s" % (text, what))
    return name, value


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m ngw",
        description="Serve existing Python programs as warm ngd commands (fork mode).")
    parser.add_argument("--version", action="version", version="ngw-python " + VERSION)
    sub = parser.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--preload", action="append", default=[], metavar="MODULE",
                        help="import MODULE once in the worker before serving (repeatable)")
    common.add_argument("--argv0", action="append", default=[], metavar="NAME=PATH",
                        type=lambda t: _pair(t, "PATH"),
                        help="sys.argv[0] for command NAME (default: NAME found next to "
                             "the interpreter or on PATH, as a shell would run it)")
    common.add_argument("--kill-grace", type=float, default=2.0, metavar="SECONDS",
                        help="after a hangup: SIGHUP, then SIGKILL this much later")
    common.add_argument("--no-prefork", dest="prefork", action="store_false",
                        help="fork each session's child when the session starts, instead of "
                             "keeping one forked ahead of time (one idle process per worker)")
    ep = sub.add_parser("entrypoint", parents=[common],
                        help="serve console-script entry points NAME=MODULE:FUNCTION")
    ep.add_argument("targets", nargs="+", metavar="NAME=MODULE:FUNCTION",
                    type=lambda t: _pair(t, "MODULE:FUNCTION"))
    sc = sub.add_parser("script", parents=[common],
                        help="serve Python script files NAME=PATH")
    sc.add_argument("targets", nargs="+", metavar="NAME=PATH",
                    type=lambda t: _pair(t, "PATH"))
    args = parser.parse_args(argv)

    argv0 = dict(args.argv0)
    worker = Worker()
    startup = list(args.preload)
    for name, target in args.targets:
        try:
            t = EntryPoint(name, target) if args.mode == "entrypoint" else Script(name, target)
        except ValueError as e:
            parser.error(str(e))
        if args.mode == "script":
            default = t.path
        else:
            default = default_argv0(name)
        worker.add(name, t.run, fork=True, argv0=argv0.get(name, default))
        startup.append(t)
    worker.serve(startup, kill_grace=args.kill_grace, prefork=args.prefork)


if __name__ == "__main__":
    main()
