"""The memos of ngw_contrib for pygments (pygments_memo) and for entry point lookups
(metadata_memo), against what the real programs and the standard library do without
them, in the fidelity suite's venv (install-fidelity, run by run-tests):

* the state pygments_memo leaves on a lexer class is the state its first instantiation
  leaves in a cold process, for every lexer pygments ships (and the plugins installed),
  compared structure by structure in two children forked from one process;
* served by a worker, a child finds pygments_memo's tables (the learned lexer modules'
  classes too, built by the memo between sessions) and pygmentize's output is
  byte-identical to a cold run's;
* metadata_memo answers what importlib.metadata answers, as distributions change; flask
  served with it finds its plugin commands as a cold flask does, the child's lookup
  answered by the memo;
* werkzeug_memo's URL builders are the functions werkzeug compiles (same code, a new
  function with fresh globals each, the same URLs built), filled in the zygote from a
  child's report; flask served with it builds an application's routes from the memo once
  a session has reported them, with output byte-identical to a cold run's;
* docutils_memo's state machines leave documents parsed one after the other as a cold
  process parses them (HTML and stderr, debug mode's trace included, which needs the
  memo's removal of its machines); served, rst2html's output is a cold run's, and the
  machines a deeper document needs are learned from the child that made them.
"""

import json
import os
import re
import subprocess
import tempfile
import time
import unittest

import driver
from support import client_env

PEERS = os.environ.get("NGD_PEERS_DIR") or os.path.expanduser("~/.cache/ngd-peers")
VENV = os.path.join(PEERS, "venv-fidelity")
BIN = os.path.join(VENV, "bin")
PY = os.path.join(BIN, "python")
if not os.path.exists(PY):
    raise RuntimeError("the fidelity venv is missing: run sdk/python/tests/install-fidelity "
                       "(run-tests does)")

# Imports every lexer module pygments knows (its own and the plugins'), then forks two
# children: `cold` instantiates every RegexLexer class (subclasses before their bases, the
# order least like the memo's); `memo` imports the memo, which builds the tables, records
# the classes' state, then instantiates every class as `cold` did. Each prints, per class,
# the state pygments keeps on it: _tokens (pattern, flags, token, new state per rule), the
# other tables of _all_tokens, _tmpname, and the class's own `tokens` (which the merge with
# its bases changes in place). Objects made before the fork (token types, callbacks,
# words(), include()) are named by id, the same in both children.
STATE_PROBE = r"""
import importlib, json, os, sys
import pygments.lexer, pygments.lexers, pygments.plugin
from pygments.lexers._mapping import LEXERS
from pygments.lexer import RegexLexer, include, inherit, default, combined, Future

for module in sorted({v[0] for v in LEXERS.values()}):
    importlib.import_module(module)
plugins = [cls for cls in pygments.plugin.find_plugin_lexers()]

def classes():
    out, stack, seen = [], [RegexLexer], set()
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub); out.append(sub); stack.append(sub)
    return out

def enc(x):
    if x is None or isinstance(x, (int, str)) and not isinstance(x, (include, combined)):
        return x
    if x is inherit:
        return "<inherit>"
    if isinstance(x, include):
        return ["include", str(x)]
    if isinstance(x, combined):
        return ["combined"] + [enc(s) for s in x]
    if isinstance(x, default):
        return ["default", enc(x.state)]
    if isinstance(x, tuple):
        return ["tuple"] + [enc(i) for i in x]
    if hasattr(x, "__self__") and hasattr(x.__self__, "pattern"):  # a Pattern's match
        return ["re", x.__self__.pattern if isinstance(x.__self__.pattern, str)
                else repr(x.__self__.pattern), x.__self__.flags, x.__name__]
    return ["id", id(x)]

def table(processed):
    return {state: [[enc(r), enc(t), enc(n)] for r, t, n in rules]
            for state, rules in processed.items()}

def state(cls):
    d = cls.__dict__
    out = {"tmpname": d.get("_tmpname"),
           "tokens_attr": {s: [enc(i) for i in items] for s, items in d.get("tokens", {}).items()}
           if isinstance(d.get("tokens"), dict) else None}
    if "_tokens" in d:
        out["_tokens"] = table(d["_tokens"])
        out["all_tokens"] = {k: table(v) for k, v in d["_all_tokens"].items()}
        out["_tokens is all_tokens['']"] = d["_tokens"] is d["_all_tokens"].get("")
    return out

def instantiate(order):
    for cls in order:
        try:
            cls()
        except Exception:
            pass

def dump():
    return {"%s.%s" % (c.__module__, c.__qualname__): state(c) for c in classes()}

def child(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        data = json.dumps(fn()).encode()
        while data:
            data = data[os.write(w, data):]
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        c = os.read(r, 1 << 20)
        if not c:
            break
        chunks.append(c)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))

def cold():
    instantiate(list(reversed(classes())))
    return {"after": dump()}

def memo():
    import ngw_contrib.pygments_memo as m
    before = dump()
    built = ["%s.%s" % (c.__module__, c.__qualname__) for c in m._built]
    instantiate(list(reversed(classes())))
    return {"memo": before, "after": dump(), "built": built, "stats": m.stats()}

print(json.dumps({"cold": child(cold), "memo": child(memo), "plugins": len(plugins)}))
"""


