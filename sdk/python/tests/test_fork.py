"""Fork mode: fidelity of the child's process state, fd-level stdio, exit statuses,
isolation, interrupts, flow control, ttys, and no leaks."""

import json
import os
import random
import time
import unittest

import driver
from support import WorkerTest, client_env


class ForkFidelity(WorkerTest):
    def test_argv_env_cwd_umask_and_process_state(self):
        env = client_env(FOO="bar", EMPTY="", UNICODE="ünï")
        args = ["x", "with space", "", "ünï"]
        r = self.run_ok("finfo", *args, env=env, cwd="/tmp", umask=0o027)
        got = json.loads(r.stdout)
        self.assertEqual(got["argv"], ["/opt/bin/finfo"] + args)
        self.assertEqual(got["ctx_args"], args)
        self.assertEqual(got["env"], env)
        self.assertEqual(got["cwd"], "/tmp")
        self.assertEqual(got["umask"], 0o027)
        self.assertTrue(got["forked"])
        # fds: exactly 0, 1, 2 (and the one listdir itself opened).
        self.assertEqual(got["fds"][:3], [0, 1, 2])
        self.assertLessEqual(len(got["fds"]), 4, got["fds"])
        self.assertEqual(got["isatty"], [False, False, False])
        self.assertEqual(got["py_isatty"], [False, False, False])
        self.assertEqual(got["line_buffering"], [False, True])
        self.assertEqual(got["stdout_name"], "<stdout>")
        # Own session and process group; parent is the worker.
        self.assertEqual(got["sid"], got["pid"])
        self.assertEqual(got["pgid"], got["pid"])
        self.assertEqual(got["ppid"], self.w.proc.pid)
        # Signals as in a fresh interpreter.
        self.assertEqual(got["sigmask"], [])
        self.assertEqual(got["sighup"], "SIG_DFL")
        self.assertEqual(got["sigterm"], "SIG_DFL")
        self.assertEqual(got["sigchld"], "SIG_DFL")
        self.assertEqual(got["sigpipe"], "SIG_IGN")  # as CPython sets it at startup
        self.assertEqual(got["sigint"], "default_int_handler")

    def test_client_pythonioencoding_and_unbuffered(self):
        env = client_env(PYTHONIOENCODING="latin-1", PYTHONUNBUFFERED="1")
        r = self.run_ok("finfo", env=env)
        got = json.loads(r.stdout)
        self.assertEqual(got["encoding"], "latin-1")
        self.assertEqual(got["line_buffering"], [False, False])

    def test_output_at_fd_level_and_from_subprocesses(self):
        r = self.run_ok("fout", env=client_env())
        self.assertEqual(bytes(r.stdout), b"print to stdout\nos.write to fd 1\nfrom echo\n")
        self.assertEqual(bytes(r.stderr),
                         b"from sh stderr\nprint to stderr\nos.write to fd 2\n")

    def test_stream_captured_at_import_is_flushed(self):
        r = self.run_ok("fcaptured", env=client_env())
        self.assertEqual(sorted(bytes(r.stdout).splitlines()), [
            b"through the new sys.stdout", b"through the stream object captured at import"])

    def test_stdin_1mib_binary_round_trip(self):
        data = random.Random(2).randbytes(1 << 20)
        r = self.run_ok("fcat", stdin=data, env=client_env())
        self.assertEqual(bytes(r.stdout), data)
        self.assertEqual(r.stdin_chunks, 512)
        self.assertEqual(r.sends, 513)  # grant-and-prefetch: one S per chunk, then "."

    def test_stdin_through_a_subprocess(self):
        data = os.urandom(200000)
        r = self.run_ok("fsubcat", stdin=data, env=client_env())
        self.assertEqual(bytes(r.stdout), data)

    def test_partial_stdin_read(self):
        # The child reads one line and exits; prefetch may have taken more from the
        # client, which is bounded by the pipe, and the session must still end.
        data = b"".join(b"line %d\n" % i for i in range(50000))
        r = self.run_ok("fline", stdin=data, env=client_env())
        self.assertEqual(bytes(r.stdout), b"got 'line 0\\n'\n")
        self.assertLess(r.stdin_chunks, 64)


