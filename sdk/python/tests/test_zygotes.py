"""Several zygotes per worker: a session whose key (what the preload may have captured:
interpreter-wide settings, the environment its imports read, terminals) is not the
worker's runs cold once, then warm in a sub-zygote started for that key; at most
NGW_MAX_ZYGOTES zygotes, least recently used retired; none outlives the worker; one that
dies during a session ends that session with a message, and the next one works."""

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import driver
from ngw import _wire, _zygotes
from ngw._session import HeaderBuilder
from support import client_env

RUNNER = [sys.executable, "-m", "ngw"]

MODULE = r'''
import json, os, sys, time


def main():
    if sys.argv[1:2] == ["cat"]:
        data = sys.stdin.buffer.read()
        sys.stdout.buffer.write(data)
        sys.stderr.write("%d bytes\n" % len(data))
        return 3
    if sys.argv[1:2] == ["sleep"]:
        print(os.getppid(), flush=True)
        time.sleep(60)
        return 0
    print(json.dumps({"hash": hash("x"), "ppid": os.getppid(), "pid": os.getpid(),
                      "seed": os.environ.get("PYTHONHASHSEED"),
                      "env": [k + "=" + v for k, v in os.environ.items()
                              if k.startswith("LC_") or k == "LANG"]}))
    return 0
'''

# As IPython does: whether the streams are terminals, decided once at import.
TTY_MODULE = r'''
import os, sys

AT_IMPORT = [sys.stdout.isatty(), sys.stderr.isatty()]


def main():
    print(AT_IMPORT, [os.isatty(1), os.isatty(2)], os.getppid())
'''

# A deprecation warning at import: shown only when the client's PYTHONWARNINGS asks.
WARN_MODULE = r'''
import warnings

warnings.warn("zyg_warn is deprecated", DeprecationWarning)


def main():
    print("main ran")
'''

# A preload of the worker's (no program imports it) that warns only when asked to.
WARNLIB_MODULE = r'''
import warnings

warnings.warn("zyg_warnlib is pending deprecation", PendingDeprecationWarning)
'''


def cold_hash(seed):
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run([sys.executable, "-c", "print(hash('x'))"], env=env,
                         capture_output=True, check=True, timeout=60).stdout
    return int(out)


def alive(pid):
    """Whether `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def is_sub_zygote(pid):
    """Whether `pid` was started as a sub-zygote: the worker starts those with
    NGW_ZYGOTE_KEY in their environment; its spares and session children are forks of
    it, with its environment."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            environ = f.read().split(b"\0")
    except OSError:
        return False
    return any(entry.startswith(b"NGW_ZYGOTE_KEY=") for entry in environ)


def wait_gone(pid, timeout=10):
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


class ZygoteWorker(unittest.TestCase):
    """A worker serving the modules above, and the driver playing ngd for it."""

    max_zygotes = 3
    host_features = "notices"

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ngw-zygotes-")
        with open(os.path.join(self.tmp, "zyg_ngw.py"), "w") as f:
            f.write(MODULE)
        with open(os.path.join(self.tmp, "zyg_tty.py"), "w") as f:
            f.write(TTY_MODULE)
        with open(os.path.join(self.tmp, "zyg_warn.py"), "w") as f:
            f.write(WARN_MODULE)
        with open(os.path.join(self.tmp, "zyg_warnlib.py"), "w") as f:
            f.write(WARNLIB_MODULE)
        self.env = client_env(PYTHONPATH=self.tmp)
        extra = {"PYTHONPATH": driver.SRC + os.pathsep + self.tmp, "NGW_STATE_DIR": self.tmp}
        if self.max_zygotes is not None:
            extra["NGW_MAX_ZYGOTES"] = str(self.max_zygotes)
        self.w = driver.Worker(RUNNER + ["entrypoint", "zyg=zyg_ngw:main", "ztty=zyg_tty:main",
                                          "zwarn=zyg_warn:main", "--preload", "zyg_tty",
                                          "--preload", "zyg_warnlib"],
                               env=driver.worker_env(extra), host_features=self.host_features)
        self.w.hello()

    def tearDown(self):
        try:
            self.w.stop()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


