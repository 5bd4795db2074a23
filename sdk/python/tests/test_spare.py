"""Fork mode's spare, the next session's child forked ahead of time, and the exit report
that lets X go before the kernel has torn a child down (docs/ngw.md 11.1, 11.5): when the
spare is forked (after the reap; during the session when sessions come back to back and
the command's last session was short, else at X), and that it is the same as a child
forked at session time."""

import json
import os
import signal
import sys
import time
import unittest

import driver
from support import BASIC, client_env

# What a session child reports that differs between any two children.
PER_PROCESS = ("pid", "ppid", "pgid", "sid")

# basic.py with two more commands: `mark` (in-process) changes the worker, `fmark`
# (fork mode) shows what its child sees of that change, and its pid. With
# TEST_BACK_TO_BACK=1 every session counts as back to back (docs/ngw.md 11.5), so that a
# test need not race the 5 ms that tell them apart.
TIMING_WORKER = """
import builtins, json, os, runpy, sys
import ngw
from ngw._fork import parent
if os.environ.get("TEST_BACK_TO_BACK") == "1":
    parent._BACK_TO_BACK = float("inf")
builtins._spare_test_mark = None

@ngw.command("mark")
def mark(ctx):
    builtins._spare_test_mark = ctx.args[0]

@ngw.command("fmark", fork=True)
def fmark(ctx):
    print(json.dumps({"mark": builtins._spare_test_mark, "pid": os.getpid()}))

runpy.run_path(sys.argv[1], run_name="__main__")
"""


def proc_state(pid):
    """(state, session id, parent pid), or None once the process is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return rest[0], int(rest[3]), int(rest[1])


def wait_for(predicate, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.01)


def dead(pid):
    st = proc_state(pid)
    return st is None or st[0] == "Z"


def fd_links(pid):
    """{fd: what /proc/<pid>/fd/<fd> points to}."""
    return {int(fd): os.readlink("/proc/%d/fd/%s" % (pid, fd))
            for fd in os.listdir("/proc/%d/fd" % pid)}


class Spare(unittest.TestCase):
    env_extra = {}

    def setUp(self):
        self.w = driver.Worker([sys.executable, BASIC], env=driver.worker_env(self.env_extra))
        self.w.hello()
        self.env = client_env()

    def tearDown(self):
        self.w.stop()

    def children(self):
        """The worker's children that are not zombies."""
        return [pid for pid, state in driver.worker_pids_children(self.w.proc.pid)
                if state != "Z"]

    def the_spare(self):
        """Waits until the worker's only child is one sleeping process; returns its pid."""
        def one():
            kids = driver.worker_pids_children(self.w.proc.pid)
            return len(kids) == 1 and kids[0][1] == "S" and kids[0][0]
        return wait_for(one, what="exactly one sleeping child (the spare)")

    def finfo(self, **kw):
        kw.setdefault("env", self.env)
        r = self.w.run("finfo", **kw)
        self.assertEqual(r.code, 0, r)
        return json.loads(bytes(r.stdout).split(b"\n", 1)[0])

    def test_forked_after_a_fork_session_and_discarded_by_an_in_process_one(self):
        self.assertEqual(self.children(), [])  # none at start
        self.finfo()
        spare = self.the_spare()
        state, sid, ppid = proc_state(spare)
        self.assertEqual((sid, ppid), (spare, self.w.proc.pid))  # own session; ours
        fds = {int(fd): os.readlink("/proc/%d/fd/%s" % (spare, fd))
               for fd in os.listdir("/proc/%d/fd" % spare)}
        # Its three pipes on 0-2 and the socket its session comes from: nothing else.
        self.assertEqual(sorted(fds)[:3], [0, 1, 2])
        self.assertTrue(all(fds[n].startswith("pipe:") for n in range(3)), fds)
        self.assertEqual(len(fds), 4, fds)
        self.w.run("cat", stdin=b"x")
        wait_for(lambda: not driver.worker_pids_children(self.w.proc.pid),
                 what="the spare to be discarded and reaped")
        self.assertTrue(dead(spare))

    def test_quit_ends_the_spare(self):
        self.finfo()
        spare = self.the_spare()
        self.assertEqual(self.w.quit(), 0)
        wait_for(lambda: dead(spare), what="the spare to end")

    def test_channel_eof_ends_the_spare(self):
        self.finfo()
        spare = self.the_spare()
        self.w.sock.close()
        self.assertEqual(self.w.proc.wait(10), 0)
        wait_for(lambda: dead(spare), what="the spare to end")

    def test_spare_dies_with_a_killed_worker(self):
        self.finfo()
        spare = self.the_spare()
        os.kill(self.w.proc.pid, signal.SIGKILL)
        self.w.proc.wait(10)
        wait_for(lambda: dead(spare), what="the spare to die with its worker (PDEATHSIG)")

    def test_a_killed_spare_is_replaced(self):
        self.finfo()
        spare = self.the_spare()
        os.kill(spare, signal.SIGKILL)
        # The worker notices (SIGCHLD) and reaps it while idle; the next session's child
        # is forked at once. (A spare killed just as a session is handed to it makes that
        # session end as if its child had been killed: 137.)
        wait_for(lambda: not driver.worker_pids_children(self.w.proc.pid),
                 what="the killed spare to be reaped")
        got = self.finfo(args=["after"])
        self.assertEqual(got["argv"][1:], ["after"])
        self.assertNotEqual(got["pid"], spare)
        self.assertNotEqual(self.the_spare(), spare)
        self.assertIn("forked ahead of time", self.w.log())

    def test_spare_children_look_like_cold_ones(self):
        cases = [dict(), dict(tty=(1, 1, 1)), dict(tty=(0, 1, 0)),
                 dict(env=client_env(PYTHONIOENCODING="latin-1", PYTHONUNBUFFERED="1")),
                 dict(cwd="/tmp", umask=0o027, args=["a", "b c"])]
        for kw in cases:
            self.w.run("cat", stdin=b"")  # no spare: the next child is forked at once
            kw.setdefault("env", self.env)
            cold = self.w.run("finfo", **kw)
            warm = self.w.run("finfo", **kw)  # the spare
            a, b = json.loads(bytes(cold.stdout)), json.loads(bytes(warm.stdout))
            self.assertNotEqual(a["pid"], b["pid"])
            for got in (a, b):
                self.assertEqual((got["sid"], got["pgid"]), (got["pid"], got["pid"]), kw)
                self.assertEqual(got["ppid"], self.w.proc.pid, kw)
            for k in PER_PROCESS:
                a.pop(k)
                b.pop(k)
            self.assertEqual(a, b, kw)
            self.assertEqual((cold.code, bytes(cold.stderr)), (warm.code, bytes(warm.stderr)))

    def test_stdio_variables_changing_between_sessions(self):
        # A spare builds sys.stdin/stdout/stderr ahead of time as the previous session's
        # PYTHONUNBUFFERED and PYTHONIOENCODING asked; a session that differs gets its own.
        plain = client_env()
        plain.pop("PYTHONIOENCODING", None)
        special = dict(plain, PYTHONIOENCODING="latin-1", PYTHONUNBUFFERED="1")
        want_plain = self.finfo(env=plain)
        for env, enc, lb in [(special, "latin-1", [False, False]),
                             (special, "latin-1", [False, False]),
                             (plain, want_plain["encoding"], [False, True]),
                             (special, "latin-1", [False, False])]:
            got = self.finfo(env=env)
            self.assertEqual((got["encoding"], got["line_buffering"]), (enc, lb))

    def test_tty_stdin_from_a_spare(self):
        self.finfo()
        self.the_spare()
        r = self.w.run("ftty", ["read"], env=self.env, tty=(1, 1, 1), stdin=b"one\ntwo")
        got = json.loads(bytes(r.stdout).split(b"\n", 1)[0])
        self.assertEqual(got["data"], "one\ntwo")
        self.assertTrue(got["dev_tty"])
        self.assertEqual(got["isatty"], [True, True, True])

    def test_exit_report_of_a_grandchild_is_not_the_sessions(self):
        for _ in range(3):
            r = self.w.run("fforkret", env=self.env)
            self.assertEqual(r.code, 3, r)


