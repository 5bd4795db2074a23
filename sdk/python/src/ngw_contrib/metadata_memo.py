"""A memo for programs that look up entry points on every run (flask's plugin commands,
``flask.commands``; click and pluggy plugins): preload it,

    python3 -m ngw console-script flask --preload ngw_contrib.metadata_memo

``importlib.metadata.entry_points()`` finds every installed distribution on ``sys.path``
(a listing of each directory), reads each one's ``entry_points.txt`` and parses it: 4-10 ms
in a forked child of a venv with 50 distributions, on every run, though the answer only
changes when a distribution is installed or removed.

The memo keeps, in the zygote, for each directory on ``sys.path``, what a lookup finds
there: the distributions in the order found and the entry points each one's
``entry_points.txt`` declares, with what they depend on: the device, inode, size,
modification and change times of the directory and of each ``entry_points.txt``. In a
child, ``importlib.metadata.entry_points(**params)`` answers from it when it holds every
directory on the child's ``sys.path`` (the worker's own additions, such as the SDK's
directory, are gone by then) and nothing changed (a ``stat`` per directory and per file,
0.2-0.3 ms): it builds new ``EntryPoint`` objects, on new ``PathDistribution`` objects,
directory by directory in ``sys.path`` order, the first distribution of each name, as
``importlib.metadata`` does, and selects among them with ``importlib.metadata``'s own
code; otherwise it does what it always does. Why this is exact:

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
_memo = {}  # sys.path entry -> its stamp and distributions (_root_dists)
_hits = {"answered": 0, "looked up": 0, "last": None}

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


def _root_dists(root, young):
    """(the directory's stamp, its distributions) as a lookup finds them in `root`, or None
    if that cannot be memoised: each distribution as (parent, name, normalised name,
    entry_points.txt's path, its stamp, its entry points as (name, value, group))."""
    stamp = _mtime(root or ".")
    if stamp is not None and (stamp[0] == "error" or max(stamp[3:]) > young):
        return None
    dists = []
    for dist in md.distributions(path=[root]):
        where = getattr(dist, "_path", None)
        if type(dist) is not md.PathDistribution or type(where) is not pathlib.PosixPath \
                or not where.name.lower().endswith((".dist-info", ".egg-info")) \
                or not md.PathDistribution._name_from_stem(where.name):
            return None
        eps_file = os.path.join(str(where), "entry_points.txt")
        before = _mtime(eps_file)
        if before is not None and (before[0] == "error" or max(before[3:]) > young
                                   or not os.path.isfile(eps_file)):
            return None
        text = dist.read_text("entry_points.txt")
        if _mtime(eps_file) != before or (before is None) != (text is None):
            return None
        eps = tuple((ep.name, ep.value, ep.group) for ep in md.EntryPoints._from_text(text))
        dists.append((str(where.parent), where.name, dist._normalized_name, eps_file,
                      before, eps))
    if _mtime(root or ".") != stamp:
        return None
    return stamp, tuple(dists)


def _fill(budget=None):
    """Looks up, directory by directory of `sys.path`, the distributions and entry points
    as `importlib.metadata` finds them, and keeps what it found with the state it depends
    on; a directory where anything is too recent or unusual is not kept."""
    if not _finders_ok():
        _memo.clear()
        return False
    young = time.time_ns() - int(SETTLED * 1e9)
    for root in sys.path:
        if not isinstance(root, str):
            continue
        kept = _memo.get(root)
        if kept is not None and _mtime(root or ".") == kept[0] and all(
                _mtime(d[3]) == d[4] for d in kept[1]):
            continue
        found = _root_dists(root, young)
        if found is None:
            _memo.pop(root, None)
        else:
            _memo[root] = found
    return False


def _memoised():
    """New EntryPoint objects from the memo, in the order a lookup finds them; None if the
    memo does not answer. As `importlib.metadata`: the directories in `sys.path` order,
    the distributions in each in the order of its listing, the first distribution of
    each (normalised) name."""
    if not _memo or not _finders_ok():
        return None
    out = []
    seen = set()
    for root in sys.path:
        kept = _memo.get(root) if isinstance(root, str) else None
        if kept is None or _mtime(root or ".") != kept[0]:
            return None
        for parent, name, normalised, eps_file, stamp, eps in kept[1]:
            if normalised in seen:
                continue
            seen.add(normalised)
            if _mtime(eps_file) != stamp:
                return None
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
    _hits["last"] = eps is not None
    if eps is None:
        return _original(**params)
    _hits["answered"] += 1
    if _tail == "groups":
        return md.SelectableGroups.load(eps).select(**params)
    return md.EntryPoints(eps).select(**params)


entry_points.__doc__ = _original.__doc__
entry_points.__wrapped__ = _original


def stats():
    """{"answered": lookups the memo answered, "looked up": lookups, "last": whether it
    answered the last one, "memo": distributions it holds (None: none), "skipped": why it
    is not installed}."""
    return dict(_hits, memo=sum(len(kept[1]) for kept in _memo.values()) if _memo else None,
                skipped=skipped)


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
    except Exception as e:  # noqa: BLE001 - a broken distribution: lookups go on unmemoised
        sys.stderr.write("ngw_contrib.metadata_memo: not filled: %s: %s\n"
                         % (type(e).__name__, e))
    after_imports(_fill)


install()