class Zygotes(ZygoteWorker):
    def run_zyg(self, args=(), **env):
        e = dict(self.env)
        e.update(env)
        r = self.w.run("zyg", list(args), env=e)
        self.assertEqual(r.code, 0, "%r\nlog:\n%s" % (r, self.w.log()))
        return r, json.loads(bytes(r.stdout))

    def warm_in_sub_zygote(self, seed, timeout=60):
        """Runs `zyg` with PYTHONHASHSEED=seed until a run is warm (no notice: its
        sub-zygote said hello); returns that run's report."""
        deadline = time.monotonic() + timeout
        while True:
            r, got = self.run_zyg(PYTHONHASHSEED=seed)
            if not r.notices:
                return got
            self.assertEqual([n["kind"] for n in r.notices], ["fallback"], r.notices)
            self.assertLess(time.monotonic(), deadline, self.w.log())
            time.sleep(0.1)

    def test_hash_seed_runs_cold_then_warm_in_a_sub_zygote(self):
        root = self.w.proc.pid
        r, first = self.run_zyg(PYTHONHASHSEED="1")
        self.assertEqual(first["hash"], cold_hash("1"))
        self.assertEqual(first["ppid"], root)  # the cold way: exec'd in the root's child
        self.assertEqual([n["kind"] for n in r.notices], ["fallback"])
        message = r.notices[0]["message"]
        self.assertIn("PYTHONHASHSEED differs", message)
        self.assertIn("started a zygote for PYTHONHASHSEED='1'", message)
        self.assertEqual(r.notices[0]["session"], self.w.session_counter)
        warm = self.warm_in_sub_zygote("1")
        self.assertEqual(warm["hash"], cold_hash("1"))
        self.assertEqual(warm["seed"], "1")
        sub = warm["ppid"]
        self.assertNotEqual(sub, root)
        self.assertEqual(self.sub_zygotes(), [sub])
        # The same sub-zygote again; the worker's own key still runs in the root.
        self.assertEqual(self.warm_in_sub_zygote("1")["ppid"], sub)
        r, own = self.run_zyg()
        self.assertEqual((own["ppid"], r.notices), (root, []))
        self.assertIn("ngw: started a zygote (pid %d) for PYTHONHASHSEED='1'" % sub,
                      self.w.log())

    def test_terminals_asked_at_import_are_part_of_the_key(self):
        root = self.w.proc.pid
        r = self.w.run("ztty", env=self.env, tty=(0, 1, 1))
        self.assertEqual(r.code, 0, r)
        self.assertEqual(bytes(r.stdout), b"[True, True] [True, True] %d\n" % root)  # cold
        self.assertIn("fd 1 a terminal, fd 2 a terminal", r.notices[0]["message"])
        deadline = time.monotonic() + 60
        while r.notices:
            self.assertLess(time.monotonic(), deadline, self.w.log())
            time.sleep(0.1)
            r = self.w.run("ztty", env=self.env, tty=(0, 1, 1))
        self.assertEqual(r.code, 0, r)
        printed = bytes(r.stdout).split(b"] ")
        self.assertEqual(printed[:2], [b"[True, True", b"[True, True"])
        self.assertNotEqual(int(printed[2]), root)  # warm, in a zygote that has terminals
        # What it logged on its terminal reached the worker's log, naming its key.
        self.assertIn("ngw (zygote for fd 1 a terminal, fd 2 a terminal): the preloaded "
                      "imports read", self.w.log())
        # Without terminals: the worker's own key, warm in the root.
        r = self.w.run("ztty", env=self.env)
        self.assertEqual((bytes(r.stdout), r.notices),
                         (b"[False, False] [False, False] %d\n" % root, []))

    def test_a_fourth_key_retires_the_least_recently_used(self):
        subs = {seed: self.warm_in_sub_zygote(seed)["ppid"] for seed in ("1", "2")}
        self.assertEqual(self.warm_in_sub_zygote("1")["ppid"], subs["1"])  # "2" is LRU now
        r, _ = self.run_zyg(PYTHONHASHSEED="3")
        self.assertEqual([n["kind"] for n in r.notices], ["fallback"])
        self.assertIn("started a zygote for PYTHONHASHSEED='3' (retired the one for "
                      "PYTHONHASHSEED='2', the least recently used)", r.notices[0]["message"])
        self.assertTrue(wait_gone(subs["2"]), self.w.log())
        self.assertTrue(alive(subs["1"]))
        third = self.warm_in_sub_zygote("3")["ppid"]
        self.assertNotIn(third, subs.values())
        self.assertEqual(self.warm_in_sub_zygote("1")["ppid"], subs["1"])
        # Key "2" again: its zygote is gone, so cold once, with a new one started.
        r, got = self.run_zyg(PYTHONHASHSEED="2")
        self.assertEqual(got["hash"], cold_hash("2"))
        self.assertIn("started a zygote for PYTHONHASHSEED='2'", r.notices[0]["message"])

    def test_quit_and_death_of_the_root_leave_no_sub_zygote(self):
        sub = self.warm_in_sub_zygote("1")["ppid"]
        self.assertEqual(self.w.quit(), 0)
        self.assertTrue(wait_gone(sub), "sub-zygote %d outlived its worker's quit" % sub)
        # A root killed outright: its sub-zygotes die with it (PR_SET_PDEATHSIG).
        self.tearDown()
        self.setUp()
        sub = self.warm_in_sub_zygote("1")["ppid"]
        os.kill(self.w.proc.pid, signal.SIGKILL)
        self.w.proc.wait()
        self.assertTrue(wait_gone(sub), "sub-zygote %d outlived its killed worker" % sub)

    def test_stdin_output_and_interrupts_pass_through_the_sub_zygote(self):
        sub = self.warm_in_sub_zygote("1")["ppid"]
        e = dict(self.env, PYTHONHASHSEED="1")
        data = os.urandom(1 << 20)
        r = self.w.run("zyg", ["cat"], env=e, stdin=data)
        self.assertEqual((r.code, bytes(r.stderr), r.notices), (3, b"1048576 bytes\n", []))
        self.assertEqual(bytes(r.stdout), data)
        r = self.w.run("zyg", ["sleep"], env=e, stdin=None, interrupt="hangup",
                       interrupt_on=b"\n")
        self.assertEqual((r.code, int(bytes(r.stdout))), (129, sub))
        r = self.w.run("zyg", ["sleep"], env=e, stdin=None, interrupt="SIGTERM",
                       interrupt_on=b"\n")
        self.assertEqual(r.code, 143)
        self.assertTrue(alive(sub))
        self.w.ping(b"still there")

    def test_a_zygote_that_cannot_start_is_not_started_again(self):
        # The client's search path lacks the program's module: a cold run fails to import
        # it, and so does a zygote started with that path.
        e = dict(self.env, PYTHONPATH="/nonexistent-ngw")
        r = self.w.run("zyg", env=e)
        self.assertEqual(r.code, 1)
        self.assertIn(b"ModuleNotFoundError: No module named 'zyg_ngw'", bytes(r.stderr))
        self.assertIn("started a zygote for PYTHONPATH='/nonexistent-ngw'",
                      r.notices[0]["message"])
        deadline = time.monotonic() + 60
        while True:
            self.assertLess(time.monotonic(), deadline, self.w.log())
            time.sleep(0.1)
            r = self.w.run("zyg", env=e)
            self.assertEqual(r.code, 1)
            self.assertNotIn("started a zygote", r.notices[0]["message"])
            if "could not start" in r.notices[0]["message"]:
                break
        self.assertIn("the zygote for PYTHONPATH='/nonexistent-ngw' could not start "
                      "(preload failed: entry point zyg=zyg_ngw:main: ModuleNotFoundError",
                      r.notices[0]["message"])
        for pid in self.sub_zygotes():  # the one that failed, exiting
            self.assertTrue(wait_gone(pid), pid)

    def sub_zygotes(self):
        """The worker's live sub-zygotes. Not told apart by their session: a spare the
        worker has just forked is in the worker's session until it makes its own."""
        return [pid for pid, state in driver.worker_pids_children(self.w.proc.pid)
                if state != "Z" and is_sub_zygote(pid)]

    def test_stale_code_retires_the_worker_with_its_sub_zygotes(self):
        sub = self.warm_in_sub_zygote("1")["ppid"]
        with open(os.path.join(self.tmp, "zyg_ngw.py"), "a") as f:
            f.write("\n# edited\n")
        r = self.w.run("zyg", env=dict(self.env, PYTHONHASHSEED="1"))
        self.assertEqual(r.code, 0, r)
        self.assertEqual(json.loads(bytes(r.stdout))["hash"], cold_hash("1"))
        self.assertEqual([n["kind"] for n in r.notices], ["stale", "retire", "fallback"])
        self.assertIsNone(self.w.read_chunk(10))
        self.assertEqual(self.w.proc.wait(10), 0)
        self.assertTrue(wait_gone(sub), "sub-zygote %d outlived its retired worker" % sub)

    def test_a_program_s_import_warnings_are_replayed_in_its_zygote(self):
        # The client's PYTHONWARNINGS shows the program's deprecation warning at import:
        # the zygote for that key replays it (docs/ngw.md 12.2), byte for byte as cold.
        e = dict(self.env, PYTHONWARNINGS="always::DeprecationWarning")
        first = self.w.run("zwarn", env=e)
        self.assertIn(b"DeprecationWarning: zyg_warn is deprecated", bytes(first.stderr))
        self.assertIn("started a zygote for PYTHONWARNINGS='always::DeprecationWarning'",
                      first.notices[0]["message"])
        deadline = time.monotonic() + 60
        while True:
            self.assertLess(time.monotonic(), deadline, self.w.log())
            time.sleep(0.1)
            r = self.w.run("zwarn", env=e)
            self.assertEqual((bytes(r.stdout), bytes(r.stderr), r.code),
                             (bytes(first.stdout), bytes(first.stderr), first.code))
            if not r.notices:
                break

    def test_a_sub_zygote_s_own_fallbacks_are_reported(self):
        # With the client's PYTHONWARNINGS a preload warns: the zygote for that key has
        # printed a warning, so it runs its sessions the cold way, and its fallback
        # notices reach ngd through the worker.
        e = dict(self.env, PYTHONWARNINGS="always::PendingDeprecationWarning")
        first = self.w.run("zyg", env=e)
        deadline = time.monotonic() + 60
        while True:
            self.assertLess(time.monotonic(), deadline, self.w.log())
            time.sleep(0.1)
            r = self.w.run("zyg", env=e)
            self.assertEqual(r.code, 0, r)
            self.assertEqual([n["kind"] for n in r.notices], ["fallback"])
            if "printed 1 warning" in r.notices[0]["message"]:
                break
            self.assertEqual(json.loads(bytes(r.stdout))["ppid"], self.w.proc.pid)
        self.assertEqual(r.notices[0]["session"], self.w.session_counter)
        self.assertIn("zyg_warnlib is pending deprecation", r.notices[0]["message"])
        sub = self.sub_zygotes()
        self.assertEqual(json.loads(bytes(r.stdout))["ppid"], sub[0])  # its cold child
        self.assertIn("ngw (zygote for PYTHONWARNINGS='always::PendingDeprecationWarning'):"
                      " fallback: the worker's imports printed 1 warning", self.w.log())
        self.assertEqual(first.code, 0)

    def test_a_sub_zygote_dying_mid_session_ends_that_session_and_the_next_works(self):
        sub = self.warm_in_sub_zygote("1")["ppid"]
        e = dict(self.env, PYTHONHASHSEED="1")
        self.w.start("zyg", ["sleep"], env=e)
        out = bytearray()
        while not out.endswith(b"\n"):
            ty, payload = self.w.read_chunk(30)
            if ty == "S":
                self.w.send(".")
            else:
                self.assertEqual(ty, "1", (ty, payload))
                out += payload
        self.assertEqual(int(out), sub)  # it runs in the sub-zygote
        os.kill(sub, signal.SIGKILL)
        stderr, notices = bytearray(), []
        while True:
            ty, payload = self.w.read_chunk(30)
            if ty == "2":
                stderr += payload
            elif ty == "n":
                notices.append(json.loads(payload))
            elif ty == "X":
                break
            elif ty == "S":
                self.w.send(".")
        self.assertEqual(payload, b"137\n")
        self.assertEqual(bytes(stderr), b"ngw: the zygote for PYTHONHASHSEED='1' died during "
                                        b"the command (killed by SIGKILL); run it again\n")
        self.assertEqual([n["kind"] for n in notices], ["zygote"])
        # The next session with that key runs cold and starts another zygote; later ones
        # are warm in it.
        r, got = self.run_zyg(PYTHONHASHSEED="1")
        self.assertEqual((got["hash"], got["ppid"]), (cold_hash("1"), self.w.proc.pid))
        self.assertIn("started a zygote", r.notices[0]["message"])
        again = self.warm_in_sub_zygote("1")
        self.assertNotIn(again["ppid"], (sub, self.w.proc.pid))

    def test_a_record_from_ngd_is_ignored_and_its_descriptors_closed(self):
        """Only a sub-zygote takes a session record: from ngd it is an unknown chunk."""
        r, w = os.pipe()
        try:
            self.w.send(_wire.RECORD, _zygotes.record(record_info())[_wire.HEADER_LEN:],
                        fds=[w])
            os.close(w)
            w = -1
            res, got = self.run_zyg()
            self.assertEqual((got["ppid"], res.notices), (self.w.proc.pid, []))
            self.assertIn("ngw: ignoring chunk 'r' between sessions", self.w.log())
            # End of file: neither the root nor a child of its holds the write end.
            self.assertTrue(select.select([r], [], [], 10)[0], self.w.log())
            self.assertEqual(os.read(r, 1), b"")
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)


