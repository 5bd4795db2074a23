"""The fidelity suite: real console scripts from PyPI, warm against cold, byte for byte.

`install-fidelity` (run by run-tests) installs pygments, jsonschema, docutils, flask,
ipython, the aws CLI 1.x and cfn-lint into one venv under $NGD_PEERS_DIR (and `pyte`, the
terminal emulator of the terminal rows). Each program is served the way a user would
configure it, `<venv>/bin/python -m ngw console-script <script>` (the aws CLI, pygmentize,
flask and docutils with their contrib preloads too), by a worker to which the driver offers what ngd offers
(`notices`, `fds`, `signals`, `stdin-window`). For each row the same argv, environment and directory
run cold (the script executed by the kernel) and warm through the SDK's test driver:

* `rows`: the client's streams relayed (stdin a pipe on the cold side, sent as `0`
  chunks on the warm side); stdout, stderr and the exit code compared. The row must run
  warm (no `fallback` notice) unless it is about falling back.
* The client's own descriptors (docs/ngw.md 15.4), what `ng` passes ngd: the cold run
  gets them as its fds 0-2, the warm session as the client's descriptors, which it must
  take (`t`). `file_rows`: stdin a file (`< file`, seekable), stdout and stderr files;
  `head_rows`: stdout a pipe read by a real `head -1`, which exits after one line, so a
  longer output meets EPIPE (what head printed, stderr, the exit code: each program's
  own BrokenPipeError handling); `tty_rows`: fds 0-2 one pseudo-terminal with a window
  size (80x24 or 120x40), the cold run's controlling terminal: colours (TERM,
  COLORTERM, isatty), widths from the window size, `\n` made `\r\n` by the terminal,
  compared as the raw bytes the terminal received, and the exit code.
* Interactive rows (test methods): keys typed at the terminal by `ptydriver`'s terminal
  program, each once the screen shows what it waits for (a prompt, an echo), never after
  a sleep. docutils' prompt and ^D are compared as raw bytes; IPython's prompt_toolkit
  redraws as input arrives, so its transcript depends on timing: there the final screen
  (text, colours and attributes, cursor, title), rendered by the `pyte` emulator that
  also answers its cursor position requests as a terminal does, and the exit code are
  compared.

A row whose key (a terminal, TERM: what the program's imports read) is not the worker's
may first run the cold way while the zygote for that key starts (docs/ngw.md 12.4); it
is repeated until it runs warm, and every run must show what the cold one showed.

No documented differences remain: what a user sees is the same warm and cold for every
row (a difference would be a bug in the SDK).
"""

import os
import shutil
import subprocess
import tempfile
import time
import unittest

import driver
import ptydriver

PEERS = os.environ.get("NGD_PEERS_DIR") or os.path.expanduser("~/.cache/ngd-peers")
VENV = os.path.join(PEERS, "venv-fidelity")
BIN = os.path.join(VENV, "bin")
PY = os.path.join(BIN, "python")
if not os.path.exists(PY) or subprocess.run([PY, "-c", "import pyte"]).returncode != 0:
    raise RuntimeError("the fidelity venv is missing or incomplete: run "
                       "sdk/python/tests/install-fidelity (run-tests does)")

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
# Big enough that a reader which stops after one line leaves the writer with more than
# a pipe holds (64 KiB) plus what `head` reads at once: the writer meets EPIPE for sure.
BIG_PY = PYSRC * 3000
BIG_RST = "Title\n=====\n\n" + "".join(
    "Paragraph %d with *text* and ``code``.\n\n" % i for i in range(2500))
MANY_ROUTES_APP = """from flask import Flask
app = Flask(__name__)
for i in range(3000):
    app.add_url_rule("/route%d" % i, "route%d" % i, lambda: "hi")
"""
# One resource with 80 unknown properties, each named by 1000 characters: ~87 KiB of
# findings, printed at once.
BIG_CFN = CFN.split("Resources:")[0] + "Resources:\n  Bucket:\n    Type: AWS::S3::Bucket\n" \
    "    Properties:\n" + "".join("      %s%02d: 1\n" % ("P" * 1000, i) for i in range(80))
PYLOOP = "for i in range(3):\n    print(i, 'é')\n\nprint('done')\n"

