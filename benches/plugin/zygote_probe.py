"""Where a forked child's time goes, in a zygote simulated in one process (no ngd): what a
warm run of an invocation still does that a second run in a warm process does not.

    <venv>/bin/python zygote_probe.py RUNS [--preload MODULE]... [--profile N] SCRIPT [ARGS...]

Imports the --preload modules (the worker's configured preloads), runs SCRIPT once in a
forked child and makes this process what adaptive preloading makes the zygote
(docs/ngw.md 12.5): it imports the modules that child imported and compiles the patterns
it compiled, then does what the worker does after its imports (the `importlib.metadata`
lookup, the `ngw.after_imports` functions the preloads registered); then collects and
freezes the heap. Then RUNS children forked from it run the invocation, timed inside the
child (`forked`), and RUNS more runs in this process after a first one (`warm`: L of
benches/plugin-bench). With --profile N, one more child
runs it under cProfile and the N functions with the most time of their own, and the N
with the most cumulative time, are printed (`own`, `cumulative`: milliseconds, calls).
Prints one JSON object. `NGW_PROBE_NO_METADATA=1` leaves out the worker's own
`importlib.metadata` lookup in the zygote (`ngw._adaptive.warm_metadata`), to see what
it is worth.
"""

import cProfile
import gc
import importlib
import io
import json
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "sdk", "python", "src"))
from ngw import _adaptive  # noqa: E402
from regex_probe import run_script  # noqa: E402
from limit_probe import in_child, prepare  # noqa: E402


def timed(code, script, args):
    start = time.perf_counter()
    run_script(code, script, args)
    return time.perf_counter() - start


def profiled(code, script, args, top):
    prof = cProfile.Profile()
    prof.enable()
    run_script(code, script, args)
    prof.disable()
    out = {}
    for key in ("tottime", "cumulative"):
        stats = pstats.Stats(prof, stream=io.StringIO())
        stats.sort_stats(key)
        rows = []
        for func in stats.fcn_list[:top]:
            cc, nc, tt, ct, _ = stats.stats[func]
            rows.append(["%s:%d(%s)" % (os.path.basename(func[0]), func[1], func[2]),
                         round((tt if key == "tottime" else ct) * 1000, 2), nc])
        out["own" if key == "tottime" else "cumulative"] = rows
    return out


def main():
    argv = sys.argv[1:]
    top = 0
    if "--profile" in argv:
        i = argv.index("--profile")
        top = int(argv[i + 1])
        del argv[i:i + 2]
    sys.argv[1:] = argv
    runs, script, args, code, report = prepare()
    roots = _adaptive.install_roots()
    known_modules = frozenset(sys.modules)
    known_patterns = _adaptive.cached_patterns()

    def first():
        run_script(code, script, args)
        modules = [n for n, m in list(sys.modules.items())
                   if n not in known_modules and n != "__main__"
                   and isinstance(getattr(m, "__file__", None), str)
                   and os.path.realpath(m.__file__).startswith(roots)]
        patterns = [_adaptive.encode_pattern(k) for k in _adaptive.new_patterns(known_patterns)]
        return modules, patterns

    modules, patterns = in_child(first)
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException:
            pass
    for text in patterns:
        key = _adaptive.decode_pattern(text)
        if key is not None:
            _adaptive.compile_pattern(key)
    t = time.perf_counter()
    if os.environ.get("NGW_PROBE_NO_METADATA") != "1":
        _adaptive.warm_metadata()
    _adaptive.run_after_imports(lambda msg: None)
    after_ms = (time.perf_counter() - t) * 1000
    gc.collect()
    gc.freeze()
    forked = [in_child(lambda: timed(code, script, args)) for _ in range(runs)]
    out = {"script": os.path.basename(script), "learned_modules": len(modules),
           "learned_patterns": len(patterns), "after_imports_ms": round(after_ms, 2),
           "forked_ms": round(statistics.median(forked) * 1000, 2)}
    if top:
        out.update(in_child(lambda: profiled(code, script, args, top)))
    timed(code, script, args)
    warm = [timed(code, script, args) for _ in range(runs)]
    out["warm_ms"] = round(statistics.median(warm) * 1000, 2)
    os.write(report, (json.dumps(out) + "\n").encode())


if __name__ == "__main__":
    main()
