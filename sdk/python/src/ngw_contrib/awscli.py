"""The aws CLI 1.x in fork mode: ``--preload ngw_contrib.awscli`` (examples/aws.toml).

Imports ``awscli.clidriver`` and ``awscli.handlers`` (which ``main()`` would otherwise
import on every run: about half of a warm run's time), and registers how importing
``awscli`` changes ``AWS_DATA_PATH``: it expands ``$VARS`` and ``~`` in each entry of the
caller's value and appends its own ``data`` directory. Without the rule a child would get
the zygote's value, and a client's own ``AWS_DATA_PATH`` (extra service models) would be
ignored.

For speed, also preload ``ngw_contrib.botocore_memo``.
"""

import os

import awscli
import awscli.clidriver  # noqa: F401  (imported for the zygote)
import awscli.handlers  # noqa: F401

from ngw._rules import environ_rule, expanduser, expandvars

#: awscli's own model directory, as awscli/__init__.py computes it.
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(awscli.__file__)), "data")


def aws_data_path(value, env):
    """AWS_DATA_PATH after ``import awscli`` in a process whose environment is `env`."""
    paths = []
    if value is not None:
        for path in value.split(os.pathsep):
            paths.append(expanduser(expandvars(path, env), env))
    paths.append(DATA_DIR)
    return os.pathsep.join(paths)


environ_rule("AWS_DATA_PATH", aws_data_path)
