"""A memo for docutils' command-line front ends (``rst2html.py``, ``docutils``, the other
``rst2*`` tools): preload it after the program,

    python3 -m ngw console-script rst2html.py --preload ngw_contrib.docutils_memo

The reStructuredText parser runs a nested state machine for every nested construct (a
list item, a block quote, a directive's content), and it keeps the machines it made in a
class-level list, ``RSTState.nested_sm_cache``: a nested parse pops one from the list, or
makes one when the list is empty, and puts it back when it is done. Making one builds
fifteen state objects and their transition tables, about 0.3 ms each; a cold run makes as
many as its document nests deep (two for the fidelity suite's ``doc.rst``), and so does
every forked child, since the zygote never parsed anything. A second run in one process
finds them in the list: that is a good part of what separates a forked run from the
limit L of docs/benchmarks.md.

This module puts machines in the list in the zygote, made exactly as a nested parse makes
them (``RSTState.nested_sm(debug=False, state_classes=state_classes,
initial_state="Body")``, which is what ``nested_parse`` passes when it pops from the list),
two at first and as many as a child needed once one reports more (``ngw.memo_learner``,
docs/ngw.md 12.5; at most ``MAX_MACHINES``). Why this is exact:

* a machine nobody has run is what a nested parse would make at that moment: the
  constructors read only their arguments and the state classes, which are module-level
  and frozen in the zygote; the list is last-in first-out and a run puts back what it
  popped, so a run uses the same machines in the same order as when it makes them
  itself. Making them merges each state class's whitespace patterns into its pattern
  table and compiles its patterns in place (``State.make_transition``), which docutils
  does when it makes the document's top-level machine, before any document is parsed;
  ``re``'s cache is left as the memo found it;
* the only argument that differs from run to run is ``debug`` (the ``--debug`` option,
  or ``debug`` in a configuration file): a machine made with ``debug=False`` would not
  print the state machine's trace a cold ``--debug`` run prints. So the parser's set-up
  of each document (``docutils.parsers.Parser.setup_parse``, wrapped) removes every
  machine of the memo that no run has popped from the list when the document's reporter
  is in debug mode, and the nested parses make their own as in a cold run; it does the
  same when the program has replaced the module's ``state_classes`` since the memo made
  its machines;
* if the code this relies on (the nested parse, the constructors of the state machine
  and of the states, ``setup_parse``) is not the code this was written against
  (docutils 0.19 to 0.21), the memo is not installed (``skipped`` says why).

What it assumes of the program: that it does not change the state classes themselves
(their patterns, transitions or constructors) at run time before it parses; docutils'
front ends and its API do not. What differs from a cold run: a document whose ``setup_parse`` raises (a document without
settings or reporter, which docutils' front ends never make) shows one more frame in the
traceback, this module's. ``stats()`` says how many machines the memo made and how many
of them runs have popped.
"""

import ast
import hashlib
import inspect
import re
import textwrap

import docutils.parsers
from docutils import statemachine
from docutils.parsers.rst import states

from ngw import memo_learner

#: Why the memo is not installed on this docutils (None: it is).
skipped = None

#: The most machines the memo keeps in the list (a document nesting deeper makes the
#: rest itself, as in a cold run).
MAX_MACHINES = 16
FIRST = 2  # machines made at preload, before any child has reported

# The digests of the code the memo relies on (ast.dump of each function's source, in the
# order of _checked()), in the docutils releases this was checked against.
_KNOWN = {
    "29f00d97a9e0abad",  # 0.19, 0.20.1, 0.21.2 (0.22 gives a machine its parent: not known)
}

_mine = []  # the machines the memo made, in the order they went into the list
_stats = {"made": 0, "removed": 0}
_removed = False  # a run removed the memo's machines: the list is the run's from then on
_made_with = None  # the state classes the memo's machines were made with
_original_setup_parse = None