#: What the host announces: the driver plays ngd, which offers these (docs/ngw.md 15).
HOST_FEATURES = "notices,fds,signals,stdin-window"
#: The terminal rows' window sizes (columns, rows).
WIDE = (120, 40)
NARROW = (80, 24)
#: What a terminal emulator sets.
TERMINAL_ENV = {"TERM": "xterm-256color"}
#: Warm runs of a row that may first run cold because its key (a terminal, TERM) needs a
#: zygote of its own are repeated until one runs warm, within this many seconds.
ZYGOTE_WAIT = 120


class Fidelity:
    """A mixin: `script` and its rows; runs every row cold and warm.

    `rows` relay the client's streams (stdin bytes sent as `0` chunks, output as `1 2`);
    the other kinds give the session the client's own descriptors (docs/ngw.md 15.4), as
    `ng` does, and the cold run the same kind of descriptors:

    * `file_rows`: stdin is a file of the test's directory (`< file`: seekable, its
      offset shared, and compared after the run), stdout and stderr are files
      (`> out 2> err`);
    * `head_rows`: stdout is a pipe read by a real `head -1`, which exits after one line
      (`cmd < /dev/null 2> err | head -1`): what head printed, stderr and the exit code.
      What a row shows must not depend on when head exits: its output is one line in
      its last write (head reads it all), or far more than a pipe holds at once (the
      writer meets EPIPE for sure);
    * `tty_rows`: fds 0-2 are one pseudo-terminal with a window size (the cold run has it
      as its controlling terminal): the raw bytes the terminal received and the exit
      code. Interactive rows (typed keys, a screen compared) are test methods.
    """

    script = None
    extra_args = []
    rows = []  # (label, args, env additions, stdin bytes[, fallback reason])
    file_rows = []  # (label, args, env additions, name of the file on fd 0)
    head_rows = []  # (label, args, env additions)
    tty_rows = []  # (label, args, env additions, (columns, rows))

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ngw-fidelity-")
        files = {"doc.rst": RST, "schema.json": SCHEMA, "good.json": GOOD, "bad.json": BAD,
                 "template.yaml": CFN, "app.py": FLASK_APP, "code.py": PYSRC, "empty": "",
                 "big.py": BIG_PY, "big.rst": BIG_RST, "many.py": MANY_ROUTES_APP,
                 "big.yaml": BIG_CFN, "loop.py": PYLOOP}
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
                              + cls.extra_args, env=worker_env, host_features=HOST_FEATURES)
        cls.w.hello(60)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.w.quit()
        finally:
            cls.w.close()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def env_for(self, env_extra):
        env = dict(self.env)
        env.update(env_extra)
        return env

    def test_matrix(self):
        for row in self.rows:
            label, args, env_extra, stdin = row[:4]
            fallback = row[4] if len(row) > 4 else None
            with self.subTest(row=label):
                env = self.env_for(env_extra)
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

    # -- the client's own descriptors ------------------------------------------------------

    def run_on(self, warm, args, env, fds, tty=False):
        """Runs the row cold (the script on `fds` as its 0, 1, 2; on a terminal, with it
        as the controlling terminal of a session of its own) or warm (a session with
        `fds` as the client's descriptors). Returns (exit code, the warm Result or None)."""
        if not warm:
            argv = [os.path.join(BIN, self.script)] + args
            kw = dict(start_new_session=True, preexec_fn=ptydriver.take_controlling_terminal
                      ) if tty else {}
            proc = subprocess.Popen(argv, stdin=fds[0], stdout=fds[1], stderr=fds[2],
                                    env=env, cwd=self.tmp, **kw)
            try:
                return proc.wait(120), None
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
        res = self.w.run(self.script, args, env=env, cwd=self.tmp, fds=fds,
                         tty=(1, 1, 1) if tty else (0, 0, 0), timeout=120)
        self.assertEqual(res.taken, b"", "the session did not take the descriptors")
        self.assertIsNone(res.exit_signal, res)
        return res.code, res

    def assert_warm_as_cold(self, observe):
        """`observe(warm)` runs the row once and returns (what the user saw, the warm
        Result or None). Every warm run must show what the cold one did; a warm run may
        first go the cold way while the zygote for its key (a terminal, its TERM) starts,
        and is repeated until one runs warm."""
        cold, _ = observe(False)
        deadline = time.monotonic() + ZYGOTE_WAIT
        while True:
            seen, res = observe(True)
            self.assertEqual(seen, cold)
            if not res.notices:
                return cold
            self.assertEqual([n["kind"] for n in res.notices], ["fallback"], res.notices)
            self.assertRegex(res.notices[0]["message"], "started a zygote|still starting")
            self.assertLess(time.monotonic(), deadline, self.w.log()[-3000:])
            time.sleep(0.2)

    def test_stdin_a_file(self):
        for label, args, env_extra, name in self.file_rows:
            with self.subTest(row=label):
                env = self.env_for(env_extra)

                def observe(warm):
                    with open(os.path.join(self.tmp, name), "rb") as stdin, \
                            tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                        code, res = self.run_on(warm, args, env, [stdin.fileno(),
                                                                  out.fileno(), err.fileno()])
                        # Where the command left the shared offset of stdin: what a next
                        # reader of the file gets, as in `(cmd; cat) < file`.
                        offset = os.lseek(stdin.fileno(), 0, os.SEEK_CUR)
                        out.seek(0)
                        err.seek(0)
                        return ((err.read().decode(errors="replace"),
                                 out.read().decode(errors="replace"), code, offset), res)

                self.assert_warm_as_cold(observe)

    def test_output_cut_by_head(self):
        for label, args, env_extra in self.head_rows:
            with self.subTest(row=label):
                env = self.env_for(env_extra)

                def observe(warm):
                    r, w = os.pipe()
                    try:
                        head = subprocess.Popen(["head", "-1"], stdin=r, stdout=subprocess.PIPE)
                    finally:
                        os.close(r)
                    try:
                        with open(os.devnull, "rb") as null, tempfile.TemporaryFile() as err:
                            code, res = self.run_on(warm, args, env, [null.fileno(), w,
                                                                      err.fileno()])
                            os.close(w)
                            w = -1
                            seen, _ = head.communicate(timeout=60)
                            err.seek(0)
                            return ((err.read().decode(errors="replace"),
                                     seen.decode(errors="replace"), code, head.returncode),
                                    res)
                    finally:
                        if w >= 0:
                            os.close(w)
                        if head.poll() is None:
                            head.kill()
                            head.wait()

                self.assert_warm_as_cold(observe)

    def on_terminal(self, warm, args, env, size, steps=(), screen=False):
        """Runs the row with a pseudo-terminal of `size` as fds 0-2 and `steps` typed at
        it; returns (the raw bytes it received, or its final screen; the exit code)."""
        with ptydriver.Terminal(PY, *size, steps=steps, timeout=60) as term:
            code, res = self.run_on(warm, args, env, [term.slave] * 3, tty=True)
            got = term.finish()
        self.assertIsNone(got["error"], got["error"])
        self.assertEqual(got["untyped"], [])
        if screen:
            seen = (got["display"], got["styles"], got["cursor"], got["title"])
        else:
            seen = got["raw"].decode(errors="backslashreplace")
        return (seen, code), res

    def test_on_a_terminal(self):
        for label, args, env_extra, size in self.tty_rows:
            with self.subTest(row=label):
                env = self.env_for(dict(TERMINAL_ENV, **env_extra))
                self.assert_warm_as_cold(lambda warm: self.on_terminal(warm, args, env, size))


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
    extra_args = ["--preload", "ngw_contrib.pygments_memo"]
    rows = common_rows("-V") + [
        ("file argument", ["-l", "python", "-f", "html", "code.py"], {}, b""),
        ("stdin", ["-l", "python"], {}, PYSRC.encode()),
        ("pipe, empty", ["-l", "python"], {}, b""),
        ("unicode argument", ["-l", "text", "-O", "title=é ü"], {}, "ü\n".encode()),
        ("error exit", ["-l", "no-such-lexer", "code.py"], {}, b""),
        ("missing file", ["-l", "python", "missing.py"], {}, b""),
    ]
    file_rows = [
        ("stdin a file", ["-l", "python"], {}, "code.py"),
        ("stdin an empty file", ["-l", "python"], {}, "empty"),
    ]
    head_rows = [
        ("short output", ["-V"], {}),
        # pygmentize ends quietly with 0 on BrokenPipeError.
        ("broken pipe", ["-l", "python", "-f", "html", "big.py"], {}),
    ]
    tty_rows = [
        # Colours by TERM and COLORTERM; the terminal turns \n into \r\n.
        ("colours, 256", ["-l", "python", "code.py"], {}, NARROW),
        ("colours, 16", ["-l", "python", "code.py"], {"TERM": "xterm"}, NARROW),
        ("colours, true colour", ["-l", "python", "code.py"], {"COLORTERM": "truecolor"},
         NARROW),
        # argparse's width is the terminal's.
        ("help, wide", ["--help"], {}, WIDE),
        ("help, narrow", ["--help"], {}, NARROW),
    ]


