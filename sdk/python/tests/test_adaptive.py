"""Adaptive preloading of compiled regular expressions and memo keys (docs/ngw.md 12.5): a
child's report of the patterns it compiled and the keys its memos lacked, the worker's
compiling and filling of them, the bounds, the cache file, and real workers whose next
child finds them.

The unit tests use `ngw._adaptive` directly, a child's side in a forked process (so that
this process's `re` cache is the "zygote's"); the worker tests spawn
`python3 -m ngw entrypoint` with the driver.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

import driver
from support import client_env

from ngw import _adaptive

RUNNER = [sys.executable, "-m", "ngw"]


def token():
    return uuid.uuid4().hex


def forget(*keys):
    """Takes patterns out of this process's re cache (as if never compiled)."""
    for cache in (getattr(re, "_cache", {}), getattr(re, "_cache2", {})):
        for key in keys:
            cache.pop(key, None)


def cached(key):
    return any(key in c for c in (getattr(re, "_cache", {}), getattr(re, "_cache2", {})))


class Recorder:
    def __init__(self):
        self.lines = []

    def __call__(self, line):
        self.lines.append(line)


def in_child(learner, fn):
    """Runs fn() in a forked child that then reports to `learner` what it compiled that
    this process's cache did not hold, as a session child does at exit."""
    known = _adaptive.cached_patterns()
    modules = frozenset(sys.modules)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn()
            _adaptive.child_report(modules, learner.roots, learner.report_path, known)
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise AssertionError("the child failed (status %d)" % status)
    learner.read_reports()


