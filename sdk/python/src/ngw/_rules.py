"""Environment rules: how a preloaded module changes a variable at import, as a function.

A fork-mode child gets the client's environment, then the *preload delta*: each variable
the preload set or removed is set to the zygote's value or removed again, because a cold
run would have imported the same modules and made the same change. That is exact for a
module that sets a constant, and wrong for one that derives the value from the variable's
previous value: awscli appends its own data directory to ``AWS_DATA_PATH``, so a client's
``AWS_DATA_PATH=/x`` must become ``/x:<awscli's>``, not ``<awscli's>``. A rule registered
with :func:`environ_rule` computes such a variable from the client's environment instead.
"""

import os
import pwd
import re

#: name -> rule(value, env); filled by preloads, read when the worker forks.
RULES = {}

_VAR = re.compile(r"\$(\w+|\{[^}]*\})", re.ASCII)


def environ_rule(name, rule):
    """Registers `rule(value, env) -> value` for variable `name`: given the client's value
    (None if unset) and its whole environment (a dict), it returns what the variable is
    after the preloaded modules' import in a cold run with that environment (None: unset).
    It replaces the preload delta for `name` in every fork-mode child; an exception in it
    fails the session's start (exit 126). Call it from a preload module."""
    if not name or "=" in name or "\0" in name:
        raise ValueError("bad variable name %r" % (name,))
    RULES[name] = rule


def expandvars(path, env):
    """os.path.expandvars against `env` instead of os.environ (same rules: $name and
    ${name}; unknown variables are left as they are)."""
    if "$" not in path:
        return path

    def one(m):
        name = m.group(1)
        if name.startswith("{"):
            name = name[1:-1]
        return env.get(name, m.group(0))

    return _VAR.sub(one, path)


def expanduser(path, env):
    """os.path.expanduser against `env`'s HOME (for `~`; `~user` from the password
    database), as a cold process with that environment would expand it."""
    if not path.startswith("~"):
        return path
    i = path.find("/", 1)
    if i < 0:
        i = len(path)
    if i == 1:
        home = env.get("HOME")
        if home is None:
            try:
                home = pwd.getpwuid(os.getuid()).pw_dir
            except KeyError:
                return path
    else:
        try:
            home = pwd.getpwnam(path[1:i]).pw_dir
        except KeyError:
            return path
    home = home.rstrip("/")
    return (home + path[i:]) or "/"
