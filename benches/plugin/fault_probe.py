"""What a copy-on-write page fault costs here, and how many a forked CPython child takes
before it runs anything (docs/benchmarks.md, Plugins). Not run by
benches/plugin-bench.

    python3 benches/plugin/fault_probe.py [--rounds 30]

Prints, as medians over the rounds:

* the CPU time per page for a forked child to write one byte to each of 400 pages it
  shares with its parent, one by one, and for one `madvise(MADV_POPULATE_WRITE)` over
  the same pages (Linux 5.14);
* the page faults a child has taken when `os.fork()` returns in it, for interpreters
  started with `-S` (no site configuration), `-S` with `threading`, `random` or
  `logging` imported, and with this machine's site configuration.
"""

import argparse
import ctypes
import mmap
import os
import statistics
import subprocess
import sys
import time

PAGES = 400
MADV_POPULATE_WRITE = 23

FORK_FAULTS = r"""
import gc, os, resource
gc.collect()
gc.freeze()
res = []
for _ in range(ROUNDS):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, str(resource.getrusage(resource.RUSAGE_SELF).ru_minflt).encode())
        os._exit(0)
    os.close(w)
    res.append(int(os.read(r, 64)))
    os.close(r)
    os.waitpid(pid, 0)
res.sort()
print(res[len(res) // 2])
"""


def page_costs(rounds):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    size = PAGES * mmap.PAGESIZE
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(0, size, mmap.PAGESIZE):
        m[i] = 1
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    buf = (ctypes.c_char * size).from_address(addr)
    got = {"write": [], "madvise": []}
    for _ in range(rounds):
        for how in got:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                start = time.thread_time_ns()
                if how == "write":
                    for i in range(0, size, mmap.PAGESIZE):
                        buf[i] = b"\2"
                elif libc.madvise(addr, size, MADV_POPULATE_WRITE) != 0:
                    os._exit(1)
                os.write(w, str(time.thread_time_ns() - start).encode())
                os._exit(0)
            os.close(w)
            data = os.read(r, 64)
            os.close(r)
            _, status = os.waitpid(pid, 0)
            if status == 0 and data:
                got[how].append(int(data) / PAGES / 1000)
    del buf
    return {k: statistics.median(v) if v else None for k, v in got.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    a = ap.parse_args()
    costs = page_costs(a.rounds)
    for how, us in costs.items():
        print("%-40s %s" % ("per page, " + how, "unsupported" if us is None
                            else "%.2f us" % us))
    code = FORK_FAULTS.replace("ROUNDS", str(a.rounds))
    for label, flags, pre in [("python3 -S", ["-S"], ""),
                              ("python3 -S, import threading", ["-S"], "import threading\n"),
                              ("python3 -S, import random", ["-S"], "import random\n"),
                              ("python3 -S, import logging", ["-S"], "import logging\n"),
                              ("python3 (site configuration)", [], "")]:
        out = subprocess.run([sys.executable] + flags + ["-c", pre + code],
                             capture_output=True, text=True, check=True)
        print("%-40s %s faults" % ("a child at fork's return, " + label, out.stdout.strip()))


if __name__ == "__main__":
    main()
