"""The `signals` extension's payloads (docs/ngw.md 15.5): what an `i` chunk asks for, and
the `X` payload of a command that died by a signal."""

import os
import signal

#: Signals whose default action is to ignore them or to stop: an in-process command
#: (which can neither stop nor die by a signal) is not interrupted by them.
HARMLESS = frozenset(
    int(getattr(signal, name)) for name in (
        "SIGWINCH", "SIGCHLD", "SIGURG", "SIGCONT", "SIGTSTP", "SIGTTIN", "SIGTTOU",
        "SIGSTOP") if hasattr(signal, name))


class Interrupt:
    """One `i` payload: `hangup`, `SIGNAME` (to the command's process group), `SIGNAME
    process` (to its process only) or `winsize <cols> <rows> <xpixel> <ypixel>`.
    `kind` is "hangup", "signal", "winsize" or None (not understood)."""

    __slots__ = ("kind", "signum", "process", "size", "text")

    def __init__(self, text):
        self.text = text
        self.kind = None
        self.signum = None
        self.process = False
        self.size = None  # (cols, rows, xpixel, ypixel)
        words = text.split()
        if words == ["hangup"]:
            self.kind, self.signum = "hangup", signal.SIGHUP
        elif len(words) == 5 and words[0] == "winsize":
            try:
                size = tuple(int(w) for w in words[1:])
            except ValueError:
                return
            if all(0 <= v <= 0xFFFF for v in size):
                self.kind, self.size = "winsize", size
        elif len(words) in (1, 2) and words[0].startswith("SIG") and (
                len(words) == 1 or words[1] == "process"):
            sig = getattr(signal.Signals, words[0], None) if words[0].isupper() else None
            if sig is not None:
                self.kind, self.signum, self.process = "signal", sig, len(words) == 2


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return None


def exit_payload(status, code, signals):
    """The `X` payload for wait status `status` (None: `code` came from the exit report),
    whose exit code is `code`: with `signals`, a death by signal N is
    "<128+N> <SIGNAME>[ core]\\n", otherwise (and for a name Python does not know) the
    code alone."""
    if signals and status is not None and os.WIFSIGNALED(status):
        name = signal_name(os.WTERMSIG(status))
        if name is not None:
            core = " core" if os.WCOREDUMP(status) else ""
            return b"%d %s%s\n" % (code, name.encode(), core.encode())
    return b"%d\n" % code