def venv_run(code, *args, timeout=600):
    r = subprocess.run([PY, "-c", code] + list(args), env=client_env(PYTHONPATH=driver.SRC),
                       capture_output=True, timeout=timeout)
    if r.returncode:
        raise AssertionError(r.stderr.decode(errors="replace")[-4000:])
    return r.stdout


class PygmentsMemoState(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = json.loads(venv_run(STATE_PROBE))

    def test_memo_builds_what_the_first_instantiation_builds(self):
        cold, memo = self.out["cold"]["after"], self.out["memo"]["memo"]
        built = self.out["memo"]["built"]
        # Every lexer pygments ships that builds its table on instantiation: ~500.
        self.assertGreater(len(built), 400, self.out["memo"]["stats"])
        for name in built:
            with self.subTest(lexer=name):
                for key in ("_tokens", "all_tokens", "tmpname", "_tokens is all_tokens['']"):
                    self.assertEqual(memo[name][key], cold[name][key], key)
        self.assertIn("pygments.lexers.python.PythonLexer", built)
        # Inheritance (`inherit` in a subclass's states) and combined() states among them.
        self.assertIn("pygments.lexers.c_cpp.CppLexer", built)
        self.assertIn("pygments.lexers.javascript.TypeScriptLexer", built)

    def test_instantiating_after_the_memo_leaves_what_a_cold_process_has(self):
        cold, after = self.out["cold"]["after"], self.out["memo"]["after"]
        self.assertEqual(sorted(after), sorted(cold))
        for name in cold:
            with self.subTest(lexer=name):
                self.assertEqual(after[name], cold[name])

    def test_classes_left_to_the_children(self):
        memo, built = self.out["memo"]["memo"], set(self.out["memo"]["built"])
        # token_variants lexers build their table per instance, in __init__.
        for name in ("pygments.lexers.dotnet.CSharpLexer", "pygments.lexers.dotnet.NemerleLexer",
                     "pygments.lexers.int_fiction.Inform6TemplateLexer"):
            self.assertNotIn(name, built)
            self.assertNotIn("_tokens", memo[name])
        # Abstract bases with no table fail in a cold run too; the memo leaves them as
        # they were.
        failed = self.out["memo"]["stats"]["failed"]
        self.assertIn("pygments.lexer.ExtendedRegexLexer", failed)
        self.assertNotIn("_tokens", memo["pygments.lexer.ExtendedRegexLexer"])
        self.assertIsNone(self.out["memo"]["stats"]["skipped"])


# pygmentize's console script, which first says whether PythonLexer's table was in the
# class before main() ran.
PYGMENTS_PROGRAM = """import sys
from pygments.cmdline import main
lexers = sys.modules.get("pygments.lexers.python")
print("prebuilt" if lexers and "_tokens" in vars(lexers.PythonLexer) else "cold",
      file=sys.stderr, flush=True)
sys.exit(main())
"""

CODE = "def f(x):\n    return 'é' + str(x)  # ü\n\nclass C(object):\n    pass\n"


class PygmentsMemoServed(unittest.TestCase):
    """A worker serving pygmentize with the memo preloaded."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ngw-pygments-memo-")
        with open(os.path.join(self.tmp, "code.py"), "w", encoding="utf-8") as f:
            f.write(CODE)
        self.program = os.path.join(self.tmp, "pyg")
        with open(self.program, "w") as f:
            f.write("#!%s\n%s" % (PY, PYGMENTS_PROGRAM))
        os.chmod(self.program, 0o755)
        self.env = client_env(LANG="C.UTF-8")
        self.env.pop("PYTHONPATH", None)
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            try:
                w.quit()
            finally:
                w.close()

    def worker(self, *preloads):
        argv = [PY, "-m", "ngw", "script", "pyg=" + self.program]
        for p in preloads:
            argv += ["--preload", p]
        env = dict(self.env, PYTHONPATH=driver.SRC, NGW_STATE_DIR=self.tmp)
        w = driver.Worker(argv, env=env)
        self.workers.append(w)
        w.hello(120)
        return w

    def cold(self, args):
        return subprocess.run([self.program] + args, env=self.env, cwd=self.tmp,
                              capture_output=True, timeout=120)

    def assert_as_cold(self, w, args, expect):
        cold = self.cold(args)
        warm = w.run("pyg", args, env=self.env, cwd=self.tmp, timeout=120)
        self.assertEqual(warm.notices, [])
        self.assertEqual(bytes(warm.stdout), cold.stdout)
        self.assertEqual(warm.code, cold.returncode)
        first, _, rest = bytes(warm.stderr).partition(b"\n")
        self.assertEqual(first.decode(), expect, w.log()[-3000:])
        self.assertEqual(rest, cold.stderr.partition(b"\n")[2])
        self.assertEqual(cold.stderr.partition(b"\n")[0], b"cold")

    def test_preloaded_lexer_module(self):
        w = self.worker("pygments.lexers.python", "ngw_contrib.pygments_memo")
        for args in (["-l", "python", "-f", "html", "code.py"], ["-l", "python", "code.py"],
                     ["-l", "python3", "-f", "html", "-O", "linenos=1", "code.py"],
                     ["-l", "python", "-f", "raw", "code.py"]):
            with self.subTest(args=args):
                self.assert_as_cold(w, args, "prebuilt")

    def test_learned_lexer_module(self):
        """The lexer module the first child imports is learned, and the memo builds its
        classes between sessions: later children find the tables."""
        w = self.worker("ngw_contrib.pygments_memo")
        args = ["-l", "python", "-f", "html", "code.py"]
        self.assert_as_cold(w, args, "cold")
        deadline = time.monotonic() + 60
        while "after-import work is done" not in w.log():
            self.assertLess(time.monotonic(), deadline, w.log()[-3000:])
            time.sleep(0.1)
        self.assert_as_cold(w, args, "prebuilt")


if __name__ == "__main__":
    unittest.main()


def make_dist(root, name, eps):
    """A distribution `name` in directory `root` (a .dist-info with METADATA), declaring
    the entry points `eps` ({group: {name: value}}) if given."""
    info = os.path.join(root, "%s-1.0.dist-info" % name)
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n" % name)
    if eps is not None:
        write_eps(root, name, eps)


def write_eps(root, name, eps):
    path = os.path.join(root, "%s-1.0.dist-info" % name, "entry_points.txt")
    with open(path + ".tmp", "w") as f:
        for group, items in eps.items():
            f.write("[%s]\n" % group + "".join("%s = %s\n" % kv for kv in items.items()))
    os.replace(path + ".tmp", path)


# Compares, at each step, what importlib.metadata.entry_points answers through the memo
# with what it answers itself, for a few selections; prints the memo's stats after each.
# The test's directory (argv[1], on PYTHONPATH) holds distributions that the steps change.
METADATA_PROBE = r"""
import importlib.metadata as md, json, os, shutil, sys
import ngw_contrib.metadata_memo as memo
root, tests = sys.argv[1:3]
sys.path.insert(0, tests)
from test_contrib_memos import make_dist, write_eps
sys.path.pop(0)

def view(answer):
    if isinstance(answer, dict):  # SelectableGroups (3.10-3.11)
        return {g: view(answer.select(group=g)) for g in sorted(answer.groups)}
    return [[ep.name, ep.value, ep.group, str(ep.dist._path), type(ep.dist).__name__]
            for ep in answer]

def compare(step):
    out = {}
    before = memo.stats()["answered"]
    for params in ({"group": "flask.commands"}, {"group": "console_scripts"}, {},
                   {"name": "ngwtest"}):
        got = view(md.entry_points(**params))
        out[json.dumps(params)] = [got == view(memo._original(**params)), got]
        out["answered"] = memo.stats()["answered"] - before
    return out

steps = {"filled": compare("filled")}
write_eps(root, "ngwplug", {"flask.commands": {"ngwtest": "ngwplug:cmd", "two": "ngwplug:two"}})
steps["entry points changed"] = compare("changed")
make_dist(root, "ngwnew", {"flask.commands": {"three": "ngwnew:three"}})
steps["distribution added"] = compare("added")
shutil.rmtree(os.path.join(root, "ngwplug-1.0.dist-info"))
steps["distribution removed"] = compare("removed")
memo._fill()
steps["refilled at once"] = compare("refilled")
print(json.dumps({"steps": steps, "stats": memo.stats(), "root kept": root in memo._memo}))
"""


class MetadataMemo(unittest.TestCase):
    def test_answers_are_importlib_metadata_s_own(self):
        with tempfile.TemporaryDirectory() as root:
            make_dist(root, "ngwplug", {"flask.commands": {"ngwtest": "ngwplug:cmd"},
                                        "console_scripts": {"ngwplug": "ngwplug:main"}})
            make_dist(root, "ngwnone", None)
            # Files younger than the memo's SETTLED are not memoised (a change within the
            # same tick of the file system's clock could go unseen).
            time.sleep(2.2)
            r = subprocess.run([PY, "-c", METADATA_PROBE, root, driver.HERE],
                               env=client_env(PYTHONPATH=driver.SRC + os.pathsep + root),
                               capture_output=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr.decode()[-3000:])
        out = json.loads(r.stdout)
        for step, answers in out["steps"].items():
            for params, (same, got) in ((k, v) for k, v in answers.items() if k != "answered"):
                self.assertTrue(same, (step, params, got))
        steps = out["steps"]
        # Filled at import: it answered every lookup.
        self.assertEqual(steps["filled"]["answered"], 4)
        self.assertIn(["ngwtest", "ngwplug:cmd", "flask.commands",
                       os.path.join(root, "ngwplug-1.0.dist-info"), "PathDistribution"],
                      steps["filled"]['{"group": "flask.commands"}'][1])
        # Every change seen, by the stdlib's own lookup (the memo no longer answers).
        self.assertEqual([e[0] for e in steps["entry points changed"][
            '{"group": "flask.commands"}'][1]], ["ngwtest", "two"])
        self.assertEqual(steps["entry points changed"]["answered"], 0)
        self.assertIn("three", [e[0] for e in steps["distribution added"][
            '{"group": "flask.commands"}'][1]])
        self.assertNotIn("ngwtest", [e[0] for e in steps["distribution removed"][
            '{"group": "flask.commands"}'][1]])
        # Refilled right after a change: too recent to keep, so it does not answer.
        self.assertEqual(steps["refilled at once"]["answered"], 0)
        self.assertFalse(out["root kept"])
        self.assertIsNone(out["stats"]["skipped"])


PLUGIN = '''import os
import sys

import click


@click.command("ngwtest")
def cmd():
    """A plugin command."""
    click.echo("plugin ran")
    memo = sys.modules.get("ngw_contrib.metadata_memo")
    if memo is not None:  # served: says whether the memo answered flask's lookup
        with open(os.environ["MEMOTEST_ANSWERED"], "w") as f:
            f.write(str(memo.stats()["last"]))


@click.command("ngwtwo")
def two():
    """Another plugin command."""
    click.echo("second plugin ran")
'''


def served_as_cold(test, w, name, program, env, root):
    """A function of a program's arguments that runs `program` cold and command `name`
    through the worker `w` in `root`, asserts the two show the same, and returns the cold
    run."""
    def same(args):
        cold = subprocess.run([program] + args, env=env, cwd=root, capture_output=True,
                              timeout=120)
        warm = w.run(name, args, env=env, cwd=root, timeout=120)
        test.assertEqual(warm.notices, [], w.log()[-2000:])
        test.maxDiff = None
        test.assertEqual((bytes(warm.stdout), bytes(warm.stderr), warm.code),
                         (cold.stdout, cold.stderr, cold.returncode))
        return cold
    return same


def flask_as_cold(test, w, env, root):
    """served_as_cold for flask, returning the cold stdout."""
    same = served_as_cold(test, w, "flask", os.path.join(BIN, "flask"), env, root)
    return lambda args: same(args).stdout.decode()


class MetadataMemoServed(unittest.TestCase):
    """flask served with the memo: its plugin commands (entry points of `flask.commands`,
    here from a distribution in the test's directory) as a cold flask finds them, before
    and after the distribution changes."""

    def test_flask_plugin_commands(self):
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as state:
            with open(os.path.join(root, "ngwplug.py"), "w") as f:
                f.write(PLUGIN)
            make_dist(root, "ngwplug", {"flask.commands": {"ngwtest": "ngwplug:cmd"}})
            time.sleep(2.2)  # older than the memo's SETTLED: it is memoised
            answered = os.path.join(state, "answered")
            env = client_env(LANG="C.UTF-8", PYTHONPATH=driver.SRC + os.pathsep + root,
                             MEMOTEST_ANSWERED=answered)
            w = driver.Worker([PY, "-m", "ngw", "console-script", os.path.join(BIN, "flask"),
                               "--preload", "ngw_contrib.metadata_memo"],
                              env=dict(env, NGW_STATE_DIR=state))
            try:
                w.hello(120)

                same = flask_as_cold(self, w, env, root)

                self.assertIn("ngwtest", same(["--help"]))
                self.assertIn("plugin ran", same(["ngwtest"]))
                with open(answered) as f:
                    self.assertEqual(f.read(), "True")  # flask's lookup, by the memo
                write_eps(root, "ngwplug", {"flask.commands": {"ngwtest": "ngwplug:cmd",
                                                               "ngwtwo": "ngwplug:two"}})
                self.assertIn("ngwtwo", same(["--help"]))
                self.assertIn("second plugin ran", same(["ngwtwo"]))
                os.remove(os.path.join(root, "ngwplug-1.0.dist-info", "entry_points.txt"))
                self.assertNotIn("ngwtest", same(["--help"]))
            finally:
                try:
                    w.quit()
                finally:
                    w.close()


# Two children forked from one process build the same rules: `cold` with werkzeug's own
# code, `memo` with the memo imported, its keys reported, the memo emptied and filled
# from the report (as a zygote fills it), then the rules built again. Each prints, per
# rule and builder, the code and the function werkzeug made, and the URLs it builds.
BUILDER_PROBE = r"""
import json, sys
from werkzeug.routing import Map, Rule
from werkzeug.routing.converters import UnicodeConverter


class Odd(Rule):
    def _get_func_code(self, code, name):
        fn = Rule._get_func_code(code, name)
        fn.odd = True
        return fn


def rules():
    return [Rule("/"), Rule("/static/<path:filename>", endpoint="static"),
            Rule("/a//b/<int:id>/c d/é", endpoint="a"),
            Rule("/x/<any(one, two):kind>/<float:f>", endpoint="x"),
            Rule("/u/<uuid:u>/", endpoint="u"),
            Rule("/d/<int:n>", endpoint="d", defaults={"n": 3}),
            Rule("/s/<name>", endpoint="s", subdomain="<sub>"),
            Odd("/odd/<w>", endpoint="odd"),
            Rule("/q?<x>", endpoint="q", merge_slashes=False)]


def describe():
    out = []
    m = Map(rules())
    m2 = Map([Rule("/h/<v>", endpoint="h", host="<host>.example")], host_matching=True)
    for rule in list(m.iter_rules()) + list(m2.iter_rules()):
        for fn in (rule._build, rule._build_unknown):
            c = fn.__code__
            out.append([rule.rule, fn.__name__, fn.__qualname__, fn.__module__,
                        sorted(fn.__globals__), fn.__defaults__, fn.__kwdefaults__,
                        getattr(fn, "odd", False), c.co_filename, c.co_name,
                        c.co_varnames, c.co_consts.__repr__(), c.co_code.hex()])
    a = m.bind("example.org")
    out.append([a.build("a", {"id": 4, "z": "é"}), a.build("x", {"kind": "two", "f": 1.5}),
                a.build("d"), a.build("odd", {"w": "ü v"}), a.build("q", {"x": "/"}),
                m.bind("example.org", subdomain="s1").build("s", {"name": "n", "sub": "s1"}),
                m2.bind("h1.example").build("h", {"v": "1", "host": "h1"})])
    return out


if sys.argv[1] == "cold":
    first = describe()
else:
    sys.path.insert(0, sys.argv[2])
    import ngw_contrib.werkzeug_memo as memo
    assert memo.skipped is None, memo.skipped
    describe()
    report = json.loads(json.dumps(memo._report()))
    memo._memo.clear()
    bad = [memo._fill(k) for k in report]
    assert bad == [None] * len(report), bad
    assert memo._fill(["/", [[False, 1]], True]) == "not a builder's key"
    assert memo._fill("x") == "not a builder's key"
    before = memo.stats()
    first = describe()
    after = memo.stats()
    first.append([after["memo"] - before["memo"], after["built"] - before["built"],
                  len(report)])
print(json.dumps(first))
"""


def probe(kind):
    proc = subprocess.run([PY, "-c", BUILDER_PROBE, kind, driver.SRC], capture_output=True,
                          timeout=120)
    if proc.returncode != 0:
        raise AssertionError(proc.stderr.decode())
    return json.loads(proc.stdout)


def run_file(code):
    """Runs `code` from a file (so that inspect can read the source of what it defines)
    with the venv's interpreter and the SDK's path as argv[1]; returns its stdout."""
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "other.py")
        with open(script, "w") as f:
            f.write(code)
        return subprocess.run([PY, script, driver.SRC], capture_output=True, text=True,
                              timeout=120, check=True).stdout


class WerkzeugMemoState(unittest.TestCase):
    def test_builders_are_werkzeug_s_own(self):
        cold, memo = probe("cold"), probe("memo")
        counts = memo.pop()
        self.maxDiff = None
        self.assertEqual(memo, cold)
        # Every builder but the rule with defaults' two came from the memo, and nothing
        # was compiled after the fill.
        self.assertEqual(counts, [18, 0, 18])

    def test_not_installed_on_other_code(self):
        code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
                "from werkzeug.routing.rules import Rule\n"
                "real = Rule._compile_builder\n"
                "def _compile_builder(self, append_unknown=True):\n"
                "    return real(self, append_unknown)\n"
                "Rule._compile_builder = _compile_builder\n"
                "import ngw, ngw_contrib.werkzeug_memo as m\n"
                "from ngw import _adaptive\n"
                "print(Rule._compile_builder is _compile_builder, 'werkzeug-builders' in "
                "_adaptive.MEMOS, m.skipped)\n")
        out = run_file(code)
        self.assertRegex(out, r"^True False Rule._compile_builder is not the code this "
                              r"memo knows \([0-9a-f]{16}\)\n$")


ROUTES_APP = """import os
import sys

from flask import Flask, url_for

app = Flask(__name__)
app.config["SERVER_NAME"] = "example.org"

for i in range(ROUTES):
    app.add_url_rule("/r%d/<int:id>/é x" % i, "r%d" % i, lambda id: "")


@app.cli.command("urls")
def urls():
    print(*(url_for(e, id=3, q="ü") for e in sorted(app.view_functions) if e != "static"))
    print(url_for("static", filename="a b.css"))
    memo = sys.modules.get("ngw_contrib.werkzeug_memo")
    if memo is not None:  # served: how many builders came from the memo
        with open(os.environ["MEMOTEST_STATS"], "w") as f:
            f.write(str(memo.stats()["memo"]))
"""


class WerkzeugMemoServed(unittest.TestCase):
    """flask served with the memo: the application's builders come from the memo once a
    session has reported them, and flask's output is a cold run's, before and after the
    application changes."""

    def test_flask_routes_and_url_building(self):
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as state:
            app = os.path.join(root, "app.py")
            with open(app, "w") as f:
                f.write(ROUTES_APP.replace("ROUTES", "20"))
            stats = os.path.join(state, "stats")
            env = client_env(LANG="C.UTF-8", FLASK_APP="app.py", MEMOTEST_STATS=stats)
            w = driver.Worker([PY, "-m", "ngw", "console-script", os.path.join(BIN, "flask"),
                               "--preload", "ngw_contrib.werkzeug_memo"],
                              env=dict(env, NGW_STATE_DIR=state,
                                       PYTHONPATH=driver.SRC))
            try:
                w.hello(120)

                same = flask_as_cold(self, w, env, root)

                def from_memo():
                    with open(stats) as f:
                        return int(f.read())

                self.assertIn("/r19/3/%C3%A9%20x?q=%C3%BC", same(["urls"]))
                self.assertEqual(from_memo(), 0)
                deadline = time.monotonic() + 30
                while "memo keys learned" not in w.log() and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertRegex(w.log(), r"[1-9][0-9]* memo keys learned")
                self.assertIn("r19", same(["routes"]))
                same(["urls"])
                self.assertEqual(from_memo(), 42)  # 20 rules and the static one, 2 each
                with open(app, "w") as f:  # one more rule: built by the child itself
                    f.write(ROUTES_APP.replace("ROUTES", "21"))
                self.assertIn("/r20/3/", same(["urls"]))
                self.assertEqual(from_memo(), 42)
            finally:
                try:
                    w.quit()
                finally:
                    w.close()


# Documents for docutils_memo: a flat one, one nesting four lists deep (more nested state
# machines than the memo makes at first), and one with a directive's content and a
# block quote.
RST_FLAT = "Title\n=====\n\nA paragraph with *emphasis* and ``code``.\n"
RST_DEEP = ("Deep\n====\n\n* one\n\n  * two\n\n    * three\n\n      * four\n\n"
            "        1. five\n\n           - é six\n\n* back\n")
RST_MIXED = (".. note::\n\n   A note with a list:\n\n   * a\n   * b\n\n"
             "   A quote inside it.\n\n      -- ü\n\nterm\n  definition\n")

# Parses the documents named on the command line, each as `name` or `name:debug`, in one
# process, with the memo imported first when the first argument is `memo` (or
# `memo-nopurge`: the memo without its debug-mode removal, to show that the removal is
# needed), and prints JSON: per document, the HTML and what went to stderr; then the
# memo's stats and the machines it would report.
MACHINES_PROBE = r"""
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[2])
kind = sys.argv[1]
DOCS = json.loads(sys.argv[3])
if kind.startswith("memo"):
    import docutils.parsers
    import ngw_contrib.docutils_memo as memo
    assert memo.skipped is None, memo.skipped
    if kind == "memo-nopurge":
        docutils.parsers.Parser.setup_parse = memo._original_setup_parse
from docutils.core import publish_string
out = []
for spec in sys.argv[4:]:
    name, _, debug = spec.partition(":")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        html = publish_string(DOCS[name], writer_name="html",
                              settings_overrides={"debug": bool(debug),
                                                  "output_encoding": "unicode"})
    out.append([html, err.getvalue()])
if kind.startswith("memo"):
    out.append([memo.stats(), memo._report()])
print(json.dumps(out))
"""


def machines(kind, *docs):
    text = json.dumps({"flat": RST_FLAT, "deep": RST_DEEP, "mixed": RST_MIXED})
    proc = subprocess.run([PY, "-c", MACHINES_PROBE, kind, driver.SRC, text] + list(docs),
                          capture_output=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(proc.stderr.decode())
    return json.loads(proc.stdout)


class DocutilsMemoState(unittest.TestCase):
    maxDiff = None

    def test_documents_as_cold(self):
        """Documents parsed one after the other in one process, with the memo's machines
        in the list and without: the same HTML and the same stderr, debug mode included
        (its trace is printed by the machines)."""
        for docs in (["flat", "deep", "mixed"], ["mixed:debug", "flat"],
                     ["flat", "deep:debug", "deep"], ["deep", "flat:debug"]):
            with self.subTest(docs=docs):
                cold = machines("cold", *docs)
                memo = machines("memo", *docs)
                stats, report = memo.pop()
                self.assertEqual(memo, cold)
                self.assertEqual(stats["made"], 2)
                debug = any(d.endswith(":debug") for d in docs)
                self.assertEqual(stats["pristine"], 0)
                # A document in debug mode removed the machines no run had popped.
                if docs[0].endswith(":debug"):
                    self.assertEqual(stats["removed"], 2)
                if not debug and "deep" in docs:  # the deep list needed more than 2
                    self.assertEqual(len(report), 1)
                    self.assertGreater(report[0], 2)
                if debug:
                    self.assertEqual(report, [])
                self.assertTrue(any("StateMachine.run" in err for _, err in cold) == debug)

    def test_debug_mode_needs_the_removal(self):
        """Without the removal, a debug-mode document would use machines made without
        debug mode, and its trace would be shorter than a cold run's."""
        cold = machines("cold", "mixed:debug")
        memo = machines("memo-nopurge", "mixed:debug")
        memo.pop()
        self.assertEqual(memo[0][0], cold[0][0])
        self.assertNotEqual(memo[0][1], cold[0][1])

    def test_replaced_state_classes(self):
        """A program that replaces the module's state classes gets machines made with
        its own: the memo removes its unpopped ones, and makes no more."""
        code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
                "import ngw_contrib.docutils_memo as m\n"
                "from docutils.core import publish_string\n"
                "from docutils.parsers.rst import states\n"
                "states.state_classes = tuple(list(states.state_classes))\n"
                "publish_string('* a\\n\\n  * b\\n', writer_name='null')\n"
                "cache = states.RSTState.nested_sm_cache\n"
                "print(m.stats()['removed'], m.top_up(4), m._report(),\n"
                "      all(sm.states['Body'].nested_sm_kwargs['state_classes']\n"
                "          is states.state_classes for sm in cache))\n")
        out = venv_run(code, driver.SRC, timeout=120).decode()
        self.assertEqual(out, "2 0 [] True\n")

    def test_fill(self):
        code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
                "import ngw_contrib.docutils_memo as m\n"
                "from docutils.parsers.rst import states\n"
                "print(m._fill(5), m._fill('x'), m._fill(0), m._fill(99), m._fill(3),\n"
                "      m.stats()['pristine'], len(states.RSTState.nested_sm_cache))\n")
        out = venv_run(code, driver.SRC, timeout=120).decode()
        self.assertEqual(out, "None not a number of machines not a number of machines "
                              "more than 16 machines None 5 5\n")

    def test_not_installed_on_other_code(self):
        code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
                "import docutils.parsers\n"
                "from docutils.parsers.rst import states\n"
                "real = states.RSTState.nested_parse\n"
                "def nested_parse(self, *args, **kwargs):\n"
                "    return real(self, *args, **kwargs)\n"
                "states.RSTState.nested_parse = nested_parse\n"
                "setup = docutils.parsers.Parser.setup_parse\n"
                "import ngw, ngw_contrib.docutils_memo as m\n"
                "from ngw import _adaptive\n"
                "print(docutils.parsers.Parser.setup_parse is setup,\n"
                "      len(states.RSTState.nested_sm_cache),\n"
                "      'docutils-machines' in _adaptive.MEMOS, m.skipped)\n")
        out = run_file(code)
        self.assertRegex(out, r"^True 0 False docutils' state machines are not the code "
                              r"this memo knows \([0-9a-f]{16}\)\n$")