def record_info():
    """A session on the client's terminal as the root reads it (its descriptors taken)."""
    h = HeaderBuilder()
    h.add(_wire.ARG, b"--flag")
    h.add(_wire.ENV, b"PYTHONHASHSEED=1")
    h.add(_wire.ENV, b"NGW_CLIENT_FDS=0,1,2")
    h.add(_wire.ENV, b"NGW_CLIENT_PTY=0,1,2")
    h.add(_wire.DIR, b"/tmp")
    info = h.finish(b"zyg", 0o022)
    info.fds, info.pty = (0, 1, 2), (0, 1, 2)
    return info


class Records(unittest.TestCase):
    """The session record a root sends its sub-zygote in place of the header (chunk `r`,
    docs/ngw.md 12.4)."""

    def test_a_record_gives_the_session_back_as_the_root_read_it(self):
        info = record_info()
        chunk = _zygotes.record(info)
        length, ty = _wire.HEADER.unpack_from(chunk)
        self.assertEqual((ty, length), (_wire.RECORD, len(chunk) - _wire.HEADER_LEN))
        fds = [10, 11, 12]
        got, direct = _zygotes.from_record(chunk[_wire.HEADER_LEN:], fds)
        self.assertEqual((got.to_wire(), direct, fds), (info.to_wire(), None, [10, 11, 12]))

    def test_ngd_s_channel_rides_after_the_client_s_descriptors(self):
        fds = [10, 11, 12, 13]
        got, direct = _zygotes.from_record(_zygotes.record(record_info())[_wire.HEADER_LEN:],
                                           fds)
        self.assertEqual((direct, fds), (13, [10, 11, 12]))

    def test_a_record_that_does_not_match_its_descriptors_is_a_protocol_error(self):
        payload = _zygotes.record(record_info())[_wire.HEADER_LEN:]
        for bad, nfds in ((payload, 0), (payload, 2), (payload, 5), (payload[:-3], 3),
                          (b"junk", 0)):
            with self.assertRaises(_wire.ProtocolError):
                _zygotes.from_record(bad, list(range(10, 10 + nfds)))