class Patterns(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ngw-adaptive-")
        self.log = Recorder()
        self.learner = _adaptive.Learner(self.log, os.path.join(self.tmp, "preload.json"))
        self.assertIsNotNone(self.learner.report_path)

    def tearDown(self):
        os.close(self.learner.r)
        os.close(self.learner.w)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_reported_compiled_then_cached(self):
        t = token()
        keys = [(str, r"a(\d+)-" + t, 0), (bytes, b"b\xff[\x00-\x1f]+" + t.encode(), 0),
                (str, "c\u00e9\nd" + t, int(re.I | re.M)),
                (bytes, b"(?x) e \\s+" + t.encode(), int(re.S))]

        def work():
            for kind, pattern, flags in keys:
                re.compile(pattern, flags)
            re.match(r"f+" + t, "fff")  # the module functions go through the cache too

        in_child(self.learner, work)
        expected = keys + [(str, r"f+" + t, 0)]
        self.assertEqual(list(self.learner.pattern_queue), expected)
        for key in expected:
            self.assertFalse(cached(key))
        self.assertEqual(self.learner.compile_patterns(), 5)
        self.assertEqual(list(self.learner.patterns), expected)
        for key in expected:
            self.assertTrue(cached(key))
        # The next child finds them cached: it compiles nothing and reports nothing.
        compiler = re._compiler if hasattr(re, "_compiler") else re.sre_compile

        def again():
            real = compiler.compile

            def refuse(*a, **kw):
                raise AssertionError("compiled again: %r" % (a,))

            compiler.compile = refuse
            try:
                for kind, pattern, flags in keys:
                    re.compile(pattern, flags)
            finally:
                compiler.compile = real

        in_child(self.learner, again)
        self.assertEqual(self.learner.pattern_queue, {})
        # A cached pattern is what a fresh compilation gives.
        for kind, pattern, flags in expected:
            c, f = re.compile(pattern, flags), compiler.compile(pattern, flags)
            self.assertIsNot(c, f)
            self.assertEqual(c, f)
            self.assertEqual((c.pattern, c.flags, c.groups, c.groupindex),
                             (f.pattern, f.flags, f.groups, f.groupindex))
        forget(*expected)

    def test_purge_still_empties_the_cache(self):
        t = token()
        key = (str, "purge" + t, 0)
        in_child(self.learner, lambda: re.compile(key[1]))
        self.learner.compile_patterns()
        self.assertTrue(cached(key))
        saved = dict(re._cache)
        try:
            re.purge()
            self.assertFalse(cached(key))
            self.assertEqual(len(re._cache), 0)
        finally:
            re._cache.update(saved)
        forget(key)

    def test_failing_and_warning_patterns_are_dropped(self):
        t = token()
        bad = (str, "(unclosed" + t, 0)
        warns = (str, "[[nested" + t + "]", 0)  # FutureWarning: possible nested set
        good = (str, "good" + t, 0)
        # A report naming a pattern that fails (a child cannot cache one: written by hand).
        os.write(self.learner.w, b"".join(b"\0" + _adaptive.encode_pattern(k).encode() + b"\n"
                                          for k in (bad, warns, good)))
        self.learner.read_reports()
        self.assertEqual(list(self.learner.pattern_queue), [bad, warns, good])
        self.assertEqual(self.learner.compile_patterns(), 1)
        self.assertEqual(list(self.learner.patterns), [good])
        self.assertEqual(self.learner.patterns_excluded, {bad, warns})
        self.assertFalse(cached(bad))
        self.assertFalse(cached(warns))  # a child compiling it warns, as a cold run does
        self.assertTrue(any("does not compile" in line for line in self.log.lines))
        self.assertTrue(any("warns" in line for line in self.log.lines))
        # Reported again: not queued again.
        os.write(self.learner.w, b"\0" + _adaptive.encode_pattern(bad).encode() + b"\n")
        self.learner.read_reports()
        self.assertEqual(self.learner.pattern_queue, {})
        forget(good)

    def test_debug_flag_never_learned(self):
        key = (str, "dbg" + token(), int(re.DEBUG))
        self.assertIsNotNone(_adaptive.compile_pattern(key))
        self.assertFalse(cached(key))

    def test_bound(self):
        t = token()
        n = _adaptive.MAX_PATTERNS + 20
        keys = [(str, "bound%d-%s" % (i, t), 0) for i in range(n)]
        data = b"".join(b"\0" + _adaptive.encode_pattern(k).encode() + b"\n" for k in keys)
        os.write(self.learner.w, data)
        self.learner.read_reports()
        self.assertEqual(list(self.learner.pattern_queue), keys[:_adaptive.MAX_PATTERNS])
        self.learner.compile_patterns()
        self.assertEqual(len(self.learner.patterns), _adaptive.MAX_PATTERNS)
        self.assertLess(_adaptive.MAX_PATTERNS, getattr(re, "_MAXCACHE", 512))
        forget(*keys)

    def test_too_long_or_odd_patterns_not_reported(self):
        t = token()
        long = "x" * (_adaptive.MAX_PATTERN_LEN + 1) + t

        class S(str):
            pass

        def work():
            re.compile(long)
            re.compile(S("sub" + t))

        in_child(self.learner, work)
        self.assertEqual(self.learner.pattern_queue, {})
        self.assertIsNone(_adaptive.decode_pattern(json.dumps(["s", long, 0])))
        for text in ("", "[", '["q", "a", 0]', '["s", "a", "0"]', '["b", "\\u0100", 0]',
                     '["s", "a", 1.5]', "3"):
            self.assertIsNone(_adaptive.decode_pattern(text), text)

    def test_encoding_round_trip(self):
        for key in [(str, "a\nb\u00e9\ud800\\", 0), (bytes, bytes(range(256)), 0),
                    (str, "", int(re.A | re.I)), (bytes, b"\n", 64)]:
            text = _adaptive.encode_pattern(key)
            self.assertNotIn("\n", text)
            text.encode("ascii")
            self.assertEqual(_adaptive.decode_pattern(text), key)

    def test_cache_file_round_trip(self):
        t = token()
        good = [(str, "file-a" + t, 0), (bytes, b"file-b\xfe" + t.encode(), int(re.I))]
        bad = (str, "file-(" + t, 0)
        os.write(self.learner.w, b"".join(b"\0" + _adaptive.encode_pattern(k).encode() + b"\n"
                                          for k in good + [bad]))
        self.learner.read_reports()
        self.learner.compile_patterns()
        self.learner.learned = ["fractions"]
        self.learner.save()
        forget(*good)
        other = _adaptive.Learner(self.log, self.learner.path)
        try:
            self.assertEqual(other.load(), ["fractions"])
            self.assertEqual(list(other.pattern_queue), good)
            self.assertEqual(other.patterns_excluded, {bad})
            self.assertEqual(other.compile_patterns(), 2)
            for key in good:
                self.assertTrue(cached(key))
        finally:
            os.close(other.r)
            os.close(other.w)
            forget(*good)

    def test_report_never_blocks_on_a_full_pipe(self):
        # Nobody reads the pipe: a child's report is cut to whole lines that fit, or left
        # out, and the child exits anyway.
        t = token()
        size = __import__("fcntl").fcntl(self.learner.w, _adaptive._F_GETPIPE_SZ)
        os.set_blocking(self.learner.w, False)
        filler = b"#" * 4095 + b"\n"
        written = 0
        try:
            while True:
                written += os.write(self.learner.w, filler)
        except BlockingIOError:
            pass
        self.assertGreaterEqual(written, size - 4096)
        in_child(self.learner, lambda: re.compile("full" + t))
        self.assertEqual(self.learner.pattern_queue, {})


WORKER_MODULE = r'''
import re, sys


def main():
    t = sys.argv[1]
    keys = [(str, "ngw-(\\d+)-" + t, 0), (bytes, b"ngw-\xff-" + t.encode(), 2),
            (str, "ngw (?P<n> \\w+) " + t, int(re.X | re.M))]
    hits = [any(k in c for c in (re._cache, getattr(re, "_cache2", {}))) for k in keys]
    for kind, pattern, flags in keys:
        re.compile(pattern, flags)
    re.compile("[[ngw" + t + "]")  # warns (FutureWarning) on every cold run
    print(hits, re.compile(keys[0][1]).match("ngw-42-" + t).group(1))
'''


class Worker(unittest.TestCase):
    """A real worker: the next child finds the patterns the previous one compiled, and so
    does the first child of the next worker; a warning pattern keeps warning."""

    def test_learned_between_sessions_and_across_restarts(self):
        tmp = tempfile.mkdtemp(prefix="ngw-adaptive-re-")
        t = token()
        try:
            with open(os.path.join(tmp, "regex_ngw.py"), "w") as f:
                f.write(WORKER_MODULE)
            env = client_env(PYTHONPATH=tmp)
            wenv = driver.worker_env({"PYTHONPATH": driver.SRC + os.pathsep + tmp,
                                      "NGW_STATE_DIR": tmp})
            argv = RUNNER + ["entrypoint", "rx=regex_ngw:main"]
            warning = b"FutureWarning: Possible nested set"
            w = driver.Worker(argv, env=wenv)
            try:
                w.hello()
                first = w.run("rx", [t], env=env)
                self.assertEqual((bytes(first.stdout), first.code),
                                 (b"[False, False, False] 42\n", 0), first)
                self.assertIn(warning, bytes(first.stderr))
                deadline = time.monotonic() + 20
                while "precompiled" not in w.log() and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertRegex(w.log(), r"ngw: precompiled [3-9] patterns and memo keys that "
                                          r"sessions")
                self.assertIn("not precompiling the pattern", w.log())
                second = w.run("rx", [t], env=env)
                self.assertEqual((bytes(second.stdout), second.code),
                                 (b"[True, True, True] 42\n", 0), second)
                self.assertIn(warning, bytes(second.stderr))
                self.assertEqual(bytes(first.stderr), bytes(second.stderr))
                self.assertEqual(second.notices, [])
                w.quit()
            finally:
                w.close()
            cache = [n for n in os.listdir(tmp) if n.startswith("preload-test-")]
            self.assertEqual(len(cache), 1, os.listdir(tmp))
            with open(os.path.join(tmp, cache[0])) as f:
                data = json.load(f)
            learned = [_adaptive.decode_pattern(p) for p in data["patterns"]]
            self.assertIn((str, "[[ngw" + t + "]", 0),
                          [_adaptive.decode_pattern(p) for p in data["patterns_excluded"]])
            self.assertNotIn((str, "[[ngw" + t + "]", 0), learned)
            self.assertIn((str, "ngw-(\\d+)-" + t, 0), learned)
            self.assertIn((bytes, b"ngw-\xff-" + t.encode(), 2), learned)
            w = driver.Worker(argv, env=wenv)
            try:
                w.hello()
                self.assertRegex(w.log(), r"compiled [3-9] patterns that earlier sessions")
                r = w.run("rx", [t], env=env)
                self.assertEqual(bytes(r.stdout), b"[True, True, True] 42\n")
                self.assertIn(warning, bytes(r.stderr))
                w.quit()
            finally:
                w.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class Memos(unittest.TestCase):
    """`ngw.memo_learner`: a child reports the keys its memo lacked, the worker fills them
    (or excludes them, with the memo's reason), and they are kept in the cache file."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ngw-adaptive-memo-")
        self.log = Recorder()
        self.learner = _adaptive.Learner(self.log, os.path.join(self.tmp, "preload.json"))
        self.name = "test-" + token()
        self.memo = {}
        self.missed = []

        def fill(key):
            if key == ["bad"]:
                return "bad key"
            if key == ["raises"]:
                raise ValueError("no")
            self.memo[json.dumps(key)] = len(self.memo)
            return None

        _adaptive.memo_learner(self.name, lambda: list(self.missed), fill)

    def tearDown(self):
        _adaptive.MEMOS.pop(self.name, None)
        os.close(self.learner.r)
        os.close(self.learner.w)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_reported_filled_excluded_and_kept(self):
        keys = [["a", [True, "é"], False], ["bad"], ["raises"], {"x": 1}, "a\nb"]
        in_child(self.learner, lambda: self.missed.extend(keys + ["z" * 5000, float("nan")]))
        self.assertEqual(len(self.learner.memo_queue), 5)  # too long, not JSON: dropped
        self.assertEqual(self.learner.compile_patterns(), 3)
        self.assertEqual(sorted(self.memo), sorted(json.dumps(k) for k in
                                                   [keys[0], keys[3], keys[4]]))
        self.assertEqual(len(self.learner.memo_excluded), 2)
        self.assertTrue(any("bad key" in line for line in self.log.lines), self.log.lines)
        self.assertTrue(any("ValueError: no" in line for line in self.log.lines))
        # Reported again: learned or excluded, nothing is queued twice.
        in_child(self.learner, lambda: self.missed.extend(keys))
        self.assertEqual(self.learner.memo_queue, {})
        # Kept: the next worker fills the learned ones at start, keeps the excluded ones
        # out, and keeps the keys of a memo it does not have.
        os.write(self.learner.w, b"\1" + _adaptive.encode_memo_key("gone", [1]).encode()
                 + b"\n")
        self.learner.read_reports()  # not registered: ignored
        self.assertEqual(self.learner.memo_queue, {})
        self.learner.memo_other.append(("gone", "[1]"))
        self.learner.save()
        self.memo.clear()
        other = _adaptive.Learner(self.log, self.learner.path)
        try:
            other.load()
            self.assertEqual(len(other.memo_queue), 3)
            self.assertEqual(other.memo_other, [("gone", "[1]")])
            self.assertEqual(len(other.memo_excluded), 2)
            self.assertEqual(other.compile_patterns(), 3)
            self.assertEqual(len(self.memo), 3)
            other.save()
            with open(other.path) as f:
                self.assertIn('["gone", "[1]"]', json.load(f)["memos"])
        finally:
            os.close(other.r)
            os.close(other.w)

    def test_a_failing_report_learns_nothing(self):
        def report():
            raise RuntimeError("cannot say")

        _adaptive.MEMOS[self.name] = (report, _adaptive.MEMOS[self.name][1])
        in_child(self.learner, lambda: None)
        self.assertEqual(self.learner.memo_queue, {})

    def test_bound(self):
        self.learner.memo_keys = {("x", str(i)): None for i in range(_adaptive.MAX_MEMO_KEYS)}
        in_child(self.learner, lambda: self.missed.append(["one more"]))
        self.assertEqual(self.learner.memo_queue, {})


MEMO_MODULE = r"""
import ngw

_memo = {}
_missed = []


def square(n):
    if n in _memo:
        return _memo[n], True
    _memo[n] = n * n
    _missed.append(n)
    return _memo[n], False


def fill(n):
    if not isinstance(n, int) or n < 0:
        return "not a natural number"
    _memo[n] = n * n
    return None


ngw.memo_learner("squares", lambda: list(_missed), fill)


def main():
    import sys
    print(*[square(int(a)) for a in sys.argv[1:]])
"""


class MemoWorker(unittest.TestCase):
    """A real worker with a memo: the next child finds the key the previous one computed,
    and so does the first child of the next worker."""

    def test_learned_between_sessions_and_across_restarts(self):
        tmp = tempfile.mkdtemp(prefix="ngw-adaptive-memo-")
        try:
            with open(os.path.join(tmp, "memo_ngw.py"), "w") as f:
                f.write(MEMO_MODULE)
            env = client_env(PYTHONPATH=tmp)
            wenv = driver.worker_env({"PYTHONPATH": driver.SRC + os.pathsep + tmp,
                                      "NGW_STATE_DIR": tmp})
            argv = RUNNER + ["entrypoint", "sq=memo_ngw:main", "--preload", "memo_ngw"]
            w = driver.Worker(argv, env=wenv)
            try:
                w.hello()
                first = w.run("sq", ["7", "-2"], env=env)
                self.assertEqual((bytes(first.stdout), first.code),
                                 (b"(49, False) (4, False)\n", 0), first)
                deadline = time.monotonic() + 20
                while "precompiled" not in w.log() and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertRegex(w.log(), r"precompiled [0-9]+ patterns and memo keys .*, "
                                          r"1 memo keys learned")
                self.assertIn("not filling squares's key -2: not a natural number", w.log())
                second = w.run("sq", ["7", "-2"], env=env)
                self.assertEqual(bytes(second.stdout), b"(49, True) (4, False)\n")
                w.quit()
            finally:
                w.close()
            w = driver.Worker(argv, env=wenv)
            try:
                w.hello()
                self.assertIn("filled 1 memo keys that earlier sessions computed", w.log())
                r = w.run("sq", ["7"], env=env)
                self.assertEqual(bytes(r.stdout), b"(49, True)\n")
                w.quit()
            finally:
                w.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class EnvironmentReaders(unittest.TestCase):
    """A module that reads an environment variable at import is never imported between
    sessions; it is preloaded from the next start, where what it read joins the zygote's
    key: a session with another value runs the cold way."""

    def test_preloaded_from_the_next_start_with_its_variable_in_the_key(self):
        tmp = tempfile.mkdtemp(prefix="ngw-adaptive-env-")
        try:
            venv = os.path.join(tmp, "venv")
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
            python = os.path.join(venv, "bin", "python")
            site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                   "['purelib'])"], check=True, capture_output=True,
                                  text=True).stdout.strip()
            # In the installation (site-packages): what adaptive preloading considers.
            with open(os.path.join(site, "envread_ngw.py"), "w") as f:
                f.write("import os\nFLAVOR = os.environ.get('ENVREAD_TEST_FLAVOR', 'plain')\n")
            with open(os.path.join(tmp, "cmd_ngw.py"), "w") as f:
                f.write("import sys\n\ndef main():\n    before = 'envread_ngw' in sys.modules\n"
                        "    import envread_ngw\n    print(envread_ngw.FLAVOR, before)\n")
            env = client_env(PYTHONPATH=tmp)
            env.pop("ENVREAD_TEST_FLAVOR", None)
            wenv = driver.worker_env({"PYTHONPATH": driver.SRC + os.pathsep + tmp,
                                      "NGW_STATE_DIR": tmp})
            wenv.pop("ENVREAD_TEST_FLAVOR", None)
            argv = [python, "-m", "ngw", "entrypoint", "cmd=cmd_ngw:main"]
            w = driver.Worker(argv, env=wenv)
            try:
                w.hello()
                first = w.run("cmd", env=env)
                self.assertEqual((bytes(first.stdout), first.code), (b"plain False\n", 0))
                deadline = time.monotonic() + 20
                while "from the next start" not in w.log() and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertIn("ngw: preloading envread_ngw from the next start: it read "
                              "ENVREAD_TEST_FLAVOR", w.log())
                w.assert_quiet(2)
                self.assertEqual([n["kind"] for n in w.notices], ["retire"])
                # Never imported into this zygote: the next child still imports it.
                again = w.run("cmd", env=env)
                self.assertEqual(bytes(again.stdout), b"plain False\n")
                w.quit()
            finally:
                w.close()
            w = driver.Worker(argv, env=wenv)
            try:
                w.hello()
                self.assertIn("1 of them read the environment", w.log())
                warm = w.run("cmd", env=env)
                self.assertEqual((bytes(warm.stdout), warm.code), (b"plain True\n", 0))
                self.assertEqual(warm.notices, [])
                other = w.run("cmd", env=dict(env, ENVREAD_TEST_FLAVOR="spicy"))
                self.assertEqual((bytes(other.stdout), other.code), (b"spicy False\n", 0))
                w.quit()
            finally:
                w.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)



class Verdicts(unittest.TestCase):
    """A learned import's verdict: its reason for people, whether only a start preloads
    it, and its form on a probe's pipe (one line's field, whatever the detail holds)."""

    def test_reasons_and_at_start(self):
        kind = _adaptive.Misbehaviour
        cases = [
            (_adaptive.Verdict(kind.IMPORT_FAILED, "boom"), "its import failed (boom)", False),
            (_adaptive.Verdict(kind.CHECK_FAILED, "x"), "its check failed (x)", False),
            (_adaptive.Verdict(kind.WARNED, "careful"), "it printed a warning (careful)",
             False),
            (_adaptive.Verdict(kind.CHANGED_ENV), "it changed the environment", False),
            (_adaptive.Verdict(kind.STARTED_THREAD), "it started a thread", False),
            (_adaptive.Verdict(kind.READ_ENV, "HOME, LANG"), "it read HOME, LANG", True),
            (_adaptive.Verdict(kind.ASKED_TTY), "it asked whether a stream is a terminal",
             True),
        ]
        for verdict, reason, at_start in cases:
            self.assertEqual((verdict.reason, verdict.at_start), (reason, at_start))

    def test_the_pipe_form_is_one_field_and_reads_back(self):
        self.assertIsNone(_adaptive.Verdict.decode(""))
        for detail in ("", "50%s done", "two\nlines\tand a tab \\ \udcff"):
            verdict = _adaptive.Verdict(_adaptive.Misbehaviour.IMPORT_FAILED, detail)
            field = verdict.encode()
            self.assertNotIn("\n", field)
            self.assertNotIn("\t", field)
            self.assertEqual(_adaptive.Verdict.decode(field), verdict)


if __name__ == "__main__":
    unittest.main()
