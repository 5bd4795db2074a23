"""Learned copy-on-write pre-faulting: the spare takes, before its session exists, the
copy-on-write faults that the previous sessions' children took while they ran
(docs/ngw.md 11.7).

A forked child shares every page with the worker until it writes to it; the first write
to each shared page is a copy-on-write fault (~4 us), and a program's own run writes to
thousands of them (reference counts, allocator pages, memoised objects), which the
rehearsal (11.5) cannot reach since it does not run the program. The pages a run writes
are mostly the same from one run to the next, so they are learned:

* A *sampling* child, after its exit report (off the path to the session's X), finds the
  pages of its writable private mappings that it now holds **exclusively**
  (`/proc/self/maps`, then `/proc/self/pagemap`: present, exclusively mapped, anonymous;
  readable unprivileged) and reports them as page ranges to a pipe of the worker's
  (opened through `/proc/<worker>/fd/<n>`, like the exit report), in writes of at most
  PIPE_BUF bytes so that reports never interleave. The sampling children are the first
  `FIRST`, then one fork in `EVERY`; their spares do not pre-fault, since a page a spare
  pre-faulted is exclusive whether the program wrote it or not (a pre-faulted child's
  report would only repeat the set, and nothing would ever age out of it).
* The worker merges the reports into a bounded set of pages (`cap` bytes), each with the
  report that last named it and how many reports did; the oldest go first when the set
  is full, and a page that none of the last `MAX_AGE` reports named is dropped. Each
  spare inherits the set through fork.
* A spare that does not sample, once it is ready, waits up to `IDLE_BEFORE` for its
  session (sessions in a loop find the CPUs free of it), then calls
  `madvise(MADV_POPULATE_WRITE)` over the learned ranges that lie in its own writable
  private mappings, the pages most reports named first, `CHUNK` pages between two looks
  at its socket, and stops as soon as its session has arrived. MADV_POPULATE_WRITE
  (Linux 5.14) breaks copy-on-write exactly as a write would and changes no content:
  nothing the program can observe changes, only which faults it still takes.

`NGW_PREFAULT` in the worker's environment: `0` turns it off, a positive number sets the
cap in MiB (default 64)."""

import collections
import errno
import itertools
import mmap
import os
import struct

from . import _sys
from ._channel import report_pipe

ENV = "NGW_PREFAULT"
DEFAULT_CAP_MB = 64
PAGE = mmap.PAGESIZE
MADV_POPULATE_WRITE = 23
CHUNK = 32  # pages pre-faulted between two looks at the spare's socket
FIRST = 3  # reports merged before spares start pre-faulting
EVERY = 16  # then one fork in EVERY samples (its spare does not pre-fault; it reports)
MAX_AGE = 32  # reports after which a page none of them named is dropped
HOT = 2  # pages named by at least 1/HOT as many reports as the most named go first
IDLE_BEFORE = 0.01  # seconds a spare waits for its session before it pre-faults
PIPE_BUF = 4096  # bytes the kernel writes to a pipe atomically (POSIX minimum 512; Linux)

# A report message: magic, pid, last-message flag, run count; then `count` runs (first
# page number, pages).
_HEAD = struct.Struct("=4sIBH")
_RUN = struct.Struct("=QI")
_MAGIC = b"NGWP"

# pagemap entry, top byte: bit 63 present (0x80), 61 file page or shared anonymous
# (0x20), 56 exclusively mapped (0x01). Wanted: present, exclusive, private anonymous.
_MASK, _WANT = 0xA1, 0x81
_EXCLUSIVE = bytes(1 if (b & _MASK) == _WANT else 0 for b in range(256))