# rst2html.py's own code, and the memo's stats written where MEMOTEST_STATS says when the
# memo is loaded (served).
RST_PROGRAM = '''
import os, sys
from docutils.core import publish_cmdline
try:
    publish_cmdline(writer_name="html", description="rst2html for the memo's test")
finally:
    memo = sys.modules.get("ngw_contrib.docutils_memo")
    if memo is not None:
        with open(os.environ["MEMOTEST_STATS"], "w") as f:
            f.write("%(made)d %(pristine)d" % memo.stats())
'''


class DocutilsMemoServed(unittest.TestCase):
    """rst2html served with the memo: output byte-identical to a cold run's; a deeper
    document's machines are learned from the child that made them, and the next child
    makes none."""

    def test_rst2html(self):
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as state:
            for name, text in (("flat.rst", RST_FLAT), ("deep.rst", RST_DEEP),
                               ("mixed.rst", RST_MIXED)):
                with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                    f.write(text)
            program = os.path.join(root, "rst")
            with open(program, "w") as f:
                f.write("#!%s\n%s" % (PY, RST_PROGRAM))
            os.chmod(program, 0o755)
            stats = os.path.join(state, "stats")
            env = client_env(LANG="C.UTF-8", MEMOTEST_STATS=stats)
            w = driver.Worker([PY, "-m", "ngw", "script", "rst=" + program,
                               "--preload", "docutils.core",
                               "--preload", "ngw_contrib.docutils_memo"],
                              env=dict(env, NGW_STATE_DIR=state, PYTHONPATH=driver.SRC))
            try:
                w.hello(120)

                as_cold = served_as_cold(self, w, "rst", program, env, root)

                def same(args):
                    self.assertEqual(as_cold(args).returncode, 0)
                    with open(stats) as f:
                        return [int(x) for x in f.read().split()]

                # [made by the zygote, left unpopped]: a section's body is one nested
                # parse, the note's list and quote two
                self.assertEqual(same(["flat.rst"]), [2, 1])
                self.assertEqual(same(["mixed.rst"]), [2, 0])
                self.assertEqual(same(["deep.rst"]), [2, 0])  # and the child made more
                learned = re.compile(r"[1-9][0-9]* memo keys learned")
                deadline = time.monotonic() + 30
                while not learned.search(w.log()) and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertRegex(w.log(), learned)
                made, pristine = same(["deep.rst"])
                self.assertGreater(made, 2)  # the zygote made what the child reported
                self.assertEqual(pristine, 0)  # and this child needed no more
                self.assertEqual(same(["--debug", "mixed.rst"])[1], 0)
                self.assertEqual(same(["mixed.rst"])[1], made - 2)
            finally:
                try:
                    w.quit()
                finally:
                    w.close()
