"""The worker the SDK tests drive: in-process commands and fork-mode commands."""

import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import ngw

STATE = {"value": None}
CAPTURED_STDOUT = sys.stdout  # as a module that grabbed sys.stdout at import would


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def _handler(sig):
    h = signal.getsignal(sig)
    return {signal.SIG_DFL: "SIG_DFL", signal.SIG_IGN: "SIG_IGN"}.get(h, getattr(h, "__name__", repr(h)))


# -- in-process commands ------------------------------------------------------------------

@ngw.command("info")
def info(ctx):
    ctx.stdout.write(json.dumps({
        "command": ctx.command, "args": ctx.args, "env": ctx.env, "cwd": ctx.cwd,
        "umask": ctx.umask, "tty": list(ctx.tty), "session": ctx.session,
        "nailgun": ctx.nailgun_env, "forked": ctx.forked,
        "worker_cwd": os.getcwd(), "worker_has_client_env": "CLIENT_ONLY" in os.environ,
    }).encode())


@ngw.command("cat")
def cat(ctx):
    while True:
        data = ctx.stdin.read1(65536)
        if not data:
            return 0
        ctx.stdout.write(data)


@ngw.command("exit")
def exit_(ctx):
    mode = ctx.args[0]
    ctx.stdout.write(b"before\n")
    if mode == "msg":
        sys.exit("inline message")
    if mode == "raise":
        return 1 // 0
    if mode == "set":
        ctx.exit_code = 4
        return None
    if mode == "ctx":
        ctx.exit(5)
    return int(mode)


@ngw.command("sleep")
def sleep(ctx):
    # "ready" inside the try: an interrupt may arrive as soon as it is seen.
    try:
        ctx.stdout.write(b"ready\n")
        ctx.stdout.flush()
        time.sleep(60)
    except ngw.Interrupted as e:
        ctx.stderr.write(("interrupted: %s %d\n" % (e.reason, e.signum)).encode())
        raise
    return 0


# -- fork-mode commands -------------------------------------------------------------------

@ngw.command("finfo", fork=True, argv0="/opt/bin/finfo")
def finfo(ctx):
    fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
    print(json.dumps({
        "argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(), "umask": _umask(),
        "isatty": [os.isatty(i) for i in range(3)],
        "py_isatty": [sys.stdin.isatty(), sys.stdout.isatty(), sys.stderr.isatty()],
        "line_buffering": [sys.stdout.line_buffering, sys.stderr.line_buffering],
        "fds": fds, "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgrp(),
        "sid": os.getsid(0), "ctx_args": ctx.args, "forked": ctx.forked,
        "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "sighup": _handler(signal.SIGHUP), "sigint": _handler(signal.SIGINT),
        "sigterm": _handler(signal.SIGTERM), "sigchld": _handler(signal.SIGCHLD),
        "sigpipe": _handler(signal.SIGPIPE),
        "stdout_name": sys.stdout.name, "encoding": sys.stdout.encoding,
    }))


@ngw.command("fcat", fork=True)
def fcat(ctx):
    shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer, 65536)


@ngw.command("fsubcat", fork=True)
def fsubcat(ctx):
    sys.stdout.flush()
    return subprocess.run(["cat"]).returncode


@ngw.command("fout", fork=True)
def fout(ctx):
    print("print to stdout")
    sys.stdout.flush()
    os.write(1, b"os.write to fd 1\n")
    subprocess.run(["echo", "from echo"])
    subprocess.run(["sh", "-c", "echo from sh stderr >&2"])
    print("print to stderr", file=sys.stderr)
    os.write(2, b"os.write to fd 2\n")
    return 0


