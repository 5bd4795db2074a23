"""What each memory mapping costs a fork and an exit (a diagnosis helper for
docs/benchmarks.md, not run by benches/plugin-bench).

    python3 benches/plugin/mappings_probe.py              # 0, 20 and 45 extension modules
    python3 benches/plugin/mappings_probe.py 0 10 30

For each count N, a fresh interpreter imports the first N extension modules of a fixed
list that this Python has (each shared object brings about five mappings and its own
relocated data), then forks RUNS (400) children that `_exit(0)` at once, waiting for each,
and prints its mappings and, per fork, the wall time and the CPU of parent and child
(`getrusage`). Each count runs in its own interpreter, twice, interleaved.
"""

import os
import resource
import subprocess
import sys
import time

RUNS = 400
MODULES = [
    "_lzma", "_bz2", "zlib", "_hashlib", "_blake2", "_sha512", "_random", "binascii",
    "array", "mmap", "_json", "_ctypes", "_posixsubprocess", "_struct", "_socket",
    "select", "math", "fcntl", "termios", "_bisect", "_typing", "_decimal", "_sqlite3",
    "_ssl", "_elementtree", "pyexpat", "_csv", "_pickle", "_datetime", "_heapq",
    "unicodedata", "_statistics", "_queue", "_asyncio", "_multiprocessing", "_uuid",
    "readline", "_curses", "_opcode", "_contextvars", "_md5", "_sha1", "_sha256", "_sha3",
    "cmath", "grp", "resource", "syslog", "_zoneinfo", "_lsprof",
]


def probe(count):
    loaded = 0
    for name in MODULES:
        if loaded >= count:
            break
        try:
            __import__(name)
        except ImportError:
            continue
        loaded += 1
    with open("/proc/self/maps", "rb") as f:
        mappings = sum(1 for _ in f)
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    for _ in range(RUNS):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    wall = time.perf_counter() - start
    self1 = resource.getrusage(resource.RUSAGE_SELF)
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)

    def cpu(a, b):
        return (b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime) / RUNS * 1000

    print("| %2d | %3d | %.3f ms | %.3f ms | %.3f ms |" % (
        loaded, mappings, wall / RUNS * 1000, cpu(self0, self1), cpu(kids0, kids1)),
        flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        probe(int(sys.argv[2]))
        return
    counts = [int(a) for a in sys.argv[1:]] or [0, 20, 45]
    print("| extension modules | mappings | fork + exit + wait | parent CPU | child CPU |")
    print("|---|---|---|---|---|")
    for _ in range(2):
        for n in counts:
            subprocess.run([sys.executable, os.path.abspath(__file__), "--one", str(n)],
                           check=True)


if __name__ == "__main__":
    main()
