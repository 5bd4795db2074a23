"""Where a warm `aws` run's time goes, without ngd in the way (run by benches/plugin-bench
with the worker's interpreter; prints one JSON object).

Imports awscli as the aws worker does (awscli.clidriver and awscli.handlers, which is what
--preload ngw.programs.awscli imports) and ngw.memo.botocore, which patches botocore and
fills its memos here, in the parent, and gc.freeze()s it all as the worker does. The
patches are switched off or on before each fork (the parent's state is otherwise the same
for every mode). Then, in alternating order, measures for `aws ARGS`:

  fork+exit     fork and reap a child that exits at once: the kernel's cost of forking and
                tearing down this interpreter (page tables, then copy-on-write faults)
  main, forked  awscli.clidriver.main() in a forked child, as ngw runs it, without the
                memos (--preload ngw.programs.awscli only)
  main, memo    the same with ngw.memo.botocore's memos (examples/aws.toml's preloads)
  main, cold    main() in this process itself after import, as a cold `aws` runs it after
                its imports: no fork, so no copy-on-write faults (measured once per process,
                in fresh processes)

with the child's minor page faults, and the modules main() imports (more preloads can
only help if that is not zero).

Usage: PYTHONPATH=sdk/python/src python3 aws_probe.py RUNS ARGS...
"""

import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def cold_main(args):
    import awscli.clidriver
    import awscli.handlers  # noqa: F401

    before = set(sys.modules)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.argv = ["aws"] + args
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    try:
        awscli.clidriver.main()
    except SystemExit:
        pass
    sys.stdout.flush()
    took = time.perf_counter() - start
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    sys.stderr.write(json.dumps({"s": took, "minflt": r1.ru_minflt - r0.ru_minflt,
                                 "new_modules": len(set(sys.modules) - before)}) + "\n")


def main():
    if sys.argv[1] == "--cold":
        return cold_main(sys.argv[2:])
    runs = int(sys.argv[1])
    args = sys.argv[2:]
    import awscli.clidriver
    import awscli.handlers  # noqa: F401
    import botocore.compat
    import botocore.hooks
    import botocore.loaders

    # What ngw.memo.botocore replaces (see its _install_* functions).
    patched = [(botocore.loaders.Loader, "list_available_services"),
               (botocore.hooks.EventAliaser, "_alias_event_name"),
               (botocore.compat, "accepts_kwargs"),
               (botocore.hooks, "accepts_kwargs")]
    original = [getattr(obj, name) for obj, name in patched]
    import ngw.memo.botocore  # noqa: F401  (patches botocore and fills the memos)

    memo = [getattr(obj, name) for obj, name in patched]
    if ngw.memo.botocore.skipped or any(a is b for a, b in zip(original, memo)):
        sys.exit(f"ngw.memo.botocore did not patch everything (skipped: "
                 f"{ngw.memo.botocore.skipped}); update aws_probe.py's list")

    # As the ngw worker does before serving: preloaded objects out of the collector, so a
    # child's collections do not touch (and copy) every page they are on.
    gc.collect()
    gc.freeze()

    def use(functions):
        for (obj, name), fn in zip(patched, functions):
            setattr(obj, name, fn)

    devnull = os.open(os.devnull, os.O_WRONLY)

    def run_in_child(mode):
        r, w = os.pipe()
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.dup2(devnull, 1)
            if mode == "fork+exit":
                os._exit(0)
            before = set(sys.modules)
            sys.argv = ["aws"] + args
            t = time.perf_counter()
            try:
                awscli.clidriver.main()
            except SystemExit:
                pass
            sys.stdout.flush()
            took = time.perf_counter() - t
            os.write(w, json.dumps([took, len(set(sys.modules) - before)]).encode())
            os._exit(0)
        os.close(w)
        _, _, ru = os.wait4(pid, 0)
        total = time.perf_counter() - start
        data = os.read(r, 4096)
        os.close(r)
        took, new = json.loads(data) if data else (0.0, 0)
        return {"s": took, "total": total, "minflt": ru.ru_minflt, "new_modules": new}

    modes = ["fork+exit", "main, forked", "main, memo"]
    results = {m: [] for m in modes + ["main, cold"]}
    for i in range(runs + 1):
        for mode in (modes if i % 2 == 0 else modes[::-1]):
            use(memo if mode == "main, memo" else original)
            res = run_in_child(mode)
            if i > 0:
                results[mode].append(res)
    for i in range(max(3, runs // 3)):
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--cold"] + args,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
        results["main, cold"].append(json.loads(p.stderr.decode().strip().splitlines()[-1]))
    out = {}
    for mode, rs in results.items():
        out[mode] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        out[mode]["runs"] = len(rs)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
