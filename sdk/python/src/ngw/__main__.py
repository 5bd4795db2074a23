"""python3 -m ngw: serve existing programs as warm fork-mode commands.

    python3 -m ngw entrypoint aws=awscli.clidriver:main --preload awscli.clidriver
    python3 -m ngw script aws=/usr/local/bin/aws --preload awscli.clidriver
"""

import argparse
import ast
import builtins
import functools
import importlib
import importlib.machinery
import os
import shutil
import sys
import types
import warnings

from . import Worker, _argv, _exact, _sys
from ._worker import VERSION

_sys.load_libc()  # here, in the zygote: not in each session's child


def shebang(path):
    """The interpreter argv of a script's `#!` line ([] if it has none): what the kernel
    runs the script with, before the script's path and its arguments."""
    try:
        with open(path, "rb") as f:
            first = f.readline(4096)
    except OSError:
        return []
    if not first.startswith(b"#!"):
        return []
    words = os.fsdecode(first[2:].strip()).split(None, 1)
    return words  # the kernel passes the rest of the line as one argument


def interpreter_of(words):
    """(the interpreter's path as a cold run's sys.executable has it, sys.orig_argv's
    prefix) for a `#!` line's words; (None, words) when it names no Python."""
    if not words:
        return None, []
    prog = words[0]
    if os.path.basename(prog) == "env" and len(words) > 1:
        # `#!/usr/bin/env python3`: env runs `python3` from PATH: orig_argv[0] is the bare
        # name and sys.executable the path found.
        rest = words[1].split()
        found = shutil.which(rest[0]) if rest else None
        return (os.path.abspath(found) if found else None), rest
    return prog, words


def _venv(bindir):
    """The virtual environment a bin directory belongs to (its pyvenv.cfg), or None."""
    cfg = os.path.join(os.path.dirname(bindir), "pyvenv.cfg")
    return cfg if os.path.exists(cfg) else None


class Program:
    """What a fork-mode command runs: a Python file executed as `__main__` (a console
    script or any script), compiled in the zygote, in a fresh `__main__` module, with
    sys.orig_argv, sys.executable, the process name and command line a cold run of that
    file has. No runner or runpy frame is left in a traceback."""

    def __init__(self, name, path, source=None):
        self.name = name
        self.path = path
        self.source = source  # None: read from `path`
        self.code = None
        self.replay = []  # warnings the program's own imports print (preimport)
        self.interp_hint = None
        self.interp = None
        self.interp_argv = []
        self.description = "program %s=%s" % (name, path)

    def __call__(self):  # startup: compile, so a bad file fails before the hello
        if self.source is None:
            with open(self.path, "rb") as f:
                self.source = f.read()
        self.code = compile(self.source, self.path, "exec", dont_inherit=True)
        self.interp, self.interp_argv = interpreter_of(shebang(self.path))
        self.preimport()

    def preimport(self):
        """Runs the program's leading import statements in the zygote as a cold run runs
        them: in a module named `__main__`, from the program's file. Warnings they emit
        (DeprecationWarning is shown by default when `__main__` triggers it) are kept
        and written to each child's stderr right before the program runs, where a cold
        run writes them: the imports are the program's first statements."""
        tree = ast.parse(self.source, self.path)
        body = []
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                body.append(node)
            elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
                break
        code = compile(ast.Module(body=body, type_ignores=[]), self.path, "exec",
                       dont_inherit=True)
        shown = []

        def record(message, category, filename, lineno, file=None, line=None):
            shown.append(warnings.formatwarning(message, category, filename, lineno, line))

        previous, warnings.showwarning = warnings.showwarning, record
        try:
            exec(code, {"__name__": "__main__", "__file__": self.path,
                        "__builtins__": builtins})
        finally:
            warnings.showwarning = previous
        self.replay = shown

    def check(self, info):
        """Why a warm run of this program cannot be exact whatever the session (its
        interpreter is not the worker's, or runs with options), or None."""
        if self.interp is None:
            return None
        if len(self.interp_argv) > 1:
            return "%s's #! line gives the interpreter options (%s)" % (
                self.path, " ".join(self.interp_argv[1:]))
        mine = os.path.realpath(os.path.dirname(os.path.abspath(sys.executable)))
        theirs = os.path.realpath(os.path.dirname(os.path.abspath(self.interp)))
        same = mine == theirs or (
            os.path.realpath(self.interp) == os.path.realpath(sys.executable)
            and _venv(mine) == _venv(theirs))
        if not same:
            return "%s runs with %s, not the worker's interpreter %s" % (
                self.path, self.interp, sys.executable)
        return None

    def cold(self):
        """The argv prefix that runs this program the cold way."""
        if os.access(self.path, os.X_OK) and shebang(self.path):
            return [self.path]
        return [sys.executable, self.path]

    def run(self, ctx):
        if self.interp_argv:
            sys.orig_argv = self.interp_argv + sys.argv
        else:
            sys.orig_argv = [sys.executable] + sys.argv
        if self.interp is not None:
            sys.executable = self.interp
        _argv.set_process_identity(sys.orig_argv, os.path.basename(self.path))
        # The SDK's directory is on the worker's sys.path (its PYTHONPATH) only.
        if _exact.SDK_DIR not in _exact.python_path(ctx.env.get("PYTHONPATH")):
            sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _exact.SDK_DIR]
        main = types.ModuleType("__main__")
        d = main.__dict__
        d.update(__builtins__=builtins, __cached__=None,
                 __loader__=importlib.machinery.SourceFileLoader("__main__", self.path))
        if os.path.isfile(self.path):
            d["__file__"] = self.path
        sys.modules["__main__"] = main
        for text in self.replay:
            sys.stderr.write(text)
        exec(self.code, d)