class Keys(unittest.TestCase):
    """Conditions.key: equal to the zygote's own exactly when key_reason finds nothing."""

    def test_key_agrees_with_key_reason(self):
        from ngw._exact import SDK_DIR, Conditions
        from ngw._session import SessionInfo

        worker_env = {"PYTHONPATH": SDK_DIR + ":/plugin", "LANG": "C.UTF-8", "TERM": "dumb"}
        c = Conditions(worker_env)
        c.env_read = {"TERM": "dumb", "HOME": "/root", "AWS_DATA_PATH": None}
        c.exempt = {"AWS_DATA_PATH"}
        c.tty_asked = {1: False, 5: True}
        sessions = [
            ({"LANG": "C.UTF-8", "TERM": "dumb", "HOME": "/root"}, (0, 0, 0), True),
            ({"LANG": "C.UTF-8", "TERM": "dumb", "HOME": "/root", "AWS_DATA_PATH": "/x"},
             (1, 0, 1), True),  # exempt variable; terminals nobody asked about
            ({"LANG": "C.UTF-8", "TERM": "dumb", "HOME": "/root", "PYTHONPATH": "/plugin"},
             (0, 0, 0), True),  # the same search path without the SDK's directory
            ({"LANG": "C.UTF-8", "TERM": "dumb", "HOME": "/root", "PYTHONHASHSEED": ""},
             (0, 0, 0), True),  # empty is unset
            ({"LANG": "C.UTF-8", "TERM": "dumb", "HOME": "/root"}, (0, 1, 0), False),
            ({"LANG": "C.UTF-8", "TERM": "xterm", "HOME": "/root"}, (0, 0, 0), False),
            ({"LANG": "C.UTF-8", "TERM": "dumb"}, (0, 0, 0), False),  # HOME unset
            ({"TERM": "dumb", "HOME": "/root"}, (0, 0, 0), False),  # LANG unset
            ({"LANG": "C.UTF-8", "TERM": "dumb", "HOME": "/root", "PYTHONPATH": "/other"},
             (0, 0, 0), False),
            ({"LANG": "C.UTF-8", "TERM": "dumb", "HOME": "/root", "PYTHONHASHSEED": "0"},
             (0, 0, 0), False),
        ]
        keys = []
        for env, tty, same in sessions:
            info = SessionInfo.blank(env)
            info.tty = tuple(bool(t) for t in tty)
            with self.subTest(env=env, tty=tty):
                self.assertEqual(c.key_reason(info) is None, same)
                self.assertEqual(c.key(info) == c.key(), same)
                keys.append(c.key(info))
        # Sessions that differ from the zygote in different ways have different keys.
        others = [k for k, (_, _, same) in zip(keys, sessions) if not same]
        self.assertEqual(len(set(others)), len(others))


