"""What one fork costs a Python worker of a given size, without ngd (a diagnosis helper for
docs/benchmarks.md, not run by benches/plugin-bench).

    PYTHONPATH=sdk/python/src python3 benches/plugin/fork_probe.py            # ngw only
    PYTHONPATH=sdk/python/src python3 benches/plugin/fork_probe.py awscli.clidriver awscli.handlers

Imports ngw and the modules named, then forks RUNS (40) children and prints medians of:
fork() returning in the parent; the child's first Python statement; the child's setup as
ngw's fork mode does it (signal dispositions reset, its stdio rebuilt); and the time from
the child's _exit() to the parent's waitpid() returning (the kernel tears the address space
down before it closes the child's descriptors and signals the parent).
"""

import importlib
import os
import signal
import statistics
import sys
import time

import ngw._fork

RUNS = 40


class _Info:
    env = {}
    tty = (False, False, False)


def child_setup():
    # As ngw's ForkRunner._child_setup does, minus the session's descriptors.
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    t_signals = time.perf_counter()
    ngw._fork._rebuild_stdio(_Info)
    return t_signals


def main():
    for name in sys.argv[1:]:
        importlib.import_module(name)
    with open("/proc/self/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    devnull = os.open(os.devnull, os.O_WRONLY)
    samples = {k: [] for k in ("fork() returns", "child starts", "signal reset", "stdio rebuilt",
                               "_exit -> waitpid", "total")}
    for _ in range(RUNS + 2):
        r, w = os.pipe()
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            t1 = time.perf_counter()
            os.dup2(devnull, 1)
            t2 = child_setup()
            t3 = time.perf_counter()
            os.write(w, repr((t1, t2, t3, time.perf_counter())).encode())
            os._exit(0)
        t_ret = time.perf_counter()
        os.close(w)
        data = os.read(r, 200)
        os.waitpid(pid, 0)
        t_end = time.perf_counter()
        os.close(r)
        t1, t2, t3, t4 = eval(data)
        for k, v in (("fork() returns", t_ret - t0), ("child starts", t1 - t0),
                     ("signal reset", t2 - t1), ("stdio rebuilt", t3 - t2),
                     ("_exit -> waitpid", t_end - t4), ("total", t_end - t0)):
            samples[k].append(v)
    mods = ", ".join(sys.argv[1:]) or "ngw only"
    print(f"worker RSS {rss} KiB ({mods}); medians of {RUNS} forks:")
    for k, v in samples.items():
        print(f"  {k:<18} {statistics.median(v[2:]) * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