@ngw.command("fexit", fork=True)
def fexit(ctx):
    mode = ctx.args[0]
    print("before")
    if mode == "msg":
        sys.exit("fork message")
    if mode == "raise":
        return {}["missing"]
    if mode == "kill":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "segv":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "none":
        sys.exit()
    if mode == "kbint":
        raise KeyboardInterrupt
    if mode == "osexit":
        sys.stdout.flush()
        os._exit(9)
    if mode == "thread":
        t = threading.Thread(target=lambda: (time.sleep(0.2), print("thread done", flush=True)))
        t.start()
        return 6
    if mode == "atexit":
        import atexit

        atexit.register(lambda: print("atexit ran", flush=True))
        return 0
    if mode == "ctx":
        ctx.exit_code = 8
        return None
    sys.exit(int(mode))


@ngw.command("fforkret", fork=True)
def fforkret(ctx):
    # A child of the command that returns through the SDK too (its exit report must not
    # be taken for the session's).
    pid = os.fork()
    if pid == 0:
        return 5
    os.waitpid(pid, 0)
    return 3


@ngw.command("fcaptured", fork=True)
def fcaptured(ctx):
    CAPTURED_STDOUT.write("through the stream object captured at import\n")
    print("through the new sys.stdout")


@ngw.command("fglobal", fork=True)
def fglobal(ctx):
    previous = STATE["value"]
    STATE["value"] = ctx.args[0]
    seen_env = os.environ.get("LEAKED_ENV")
    os.environ["LEAKED_ENV"] = "set by an earlier run"
    sys.modules.setdefault("leaked_module", sys)
    seen_umask = _umask()
    os.umask(0o777)
    print(json.dumps({"previous": previous, "seen_env": seen_env, "cwd": os.getcwd(),
                      "seen_umask": seen_umask,
                      "leaked_module": "leaked_module" in sys.modules and previous is not None}))
    os.chdir("/")


@ngw.command("fident", fork=True)
def fident(ctx):
    """What tells two children apart: their random state and ids, as JSON."""
    print(json.dumps({"random": random.random(), "pid": os.getpid(), "ppid": os.getppid(),
                      "sid": os.getsid(0), "pgid": os.getpgrp(),
                      "native_id": threading.get_native_id(),
                      "fds": sorted(int(f) for f in os.listdir("/proc/self/fd"))}))


@ngw.command("fsleep", fork=True)
def fsleep(ctx):
    if "ignore-hup" in ctx.args:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if "child" in ctx.args:
        grandchild = subprocess.Popen(["sleep", "60"])
        print("grandchild %d" % grandchild.pid)
    print("ready", flush=True)
    time.sleep(60)


