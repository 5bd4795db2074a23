"""Stale code: the files the zygote's code came from, and whether any has changed.

After preloading, `CodeWatch.record()` notes every loaded module's file (source or
extension) with its size and modification time, and the directories they are in. Between
sessions `changed()` answers whether any of them changed, cheaply:

* on Linux, an inotify descriptor (`_sys`) watches those directories for a module
  file written, replaced, moved or deleted, and for a new module file or package directory
  (which could shadow a loaded one); checking is one non-blocking read;
* elsewhere, or if inotify is unavailable (no more watches), each recorded file is
  `stat`ed again.

Bytecode caches (`__pycache__`) are not watched: they follow their sources. A change
reported once stays reported (the worker retires, docs/ngw.md 12.4).
"""

import os
import struct
import sys

from . import _sys

_EVENT = struct.Struct("iIII")
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_ISDIR, _IN_Q_OVERFLOW = 0x400, 0x800, 0x40000000, 0x4000
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO
         | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF)
_CODE_SUFFIXES = (".py", ".pyw", ".so", ".pth")


def _module_files():
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.isabs(path):
            files.add(path)
    main = sys.modules.get("__main__")
    files.discard(getattr(main, "__file__", None))
    return files


class CodeWatch:
    def __init__(self, log):
        self.log = log
        self.files = {}  # path -> (size, mtime_ns)
        self.dirs = {}  # watch descriptor -> directory
        self.fd = -1
        self.reason = None  # once something changed: what
        self._inotify = False
        if sys.platform.startswith("linux"):
            try:
                fd = _sys.inotify_init(os.O_NONBLOCK | os.O_CLOEXEC)
                if fd is not None and fd >= 0:
                    self.fd = fd
                    self._inotify = True  # the descriptor is an inotify one
            except (OSError, AttributeError):
                self._inotify = False

    def fileno(self):
        return self.fd

    def record(self, extra=()):
        """Notes the loaded modules' files (and `extra` files) as they are now."""
        for path in _module_files() | set(extra):
            if path in self.files:
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            self.files[path] = (st.st_size, st.st_mtime_ns)
            self._watch(os.path.dirname(path))

    def _watch(self, directory):
        if not self._inotify or directory in self.dirs.values():
            return
        wd = _sys.inotify_add_watch(self.fd, os.fsencode(directory), _MASK)
        if wd < 0:  # out of watches (or gone): fall back to stat for everything
            self.log("ngw: cannot watch %s for code changes; checking files by stat"
                     % directory)
            os.close(self.fd)
            self.fd = -1
            self._inotify = False
            self.dirs = {}
            return
        self.dirs[wd] = directory

    def changed(self):
        """What changed since `record` (a sentence), or None."""
        if self.reason is None:
            self.reason = self._events() if self._inotify else self._stat()
        return self.reason

    def _stat(self):
        for path, (size, mtime) in self.files.items():
            try:
                st = os.stat(path)
            except OSError:
                return "%s was removed" % path
            if (st.st_size, st.st_mtime_ns) != (size, mtime):
                return "%s changed" % path
        return None

    def _events(self):
        found = None
        while True:
            try:
                data = os.read(self.fd, 65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                return "code watch failed (%s)" % e
            pos = 0
            while pos + _EVENT.size <= len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, pos)
                name = data[pos + _EVENT.size: pos + _EVENT.size + length].rstrip(b"\0")
                pos += _EVENT.size + length
                if found is None:
                    found = self._judge(wd, mask, os.fsdecode(name))
        return found

    def _judge(self, wd, mask, name):
        if mask & _IN_Q_OVERFLOW:
            return self._stat() or None
        directory = self.dirs.get(wd)
        if directory is None:
            return None
        if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
            return "%s was removed or moved" % directory
        path = os.path.join(directory, name)
        if path in self.files:
            if mask & (_IN_DELETE | _IN_MOVED_FROM):
                return "%s was removed" % path
            try:
                st = os.stat(path)
            except OSError:
                return "%s was removed" % path
            if (st.st_size, st.st_mtime_ns) != self.files[path]:
                return "%s changed" % path
            return None
        if name == "__pycache__" or name.startswith("."):
            return None
        if mask & (_IN_CREATE | _IN_MOVED_TO) and (
                mask & _IN_ISDIR or name.endswith(_CODE_SUFFIXES)):
            return "%s appeared next to loaded code" % path
        return None