class NoColdForm(unittest.TestCase):
    """A worker script's own fork-mode commands (no cold form: they ran warm in the
    worker whatever the key, and the log said so) run in a zygote of their key too."""

    def test_warm_in_the_root_then_in_a_zygote_of_the_session_s_key(self):
        from support import BASIC

        w = driver.Worker([sys.executable, BASIC], env=driver.worker_env({"NGW_MAX_ZYGOTES": "3"}))
        try:
            w.hello()
            env = client_env(PYTHONHASHSEED="1")
            got = json.loads(bytes(w.run("finfo", env=env).stdout))
            self.assertEqual(got["ppid"], w.proc.pid)
            deadline = time.monotonic() + 60
            while got["ppid"] == w.proc.pid:
                self.assertLess(time.monotonic(), deadline, w.log())
                time.sleep(0.1)
                r = w.run("finfo", env=env)
                self.assertEqual((r.code, r.notices), (0, []))
                got = json.loads(bytes(r.stdout))
            self.assertEqual(got["env"], env)
            self.assertIn("finfo runs warm although PYTHONHASHSEED differs", w.log())
            w.quit()
        finally:
            w.close()


LOCALE = ("LC_ALL", "LC_CTYPE", "LANG", "PYTHONCOERCECLOCALE", "PYTHONUTF8")