@ngw.command("fflood", fork=True)
def fflood(ctx):
    block = b"x" * 65536
    total = int(ctx.args[0]) << 20
    out = sys.stdout.buffer
    for _ in range(total // len(block)):
        out.write(block)
    out.flush()
    print("done", file=sys.stderr)


@ngw.command("fline", fork=True)
def fline(ctx):
    line = sys.stdin.readline()
    print("got %r" % line)


@ngw.command("ftty", fork=True)
def ftty(ctx):
    import termios

    data = sys.stdin.buffer.read() if ctx.args[:1] == ["read"] else b""
    info = {
        "isatty": [os.isatty(i) for i in range(3)],
        "data": data.decode("latin-1"),
        "size": list(os.get_terminal_size(1)) if os.isatty(1) else None,
        "line_buffering": sys.stdout.line_buffering,
    }
    try:
        fd = os.open("/dev/tty", os.O_RDWR)
        info["dev_tty"] = True
        os.close(fd)
    except OSError:
        info["dev_tty"] = False
    if os.isatty(1):
        info["opost"] = bool(termios.tcgetattr(1)[1] & termios.OPOST)
    sys.stdout.write(json.dumps(info) + "\n")
    sys.stdout.write("line1\nline2\n")


# -- the exact-session extensions (docs/ngw.md 15.4-15.6) ---------------------------------

def _is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _size(fd):
    try:
        return list(os.get_terminal_size(fd))
    except OSError:
        return None


def _stdio_state(f):
    """What a program can see of a sys.std* object (None if there is none)."""
    if f is None:
        return None

    def ask(fn):
        try:
            return fn()
        except (OSError, ValueError) as e:
            return type(e).__name__

    return {"seekable": ask(f.seekable), "tell": ask(f.buffer.tell), "isatty": ask(f.isatty),
            "line_buffering": f.line_buffering, "write_through": f.write_through,
            "encoding": f.encoding, "errors": f.errors, "mode": f.mode,
            "buffer": type(f.buffer).__name__, "raw_seekable": ask(f.buffer.raw.seekable),
            "name": f.buffer.raw.name, "fileno": ask(f.fileno)}


def _foreground(fd):
    """Whether the terminal on `fd` has this process's group in the foreground (None: it
    is not a controlling terminal of ours, or no terminal)."""
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return None


def _dev_tty():
    try:
        os.close(os.open("/dev/tty", os.O_RDWR))
        return True
    except OSError:
        return False


@ngw.command("fprobe", fork=True)
def fprobe(ctx):
    """Writes what it runs on to the file args[0] (its fds may be anything), then writes
    args[1:] (if any) to stdout."""
    report = {
        "isatty": [os.isatty(i) for i in range(3)], "open": [_is_open(i) for i in range(3)],
        "size": [_size(i) for i in range(3)],
        "std_none": [f is None for f in (sys.stdin, sys.stdout, sys.stderr)],
        "line_buffering": getattr(sys.stdout, "line_buffering", None),
        "ctx_tty": list(ctx.tty), "pid": os.getpid(), "pgid": os.getpgrp(),
        "sid": os.getsid(0), "worker_sid": os.getsid(os.getppid()),
        "worker_pgid": os.getpgid(os.getppid()),
        "sigint": _handler(signal.SIGINT), "sighup": _handler(signal.SIGHUP),
        "sigterm": _handler(signal.SIGTERM), "sigpipe": _handler(signal.SIGPIPE),
        "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
        "nailgun_tty": {k: v for k, v in ctx.nailgun_env.items() if "TTY" in k},
        "stdio": [_stdio_state(f) for f in (sys.stdin, sys.stdout, sys.stderr)],
        "foreground": [_foreground(i) for i in range(3)], "dev_tty": _dev_tty(),
    }
    with open(ctx.args[0], "w") as f:
        json.dump(report, f)
    if ctx.args[1:]:
        print(" ".join(ctx.args[1:]))


@ngw.command("fbigwrite", fork=True)
def fbigwrite(ctx):
    sys.stdout.write("x" * (1 << 20))


@ngw.command("freplaced", fork=True)
def freplaced(ctx):
    # Output left in the original stdout's buffer, then stdout replaced (as click does
    # after a broken pipe): only the replacement's flush may be reported.
    sys.stdout.write("x" * 100)
    sys.stdout = io.StringIO()


@ngw.command("fcatch", fork=True)
def fcatch(ctx):
    try:
        print("ready", flush=True)
        time.sleep(60)
    except KeyboardInterrupt:
        print("caught", flush=True)
        return 3


@ngw.command("fstop", fork=True)
def fstop(ctx):
    print("stopping", flush=True)
    os.kill(0, signal.SIGTSTP)
    print("resumed", flush=True)


@ngw.command("fwinch", fork=True)
def fwinch(ctx):
    got = []
    signal.signal(signal.SIGWINCH, lambda *a: got.append(1))
    print("ready", flush=True)
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    print(json.dumps({"winch": bool(got), "size": _size(1)}), flush=True)



def _test_rule(value, env):
    """An environment rule (ngw.environ_rule) for test_fork: derives the variable from the
    client's value and another variable of its environment; "raise" makes it fail."""
    if value == "raise":
        raise ValueError("rule refused")
    return None if value is None else value + "+" + env.get("RULE_TEST_SUFFIX", "")


ngw.environ_rule("RULE_TEST_VAR", _test_rule)

ngw.serve(kill_grace=float(os.environ.get("TEST_KILL_GRACE", "0.5")),
          prefork=os.environ.get("TEST_PREFORK", "1") != "0")
