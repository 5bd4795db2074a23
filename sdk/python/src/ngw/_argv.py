"""argv and process identity in fork-mode children, as a cold run has them.

Programs copy `sys.argv` at import time: `def main(args=sys.argv)` keeps the list object
itself, `def main(args=sys.argv[1:])` a slice of it, `ARGS = [os.fsencode(a) for a in
sys.argv]` a converted copy, and `argparse.ArgumentParser()` at module level takes its
`prog` from `sys.argv[0]`. In a zygote those copies would be the worker's argv forever.
The answer here, for any module:

1. While the zygote preloads, `sys.argv` is a *recognisable* list (`install`): the
   command's argv0, then one marker argument (`MARK`) no real argument can equal (it
   holds a NUL byte, which no argv can).
2. After preloading, `scan()` records where copies ended up: module globals, class
   attributes, and the defaults (`__defaults__`, `__kwdefaults__`) of every function,
   holding `sys.argv` itself, or a list or tuple equal to `sys.argv[k:]` (k = 0, 1) as str
   or as bytes (`os.fsencode`).
3. In each child, `apply(argv)` changes `sys.argv` in place (the list object the zygote
   had: so `args=sys.argv` sees the session's) and re-points every recorded copy at the
   session's argv, converted the same way; argument parsers whose `prog` came from the
   zygote's argv0 get the session's.

A copy the scan cannot see (a closure cell, an attribute of an instance, a string joined
from the arguments) keeps the marker; `scan()` returns what it found, and the worker's
log lists it.
"""

import gc
import os
import sys
import types

from . import _sys

#: The zygote's one argument while it preloads (a NUL byte: no real argument has one).
MARK = "\0ngw-zygote-argument"

_argv = None  # the list object installed as sys.argv in the zygote
_argv0 = None
_found = []  # (kind, where, key, slice start, converter name)
_parsers = []  # argparse parsers whose prog came from the zygote's argv0


def install(argv0):
    """Gives the zygote a recognisable sys.argv (before preloading)."""
    global _argv, _argv0
    _argv0 = argv0
    _argv = [argv0, MARK]
    sys.argv = _argv


def installed():
    return _argv is not None


def _match(value):
    """(slice start, converter) if `value` is a copy of the zygote's argv, else None."""
    if value is _argv:
        return 0, "same"
    if type(value) not in (list, tuple) or not 1 <= len(value) <= 2:
        return None
    for start in (0, 1):
        want = _argv[start:]
        if len(value) != len(want):
            continue
        if all(type(v) is str for v in value) and list(value) == want:
            return start, type(value).__name__
        if all(type(v) is bytes for v in value) and list(value) == [os.fsencode(w)
                                                                   for w in want]:
            return start, type(value).__name__ + "-bytes"
    return None


def _convert(argv, start, how):
    if how == "same":
        return sys.argv
    items = argv[start:]
    if how.endswith("-bytes"):
        items = [os.fsencode(a) for a in items]
    return tuple(items) if how.startswith("tuple") else list(items)


def scan():
    """Finds the copies of the zygote's argv (after preloading, and again after each
    adaptive import: objects already recorded are kept, since gc.freeze() hides them from
    gc.get_objects()); returns a description of each new one, for the log."""
    if _argv is None:
        return []
    seen = {(f[0], id(f[1]), f[2]) for f in _found}
    seen_parsers = {id(p) for p in _parsers}
    before = len(_found), len(_parsers)
    base = os.path.basename(_argv0)
    argparse = sys.modules.get("argparse")
    parser_type = argparse.ArgumentParser if argparse is not None else ()

    def _is_parser(obj):
        return parser_type and isinstance(obj, parser_type)

    for obj in gc.get_objects():
        t = type(obj)
        if t is types.FunctionType:
            defaults = obj.__defaults__
            if defaults:
                for i, d in enumerate(defaults):
                    m = _match(d)
                    if m is not None and ("defaults", id(obj), i) not in seen:
                        _found.append(("defaults", obj, i) + m)
            kw = obj.__kwdefaults__
            if kw:
                for k, d in kw.items():
                    m = _match(d)
                    if m is not None and ("kwdefaults", id(obj), k) not in seen:
                        _found.append(("kwdefaults", obj, k) + m)
        elif _is_parser(obj):
            prog = obj.prog
            if id(obj) not in seen_parsers and isinstance(prog, str) and (
                    prog == base or prog.startswith(base + " ")):
                _parsers.append(obj)
    for name, module in list(sys.modules.items()):
        d = getattr(module, "__dict__", None)
        if not isinstance(d, dict) or module is sys or name == "ngw" or name.startswith(
                "ngw."):
            continue
        for key, value in list(d.items()):
            m = _match(value)
            if m is not None and ("global", id(module), key) not in seen:
                _found.append(("global", module, key) + m)
            elif isinstance(value, type) and getattr(value, "__module__", None) == name:
                for ckey, cvalue in list(vars(value).items()):
                    m = _match(cvalue)
                    if m is not None and ("class", id(value), ckey) not in seen:
                        _found.append(("class", value, ckey) + m)
    return [describe(f) for f in _found[before[0]:]] + [
        "argparse parser with prog %r" % p.prog for p in _parsers[before[1]:]]


def describe(found):
    kind, owner, key, start, how = found
    where = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", repr(owner))
    what = "sys.argv" if how == "same" else "sys.argv[%d:] (%s)" % (start, how)
    return "%s %s[%r]: %s" % (kind, where, key, what)


def apply(argv):
    """In a child: the session's argv into sys.argv (in place) and every recorded copy."""
    if _argv is None:
        sys.argv = list(argv)
        return
    _argv[:] = argv
    sys.argv = _argv
    for kind, owner, key, start, how in _found:
        new = _convert(argv, start, how)
        if kind == "defaults":
            d = list(owner.__defaults__)
            d[key] = new
            owner.__defaults__ = tuple(d)
        elif kind == "kwdefaults":
            owner.__kwdefaults__[key] = new
        elif kind == "class":
            setattr(owner, key, new)
        else:
            owner.__dict__[key] = new
    if argv and argv[0] != _argv0:
        _repoint_parsers(os.path.basename(_argv0), os.path.basename(argv[0]))


def _repoint_parsers(old, new):
    """argparse parsers built during preloading took `prog` from the zygote's argv0."""
    for parser in _parsers:
        prog = parser.prog
        if prog == old:
            parser.prog = new
        elif isinstance(prog, str) and prog.startswith(old + " "):
            parser.prog = new + prog[len(old):]


def set_process_identity(cmdline, comm):
    """What `ps` shows: the thread name (`PR_SET_NAME`, 15 bytes) and, as far as the
    original argv area reaches, the command line (`/proc/<pid>/cmdline`): the area is
    overwritten in place (it cannot grow without CAP_SYS_RESOURCE), so a longer command
    line is cut at the area's end. Linux only; errors are ignored."""
    if not _sys.load_libc():
        return
    try:
        _sys.set_thread_name(os.fsencode(comm))
    except Exception:
        pass
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        # Fields 48 and 49 (1-based) are arg_start and arg_end; the split starts at 3.
        start, end = int(fields[45]), int(fields[46])
        if not 0 < start < end:
            return
        data = b"\0".join(os.fsencode(a) for a in cmdline) + b"\0"
        size = end - start
        data = data[:size - 1] + b"\0" if len(data) > size else data
        _sys.rewrite_cmdline(start, size, data)
    except Exception:
        pass
