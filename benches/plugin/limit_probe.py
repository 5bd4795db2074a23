"""L, the work itself: one invocation of a console script run several times inside one
interpreter, as benches/plugin-bench's "real work" section defines the limit.

    <venv>/bin/python limit_probe.py RUNS [--preload MODULE]... SCRIPT [ARGS...]

Imports the --preload modules (the worker's configured preloads: the aws CLI's memos are
filled in at import) and runs SCRIPT (a console script or any Python script file) as `__main__` RUNS times in this
process, each time as a cold run executes it (a fresh `__main__` module, the script's
directory first on sys.path, sys.argv = [SCRIPT, ARGS...] set before the first import, so
modules that copy argv at import see these arguments), with fds 0, 1 and 2 on /dev/null.
The first run imports everything; after it, as a zygote does after its imports, the
heap is collected and frozen (`gc.freeze()`: the collector no longer walks what the
imports made); the later runs find everything imported and cached, so their time is what
the work itself costs. Prints one JSON object on the original stdout: `runs`
(seconds per run, the flush of sys.stdout and sys.stderr included), `forked` (two more
runs, each in a child forked from this warm process, timed inside the child: the work
plus the copy-on-write page faults of a fresh fork) and `codes` (the exit status of each
run, as `sys.exit` gave it, in-process runs first) and `fresh`: null, or, when the
runs left per-run state behind, one more in-process run with it cleared; `left` names
what was cleared.

Two kinds of state left behind let the later runs do less than any fresh process:

* singletons: an application built on traitlets (IPython) keeps its application and shell
  objects as class-level singletons (`SingletonConfigurable.instance()`), so a second run
  in the same process reuses the first run's instead of building them;
* the user's own modules: a program that imports code from the directory it runs in
  (flask imports the application's `app.py` and builds the application object there)
  finds it in `sys.modules` on the second run and neither imports nor builds it again.

No cold or forked run can do either: the application's code is the user's, read afresh
by every process (a zygote shared by every directory cannot hold it). `fresh` is the run
with every such instance cleared and every module whose file lies under the working
directory removed from `sys.modules` first: the work with nothing of the earlier runs'
but the program's own imports and caches.
"""

import builtins
import gc
import importlib
import json
import os
import sys
import time
import types


def exit_code(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1  # sys.exit("message"): the message goes to stderr, the status is 1


def run_once(code, script, args):
    """Runs the compiled script once as `__main__`: (seconds, exit status)."""
    sys.argv[:] = [script] + args
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(__builtins__=builtins, __file__=script, __cached__=None)
    sys.modules["__main__"] = main_module
    start = time.perf_counter()
    status = 0
    try:
        exec(code, main_module.__dict__)
    except SystemExit as e:
        status = exit_code(e)
    except BaseException:  # what an uncaught exception does to a cold run
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
    return time.perf_counter() - start, status


def run_forked(code, script, args):
    """The same run in a child forked from this (warm) process, timed in the child from
    its first statement after fork() to the end of the run: the work plus the
    copy-on-write faults a fresh fork takes doing it. (seconds, exit status)."""
    took, status = in_child(lambda: run_once(code, script, args))
    return took, status


def in_child(fn):
    """Runs fn() in a child forked from this process; returns what it returned, through
    JSON."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def clear_singletons():
    """Clears the instance of every traitlets `SingletonConfigurable` class that has one;
    returns how many it cleared (0 without traitlets)."""
    configurable = sys.modules.get("traitlets.config.configurable")
    if configurable is None:
        return 0
    cleared = 0
    classes = [configurable.SingletonConfigurable]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        if cls.__dict__.get("_instance") is not None:
            cls._instance = None
            cleared += 1
    return cleared


def user_modules(before, cwd):
    """Names of the modules imported since `before` (a set of names) whose file lies under
    the directory `cwd`: the user's code that the runs imported."""
    root = os.path.join(os.path.realpath(cwd), "")
    names = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name in before or name == "__main__" or not isinstance(path, str):
            continue
        if os.path.realpath(path).startswith(root):
            names.append(name)
    return sorted(names)


def prepare():
    """Reads `RUNS [--preload MODULE]... SCRIPT ARGS...` from the command line, puts fds
    0-2 on /dev/null, sets sys.path[0] and sys.argv as the script's own run has them and
    imports the preloads. Returns (runs, script, args, compiled code, the report fd)."""
    runs = int(sys.argv[1])
    rest = sys.argv[2:]
    preloads = []
    while len(rest) > 2 and rest[0] == "--preload":
        preloads.append(rest[1])
        rest = rest[2:]
    script = os.path.abspath(rest[0])
    args = rest[1:]
    with open(script, "rb") as f:
        code = compile(f.read(), script, "exec", dont_inherit=True)
    report = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    sys.argv = [script] + args
    for module in preloads:
        importlib.import_module(module)
    return runs, script, args, code, report


def main():
    runs, script, args, code, report = prepare()
    before = set(sys.modules)
    times, codes = [], []
    for i in range(runs):
        if i == 1:
            gc.collect()
            gc.freeze()
        took, status = run_once(code, script, args)
        times.append(took)
        codes.append(status)
    forked = []
    for _ in range(2):
        took, status = run_forked(code, script, args)
        forked.append(took)
        codes.append(status)
    fresh, left = None, []
    singletons = clear_singletons()
    if singletons:
        left.append("%d singletons" % singletons)
    mine = user_modules(before, os.getcwd())
    for name in mine:
        del sys.modules[name]
    if mine:
        left.append("modules " + ", ".join(mine))
    if left:
        fresh, status = run_once(code, script, args)
        codes.append(status)
    os.write(report, (json.dumps({"runs": times, "forked": forked, "codes": codes,
                                  "fresh": fresh, "left": left})
                      + "\n").encode())


if __name__ == "__main__":
    main()
