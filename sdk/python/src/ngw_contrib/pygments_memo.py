"""A memo for pygments programs (pygmentize and others): preload after the program,

    python3 -m ngw console-script pygmentize --preload ngw_contrib.pygments_memo

A ``RegexLexer`` class builds its token table, ``_tokens``, the first time it is
instantiated (``RegexLexerMeta.__call__``): its ``tokens`` merged with its bases'
(``get_tokendefs``), every ``words()`` keyword list optimised into one pattern
(``regexopt.regex_opt``, pure Python), every pattern compiled, every state transition
resolved (``process_tokendef``). A forked child starts from the zygote's classes, which no
one has instantiated, so every run builds the table of the lexer it uses again: 4.5-5 ms
of a warm ``pygmentize -l python`` (docs/benchmarks.md, Plugins).

The table is a pure function of the class definitions, which the zygote has frozen along
with its code: this module builds, in the zygote, the tables of the lexer classes defined
in the modules it has imported, exactly as the first instantiation would
(``build_tokens``: the code of ``RegexLexerMeta.__call__`` up to the instance's creation).
It does so when it is imported and again whenever the worker has imported more modules
(``ngw.after_imports``): the lexer modules children imported are learned by adaptive
preloading (docs/ngw.md 12.5), so the classes built are those of the modules the
program's runs use, not pygments' ~600. A child then finds the class's ``_tokens`` in its
``__dict__`` and only creates the instance, as the second instantiation in a cold run does.

Why this is exact:

* the class state after the build is the state a cold first instantiation leaves:
  ``_tokens``, ``_all_tokens`` and ``_tmpname`` on the class, and the ``inherit`` markers of
  the ``tokens`` lists in its hierarchy replaced by their bases' rules (pygments'
  ``get_tokendefs`` does that in place, and merging a subclass over an already merged base
  gives the same table: pygments relies on it). The compiled patterns are equal (same
  pattern, same flags), as ``re`` would give again;
* only classes whose metaclass is ``RegexLexerMeta`` itself, whose ``__call__``,
  ``process_tokendef``, ``get_tokendefs`` and ``_process_*`` methods are pygments' own
  (``ExtendedRegexLexer`` included; ``ProfilingRegexLexer``'s timing metaclass, a
  subclass that overrides one of these methods, is left alone), and which do not select
  their table per instance (``token_variants``: those build it in ``__init__`` from the
  instance's options);
* a table whose building fails or warns is not kept (the class is left as it was), so the
  child builds it, raising or printing the warning where a cold run does; the patterns the
  builds compile are not left in ``re``'s cache, which holds what it held before;
* if pygments' ``RegexLexerMeta.__call__`` is not the code this was written against, the
  memo is not installed (``skipped`` says why, and the worker's log).

What it assumes of the program: that it does not change a lexer class's ``tokens`` or
``flags`` at run time before instantiating it (pygmentize and pygments' own API do not; a
program that patches lexer classes should not preload this). Subclasses a run defines
(``pygmentize -x``, a plugin loaded in the child) are built by the child, as in a cold run.
``stats()`` says how many tables the memo built and what it skipped.
"""

import ast
import inspect
import re
import sys
import textwrap
import time
import warnings

import pygments
import pygments.lexer
from pygments.lexer import RegexLexerMeta

from ngw import after_imports

#: Why the memo is not installed on this pygments (None: it is).
skipped = None
_built = []  # the classes whose table the memo built, in order
_failed = {}  # class -> why its table was left to the children
_installed = False

# RegexLexerMeta.__call__ as pygments 2.x writes it (from 2.0, when words() came, to at
# least 2.21), whitespace and comments aside: the memo repeats what it does before
# type.__call__.
_CALL_SOURCE = """
def __call__(cls, *args, **kwds):
    if '_tokens' not in cls.__dict__:
        cls._all_tokens = {}
        cls._tmpname = 0
        if hasattr(cls, 'token_variants') and cls.token_variants:
            pass
        else:
            cls._tokens = cls.process_tokendef('', cls.get_tokendefs())
    return type.__call__(cls, *args, **kwds)
"""
_METHODS = ("__call__", "process_tokendef", "get_tokendefs", "_process_state",
            "_process_new_state", "_process_token", "_process_regex")