#: pip's console-script template (distlib's), which a cold run of an entry point executes.
_TEMPLATE = """# -*- coding: utf-8 -*-
import re
import sys
from %(module)s import %(import_name)s
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(%(func)s())
"""


class EntryPoint(Program):
    """`module:attr` as in a console_scripts entry. The child runs the console script that
    pip generated for it (the file a shell finds for NAME) when it is one for this entry
    point, else the same code as pip's template, compiled under that path."""

    def __init__(self, name, target, argv0):
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise ValueError("%s=%s: expected NAME=MODULE:FUNCTION" % (name, target))
        super().__init__(name, argv0)
        self.module = module
        self.attr = attr
        self.description = "entry point %s=%s" % (name, target)

    def __call__(self):
        # The console script's own imports run first, as __main__ (preimport): importing
        # the module from here first would attribute its import-time warnings to this
        # runner, and a cold run would print what they print.
        import_name = self.attr.split(".")[0]
        line = ("from %s import %s" % (self.module, import_name)).encode()
        try:
            with open(self.path, "rb") as f:
                text = f.read()
        except OSError:
            text = b""
        if text.startswith(b"#!") and line in text:
            self.source = text
            Program.__call__(self)
        else:
            template = _TEMPLATE % {"module": self.module, "import_name": import_name,
                                    "func": self.attr}
            self.source = ("#!%s\n" % sys.executable).encode() + template.encode()
            self.code = compile(self.source, self.path, "exec", dont_inherit=True)
            self.interp, self.interp_argv = sys.executable, [sys.executable]
            self.preimport()
        obj = importlib.import_module(self.module)
        func = functools.reduce(getattr, self.attr.split("."), obj)
        if not callable(func):
            raise TypeError("%s:%s is not callable" % (self.module, self.attr))

    def cold(self):
        if os.path.isfile(self.path) and os.access(self.path, os.X_OK):
            return [self.path]
        code = "import sys; from %s import %s; sys.exit(%s())" % (
            self.module, self.attr.split(".")[0], self.attr)
        return [sys.executable, "-c", code]


class Script(Program):
    """A Python script file, run in the child as `python3 PATH args...` would run it."""

    def __init__(self, name, path):
        super().__init__(name, os.path.abspath(path))
        self.description = "script %s=%s" % (name, path)


def default_argv0(name):
    """Where a shell would find `name`: the interpreter's own bin directory first (where
    pip installs console scripts), then PATH. Falls back to the bare name."""
    path = os.pathsep.join(
        p for p in (os.path.dirname(sys.executable), os.environ.get("PATH", "")) if p)
    found = shutil.which(name, path=path)
    return os.path.abspath(found) if found else name


