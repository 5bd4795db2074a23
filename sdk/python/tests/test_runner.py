"""python3 -m ngw: the generic runner for existing programs, preload failures, the aws
CLI byte for byte, packaging, and a timing printout."""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import unittest

import driver
from support import BASIC, client_env

RUNNER = [sys.executable, "-m", "ngw"]


def aws_script():
    """The cold `aws` a shell would run: the console script next to this interpreter."""
    path = shutil.which("aws", path=os.path.dirname(sys.executable))
    if path is None:
        raise AssertionError("the aws CLI 1.x is not installed for %s (run-tests installs "
                             "it: pip install 'awscli<2')" % sys.executable)
    return path


class PreloadFailure(unittest.TestCase):
    def _refused(self, argv, expect):
        w = driver.Worker(argv)
        try:
            ty, payload = w.read_chunk(30)
            self.assertEqual(ty, "h")
            hello = json.loads(payload)
            # What ngd sees: a hello carrying an error instead of commands, then EOF and
            # exit status 78; the log has the reason and the traceback.
            self.assertEqual(hello["protocol"], 1)
            self.assertEqual(hello["pid"], w.proc.pid)
            self.assertNotIn("commands", hello)
            self.assertIn(expect, hello["error"])
            self.assertIsNone(w.read_chunk(10))
            self.assertEqual(w.proc.wait(10), 78)
            log = w.log()
            self.assertIn("ngw: worker cannot start: preload failed", log)
            self.assertIn(expect, log)
            self.assertIn("Traceback (most recent call last):", log)
        finally:
            w.close()

    def test_missing_preload_module(self):
        self._refused(RUNNER + ["entrypoint", "x=json:dumps", "--preload", "no_such_module_ngw"],
                      "No module named 'no_such_module_ngw'")

    def test_missing_entry_point_module(self):
        self._refused(RUNNER + ["entrypoint", "x=no_such_module_ngw.sub:main"],
                      "No module named 'no_such_module_ngw'")

    def test_missing_entry_point_function(self):
        self._refused(RUNNER + ["entrypoint", "x=json:no_such_function"],
                      "cannot import name 'no_such_function' from 'json'")

    def test_preload_raising(self):
        tmp = tempfile.mkdtemp()
        try:
            with open(os.path.join(tmp, "broken_ngw_mod.py"), "w") as f:
                f.write("raise RuntimeError('broken at import')\n")
            argv = RUNNER + ["entrypoint", "x=json:dumps", "--preload", "broken_ngw_mod"]
            w = driver.Worker(argv, env=driver.worker_env(
                {"PYTHONPATH": driver.SRC + os.pathsep + tmp}))
            try:
                hello = json.loads(w.read_chunk(30)[1])
                self.assertIn("RuntimeError: broken at import", hello["error"])
                self.assertEqual(w.proc.wait(10), 78)
            finally:
                w.close()
        finally:
            shutil.rmtree(tmp)


