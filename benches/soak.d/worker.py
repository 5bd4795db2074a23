"""The ngw worker of the soak (benches/soak, tests/e2e/soak.rs): one command in each mode.

    python3 benches/soak.d/worker.py      (with sdk/python/src on PYTHONPATH)

Both commands take `ID CODE`, read their stdin to the end, and answer with output that
depends on every input, so the soak can check each invocation byte for byte:

    stdout  b"<mode> <ID> <len(stdin)>\\n" + stdin
    stderr  b"<mode> <ID>\\n"
    exit    int(CODE)

  soak-inline  in-process: runs in the worker itself (ctx.stdin, ctx.stdout, ctx.stderr)
  soak-fork    fork mode: runs in a child forked per session (fds 0, 1, 2; sys.exit)

<mode> is `inline` or `fork`. A client that is killed mid-session interrupts the command:
in-process, ngw.Interrupted escapes (the SDK ends the session); fork mode, the child gets
SIGHUP and dies of it. Neither needs code here.
"""

import os
import sys

import ngw

CHUNK = 1 << 16


@ngw.command("soak-inline")
def soak_inline(ctx):
    ident, code = ctx.args[0], int(ctx.args[1])
    parts = []
    while True:
        data = ctx.stdin.read1(CHUNK)
        if not data:
            break
        parts.append(data)
    data = b"".join(parts)
    ctx.stdout.write(b"inline %s %d\n" % (ident.encode(), len(data)) + data)
    ctx.stderr.write(b"inline %s\n" % ident.encode())
    return code


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@ngw.command("soak-fork", fork=True)
def soak_fork(ctx):
    ident, code = sys.argv[1], int(sys.argv[2])
    parts = []
    while True:
        data = os.read(0, CHUNK)
        if not data:
            break
        parts.append(data)
    data = b"".join(parts)
    _write_all(1, b"fork %s %d\n" % (ident.encode(), len(data)) + data)
    _write_all(2, b"fork %s\n" % ident.encode())
    sys.exit(code)


if __name__ == "__main__":
    ngw.serve()
