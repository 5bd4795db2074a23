"""A controlling terminal for fork-mode commands (`ctty`, docs/ngw.md 15.7): the driver
plays ngd and passes a pseudo-terminal after the client's descriptors, with
`NGW_CLIENT_PTY`; the worker answers `t ctty`, and the command runs with it as its
controlling terminal, in the foreground process group: leading its session with the job's
anchor (`ng`, as ngd gives it), or under a session leader that stands for it (signals,
stops, exit)."""

import json
import os
import random
import sys
import time
import unittest

import driver
from support import BASIC, client_env
from test_exact import WorkerCase, read_all

FEATURES = "notices,fds,ctty,signals,stdin-window"


class PtySessions:
    """Sessions whose client passes a pseudo-terminal (a mixin for a WorkerCase)."""
    features = FEATURES

    def setUp(self):
        self.master, self.slave = os.openpty()
        self.r, self.wr = os.pipe()

    def tearDown(self):
        for fd in (self.master, self.slave, self.r, self.wr):
            try:
                os.close(fd)
            except OSError:
                pass

    def run_on_pty(self, command, args=(), pty_map="1,2", **kw):
        """`command` with a pipe on fd 0, the "client's terminal" (a pipe here too: the
        worker must replace it) on fds 1 and 2, and the pseudo-terminal."""
        return self.w.run(command, list(args), env=client_env(),
                          fds=[self.r, self.wr, self.wr, self.slave], fd_map="0,1,2",
                          extra=[("NGW_CLIENT_PTY", pty_map)], **kw)

    def probe(self, **kw):
        path = os.path.join(self.tmp, "probe-%d.json" % random.getrandbits(32))
        r = self.run_on_pty("fprobe", [path, "hello"], **kw)
        self.assertEqual(r.code, 0, r)
        with open(path) as f:
            return r, json.load(f)


class ControllingTerminal(PtySessions, WorkerCase):
    leads = False  # the command leads its session (with the job's anchor)

    def test_hello_lists_ctty(self):
        self.assertIn("ctty", self.hello["features"])

    def test_no_ctty_without_signals(self):
        w = driver.Worker([sys.executable, BASIC], host_features="fds,ctty")
        try:
            self.assertNotIn("ctty", w.hello()["features"])
            w.quit()
        finally:
            w.close()

    def test_the_pseudo_terminal_is_the_controlling_terminal(self):
        r, got = self.probe()
        self.assertEqual(r.taken, b"ctty")
        self.assertEqual(r.sends, 0)
        self.assertEqual(got["isatty"], [False, True, True])
        self.assertEqual(got["foreground"], [None, True, True])
        self.assertTrue(got["dev_tty"])
        # A process group of its own, in a session the command leads with an anchor, or
        # whose leader is not the command.
        self.assertEqual(got["pgid"], got["pid"])
        if self.leads:
            self.assertEqual(got["sid"], got["pid"])
            self.assertNotIn("anchor", self.w.log())  # nothing failed
        else:
            self.assertNotEqual(got["sid"], got["pid"])
        self.assertEqual(got["std_none"], [False, False, False])
        self.assertEqual(read_all(self.master, until=b"\n"), b"hello\r\n")

    def test_a_map_that_is_not_passed_is_relayed(self):
        r = self.w.run("fprobe", ["/dev/null"], env=client_env(),
                       fds=[self.wr, self.wr, self.slave], fd_map="1,2",
                       extra=[("NGW_CLIENT_PTY", "0")])
        self.assertEqual(r.taken, b"relay")

    def test_a_stop_is_reported_and_continued(self):
        r = self.run_on_pty("fstop", continue_stops=True)
        self.assertEqual(r.taken, b"ctty")
        self.assertEqual(r.stops, ["SIGTSTP"])
        self.assertEqual(r.raw_exit, b"0\n")
        self.assertEqual(read_all(self.master, until=b"resumed\r\n"),
                         b"stopping\r\nresumed\r\n")

    def test_exit_codes_and_deaths_pass_through_the_leader(self):
        for mode, raw in (("osexit", b"9\n"), ("kill", b"137 SIGKILL\n"),
                          ("kbint", b"130 SIGINT\n")):
            r = self.run_on_pty("fexit", [mode])
            self.assertEqual((r.taken, r.raw_exit), (b"ctty", raw), mode)

    def test_group_signals_reach_the_command(self):
        r = self.run_on_pty("fcatch", interrupt="SIGINT", interrupt_after=1.0)
        self.assertEqual(r.raw_exit, b"3\n")

    def test_no_descriptor_leaks(self):
        def kinds():
            # The spare's socket and pipes may have other numbers: the same kinds, as many
            # of each (as in test_exact).
            return sorted(v.split(":")[0] for v in driver.open_fds(self.w.proc.pid).values())

        self.probe()
        time.sleep(0.3)  # the spare is forked once the last child is reaped
        before = kinds()
        for _ in range(5):
            self.probe()
        time.sleep(0.3)
        self.assertEqual(kinds(), before)
        # Nobody (worker, leader, command) kept the pseudo-terminal: its master sees EIO
        # once the test's own slave is closed.
        read_all(self.master, timeout=0.5)
        os.close(self.slave)
        self.slave = -1
        self.assertEqual(read_all(self.master, timeout=2.0), b"")


class ControllingTerminalWithoutSpare(ControllingTerminal):
    prefork = "0"


#: The `ng` built with the workspace (scripts/test builds it first).
NG = os.path.join(os.path.dirname(driver.SRC), "..", "..", "target", "debug", "ng")


