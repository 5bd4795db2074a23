"""ngw_contrib.botocore_memo and ngw_contrib.awscli, against the behaviour they stand in for:
botocore without the memos, and `import awscli` in a fresh interpreter."""

import importlib
import json
import os
import subprocess
import sys
import tempfile
import unittest

from support import client_env

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

# Prints what a botocore session computes, as JSON; argv[1] = "memo" preloads the memos.
PROBE = r"""
import functools, json, logging, sys
if sys.argv[1] == "memo":
    import ngw_contrib.botocore_memo as memo
import botocore.hooks, botocore.session, botocore.compat

def handlers():
    def plain(a, **kw): pass
    def strict(a): pass
    class C:
        def m(self, **kw): pass
        def n(self): pass
        def __call__(self, **kw): pass
    def closure(x):
        def inner(**kw): return x
        return inner
    return [plain, strict, C().m, C().n, C(), closure(1), closure(2),
            functools.partial(plain, 1), functools.partial(strict), len]

out = {}
for i in range(2):  # two sessions: the second one is what a memo would answer
    s = botocore.session.Session()
    loader = s.get_component("data_loader")
    out["services%d" % i] = loader.list_available_services("service-2")
    out["paginators%d" % i] = loader.list_available_services("paginators-1")
    aliaser = s.get_component("event_emitter")
    names = ["before-call.apigateway", "creating-client-class.sagemaker-runtime",
             "needs-retry.s3", "service-data-loaded.lex-runtime", "nothing.to.alias"]
    out["aliases%d" % i] = [aliaser._alias_event_name(n) for n in names]
    out["argspec%d" % i] = [botocore.hooks.accepts_kwargs(h) for h in handlers()]
if sys.argv[1] == "memo":
    out["frozen"] = [memo.is_frozen(p) for p in s.get_component("data_loader").search_paths]
    out["stats"] = memo.stats()
print(json.dumps(out))
"""


def probe(mode, **env):
    e = client_env(PYTHONPATH=SRC, **env)
    r = subprocess.run([sys.executable, "-c", PROBE, mode], env=e, capture_output=True,
                       timeout=60)
    if r.returncode:
        raise AssertionError(r.stderr.decode())
    return json.loads(r.stdout)


class BotocoreMemo(unittest.TestCase):
    def test_answers_are_botocore_s_own(self):
        with tempfile.TemporaryDirectory() as data:
            os.makedirs(os.path.join(data, "ngwextra", "2026-01-01"))
            with open(os.path.join(data, "ngwextra", "2026-01-01", "service-2.json"), "w") as f:
                f.write("{}")
            plain, memo = probe("plain", AWS_DATA_PATH=data), probe("memo", AWS_DATA_PATH=data)
        for key in ("services", "paginators", "aliases", "argspec"):
            for i in (0, 1):
                self.assertEqual(memo[key + str(i)], plain[key + "0"], key)
        self.assertIn("ngwextra", memo["services1"])
        self.assertIn("s3", memo["services1"])
        self.assertEqual(plain["argspec0"],
                         ["kw", None, "kw", None, "kw", "kw", "kw", "kw", None, None])
        # The memos answered the second session (and the first: the module filled them).
        hits = {name: h for name, (h, _) in memo["stats"].items()}
        self.assertGreater(hits["scan"], 0, memo["stats"])
        self.assertGreater(hits["alias"], 0, memo["stats"])
        self.assertGreater(hits["argspec"], 0, memo["stats"])
        # Only botocore's own data directory is frozen: AWS_DATA_PATH and ~/.aws/models
        # are scanned live.
        self.assertIn(True, memo["frozen"])
        self.assertIn(False, memo["frozen"])


def sdk_module(name):
    """Imports `name` from this SDK's sources (the tests run with them on sys.path when
    started by run-tests; this also works when they are not)."""
    sys.path.insert(0, SRC)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(SRC)


AWSCLI_ORACLE = "import os, awscli; print(os.environ.get('AWS_DATA_PATH'))"


class AwscliRule(unittest.TestCase):
    def test_aws_data_path_matches_a_cold_import(self):
        aws_data_path = sdk_module("ngw_contrib.awscli").aws_data_path
        cases = [None, "", "/x", "/x:/y", "~/models", "~root/m", "$NGWT_DIR/a:${NGWT_DIR}b",
                 "$NGWT_UNSET/c", "~", "relative/dir"]
        for value in cases:
            for home in ("/home/ngw-test", None):
                env = client_env(NGWT_DIR="/opt/d")
                env.pop("AWS_DATA_PATH", None)
                env.pop("HOME", None)
                if home is not None:
                    env["HOME"] = home
                if value is not None:
                    env["AWS_DATA_PATH"] = value
                cold = subprocess.run([sys.executable, "-c", AWSCLI_ORACLE], env=env,
                                      capture_output=True, timeout=60, check=True)
                self.assertEqual(aws_data_path(value, env), cold.stdout.decode().rstrip("\n"),
                                 (value, home))


class ExpandFunctions(unittest.TestCase):
    def test_same_as_os_path_with_that_environment(self):
        rules = sdk_module("ngw._rules")
        expanduser, expandvars = rules.expanduser, rules.expandvars
        env = {"A": "1", "B_2": "two", "HOME": "/h/me/"}
        saved = dict(os.environ)
        try:
            os.environ.clear()
            os.environ.update(env)
            for path in ["$A", "${A}x", "$A$B_2", "$missing", "${missing", "a$", "$$A", "~",
                         "~/x", "~root", "~root/y", "~nosuchuser-ngw/z", "x~", "/~"]:
                self.assertEqual(expandvars(path, env), os.path.expandvars(path), path)
                self.assertEqual(expanduser(path, env), os.path.expanduser(path), path)
        finally:
            os.environ.clear()
            os.environ.update(saved)


class Layout(unittest.TestCase):
    def test_core_imports_only_the_standard_library(self):
        # Every module of the core package, imported in a fresh interpreter, loads nothing
        # from outside the standard library (site-packages) but ngw itself.
        probe = (
            "import importlib, pkgutil, sys, sysconfig\n"
            "before = set(sys.modules)\n"  # what site's .pth files loaded
            "import ngw\n"
            "skip = {'ngw.programs.awscli', 'ngw.memo.botocore'}\n"
            "for m in pkgutil.walk_packages(ngw.__path__, 'ngw.'):\n"
            "    if m.name not in skip: importlib.import_module(m.name)\n"
            "purelib = sysconfig.get_paths()['purelib']\n"
            "bad = sorted(n for n, m in sys.modules.items() if n not in before and"
            " (getattr(m, '__file__', None) or '').startswith(purelib))\n"
            "print(bad)\n")
        out = subprocess.run([sys.executable, "-c", probe], env=client_env(PYTHONPATH=SRC),
                             capture_output=True, timeout=60, check=True)
        self.assertEqual(out.stdout.decode().strip(), "[]", out.stderr.decode())

    def test_former_module_names_are_aliases(self):
        probe = ("import ngw.programs.awscli as a, ngw_contrib.awscli as b\n"
                 "import ngw.memo.botocore as c, ngw_contrib.botocore_memo as d\n"
                 "print(a is b, c is d)\n")
        out = subprocess.run([sys.executable, "-c", probe], env=client_env(PYTHONPATH=SRC),
                             capture_output=True, timeout=60, check=True)
        self.assertEqual(out.stdout.decode().strip(), "True True", out.stderr.decode())


if __name__ == "__main__":
    unittest.main()