class Jsonschema(Fidelity, unittest.TestCase):
    script = "jsonschema"
    rows = common_rows() + [
        ("valid file argument", ["-i", "good.json", "schema.json"], {}, b""),
        ("invalid instance", ["-i", "bad.json", "schema.json"], {}, b""),
        ("instance from stdin", ["schema.json"], {}, BAD.encode()),
        ("unicode path", ["-i", "é.json", "schema.json"], {}, b""),
    ]
    file_rows = [("instance from a file on stdin", ["schema.json"], {}, "bad.json")]
    head_rows = [("help", ["--help"], {})]
    tty_rows = [
        ("help, wide", ["--help"], {}, WIDE),
        ("help, narrow", ["--help"], {}, NARROW),
        ("invalid instance", ["-i", "bad.json", "schema.json"], {}, NARROW),
    ]


class Docutils(Fidelity, unittest.TestCase):
    script = "docutils"
    extra_args = ["--preload", "ngw_contrib.docutils_memo"]
    rows = common_rows() + [
        ("file argument", ["doc.rst"], {}, b""),
        ("debug mode", ["--debug", "doc.rst"], {}, b""),
        ("stdin", [], {}, RST.encode()),
        ("empty stdin", [], {}, b""),
        ("missing file", ["missing.rst"], {}, b""),
        ("writer option", ["--writer=pseudoxml", "doc.rst"], {}, b""),
    ]
    file_rows = [("stdin a file", [], {}, "doc.rst")]
    head_rows = [("broken pipe", ["big.rst"], {})]