class ControllingTerminalAnchored(ControllingTerminal):
    """With the job's anchor: the command leads its session, no leader is forked."""
    extra_env = {"NGW_ANCHOR": os.path.abspath(NG)}
    leads = True


class ControllingTerminalAnchoredWithoutSpare(ControllingTerminalAnchored):
    prefork = "0"


def _stat(pid):
    """(parent, process group, session) of `pid`, from /proc; None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(rest[1]), int(rest[2]), int(rest[3])


def _anchors_of(pid):
    """The anchor processes (`ng:anchor <pid>`: the keeper, the member) of `pid`."""
    found = []
    want = b"ng:anchor\0%d\0" % pid
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    if f.read() == want:
                        found.append(int(entry))
            except OSError:
                pass
    return found


class SparesLeadAhead(PtySessions, WorkerCase):
    """After a session on the client's terminal, the next spare leads its session and
    has its job's anchor before its session comes (docs/ngw.md 15.7); a session without
    the terminal discards such a spare."""
    extra_env = ControllingTerminalAnchored.extra_env

    def spare(self, led, served=()):
        """The worker's spare, once there is one that leads its session (`led`) or not.
        `served`: the children of earlier sessions, which lead theirs too until they are
        reaped, and are not the spare."""
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            for pid, _ in driver.worker_pids_children(self.w.proc.pid):
                if pid in served:
                    continue
                st = _stat(pid)
                if st is not None and (st[2] == pid) == led and \
                        (led or st[1] == os.getpgid(self.w.proc.pid)):
                    if not led or len(_anchors_of(pid)) == 2:
                        return pid
            time.sleep(0.02)
        self.fail("no spare %s its session" % ("leading" if led else "in the worker's"))

    def plain_probe(self):
        path = os.path.join(self.tmp, "plain-%d.json" % random.getrandbits(32))
        r = self.w.run("fprobe", [path], env=client_env(), fds=[self.r, self.wr, self.wr],
                       fd_map="0,1,2")
        self.assertEqual(r.code, 0, r)
        with open(path) as f:
            return json.load(f)

    def test_the_spare_after_a_terminal_session_leads_its_own(self):
        _, first = self.probe()
        spare = self.spare(led=True, served=(first["pid"],))
        keeper, member = sorted(_anchors_of(spare), key=lambda p: _stat(p)[1] == spare)
        self.assertEqual(_stat(member)[1:], (spare, spare))  # in the spare's group
        self.assertEqual(_stat(keeper)[1:], (keeper, spare))  # a group of its own
        r, got = self.probe()
        self.assertEqual(r.taken, b"ctty")
        self.assertEqual(got["pid"], spare)
        self.assertEqual((got["sid"], got["pgid"]), (spare, spare))
        self.assertEqual(got["foreground"], [None, True, True])
        self.assertTrue(got["dev_tty"])
        # The anchor ends with the command.
        deadline = time.monotonic() + 5.0
        while _anchors_of(spare) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(_anchors_of(spare), [])

    def test_a_session_without_the_terminal_takes_no_led_spare(self):
        self.probe()
        led = self.spare(led=True)
        got = self.plain_probe()
        self.assertNotEqual(got["pid"], led)
        # In the worker's session, in a process group of its own, as always.
        self.assertEqual(got["sid"], got["worker_sid"])
        self.assertEqual(got["pgid"], got["pid"])
        deadline = time.monotonic() + 5.0
        while (_stat(led) or _anchors_of(led)) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertIsNone(_stat(led), "the led spare was not discarded")
        self.assertEqual(_anchors_of(led), [])
        # The spare after it is the worker's again; a terminal session still works.
        self.spare(led=False)
        r, got = self.probe()
        self.assertEqual((r.taken, got["sid"]), (b"ctty", got["pid"]))

    def test_sessions_back_to_back_on_the_terminal(self):
        # Back to back, the spare's successor is cloned while a session runs: a copy
        # of a spare that leads its session leads one of its own, with its own anchor.
        pids = set()
        for _ in range(8):
            r, got = self.probe()
            self.assertEqual(r.taken, b"ctty")
            self.assertEqual((got["sid"], got["pgid"]), (got["pid"], got["pid"]))
            self.assertEqual(got["foreground"], [None, True, True])
            pids.add(got["pid"])
        self.assertEqual(len(pids), 8)
        self.assertNotIn("anchor", self.w.log())
        # A spare that leads its session, found with both its anchors. (Not counted again:
        # a second scan of /proc right after can miss one of them for an instant, about
        # once in 50 runs under load, while the spare's successor is being made.)
        spare = self.spare(led=True)
        # The process it spawned for them is gone, not left as its zombie child.
        deadline = time.monotonic() + 5.0
        while driver.worker_pids_children(spare) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(driver.worker_pids_children(spare), [])

    def test_a_stop_in_a_led_spare(self):
        self.probe()
        self.spare(led=True)
        r = self.run_on_pty("fstop", continue_stops=True)
        self.assertEqual((r.taken, r.stops, r.raw_exit), (b"ctty", ["SIGTSTP"], b"0\n"))


class ControllingTerminalFailedAnchor(ControllingTerminal):
    """An anchor that fails: a session leader forks the command, and nothing shows on the
    terminal (the tests compare what it shows)."""
    extra_env = {"NGW_ANCHOR": "/bin/false"}


class ControllingTerminalMissingAnchor(ControllingTerminal):
    """An anchor that cannot be run: the worker says so in its log when it starts."""
    extra_env = {"NGW_ANCHOR": "/nonexistent/ng"}

    def test_the_log_says_the_anchor_cannot_be_run(self):
        self.assertIn("the job's anchor /nonexistent/ng cannot be run", self.w.log())


if __name__ == "__main__":
    unittest.main()
