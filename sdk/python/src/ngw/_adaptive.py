"""Adaptive preloading: modules that session children import, imported by the zygote
between sessions so the next children find them loaded (docs/ngw.md 12.5).

* Each fork-mode child, right before it exits, writes the names of the modules it imported
  that the zygote had not (`child_report`) to a pipe of the worker's (opened through
  /proc/<worker>/fd/<n>, like the exit report). Only modules whose file is inside the
  Python installation (the standard library, site-packages) are reported: never
  `__main__`, the SDK's own modules, or code from the client's directory or the
  program's own `sys.path` additions (a FLASK_APP module, say), which depend on the
  session.
* The worker imports them one at a time from its idle loop, once it has been idle for
  `IDLE_BEFORE` seconds, and only while no chunk from ngd is waiting; a session that
  arrives during an import waits for that one import.
* An import that fails, or that misbehaves as a preload (prints a warning, changes the
  environment, starts a thread), is recorded as excluded and left to the children; one
  that got imported anyway makes the worker retire (`retire` notice) so that its
  replacement starts without it. One that only reads environment variables or asks
  whether a stream is a terminal is recorded for the next start (`at_start`): imported
  there, while the worker records what its imports read, it joins the zygote's key as a
  configured preload does (a session whose values differ runs cold, or in a zygote for
  its key); the worker then asks ngd to replace it (`retire`, with notices).
* What was learned is kept in a small JSON file, `preload-<plugin>-<hash>.json` in
  `$NGW_STATE_DIR` (set by the host), else `$XDG_STATE_HOME/ngw`, else
  `~/.local/state/ngw` (the hash covers the interpreter and the worker's command line),
  and imported at the next start along with the configured preloads.

Compiled regular expressions are learned the same way. `re` keeps the patterns it
compiles in a module-level cache (`re._cache`, and `re._cache2` from 3.12; 512 entries):
a child that compiles a pattern the zygote's cache holds gets the compiled object from it.
Each child also reports the patterns (str or bytes, flags) in its cache that the
zygote's cache did not hold; the worker compiles them from its idle loop, a few at a
time and only while nothing from ngd waits, so that the next children find them cached.
A pattern whose compilation fails, or warns (a cold run would print that warning; a
cached one would not), is excluded; at most `MAX_PATTERNS` are kept, fewer than the
cache holds, so that what a child compiles itself does not push them out before use.
They are kept in the same file and compiled at the next start. A cached compiled
pattern is the object a fresh compilation would give; `re.purge()` still empties the
cache.

A memo of `ngw_contrib` that fills what a run computes from keys a child can name (werkzeug's
URL builders, one per route) registers with `memo_learner`: each child also reports the
keys its memo lacked, and the worker fills them from its idle loop as it compiles
patterns, kept in the same file (at most `MAX_MEMO_KEYS`).

Preloads that fill a program's own state from what the zygote has imported (the memos
of `ngw_contrib`, docs/ngw.md 12.3) register a function with `after_imports`. The worker
calls it once the zygote's imports are done at start (after the configured preloads, the
learned modules and patterns, while what imports read is still being recorded), with no
time limit; and after each batch of modules learned between sessions, from its idle loop,
a slice of at most about `PATTERN_SLICE` seconds at a time and only while nothing from ngd
waits, until it says it is done; then the worker freezes the heap and forks a new spare.
"""

import dataclasses
import enum
import fcntl
import hashlib
import json
import os
import sys
import sysconfig
import time
import warnings

from ._channel import report_pipe

IDLE_BEFORE = 0.05  # seconds of idleness before the zygote imports a learned module
MAX_MODULES = 4000
_REPORT_CAP = 1 << 18  # bytes a child writes (one pipe write)
MAX_PATTERNS = 384  # learned patterns kept; re's cache holds 512
MAX_PATTERN_LEN = 1 << 16  # characters (or bytes) of a pattern worth learning
PATTERN_SLICE = 0.003  # seconds of compiling before the worker looks at ngd again
_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
_FIONREAD = 0x541B  # Linux
_PATTERN_LINE = b"\0"  # a report line that starts with it is a pattern, not a module
_MEMO_LINE = b"\1"  # one that starts with it is a memo's key
MAX_MEMO_KEYS = 4096  # learned memo keys kept, all memos together
MAX_MEMO_KEY_LEN = 1 << 12  # characters of a memo key's JSON text worth learning
_SETTLE = 8  # known entries in a row that end a child's look for new ones


_metadata_warmed = []  # the sys.path of the last warm_metadata lookup


