"""What it takes to serve particular existing programs exactly, one module each.

Preload the program's module here (``--preload ngw.programs.awscli``) instead of, or after,
the program's own modules: it imports what the program imports at start-up and registers
what fork mode cannot infer by itself, such as how the program's import changes the
environment (:func:`ngw.environ_rule`).

* ``ngw.programs.awscli``: the aws CLI 1.x.
"""