class SpareTiming(unittest.TestCase):
    """When the spare is forked: after the reap, or during a back-to-back session
    (docs/ngw.md 11.5)."""

    back_to_back = "0"

    def setUp(self):
        env = driver.worker_env({"TEST_BACK_TO_BACK": self.back_to_back})
        self.w = driver.Worker([sys.executable, "-c", TIMING_WORKER, BASIC], env=env)
        self.w.hello()
        self.env = client_env()

    def tearDown(self):
        self.w.stop()

    def kids(self):
        return {pid for pid, state in driver.worker_pids_children(self.w.proc.pid)
                if state != "Z"}

    def the_spare(self, other_than=()):
        """Waits until the worker's only child is one sleeping process, not one of
        `other_than`; returns its pid."""
        def one():
            kids = driver.worker_pids_children(self.w.proc.pid)
            return (len(kids) == 1 and kids[0][1] == "S" and kids[0][0] not in other_than
                    and kids[0][0])
        return wait_for(one, what="exactly one sleeping child (the spare)")

    def fmark(self):
        r = self.w.run("fmark", env=self.env)
        self.assertEqual(r.code, 0, r)
        return json.loads(bytes(r.stdout))

    def finish_fcat(self, data):
        """Sends `data` and end of file to a running fcat; returns (stdout, X payload)."""
        self.w.send("0", data)
        self.w.send(".")
        out = b""
        while True:
            c = self.w.read_chunk()
            self.assertIsNotNone(c)
            ty, payload = c
            if ty == "1":
                out += payload
            elif ty == "X":
                return out, payload

    def test_spaced_sessions_fork_the_spare_after_the_reap(self):
        self.fmark()
        spare = self.the_spare()
        time.sleep(0.05)  # the next session is not back to back: 5 ms and more after X
        self.w.start("fcat", env=self.env)
        self.assertEqual(self.w.read_chunk(), ("S", b""))
        # The spare runs the session, and no other process is forked while it runs.
        self.assertEqual(self.kids(), {spare})
        self.assertEqual(self.finish_fcat(b"spaced"), (b"spaced", b"0\n"))
        nxt = self.the_spare(other_than={spare})
        self.assertEqual(self.fmark()["pid"], nxt)

    def test_in_process_sessions_alone_fork_nothing(self):
        self.fmark()
        first = self.the_spare()
        for n in range(3):
            self.w.run("mark", [str(n)], env=self.env)
        wait_for(lambda: not driver.worker_pids_children(self.w.proc.pid),
                 what="the spare to be discarded and reaped")
        time.sleep(0.1)
        self.assertEqual(driver.worker_pids_children(self.w.proc.pid), [])
        # The next fork-mode child is forked at session time and sees what the in-process
        # sessions changed.
        got = self.fmark()
        self.assertEqual(got["mark"], "2")
        self.assertNotEqual(got["pid"], first)