@dataclasses.dataclass(frozen=True)
class Learned:
    """What a fork-mode child's report is measured against (`child_report`): the modules
    the zygote has, the installation's roots, the report pipe's path, and the keys of the
    patterns in the zygote's `re` cache."""

    modules: frozenset
    roots: tuple
    report_path: str
    patterns: object

    @classmethod
    def now(cls, roots, report_path):
        """What the zygote has now."""
        return cls(frozenset(sys.modules), roots, report_path, cached_patterns())

    def with_modules(self):
        """After the zygote imported modules (and compiled their patterns)."""
        return dataclasses.replace(self, modules=frozenset(sys.modules),
                                   patterns=cached_patterns())

    def with_patterns(self):
        """After the zygote compiled patterns."""
        return dataclasses.replace(self, patterns=cached_patterns())

    def report(self):
        """In a child before it exits: what it imported and compiled that the zygote
        lacks, to the worker."""
        child_report(self.modules, self.roots, self.report_path, self.patterns)


class Misbehaviour(enum.Enum):
    """What a module's import did that a preload must not (the reason's text, `%s` where
    the verdict's detail goes)."""

    IMPORT_FAILED = "its import failed (%s)"
    CHECK_FAILED = "its check failed (%s)"
    WARNED = "it printed a warning (%s)"
    CHANGED_ENV = "it changed the environment"
    STARTED_THREAD = "it started a thread"
    #: Only a start can preload it: what the import read joins the zygote's key there.
    READ_ENV = "it read %s"
    #: Likewise.
    ASKED_TTY = "it asked whether a stream is a terminal"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Why a module is not preloaded between sessions: what its import did, and the
    detail (the error, the warning, the variables read)."""

    kind: Misbehaviour
    detail: str = ""

    @property
    def at_start(self):
        """Whether the module is preloaded at the next start instead (docs/ngw.md 12.5)."""
        return self.kind in (Misbehaviour.READ_ENV, Misbehaviour.ASKED_TTY)

    @property
    def reason(self):
        """The verdict for people: "it read HOME, LANG"."""
        text = self.kind.value
        return text % (self.detail,) if "%s" in text else text

    def encode(self):
        """The verdict as one line's field, for a probe's pipe (`decode` reads it)."""
        return "%s %s" % (self.kind.name, json.dumps(self.detail))

    @staticmethod
    def decode(field):
        """The verdict `encode` wrote, or None for an empty field (the module behaved)."""
        if not field:
            return None
        name, _, detail = field.partition(" ")
        return Verdict(Misbehaviour[name], json.loads(detail))


def warm_metadata():
    """If the zygote has imported `importlib.metadata`, runs one lookup of every entry point
    and drops the answer: a child looking up entry points or a version (flask's plugin
    commands) then runs code the zygote has run. CPython specialises a function's
    bytecode as it runs it, writing to its code object, and a forked child that runs it
    first does so on pages it must copy: 3-5 ms of flask's lookup in a child. Then it
    empties `importlib.metadata`'s cache of directory listings (`FastPath`, kept per
    directory for as long as its modification time is unchanged), so a child lists the
    directories as a cold run does. Once per `sys.path`; true if it ran."""
    md = sys.modules.get("importlib.metadata")
    fast = getattr(getattr(md, "FastPath", None), "__new__", None)
    entry_points = getattr(md, "entry_points", None)
    if not hasattr(fast, "cache_clear") or not callable(entry_points) or \
            _metadata_warmed == sys.path:
        return False
    _metadata_warmed[:] = sys.path
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            entry_points()
    except Exception:  # noqa: BLE001 - a broken distribution: the children find out
        pass
    fast.cache_clear()
    return True


#: Functions preloads registered with `after_imports`, in order.
AFTER_IMPORTS = []


def after_imports(fn):
    """Registers `fn(budget)` to run in the zygote whenever its imports are done: at start,
    after the configured preloads and the learned modules (`budget` None: do everything),
    and after each batch of modules learned between sessions, from the worker's idle
    loop (`budget`: seconds, do about that much; one step may overrun it). It returns
    true while work remains, and is called again (the next slice) until it returns false.
    Call it from a preload module. `fn` runs in the zygote only, never in a session's
    child, and must not read the environment or start threads; what it leaves in memory
    is what the next children start from, so it must do only what a cold run would do
    itself, with the same result (docs/ngw.md 12.3). An exception it raises is logged and
    ends its work until the next batch. Returns `fn`."""
    AFTER_IMPORTS.append(fn)
    return fn


#: Memos that learn from children (`memo_learner`): name -> (report, fill).
MEMOS = {}


def memo_learner(name, report, fill):
    """Registers a memo whose entries children learn, as they learn patterns. `report()`
    runs in a session's child before it exits (after its exit report) and returns the keys
    the child computed that its memo lacked, each a JSON value (lists, strings, numbers,
    booleans); keys whose text is longer than `MAX_MEMO_KEY_LEN` are not reported.
    `fill(key)` runs in the zygote only, from the worker's idle loop (and at start for the
    keys a previous worker learned), and returns None once the memo holds the entry for
    `key`, else a short reason why not: that key is then excluded, logged and never asked
    again. `fill` must compute only what a cold run computes for that key, with the same
    result (docs/ngw.md 12.3); an exception it raises counts as a reason. Call it from a
    preload module. Returns `name`."""
    MEMOS[name] = (report, fill)
    return name


def encode_memo_key(name, key):
    """A memo key as one report line's text: JSON of [name, key's JSON text], or None if
    the key is not JSON or too long."""
    try:
        text = json.dumps(key, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError):
        return None
    if len(text) > MAX_MEMO_KEY_LEN:
        return None
    return json.dumps([name, text])


def decode_memo_key(text):
    """(name, key's JSON text) from `encode_memo_key`'s text; None if malformed."""
    try:
        name, key = json.loads(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(name, str) or not isinstance(key, str) or len(key) > MAX_MEMO_KEY_LEN:
        return None
    return (name, key)


def fill_memo(entry):
    """Fills one learned memo key in the zygote: None once the memo holds it, else why
    not."""
    name, text = entry
    memo = MEMOS.get(name)
    if memo is None:
        return "no such memo"
    try:
        key = json.loads(text)
    except ValueError:
        return "not JSON"
    try:
        bad = memo[1](key)
    except Exception as e:  # noqa: BLE001 - a memo's failure leaves the key to children
        bad = "%s: %s" % (type(e).__name__, e)
    return None if bad is None else (str(bad) or "refused")


def run_after_imports(log, budget=None):
    """Calls the registered `after_imports` functions with `budget`; true while one of them
    has more to do. A failure is logged and counts as done."""
    more = False
    for fn in list(AFTER_IMPORTS):
        try:
            more = bool(fn(budget)) or more
        except Exception as e:  # noqa: BLE001 - a memo's failure leaves the work to children
            log("ngw: %s after the imports failed: %s: %s"
                % (getattr(fn, "__qualname__", repr(fn)), type(e).__name__, e))
    return more


def install_roots():
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.realpath(path) + os.sep)
    return tuple(roots)


def _re_caches():
    """`re`'s cache dicts, if `re` is imported (it is never imported here)."""
    re = sys.modules.get("re")
    if re is None:
        return ()
    return tuple(c for c in (getattr(re, "_cache", None), getattr(re, "_cache2", None))
                 if isinstance(c, dict))


def cached_patterns():
    """The keys of `re`'s cache: {(type, pattern, flags)}."""
    keys = set()
    for cache in _re_caches():
        keys.update(list(cache))
    return frozenset(keys)


def _newest(mapping, known, settle=_SETTLE):
    """The keys of `mapping` (a dict) that are not in `known`, oldest first, looking only
    at its newest entries: from the end, until `settle` known keys in a row. A child
    adds what it imports or compiles at the end of sys.modules and re's caches; reading
    every entry would write to (take a reference to) every key, and each page of them
    would cost the child a copy-on-write fault (~0.7 ms for 150 modules)."""
    out = []
    run = 0
    try:
        for key in reversed(mapping):
            if key in known:
                run += 1
                if run >= settle:
                    break
            else:
                run = 0
                out.append(key)
    except RuntimeError:  # changed size during iteration (another thread)
        pass
    out.reverse()
    return out


def new_patterns(known):
    """The str and bytes patterns in `re`'s cache that are not in `known`, oldest first."""
    seen = set()
    out = []
    for cache in _re_caches():
        for key in _newest(cache, known):
            if key in seen or not isinstance(key, tuple) or len(key) != 3:
                continue
            kind, pattern, flags = key
            if kind not in (str, bytes) or type(pattern) is not kind or \
                    type(flags) is not int or len(pattern) > MAX_PATTERN_LEN:
                continue
            seen.add(key)
            out.append(key)
    return out


def encode_pattern(key):
    """A pattern key as one report line's text (JSON: kind, pattern, flags)."""
    kind, pattern, flags = key
    if kind is bytes:
        return json.dumps(["b", pattern.decode("latin-1"), flags])
    return json.dumps(["s", pattern, flags])


def decode_pattern(text):
    """The key a report line's text names, or None if it names none."""
    try:
        kind, pattern, flags = json.loads(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(pattern, str) or type(flags) is not int or \
            len(pattern) > MAX_PATTERN_LEN:
        return None
    if kind == "s":
        return (str, pattern, flags)
    if kind == "b":
        try:
            return (bytes, pattern.encode("latin-1"), flags)
        except UnicodeEncodeError:
            return None
    return None


def compile_pattern(key):
    """Compiles a learned pattern into `re`'s cache, as the program would: None if it is
    there now, else why not. A pattern whose compilation warns is taken out again: a
    child that found it cached would not print the warning a cold run prints."""
    import re

    kind, pattern, flags = key
    if flags & (re.DEBUG | getattr(re, "TEMPLATE", 0)):
        return "its flags print or warn"
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        try:
            re.compile(pattern, flags)
        except (re.error, ValueError, TypeError, OverflowError, RecursionError,
                MemoryError) as e:
            return "it does not compile (%s)" % e
    if shown:
        for cache in _re_caches():
            cache.pop(key, None)
        return "its compilation warns (%s)" % shown[0].message
    if not any(key in cache for cache in _re_caches()):
        return "re did not cache it"
    return None


def child_report(known, roots, path, patterns=None):
    """In a child before it exits: the newly imported installation modules, and the newly
    compiled patterns if `patterns` (those the zygote's cache held) is given, to `path`.
    Written without blocking and only as far as the pipe has room, in whole lines."""
    lines = []
    modules = sys.modules
    for name in _newest(modules, known):
        if not isinstance(name, str) or name in ("__main__", "__mp_main__") or \
                name == "ngw" or name.startswith(("ngw.", "ngw_contrib")):
            continue
        f = getattr(modules.get(name), "__file__", None)
        if isinstance(f, str) and os.path.realpath(f).startswith(roots):
            lines.append(name.encode("utf-8", "surrogateescape"))
    if patterns is not None:
        for key in new_patterns(patterns):
            lines.append(_PATTERN_LINE + encode_pattern(key).encode("ascii"))
    for name, (report, _) in list(MEMOS.items()):
        try:
            keys = list(report())
        except Exception:  # noqa: BLE001 - a memo that cannot say what it lacks learns nothing
            continue
        for key in keys:
            text = encode_memo_key(name, key)
            if text is not None:
                lines.append(_MEMO_LINE + text.encode("ascii"))
    if not lines:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return
    try:
        room = _REPORT_CAP
        try:
            room = min(room, fcntl.fcntl(fd, _F_GETPIPE_SZ) - _unread(fd))
        except OSError:
            pass
        data = bytearray()
        for line in lines:
            if len(data) + len(line) + 1 > room:
                break
            data += line + b"\n"
        if data:
            os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unread(fd):
    """Bytes waiting in the pipe `fd` is an end of."""
    return int.from_bytes(fcntl.ioctl(fd, _FIONREAD, bytes(4)), sys.byteorder)


def cache_path(argv):
    base = os.environ.get("NGW_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "ngw")
    digest = hashlib.sha256("\0".join([sys.executable] + list(argv)).encode(
        "utf-8", "surrogateescape")).hexdigest()[:16]
    plugin = "".join(c if c.isalnum() or c in "-_." else "_"
                     for c in os.environ.get("NGW_PLUGIN", "worker"))
    return os.path.join(base, "preload-%s-%s.json" % (plugin, digest))


class Learner:
    """The worker's side: what children reported, what was imported or compiled, what is
    excluded."""

    def __init__(self, log, path):
        self.log = log
        self.path = path
        self.learned = []  # imported into the zygote, in order
        self.excluded = set()
        # Modules whose import read the environment or asked isatty: imported at start
        # only, where what they read joins the zygote's key.
        self.at_start = []
        self.queue = []
        self.probe = None  # (pid, pipe, verdicts so far) while a probe vets a batch
        # Patterns: learned (compiled into re's cache, in order), excluded, waiting.
        self.patterns = {}
        self.patterns_excluded = set()
        self.pattern_queue = {}  # key -> None, in the order reported
        # Memo keys (name, key's JSON text): learned (filled), excluded, waiting.
        self.memo_keys = {}
        self.memo_excluded = set()
        self.memo_queue = {}
        self.memo_other = []  # keys of memos that are not registered now: kept, unused
        self.patterns_done = 0  # patterns compiled, memo keys filled since last saved
        self.patterns_dirty = False  # compiled, filled or excluded since they were last saved
        self.buf = b""
        self.r, self.w, self.report_path = report_pipe()
        self.roots = install_roots()

    def load(self):
        """The modules a previous worker learned (to import at start); its patterns wait
        in `pattern_queue` (for `compile_patterns` at start)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            self.excluded = set(data.get("excluded", []))
            self.at_start = [m for m in data.get("at_start", []) if isinstance(m, str)]
            for text in data.get("patterns", []):
                key = decode_pattern(text) if isinstance(text, str) else None
                if key is not None:
                    self.pattern_queue[key] = None
            for text in data.get("patterns_excluded", []):
                key = decode_pattern(text) if isinstance(text, str) else None
                if key is not None:
                    self.patterns_excluded.add(key)
            for which, into in (("memos", self.memo_queue), ("memos_excluded", None)):
                for text in data.get(which, [])[:MAX_MEMO_KEYS]:
                    entry = decode_memo_key(text) if isinstance(text, str) else None
                    if entry is None:
                        continue
                    if into is None:
                        self.memo_excluded.add(entry)
                    elif entry[0] not in MEMOS:
                        self.memo_other.append(entry)
                    else:
                        into[entry] = None
            return [m for m in data.get("modules", []) if isinstance(m, str)]
        except (OSError, ValueError, AttributeError, TypeError):
            return []

    def save(self):
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = self.path + ".%d.tmp" % os.getpid()
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"modules": self.learned[:MAX_MODULES],
                           "excluded": sorted(self.excluded)[:MAX_MODULES],
                           "at_start": self.at_start[:MAX_MODULES],
                           "patterns": [encode_pattern(k) for k in self.patterns],
                           "patterns_excluded": sorted(
                               encode_pattern(k) for k in self.patterns_excluded
                           )[:MAX_PATTERNS],
                           "memos": [json.dumps(list(e)) for e in
                                     list(self.memo_keys) + list(self.memo_queue) +
                                     self.memo_other][:MAX_MEMO_KEYS],
                           "memos_excluded": sorted(
                               json.dumps(list(e)) for e in self.memo_excluded
                           )[:MAX_MEMO_KEYS]}, f)
            os.replace(tmp, self.path)
        except OSError as e:
            self.log("ngw: cannot save the learned preloads to %s: %s" % (self.path, e))

    def read_reports(self):
        while True:
            try:
                data = os.read(self.r, 65536)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                break
            self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            if line.startswith(_PATTERN_LINE):
                key = decode_pattern(line[1:].decode("ascii", "replace"))
                if key is not None and key not in self.patterns and \
                        key not in self.patterns_excluded and \
                        len(self.patterns) + len(self.pattern_queue) < MAX_PATTERNS:
                    self.pattern_queue[key] = None
                continue
            if line.startswith(_MEMO_LINE):
                entry = decode_memo_key(line[1:].decode("ascii", "replace"))
                if entry is not None and entry[0] in MEMOS and \
                        entry not in self.memo_keys and entry not in self.memo_excluded and \
                        len(self.memo_keys) + len(self.memo_queue) + len(self.memo_other) \
                        < MAX_MEMO_KEYS:
                    self.memo_queue[entry] = None
                continue
            name = line.decode("utf-8", "surrogateescape")
            if name and name not in sys.modules and name not in self.excluded and \
                    name not in self.queue and name not in self.at_start and \
                    len(self.learned) + len(self.at_start) < MAX_MODULES:
                self.queue.append(name)

    def compile_patterns(self, budget=None):
        """Compiles waiting patterns into re's cache, then fills waiting memo keys, for at
        most `budget` seconds (all of them if None). Returns how many it compiled or
        filled."""
        deadline = None if budget is None else time.monotonic() + budget
        done = 0
        while self.pattern_queue:
            key = next(iter(self.pattern_queue))
            del self.pattern_queue[key]
            if key in self.patterns or len(self.patterns) >= MAX_PATTERNS:
                continue
            if any(key in cache for cache in _re_caches()):
                continue  # the zygote has compiled it itself since
            bad = compile_pattern(key)
            self.patterns_dirty = True
            if bad is None:
                self.patterns[key] = None
                done += 1
            else:
                self.patterns_excluded.add(key)
                self.log("ngw: not precompiling the pattern %.60r: %s" % (key[1], bad))
            if deadline is not None and time.monotonic() >= deadline:
                self.patterns_done += done
                return done
        while self.memo_queue:
            entry = next(iter(self.memo_queue))
            del self.memo_queue[entry]
            if entry in self.memo_keys:
                continue
            bad = fill_memo(entry)
            self.patterns_dirty = True
            if bad is None:
                self.memo_keys[entry] = None
                done += 1
            else:
                self.memo_excluded.add(entry)
                self.log("ngw: not filling %s's key %.80s: %s" % (entry[0], entry[1], bad))
            if deadline is not None and time.monotonic() >= deadline:
                break
        self.patterns_done += done
        return done