def cap_from_env(environ=None):
    """The cap in bytes that NGW_PREFAULT sets, 0 when it turns pre-faulting off."""
    raw = (environ if environ is not None else os.environ).get(ENV, "").strip().lower()
    if raw in ("", "1", "on", "yes", "true"):
        return DEFAULT_CAP_MB << 20
    if raw in ("0", "off", "no", "false"):
        return 0
    try:
        mb = float(raw)
    except ValueError:
        return DEFAULT_CAP_MB << 20
    return max(0, int(mb * (1 << 20)))


def writable_private(maps):
    """The writable private mappings in a /proc/<pid>/maps text (bytes), as sorted
    [(first page, end page)]."""
    out = []
    for line in maps.split(b"\n"):
        parts = line.split(None, 2)
        if len(parts) < 2:
            continue
        perms = parts[1]
        if len(perms) < 4 or perms[1:2] != b"w" or perms[3:4] != b"p":
            continue
        lo, _, hi = parts[0].partition(b"-")
        try:
            start, end = int(lo, 16) // PAGE, int(hi, 16) // PAGE
        except ValueError:
            continue
        if end > start:
            out.append((start, end))
    out.sort()
    return out


def exclusive_runs(entries, first_page):
    """The runs of pages a pagemap read (`entries`: bytes, 8 per page, starting at page
    `first_page`) shows present, exclusively mapped and anonymous: [(first page, pages)].
    Only each entry's top byte matters, so the search runs over those bytes."""
    flags = bytes(entries[7::8]).translate(_EXCLUSIVE)
    out = []
    i = flags.find(1)
    while i >= 0:
        j = flags.find(0, i)
        if j < 0:
            j = len(flags)
        out.append((first_page + i, j - i))
        i = flags.find(1, j)
    return out


def scan_self(regions=None, pagemap="/proc/self/pagemap", maps="/proc/self/maps"):
    """The runs of pages this process holds exclusively in its writable private mappings."""
    if regions is None:
        regions = writable_private(_read(maps))
    out = []
    fd = os.open(pagemap, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for start, end in regions:
            try:
                data = os.pread(fd, (end - start) * 8, start * 8)
            except OSError:
                continue
            out.extend(exclusive_runs(data, start))
    finally:
        os.close(fd)
    return out


def merge_runs(runs):
    """Sorted, overlapping and adjacent runs joined: [(first page, pages)]."""
    out = []
    for start, n in sorted(runs):
        if n <= 0:
            continue
        if out and start <= out[-1][0] + out[-1][1]:
            last = out[-1]
            out[-1] = (last[0], max(last[1], start + n - last[0]))
        else:
            out.append((start, n))
    return out


def runs_of(pages):
    """Runs of consecutive page numbers from an iterable of them."""
    out = []
    start = prev = None
    for p in sorted(pages):
        if prev is not None and p == prev + 1:
            prev = p
            continue
        if start is not None:
            out.append((start, prev - start + 1))
        start = prev = p
    if start is not None:
        out.append((start, prev - start + 1))
    return out


def intersect(runs, regions):
    """The parts of sorted `runs` ([(first page, pages)]) inside sorted `regions`
    ([(first page, end page)])."""
    out = []
    i = 0
    for start, n in runs:
        end = start + n
        while i < len(regions) and regions[i][1] <= start:
            i += 1
        k = i
        while k < len(regions) and regions[k][0] < end:
            lo, hi = max(start, regions[k][0]), min(end, regions[k][1])
            if hi > lo:
                out.append((lo, hi - lo))
            k += 1
    return out


def encode_report(pid, runs):
    """A report as messages of at most PIPE_BUF bytes each (each written atomically)."""
    per = (PIPE_BUF - _HEAD.size) // _RUN.size
    out = []
    for i in range(0, max(len(runs), 1), per):
        part = runs[i:i + per]
        last = i + per >= len(runs)
        out.append(_HEAD.pack(_MAGIC, pid & 0xFFFFFFFF, last, len(part))
                   + b"".join(_RUN.pack(s, n) for s, n in part))
    return out


def decode_messages(buf):
    """Whole messages at the start of `buf`: ([(pid, last, runs)], bytes used). Stops at
    a message that is not one (bytes used is then -1: drop the buffer)."""
    out = []
    at = 0
    while len(buf) - at >= _HEAD.size:
        magic, pid, last, count = _HEAD.unpack_from(buf, at)
        size = _HEAD.size + count * _RUN.size
        if magic != _MAGIC or size > PIPE_BUF:
            return out, -1
        if len(buf) - at < size:
            break
        out.append((pid, bool(last), list(_RUN.iter_unpack(buf[at + _HEAD.size:at + size]))))
        at += size
    return out, at


def _read(path):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            data = os.read(fd, 1 << 16)
            if not data:
                return b"".join(chunks)
            chunks.append(data)
    finally:
        os.close(fd)


def supported():
    """None if madvise(MADV_POPULATE_WRITE) works here, else why not."""
    if not hasattr(mmap.mmap, "madvise"):
        return "this Python has no mmap.madvise"
    if not os.path.exists("/proc/self/pagemap"):
        return "/proc/self/pagemap is missing"
    try:
        m = mmap.mmap(-1, PAGE, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20))
    except OSError as e:
        return "mmap failed (%s)" % e
    try:
        m.madvise(MADV_POPULATE_WRITE)
    except OSError as e:
        return "madvise(MADV_POPULATE_WRITE) failed (%s)" % (
            errno.errorcode.get(e.errno, e.errno))
    finally:
        m.close()
    return None


