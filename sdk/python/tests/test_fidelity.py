"""The fidelity suite: real console scripts from PyPI, warm against cold, byte for byte.

`install-fidelity` (run by run-tests) installs pygments, jsonschema, docutils, flask,
ipython, the aws CLI 1.x and cfn-lint into one venv under $NGD_PEERS_DIR. Each program is
served the way a user would configure it, `<venv>/bin/python -m ngw console-script
<script>` (the aws CLI with its contrib preloads too), and for each row of its matrix the
same argv, environment, directory and stdin run cold (the script executed by the kernel,
stdin a pipe) and warm through the SDK's test driver. stdout, stderr and the exit code
must be identical, and the row must have run warm (no `fallback` notice) unless the row
is about falling back.

Documented differences, not rows here: warm stdin is always a pipe (a cold `< file` gives
a seekable file; the relay cannot), output cut by `| head -1` (the driver reads
everything), and terminal rows (no pty driver yet).
"""

import os
import shutil
import subprocess
import tempfile
import time
import unittest

import driver

PEERS = os.environ.get("NGD_PEERS_DIR") or os.path.expanduser("~/.cache/ngd-peers")
VENV = os.path.join(PEERS, "venv-fidelity")
BIN = os.path.join(VENV, "bin")
PY = os.path.join(BIN, "python")
if not os.path.exists(PY):
    raise RuntimeError("the fidelity venv is missing: run sdk/python/tests/install-fidelity "
                       "(run-tests does)")

RST = """Title ü
=======

Some *text* with ``code`` and a list:

* one
* two

.. note:: A note.
"""
SCHEMA = '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}'
GOOD = '{"n": 3}'
BAD = '{"n": "three"}'
CFN = """AWSTemplateFormatVersion: "2010-09-09"
Resources:
  Bucket:
    Type: AWS::S3::Bucket
    Properties:
      BucketName: my-bucket
      NoSuchProperty: 1
"""
FLASK_APP = """from flask import Flask
app = Flask(__name__)

@app.route("/hello")
def hello():
    return "hi"
"""
PYSRC = "def f(x):\n    return 'é' + str(x)  # ü\n"


