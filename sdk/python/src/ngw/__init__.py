"""ngw: write ngd workers in Python.

    import ngw

    @ngw.command("hello")
    def hello(ctx):
        ctx.stdout.write(b"hello, %s\\n" % ctx.args[0].encode())
        return 0

    ngw.serve()

See docs/ngw.md in the ngd repository for the protocol and the fork mode.
"""

from ._adaptive import after_imports, memo_learner
from ._context import Context, Interrupted
from ._rules import environ_rule
from ._worker import PROTOCOL, VERSION as __version__, Worker

__all__ = ["Context", "Interrupted", "Worker", "command", "serve", "default_worker",
           "environ_rule", "after_imports", "memo_learner", "PROTOCOL", "__version__"]

#: The worker that the module-level `command` and `serve` use.
default_worker = Worker()


def command(name, *, fork=False, argv0=None):
    """Registers a command on the default worker; see Worker.command."""
    return default_worker.command(name, fork=fork, argv0=argv0)


def serve(preload=(), **kwargs):
    """Serves the default worker's commands; see Worker.serve. Never returns."""
    default_worker.serve(preload, **kwargs)
