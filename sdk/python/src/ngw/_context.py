"""What a command function receives."""

import threading


class Interrupted(KeyboardInterrupt):
    """Raised inside an in-process (non-fork) command when ngd interrupts the session:
    `reason` is "hangup" (the client went away) or a signal name such as "SIGINT";
    `signum` is the signal it stands for (SIGHUP for a hangup). If the command lets it
    escape, the session ends with exit code 128 + signum and no traceback."""

    def __init__(self, signum, reason):
        super().__init__(reason)
        self.signum = signum
        self.reason = reason


class Context:
    """One invocation of a command.

    Attributes:
      command     the command name the client asked for
      args        the arguments after the command name (list of str)
      env         the client's environment (dict of str), without the NGW_* session
                  metadata and the NAILGUN_* entries the Nailgun client synthesises
      cwd         the client's working directory (str, or None if the client sent none)
      umask       the client's umask (int)
      tty         (stdin, stdout, stderr) is-a-terminal flags the client reported
      session     ngd's session id (str, for logs)
      client_pid  the client's pid when ngd knows it, else None
      stdin       binary input; reading it asks the client for data
      stdout      binary output (buffered; flushed before stdin reads and at the end)
      stderr      binary output (unbuffered)
      exit_code   the exit code used when the function returns None (default 0)
      interrupted a threading.Event set when ngd interrupts the session
      interrupt_reason  "hangup" or a signal name, once interrupted
      forked      True when the command runs in a forked child (fd-level stdio)
    """

    def __init__(self, info, stdin, stdout, stderr, forked):
        self.command = info.command
        self.args = list(info.args)
        self.env = dict(info.env)
        self.cwd = info.cwd
        self.umask = info.umask
        self.tty = info.tty
        self.session = info.session
        self.client_pid = info.client_pid
        self.nailgun_env = dict(info.nailgun)
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.exit_code = 0
        self.interrupted = threading.Event()
        self.interrupt_reason = None
        self.forked = forked

    def exit(self, code=0):
        """Ends the command now with `code` (same rules as sys.exit)."""
        raise SystemExit(code)

    def print(self, *objects, sep=" ", end="\n", file=None, flush=False, encoding="utf-8"):
        """print() for the binary streams: file is None (stdout), "stderr", or a stream."""
        stream = self.stdout if file is None else self.stderr if file == "stderr" else file
        stream.write((sep.join(str(o) for o in objects) + end).encode(encoding, "surrogateescape"))
        if flush:
            stream.flush()
