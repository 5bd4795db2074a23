"""A memo for programs that look up entry points on every run (flask's plugin commands,
``flask.commands``; click and pluggy plugins): preload it,

    python3 -m ngw console-script flask --preload ngw_contrib.metadata_memo

``importlib.metadata.entry_points()`` finds every installed distribution on ``sys.path``
(a listing of each directory), reads each one's ``entry_points.txt`` and parses it: 4-10 ms
in a forked child of a venv with 50 distributions, on every run, though the answer only
changes when a distribution is installed or removed.

The memo keeps, in the zygote, what that call finds: the distributions in the order it
finds them and the entry points each one's ``entry_points.txt`` declares, together with
what they depend on: ``sys.path``, and the device, inode, size, modification and change
times of each of its directories and of each ``entry_points.txt``. In a child,
``importlib.metadata.entry_points(**params)`` first checks all of that (a ``stat`` per
directory and per file, 0.2-0.3 ms); if nothing changed it builds new ``EntryPoint``
objects, on new ``PathDistribution`` objects, from the memo and selects among them with
``importlib.metadata``'s own code; otherwise it does what it always does. Why this is exact:

* which distributions a lookup finds, and in which order, is a function of ``sys.path``,
  of its directories' listings (``importlib.metadata`` itself caches a listing per
  directory for as long as the directory's modification time is unchanged) and of the
  finders on ``sys.meta_path``: the memo answers only while the finders are the standard
  library's ``PathFinder`` alone and every distribution found is a ``.dist-info`` or
  ``.egg-info`` directory (whose name gives the distribution's name, as
  ``importlib.metadata`` reads it); a distribution installed or removed changes its
  directory's times;
* a distribution's entry points are a function of its ``entry_points.txt``; a file
  rewritten in place changes its times (the change time even when the modification
  time is set back); one replaced, its inode;
* nothing is kept that was modified less than two seconds before it was read (a change in
  the same tick of the file system's clock would leave the time unchanged); it is read
  again at the next fill;
* the objects a child gets are new ones, as a cold lookup's are, so a program that changes
  them changes only its own;
* if ``importlib.metadata.entry_points`` is not the code this was written against (CPython
  3.10-3.13), the memo is not installed (``skipped`` says why).

The memo is filled when the module is imported and again whenever the worker has imported
more modules (``ngw.after_imports``), so a change is picked up by the zygote too.
``stats()`` says how many lookups it answered.
"""

import ast
import importlib.machinery
import importlib.metadata as md
import inspect
import os
import pathlib
import sys
import textwrap
import time

from ngw import after_imports

SETTLED = 2.0  # seconds: younger files and directories are not memoised

#: Why the memo is not installed on this Python (None: it is).
skipped = None
_installed = False
_original = md.entry_points
_tail = None  # how entry_points turns the entry points into its answer
_memo = None  # see _fill
_hits = {"answered": 0, "looked up": 0}

# importlib.metadata.entry_points as CPython writes it, docstring aside: 3.10-3.11 and
# 3.12-3.13. The memo replaces how `eps` is found and keeps the last line.
_SHAPES = {
    "groups": """
def entry_points(**params):
    eps = itertools.chain.from_iterable(
        dist.entry_points for dist in _unique(distributions())
    )
    return SelectableGroups.load(eps).select(**params)
""",
    "entry points": """
def entry_points(**params):
    eps = itertools.chain.from_iterable(
        dist.entry_points for dist in _unique(distributions())
    )
    return EntryPoints(eps).select(**params)
""",
}


def _shape(source):
    func = ast.parse(textwrap.dedent(source)).body[0]
    func.returns = None  # the annotation differs between versions
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return [ast.dump(node) for node in body] + [ast.dump(func.args)]


def _check():
    """The shape of this Python's entry_points (a key of _SHAPES), or raises why not."""
    try:
        source = inspect.getsource(_original)
    except (OSError, TypeError) as e:
        raise RuntimeError("the source of importlib.metadata.entry_points cannot be read "
                           "(%s)" % e)
    shape = _shape(source)
    for name, known in _SHAPES.items():
        if shape == _shape(known):
            return name
    raise RuntimeError("importlib.metadata.entry_points differs from the ones the memo "
                       "reproduces")


def _finders_ok():
    """True if the standard library's PathFinder is the only distribution finder."""
    declared = [f for f in (getattr(finder, "find_distributions", None)
                            for finder in sys.meta_path) if f is not None]
    return declared == [importlib.machinery.PathFinder.find_distributions]


