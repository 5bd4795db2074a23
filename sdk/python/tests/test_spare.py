"""Fork mode's spare, the next session's child forked ahead of time, and the exit report
that lets X go before the kernel has torn a child down (docs/ngw.md 11.1, 11.5)."""

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


class _WorkerCase(unittest.TestCase):
    """A fresh worker per test (the basic test worker, with `env_extra`)."""

    env_extra = {}

    def setUp(self):
        self.w = driver.Worker([sys.executable, BASIC], env=driver.worker_env(self.env_extra))
        self.w.hello()
        self.env = client_env()

    def tearDown(self):
        self.w.stop()


class Spare(_WorkerCase):

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


class _Sessions(_WorkerCase):
    """A worker and back-to-back fork-mode sessions."""

    def ident(self, **kw):
        r = self.w.run("fident", env=self.env, **kw)
        self.assertEqual(r.code, 0, r)
        return json.loads(bytes(r.stdout).split(b"\n", 1)[0])

    def back_to_back(self, n, gap=0.003, **kw):
        """n sessions, each `gap` seconds after the previous X: back to back for the
        worker (under 5 ms), with time for a spare to clone its successor."""
        got = []
        for _ in range(n):
            got.append(self.ident(**kw))
            time.sleep(gap)
        return got

    def counts(self):
        """(spares forked by the worker, spares cloned by spares), from its log at exit."""
        self.assertEqual(self.w.quit(), 0)
        for line in self.w.log().splitlines():
            if "spares forked by the worker" in line:
                words = line.split()
                return int(words[3]), int(words[9])
        return None, 0

    def spares(self):
        return [pid for pid, st in driver.worker_pids_children(self.w.proc.pid) if st != "Z"]

    def settled(self):
        """The spare and its successor once both exist (the successor is usually there:
        a spare whose session came before it could clone has none)."""
        try:
            return wait_for(lambda: len(self.spares()) == 2 and self.spares(), timeout=1.0)
        except AssertionError:
            kids = self.spares()
            self.assertEqual(len(kids), 1, kids)
            return kids


class Successor(_Sessions):
    """The spare's successor (docs/ngw.md 11.5): back to back, the spare clones the next
    spare with clone(CLONE_PARENT), so the worker does not fork."""

    def test_back_to_back_children_are_cloned_and_look_like_forked_ones(self):
        got = self.back_to_back(30)
        pids = [g["pid"] for g in got]
        self.assertEqual(len(set(pids)), len(pids))
        self.assertEqual(len({g["random"] for g in got}), len(got))  # reseeded in each
        for g in got:
            self.assertEqual(g["ppid"], self.w.proc.pid)  # the worker's child, cloned or not
            self.assertEqual((g["sid"], g["pgid"]), (g["pid"], g["pid"]))
            self.assertEqual(g["native_id"], g["pid"])  # the C library's thread id too
            self.assertEqual(g["fds"], [0, 1, 2, 3])  # 3: the listing's own
        forked, cloned = self.counts()
        # Most are cloned on an idle machine; under load many spares get their session
        # before they could (a two-core machine running other tests clones a few of 30).
        self.assertGreater(cloned, 0, (forked, cloned))

    def test_terminal_sessions_between_cloned_ones(self):
        # A spare that gets a terminal session makes it its controlling terminal; its
        # successor must be out of its session by then, or the terminal's hangup at the
        # end of that session would reach the successor.
        for i in range(30):
            tty = (1, 1, 1) if i % 2 else (0, 0, 0)
            g = self.ident(tty=tty)
            self.assertEqual(g["ppid"], self.w.proc.pid)
            time.sleep(0.003)
        forked, cloned = self.counts()
        self.assertGreater(cloned, 0, (forked, cloned))  # as above, under load

    def test_a_killed_standby_is_replaced(self):
        self.back_to_back(5)
        kids = self.settled()
        for pid in kids:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: all(dead(pid) for pid in kids), what="the spares gone")
        got = self.back_to_back(5)
        self.assertTrue(all(g["ppid"] == self.w.proc.pid for g in got))

    def test_an_in_process_session_discards_the_spare_and_its_successor(self):
        self.back_to_back(5)
        kids = self.settled()
        self.assertEqual(self.w.run("exit", ["0"], env=self.env).code, 0)
        wait_for(lambda: all(dead(pid) for pid in kids), what="both discarded")
        self.assertEqual(self.ident()["ppid"], self.w.proc.pid)


class SuccessorOff(_Sessions):
    """NGW_CLONE=0: the worker forks every spare, as where cloning is not available."""

    env_extra = {"NGW_CLONE": "0"}

    def test_back_to_back_children_are_forked_by_the_worker(self):
        got = self.back_to_back(10)
        self.assertTrue(all(g["ppid"] == self.w.proc.pid for g in got))
        # The spare, no successor (the worker forks it after the last session's X).
        wait_for(lambda: len(self.spares()) == 1, what="the worker's one spare")
        time.sleep(0.2)
        self.assertEqual(len(self.spares()), 1)
        self.assertEqual(self.counts()[1], 0)
        self.assertIn("spares are forked by the worker only (NGW_CLONE=0)", self.w.log())


if __name__ == "__main__":
    unittest.main()
