"""Learned copy-on-write pre-faulting (docs/ngw.md 11.7): the pagemap reader, runs and
their merging, the report's wire form, the learned set's cap and ageing, a spare that
pre-faults what children wrote, stops when its session arrives, changes no output, and
copes quietly when madvise fails."""

import errno
import json
import mmap
import os
import struct
import sys
import tempfile
import textwrap
import time
import unittest

import driver
from support import client_env

from ngw import _pages
from ngw._fork.common import libc_handle, load_libc

PAGE = _pages.PAGE
load_libc()

# A worker with one large buffer written at import (present, the worker's own pages), a
# command that writes to every page of it, and one that only reads it.
WORKER = textwrap.dedent("""\
    import ctypes, hashlib, os, sys
    import ngw

    PAGES = int(os.environ.get("TEST_PAGES", "512"))
    BUF = bytearray(b"\\x01" * (PAGES * 4096))
    VIEW = (ctypes.c_char * len(BUF)).from_buffer(BUF)

    @ngw.command("where", fork=True)
    def where(ctx):
        print(ctypes.addressof(VIEW), len(BUF))

    @ngw.command("touch", fork=True)
    def touch(ctx):
        for i in range(0, len(BUF), 4096):
            BUF[i] = (BUF[i] + 1) & 0xFF
        print(hashlib.sha256(BUF).hexdigest(), " ".join(ctx.args))
        sys.stderr.write("touched %d pages\\n" % (len(BUF) // 4096))

    @ngw.command("read", fork=True)
    def read(ctx):
        print(hashlib.sha256(BUF).hexdigest(), BUF[4096 * 3], ctx.args)

    ngw.serve()
    """)


def entry(present=False, exclusive=False, file=False):
    bits = (present << 63) | (exclusive << 56) | (file << 61)
    return struct.pack("=Q", bits | 0x1234)  # low bits: a PFN or swap entry, ignored


def exclusive_pages(pid, start, n):
    """How many of pages [start, start + n) process `pid` holds exclusively (anonymous)."""
    with open("/proc/%d/pagemap" % pid, "rb") as f:
        f.seek(start * 8)
        data = f.read(n * 8)
    return sum(k for _, k in _pages.exclusive_runs(data, start))


