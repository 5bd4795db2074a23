"""The chunks ngd may send during a session, and what each means: one dispatcher for
in-process sessions (run by their I/O thread) and fork-mode sessions (the relay loop).

| chunk | during a session |
|---|---|
| `0`, `.` | stdin data, stdin end: `target.on_stdin(payload)`, `target.on_stdin_eof()` |
| `i` | an interrupt: `target.on_interrupt(reason)` |
| `p` | answered at once with `o` |
| `q` | `target.quit = True`: the session finishes, then the worker exits |
| `H`, `L` | ignored (ngd never sends them, docs/ngw.md 3) |
| `A`, `E`, `D`, `C` | the next session's header, which ngd sends only after reading this session's `X` (docs/ngw.md 7.4): it crossed the `X` in flight, so it is put back for the idle loop, which reads the header |
| anything else | unknown: logged and ignored (docs/ngw.md 3: a worker ignores chunk types it does not know) |

A framing error raises `_wire.ProtocolError` from `chan.next_chunk()`; callers end the
session and the worker exits with status 2.
"""

from . import _wire

_HEADER = (_wire.ARG, _wire.ENV, _wire.DIR, _wire.CMD)


def dispatch(chan, target, log):
    """Handles every chunk decoded so far on `chan` for the running session."""
    while True:
        c = chan.next_chunk()
        if c is None:
            return
        ty, payload = c
        if ty == _wire.STDIN:
            target.on_stdin(payload)
        elif ty == _wire.STDIN_EOF:
            target.on_stdin_eof()
        elif ty == _wire.INTERRUPT:
            target.on_interrupt(payload.decode("ascii", "replace").strip())
        elif ty == _wire.PING:
            chan.send(_wire.PONG, payload)
        elif ty == _wire.QUIT:
            target.quit = True
        elif ty in (_wire.HEARTBEAT, _wire.LONGARG):
            pass
        elif ty in _HEADER:
            chan.push_back(c)
            return
        else:
            log("ngw: ignoring chunk %s during a session" % _wire.type_name(ty))