class Runner(unittest.TestCase):
    def test_script_mode_and_argv0(self):
        tmp = tempfile.mkdtemp()
        try:
            script = os.path.join(tmp, "tool")
            with open(script, "w") as f:
                f.write("import json, sys\n"
                        "print(json.dumps([__name__, sys.argv]))\n"
                        "sys.exit(int(sys.argv[1]))\n")
            w = driver.Worker(RUNNER + ["script", "tool=" + script, "--preload", "json"])
            try:
                self.assertEqual(w.hello()["commands"], ["tool"])
                r = w.run("tool", ["7", "b"], env=client_env())
                self.assertEqual(r.code, 7)
                self.assertEqual(json.loads(r.stdout), ["__main__", [script, "7", "b"]])
                self.assertEqual(w.quit(), 0)
            finally:
                w.close()
        finally:
            shutil.rmtree(tmp)

    def test_script_mode_with_and_without_prefork(self):
        tmp = tempfile.mkdtemp()
        try:
            script = os.path.join(tmp, "tool")
            with open(script, "w") as f:
                f.write("import os\nprint(os.getppid())\n")
            # With prefork: the spare, and after back-to-back sessions perhaps the
            # successor it cloned (docs/ngw.md 11.5).
            for flags, spares in (([], (1, 2)), (["--no-prefork"], (0,))):
                w = driver.Worker(RUNNER + ["script", "tool=" + script] + flags)
                try:
                    w.hello()
                    for _ in range(2):
                        r = w.run("tool", env=client_env())
                        self.assertEqual((r.code, int(r.stdout)), (0, w.proc.pid))
                    deadline = time.monotonic() + 5
                    while time.monotonic() < deadline:
                        kids = driver.worker_pids_children(w.proc.pid)
                        if len(kids) in spares and all(st == "S" for _, st in kids):
                            break
                        time.sleep(0.01)
                    self.assertIn(len(kids), spares, (flags, kids))
                    self.assertEqual(w.quit(), 0)
                finally:
                    w.close()
        finally:
            shutil.rmtree(tmp)

    def test_entrypoint_argv0(self):
        tmp = tempfile.mkdtemp()
        try:
            with open(os.path.join(tmp, "argv_probe_ngw.py"), "w") as f:
                f.write("import json, sys\n"
                        "def main():\n"
                        "    main = sys.modules['__main__']\n"
                        "    print(json.dumps([sys.argv, main.__name__,\n"
                        "                      getattr(main, '__file__', None)]))\n"
                        "    return 'done' if sys.argv[1:] == ['msg'] else 0\n")
            launcher = os.path.join(tmp, "other-launcher")
            with open(launcher, "w") as f:
                f.write("# stands for a console script\n")
            w = driver.Worker(RUNNER + ["entrypoint", "probe=argv_probe_ngw:main",
                                        "other=argv_probe_ngw:main",
                                        "--argv0", "other=" + launcher],
                              env=driver.worker_env({"PYTHONPATH": driver.SRC + os.pathsep + tmp}))
            try:
                self.assertEqual(w.hello()["commands"], ["other", "probe"])
                # The client's PYTHONPATH is the worker's without the SDK: a warm run.
                cenv = client_env(PYTHONPATH=tmp)
                r = w.run("probe", ["a"], env=cenv)
                # Not installed anywhere a shell would find it: the bare name.
                self.assertEqual((r.code, json.loads(r.stdout)),
                                 (0, [["probe", "a"], "__main__", None]))
                r = w.run("other", ["msg"], env=cenv)
                self.assertEqual(json.loads(r.stdout),
                                 [[launcher, "msg"], "__main__", launcher])
                self.assertEqual((r.code, bytes(r.stderr)), (1, b"done\n"))  # sys.exit(main())
                self.assertEqual(w.quit(), 0)
            finally:
                w.close()
        finally:
            shutil.rmtree(tmp)
        from ngw.__main__ import default_argv0

        self.assertEqual(default_argv0("aws"), aws_script())


AWS_PRELOADS = ["--preload", "ngw_contrib.awscli"]
FAKE_SERVICE = {
    "version": "2.0",
    "metadata": {"apiVersion": "2026-01-01", "endpointPrefix": "SERVICE", "jsonVersion": "1.1",
                 "protocol": "json", "serviceFullName": "ngw test service", "serviceId": "SERVICE",
                 "signatureVersion": "v4", "targetPrefix": "NgwTest", "uid": "SERVICE-2026-01-01"},
    "operations": {"Ping": {"name": "Ping", "http": {"method": "POST", "requestUri": "/"},
                            "input": {"shape": "PingRequest"}}},
    "shapes": {"PingRequest": {"type": "structure", "members": {}}},
}


def add_fake_service(data_path, name):
    """A minimal service model `name` under an AWS_DATA_PATH directory."""
    directory = os.path.join(data_path, name, "2026-01-01")
    os.makedirs(directory)
    model = json.dumps(FAKE_SERVICE).replace("SERVICE", name)
    with open(os.path.join(directory, "service-2.json"), "w") as f:
        f.write(model)