class Rst2html(Fidelity, unittest.TestCase):
    script = "rst2html.py"
    extra_args = ["--preload", "ngw_contrib.docutils_memo"]
    rows = [
        ("version", ["--version"], {}, b""),
        ("file argument", ["doc.rst"], {}, b""),
        ("debug mode", ["--debug", "doc.rst"], {}, b""),
        ("stdin", [], {}, RST.encode()),
        ("missing file", ["missing.rst"], {}, b""),
    ]
    file_rows = [("stdin a file", [], {}, "doc.rst"), ("stdin empty", [], {}, "empty")]
    head_rows = [("short output", ["--version"], {}), ("broken pipe", ["big.rst"], {})]
    tty_rows = [("file argument", ["doc.rst"], {}, NARROW)]

    def test_typed_at_the_terminal(self):
        """stdin and stderr on a terminal: docutils says what it converts and waits for
        the document, typed and ended with ^D (canonical mode: the terminal echoes)."""
        # Typed once the prompt's last newline is there (the cursor at the start of the
        # next line), and ^D once the last line's echo is.
        steps = [ptydriver.Step(r"on an empty line\):\n$", "Title\r=====\r\rSome *text* é.\r",
                                before_cursor=True),
                 ptydriver.Step(r"Some \*text\* é\.\n$", "\x04", before_cursor=True)]
        env = self.env_for(TERMINAL_ENV)
        self.assert_warm_as_cold(
            lambda warm: self.on_terminal(warm, [], env, NARROW, steps))


