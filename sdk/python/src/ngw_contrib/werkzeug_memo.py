"""A memo for flask and other werkzeug programs: preload it after the program,

    python3 -m ngw console-script flask --preload ngw_contrib.werkzeug_memo

Every URL rule an application adds is compiled when it is bound to the application's map
(``Rule.compile``), and that includes two URL builders per rule
(``Rule._compile_builder``, with and without the query string of unknown arguments): a
Python function that werkzeug writes as an abstract syntax tree and ``compile()``s. It is
most of the time an application takes to build itself: 0.18 ms per builder, 37 ms for an
application of 100 rules, in every run, cold or forked, because every run imports the
application and builds it again (a zygote serves every directory, so it cannot hold the
user's application itself).

The memo keeps the code object ``compile()`` returns, keyed by what the builder's code is
a function of, and a later builder with the same key only runs werkzeug's own last step
on it (``Rule._get_func_code``: the code executed in fresh namespaces, which makes a new
function): 1.5 microseconds instead of 180. Children report the keys they built (the
rule's text, its parsed parts, which of the two builders), the worker fills them between
sessions (``ngw.memo_learner``, docs/ngw.md 12.5), and from then on the application's
rules are built from the memo in every child. Why this is exact:

* the builder's code depends only on the rule's text (the function's name), its parsed
  parts (``Rule._trace``: static text and argument names, in order, the domain part
  first), which builder it is, and the rule's defaults, which are converted by the rule's
  converters; the memo handles rules without defaults only (the others are built as
  always). The rest of what goes into the code is werkzeug's own module, which the
  zygote has frozen (a changed werkzeug is stale code: the zygote is retired);
* code objects are immutable, and each builder is still a new function with its own fresh
  globals, made by the rule's own ``_get_func_code`` (a subclass's override included);
* a key is filled in the zygote by werkzeug's own ``_compile_builder`` run on a rule made
  for the purpose, and a child compiles only what the memo lacks, with werkzeug's code;
* if ``Rule._compile_builder`` is not the code this was written against (werkzeug 3.0 and
  3.1), the memo is not installed (``skipped`` says why).

What differs from a cold run: a rule given defaults whose converter raises while its
builder is made shows one more frame in the traceback, this module's. ``stats()`` says how
many builders came from the memo.
"""

import ast
import hashlib
import inspect
import textwrap

from werkzeug.routing import rules as _rules

from ngw import memo_learner

#: Why the memo is not installed on this werkzeug (None: it is).
skipped = None

# The digests of Rule._compile_builder's syntax tree (ast.dump of its source) in the
# werkzeug releases this was checked against: 3.0.6, 3.1.8, 3.1.9.
_KNOWN = {"508ca8421103cd3a"}

_memo = {}  # (rule, trace, append_unknown) -> the code compile() returned
_missed = []  # keys this process built itself (a child reports them)
_stats = {"memo": 0, "built": 0, "filled": 0}
_original = None


def _digest(fn):
    source = textwrap.dedent(inspect.getsource(fn))
    return hashlib.sha256(ast.dump(ast.parse(source)).encode()).hexdigest()[:16]


def _key(rule, append_unknown):
    """The memo's key for `rule`'s builder, or None when the memo leaves it alone."""
    if rule.defaults or type(rule.rule) is not str or type(rule._trace) is not list:
        return None
    trace = []
    for part in rule._trace:
        if type(part) is not tuple or len(part) != 2 or type(part[0]) is not bool or \
                type(part[1]) is not str:
            return None
        trace.append(part)
    return (rule.rule, tuple(trace), bool(append_unknown))


def _build(rule, append_unknown):
    """werkzeug's own builder for `rule`, and the code it compiled (None if not seen)."""
    state = getattr(rule, "__dict__", None)
    if state is None or "_get_func_code" in state:
        return _original(rule, append_unknown), None
    make = rule._get_func_code
    seen = []

    def keep(code, name):
        seen.append(code)
        return make(code, name)

    state["_get_func_code"] = keep
    try:
        builder = _original(rule, append_unknown)
    finally:
        state.pop("_get_func_code", None)
    return builder, (seen[0] if len(seen) == 1 else None)


def _compile_builder(self, append_unknown=True):
    key = _key(self, append_unknown)
    code = None if key is None else _memo.get(key)
    if code is not None:
        _stats["memo"] += 1
        return self._get_func_code(code, "<builder:%r>" % (self.rule,))
    if key is None:
        return _original(self, append_unknown)
    builder, code = _build(self, append_unknown)
    _stats["built"] += 1
    if code is not None:
        _memo[key] = code
        _missed.append(key)
    return builder


_compile_builder.__doc__ = _rules.Rule._compile_builder.__doc__


def _report():
    """The keys this child built itself, as JSON values."""
    return [[rule, [list(part) for part in trace], append_unknown]
            for rule, trace, append_unknown in _missed]


def _fill(value):
    """Builds a reported key's builder in the zygote, as a rule with that text and those
    parts would, and keeps its code."""
    if type(value) is not list or len(value) != 3:
        return "not a builder's key"
    rule, trace, append_unknown = value
    if type(rule) is not str or type(trace) is not list or type(append_unknown) is not bool:
        return "not a builder's key"
    parts = []
    for part in trace:
        if type(part) is not list or len(part) != 2 or type(part[0]) is not bool or \
                type(part[1]) is not str:
            return "not a builder's key"
        parts.append((part[0], part[1]))
    key = (rule, tuple(parts), append_unknown)
    if key in _memo:
        return None
    stand_in = _rules.Rule.__new__(_rules.Rule)
    stand_in.rule = rule
    stand_in._trace = parts
    stand_in.defaults = None
    stand_in._converters = {}
    _, code = _build(stand_in, append_unknown)
    if code is None:
        return "werkzeug compiled no code for it"
    _memo[key] = code
    _stats["filled"] += 1
    return None


def stats():
    """How many builders the memo gave, this process built itself, and filled."""
    return dict(_stats, held=len(_memo), skipped=skipped)


def _install():
    global skipped, _original
    try:
        digest = _digest(_rules.Rule._compile_builder)
    except (OSError, TypeError, SyntaxError) as e:
        skipped = "cannot read Rule._compile_builder's source (%s)" % e
        return
    if digest not in _KNOWN:
        skipped = "Rule._compile_builder is not the code this memo knows (%s)" % digest
        return
    _original = _rules.Rule._compile_builder
    _rules.Rule._compile_builder = _compile_builder
    memo_learner("werkzeug-builders", _report, _fill)


_install()
