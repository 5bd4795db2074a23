"""The trivial Python commands benches/plugin-bench times through ngd (an ngw worker).

    python3 benches/plugin/worker.py      (with sdk/python/src on PYTHONPATH)

  py-true        fork mode: a child forked per session that exits 0 at once
  py-true-inline in-process: returns 0 in the worker itself
  py-cat         fork mode: copies fd 0 to fd 1 with os.read/os.write
  py-cat-inline  in-process: copies ctx.stdin to ctx.stdout
  py-env         fork mode: prints what the child sees (argv, cwd, umask, environment) as
                 JSON (describe.py), for the bench's check that a command gets the
                 client's context

The worker preloads nothing (only the SDK and the standard library modules it uses), so
py-true is the floor of a fork-mode command: the client, ngd, the relay and a fork of a
small interpreter.
"""

import json
import os
import sys

import ngw
from describe import describe

CHUNK = 1 << 16


@ngw.command("py-true", fork=True)
def py_true(ctx):
    return 0


@ngw.command("py-true-inline")
def py_true_inline(ctx):
    return 0


@ngw.command("py-cat", fork=True)
def py_cat(ctx):
    while True:
        data = os.read(0, CHUNK)
        if not data:
            return 0
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]


@ngw.command("py-cat-inline")
def py_cat_inline(ctx):
    while True:
        data = ctx.stdin.read(CHUNK)
        if not data:
            return 0
        ctx.stdout.write(data)


@ngw.command("py-env", fork=True)
def py_env(ctx):
    sys.stdout.write(json.dumps(describe()) + "\n")


if __name__ == "__main__":
    ngw.serve()
