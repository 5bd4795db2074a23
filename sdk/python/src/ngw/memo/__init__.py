"""Memos for fork mode: work a program repeats on every run, done once in the zygote.

A forked child starts from the zygote's memory, so anything the zygote computed is free in
every child; but libraries often cache per object (per session, per loader), and a
program that builds a new such object on every run redoes the work in every child. A
module here, preloaded after the library it serves, memoises process-wide the parts of
that work which are pure functions of what the zygote has frozen anyway (its code and
the data files shipped inside its packages), and fills the memo in the zygote.

The rule every memo here follows: a run through it does exactly what a cold run does,
same results, same files read outside the frozen packages, same log records. See each
module for what it covers:

* ``ngw.memo.botocore``: the aws CLI 1.x and other botocore programs.
"""