def cold_locale(env):
    """The locale variables a cold interpreter has in its environment, in their order."""
    code = ("import os; print('\\n'.join(k + '=' + v for k, v in os.environ.items() "
            "if k.startswith('LC_') or k == 'LANG'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         check=True, timeout=60).stdout.decode()
    return out.split()


class StartUpSetsTheLocale(unittest.TestCase):
    """With no locale set, CPython sets LC_CTYPE as it starts (PEP 538), in the worker as
    in a cold run. Sessions are compared with what the worker was given, not with what
    start-up made of it, and a warm child gets what start-up set: a client without a
    locale runs warm in the root with the environment a cold run has. A client that sets
    LC_CTYPE itself has another key: cold once, then warm in a zygote for it."""

    def test_a_client_without_a_locale_runs_warm_as_cold(self):
        tmp = tempfile.mkdtemp(prefix="ngw-zygotes-")
        self.addCleanup(shutil.rmtree, tmp, True)
        with open(os.path.join(tmp, "zyg_ngw.py"), "w") as f:
            f.write(MODULE)
        env = driver.worker_env({"PYTHONPATH": driver.SRC + os.pathsep + tmp,
                                 "NGW_STATE_DIR": tmp, "NGW_MAX_ZYGOTES": "3"})
        for name in LOCALE:
            env.pop(name, None)
        w = driver.Worker(RUNNER + ["entrypoint", "zyg=zyg_ngw:main"], env=env)
        self.addCleanup(w.close)
        w.hello()
        client = {k: v for k, v in client_env(PYTHONPATH=tmp).items() if k not in LOCALE}
        coerced = cold_locale(client)
        self.assertTrue(coerced and coerced[-1].startswith("LC_CTYPE="), coerced)
        r = w.run("zyg", env=client)
        self.assertEqual((r.code, r.notices), (0, []), "%r\nlog:\n%s" % (r, w.log()))
        got = json.loads(bytes(r.stdout))
        self.assertEqual(got["ppid"], w.proc.pid)
        self.assertEqual(got["env"], coerced)

        # LC_CTYPE set by the client, to what start-up sets: another key.
        value = coerced[-1].partition("=")[2]
        client["LC_CTYPE"] = value
        r = w.run("zyg", env=client)
        self.assertEqual(r.code, 0, r)
        self.assertIn("LC_CTYPE differs from the worker's (%r, worker None)" % value,
                      r.notices[0]["message"])
        self.assertEqual(json.loads(bytes(r.stdout))["env"], cold_locale(client))
        deadline = time.monotonic() + 60
        while r.notices:
            self.assertEqual([n["kind"] for n in r.notices], ["fallback"], r.notices)
            self.assertLess(time.monotonic(), deadline, w.log())
            time.sleep(0.1)
            r = w.run("zyg", env=client)
            self.assertEqual(r.code, 0, r)
        got = json.loads(bytes(r.stdout))
        self.assertNotEqual(got["ppid"], w.proc.pid)  # warm in the zygote for that key
        self.assertEqual(got["env"], cold_locale(client))
        self.assertNotIn("cannot serve its key", w.log())
        self.assertEqual(w.quit(), 0)


class AsStarted(unittest.TestCase):
    """`as_started`: the environment as execve gave it, for what start-up sets."""

    def test_what_start_up_set_is_put_back(self):
        from ngw._exact import as_started

        now = {"PATH": "/bin", "LC_CTYPE": "C.UTF-8"}
        self.assertEqual(as_started(now, b"PATH=/bin\0"),
                         ({"PATH": "/bin"}, {"LC_CTYPE": "C.UTF-8"}))
        self.assertEqual(as_started(now, b"LC_CTYPE=C\0PATH=/bin\0"),
                         ({"PATH": "/bin", "LC_CTYPE": "C"}, {"LC_CTYPE": "C.UTF-8"}))
        self.assertEqual(as_started(now, b"PATH=/x\0LC_CTYPE=C.UTF-8\0"), (now, {}))
        self.assertEqual(as_started({"PATH": "/bin"}, b"PATH=/bin\0"), ({"PATH": "/bin"}, {}))


# A fork-mode child (here the spare) forked while the worker holds a client's descriptor
# that came with a header not read to its end: it must not keep a copy. The session may
# run elsewhere (in a sub-zygote, whose sessions the root's spare never gets), and a copy
# in an idle spare kept the client's pipes open after its command had exited.
HELD_SCRIPT = r'''
import os, select, socket
from ngw import _wire
from ngw._channel import Channel
from ngw._fork import ForkRunner

ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
chan = Channel(os.dup(theirs.fileno()))
theirs.close()
r, w = os.pipe()
# The first bytes of a header's first chunk, with the client's descriptor; the rest of
# the header has not arrived.
socket.send_fds(ours, [_wire.encode(_wire.ARG, b"x")[:3]], [w])
os.close(w)
chan.read_some()
assert len(chan.held_fds()) == 1, chan.held_fds()
runner = ForkRunner(lambda message: None, 0.1)
runner.held_fds = chan.held_fds
runner._fork_spare()
chan.drop_pending_fds()  # the worker closes its own copy when the session is done
# End of file on the pipe once nobody holds its write end: the spare closed its copy.
ready = select.select([r], [], [], 30)[0]
print("closed" if ready and os.read(r, 1) == b"" else "held")
runner.shutdown()
'''


class HeldDescriptors(unittest.TestCase):
    def test_a_child_forked_while_a_header_s_descriptors_are_held_closes_them(self):
        out = subprocess.run([sys.executable, "-c", HELD_SCRIPT], env=driver.worker_env(),
                             capture_output=True, timeout=60)
        self.assertEqual((out.stdout, out.returncode), (b"closed\n", 0), out)


def exit_mark(pid):
    """The path of the page root `pid` shares with its sub-zygote (one sub-zygote only),
    where it marks a session's X going to ngd's channel itself."""
    for name in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, name))
        except OSError:
            continue
        if "ngw-zygote-exit" in target:
            return "/proc/%d/fd/%s" % (pid, name)
    raise AssertionError("root %d shares no page with a sub-zygote" % pid)