class ForkExit(WorkerTest):
    def test_exit_statuses(self):
        env = client_env()
        cases = [("0", 0, b"before\n", b""), ("3", 3, b"before\n", b""),
                 ("none", 0, b"before\n", b""), ("256", 0, b"before\n", b""),
                 ("msg", 1, b"before\n", b"fork message\n"),
                 ("kill", 137, b"before\n", b""), ("segv", 139, b"before\n", b""),
                 ("osexit", 9, b"before\n", b""), ("ctx", 8, b"before\n", b""),
                 ("thread", 6, b"before\nthread done\n", b""),
                 ("atexit", 0, b"before\natexit ran\n", b"")]
        for mode, code, out, err in cases:
            r = self.w.run("fexit", [mode], env=env)
            self.assertEqual((r.code, bytes(r.stdout), bytes(r.stderr)), (code, out, err), mode)
            self.assertEqual(r.raw_exit, b"%d\n" % code)

    def test_uncaught_exception(self):
        r = self.w.run("fexit", ["raise"], env=client_env())
        self.assertEqual(r.code, 1)
        err = bytes(r.stderr).decode().splitlines()
        self.assertEqual(err[0], "Traceback (most recent call last):")
        self.assertIn("basic.py", err[1])  # no SDK frames above the command's
        self.assertEqual(err[-1], "KeyError: 'missing'")

    def test_keyboard_interrupt(self):
        r = self.w.run("fexit", ["kbint"], env=client_env())
        self.assertEqual(r.code, 130)
        self.assertTrue(bytes(r.stderr).endswith(b"KeyboardInterrupt\n"))

    def test_missing_working_directory(self):
        r = self.w.run("finfo", env=client_env(), cwd="/nonexistent/ngw-test")
        self.assertEqual(r.code, 126)
        self.assertEqual(bytes(r.stdout), b"")
        self.assertIn(b"ngw: cannot start finfo: [Errno 2] No such file or directory",
                      bytes(r.stderr))

    def test_environ_rule_computes_the_variable(self):
        env = client_env(RULE_TEST_VAR="abc", RULE_TEST_SUFFIX="x")
        got = json.loads(self.run_ok("finfo", env=env).stdout)
        self.assertEqual(got["env"]["RULE_TEST_VAR"], "abc+x")
        got = json.loads(self.run_ok("finfo", env=client_env()).stdout)
        self.assertNotIn("RULE_TEST_VAR", got["env"])

    def test_failing_environ_rule_fails_the_start(self):
        r = self.w.run("finfo", env=client_env(RULE_TEST_VAR="raise"))
        self.assertEqual(r.code, 126)
        self.assertEqual(bytes(r.stdout), b"")
        self.assertIn(b"ngw: cannot start finfo: rule refused", bytes(r.stderr))
        # The worker goes on serving.
        self.run_ok("finfo", env=client_env())

    def test_no_directory_sent(self):
        got = json.loads(self.run_ok("finfo", env=client_env()).stdout)
        self.assertEqual(got["cwd"], os.getcwd())  # the worker's, inherited

    def test_worker_survives_crashing_children(self):
        for _ in range(3):
            self.assertEqual(self.w.run("fexit", ["kill"], env=client_env()).code, 137)
        self.run_ok("finfo", env=client_env())
        self.run_ok("info")


class ForkIsolation(WorkerTest):
    def test_nothing_leaks_between_runs(self):
        first = json.loads(self.run_ok("fglobal", "one", env=client_env(), cwd="/tmp",
                                       umask=0o022).stdout)
        second = json.loads(self.run_ok("fglobal", "two", env=client_env(), cwd="/tmp",
                                        umask=0o022).stdout)
        for got in (first, second):
            self.assertIsNone(got["previous"])  # module global set by the other run
            self.assertIsNone(got["seen_env"])
            self.assertEqual(got["cwd"], "/tmp")
            self.assertEqual(got["seen_umask"], 0o022)
            self.assertFalse(got["leaked_module"])