def find_script(name):
    """The console script a shell runs for `name` (a path is taken as it is): PATH first,
    then the interpreter's own bin directory."""
    if os.sep in name:
        return os.path.abspath(name)
    found = shutil.which(name)
    if found is None:
        found = shutil.which(name, path=os.path.dirname(sys.executable))
    if found is None:
        raise SystemExit("python3 -m ngw: console script %r not found on PATH" % name)
    return os.path.abspath(found)


def console_script(spec):
    """An EntryPoint (the installed distribution's console_scripts entry whose script this
    is) or, for a script that is not a generated entry point (aws, rst2html.py), a Script.
    Its `interp_hint` is the interpreter of the script's #! line."""
    path = find_script(spec)
    name = os.path.basename(path)
    interp, _ = interpreter_of(shebang(path))
    if interp is None:
        raise SystemExit("python3 -m ngw: %s has no #! line naming an interpreter" % path)
    program = None
    if _same_interpreter(interp):
        import importlib.metadata as md

        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            raise SystemExit("python3 -m ngw: cannot read %s: %s" % (path, e))
        for ep in md.entry_points(group="console_scripts", name=name):
            module, _, attr = ep.value.partition(":")
            attr = attr.split("[")[0].strip()
            if ("from %s import %s" % (module.strip(), attr.split(".")[0])).encode() in text:
                program = EntryPoint(name, "%s:%s" % (module.strip(), attr), path)
                break
    if program is None:
        program = Script(name, path)
    program.interp_hint = interp
    return program


def _same_interpreter(interp):
    mine = os.path.realpath(os.path.dirname(os.path.abspath(sys.executable)))
    theirs = os.path.realpath(os.path.dirname(os.path.abspath(interp)))
    return mine == theirs or (os.path.realpath(interp) == os.path.realpath(sys.executable)
                              and _venv(mine) == _venv(theirs))


def _reexec_under(interp):
    """Runs this runner again under the script's interpreter when it is not this one (the
    channel descriptor is still inheritable here); the SDK's directory goes on its
    PYTHONPATH if it is not installed there."""
    if interp is None or _same_interpreter(interp):
        return
    env = dict(os.environ)
    paths = _exact.python_path(env.get("PYTHONPATH"))
    if _exact.SDK_DIR not in paths:
        env["PYTHONPATH"] = os.pathsep.join([_exact.SDK_DIR] + paths)
    sys.stderr.write("ngw: running under %s, the console script's interpreter\n" % interp)
    sys.stderr.flush()
    os.execve(interp, [interp, "-m", "ngw"] + sys.argv[1:], env)


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
    cs = sub.add_parser("console-script", parents=[common],
                        help="serve installed console scripts by name (or path): the entry "
                             "point from the installed distribution's metadata, the "
                             "interpreter from the script's #! line")
    cs.add_argument("targets", nargs="+", metavar="NAME")
    args = parser.parse_args(argv)

    if args.mode == "console-script":
        programs = [console_script(t) for t in args.targets]
        _reexec_under(programs[0].interp_hint)
        serve(Worker(), programs, args)
        return
    argv0 = dict(args.argv0)
    worker = Worker()
    programs = []
    for name, target in args.targets:
        try:
            if args.mode == "entrypoint":
                t = EntryPoint(name, target, argv0.get(name) or default_argv0(name))
            else:
                t = Script(name, target)
                t.path = argv0.get(name, t.path)
        except ValueError as e:
            parser.error(str(e))
        programs.append(t)
    serve(worker, programs, args)


def serve(worker, programs, args):
    """Serves `programs` (Program objects) with the runner's options; never returns."""
    first = programs[0]
    # The zygote looks like the first program's cold run while it imports: argv (with a
    # marker argument, so copies of it can be found, ngw._argv) and sys.path[0], the
    # script's directory, which a cold run searches first.
    _argv.install(first.path)
    if os.path.isabs(first.path):
        sys.path[0] = os.path.dirname(os.path.realpath(first.path))
    startup = []
    for t in programs:
        startup.append(t)
        worker.add(t.name, t.run, fork=True, argv0=t.path, cold=t.cold(), check=t.check)
    startup = startup + list(args.preload)
    worker.serve(startup, kill_grace=args.kill_grace, prefork=args.prefork)


if __name__ == "__main__":
    main()
