"""In-process commands: the context API, lazy stdin credit, exit codes, interrupts."""

import json
import os
import random
import unittest

from support import WorkerTest


class Inline(WorkerTest):
    def test_args_env_cwd_umask(self):
        args = ["plain", "with space", "", "ünïcødé", "new\nline", "--flag=x"]
        env = {"FOO": "bar", "EMPTY": "", "UNICODE": "é", "EQ": "a=b=c"}
        r = self.run_ok("info", *args, env=env, cwd="/tmp", umask=0o027)
        got = json.loads(r.stdout)
        self.assertEqual(got["command"], "info")
        self.assertEqual(got["args"], args)
        self.assertEqual(got["env"], env)  # NGW_* and NAILGUN_* removed
        self.assertEqual(got["cwd"], "/tmp")
        self.assertEqual(got["umask"], 0o027)
        self.assertEqual(got["tty"], [False, False, False])
        self.assertEqual(got["nailgun"]["NAILGUN_TTY_1"], "0")
        self.assertFalse(got["forked"])
        # The worker's own process state is untouched by an in-process session.
        self.assertNotEqual(got["worker_cwd"], "/tmp")
        self.assertFalse(got["worker_has_client_env"])
        self.assertEqual(r.sends, 0, "a command that never reads stdin must not ask for it")

    def test_tty_flags(self):
        r = self.run_ok("info", tty=(1, 0, 1))
        self.assertEqual(json.loads(r.stdout)["tty"], [True, False, True])

    def test_stdin_1mib_binary_with_credit(self):
        data = random.Random(1).randbytes(1 << 20)
        r = self.run_ok("cat", stdin=data)
        self.assertEqual(bytes(r.stdout), data)
        self.assertEqual(r.stdin_chunks, 512)
        # Lazy credit: one S per chunk plus the one answered by "." (the driver checks
        # that no S is sent while another is unanswered).
        self.assertEqual(r.sends, 513)
        self.assertTrue(r.eof_sent)

    def test_stdin_larger_chunks(self):
        data = os.urandom(300000)
        r = self.run_ok("cat", stdin=data, chunk=100000)
        self.assertEqual(bytes(r.stdout), data)

    def test_exit_codes(self):
        cases = {"0": 0, "3": 3, "256": 0, "-1": 255, "set": 4, "ctx": 5}
        for mode, code in cases.items():
            r = self.w.run("exit", [mode])
            self.assertEqual((r.code, bytes(r.stdout)), (code, b"before\n"), mode)
            self.assertEqual(r.raw_exit, b"%d\n" % code)
        r = self.w.run("exit", ["msg"])
        self.assertEqual((r.code, bytes(r.stderr)), (1, b"inline message\n"))
        r = self.w.run("exit", ["raise"])
        self.assertEqual(r.code, 1)
        err = bytes(r.stderr).decode()
        self.assertTrue(err.startswith("Traceback (most recent call last):\n"), err)
        self.assertIn("basic.py", err.splitlines()[1])  # the SDK's own frames are hidden
        self.assertTrue(err.endswith("ZeroDivisionError: integer division or modulo by zero\n"))

    def test_interrupt_hangup(self):
        r = self.w.run("sleep", stdin=None, interrupt="hangup", interrupt_on=b"ready\n", timeout=10)
        self.assertEqual(r.code, 129)
        self.assertEqual(bytes(r.stderr), b"interrupted: hangup 1\n")
        self.assertLess(r.exit_at - r.interrupted_at, 2.0)
        self.run_ok("info")

    def test_interrupt_signal_names(self):
        r = self.w.run("sleep", stdin=None, interrupt="SIGINT", interrupt_on=b"ready\n", timeout=10)
        self.assertEqual((r.code, bytes(r.stderr)), (130, b"interrupted: SIGINT 2\n"))
        r = self.w.run("sleep", stdin=None, interrupt="SIGTERM", interrupt_on=b"ready\n", timeout=10)
        self.assertEqual((r.code, bytes(r.stderr)), (143, b"interrupted: SIGTERM 15\n"))

    def test_interrupt_while_waiting_for_stdin(self):
        # The client never answers S (an idle terminal); the hangup must still end it.
        r = self.w.run("cat", stdin=None, interrupt="hangup", interrupt_after=0.2, timeout=10)
        self.assertEqual(r.code, 129)


if __name__ == "__main__":
    unittest.main()
