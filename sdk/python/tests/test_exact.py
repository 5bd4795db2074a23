"""The exact-session extensions, worker side (docs/ngw.md 15.4-15.6): the client's own
descriptors (`fds`, chunk `t`), forwarded signals, stops and deaths by signal (`signals`,
chunk `z`), and window-sized stdin (`stdin-window`). The driver plays ngd with all three
announced; descriptors are real ptys, pipes and files made by the test."""

import array
import fcntl
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import time
import unittest

import driver
from support import BASIC, client_env

FEATURES = "notices,fds,signals,stdin-window"


def read_all(fd, timeout=5.0, until=None):
    """What a reader of `fd` gets within `timeout` (until end of file, EIO, or `until`)."""
    out = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            break
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: a pty whose other side is all closed
            break
        if not data:
            break
        out += data
        if until is not None and until in out:
            break
    return bytes(out)


def read_to_eof(fd, timeout=10.0):
    """(what a reader of `fd` gets, whether it reached end of file within `timeout`)."""
    out = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            return bytes(out), False
        data = os.read(fd, 65536)
        if not data:
            return bytes(out), True
        out += data


class WorkerCase(unittest.TestCase):
    """One BASIC worker for the class, offered `features`, with or without a spare."""
    prefork = "1"
    features = FEATURES
    extra_env = {}  # more of the worker's environment

    @classmethod
    def setUpClass(cls):
        cls.w = driver.Worker([sys.executable, BASIC], host_features=cls.features,
                              env=driver.worker_env(dict(cls.extra_env,
                                                         TEST_PREFORK=cls.prefork)))
        cls.hello = cls.w.hello()
        cls.tmp = tempfile.mkdtemp(prefix="ngw-exact-")

    @classmethod
    def tearDownClass(cls):
        try:
            if cls.w.proc.poll() is None:
                cls.w.quit()
        finally:
            cls.w.close()


