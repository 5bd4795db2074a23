"""What compiling regular expressions costs a forked child, and what adaptive preloading of
`re`'s cache takes off it, without ngd: a zygote simulated in one process.

    <venv>/bin/python regex_probe.py RUNS [--preload MODULE]... SCRIPT [ARGS...]

Imports the --preload modules, runs SCRIPT once as `__main__` in a forked child (as
benches/plugin/limit_probe.py runs it) and imports the modules that child imported (what
adaptive preloading learns, docs/ngw.md 12.5), then collects and freezes the heap as the
worker does. Then, RUNS times each, in children forked from that process: the run as a
child of the zygote without learned patterns (`before`), and after the process compiled
the patterns the first child reported with `ngw._adaptive` (`after`). Each
child counts, with a wrapper around `re`'s compiler (a probe only: the SDK never wraps
it), how many patterns it compiled and the time that took, and times the whole run.
Prints one JSON object: per phase the median run, compile time and count, and the
number of patterns reported, learned, and lost to the cache's bound (compiled by the child
but evicted from `re._cache` before it exited).
"""

import builtins
import gc
import importlib
import json
import os
import re
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "sdk", "python", "src"))
from ngw import _adaptive  # noqa: E402
from limit_probe import in_child, prepare  # noqa: E402


def run_script(code, script, args):
    sys.argv[:] = [script] + args
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(__builtins__=builtins, __file__=script, __cached__=None)
    sys.modules["__main__"] = main_module
    try:
        exec(code, main_module.__dict__)
    except SystemExit:
        pass
    except BaseException:
        pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass


def measured(code, script, args, known):
    """In a child: the run, timed, with its compiles counted."""
    compiler = re._compiler if hasattr(re, "_compiler") else re.sre_compile
    real = compiler.compile
    spent = [0.0, 0]

    def counting(p, flags=0):
        t = time.perf_counter()
        try:
            return real(p, flags)
        finally:
            spent[0] += time.perf_counter() - t
            spent[1] += 1

    compiler.compile = counting
    start = time.perf_counter()
    run_script(code, script, args)
    took = time.perf_counter() - start
    compiler.compile = real
    new = _adaptive.new_patterns(known)
    return {"run": took, "compile": spent[0], "compiles": spent[1],
            "new": [_adaptive.encode_pattern(k) for k in new],
            "cache": len(re._cache)}


def main():
    runs, script, args, code, report = prepare()
    roots = _adaptive.install_roots()
    known_modules = frozenset(sys.modules)

    def learn_modules():
        run_script(code, script, args)
        return [n for n, m in list(sys.modules.items())
                if n not in known_modules and n != "__main__"
                and isinstance(getattr(m, "__file__", None), str)
                and os.path.realpath(m.__file__).startswith(roots)]

    for name in in_child(learn_modules):
        try:
            importlib.import_module(name)
        except BaseException:
            pass
    gc.collect()
    gc.freeze()
    known = _adaptive.cached_patterns()
    before = [in_child(lambda: measured(code, script, args, known))
              for _ in range(runs + 1)]
    reported = before[0]["new"]
    patterns = [_adaptive.decode_pattern(line) for line in reported]
    t = time.perf_counter()
    learned = [k for k in patterns if k is not None and _adaptive.compile_pattern(k) is None]
    learn_time = time.perf_counter() - t
    gc.freeze()
    known_after = _adaptive.cached_patterns()
    after = [in_child(lambda: measured(code, script, args, known_after))
             for _ in range(runs)]

    def summary(rows):
        return {"run_ms": round(statistics.median(r["run"] for r in rows) * 1000, 2),
                "compile_ms": round(statistics.median(r["compile"] for r in rows) * 1000, 2),
                "compiles": statistics.median(r["compiles"] for r in rows),
                "new_in_cache": statistics.median(len(r["new"]) for r in rows)}

    out = {"script": os.path.basename(script), "modules": len(sys.modules),
           "zygote_cache_before": len(known), "reported": len(reported),
           "lost_to_bound": before[0]["compiles"] - len(reported),
           "learned": len(learned), "learn_ms": round(learn_time * 1000, 2),
           "zygote_cache_after": len(known_after),
           "report_bytes": sum(len(x) + 1 for x in reported),
           "before": summary(before[1:]), "after": summary(after)}
    os.write(report, (json.dumps(out) + "\n").encode())


if __name__ == "__main__":
    main()
