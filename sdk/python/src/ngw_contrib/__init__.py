"""Program-specific modules for the ngw SDK's fork mode: preloads that know one program's or
library's internals. They live outside the standard-library-only core (`ngw`) because
they import the programs they serve and patch their internals; each is tested against the
real program (sdk/python/tests/test_contrib.py, test_runner.py).

Programs (preload instead of, or after, the program's own modules: each imports what the
program imports at start-up and registers what fork mode cannot infer by itself, such as
how the program's import changes the environment, :func:`ngw.environ_rule`):

* ``ngw_contrib.awscli``: the aws CLI 1.x.

Memos (work a program repeats on every run, done once in the zygote). A forked child
starts from the zygote's memory, but libraries often cache per object (per session, per
loader), so a program that builds a new such object on every run redoes the work in every
child. A memo, preloaded after the library it serves, memoises process-wide the parts of
that work which are pure functions of what the zygote has frozen anyway (its code and the
data files shipped inside its packages), and fills the memo in the zygote. The rule every
memo follows: a run through it does exactly what a cold run does, same results, same files
read outside the frozen packages, same log records.

* ``ngw_contrib.botocore_memo``: the aws CLI 1.x and other botocore programs.
* ``ngw_contrib.pygments_memo``: pygmentize and other pygments programs (lexers' token
  tables).
* ``ngw_contrib.metadata_memo``: programs that look up entry points on every run
  (flask's plugin commands).
* ``ngw_contrib.werkzeug_memo``: flask and other werkzeug programs (the URL builders
  every run compiles for the application's rules, learned from children with
  ``ngw.memo_learner``).
* ``ngw_contrib.docutils_memo``: docutils' front ends (``rst2html.py``, ``docutils``): the
  nested state machines the reStructuredText parser makes on each run, made in the
  zygote, as many as children report needing.

Memos that fill what depends on modules the zygote learns between sessions register a
function with ``ngw.after_imports`` (docs/ngw.md 12.5).

The former names ``ngw.programs.awscli`` and ``ngw.memo.botocore`` still work: they are
aliases of these modules.
"""
