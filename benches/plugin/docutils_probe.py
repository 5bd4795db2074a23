"""docutils' first run in a process, with and without ngw_contrib.docutils_memo (a
diagnosis helper for docs/benchmarks.md, not run by benches/plugin-bench).

    $NGD_PEERS_DIR/venv-fidelity/bin/python benches/plugin/docutils_probe.py [--rounds 3] DOC

Each round starts two fresh interpreters of this Python, one with the memo imported and one
without, in alternating order. Each imports what a run of `rst2html.py DOC` imports (the
modules a forked child's run added to `sys.modules`, as adaptive preloading learns them),
and compiles the patterns it compiled (its regular expressions), then times
`publish_cmdline` on DOC (output to /dev/null): in 10 children forked from it,
each running it once (a forked first run, no pre-faulting), and in itself, twice (the
first run, and the second, which finds the state machines the first made). Prints the
medians per variant.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.join(os.path.dirname(os.path.dirname(HERE)), "sdk", "python", "src")
FORKS = 10


def publish(doc):
    from docutils.core import publish_cmdline

    saved = sys.stdout, sys.argv
    sys.stdout = open(os.devnull, "w")
    sys.argv = ["rst2html.py", doc]
    start = time.perf_counter()
    try:
        publish_cmdline(writer_name="html")
    except SystemExit:
        pass
    took = time.perf_counter() - start
    sys.stdout.close()
    sys.stdout, sys.argv = saved
    return took * 1000


def in_child(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, json.dumps(fn()).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = json.loads(f.read())
    os.waitpid(pid, 0)
    return out


def one(variant, doc):
    import gc
    import importlib
    import re

    import docutils.core  # noqa: F401 - what the script imports before its run

    def learn():
        before, cached = set(sys.modules), set(re._cache)
        publish(doc)
        return (sorted(set(sys.modules) - before - {"__main__"}),
                [[k[1], k[2]] for k in set(re._cache) - cached
                 if len(k) == 3 and isinstance(k[1], str)])

    modules, patterns = in_child(learn)
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - adaptive preloading leaves these to the child
            pass
    for pattern, flags in patterns:
        re.compile(pattern, flags)
    if variant == "memo":
        sys.path.insert(0, SDK)
        import ngw_contrib.docutils_memo as memo

        assert memo.skipped is None, memo.skipped
    gc.collect()
    gc.freeze()
    forked = statistics.median(in_child(lambda: publish(doc)) for _ in range(FORKS))
    first = publish(doc)
    second = publish(doc)
    print(json.dumps([forked, first, second]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", choices=["memo", "none"], help=argparse.SUPPRESS)
    ap.add_argument("doc")
    a = ap.parse_args()
    if a.one:
        one(a.one, a.doc)
        return
    results = {"none": [], "memo": []}
    for r in range(a.rounds):
        order = ["none", "memo"] if r % 2 == 0 else ["memo", "none"]
        for variant in order:
            out = subprocess.run([sys.executable, __file__, "--one", variant, a.doc],
                                 capture_output=True, text=True, check=True).stdout
            results[variant].append(json.loads(out))
    print("| docutils_memo | first run in a forked child | first run | second run |")
    print("|---|---|---|---|")
    for variant in ("none", "memo"):
        cols = list(zip(*results[variant]))
        print("| %s | %s |" % ("with" if variant == "memo" else "without", " | ".join(
            "%.2f ms" % statistics.median(c) for c in cols)))


if __name__ == "__main__":
    main()