class Fidelity:
    """A mixin: `script` and `rows`; runs every row cold and warm."""

    script = None
    extra_args = []
    rows = []  # (label, args, env additions, stdin bytes)

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ngw-fidelity-")
        files = {"doc.rst": RST, "schema.json": SCHEMA, "good.json": GOOD, "bad.json": BAD,
                 "template.yaml": CFN, "app.py": FLASK_APP, "code.py": PYSRC, "empty": ""}
        for name, text in files.items():
            with open(os.path.join(cls.tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        # The client is the worker's user, with the same HOME (the aws CLI's preloads read
        # it: a client with another HOME would run cold, docs/ngw.md 12.4); IPython keeps
        # its profile under the test's directory.
        cls.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
                   "HOME": os.environ["HOME"], "TERM": "dumb",
                   "IPYTHONDIR": os.path.join(cls.tmp, "ipython")}
        # ngd started from the same shell: the worker's environment is the client's, plus
        # the SDK on PYTHONPATH.
        worker_env = dict(cls.env, PYTHONPATH=driver.SRC, NGW_STATE_DIR=cls.tmp,
                          NGW_MAX_ZYGOTES="3")
        cls.w = driver.Worker([PY, "-m", "ngw", "console-script", os.path.join(BIN, cls.script)]
                              + cls.extra_args, env=worker_env)
        cls.w.hello(60)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.w.quit()
        finally:
            cls.w.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_matrix(self):
        for row in self.rows:
            label, args, env_extra, stdin = row[:4]
            fallback = row[4] if len(row) > 4 else None
            with self.subTest(row=label):
                env = dict(self.env)
                env.update(env_extra)
                cold = subprocess.run([os.path.join(BIN, self.script)] + args, env=env,
                                      cwd=self.tmp, input=stdin, capture_output=True,
                                      timeout=120)
                warm = self.w.run(self.script, args, env=env, cwd=self.tmp, stdin=stdin,
                                  timeout=120)
                self.assertEqual(bytes(warm.stderr).decode(errors="replace"),
                                 cold.stderr.decode(errors="replace"))
                self.assertEqual(bytes(warm.stdout).decode(errors="replace"),
                                 cold.stdout.decode(errors="replace"))
                self.assertEqual(warm.code, cold.returncode)
                if fallback is None:
                    self.assertEqual(warm.notices, [], self.w.log()[-2000:])
                else:
                    self.assertEqual([n["kind"] for n in warm.notices], ["fallback"])
                    self.assertIn(fallback, warm.notices[0]["message"])


def common_rows(version="--version"):
    return [
        ("version", [version], {}, b""),
        ("help", ["--help"], {}, b""),
        ("help COLUMNS=50", ["--help"], {"COLUMNS": "50"}, b""),
        ("unknown option", ["--no-such-option-ngw"], {}, b""),
        ("empty argument", [""], {}, b""),
        ("client-only variable", [version], {"NGW_FIDELITY_ONLY_HERE": "x"}, b""),
    ]


class Pygmentize(Fidelity, unittest.TestCase):
    script = "pygmentize"
    rows = common_rows("-V") + [
        ("file argument", ["-l", "python", "-f", "html", "code.py"], {}, b""),
        ("stdin", ["-l", "python"], {}, PYSRC.encode()),
        ("pipe, empty", ["-l", "python"], {}, b""),
        ("unicode argument", ["-l", "text", "-O", "title=é ü"], {}, "ü\n".encode()),
        ("error exit", ["-l", "no-such-lexer", "code.py"], {}, b""),
        ("missing file", ["-l", "python", "missing.py"], {}, b""),
    ]


class Jsonschema(Fidelity, unittest.TestCase):
    script = "jsonschema"
    rows = common_rows() + [
        ("valid file argument", ["-i", "good.json", "schema.json"], {}, b""),
        ("invalid instance", ["-i", "bad.json", "schema.json"], {}, b""),
        ("instance from stdin", ["schema.json"], {}, BAD.encode()),
        ("unicode path", ["-i", "é.json", "schema.json"], {}, b""),
    ]


class Docutils(Fidelity, unittest.TestCase):
    script = "docutils"
    rows = common_rows() + [
        ("file argument", ["doc.rst"], {}, b""),
        ("stdin", [], {}, RST.encode()),
        ("empty stdin", [], {}, b""),
        ("missing file", ["missing.rst"], {}, b""),
        ("writer option", ["--writer=pseudoxml", "doc.rst"], {}, b""),
    ]


class Rst2html(Fidelity, unittest.TestCase):
    script = "rst2html.py"
    rows = [
        ("version", ["--version"], {}, b""),
        ("file argument", ["doc.rst"], {}, b""),
        ("stdin", [], {}, RST.encode()),
        ("missing file", ["missing.rst"], {}, b""),
    ]


class Flask(Fidelity, unittest.TestCase):
    script = "flask"
    rows = common_rows() + [
        ("routes, FLASK_APP from the client", ["routes"], {"FLASK_APP": "app.py"}, b""),
        ("no app", ["routes"], {}, b""),
        ("unknown command", ["no-such-command"], {}, b""),
    ]


class IPython(Fidelity, unittest.TestCase):
    script = "ipython"
    rows = [
        ("version", ["--version"], {}, b""),
        ("-c", ["--quick", "--no-banner", "-c", "print(sum(range(10)), 'é')"], {}, b""),
        ("stdin", ["--quick", "--no-banner", "--colors=NoColor", "--simple-prompt"], {},
         b"for i in range(3):\n    print(i)\n\n"),
        ("error", ["--quick", "-c", "1/0"], {}, b""),
        # IPython reads TERM at import: another TERM than the worker's runs cold.
        ("TERM differs", ["--quick", "-c", "print(1)"], {"TERM": "xterm-256color"}, b"",
         "read TERM"),
        ("PYTHONHASHSEED", ["--quick", "-c", "print(hash('x'))"], {"PYTHONHASHSEED": "7"},
         b"", "PYTHONHASHSEED differs"),
    ]

    def test_other_keys_run_warm_in_zygotes_of_their_own(self):
        """The rows that ran cold for their key: once the worker's zygote for that key
        has preloaded, they run warm there (no notice), byte for byte as cold."""
        for label, args, env_extra, stdin, _ in [r for r in self.rows if len(r) > 4]:
            with self.subTest(row=label):
                env = dict(self.env)
                env.update(env_extra)
                cold = subprocess.run([os.path.join(BIN, self.script)] + args, env=env,
                                      cwd=self.tmp, input=stdin, capture_output=True,
                                      timeout=120)
                deadline = time.monotonic() + 120
                while True:
                    warm = self.w.run(self.script, args, env=env, cwd=self.tmp, stdin=stdin,
                                      timeout=120)
                    if not warm.notices:
                        break
                    self.assertEqual([n["kind"] for n in warm.notices], ["fallback"])
                    self.assertLess(time.monotonic(), deadline, self.w.log()[-3000:])
                    time.sleep(0.2)
                self.assertEqual((bytes(warm.stdout), bytes(warm.stderr), warm.code),
                                 (cold.stdout, cold.stderr, cold.returncode))


class Aws(Fidelity, unittest.TestCase):
    script = "aws"
    extra_args = ["--preload", "ngw_contrib.awscli", "--preload", "ngw_contrib.botocore_memo"]
    rows = [
        ("version", ["--version"], {}, b""),
        ("configure list", ["configure", "list"], {"AWS_DEFAULT_REGION": "eu-west-1"}, b""),
        ("error exit", ["s3", "no-such-command"], {}, b""),
        ("empty argument", [""], {}, b""),
    ]


class CfnLint(Fidelity, unittest.TestCase):
    script = "cfn-lint"
    rows = [
        ("version", ["--version"], {}, b""),
        ("template", ["template.yaml"], {}, b""),
        ("missing file", ["missing.yaml"], {}, b""),
    ]


if __name__ == "__main__":
    unittest.main()