def in_child(fn):
    """Runs fn() in a forked child; returns what it returned (JSON)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, json.dumps(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


class Region:
    """A private anonymous mapping of `n` pages, every page written (present)."""

    def __init__(self, n):
        self.m = mmap.mmap(-1, n * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        for i in range(n):
            self.m[i * PAGE] = 1
        import ctypes
        self._view = (ctypes.c_char * len(self.m)).from_buffer(self.m)
        self.start = ctypes.addressof(self._view) // PAGE
        self.n = n

    def close(self):
        del self._view
        self.m.close()


class Units(unittest.TestCase):
    def test_writable_private_keeps_only_writable_private_mappings(self):
        maps = (b"00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/python\n"
                b"00651000-00652000 rw-p 00051000 08:02 173521 /usr/bin/python\n"
                b"00652000-00655000 rw-p 00000000 00:00 0 [heap]\n"
                b"7f0000000000-7f0000002000 rw-s 00000000 00:05 4 /dev/shm/x\n"
                b"7f0000002000-7f0000003000 ---p 00000000 00:00 0\n"
                b"7ffd00000000-7ffd00021000 rwxp 00000000 00:00 0 [stack]\n"
                b"garbage\n\n")
        self.assertEqual(_pages.writable_private(maps), [
            (0x651, 0x652), (0x652, 0x655), (0x7ffd00000, 0x7ffd00021)])

    def test_exclusive_runs_wants_present_exclusive_anonymous(self):
        entries = (entry(True, True) + entry(True, True) + entry(True, False)
                   + entry(True, True, file=True) + entry(False, True) + entry(True, True)
                   + entry())
        self.assertEqual(_pages.exclusive_runs(entries, 100), [(100, 2), (105, 1)])
        self.assertEqual(_pages.exclusive_runs(b"", 7), [])
        self.assertEqual(_pages.exclusive_runs(entry(True, True) * 3, 0), [(0, 3)])

    def test_merge_runs_and_runs_of(self):
        self.assertEqual(_pages.merge_runs([(10, 2), (1, 3), (12, 1), (3, 4), (20, 0)]),
                         [(1, 6), (10, 3)])
        self.assertEqual(_pages.runs_of([5, 1, 2, 3, 9, 10]), [(1, 3), (5, 1), (9, 2)])
        self.assertEqual(_pages.runs_of([]), [])

    def test_intersect_with_mappings(self):
        regions = [(10, 20), (30, 40)]
        self.assertEqual(_pages.intersect([(0, 5), (8, 5), (18, 15), (39, 10), (50, 1)],
                                          regions),
                         [(10, 3), (18, 2), (30, 3), (39, 1)])

    def test_report_messages_fit_pipe_buf_and_round_trip(self):
        runs = [(i * 3, 2) for i in range(1000)]
        messages = _pages.encode_report(4242, runs)
        self.assertGreater(len(messages), 1)
        self.assertTrue(all(len(m) <= _pages.PIPE_BUF for m in messages))
        decoded, used = _pages.decode_messages(b"".join(messages) + b"NGW")
        self.assertEqual(used, len(b"".join(messages)))  # the partial tail waits
        self.assertEqual([p for p, _, _ in decoded], [4242] * len(messages))
        self.assertEqual([last for _, last, _ in decoded],
                         [False] * (len(messages) - 1) + [True])
        self.assertEqual([r for _, _, rs in decoded for r in rs], runs)
        self.assertEqual(_pages.decode_messages(b"garbage that is long enough")[1], -1)

    def test_cap_from_env(self):
        self.assertEqual(_pages.cap_from_env({}), 64 << 20)
        self.assertEqual(_pages.cap_from_env({"NGW_PREFAULT": "0"}), 0)
        self.assertEqual(_pages.cap_from_env({"NGW_PREFAULT": "off"}), 0)
        self.assertEqual(_pages.cap_from_env({"NGW_PREFAULT": "8"}), 8 << 20)
        self.assertEqual(_pages.cap_from_env({"NGW_PREFAULT": "1"}), 64 << 20)
        self.assertEqual(_pages.cap_from_env({"NGW_PREFAULT": "nonsense"}), 64 << 20)


class LearnedSet(unittest.TestCase):
    def learned(self, cap_pages):
        return _pages.Pages(lambda m: None, cap=cap_pages * PAGE, libc=None)

    def test_the_cap_keeps_the_newest_pages(self):
        p = self.learned(100)
        p.merge([(1000, 80)])
        p.merge([(5000, 50)])
        self.assertEqual(len(p.pages), 100)
        self.assertTrue(all(q in p.pages for q in range(5000, 5050)))  # the newest, all
        self.assertEqual(sum(q in p.pages for q in range(1000, 1080)), 50)
        p.merge([(1000, 80), (9000, 500)])  # one report over the cap
        self.assertEqual(len(p.pages), 100)

    def test_pages_no_recent_report_named_age_out(self):
        p = self.learned(10000)
        p.merge([(1, 10)])
        for _ in range(2 * _pages.MAX_AGE):  # swept every MAX_AGE reports
            p.merge([(100, 10)])
        self.assertNotIn(1, p.pages)
        self.assertIn(100, p.pages)

    def test_the_first_children_then_one_in_every_sample(self):
        p = self.learned(10000)
        p.enabled = True
        for _ in range(_pages.FIRST):
            p.note_fork()
            self.assertTrue(p.sample)
            self.assertTrue(p.wants_report())
            p.merge([(1, 100)])
        sampled = []
        for _ in range(4 * _pages.EVERY):
            p.note_fork()
            sampled.append(p.sample)
        self.assertEqual(sum(sampled), 4)
        # A child whose spare pre-faulted does not report (what the spare pre-faulted is
        # exclusive whether the program wrote it or not).
        p.sample, p.prefaulted = True, True
        self.assertFalse(p.wants_report())

    def test_the_most_named_pages_are_planned_first(self):
        p = _pages.Pages(lambda m: None, cap=4 << 20, libc=libc_handle())
        self.addCleanup(p.close)
        region = Region(8)
        self.addCleanup(region.close)
        s = region.start
        p.merge([(s, 2)])
        p.merge([(s + 4, 4)])
        p.merge([(s + 4, 2)])
        p.merge([(s + 4, 2)])  # pages s+4, s+5: 3 hits, the others 1
        self.assertEqual(p.plan(), [(s + 4, 2), (s, 2), (s + 6, 2)])

    def test_absorb_merges_whole_reports_from_the_pipe(self):
        p = _pages.Pages(lambda m: None, cap=4 << 20, libc=libc_handle())
        self.assertTrue(p.enabled)
        try:
            msgs = _pages.encode_report(7, [(i * 2, 1) for i in range(600)])
            for m in msgs[:-1]:
                os.write(p.w, m)
            self.assertEqual(p.absorb(), 0)  # its last message has not come
            os.write(p.w, msgs[-1])
            self.assertEqual(p.absorb(), 1)
            self.assertEqual(len(p.pages), 600)
            os.write(p.w, b"\0" * 64)  # not a report: dropped
            self.assertEqual(p.absorb(), 0)
            self.assertEqual(len(p.pages), 600)
        finally:
            p.close()


class PagemapAndPrefault(unittest.TestCase):
    def setUp(self):
        self.region = Region(64)

    def tearDown(self):
        self.region.close()

    def pages(self):
        p = _pages.Pages(lambda m: None, cap=1 << 20, libc=libc_handle())
        self.assertTrue(p.enabled, "MADV_POPULATE_WRITE must work on this kernel")
        p.merge([(self.region.start, self.region.n)])
        p.sample = False  # a spare that pre-faults
        self.addCleanup(p.close)
        return p

    def test_scan_sees_what_a_child_wrote(self):
        reg = self.region
        box = [(reg.start, reg.start + reg.n)]
        self.assertEqual(_pages.scan_self(box), [(reg.start, reg.n)])  # ours alone

        def child():
            before = _pages.scan_self(box)
            reg.m[5 * PAGE] = 2
            reg.m[6 * PAGE + 100] = 2
            return before, _pages.scan_self(box)
        before, after = in_child(child)
        self.assertEqual(before, [])  # shared with the parent after the fork
        self.assertEqual(after, [[reg.start + 5, 2]])

    def test_prefault_breaks_copy_on_write_without_changing_content(self):
        reg = self.region
        p = self.pages()
        reg.m[3 * PAGE + 7] = 42

        def child():
            done = p.prefault(lambda: False)
            return done, exclusive_pages(os.getpid(), reg.start, reg.n), reg.m[3 * PAGE + 7]
        done, exclusive, byte = in_child(child)
        self.assertEqual((done, exclusive, byte), (reg.n, reg.n, 42))

    def test_a_sampling_spare_does_not_prefault(self):
        reg = self.region
        p = self.pages()
        p.sample = True

        def child():
            return p.prefault(lambda: False), exclusive_pages(os.getpid(), reg.start, reg.n)
        self.assertEqual(in_child(child), [0, 0])

    def test_prefault_stops_when_the_session_arrives(self):
        reg = self.region
        p = self.pages()
        polls = []

        def arrived():
            polls.append(1)
            return len(polls) > 1  # after one chunk

        def child():
            done = p.prefault(arrived)
            return done, exclusive_pages(os.getpid(), reg.start, reg.n)
        done, exclusive = in_child(child)
        self.assertEqual(done, _pages.CHUNK)
        self.assertEqual(exclusive, _pages.CHUNK)

    def test_learned_pages_outside_writable_mappings_are_left_alone(self):
        p = self.pages()
        # A read-only mapping of ours, and page 0 (mapped by nobody): neither is planned.
        with open("/proc/self/maps", "rb") as f:
            maps = f.read()
        ro = [l for l in maps.split(b"\n") if b" r--p " in l][0]
        lo, hi = (int(x, 16) // PAGE for x in ro.split()[0].split(b"-"))
        p.merge([(lo, hi - lo), (0, 1)])
        plan = p.plan()
        self.assertIn((self.region.start, self.region.n), plan)
        self.assertFalse([r for r in plan if r[0] < hi and r[0] + r[1] > lo])
        self.assertFalse([r for r in plan if r[0] == 0])


class FakeMadvise:
    """A C library whose madvise fails with `err` (ctypes' errno shows it)."""

    def __init__(self, err, fail_first_only=False):
        self.err = err
        self.calls = []
        self.fail_first_only = fail_first_only
        outer = self

        class Fn:
            argtypes = restype = None

            def __call__(self, addr, length, advice):
                outer.calls.append((addr, length, advice))
                if outer.fail_first_only and len(outer.calls) > 1:
                    return 0
                return -1

        class Handle:
            madvise = Fn()

        class Ctypes:
            c_void_p = c_size_t = c_int = object

            @staticmethod
            def get_errno():
                return outer.err

        self.libc = (Handle(), Ctypes)


class Degrades(unittest.TestCase):
    def pages(self, fake):
        p = _pages.Pages(lambda m: None, cap=1 << 20, libc=fake.libc)
        self.assertTrue(p.enabled)
        self.region = Region(2 * _pages.CHUNK)
        self.addCleanup(self.region.close)
        self.addCleanup(p.close)
        p.merge([(self.region.start, self.region.n)])
        p.sample = False
        return p

    def test_einval_on_the_first_call_switches_it_off(self):
        fake = FakeMadvise(errno.EINVAL)
        p = self.pages(fake)
        self.assertEqual(p.prefault(lambda: False), 0)
        self.assertFalse(p.enabled)
        self.assertEqual(len(fake.calls), 1)
        self.assertEqual(fake.calls[0][2], _pages.MADV_POPULATE_WRITE)

    def test_efault_and_enomem_skip_the_range_quietly(self):
        for err in (errno.EFAULT, errno.ENOMEM, errno.EPERM):
            fake = FakeMadvise(err)
            p = self.pages(fake)
            self.assertEqual(p.prefault(lambda: False), 0)
            self.assertTrue(p.enabled)

    def test_unsupported_is_logged_once_and_off(self):
        logged = []
        real = _pages.supported
        _pages.supported = lambda: "madvise(MADV_POPULATE_WRITE) failed (EINVAL)"
        try:
            p = _pages.Pages(logged.append, cap=1 << 20, libc=libc_handle())
        finally:
            _pages.supported = real
        self.assertFalse(p.enabled)
        self.assertEqual(p.fds(), [])
        self.assertEqual(len(logged), 1)
        self.assertIn("pre-faulting is off", logged[0])
        p.note_fork()
        self.assertEqual(p.absorb(), 0)
        self.assertFalse(p.wants_report())
        self.assertEqual(p.prefault(lambda: False), 0)

    def test_supported_here(self):
        self.assertIsNone(_pages.supported())


class InAWorker(unittest.TestCase):
    """A real worker: its spare pre-faults what the sessions' children wrote."""

    def worker(self, **extra):
        d = tempfile.mkdtemp(prefix="ngw-pages-")
        path = os.path.join(d, "worker.py")
        with open(path, "w") as f:
            f.write(WORKER)
        w = driver.Worker([sys.executable, path], env=driver.worker_env(extra))
        self.addCleanup(w.stop)
        w.hello()
        return w

    def run_ok(self, w, command, *args, spaced=True):
        if spaced:  # a spare for back-to-back sessions neither rehearses nor pre-faults
            time.sleep(0.05)
        r = w.run(command, args, env=client_env())
        self.assertEqual(r.code, 0, r)
        return r

    def spare(self, w, previous=()):
        deadline = time.monotonic() + 10
        while True:
            kids = [pid for pid, st in driver.worker_pids_children(w.proc.pid)
                    if st != "Z" and pid not in previous]
            if len(kids) == 1:
                return kids[0]
            if time.monotonic() > deadline:
                raise AssertionError("no spare: %r" % kids)
            time.sleep(0.01)

    def buffer_pages(self, w):
        addr, length = map(int, bytes(self.run_ok(w, "where").stdout).split())
        first = -(-addr // PAGE)
        return first, (addr + length) // PAGE - first

    def exclusive_in_spare(self, w, first, n, want):
        """Waits (bounded) until the spare holds `want` of the pages; returns its count."""
        deadline = time.monotonic() + 10
        while True:
            spare = self.spare(w)
            try:
                got = exclusive_pages(spare, first, n)
            except OSError:  # the child of the last session, gone meanwhile
                got = -1
            if got >= 0 and got >= want or time.monotonic() > deadline:
                return got
            time.sleep(0.02)

    def test_the_spare_prefaults_the_pages_children_wrote(self):
        w = self.worker()
        first, n = self.buffer_pages(w)
        self.assertGreater(n, 500)
        self.assertLess(self.exclusive_in_spare(w, first, n, 0), n // 10)  # none learned
        for _ in range(_pages.FIRST):  # children that write every page of the buffer
            self.run_ok(w, "touch")    # and report (the first ones sample)
        self.run_ok(w, "read")  # the spare for this one had learned them
        self.assertEqual(self.exclusive_in_spare(w, first, n, n), n)

    def test_off_with_ngw_prefault_0(self):
        w = self.worker(NGW_PREFAULT="0")
        first, n = self.buffer_pages(w)
        for _ in range(_pages.FIRST):
            self.run_ok(w, "touch")
        self.run_ok(w, "read")
        self.spare(w)
        time.sleep(0.2)  # whatever it would do, it has had the time to
        self.assertLess(self.exclusive_in_spare(w, first, n, 0), n // 10)
        self.assertNotIn("pre-faulting", w.log())

    def test_output_is_the_same_with_and_without(self):
        outs = []
        for extra in ({}, {"NGW_PREFAULT": "0"}):
            w = self.worker(**extra)
            got = []
            for args in (["a"], ["b"], ["c"], ["d"]):
                r = self.run_ok(w, "touch", *args)
                got.append((bytes(r.stdout), bytes(r.stderr), r.code))
                r = self.run_ok(w, "read", *args)
                got.append((bytes(r.stdout), bytes(r.stderr), r.code))
            outs.append(got)
        self.assertEqual(outs[0], outs[1])
        self.assertIn(b"touched", outs[0][0][1])

    def test_sessions_back_to_back_while_it_prefaults(self):
        # 48 MiB to pre-fault: sessions arrive while the spare is at it, and still run
        # exactly (the spare stops at its next chunk).
        w = self.worker(TEST_PAGES=str(12 * 1024))
        for _ in range(_pages.FIRST):
            self.run_ok(w, "touch")
        time.sleep(0.03)  # past the spare's wait (IDLE_BEFORE), within its 48 MiB
        for _ in range(5):
            r = self.run_ok(w, "read", "x", spaced=False)
            self.assertTrue(bytes(r.stdout).endswith(b" 1 ['x']\n"), r)


if __name__ == "__main__":
    unittest.main()