def _checked():
    """The functions whose code the exactness argument reads, in a fixed order."""
    fns = [states.RSTState.nested_parse, states.RSTState.__init__,
           statemachine.StateMachine.__init__, statemachine.StateMachine.add_states,
           statemachine.StateMachine.add_state, statemachine.State.__init__,
           statemachine.State.add_initial_transitions, statemachine.State.add_transitions,
           statemachine.State.make_transitions, statemachine.State.make_transition,
           statemachine.StateWS.__init__, statemachine.StateWS.add_initial_transitions,
           docutils.parsers.Parser.setup_parse]
    for cls in states.state_classes:
        init = cls.__dict__.get("__init__")
        if init is not None:
            fns.append(init)
    return fns


def _digest():
    h = hashlib.sha256()
    for fn in _checked():
        source = textwrap.dedent(inspect.getsource(fn))
        h.update(ast.dump(ast.parse(source)).encode())
        h.update(b"\0")
    h.update(repr([c.__name__ for c in states.state_classes]).encode())
    return h.hexdigest()[:16]


def _re_caches():
    return [c for c in (getattr(re, "_cache", None), getattr(re, "_cache2", None))
            if isinstance(c, dict)]


def _pristine():
    """The memo's machines still in the list that no run has popped."""
    cache = states.RSTState.nested_sm_cache
    held = {id(sm) for sm in cache}
    return [sm for sm in _mine if id(sm) in held and sm.input_lines is None]


def top_up(count):
    """Puts machines in the list until it holds `count` (at most MAX_MACHINES) that no
    run has popped, each made as a nested parse makes it. Leaves `re`'s cache as it
    found it. Returns how many it made."""
    global _made_with
    count = min(int(count), MAX_MACHINES)
    made = 0
    if _removed or (_made_with is not None and states.state_classes is not _made_with):
        return 0
    caches = [(c, dict(c)) for c in _re_caches()]
    try:
        while len(_pristine()) < count:
            sm = states.RSTState.nested_sm(
                debug=False, state_classes=states.state_classes, initial_state="Body")
            states.RSTState.nested_sm_cache.append(sm)
            _mine.append(sm)
            _made_with = states.state_classes
            _stats["made"] += 1
            made += 1
    finally:
        for cache, saved in caches:
            cache.clear()
            cache.update(saved)
    return made


def setup_parse(self, inputstring, document):
    global _removed
    if _mine and (getattr(getattr(document, "reporter", None), "debug_flag", True)
                  or states.state_classes is not _made_with):
        for sm in _pristine():
            states.RSTState.nested_sm_cache.remove(sm)
            _stats["removed"] += 1
        del _mine[:]
        _removed = True
    return _original_setup_parse(self, inputstring, document)


def _report():
    """In a child: how many machines the list held at the end, if the run made some (not
    counting a run that removed the memo's, which the memo could not have given)."""
    held = len(states.RSTState.nested_sm_cache)
    if _removed or held <= len(_mine) or held > MAX_MACHINES:
        return []
    return [held]


def _fill(value):
    """In the zygote: as many machines as a child's run needed."""
    if type(value) is not int or value < 1:
        return "not a number of machines"
    if value > MAX_MACHINES:
        return "more than %d machines" % MAX_MACHINES
    top_up(value)
    return None


def stats():
    """How many machines the memo made, how many are in the list unpopped, and how many
    a debug-mode document removed."""
    return dict(_stats, pristine=len(_pristine()), skipped=skipped)


def _install():
    global skipped, _original_setup_parse
    try:
        digest = _digest()
    except (OSError, TypeError, SyntaxError) as e:
        skipped = "cannot read docutils' source (%s)" % e
        return
    if digest not in _KNOWN:
        skipped = "docutils' state machines are not the code this memo knows (%s)" % digest
        return
    _original_setup_parse = docutils.parsers.Parser.setup_parse
    setup_parse.__doc__ = _original_setup_parse.__doc__
    docutils.parsers.Parser.setup_parse = setup_parse
    top_up(FIRST)
    memo_learner("docutils-machines", _report, _fill)


_install()
