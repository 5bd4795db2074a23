"""A stand-in for ngd's plugin host, for tests: spawns a worker with the ngw channel,
reads its hello, runs sessions exactly as ngd relays a client's (A/E/D/C, one `0` or `.`
per `S`), and checks the worker's side of the protocol as it goes."""

import json
import os
import select
import signal
import socket
import struct
import subprocess
import tempfile
import time

HEADER = struct.Struct(">IB")
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")


class ProtocolViolation(AssertionError):
    pass


class Result:
    def __init__(self):
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.code = None
        self.raw_exit = None
        self.chunks = []  # (type, payload length) in arrival order
        self.sends = 0  # S chunks received
        self.stdin_chunks = 0  # 0 chunks sent
        self.eof_sent = False
        self.elapsed = None
        self.interrupted_at = None
        self.exit_at = None
        self.notices = []  # n chunks (decoded JSON) received during the session

    def __repr__(self):
        return "<Result code=%r stdout=%r stderr=%r>" % (
            self.code, bytes(self.stdout[:200]), bytes(self.stderr[:2000]))


#: Where workers started by the tests keep what they learn (adaptive preloading).
STATE_DIR = tempfile.mkdtemp(prefix="ngw-test-state-")


def worker_env(extra=None):
    env = dict(os.environ)
    env.setdefault("NGW_STATE_DIR", STATE_DIR)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONUNBUFFERED", None)
    if extra:
        env.update(extra)
    return env