def _shape(source):
    """The syntax tree of a function's source, without its docstring and comments."""
    func = ast.parse(textwrap.dedent(source)).body[0]
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return [ast.dump(node) for node in body]


def _check():
    """None if pygments' RegexLexerMeta is what the memo reproduces, else why not."""
    try:
        source = inspect.getsource(RegexLexerMeta.__call__)
    except (OSError, TypeError) as e:
        return "the source of RegexLexerMeta.__call__ cannot be read (%s)" % e
    if _shape(source) != _shape(_CALL_SOURCE):
        return "RegexLexerMeta.__call__ differs from the one the memo reproduces"
    return None


def _eligible(cls):
    """True if the first instantiation of `cls` would build its table with pygments' own
    code, the table does not depend on the instance, and it has not been built."""
    if type(cls) is not RegexLexerMeta or "_tokens" in cls.__dict__:
        return False
    if getattr(cls, "token_variants", False):
        return False
    # A class (or base) of its own defining one of the metaclass's methods changes how
    # the table is built.
    return not any(name in c.__dict__ for c in cls.__mro__ for name in _METHODS)


def _lexer_classes():
    """Every class below RegexLexer defined so far, bases before their subclasses."""
    out = []
    seen = set()
    stack = [pygments.lexer.RegexLexer]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                out.append(sub)
                stack.append(sub)
    return out


def _re_caches():
    return [c for c in (getattr(re, "_cache", None), getattr(re, "_cache2", None))
            if isinstance(c, dict)]


def build_tokens(cls):
    """Builds `cls`'s token table as its first instantiation would. Returns None, or why
    the table was left to the children (it failed or warned: the class is then as it was,
    but for the in-place merge of its hierarchy's `tokens`, which a cold run does too)."""
    before = {name: cls.__dict__[name] for name in ("_all_tokens", "_tmpname")
              if name in cls.__dict__}
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        try:
            cls._all_tokens = {}
            cls._tmpname = 0
            cls._tokens = cls.process_tokendef("", cls.get_tokendefs())
            why = None
        except Exception as e:  # noqa: BLE001 - the child raises it where a cold run does
            why = "%s: %s" % (type(e).__name__, e)
    if why is None and shown:
        why = "it warns (%s)" % shown[0].message
    if why is not None:
        for name in ("_tokens", "_all_tokens", "_tmpname"):
            if name in cls.__dict__:
                delattr(cls, name)
        for name, value in before.items():
            setattr(cls, name, value)
    return why


def fill(budget=None):
    """Builds the tables of the eligible lexer classes defined so far, for about `budget`
    seconds (all of them if None); true if some are left (`ngw.after_imports` calls it
    again). Leaves `re`'s cache as it found it."""
    if skipped is not None:
        return False
    classes = [c for c in _lexer_classes() if c not in _failed and _eligible(c)]
    if not classes:
        return False
    deadline = None if budget is None else time.monotonic() + budget
    caches = [(c, dict(c)) for c in _re_caches()]
    try:
        for i, cls in enumerate(classes):
            why = build_tokens(cls)
            if why is None:
                _built.append(cls)
            else:
                _failed[cls] = why
            if deadline is not None and time.monotonic() >= deadline:
                return i + 1 < len(classes)
    finally:
        for cache, saved in caches:
            cache.clear()
            cache.update(saved)
    return False


def stats():
    """{"built": classes whose table the memo built, "failed": {class name: why}}."""
    return {"built": len(_built),
            "failed": {"%s.%s" % (c.__module__, c.__qualname__): why
                       for c, why in _failed.items()},
            "skipped": skipped}


def install():
    """Checks pygments, builds the tables of the lexers imported so far, and registers
    `fill` to run whenever the worker has imported more (once per process)."""
    global skipped, _installed
    if _installed:
        return
    _installed = True
    skipped = _check()
    if skipped is not None:
        sys.stderr.write("ngw_contrib.pygments_memo: not installed (pygments %s): %s\n"
                         % (pygments.__version__, skipped))
        return
    fill()
    after_imports(fill)


install()