class Pages:
    """The learned set (the worker's), what a child reports and what a spare pre-faults.

    Built in the worker; children and spares use their inherited copy."""

    def __init__(self, log, cap=None, libc=None):
        self.log = log
        self.cap = cap_from_env() if cap is None else cap
        self.enabled = False
        self.pages = {}  # page number -> stamp of the last report that named it
        self.hits = collections.Counter()  # page number -> reports that named it
        self.stamp = 0  # reports merged so far
        self.forks = 0  # children forked so far
        self.sample = True  # the child forked last samples (decided at each fork)
        self.prefaulted = False  # in a spare and its child: it pre-faulted something
        self.partial = {}  # pid -> runs of a report still arriving
        self.buf = bytearray()
        self.r = self.w = None
        self.report_path = None
        self._madvise = None  # (address, length, advice) -> 0 or errno (_sys.bind_madvise)
        if self.cap <= 0 or libc is None:
            return
        why = supported()
        if why is not None:
            self.log("ngw: copy-on-write pre-faulting is off: %s" % why)
            return
        try:
            self._bind(libc)
        except (AttributeError, OSError) as e:
            self.log("ngw: copy-on-write pre-faulting is off: no madvise (%s)" % e)
            return
        self.r, self.w, path = report_pipe()
        if path is None:
            self.close()
            return
        self.report_path = path
        self.enabled = True

    def _bind(self, libc):
        self._madvise = _sys.bind_madvise(libc)

    def close(self):
        for fd in (self.r, self.w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.r = self.w = None
        self.enabled = False

    def fds(self):
        """The worker's descriptors that every child closes first thing."""
        return [fd for fd in (self.r, self.w) if fd is not None]

    def size(self):
        return len(self.pages) * PAGE

    # -- the worker ------------------------------------------------------------------------

    def note_fork(self):
        """Before each fork: whether that child samples (its spare, if it is one, does
        not pre-fault; the child reports): the first children, then one in EVERY."""
        self.forks += 1
        self.sample = self.stamp < FIRST or self.forks % EVERY == 0

    def absorb(self):
        """Reads the reports that arrived and merges the finished ones into the set."""
        if self.r is None:
            return 0
        while True:
            try:
                data = os.read(self.r, 1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if not data:
                break
            self.buf += data
        messages, used = decode_messages(self.buf)
        if used < 0:
            self.buf = bytearray()  # not a report: drop what is buffered
            self.partial.clear()
        else:
            del self.buf[:used]
        merged = 0
        for pid, last, runs in messages:
            held = self.partial.setdefault(pid, [])
            held.extend(runs)
            if last:
                del self.partial[pid]
                self.merge(held)
                merged += 1
        if len(self.partial) > 64:  # reports whose end never came
            self.partial.clear()
        return merged

    def merge(self, runs):
        """One child's report into the set: its pages get the newest stamp and one more
        hit; the oldest pages go when the set is over the cap, and pages none of the
        last MAX_AGE reports named. Returns how many pages were new."""
        self.stamp += 1
        stamp = self.stamp
        pages, hits = self.pages, self.hits
        before = len(pages)
        flat = list(itertools.chain.from_iterable(
            [range(start, start + n) for start, n in runs if 0 < n <= self.cap // PAGE]))
        pages.update(dict.fromkeys(flat, stamp))
        hits.update(flat)
        added = len(pages) - before
        limit = self.cap // PAGE
        if len(pages) > limit or stamp % MAX_AGE == 0:
            oldest = stamp - MAX_AGE
            keep = [(s, p) for p, s in pages.items() if s > oldest]
            if len(keep) > limit:
                keep.sort(reverse=True)
                del keep[limit:]
            self.pages = dict((p, s) for s, p in keep)
            self.hits = collections.Counter({p: hits[p] for p in self.pages})
        return added

    # -- a child ---------------------------------------------------------------------------

    def wants_report(self):
        """Whether this child reports its pages: it samples, and nothing was
        pre-faulted for it."""
        return self.enabled and self.sample and not self.prefaulted

    def child_report(self):
        """In a child before it exits: its exclusive pages, to the worker."""
        if not self.wants_report():
            return
        runs = scan_self()
        if not runs:
            return
        try:
            fd = os.open(self.report_path, os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return
        try:
            for message in encode_report(os.getpid(), runs):
                os.write(fd, message)
        except OSError:
            pass  # the pipe is full: the rest of this report is lost, the worker copes
        finally:
            os.close(fd)

    # -- a spare ---------------------------------------------------------------------------

    def plan(self):
        """The learned runs inside this process's writable private mappings, in the order
        to pre-fault them: the pages at least 1/HOT as many reports named as the most
        named one first (those every run writes), then the others."""
        if not self.enabled or not self.pages:
            return []
        regions = writable_private(_read("/proc/self/maps"))
        hits = self.hits
        top = max(hits.values(), default=0)
        hot = [p for p in self.pages if hits[p] * HOT >= top]
        if len(hot) == len(self.pages):
            return intersect(runs_of(self.pages), regions)
        hot_set = set(hot)
        cold = [p for p in self.pages if p not in hot_set]
        return intersect(runs_of(hot), regions) + intersect(runs_of(cold), regions)

    def prefault(self, arrived):
        """In a spare: breaks copy-on-write over the learned pages until done or
        `arrived()` (asked every CHUNK pages) says the session is here. Returns the pages
        done. A sampling spare does nothing (its child reports what it writes)."""
        if not self.enabled or not self.pages or self.sample:
            return 0
        try:
            todo = self.plan()
        except OSError:
            return 0
        madvise = self._madvise
        done = since = 0
        first = True
        for start, n in todo:
            at, end = start, start + n
            while at < end:
                if since >= CHUNK or first:
                    if arrived():
                        return done
                    since = 0
                k = min(CHUNK - since, end - at) or 1
                self.prefaulted = True
                err = madvise(at * PAGE, k * PAGE, MADV_POPULATE_WRITE)
                if err != 0:
                    if err in (errno.EINTR, errno.EAGAIN):
                        continue
                    if err == errno.EINVAL and first:
                        self.enabled = False  # not supported after all
                        return 0
                    break  # EFAULT, ENOMEM, EPERM, EINVAL: this run is not for us
                first = False
                at += k
                done += k
                since += k
        return done