class Aws(unittest.TestCase):
    """The aws CLI served with ngw_contrib.awscli, without ngw_contrib.botocore_memo (AwsMemo: with
    both, as examples/aws.toml serves it)."""

    preloads = AWS_PRELOADS

    @classmethod
    def setUpClass(cls):
        cls.w = driver.Worker(RUNNER + ["entrypoint", "aws=awscli.clidriver:main"] + cls.preloads)
        cls.w.hello(60)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.w.quit()
        finally:
            cls.w.close()

    def _compare(self, args, normalise=None, **extra_env):
        env = client_env(**extra_env)
        cwd = tempfile.gettempdir()
        cold = subprocess.run([aws_script()] + args, env=env, cwd=cwd,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        warm = self.w.run("aws", args, env=env, cwd=cwd)
        fix = normalise or (lambda b: b)
        self.assertEqual(fix(bytes(warm.stdout)), fix(cold.stdout), args)
        self.assertEqual(fix(bytes(warm.stderr)), fix(cold.stderr), args)
        self.assertEqual(warm.code, cold.returncode, args)
        return warm, cold

    def test_configure_list_is_byte_identical(self):
        self._compare(["configure", "list"])

    def test_debug_log_records_are_the_same(self):
        # --debug writes every event name botocore aliases and every handler it calls;
        # only the timestamps and object addresses differ from run to run.
        def normalise(b):
            b = re.sub(rb"(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", b"T ", b)
            return re.sub(rb"0x[0-9a-f]+", b"0x?", b)

        warm, cold = self._compare(["--debug", "configure", "list"], normalise)
        self.assertIn(b"botocore.hooks - DEBUG - ", cold.stderr)

    def test_client_data_path_is_scanned_on_every_run(self):
        # A service model under the client's AWS_DATA_PATH, added after the worker started
        # and after a run that did not see it, is seen by the next run, as cold.
        with tempfile.TemporaryDirectory() as data:
            warm, _ = self._compare(["ngwtestsvc"], AWS_DATA_PATH=data)
            self.assertIn(b"Invalid choice", bytes(warm.stderr))
            add_fake_service(data, "ngwtestsvc")
            warm, _ = self._compare(["ngwtestsvc"], AWS_DATA_PATH=data)
            self.assertIn(b"the following arguments are required: operation",
                          bytes(warm.stderr))

    def test_version_is_byte_identical(self):
        warm, cold = self._compare(["--version"])
        self.assertTrue(cold.stdout.startswith(b"aws-cli/1."), cold)
        self.assertEqual(cold.returncode, 0)

    def test_errors_are_byte_identical(self):
        self._compare(["no-such-service-ngw"])  # usage error on stderr, exit 2
        self._compare(["sts", "get-caller-identity", "--region", "us-east-1",
                       "--endpoint-url", "http://127.0.0.1:9", "--cli-connect-timeout", "1"])


class AwsMemo(Aws):
    """The same, as examples/aws.toml serves it: with ngw_contrib.botocore_memo preloaded."""

    preloads = AWS_PRELOADS + ["--preload", "ngw_contrib.botocore_memo"]


class Packaging(unittest.TestCase):
    def test_pip_installs_from_the_repo(self):
        src = os.path.dirname(driver.SRC)
        tmp = tempfile.mkdtemp()
        try:
            tree = os.path.join(tmp, "tree")
            shutil.copytree(src, tree, ignore=shutil.ignore_patterns(
                "build", "*.egg-info", "__pycache__", "tests"))
            target = os.path.join(tmp, "site")
            p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                                "--disable-pip-version-check", "--target", target, tree],
                               capture_output=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            env = dict(os.environ, PYTHONPATH=target)
            p = subprocess.run([sys.executable, "-c", "import ngw, ngw.__main__; "
                                "print(ngw.__version__, ngw.__file__)"],
                               env=env, capture_output=True, timeout=60, cwd=tmp)
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            self.assertTrue(p.stdout.decode().split()[1].startswith(target))
        finally:
            shutil.rmtree(tmp)


class Timing(unittest.TestCase):
    """Not assertions: numbers for the report, printed on stderr."""

    def test_print_round_trip_timings(self):
        lines = []
        w = driver.Worker([sys.executable, BASIC])
        try:
            w.hello()
            env = client_env()
            for name, cmd, n in (("in-process trivial command", "exit", 300),
                                 ("fork-mode trivial command", "fexit", 100)):
                ts = []
                for _ in range(n):
                    r = w.run(cmd, ["0"], env=env, cwd="/tmp")
                    ts.append(r.elapsed)
                lines.append("%-32s median %7.3f ms  p90 %7.3f ms  (n=%d)" % (
                    name, statistics.median(ts) * 1e3,
                    sorted(ts)[int(len(ts) * 0.9)] * 1e3, n))
        finally:
            w.quit()
            w.close()
        aws = driver.Worker(RUNNER + ["entrypoint", "aws=awscli.clidriver:main",
                                      "--preload", "awscli.clidriver",
                                      "--preload", "awscli.handlers"])
        try:
            t = time.monotonic()
            aws.hello(60)
            lines.append("%-32s %7.1f ms (spawn to hello, preload included)" % (
                "aws worker start", (time.monotonic() - t) * 1e3))
            warm, cold = [], []
            env = client_env()
            for _ in range(8):
                warm.append(aws.run("aws", ["--version"], env=env).elapsed)
                t = time.monotonic()
                subprocess.run([aws_script(), "--version"], env=env, capture_output=True)
                cold.append(time.monotonic() - t)
            lines.append("%-32s median %7.1f ms" % ("aws --version, warm (fork)",
                                                     statistics.median(warm) * 1e3))
            lines.append("%-32s median %7.1f ms" % ("aws --version, cold",
                                                     statistics.median(cold) * 1e3))
        finally:
            aws.quit()
            aws.close()
        sys.stderr.write("\n  timings through the test driver (no ngd, no client):\n")
        for line in lines:
            sys.stderr.write("    " + line + "\n")


if __name__ == "__main__":
    unittest.main()
