"""argv, process identity and the cold fallback, warm against cold, byte for byte.

A console script (a real file with a #! line, as pip writes them) imports a module that
copies argv at import in every way the SDK handles (the list itself as a default, slices,
bytes and tuple copies, a module-level ArgumentParser) and prints what a program can see
of its own identity. Each case runs cold (the script executed by the kernel) and warm
(`python3 -m ngw entrypoint` with the driver), and the two must be identical.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import driver
from support import client_env

RUNNER = [sys.executable, "-m", "ngw"]

MODULE = r'''
import argparse, json, os, sys
ARGV = sys.argv
ARGS = sys.argv[1:]
BARGS = [os.fsencode(a) for a in sys.argv]
TARGS = tuple(sys.argv[1:])
parser = argparse.ArgumentParser()
parser.add_argument("words", nargs="*")
parser.add_argument("--raise", dest="raise_", action="store_true")
parser.add_argument("--hash", action="store_true")


def main(args=sys.argv):
    return list(args)


def main_slice(args=sys.argv[1:]):
    return list(args)


def main_kw(*, args=sys.argv[1:]):
    return list(args)


def _read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "backslashreplace")


def report():
    opts = parser.parse_args()
    if opts.raise_:
        raise ValueError("raised on purpose")
    try:
        cwd = os.getcwd()
    except OSError as e:
        cwd = type(e).__name__
    print(json.dumps({
        "main": main(), "slice": main_slice(), "kw": main_kw(), "ARGV": ARGV is sys.argv,
        "ARGS": ARGS, "BARGS": [b.decode("utf-8", "surrogateescape") for b in BARGS],
        "TARGS": list(TARGS), "prog": parser.prog, "words": opts.words,
        "orig_argv": sys.orig_argv, "executable": sys.executable, "path": sys.path,
        "comm": _read("/proc/self/comm"), "cmdline": _read("/proc/self/cmdline").rstrip("\0"),
        "main_file": getattr(sys.modules["__main__"], "__file__", None), "cwd": cwd,
        "hash": hash("ngw") if opts.hash else None,
        "env": sorted(k for k in os.environ if k.startswith(("PYTHON", "NGW"))),
    }, indent=1))
    return 3
'''


class Identity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ngw-identity-")
        with open(os.path.join(cls.tmp, "capture_ngw.py"), "w") as f:
            f.write(MODULE)
        os.mkdir(os.path.join(cls.tmp, "bin"))
        cls.script = os.path.join(cls.tmp, "bin", "capt")
        with open(cls.script, "w") as f:
            f.write("#!%s\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                    "from capture_ngw import report\nif __name__ == '__main__':\n"
                    "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                    "    sys.exit(report())\n" % sys.executable)
        os.chmod(cls.script, 0o755)
        cls.env = client_env(PYTHONPATH=cls.tmp)
        cls.w = driver.Worker(
            RUNNER + ["entrypoint", "capt=capture_ngw:report", "--argv0", "capt=" + cls.script],
            env=driver.worker_env({"PYTHONPATH": driver.SRC + os.pathsep + cls.tmp}))
        cls.w.hello()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.w.quit()
        finally:
            cls.w.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def both(self, args, env=None, cwd=None, cold_cwd=None, extra=()):
        env = dict(self.env if env is None else env)
        cwd = cwd or self.tmp
        cold = subprocess.run([self.script] + list(args), env=env, cwd=cold_cwd or cwd,
                              capture_output=True, timeout=60)
        warm = self.w.run("capt", list(args), env=env, cwd=cwd, extra=extra)
        return cold, warm

    def assertSame(self, cold, warm):
        self.assertEqual(warm.stderr.decode(errors="replace"),
                         cold.stderr.decode(errors="replace"))
        self.assertEqual(warm.stdout.decode(errors="replace"),
                         cold.stdout.decode(errors="replace"))
        self.assertEqual(warm.code, cold.returncode)

    # /proc/<pid>/cmdline: the worker rewrites its argv area in place; the area's end
    # moves only with CAP_SYS_RESOURCE, so without it the rest of the area reads as NULs
    # (a documented difference; `ps` shows the same words). The report strips them.

    def test_argv_copies_identity_and_path(self):
        for args in (["a", "b"], [], ["", "é ü", "--", "-x"]):
            cold, warm = self.both(args)
            self.assertSame(cold, warm)
            self.assertEqual(warm.notices, [])

    def test_traceback_has_the_console_scripts_frame_and_no_runner_frame(self):
        cold, warm = self.both(["--raise"])
        self.assertIn(b'File "%s", line 8, in <module>' % self.script.encode(), cold.stderr)
        self.assertSame(cold, warm)

    def test_argparse_error_uses_the_programs_name(self):
        cold, warm = self.both(["--no-such-option"])
        self.assertIn(b"usage: capt", cold.stderr)
        self.assertSame(cold, warm)

    def test_interpreter_wide_settings_run_cold_and_say_why(self):
        for name, value in (("PYTHONHASHSEED", "1"), ("PYTHONWARNINGS", "error"),
                            ("PYTHONOPTIMIZE", "1"), ("PYTHONDEVMODE", "1"),
                            ("PYTHONPATH", self.tmp + os.pathsep + "/nonexistent")):
            env = dict(self.env)
            env[name] = value
            args = ["--hash"] if name == "PYTHONHASHSEED" else []
            cold, warm = self.both(args, env=env)
            self.assertSame(cold, warm)
            self.assertEqual([n["kind"] for n in warm.notices], ["fallback"], name)
            self.assertIn(name, warm.notices[0]["message"])
            self.assertEqual(warm.notices[0]["session"], self.w.session_counter)
        self.assertIn("ngw: fallback: PYTHONHASHSEED differs", self.w.log())

    def test_deleted_working_directory(self):
        gone = tempfile.mkdtemp(prefix="ngw-gone-")
        # The client: a process whose working directory has been deleted.
        client = subprocess.Popen(["sh", "-c", "cd '%s' && rmdir '%s' && exec sleep 60"
                                   % (gone, gone)])
        try:
            deadline = time.monotonic() + 10
            while os.path.exists(gone) and time.monotonic() < deadline:
                time.sleep(0.01)
            cold = subprocess.run(["sh", "-c", "mkdir '%s' && cd '%s' && rmdir '%s' && "
                                   "exec '%s' x" % (gone, gone, gone, self.script)],
                                  env=self.env, capture_output=True, timeout=60)
            warm = self.w.run("capt", ["x"], env=self.env, cwd=gone,
                              extra=[("NGW_CLIENT_PID", str(client.pid))])
            self.assertIn(b'"cwd": "FileNotFoundError"', cold.stdout)
            self.assertSame(cold, warm)
        finally:
            client.send_signal(signal.SIGKILL)
            client.wait()


class Stale(unittest.TestCase):
    """A preloaded module edited between two runs: the second run prints the new value."""

    def _run(self, host_features):
        tmp = tempfile.mkdtemp(prefix="ngw-stale-")
        try:
            module = os.path.join(tmp, "stale_ngw.py")
            with open(module, "w") as f:
                f.write("VALUE = 1\n\ndef main():\n    print(VALUE)\n")
            env = client_env(PYTHONPATH=tmp)
            w = driver.Worker(RUNNER + ["entrypoint", "st=stale_ngw:main"],
                              env=driver.worker_env({"PYTHONPATH": driver.SRC + os.pathsep + tmp}),
                              host_features=host_features)
            try:
                w.hello()
                r = w.run("st", env=env)
                self.assertEqual((r.code, bytes(r.stdout), r.notices), (0, b"1\n", []))
                with open(module, "w") as f:
                    f.write("VALUE = 'two, and longer'\n\ndef main():\n    print(VALUE)\n")
                r = w.run("st", env=env)
                self.assertEqual((r.code, bytes(r.stdout), bytes(r.stderr)),
                                 (0, b"two, and longer\n", b""))
                # It retires: no further session; it exits 0 once the session is over.
                self.assertIsNone(w.read_chunk(10))
                self.assertEqual(w.proc.wait(10), 0)
                self.assertIn("ngw: stale: code changed on disk: %s changed" % module, w.log())
                return r
            finally:
                w.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_edited_module_with_notices(self):
        r = self._run("notices")
        self.assertEqual([n["kind"] for n in r.notices], ["stale", "retire", "fallback"])
        self.assertIn("stale", r.notices[2]["message"])

    def test_edited_module_without_notices(self):
        r = self._run(None)
        self.assertEqual(r.notices, [])


class Adaptive(unittest.TestCase):
    """Modules a session imported are preloaded after it, and by the next worker."""

    def test_learned_between_sessions_and_across_restarts(self):
        tmp = tempfile.mkdtemp(prefix="ngw-adaptive-")
        try:
            with open(os.path.join(tmp, "lazy_ngw.py"), "w") as f:
                f.write("import sys\n\ndef main():\n    import fractions, statistics\n"
                        "    print(fractions.Fraction(1, 3), 'fractions' in sys.modules)\n")
            env = client_env(PYTHONPATH=tmp)
            wenv = driver.worker_env({"PYTHONPATH": driver.SRC + os.pathsep + tmp,
                                      "NGW_STATE_DIR": tmp})
            argv = RUNNER + ["entrypoint", "lazy=lazy_ngw:main"]
            w = driver.Worker(argv, env=wenv)
            try:
                w.hello()
                first = w.run("lazy", env=env)
                deadline = time.monotonic() + 10
                while "preloaded" not in w.log() and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertIn("sessions imported (", w.log())
                second = w.run("lazy", env=env)
                self.assertEqual((bytes(first.stdout), first.code), (b"1/3 True\n", 0))
                self.assertEqual((bytes(second.stdout), second.code), (b"1/3 True\n", 0))
                self.assertEqual(second.notices, [])
                w.quit()
            finally:
                w.close()
            cache = [n for n in os.listdir(tmp) if n.startswith("preload-test-")]
            self.assertEqual(len(cache), 1, os.listdir(tmp))
            w = driver.Worker(argv, env=wenv)
            try:
                w.hello()
                self.assertIn("that earlier sessions imported", w.log())
                self.assertEqual(bytes(w.run("lazy", env=env).stdout), b"1/3 True\n")
                w.quit()
            finally:
                w.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
