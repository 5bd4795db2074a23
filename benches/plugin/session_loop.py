"""Back-to-back sessions of one trivial command through ngd, and what each costs every
process involved (a diagnosis helper for docs/benchmarks.md, not run by
benches/plugin-bench).

    python3 benches/plugin/session_loop.py [--runs 400] [--python PYTHON] [--sdk DIR]
                                           [--command py-true] [--ngd NGD] [--ng NG]

Starts an ngd of its own on a Unix socket in a temporary directory, with one worker of
benches/plugin/worker.py run by PYTHON (default: this interpreter) on the SDK in DIR
(default: sdk/python/src), warms it up with 20 sessions, then runs RUNS sessions of
COMMAND back to back, each `ng` started with posix_spawn and waited for, its output on
this process's stdout. Prints the median, p10 and p90 of the client's wall time; per
session, the page faults and CPU time (user, system) of the worker and of its children
(all of them, from the worker's cutime/cstime: session children, spares, successors),
ngd's CPU time, and the clients' CPU time; and the worker log's fork-mode counters.

Run it under the bench lock, with nothing else running, and interleave the variants you
compare (`--sdk A`, `--sdk B`, `--sdk A`, ...): the machine's speed drifts.
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WARMUP = 20


def stat(pid):
    """(utime, stime, cutime, cstime, minflt, cminflt) of `pid`, in clock ticks and
    faults, from /proc/<pid>/stat."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return [int(x) for x in fields[11:15]] + [int(fields[7]), int(fields[8])]


def children_of(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--sdk", default=os.path.join(ROOT, "sdk", "python", "src"))
    ap.add_argument("--command", default="py-true")
    ap.add_argument("--ngd", default=os.path.join(ROOT, "target", "release", "ngd"))
    ap.add_argument("--ng", default=os.path.join(ROOT, "target", "release", "ng"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ngd-session-loop-")
    sock = os.path.join(work, "ngd.sock")
    log = os.path.join(work, "worker.log")
    with open(os.path.join(work, "ngd.toml"), "w") as f:
        f.write('listen = ["local:%s"]\n\n[[plugin]]\nname = "py"\n'
                'command = ["%s", "%s"]\nenv = { PYTHONPATH = "%s" }\ncwd = "%s"\n'
                'commands = ["py-true", "py-true-inline"]\nmin_workers = 1\n'
                'max_workers = 1\nlog = "%s"\n'
                % (sock, a.python, os.path.join(HERE, "worker.py"),
                   os.pathsep.join([os.path.abspath(a.sdk), HERE]), work, log))
    ngd = subprocess.Popen([a.ngd, "serve", "--config", os.path.join(work, "ngd.toml")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(sock):
            if time.monotonic() > deadline or ngd.poll() is not None:
                sys.exit("ngd did not start")
            time.sleep(0.05)
        env = dict(os.environ, NAILGUN_SERVER="local:" + sock)
        argv = [a.ng, a.command]
        for _ in range(WARMUP):
            subprocess.run(argv, env=env, check=True)
        workers = children_of(ngd.pid)
        if len(workers) != 1:
            sys.exit("expected one worker, found %r" % workers)
        worker = workers[0]
        w0, n0, me0 = stat(worker), stat(ngd.pid), os.times()
        times = []
        for _ in range(a.runs):
            t = time.perf_counter()
            pid = os.posix_spawn(a.ng, argv, env)
            _, status = os.waitpid(pid, 0)
            times.append(time.perf_counter() - t)
            if status != 0:
                sys.exit("%s exited with status %#x" % (" ".join(argv), status))
        w1, n1, me1 = stat(worker), stat(ngd.pid), os.times()
    finally:
        ngd.send_signal(signal.SIGTERM)
        try:
            ngd.wait(10)
        except subprocess.TimeoutExpired:
            ngd.kill()
            ngd.wait()
    hz = os.sysconf("SC_CLK_TCK")
    runs = a.runs

    def ms(before, after, i):
        return (after[i] - before[i]) / hz / runs * 1000

    times.sort()
    print("%s x %d back to back (%s, SDK %s)" % (a.command, runs, a.python, a.sdk))
    print("  client wall time: median %.2f ms, p10 %.2f, p90 %.2f"
          % (statistics.median(times) * 1000, times[runs // 10] * 1000,
             times[runs * 9 // 10] * 1000))
    print("  per session: worker %.0f faults, CPU %.2f ms (user %.2f, system %.2f)"
          % ((w1[4] - w0[4]) / runs, ms(w0, w1, 0) + ms(w0, w1, 1), ms(w0, w1, 0),
             ms(w0, w1, 1)))
    print("               its children %.0f faults, CPU %.2f ms (user %.2f, system %.2f)"
          % ((w1[5] - w0[5]) / runs, ms(w0, w1, 2) + ms(w0, w1, 3), ms(w0, w1, 2),
             ms(w0, w1, 3)))
    clients = (me1.children_user - me0.children_user + me1.children_system
               - me0.children_system) / runs * 1000
    print("               ngd CPU %.2f ms, client CPU %.2f ms"
          % (ms(n0, n1, 0) + ms(n0, n1, 1), clients))
    try:
        with open(log) as f:
            counters = [line.strip() for line in f if "fork mode:" in line]
        if counters:
            print("  worker log: " + counters[-1])
    except OSError:
        pass
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