class Worker:
    """One spawned worker and ngd's end of its channel."""

    def __init__(self, argv, env=None, plugin="test", cwd=None, host_features="notices"):
        self.log_path = tempfile.mkstemp(prefix="ngw-test-", suffix=".log")[1]
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(worker_env() if env is None else env)
        env.update(NGW_FD=str(theirs.fileno()), NGW_VERSION="1", NGW_PLUGIN=plugin)
        if host_features is not None:
            env["NGW_HOST_FEATURES"] = host_features
        self.host_features = set((host_features or "").split(","))
        self.notices = []  # every n chunk (decoded JSON), in order
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, pass_fds=[theirs.fileno()], start_new_session=True)
        theirs.close()
        self.sock = ours
        self.buf = bytearray()
        self.session_counter = 0
        self.hello_info = None

    # -- framing --------------------------------------------------------------------------

    def send(self, ty, payload=b""):
        if isinstance(ty, str):
            ty = ord(ty)
        self.sock.sendall(HEADER.pack(len(payload), ty) + payload)

    def _fill(self, timeout):
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return None
        data = self.sock.recv(1 << 20)
        if not data:
            return False
        self.buf += data
        return True

    def read_chunk(self, timeout=30):
        """(type char, payload) or None at end of stream. Raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 5:
                length, ty = HEADER.unpack_from(self.buf)
                if len(self.buf) >= 5 + length:
                    payload = bytes(self.buf[5 : 5 + length])
                    del self.buf[: 5 + length]
                    return chr(ty), payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no chunk from the worker within %.1fs" % timeout)
            got = self._fill(left)
            if got is False:
                if self.buf:
                    raise ProtocolViolation("end of stream inside a chunk")
                return None

    def assert_quiet(self, wait=0.0):
        """Nothing but notices may arrive while the worker is idle (no chunk after X)."""
        while self.buf or self._fill(wait):
            if len(self.buf) >= 5 and self.buf[4:5] == b"n":
                ty, payload = self.read_chunk(5)
                self._notice(payload)
                continue
            raise ProtocolViolation("worker sent %r while idle" % bytes(self.buf[:64]))

    def _notice(self, payload):
        """An n chunk (docs/ngw.md 15.3): only when both sides named `notices`."""
        if "notices" not in self.host_features or "notices" not in (
                self.hello_info or {}).get("features", []):
            raise ProtocolViolation("notice without the notices feature: %r" % payload)
        body = json.loads(payload)
        if not isinstance(body, dict) or not isinstance(body.get("kind"), str):
            raise ProtocolViolation("notice is not an object with a string kind: %r" % payload)
        self.notices.append(body)
        return body

    # -- control --------------------------------------------------------------------------

    def hello(self, timeout=30):
        c = self.read_chunk(timeout)
        if c is None:
            raise ProtocolViolation("channel closed before the hello")
        ty, payload = c
        if ty != "h":
            raise ProtocolViolation("first chunk is %r, not the hello" % ty)
        self.hello_info = json.loads(payload)
        return self.hello_info

    def ping(self, payload=b"", timeout=10):
        self.send("p", payload)
        ty, got = self.read_chunk(timeout)
        if ty != "o" or got != payload:
            raise ProtocolViolation("ping %r answered with %r %r" % (payload, ty, got))

    def quit(self, timeout=10):
        self.send("q")
        c = self.read_chunk(timeout)
        if c is not None:
            raise ProtocolViolation("worker sent %r after quit" % (c,))
        return self.proc.wait(timeout)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.sock.close()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass

    # -- sessions -------------------------------------------------------------------------

    def start(self, command, args=(), env=None, cwd=None, umask=0o022, tty=(0, 0, 0),
              extra=()):
        """Sends a session header the way ngd relays a stock C client's."""
        self.assert_quiet()
        self.session_counter += 1
        for a in args:
            self.send("A", os.fsencode(a))
        entries = [("NAILGUN_FILESEPARATOR", "/"), ("NAILGUN_PATHSEPARATOR", ":")]
        entries += [("NAILGUN_TTY_%d" % i, "1" if t else "0") for i, t in enumerate(tty)]
        entries += list((env if env is not None else {}).items())
        entries += [("NGW_UMASK", "%04o" % umask), ("NGW_SESSION", str(self.session_counter))]
        entries += list(extra)
        for k, v in entries:
            self.send("E", os.fsencode(k) + b"=" + os.fsencode(v))
        if cwd is not None:
            self.send("D", os.fsencode(cwd))
        self.send("C", os.fsencode(command))

    def run(self, command, args=(), env=None, cwd=None, umask=0o022, tty=(0, 0, 0),
            stdin=b"", chunk=2048, interrupt=None, interrupt_after=None, interrupt_on=None,
            stall=None, timeout=60, extra=(), discard_after_interrupt=False):
        """One whole session. stdin: bytes sent in `chunk`-sized `0`s, one per `S`, then
        `.`; None means the client never has input (S is left unanswered). interrupt: the
        `i` payload, sent `interrupt_after` seconds after C, or when `interrupt_on` shows
        up in stdout. stall: seconds the client does not read at all after C (then the
        interrupt, if any, is sent)."""
        t0 = time.monotonic()
        self.start(command, args, env, cwd, umask, tty, extra)
        res = Result()
        outstanding = False
        pos = 0
        sent_interrupt = False
        if stall:
            time.sleep(stall)
        if stall and interrupt is not None:
            self.send("i", interrupt.encode())
            sent_interrupt = True
            res.interrupted_at = time.monotonic()
        deadline = t0 + timeout
        while True:
            if (interrupt is not None and not sent_interrupt and (
                    (interrupt_after is not None and time.monotonic() >= t0 + interrupt_after)
                    or (interrupt_on is not None and interrupt_on in res.stdout))):
                self.send("i", interrupt.encode())
                sent_interrupt = True
                res.interrupted_at = time.monotonic()
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError("session %s %r: no X within %ss (%r)" % (command, args, timeout, res))
            wait = deadline - now
            if interrupt is not None and not sent_interrupt and interrupt_after is not None:
                wait = min(wait, max(0.0, t0 + interrupt_after - now))
            try:
                c = self.read_chunk(wait)
            except TimeoutError:
                continue
            if c is None:
                raise ProtocolViolation("channel closed mid-session (%r)\nlog:\n%s" % (res, self.log()))
            ty, payload = c
            res.chunks.append((ty, len(payload)))
            if ty == "1":
                if not (discard_after_interrupt and sent_interrupt):
                    res.stdout += payload
            elif ty == "2":
                if not (discard_after_interrupt and sent_interrupt):
                    res.stderr += payload
            elif ty == "S":
                res.sends += 1
                if outstanding:
                    raise ProtocolViolation("S while another S is unanswered")
                if res.eof_sent:
                    raise ProtocolViolation("S after stdin EOF was sent")
                if payload:
                    raise ProtocolViolation("S with a payload")
                if stdin is None:
                    outstanding = True  # the client has no input yet: never answered
                    continue
                if pos < len(stdin):
                    self.send("0", stdin[pos : pos + chunk])
                    pos += chunk
                    res.stdin_chunks += 1
                else:
                    self.send(".")
                    res.eof_sent = True
            elif ty == "n":
                res.notices.append(self._notice(payload))
            elif ty == "X":
                res.raw_exit = payload
                if not payload.endswith(b"\n") or not payload[:-1].lstrip(b"-").isdigit():
                    raise ProtocolViolation("bad X payload %r" % payload)
                res.code = int(payload)
                res.exit_at = time.monotonic()
                break
            else:
                raise ProtocolViolation("unexpected chunk %r during a session" % ty)
        res.elapsed = time.monotonic() - t0
        return res


def worker_pids_children(pid):
    """Direct children of pid, with their states, from /proc."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        if int(rest[1]) == pid:
            kids.append((int(entry), rest[0]))
    return kids


def open_fds(pid):
    result = {}
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            result[int(fd)] = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            pass
    return result