def read_all(fd):
    data = bytearray()
    while True:
        piece = os.read(fd, 65536)
        if not piece:
            os.close(fd)
            return bytes(data)
        data += piece


class OnTheClientsDescriptors(ZygoteWorker):
    """A sub-zygote's session on the client's descriptors: nothing goes through the root
    but its X, and the sub-zygote writes that to ngd's channel itself (docs/ngw.md 12.4);
    if it dies while it does, the root cannot know whether the X arrived and writes
    nothing more."""

    host_features = "notices,fds"

    def on_descriptors(self, how, args, env):
        """`how` ("start" or "run") of `zyg` on descriptors of its own (stdin /dev/null):
        (its result, the ends of its stdout and stderr)."""
        e = dict(self.env)
        e.update(env)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            extra = {"stdin": None} if how == "run" else {}
            r = getattr(self.w, how)("zyg", list(args), env=e, fds=[null, out_w, err_w],
                                     **extra)
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
        return r, out_r, err_r

    def start(self, args=(), **env):
        return self.on_descriptors("start", args, env)[1:]

    def run_fds(self, args=(), **env):
        r, out_r, err_r = self.on_descriptors("run", args, env)
        self.assertEqual(r.taken, b"", r)
        return r, read_all(out_r), read_all(err_r)

    def warm(self, timeout=60):
        """Runs `zyg` with PYTHONHASHSEED=1 until a run is warm; its report."""
        deadline = time.monotonic() + timeout
        while True:
            r, out, _ = self.run_fds(PYTHONHASHSEED="1")
            self.assertEqual(r.code, 0, self.w.log())
            if not r.notices:
                return json.loads(out)
            self.assertLess(time.monotonic(), deadline, self.w.log())
            time.sleep(0.1)

    def mark(self):
        with open(exit_mark(self.w.proc.pid), "rb") as f:
            return f.read(1)

    def test_the_x_comes_from_the_sub_zygote_as_it_would_through_the_root(self):
        got = self.warm()
        self.assertEqual(got["hash"], cold_hash("1"))
        self.assertTrue(is_sub_zygote(got["ppid"]))
        self.assertEqual(self.mark(), b"\x01")  # its X went to ngd's channel
        r, out, err = self.run_fds(["cat"], PYTHONHASHSEED="1")
        self.assertEqual((r.code, r.raw_exit, out, err), (3, b"3\n", b"", b"0 bytes\n"))
        self.assertEqual([c for c, _ in r.chunks], ["t", "X"])
        # A session relayed by ngd (no descriptors): its X comes through the root.
        r = self.w.run("zyg", env=dict(self.env, PYTHONHASHSEED="1"))
        self.assertEqual((r.code, json.loads(bytes(r.stdout))["ppid"]), (0, got["ppid"]))
        self.assertEqual(self.mark(), b"\x00")
        # The root's own sessions, and the sub-zygote's after it, go on.
        r, out, _ = self.run_fds()
        self.assertEqual((r.code, json.loads(out)["ppid"]), (0, self.w.proc.pid))
        r, out, _ = self.run_fds(PYTHONHASHSEED="1")
        self.assertEqual((r.code, json.loads(out)["ppid"]), (0, got["ppid"]))

    def test_a_sub_zygote_killed_during_the_command_ends_that_session_only(self):
        sub = self.warm()["ppid"]
        out_r, err_r = self.start(["sleep"], PYTHONHASHSEED="1")
        self.assertEqual(self.w.read_chunk(30), ("t", b""))
        line = bytearray()
        while not line.endswith(b"\n"):
            line += os.read(out_r, 64)
        self.assertEqual(int(line), sub)
        os.kill(sub, signal.SIGKILL)
        stderr, kinds = bytearray(), []
        while True:
            ty, payload = self.w.read_chunk(30)
            if ty == "2":
                stderr += payload
            elif ty == "n":
                kinds.append(json.loads(payload)["kind"])
            else:
                self.assertEqual(ty, "X")
                break
        self.assertEqual(payload, b"137\n")
        self.assertIn(b"died during the command (killed by SIGKILL)", stderr)
        self.assertEqual(kinds, ["zygote"])
        for fd in (out_r, err_r):
            os.close(fd)
        r, out, _ = self.run_fds(PYTHONHASHSEED="1")  # cold, and another zygote starts
        self.assertEqual((r.code, json.loads(out)["ppid"]), (0, self.w.proc.pid))

    def test_a_sub_zygote_killed_while_it_writes_the_x_leaves_ngd_s_channel_alone(self):
        # The window between the mark and the write is too short to hit: the test marks
        # the page itself while the command runs, then kills the sub-zygote.
        sub = self.warm()["ppid"]
        out_r, err_r = self.start(["sleep"], PYTHONHASHSEED="1")
        self.assertEqual(self.w.read_chunk(30), ("t", b""))
        line = bytearray()
        while not line.endswith(b"\n"):
            line += os.read(out_r, 64)
        with open(exit_mark(self.w.proc.pid), "r+b") as f:
            f.write(b"\x01")
        os.kill(sub, signal.SIGKILL)
        chunks = []
        while True:
            c = self.w.read_chunk(30)
            if c is None:
                break
            chunks.append(c[0])
        self.assertEqual(chunks, [])  # no message and no X: either could be a wrong one
        self.assertEqual(self.w.proc.wait(30), 1)
        self.assertIn("while it wrote session", self.w.log())
        for fd in (out_r, err_r):
            os.close(fd)


