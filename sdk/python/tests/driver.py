"""A stand-in for ngd's plugin host, for tests: spawns a worker with the ngw channel,
reads its hello, runs sessions exactly as ngd relays a client's (A/E/D/C, one `0` or `.`
per `S`), and checks the worker's side of the protocol as it goes.

The exact-session extensions (docs/ngw.md 15.4-15.6), when the worker is started with
them in `host_features` and names them in its hello: a session's header is written with
one `sendmsg` whose SCM_RIGHTS message carries `fds` (attached to the header's first
byte) and the header gets `NGW_CLIENT_FDS`; the worker's `t` must be the session's first
chunk, and nothing of stdin (`S`) may follow a `t` that took them; `z` is recorded (and
answered with `i SIGCONT` when asked); `X` may name a signal; `S` may carry a byte count,
answered with `0` chunks within it and `.` at end of file."""

import array
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
        self.stdin_sent = 0  # bytes sent in them
        self.eof_sent = False
        self.elapsed = None
        self.interrupted_at = None
        self.exit_at = None
        self.notices = []  # n chunks (decoded JSON) received during the session
        self.taken = None  # the t payload: b"" taken, b"relay" declined; None: no t
        self.stops = []  # z payloads
        self.grants = []  # the byte counts of windowed S chunks
        self.exit_signal = None  # the signal name of an X "<code> <SIGNAME>[ core]"
        self.core = False

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

    def send(self, ty, payload=b"", fds=None):
        """One chunk; `fds`: descriptors sent with its first byte (SCM_RIGHTS)."""
        self.send_raw(encode(ty, payload), fds)

    def send_raw(self, data, fds=None):
        if fds:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
            n = self.sock.sendmsg([data], rights)
            data = data[n:]
        if data:
            self.sock.sendall(data)

    def negotiated(self, feature):
        """Whether both sides named `feature` (docs/ngw.md 15)."""
        return feature in self.host_features and feature in (
            self.hello_info or {}).get("features", [])

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

    def stop(self):
        """Ends the worker as ngd does when its test is over: `q` if it still runs (the
        worker must then exit cleanly), and whatever is left killed and closed."""
        try:
            if self.proc.poll() is None:
                self.quit()
        finally:
            self.close()

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
              extra=(), fds=None, fd_map=None):
        """Sends a session header the way ngd relays a stock C client's, in one write.
        `fds`: the client's descriptors, sent with the header's first byte, and
        `NGW_CLIENT_FDS=<fd_map>` (default: "0,1,2" cut to their number; "" leaves the
        entry out)."""
        self.assert_quiet()
        self.session_counter += 1
        data = bytearray()
        for a in args:
            data += encode("A", os.fsencode(a))
        entries = [("NAILGUN_FILESEPARATOR", "/"), ("NAILGUN_PATHSEPARATOR", ":")]
        entries += [("NAILGUN_TTY_%d" % i, "1" if t else "0") for i, t in enumerate(tty)]
        entries += list((env if env is not None else {}).items())
        entries += [("NGW_UMASK", "%04o" % umask), ("NGW_SESSION", str(self.session_counter))]
        if fds:
            if fd_map is None:
                fd_map = ",".join("012"[: len(fds)])
            if fd_map != "":
                entries.append(("NGW_CLIENT_FDS", fd_map))
        entries += list(extra)
        for k, v in entries:
            data += encode("E", os.fsencode(k) + b"=" + os.fsencode(v))
        if cwd is not None:
            data += encode("D", os.fsencode(cwd))
        data += encode("C", os.fsencode(command))
        self.send_raw(bytes(data), fds)

    def run(self, command, args=(), env=None, cwd=None, umask=0o022, tty=(0, 0, 0),
            stdin=b"", chunk=2048, interrupt=None, interrupt_after=None, interrupt_on=None,
            stall=None, timeout=60, extra=(), discard_after_interrupt=False, fds=None,
            fd_map=None, continue_stops=False, interrupt_when=None, on_stop=None, tick=None):
        """One whole session. stdin: bytes sent in `chunk`-sized `0`s, one per `S`, then
        `.`; None means the client never has input (S is left unanswered). interrupt: the
        `i` payload, sent `interrupt_after` seconds after C, or when `interrupt_on` shows
        up in stdout. stall: seconds the client does not read at all after C (then the
        interrupt, if any, is sent). fds, fd_map: see start(); continue_stops: answer
        each `z` with `i SIGCONT`; on_stop(name): called for each `z` instead;
        interrupt_when: a function, called every 20 ms, that says when to send the
        interrupt; tick(res): called every 20 ms or so, to act mid-session (send more
        `i`). With `stdin-window`, a windowed S is answered with `chunk`-sized `0`s
        within its count, then `.` at end of file."""
        t0 = time.monotonic()
        self.start(command, args, env, cwd, umask, tty, extra, fds, fd_map)
        res = Result()
        outstanding = False
        credit = 0  # windowed stdin: bytes granted and not yet sent
        windowed = self.negotiated("stdin-window")
        signals = self.negotiated("signals")
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
                    or (interrupt_on is not None and interrupt_on in res.stdout)
                    or (interrupt_when is not None and interrupt_when()))):
                self.send("i", interrupt.encode())
                sent_interrupt = True
                res.interrupted_at = time.monotonic()
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError("session %s %r: no X within %ss (%r)" % (command, args, timeout, res))
            wait = deadline - now
            if interrupt is not None and not sent_interrupt and interrupt_after is not None:
                wait = min(wait, max(0.0, t0 + interrupt_after - now))
            if interrupt is not None and not sent_interrupt and interrupt_when is not None:
                wait = min(wait, 0.02)
            if tick is not None:
                tick(res)
                wait = min(wait, 0.02)
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
            elif ty == "t":
                if not fds or not self.negotiated("fds"):
                    raise ProtocolViolation("t for a session without descriptors or fds")
                if res.taken is not None or [c for c in res.chunks if c[0] != "n"] != [
                        ("t", len(payload))]:
                    raise ProtocolViolation("t is not the session's first chunk: %r" % res.chunks)
                if payload not in (b"", b"relay", b"ctty"):
                    raise ProtocolViolation("bad t payload %r" % payload)
                res.taken = payload
            elif ty == "z":
                if not signals:
                    raise ProtocolViolation("z without the signals feature")
                res.stops.append(payload.decode())
                if on_stop is not None:
                    on_stop(res.stops[-1])
                elif continue_stops:
                    self.send("i", b"SIGCONT")
            elif ty == "S":
                res.sends += 1
                if res.taken in (b"", b"ctty"):
                    raise ProtocolViolation("S in a session that took the client's descriptors")
                if res.eof_sent and not (windowed and payload):
                    raise ProtocolViolation("S after stdin EOF was sent")
                if payload:
                    if not windowed or not payload.isdigit() or int(payload) < 1:
                        raise ProtocolViolation("S with a payload %r" % payload)
                    res.grants.append(int(payload))
                    credit += int(payload)
                    if res.eof_sent:
                        continue  # a top-up that crossed the "." in flight
                    if stdin is None:
                        continue
                    while credit and pos < len(stdin):
                        piece = stdin[pos : pos + min(chunk, credit)]
                        self.send("0", piece)
                        pos += len(piece)
                        credit -= len(piece)
                        res.stdin_chunks += 1
                        res.stdin_sent += len(piece)
                    if pos >= len(stdin) and credit:
                        self.send(".")
                        res.eof_sent = True
                    continue
                if outstanding or credit:
                    raise ProtocolViolation("S while another S is unanswered")
                if stdin is None:
                    outstanding = True  # the client has no input yet: never answered
                    continue
                if pos < len(stdin):
                    self.send("0", stdin[pos : pos + chunk])
                    res.stdin_sent += len(stdin[pos : pos + chunk])
                    pos += chunk
                    res.stdin_chunks += 1
                else:
                    self.send(".")
                    res.eof_sent = True
            elif ty == "n":
                res.notices.append(self._notice(payload))
            elif ty == "X":
                res.raw_exit = payload
                words = payload[:-1].split(b" ")
                if not payload.endswith(b"\n") or not words[0].lstrip(b"-").isdigit() or (
                        len(words) > 1 and not (
                            signals and len(words) <= 3 and words[1].startswith(b"SIG")
                            and words[2:] in ([], [b"core"]))):
                    raise ProtocolViolation("bad X payload %r" % payload)
                res.code = int(words[0])
                if len(words) > 1:
                    res.exit_signal = words[1].decode()
                    res.core = len(words) == 3
                res.exit_at = time.monotonic()
                break
            else:
                raise ProtocolViolation("unexpected chunk %r during a session" % ty)
        if fds and self.negotiated("fds") and res.taken is None:
            raise ProtocolViolation("no t for a session that came with descriptors")
        res.elapsed = time.monotonic() - t0
        return res


def encode(ty, payload=b""):
    if isinstance(ty, str):
        ty = ord(ty)
    return HEADER.pack(len(payload), ty) + payload


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