class Extensions(WorkerCase):

    def probe(self, fds, fd_map=None, args=(), **kw):
        path = os.path.join(self.tmp, "probe-%d.json" % random.getrandbits(32))
        r = self.w.run("fprobe", [path] + list(args), env=client_env(), fds=fds,
                       fd_map=fd_map, **kw)
        self.assertEqual(r.code, 0, r)
        with open(path) as f:
            return r, json.load(f)

    # -- the hello --------------------------------------------------------------------------

    def test_hello_names_what_the_host_offers(self):
        for f in ("fds", "signals", "stdin-window", "notices", "fork"):
            self.assertIn(f, self.hello["features"])

    def test_hello_without_the_host_features(self):
        w = driver.Worker([sys.executable, BASIC], host_features="notices")
        try:
            hello = w.hello()
            for f in ("fds", "signals", "stdin-window"):
                self.assertNotIn(f, hello["features"])
            r = w.run("fexit", ["kill"], env=client_env())
            self.assertEqual(r.raw_exit, b"137\n")
            # Descriptors without the feature: closed, no t, the session relayed.
            r_, w_ = os.pipe()
            try:
                r = w.run("fcat", env=client_env(), stdin=b"relayed", fds=[r_, w_, w_])
                self.assertEqual((r.taken, bytes(r.stdout)), (None, b"relayed"))
                os.close(w_)
                w_ = -1
                self.assertEqual(read_to_eof(r_), (b"", True))
            finally:
                os.close(r_)
                if w_ >= 0:
                    os.close(w_)
            w.quit()
        finally:
            w.close()

    # -- fds ----------------------------------------------------------------------------------

    def test_pty_as_fds_012_is_a_real_terminal_with_its_size(self):
        master, slave = os.openpty()
        try:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
            r, got = self.probe([slave, slave, slave], args=["on", "the", "terminal"],
                                tty=(0, 0, 0))
            self.assertEqual(r.taken, b"")
            self.assertEqual(r.sends, 0)  # no stdin relayed
            self.assertEqual(bytes(r.stdout), b"")
            self.assertEqual(got["isatty"], [True, True, True])
            self.assertEqual(got["size"], [[111, 33]] * 3)
            self.assertEqual(got["ctx_tty"], [True, True, True])
            self.assertTrue(got["line_buffering"])  # as CPython on a terminal
            self.assertEqual(got["fds"][:3], [0, 1, 2])
            self.assertLessEqual(len(got["fds"]), 4, got["fds"])
            # The terminal's own line discipline (OPOST) turns \n into \r\n: a real one.
            self.assertEqual(read_all(master, until=b"\n"), b"on the terminal\r\n")
        finally:
            os.close(master)
            os.close(slave)

    def test_taken_ignores_nailgun_tty(self):
        # NAILGUN_TTY_n describe the client's streams; a taken fd is what it is.
        r_, w_ = os.pipe()
        try:
            r, got = self.probe([r_, w_, w_], tty=(1, 1, 1))
            self.assertEqual(r.taken, b"")
            self.assertEqual(got["isatty"], [False, False, False])
            self.assertEqual(got["ctx_tty"], [False, False, False])
        finally:
            os.close(r_)
            os.close(w_)

    def test_map_12_leaves_fd_0_closed(self):
        r_, w_ = os.pipe()
        try:
            r, got = self.probe([w_, w_], fd_map="1,2", args=["out"])
            self.assertEqual(r.taken, b"")
            self.assertEqual(got["open"], [False, True, True])
            self.assertEqual(got["std_none"], [True, False, False])
            os.close(w_)
            w_ = -1
            self.assertEqual(read_to_eof(r_), (b"out\n", True))  # and nobody else holds the pipe
        finally:
            os.close(r_)
            if w_ >= 0:
                os.close(w_)

    def on_a_pipe_nobody_reads(self, command, code):
        """Runs `python3 -c code` cold and `command` warm, each with stdout on a pipe
        whose reader is gone and stderr on a pipe of its own: [(status, stderr)] for
        cold, then warm."""
        results = []
        for warm in (False, True):
            r_, w_ = os.pipe()
            e_r, e_w = os.pipe()
            os.close(r_)  # the reader is gone
            if warm:
                res = self.w.run(command, env=client_env(), fds=[w_, e_w], fd_map="1,2")
                self.assertEqual(res.taken, b"")
                status = res.code
            else:
                status = subprocess.run([sys.executable, "-c", code], stdout=w_,
                                        stderr=e_w, env=client_env()).returncode
            os.close(w_)
            os.close(e_w)
            results.append((status, read_all(e_r)))
            os.close(e_r)
        return results

    def test_pipe_whose_reader_closed_fails_as_cold(self):
        cold, warm = self.on_a_pipe_nobody_reads(
            "fbigwrite", 'import sys; sys.stdout.write("x" * (1 << 20))')
        last = [(status, err.strip().splitlines()[-1]) for status, err in (cold, warm)]
        self.assertEqual(last[0], last[1])
        self.assertIn(b"BrokenPipeError", last[1][1])

    def test_replaced_stdout_is_flushed_silently_as_cold(self):
        # Output left in the original stdout, which cannot be flushed, then stdout
        # replaced (as click does after a broken pipe).
        cold, warm = self.on_a_pipe_nobody_reads(
            "freplaced", 'import io, sys; sys.stdout.write("x" * 100); sys.stdout = io.StringIO()')
        self.assertEqual(cold, warm)
        self.assertEqual(warm, (0, b""))

    def test_file_as_stdin_is_not_read_ahead(self):
        # The command reads one line of a file passed as fd 0: the file offset after it
        # is where a cold run leaves it (no relay, no prefetch).
        path = os.path.join(self.tmp, "lines")
        with open(path, "wb") as f:
            f.write(b"".join(b"line %d\n" % i for i in range(10000)))
        fd = os.open(path, os.O_RDONLY)
        out_r, out_w = os.pipe()
        try:
            res = self.w.run("fline", env=client_env(), fds=[fd, out_w, out_w])
            self.assertEqual(res.taken, b"")
            os.close(out_w)
            out_w = -1
            self.assertEqual(read_all(out_r), b"got 'line 0\\n'\n")
            # CPython's buffered stdin reads 8 KiB, as it does cold.
            self.assertEqual(os.lseek(fd, 0, os.SEEK_CUR), 8192)
        finally:
            os.close(fd)
            os.close(out_r)
            if out_w >= 0:
                os.close(out_w)

    def test_in_process_command_declines(self):
        r_, w_ = os.pipe()
        try:
            res = self.w.run("cat", env=client_env(), stdin=b"relayed\n", fds=[r_, w_, w_])
            self.assertEqual(res.taken, b"relay")
            self.assertEqual(bytes(res.stdout), b"relayed\n")
            os.close(w_)
            w_ = -1
            self.assertEqual(read_to_eof(r_), (b"", True))  # the worker closed its copies
        finally:
            os.close(r_)
            if w_ >= 0:
                os.close(w_)

    def test_bad_descriptor_count_is_relayed(self):
        r_, w_ = os.pipe()
        try:
            for fd_map in ("0,1,2", "", "2,1", "0,3"):
                res = self.w.run("fcat", env=client_env(), stdin=b"relayed\n", fds=[r_, w_],
                                 fd_map=fd_map)
                self.assertEqual(res.taken, b"relay", fd_map)
                self.assertEqual(bytes(res.stdout), b"relayed\n")
            os.close(w_)
            w_ = -1
            self.assertEqual(read_to_eof(r_), (b"", True))
        finally:
            os.close(r_)
            if w_ >= 0:
                os.close(w_)

    def test_descriptors_with_another_chunk_are_closed(self):
        r_, w_ = os.pipe()
        try:
            self.w.send("p", b"with fds", fds=[w_])
            ty, payload = self.w.read_chunk(10)
            self.assertEqual((ty, payload), ("o", b"with fds"))
            res = self.w.run("fcat", env=client_env(), stdin=b"x")
            self.assertIsNone(res.taken)
            self.assertEqual(bytes(res.stdout), b"x")
            os.close(w_)
            w_ = -1
            self.assertEqual(read_to_eof(r_), (b"", True))
        finally:
            os.close(r_)
            if w_ >= 0:
                os.close(w_)

    def test_no_descriptor_leaks_over_50_sessions(self):
        pid = self.w.proc.pid
        r_, w_ = os.pipe()
        nul = os.open(os.devnull, os.O_RDWR)
        try:
            def round_(i):
                kind = i % 5
                if kind == 0:
                    self.probe([nul, w_, nul])
                elif kind == 1:
                    res = self.w.run("cat", env=client_env(), stdin=b"a", fds=[nul, w_, w_])
                    self.assertEqual(res.taken, b"relay")
                elif kind == 2:
                    res = self.w.run("fcat", env=client_env(), stdin=b"a", fds=[nul, w_],
                                     fd_map="0,1,2")
                    self.assertEqual(res.taken, b"relay")
                elif kind == 3:
                    self.w.send("p", b"", fds=[w_, nul])
                    self.assertEqual(self.w.read_chunk(10), ("o", b""))
                else:
                    res = self.w.run("fexit", ["3"], env=client_env(), fds=[w_, w_],
                                     fd_map="1,2")
                    self.assertEqual((res.taken, res.code), (b"", 3))

            for i in range(5):
                round_(i)
            time.sleep(0.3)  # the spare is forked once the last child is reaped
            before = driver.open_fds(pid)
            for i in range(50):
                round_(i)
            time.sleep(0.3)
            after = driver.open_fds(pid)
            # The same descriptors, but for the spare's socket and pipes: a spare cloned
            # by the previous one (docs/ngw.md 11.5) may hold other numbers. So: the same
            # kinds, as many of each.
            self.assertEqual(sorted(v.split(":")[0] for v in before.values()),
                             sorted(v.split(":")[0] for v in after.values()), (before, after))
            os.close(w_)
            w_ = -1
            # Nobody (worker, spare, children) kept a copy of the write end.
            data, eof = read_to_eof(r_)
            self.assertTrue(eof)
            self.assertEqual(data, b"before\n" * 11)
        finally:
            os.close(r_)
            os.close(nul)
            if w_ >= 0:
                os.close(w_)

    # -- signals ------------------------------------------------------------------------------

    def test_sigint_caught_by_the_command_gives_its_own_code(self):
        r = self.w.run("fcatch", env=client_env(), interrupt="SIGINT", interrupt_on=b"ready\n")
        self.assertEqual((r.raw_exit, bytes(r.stdout)), (b"3\n", b"ready\ncaught\n"))

    def test_uncaught_sigint_is_a_death_by_sigint(self):
        r = self.w.run("fsleep", env=client_env(), interrupt="SIGINT", interrupt_on=b"ready\n")
        self.assertEqual(r.raw_exit, b"130 SIGINT\n")
        self.assertIn(b"KeyboardInterrupt", bytes(r.stderr))

    def test_deaths_by_signal(self):
        r = self.w.run("fexit", ["kill"], env=client_env())
        self.assertEqual(r.raw_exit, b"137 SIGKILL\n")
        r = self.w.run("fexit", ["segv"], env=client_env())
        self.assertRegex(r.raw_exit, rb"^139 SIGSEGV( core)?\n$")
        r = self.w.run("fsleep", env=client_env(), interrupt="SIGTERM process",
                       interrupt_on=b"ready\n")
        self.assertEqual(r.raw_exit, b"143 SIGTERM\n")

    def test_in_process_exit_stays_a_code(self):
        r = self.w.run("sleep", env=client_env(), interrupt="SIGINT", interrupt_on=b"ready\n")
        self.assertEqual(r.raw_exit, b"130\n")
        # Signals that ignore or stop do not interrupt an in-process command.
        r = self.w.run("cat", env=client_env(), stdin=b"data", interrupt="SIGWINCH",
                       interrupt_after=0)
        self.assertEqual((r.raw_exit, bytes(r.stdout)), (b"0\n", b"data"))

    def test_stop_and_continue(self):
        r = self.w.run("fstop", env=client_env(), continue_stops=True)
        self.assertEqual(r.stops, ["SIGTSTP"])
        self.assertEqual((r.raw_exit, bytes(r.stdout)), (b"0\n", b"stopping\nresumed\n"))

    def test_forwarded_sigtstp_stops_the_group(self):
        # The client stopped itself when it forwarded the stop: the command's stop is not
        # reported back (a late `z` would stop a client that was continued meanwhile).
        # SIGINT goes only once the continued command sleeps again: a signal that lands
        # while the kernel restarts the interrupted sleep runs the handler but does not
        # end the sleep (cold, `kill -CONT` and `kill -INT` back to back do the same).
        w = self.w
        done = []
        interrupted = []

        def tick(res):
            if interrupted or res.interrupted_at is None:
                return
            states = dict(driver.worker_pids_children(w.proc.pid))
            if not done:
                stopped = [pid for pid, state in states.items() if state == "T"]
                if stopped:
                    done.append(stopped)
                    w.send("i", b"SIGCONT")
            elif all(states.get(pid) == "S" for pid in done[0]):
                interrupted.append(True)
                w.send("i", b"SIGINT")

        r = w.run("fcatch", env=client_env(), interrupt="SIGTSTP", interrupt_on=b"ready\n",
                  tick=tick, on_stop=lambda name: self.fail("z for a forwarded stop"))
        self.assertEqual((len(done), r.stops), (1, []))
        self.assertEqual((r.raw_exit, bytes(r.stdout)), (b"3\n", b"ready\ncaught\n"))

    def test_sigign_is_honoured(self):
        r = self.w.run("finfo", env=client_env(), extra=[("NGW_SIGIGN", "SIGINT,SIGHUP,BOGUS")])
        got = json.loads(r.stdout)
        self.assertEqual((got["sigint"], got["sighup"], got["sigterm"]),
                         ("SIG_IGN", "SIG_IGN", "SIG_DFL"))
        r = self.w.run("finfo", env=client_env())
        got = json.loads(r.stdout)
        self.assertEqual((got["sigint"], got["sighup"]), ("default_int_handler", "SIG_DFL"))

    def test_process_group_in_the_workers_session(self):
        r_, w_ = os.pipe()
        try:
            _, got = self.probe([w_, w_], fd_map="1,2")
            self.assertEqual(got["pgid"], got["pid"])
            self.assertEqual(got["sid"], got["worker_sid"])
            self.assertNotEqual(got["pgid"], got["worker_pgid"])
        finally:
            os.close(r_)
            os.close(w_)

    def test_emulated_stdin_terminal_is_still_the_controlling_terminal(self):
        r = self.w.run("ftty", ["read"], env=client_env(), tty=(1, 1, 1), stdin=b"typed\n")
        got = json.loads(bytes(r.stdout).split(b"\n")[0])
        self.assertEqual((got["isatty"], got["dev_tty"], got["data"]),
                         ([True, True, True], True, "typed\n"))

    def test_emulated_terminal_starts_with_the_clients_size(self):
        r = self.w.run("ftty", env=client_env(LINES="10", COLUMNS="20"), tty=(0, 1, 0),
                       extra=[("NGW_CLIENT_WINSIZE", "132 43 0 0")])
        self.assertEqual(json.loads(bytes(r.stdout).split(b"\n")[0])["size"], [132, 43])
        r = self.w.run("ftty", env=client_env(LINES="10", COLUMNS="20"), tty=(0, 1, 0))
        self.assertEqual(json.loads(bytes(r.stdout).split(b"\n")[0])["size"], [20, 10])

    def test_winsize_resizes_an_emulated_terminal(self):
        r = self.w.run("fwinch", env=client_env(), tty=(0, 1, 0),
                       interrupt="winsize 120 40 0 0", interrupt_on=b"ready")
        got = json.loads(bytes(r.stdout).split(b"\n")[1])
        self.assertEqual(got, {"winch": True, "size": [120, 40]})

    def test_winsize_signals_a_command_on_the_clients_terminal(self):
        master, slave = os.openpty()
        seen = bytearray()

        def ready():
            seen.extend(read_all(master, timeout=0.01))
            if b"ready" in seen:
                # The terminal emulator resized the terminal; ng sends W.
                fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 132, 0, 0))
                return True
            return False

        try:
            r = self.w.run("fwinch", env=client_env(), fds=[slave, slave, slave],
                           interrupt="winsize 132 50 0 0", interrupt_when=ready)
            self.assertEqual(r.taken, b"")
            seen.extend(read_all(master, timeout=1, until=b"}"))
            got = json.loads(bytes(seen).split(b"\r\n")[1])
            self.assertEqual(got, {"winch": True, "size": [132, 50]})
        finally:
            os.close(master)
            os.close(slave)

    # -- stdin-window ------------------------------------------------------------------------

    def test_windowed_stdin_3mib(self):
        data = random.Random(3).randbytes(3 << 20)
        for command in ("fcat", "cat"):
            r = self.w.run(command, env=client_env(), stdin=data, chunk=128 << 10)
            self.assertEqual(r.code, 0, r)
            self.assertEqual(bytes(r.stdout), data, command)
            self.assertTrue(r.grants and all(0 < g <= 256 << 10 for g in r.grants), r.grants)
            self.assertLess(r.sends, 40, command)  # not one round trip per chunk
            self.assertTrue(r.eof_sent)

    def test_stdio_objects_on_taken_descriptors_are_a_fresh_forks(self):
        # A spare builds sys.stdin/stdout/stderr ahead of time on its pipes, and on the
        # null device; a session on the client's descriptors keeps those only where they
        # are what a child forked at session time builds (docs/ngw.md 11.1 step 8).
        r_, w_ = os.pipe()
        nul = os.open(os.devnull, os.O_RDWR)
        fd, path = tempfile.mkstemp(dir=self.tmp)
        os.write(fd, b"hello")  # at offset 5
        sa, sb = socket.socketpair()
        try:
            combos = [[r_, w_, w_], [nul, nul, nul], [nul, fd, nul], [sa.fileno()] * 2 + [nul],
                      [r_, w_, fd], [nul, w_, nul]]
            for fds in combos:
                self.assertEqual(self.w.run("cat", stdin=b"").code, 0)  # no spare now
                _, cold = self.probe(fds)  # forked at session time
                for _ in range(3):  # the spare, then (back to back) perhaps its successor
                    _, warm = self.probe(fds)
                    self.assertEqual(cold["stdio"], warm["stdio"], fds)
                if fds[1] == fd:
                    self.assertEqual(cold["stdio"][1]["tell"], 5)
        finally:
            for x in (r_, w_, nul, fd):
                os.close(x)
            sa.close()
            sb.close()

    def test_windowed_read_ahead_is_bounded(self):
        data = b"".join(b"line %d\n" % i for i in range(500000))  # ~6 MiB
        r = self.w.run("fline", env=client_env(), stdin=data, chunk=128 << 10)
        self.assertEqual(bytes(r.stdout), b"got 'line 0\\n'\n", (r, bytes(r.stderr), self.w.log()[-1500:]))
        # the window, plus what fits in the pipe before the child exits
        self.assertLessEqual(r.stdin_sent, (256 << 10) + (64 << 10) + (128 << 10))


