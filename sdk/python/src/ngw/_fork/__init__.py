"""Fork-per-session: the worker (the zygote) has imported what it was told to preload;
each session runs in a fresh child forked from it, with exact argv, environment, working
directory and umask, and fd-level standard streams (pipes, or ptys where the client's
streams are terminals) that the worker relays to and from the channel, or the client's own
descriptors when ngd passes them (docs/ngw.md 11, 11.6).

Where each part lives:

* `parent`: the worker's side: forking (a spare ahead of time, or at session time),
  handing a spare its session, reaping, exit reports (`ForkRunner`, configured once with
  a `ForkConfig`).
* `spares`: the life cycle of the children forked ahead of time, a state machine that
  does no I/O itself (`Spares`).
* `child`: everything that runs in the forked child, from the fork to `_exit` (`Child`,
  configured once with its runner's `ChildConfig`).
* `lead`: whether a child leads a session of its own, a state machine that does no I/O
  itself (`Leading`).
* `relay`: the worker's loop for one running session (`Relay`).
* `stdio`: the session's pipes and ptys, and the child's `sys.std*` objects.
* `common`: the records both sides exchange, and their reader (`Inbox`).

The C library's functions (the clone, `PR_SET_PDEATHSIG`, the C `environ`) are `_sys`'s.
"""

from .parent import ForkConfig, ForkRunner, ForkSession
from .relay import exit_code_of_status
from .stdio import rebuild_stdio as _rebuild_stdio  # noqa: F401  (benches/plugin/fork_probe.py)

__all__ = ["ForkConfig", "ForkRunner", "ForkSession", "exit_code_of_status"]