class Flask(Fidelity, unittest.TestCase):
    script = "flask"
    extra_args = ["--preload", "ngw_contrib.metadata_memo",
                  "--preload", "ngw_contrib.werkzeug_memo"]
    rows = common_rows() + [
        ("routes, FLASK_APP from the client", ["routes"], {"FLASK_APP": "app.py"}, b""),
        ("no app", ["routes"], {}, b""),
        ("unknown command", ["no-such-command"], {}, b""),
    ]
    file_rows = [("stdin a file", ["routes"], {"FLASK_APP": "app.py"}, "code.py")]
    head_rows = [
        # click ends with 1 on EPIPE, quietly.
        ("broken pipe", ["routes"], {"FLASK_APP": "many.py"}),
        ("help", ["--help"], {}),
    ]
    tty_rows = [
        # click colours the error before the help red, on a terminal only.
        ("no app, red", ["--app", "missing", "--help"], {}, NARROW),
        ("unknown command", ["no-such-command"], {"FLASK_APP": "app.py"}, NARROW),
        ("help, wide", ["--help"], {"FLASK_APP": "app.py"}, WIDE),
        ("help, narrow", ["--help"], {"FLASK_APP": "app.py"}, NARROW),
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
    file_rows = [
        ("stdin a file", ["--quick", "--no-banner", "--colors=NoColor", "--simple-prompt"], {},
         "loop.py"),
    ]
    head_rows = [
        ("broken pipe", ["--quick", "-c", "for i in range(100000): print(i)"], {}),
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


class IPythonOnATerminal(Fidelity, unittest.TestCase):
    """IPython on a terminal, in a worker of its own: TERM, which IPython reads at import,
    is a terminal's here (xterm-256color, the worker's is dumb), so these rows run in the
    zygote for that key, which the IPython class's rows must find not started yet."""

    script = "ipython"
    tty_rows = [
        # Colours and the terminal's title on a terminal (TERM is read at import: these
        # run in the zygote for a terminal and xterm-256color).
        ("-c", ["--quick", "--no-banner", "-c", "print(sum(range(10)), 'é')"], {}, NARROW),
        ("error, coloured", ["--quick", "-c", "1/0"], {}, NARROW),
    ]

    def test_interactive_auto_indent(self):
        """IPython's prompt on a terminal: a block typed at `In [1]:` is auto-indented
        after the colon, runs on the empty line, and `exit` ends it. Compared: the final
        screen (text, attributes, cursor, title) and the exit code."""
        steps = [
            ptydriver.Step(r"In \[1\]: $", "for i in range(3):\r", before_cursor=True),
            ptydriver.Step(r"range\(3\):\n   \.\.\.: {5}$", "print(i)\r", before_cursor=True),
            ptydriver.Step(r"print\(i\)\n   \.\.\.: {5}$", "\r", before_cursor=True),
            ptydriver.Step(r"In \[2\]: $", "exit\r", before_cursor=True),
        ]
        env = self.env_for(TERMINAL_ENV)

        def observe(warm):
            # Each run starts with no profile and no history, as the first does.
            shutil.rmtree(env["IPYTHONDIR"], ignore_errors=True)
            return self.on_terminal(warm, ["--no-banner"], env, NARROW, steps, screen=True)

        (screen, _, _, _), _ = self.assert_warm_as_cold(observe)
        text = [line.rstrip() for line in screen]
        self.assertEqual(text[:7], ["", "In [1]: for i in range(3):", "   ...:     print(i)",
                                    "   ...:", "0", "1", "2"], screen)


class Aws(Fidelity, unittest.TestCase):
    script = "aws"
    extra_args = ["--preload", "ngw_contrib.awscli", "--preload", "ngw_contrib.botocore_memo"]
    rows = [
        ("version", ["--version"], {}, b""),
        ("configure list", ["configure", "list"], {"AWS_DEFAULT_REGION": "eu-west-1"}, b""),
        ("error exit", ["s3", "no-such-command"], {}, b""),
        ("empty argument", [""], {}, b""),
    ]
    file_rows = [("configure list, stdin a file", ["configure", "list"],
                  {"AWS_DEFAULT_REGION": "eu-west-1"}, "empty")]
    head_rows = [("short output", ["--version"], {})]
    tty_rows = [
        ("configure list", ["configure", "list"], {"AWS_DEFAULT_REGION": "eu-west-1"}, NARROW),
        ("error exit", ["s3", "no-such-command"], {}, WIDE),
    ]


class CfnLint(Fidelity, unittest.TestCase):
    script = "cfn-lint"
    rows = [
        ("version", ["--version"], {}, b""),
        ("template", ["template.yaml"], {}, b""),
        ("missing file", ["missing.yaml"], {}, b""),
    ]
    # cfn-lint prints its findings at once and dies of the BrokenPipeError: a traceback.
    head_rows = [("broken pipe", ["big.yaml"], {})]
    tty_rows = [
        ("template", ["template.yaml"], {}, NARROW),
        ("help, wide", ["--help"], {}, WIDE),
    ]


if __name__ == "__main__":
    unittest.main()