class ChannelDescriptors(unittest.TestCase):
    """The worker's channel (ngw._channel) on a socketpair in this process: which chunk
    descriptors belong to, when several chunks arrive in the read that carried them."""

    def setUp(self):
        from ngw import _channel, _wire

        self.wire = _wire
        self.ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.chan = _channel.Channel(os.dup(theirs.fileno()))
        theirs.close()

    def tearDown(self):
        self.chan.close()
        self.ours.close()

    def send(self, data, fds=()):
        if fds:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
            self.assertEqual(self.ours.sendmsg([data], rights), len(data))
        else:
            self.ours.sendall(data)

    def chunks(self):
        self.assertTrue(self.chan.read_some())
        out = []
        while True:
            c = self.chan.next_chunk()
            if c is None:
                return out
            out.append(c)

    def open_fds(self):
        return len(os.listdir("/proc/self/fd"))

    def test_header_after_a_ping_in_the_same_read(self):
        r, w = os.pipe()
        self.send(driver.encode("p", b"1"))  # a ping, then the header with descriptors
        self.send(driver.encode("A", b"x") + driver.encode("C", b"cmd"), [r, w])
        got = self.chunks()
        self.assertEqual([tuple(c) for c in got], [(ord("p"), b"1"), (ord("A"), b"x"),
                                                  (ord("C"), b"cmd")])
        self.assertNotIsInstance(got[0], self.wire.Chunk)
        self.assertIsInstance(got[1], self.wire.Chunk)
        fds = got[1].take_fds()
        self.assertEqual(len(fds), 2)
        os.write(fds[1], b"through")
        self.assertEqual(os.read(fds[0], 16), b"through")
        for fd in fds + [r, w]:
            os.close(fd)

    def test_descriptors_with_a_ping_are_closed(self):
        r, w = os.pipe()
        before = self.open_fds()
        self.send(driver.encode("p", b"1"), [r, w])
        self.send(driver.encode("C", b"cmd"))
        got = self.chunks() + self.chunks()
        self.assertEqual([tuple(c) for c in got], [(ord("p"), b"1"), (ord("C"), b"cmd")])
        self.assertFalse(any(isinstance(c, self.wire.Chunk) for c in got))
        self.assertEqual(self.open_fds(), before)
        os.close(r)
        os.close(w)

    def test_too_many_descriptors_are_closed(self):
        r, w = os.pipe()
        before = self.open_fds()
        self.send(driver.encode("C", b"cmd"), [r, w, r, w, r])  # MSG_CTRUNC or over 3
        got = self.chunks()
        self.assertEqual([tuple(c) for c in got], [(ord("C"), b"cmd")])
        self.assertNotIsInstance(got[0], self.wire.Chunk)
        self.assertEqual(self.open_fds(), before)
        os.close(r)
        os.close(w)

    def test_pending_descriptors_are_closed_with_the_channel(self):
        r, w = os.pipe()
        before = self.open_fds()
        self.send(driver.encode("A", b"x")[:3], [r])  # the header's first bytes only
        self.assertTrue(self.chan.read_some())
        self.assertIsNone(self.chan.next_chunk())
        self.assertEqual(self.open_fds(), before + 1)
        self.chan.close()
        self.assertEqual(self.open_fds(), before - 1)  # the channel's own socket too
        os.close(r)
        os.close(w)