class OneZygote(Zygotes):
    """NGW_MAX_ZYGOTES=1: no sub-zygote, every other key runs cold."""

    max_zygotes = 1

    def test_hash_seed_runs_cold_then_warm_in_a_sub_zygote(self):
        for _ in range(3):
            r, got = self.run_zyg(PYTHONHASHSEED="1")
            self.assertEqual((got["hash"], got["ppid"]), (cold_hash("1"), self.w.proc.pid))
            self.assertEqual([n["kind"] for n in r.notices], ["fallback"])
            self.assertNotIn("zygote", r.notices[0]["message"])

    test_a_fourth_key_retires_the_least_recently_used = None
    test_terminals_asked_at_import_are_part_of_the_key = None
    test_stdin_output_and_interrupts_pass_through_the_sub_zygote = None
    test_a_zygote_that_cannot_start_is_not_started_again = None
    test_stale_code_retires_the_worker_with_its_sub_zygotes = None
    test_a_sub_zygote_s_own_fallbacks_are_reported = None
    test_a_program_s_import_warnings_are_replayed_in_its_zygote = None
    test_quit_and_death_of_the_root_leave_no_sub_zygote = None
    test_a_sub_zygote_dying_mid_session_ends_that_session_and_the_next_works = None


if __name__ == "__main__":
    unittest.main()
