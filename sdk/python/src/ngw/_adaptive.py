"""Adaptive preloading: modules that session children import, imported by the zygote
between sessions so the next children find them loaded (docs/ngw.md 12.5).

* Each fork-mode child, right before it exits, writes the names of the modules it imported
  that the zygote had not (`child_report`) to a pipe of the worker's (opened through
  /proc/<worker>/fd/<n>, like the exit report). Only modules whose file is inside the
  Python installation (the standard library, site-packages) are reported: never
  `__main__`, the SDK's own modules, or code from the client's directory or the
  program's own `sys.path` additions (a FLASK_APP module, say), which depend on the
  session.
* The worker imports them one at a time from its idle loop, once it has been idle for
  `IDLE_BEFORE` seconds, and only while no chunk from ngd is waiting; a session that
  arrives during an import waits for that one import.
* An import that fails, or that misbehaves as a preload (prints a warning, changes the
  environment, reads a variable or asks whether a stream is a terminal, starts a thread),
  is recorded as excluded and left to the children; one that got imported anyway makes
  the worker retire (`retire` notice) so that its replacement starts without it.
* What was learned is kept in a small JSON file, `preload-<plugin>-<hash>.json` in
  `$NGW_STATE_DIR` (set by the host), else `$XDG_STATE_HOME/ngw`, else
  `~/.local/state/ngw` (the hash covers the interpreter and the worker's command line),
  and imported at the next start along with the configured preloads.
"""

import hashlib
import json
import os
import sys
import sysconfig

IDLE_BEFORE = 0.05  # seconds of idleness before the zygote imports a learned module
MAX_MODULES = 4000
_REPORT_CAP = 60000  # bytes a child writes (one pipe write)


def install_roots():
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.realpath(path) + os.sep)
    return tuple(roots)


def child_report(known, roots, path):
    """In a child before it exits: the newly imported installation modules, to `path`."""
    names = []
    for name, module in list(sys.modules.items()):
        if name in known or name in ("__main__", "__mp_main__") or name == "ngw" or \
                name.startswith(("ngw.", "ngw_contrib")):
            continue
        f = getattr(module, "__file__", None)
        if isinstance(f, str) and os.path.realpath(f).startswith(roots):
            names.append(name)
    if not names:
        return
    data = "\n".join(names).encode("utf-8", "surrogateescape")[:_REPORT_CAP]
    data = data[:data.rfind(b"\n") + 1] if len(data) == _REPORT_CAP else data + b"\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)


def cache_path(argv):
    base = os.environ.get("NGW_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "ngw")
    digest = hashlib.sha256("\0".join([sys.executable] + list(argv)).encode(
        "utf-8", "surrogateescape")).hexdigest()[:16]
    plugin = "".join(c if c.isalnum() or c in "-_." else "_"
                     for c in os.environ.get("NGW_PLUGIN", "worker"))
    return os.path.join(base, "preload-%s-%s.json" % (plugin, digest))


class Learner:
    """The worker's side: what children reported, what was imported, what is excluded."""

    def __init__(self, log, path):
        self.log = log
        self.path = path
        self.learned = []  # imported into the zygote, in order
        self.excluded = set()
        self.queue = []
        self.probe = None  # (pid, pipe, verdicts so far) while a probe vets a batch
        self.buf = b""
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.report_path = "/proc/%d/fd/%d" % (os.getpid(), self.w)
        if not os.path.exists(self.report_path):
            self.report_path = None
        self.roots = install_roots()

    def load(self):
        """The modules a previous worker learned (to import at start)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            self.excluded = set(data.get("excluded", []))
            return [m for m in data.get("modules", []) if isinstance(m, str)]
        except (OSError, ValueError, AttributeError):
            return []

    def save(self):
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = self.path + ".%d.tmp" % os.getpid()
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"modules": self.learned[:MAX_MODULES],
                           "excluded": sorted(self.excluded)[:MAX_MODULES]}, f)
            os.replace(tmp, self.path)
        except OSError as e:
            self.log("ngw: cannot save the learned preloads to %s: %s" % (self.path, e))

    def read_reports(self):
        while True:
            try:
                data = os.read(self.r, 65536)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                break
            self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            name = line.decode("utf-8", "surrogateescape")
            if name and name not in sys.modules and name not in self.excluded and \
                    name not in self.queue and len(self.learned) < MAX_MODULES:
                self.queue.append(name)
