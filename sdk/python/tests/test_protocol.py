"""The channel itself: hello, ping, quit, framing limits, tolerance rules."""

import json
import os
import socket
import struct
import subprocess
import sys
import time
import unittest

import driver
from support import BASIC, WorkerTest, client_env


class HelloPingQuit(unittest.TestCase):
    def test_hello_ping_quit(self):
        w = driver.Worker([sys.executable, BASIC])
        try:
            hello = w.hello()
            self.assertEqual(hello["protocol"], 1)
            self.assertEqual(hello["pid"], w.proc.pid)
            self.assertIn("info", hello["commands"])
            self.assertIn("finfo", hello["commands"])
            # The driver offers notices (NGW_HOST_FEATURES), as ngd does.
            self.assertEqual(sorted(hello["features"]), ["fork", "interrupt", "notices"])
            self.assertGreaterEqual(hello["max_chunk"], 1 << 20)
            self.assertNotIn("error", hello)
            for payload in (b"", b"1", b"\x00\xff" * 32, b"x" * 1000):
                w.ping(payload)
            w.assert_quiet(0.05)
            self.assertEqual(w.quit(), 0)
        finally:
            w.close()

    def test_channel_eof_ends_worker(self):
        w = driver.Worker([sys.executable, BASIC])
        try:
            w.hello()
            w.sock.close()
            self.assertEqual(w.proc.wait(10), 0)
        finally:
            w.close()

    def test_channel_eof_mid_fork_session_kills_the_session(self):
        w = driver.Worker([sys.executable, BASIC])
        try:
            w.hello()
            w.start("fsleep", env=client_env())
            self.assertEqual(w.read_chunk(), ("S", b""))
            self.assertEqual(w.read_chunk(), ("1", b"ready\n"))
            kids = [pid for pid, _ in driver.worker_pids_children(w.proc.pid)]
            self.assertEqual(len(kids), 1)
            w.sock.close()
            self.assertEqual(w.proc.wait(10), 0)
            deadline = time.monotonic() + 5
            while os.path.exists("/proc/%d" % kids[0]) and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertFalse(os.path.exists("/proc/%d" % kids[0]), "session child outlived its worker")
        finally:
            w.close()

    def test_quit_during_a_session_finishes_it_first(self):
        w = driver.Worker([sys.executable, BASIC])
        try:
            w.hello()
            w.start("fsleep", env=client_env())
            self.assertEqual(w.read_chunk(), ("S", b""))
            self.assertEqual(w.read_chunk(), ("1", b"ready\n"))
            w.send("q")
            with self.assertRaises(TimeoutError):
                w.read_chunk(0.3)  # the session goes on
            w.send("i", b"hangup")
            self.assertEqual(w.read_chunk(), ("X", b"129\n"))
            self.assertIsNone(w.read_chunk())
            self.assertEqual(w.proc.wait(10), 0)
        finally:
            w.close()

    def test_no_ngw_fd(self):
        env = driver.worker_env()
        env.pop("NGW_FD", None)
        p = subprocess.run([sys.executable, BASIC], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"NGW_FD is not set", p.stderr)

    def test_wrong_protocol_version_offered(self):
        ours, theirs = socket.socketpair()
        env = driver.worker_env({"NGW_FD": str(theirs.fileno()), "NGW_VERSION": "7"})
        try:
            p = subprocess.run([sys.executable, BASIC], env=env, pass_fds=[theirs.fileno()],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        finally:
            ours.close()
            theirs.close()
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"worker protocol '7'", p.stderr)


class Framing(unittest.TestCase):
    def _oversized(self, length):
        w = driver.Worker([sys.executable, BASIC])
        try:
            w.hello()
            # Only the header: the worker must refuse before waiting for (or allocating) more.
            w.sock.sendall(struct.pack(">IB", length, ord("A")))
            self.assertIsNone(w.read_chunk(10))
            self.assertEqual(w.proc.wait(10), 2)
            self.assertIn("over the", w.log())
        finally:
            w.close()

    def test_length_at_2_pow_31_is_refused(self):
        self._oversized(1 << 31)

    def test_length_over_the_cap_is_refused(self):
        self._oversized((16 << 20) + 1)


class Tolerance(WorkerTest):
    def test_heartbeats_anywhere(self):
        w = self.w
        w.send("H")
        w.send("A", b"one")
        w.send("H")
        w.send("E", b"K=V")
        w.send("D", b"/tmp")
        w.send("C", b"cat")
        w.send("H")
        seen = []
        while True:
            ty, payload = w.read_chunk()
            seen.append(ty)
            if ty == "S":
                w.send("H")
                w.send("0" if seen.count("S") == 1 else ".", b"abc" if seen.count("S") == 1 else b"")
            elif ty == "X":
                break
        self.assertEqual(payload, b"0\n")
        w.send("H")
        r = self.run_ok("cat", stdin=b"after")
        self.assertEqual(bytes(r.stdout), b"after")

    def test_stale_chunks_between_sessions_are_ignored(self):
        w = self.w
        self.run_ok("info")
        # Answers and interrupts that crossed the X in flight.
        w.send("0", b"late stdin")
        w.send(".")
        w.send("i", b"hangup")
        w.send("H")
        w.assert_quiet(0.1)
        r = self.run_ok("cat", stdin=b"fresh")
        self.assertEqual(bytes(r.stdout), b"fresh")
        r = self.run_ok("fcat", stdin=b"fresh fork", env=client_env())
        self.assertEqual(bytes(r.stdout), b"fresh fork")

    def test_env_entries_with_nul_are_dropped(self):
        w = self.w
        w.send("E", b"BAD=a\0b")
        w.send("E", b"GOOD=1")
        w.send("C", b"finfo")
        out = bytearray()
        while True:
            ty, payload = w.read_chunk()
            if ty == "X":
                break
            if ty == "1":
                out += payload
        self.assertEqual(payload, b"0\n")
        self.assertEqual(json.loads(out)["env"], {"GOOD": "1"})

    def test_unknown_command(self):
        r = self.w.run("no-such-command")
        self.assertEqual(r.code, 127)
        self.assertIn(b"unknown command 'no-such-command'", r.stderr)
        self.assertEqual(r.raw_exit, b"127\n")

    def test_malformed_env_entries_are_dropped(self):
        w = self.w
        w.send("E", b"NOEQUALS")
        w.send("E", b"=leading")
        w.send("E", b"EMPTY=")
        w.send("E", b"EQ=a=b")
        w.send("C", b"info")
        ty, payload = w.read_chunk()
        self.assertEqual(ty, "1")
        self.assertEqual(json.loads(payload)["env"], {"EMPTY": "", "EQ": "a=b"})
        self.assertEqual(w.read_chunk(), ("X", b"0\n"))

    def test_unknown_interrupt_reason_is_ignored(self):
        w = self.w
        w.start("sleep")
        self.assertEqual(w.read_chunk(), ("1", b"ready\n"))
        w.send("i", b"SIGNOPE")
        with self.assertRaises(TimeoutError):
            w.read_chunk(0.3)
        w.send("i", b"hangup")
        ty, payload = w.read_chunk()
        while ty == "2":
            ty, payload = w.read_chunk()
        self.assertEqual((ty, payload), ("X", b"129\n"))

if __name__ == "__main__":
    unittest.main()
