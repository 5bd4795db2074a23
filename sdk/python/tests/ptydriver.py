"""A terminal for tests: a pseudo-terminal with a window size, and at its master side a
separate *terminal program* that plays the user and the terminal emulator.

The test process makes the pty (`Terminal(python, cols, rows, steps)`), gives its slave
to the command under test (cold: as fds 0-2 and controlling terminal, in a session of its
own, `take_controlling_terminal`; warm: as the client's descriptors of a session), and
when the command is done calls `finish()`, which closes the test's copy of the slave and
returns what the terminal saw.

The terminal program (this file run as a script, by an interpreter that has the `pyte`
terminal emulator: the fidelity venv's) reads the master until end of file (EIO: every
copy of the slave closed), feeds everything to a `pyte` screen, and answers the
terminal's reports the way a real terminal does, from that screen: a cursor position
request (`ESC[6n`, prompt_toolkit sends one before each prompt) gets `ESC[<row>;<col>R`,
a status request `ESC[0n`. It types its `steps` in order: each waits (without a timer)
until the screen shows what it expects, then writes its keys. It prints one JSON object:
the raw bytes the command wrote (`raw`, latin-1), the final screen (`display`: the lines
as text; `styles`: each line's runs of identical attributes; `cursor`; `title`),
`untyped` (the patterns of the steps never reached) and `error` (a wait that timed out,
with the screen at that moment; the terminal program then hangs up, so the command
ends)."""

import json
import os
import re
import select
import struct
import subprocess
import sys
import time



class Step:
    """Wait until `pattern` (a regular expression, searched) matches the screen, then type
    `keys`. The screen is its lines joined by newlines, trailing blanks removed; with
    `before_cursor`, only what is before the cursor: the lines above it and its own line
    up to it, trailing spaces included (a prompt and its indent end with `$`)."""

    def __init__(self, pattern, keys, before_cursor=False):
        self.pattern = pattern
        self.keys = keys
        self.before_cursor = before_cursor

    def as_json(self):
        return {"pattern": self.pattern, "keys": self.keys, "before_cursor": self.before_cursor}


class Terminal:
    """A pty of `cols` x `rows` and its terminal program (run by `python`, which must
    import `pyte`). Use `slave` for the command; then `finish()`."""

    def __init__(self, python, cols=80, rows=24, steps=(), timeout=60.0):
        import fcntl
        import termios

        self.cols, self.rows = cols, rows
        master, self.slave = os.openpty()
        try:
            fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            config = {"fd": master, "cols": cols, "rows": rows, "timeout": timeout,
                      "steps": [s.as_json() for s in steps]}
            self.proc = subprocess.Popen([python, os.path.abspath(__file__), json.dumps(config)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         pass_fds=[master])
        except BaseException:
            os.close(self.slave)
            raise
        finally:
            os.close(master)  # the terminal program's copy is the only one
        self.result = None

    def close_slave(self):
        if self.slave >= 0:
            os.close(self.slave)
            self.slave = -1

    def finish(self, timeout=60.0):
        """Closes the test's copy of the slave (the command has ended: the terminal
        program reads what is left, then sees end of file) and returns its result."""
        self.close_slave()
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise
        self.result = json.loads(out)
        self.result["raw"] = self.result["raw"].encode("latin-1")
        return self.result

    def kill(self):
        self.close_slave()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


def take_controlling_terminal():
    """For `preexec_fn` in a child that called setsid() (`start_new_session`): fd 0, the
    slave, becomes its controlling terminal, as a shell's terminal is."""
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


# -- the terminal program ------------------------------------------------------------------


def _styles(line, cols):
    """A screen line's runs of identical attributes: [[text, fg, bg, flags], ...]."""
    runs = []
    for x in range(cols):
        ch = line[x]
        attrs = [ch.fg, ch.bg, "".join(f for f, on in (
            ("b", ch.bold), ("i", ch.italics), ("u", ch.underscore), ("s", ch.strikethrough),
            ("r", ch.reverse), ("k", ch.blink)) if on)]
        if runs and runs[-1][1:] == attrs:
            runs[-1][0] += ch.data
        else:
            runs.append([ch.data] + attrs)
    return runs


def _snapshot(screen):
    return {"display": list(screen.display),
            "styles": [_styles(screen.buffer[y], screen.columns) for y in range(screen.lines)],
            "cursor": [screen.cursor.x, screen.cursor.y], "title": screen.title}


def _screen_text(screen):
    return "\n".join(line.rstrip() for line in screen.display).rstrip("\n")


def _before_cursor(screen):
    lines = [line.rstrip() for line in screen.display[: screen.cursor.y]]
    return "\n".join(lines + [screen.display[screen.cursor.y][: screen.cursor.x]])


def terminal_program(config):
    import pyte

    fd = config["fd"]
    screen = pyte.Screen(config["cols"], config["rows"])
    stream = pyte.ByteStream(screen)

    def answer(data):  # the terminal's reports go back to the command as input
        os.write(fd, data.encode())

    screen.write_process_input = answer
    raw = bytearray()
    steps = list(config["steps"])
    error = None
    deadline = time.monotonic() + config["timeout"]

    def due():
        if not steps:
            return False
        step = steps[0]
        text = _before_cursor(screen) if step["before_cursor"] else _screen_text(screen)
        return re.search(step["pattern"], text) is not None

    while True:
        while due():
            os.write(fd, steps.pop(0)["keys"].encode())
        left = deadline - time.monotonic()
        if left <= 0:
            error = ("waited %.0fs for %r on the screen:\n%s" % (
                config["timeout"], steps[0]["pattern"], _screen_text(screen)) if steps
                     else "the command did not end within %.0fs" % config["timeout"])
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: every copy of the slave is closed
            break
        if not data:
            break
        raw += data
        stream.feed(data)
    os.close(fd)
    result = _snapshot(screen)
    result.update(raw=raw.decode("latin-1"), error=error,
                  untyped=[s["pattern"] for s in steps])
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    terminal_program(json.loads(sys.argv[1]))