class SpareTimingBackToBack(SpareTiming):
    """Every session counts as back to back: the next spare is forked while the session's
    child runs, so it is ready before that session's X, unless the command's last session
    was long."""

    back_to_back = "1"

    test_spaced_sessions_fork_the_spare_after_the_reap = None

    def test_the_next_spare_exists_before_x(self):
        self.fmark()
        spare = self.the_spare()
        self.w.start("fcat", env=self.env)
        self.assertEqual(self.w.read_chunk(), ("S", b""))
        # While the session runs (fcat waits for its stdin): the spare it was handed to,
        # and the next one.
        new = wait_for(lambda: self.kids() - {spare}, what="the next spare, before X")
        self.assertEqual(len(new), 1, new)
        (nxt,) = new
        self.assertEqual(proc_state(nxt)[2], self.w.proc.pid)
        # Once it has prepared (its own session; the worker's descriptors closed), it
        # holds its own three pipes and its socket, and nothing of the running
        # session's: no copy of the pipes of that session's child.
        def settled():
            links = fd_links(nxt)
            return proc_state(nxt)[1] == nxt and len(links) == 4 and links
        links = wait_for(settled, what="the next spare to prepare")
        self.assertEqual(sorted(links)[:3], [0, 1, 2])
        session_pipes = {fd_links(spare)[n] for n in range(3)}
        self.assertFalse(set(links.values()) & session_pipes, (links, session_pipes))
        self.assertEqual(self.finish_fcat(b"data"), (b"data", b"0\n"))
        # The session's stdin reached its end of file: no copy of the pipe's write end
        # was left open anywhere. The next session runs in the spare forked during this one.
        self.assertEqual(self.fmark()["pid"], nxt)
        # The session's child reported its exit before exiting (and may still be writing
        # its adaptive and page reports).
        wait_for(lambda: dead(spare), what="the first session's child to exit")

    def test_after_a_long_session_of_the_command_the_spare_is_forked_at_x(self):
        self.fmark()
        first = self.the_spare()
        self.w.start("fcat", env=self.env)
        self.assertEqual(self.w.read_chunk(), ("S", b""))
        during = self.kids() - {first}  # forked during it: fcat has no history yet
        self.assertEqual(len(during), 1, during)
        time.sleep(0.05)  # a long session: more than 5 ms from the hand-over to X
        self.assertEqual(self.finish_fcat(b"long"), (b"long", b"0\n"))
        (spare,) = during
        # The first session's child reported its exit before exiting (and may still be
        # writing its adaptive and page reports).
        wait_for(lambda: dead(first), what="the first session's child to exit")
        self.w.start("fcat", env=self.env)
        # The S comes after any fork done during the session: none this time, since the
        # command's last session was long. Its spare is forked at X instead.
        self.assertEqual(self.w.read_chunk(), ("S", b""))
        self.assertEqual(self.kids(), {spare})
        self.assertEqual(self.finish_fcat(b"again"), (b"again", b"0\n"))
        nxt = self.the_spare(other_than={first, spare})
        self.assertEqual(self.fmark()["pid"], nxt)

    def test_back_to_back_sessions_leave_one_spare(self):
        pids = [self.fmark()["pid"] for _ in range(6)]
        self.assertEqual(len(set(pids)), 6)
        spare = self.the_spare(other_than=set(pids))
        self.assertEqual(self.fmark()["pid"], spare)


class NoPrefork(Spare):
    """prefork=False: no spare, ever; every session's child is forked when it starts."""

    env_extra = {"TEST_PREFORK": "0"}

    def test_no_spare(self):
        for _ in range(3):
            self.finfo()
        wait_for(lambda: not driver.worker_pids_children(self.w.proc.pid),
                 what="no child left")
        time.sleep(0.1)
        self.assertEqual(driver.worker_pids_children(self.w.proc.pid), [])

    # The spare's own tests do not apply.
    test_forked_after_a_fork_session_and_discarded_by_an_in_process_one = None
    test_quit_ends_the_spare = None
    test_channel_eof_ends_the_spare = None
    test_spare_dies_with_a_killed_worker = None
    test_a_killed_spare_is_replaced = None
    test_tty_stdin_from_a_spare = None


if __name__ == "__main__":
    unittest.main()