class ForkInterrupt(WorkerTest):
    def test_hangup_ends_a_hanging_command(self):
        r = self.w.run("fsleep", env=client_env(), stdin=None, interrupt="hangup",
                       interrupt_on=b"ready\n", timeout=10)
        self.assertEqual(r.code, 129)
        self.assertLess(r.exit_at - r.interrupted_at, 2.0)

    def test_hangup_escalates_to_sigkill(self):
        r = self.w.run("fsleep", ["ignore-hup"], env=client_env(), stdin=None,
                       interrupt="hangup", interrupt_on=b"ready\n", timeout=10)
        self.assertEqual(r.code, 137)
        waited = r.exit_at - r.interrupted_at
        self.assertGreaterEqual(waited, 0.45)  # the worker's kill grace is 0.5 s here
        self.assertLess(waited, 3)

    def test_hangup_reaches_the_whole_process_group(self):
        r = self.w.run("fsleep", ["child"], env=client_env(), stdin=None, interrupt="hangup",
                       interrupt_on=b"ready\n", timeout=10)
        self.assertEqual(r.code, 129)
        self.assertLess(r.exit_at - r.interrupted_at, 2.0)
        grandchild = int(bytes(r.stdout).split()[1])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                with open("/proc/%d/stat" % grandchild) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                break
            if state == "Z":  # dead, waiting for whoever inherited it to reap it
                break
            time.sleep(0.02)
        else:
            self.fail("the command's own child survived the hangup")

    def test_signal_names_are_forwarded(self):
        for name, code in (("SIGTERM", 143), ("SIGINT", 130), ("SIGKILL", 137)):
            r = self.w.run("fsleep", env=client_env(), stdin=None, interrupt=name,
                           interrupt_on=b"ready\n", timeout=10)
            self.assertEqual(r.code, code, name)

    def test_flooding_child_and_a_client_that_never_reads(self):
        # 64 MiB of output, nobody reading: the worker must still see the hangup.
        r = self.w.run("fflood", ["64"], env=client_env(), stall=1.0, interrupt="hangup",
                       discard_after_interrupt=True, timeout=20)
        self.assertIn(r.code, (129, 137))
        self.assertLess(r.exit_at - r.interrupted_at, 5)
        self.run_ok("finfo", env=client_env())

    def test_slow_client_gets_everything(self):
        r = self.w.run("fflood", ["16"], env=client_env(), stall=0.5, timeout=30)
        self.assertEqual(r.code, 0)
        self.assertEqual(len(r.stdout), 16 << 20)
        self.assertEqual(bytes(r.stderr), b"done\n")
        self.assertLessEqual(max(n for ty, n in r.chunks if ty == "1"), 64 << 10)


class ForkTty(WorkerTest):
    def test_all_three_ttys(self):
        r = self.run_ok("ftty", "read", env=client_env(), tty=(1, 1, 1), stdin=b"hello\nworld")
        first, rest = bytes(r.stdout).split(b"\n", 1)
        got = json.loads(first)
        self.assertEqual(got["isatty"], [True, True, True])
        self.assertEqual(got["data"], "hello\nworld")  # no echo, EOF after a partial line
        self.assertTrue(got["dev_tty"])  # the stdin pty is the controlling terminal
        self.assertEqual(got["size"], [80, 24])
        self.assertFalse(got["opost"])
        self.assertTrue(got["line_buffering"])
        self.assertEqual(rest, b"line1\nline2\n")  # raw: no \r\n translation

    def test_stdout_tty_only(self):
        r = self.run_ok("ftty", env=client_env(COLUMNS="132", LINES="43"), tty=(0, 1, 0))
        got = json.loads(bytes(r.stdout).split(b"\n", 1)[0])
        self.assertEqual(got["isatty"], [False, True, False])
        self.assertFalse(got["dev_tty"])
        self.assertEqual(got["size"], [132, 43])

    def test_tty_stdin_binary_line(self):
        r = self.run_ok("ftty", "read", env=client_env(), tty=(1, 0, 0),
                        stdin=b"tab\there \x7f del\n")
        got = json.loads(bytes(r.stdout).split(b"\n", 1)[0])
        self.assertEqual(got["data"], "tab\there \x7f del\n")


class ForkLeaks(WorkerTest):
    def test_many_sessions_leak_no_fds_or_zombies(self):
        pid = self.w.proc.pid
        env = client_env()
        self.run_ok("finfo", env=env)
        # An in-process session discards the spare (a fork-mode session leaves one): the
        # baseline and the end (the loop's last session is in-process) are both without.
        self.run_ok("cat", stdin=b"")
        baseline = driver.open_fds(pid)
        for i in range(40):
            kind = i % 5
            if kind == 0:
                self.run_ok("fcat", stdin=b"x" * 5000, env=env)
            elif kind == 1:
                self.assertEqual(self.w.run("fexit", ["kill"], env=env).code, 137)
            elif kind == 2:
                self.w.run("fsleep", env=env, stdin=None, interrupt="hangup",
                           interrupt_on=b"ready\n", timeout=10)
            elif kind == 3:
                got = json.loads(self.run_ok("finfo", env=env, tty=(1, 1, 1)).stdout)
                self.assertLessEqual(len(got["fds"]), 4, got["fds"])
            else:
                self.run_ok("cat", stdin=b"inline")
        self.assertEqual(driver.open_fds(pid), baseline)
        deadline = time.monotonic() + 2
        while driver.worker_pids_children(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(driver.worker_pids_children(pid), [], "children or zombies left")


if __name__ == "__main__":
    unittest.main()