def _mtime(path):
    """A path's (device, inode, size, modification and change times in ns), None if it
    does not exist. The change time moves on any write, and when the modification time is set."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return ("error", getattr(e, "errno", None))
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _fill(budget=None):
    """Looks the entry points up as `importlib.metadata` does and keeps what it found, with
    the state it depends on; keeps nothing if any of it is too recent or unusual."""
    global _memo
    if not _finders_ok():
        _memo = None
        return False
    path = list(sys.path)
    if not all(isinstance(p, str) for p in path):
        _memo = None
        return False
    if _memo is not None and _memo[0] == path and _current(_memo):
        return False
    start_ns = time.time_ns()
    young = start_ns - int(SETTLED * 1e9)
    roots = tuple(_mtime(p or ".") for p in path)
    if any(r is not None and r[0] == "error" for r in roots):
        _memo = None
        return False
    dists = []
    for dist in md._unique(md.distributions()):
        where = getattr(dist, "_path", None)
        if type(dist) is not md.PathDistribution or type(where) is not pathlib.PosixPath \
                or not where.name.lower().endswith((".dist-info", ".egg-info")):
            _memo = None
            return False
        parent, name = str(where.parent), where.name
        eps_file = os.path.join(str(where), "entry_points.txt")
        before = _mtime(eps_file)
        if before is not None and (before[0] == "error" or not os.path.isfile(eps_file)):
            _memo = None
            return False
        text = dist.read_text("entry_points.txt")
        if _mtime(eps_file) != before or (before is None) != (text is None):
            _memo = None
            return False
        eps = tuple((ep.name, ep.value, ep.group) for ep in md.EntryPoints._from_text(text))
        dists.append((parent, name, eps_file, before, eps))
    stamps = [max(r[3:]) for r in roots if r is not None] + [
        max(d[3][3:]) for d in dists if d[3] is not None]
    if any(t > young for t in stamps) or tuple(_mtime(p or ".") for p in path) != roots:
        _memo = None
        return False
    _memo = (path, roots, tuple(dists))
    return False


def _current(memo):
    """True if what the memo depends on is unchanged."""
    path, roots, dists = memo
    if sys.path != path or not _finders_ok():
        return False
    for p, stamp in zip(path, roots):
        if _mtime(p or ".") != stamp:
            return False
    for _, _, eps_file, stamp, _ in dists:
        if _mtime(eps_file) != stamp:
            return False
    return True


def _memoised():
    """New EntryPoint objects from the memo, in the order a lookup finds them; None if the
    memo does not answer."""
    memo = _memo
    if memo is None or not _current(memo):
        return None
    out = []
    for parent, name, _, _, eps in memo[2]:
        if eps:
            dist = md.PathDistribution(pathlib.Path(parent, name))
            out.extend(md.EntryPoint(n, v, g)._for(dist) for n, v, g in eps)
    return out


def entry_points(**params):
    _hits["looked up"] += 1
    try:
        eps = _memoised()
    except Exception:  # noqa: BLE001 - never worse than the lookup itself
        eps = None
    if eps is None:
        return _original(**params)
    _hits["answered"] += 1
    if _tail == "groups":
        return md.SelectableGroups.load(eps).select(**params)
    return md.EntryPoints(eps).select(**params)


entry_points.__doc__ = _original.__doc__
entry_points.__wrapped__ = _original


def stats():
    """{"answered": lookups the memo answered, "looked up": lookups, "memo": distributions
    it holds (None: it holds nothing), "skipped": why it is not installed}."""
    return dict(_hits, memo=None if _memo is None else len(_memo[2]), skipped=skipped)


def install():
    """Checks importlib.metadata, installs the memo, fills it and registers the refill
    (once per process)."""
    global skipped, _installed, _tail
    if _installed:
        return
    _installed = True
    try:
        _tail = _check()
    except RuntimeError as e:
        skipped = str(e)
        sys.stderr.write("ngw_contrib.metadata_memo: not installed (Python %s): %s\n"
                         % (sys.version.split()[0], skipped))
        return
    md.entry_points = entry_points
    try:
        _fill()
    except Exception as e:  # noqa: BLE001 - a broken distribution: lookups go on as before
        sys.stderr.write("ngw_contrib.metadata_memo: not filled: %s: %s\n"
                         % (type(e).__name__, e))
    after_imports(_fill)


install()