SCRIPT = """#!%s
import json, os, signal, sys
h = signal.getsignal(signal.SIGINT)
print(json.dumps({"isatty": [os.isatty(i) for i in range(3)],
                  "sigint": {signal.SIG_IGN: "SIG_IGN", signal.SIG_DFL: "SIG_DFL"}.get(
                      h, getattr(h, "__name__", "?")),
                  "args": sys.argv[1:]}))
"""


class ColdFallbackOnTheClientsDescriptors(unittest.TestCase):
    """A session that must run the cold way (an interpreter-wide setting differs) execs the
    program on the client's descriptors, with the client's ignored signals."""

    def test_cold_and_warm_see_the_same(self):
        tmp = tempfile.mkdtemp(prefix="ngw-exact-script-")
        path = os.path.join(tmp, "probe")
        with open(path, "w") as f:
            f.write(SCRIPT % sys.executable)
        os.chmod(path, 0o755)
        w = driver.Worker([sys.executable, "-m", "ngw", "script", "probe=" + path],
                          host_features=FEATURES)
        try:
            self.assertIn("fds", w.hello()["features"])
            seen = []
            for env in (client_env(), client_env(PYTHONHASHSEED="1")):
                master, slave = os.openpty()
                try:
                    r = w.run("probe", ["a b"], env=env, fds=[slave, slave, slave],
                              extra=[("NGW_SIGIGN", "SIGINT")])
                    self.assertEqual((r.taken, r.code), (b"", 0), r)
                    seen.append((json.loads(read_all(master, until=b"}")),
                                 [n["kind"] for n in r.notices]))
                finally:
                    os.close(master)
                    os.close(slave)
            want = {"isatty": [True, True, True], "sigint": "SIG_IGN", "args": ["a b"]}
            self.assertEqual(seen, [(want, []), (want, ["fallback"])])
            w.quit()
        finally:
            w.close()


class ExtensionsNoPrefork(Extensions):
    """The same without a spare: each child forked at session time."""

    prefork = "0"


if __name__ == "__main__":
    unittest.main()
