"""In-process interrupts that arrive while the command is inside the SDK's stream code.

The I/O thread ships a command's output while the main thread is still returning from the
write or flush that queued it (it has to get the GIL back, and a CPU): the client can see
the output, and ngd can send `i`, before the call has returned. Under the end-to-end suite
this happened when a sub-zygote was preloading beside the session. Raised inside the SDK,
`Interrupted` told the command that output already sent was not written: its buffered
stdout sent it again, and the exception came out of a `flush()` that had in fact
completed, before the command's own code could handle it. The worker below forces that
moment: a hook delivers the interrupt from inside the SDK, at the point where the I/O
thread can do it, and then reaches a point where Python runs signal handlers."""

import os
import shutil
import sys
import tempfile
import unittest

import driver

WORKER = r'''
import time

import ngw
from ngw import _inline

RACED = []


def _interrupt_here(pump, case):
    """The I/O thread's delivery of `i SIGINT`, done now (the worker's main thread is
    inside the SDK's stream code, past the point of no return of its call)."""
    ctx = pump.ctx
    if ctx is not None and ctx.args == [case] and not RACED:
        RACED.append(case)
        pump.on_interrupt("SIGINT")
        checkpoint()


def checkpoint():
    """Entering a Python function is a point where Python runs signal handlers: one
    comes before the SDK's call returns, whatever the SDK's own code between."""


_wake = _inline._Pump._wake


def wake(self):
    _wake(self)
    if getattr(self, "busy", True):  # called by send() once the output is queued
        _interrupt_here(self, "write")


_readinto = _inline._Pump.readinto


def readinto(self, b):
    n = _readinto(self, b)
    _interrupt_here(self, "read")  # the stdin is taken
    return n


_inline._Pump._wake = wake
_inline._Pump.readinto = readinto


@ngw.command("race")
def race(ctx):
    if ctx.args == ["write"]:
        ctx.stdout.write(b"ready\n")
        try:
            ctx.stdout.flush()
            time.sleep(30)
        except ngw.Interrupted as e:
            ctx.stdout.write(b"interrupted: %s\n" % e.reason.encode())
            return 130
        return 0
    try:
        ctx.stdin.read1(5)
        time.sleep(30)
    except ngw.Interrupted as e:
        ctx.stdout.write(b"interrupted: %s\n" % e.reason.encode())
    ctx.stdout.write(b"rest %r\n" % ctx.stdin.read())
    return 0


ngw.serve()
'''


class InterruptInsideTheSdk(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ngw-interrupt-window-")
        path = os.path.join(self.tmp, "worker.py")
        with open(path, "w") as f:
            f.write(WORKER)
        self.w = driver.Worker([sys.executable, path])
        self.w.hello()

    def tearDown(self):
        try:
            self.w.stop()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def test_output_already_handed_on_is_written_once_and_the_command_sees_the_interrupt(self):
        r = self.w.run("race", ["write"])
        # Raised after the flush returned: inside the command's `try`, with "ready" sent
        # once (as a cold run interrupted right after its write(2)).
        self.assertEqual((bytes(r.stdout), r.code), (b"ready\ninterrupted: SIGINT\n", 130),
                         "%r\nlog:\n%s" % (r, self.w.log()))

    def test_stdin_already_taken_stays_with_the_stream(self):
        r = self.w.run("race", ["read"], stdin=b"hello world\n")
        # The interrupt surfaced as read1(5) returned "hello" (a cold run signalled
        # right after its read(2) drops it the same way); the rest of what was read
        # stays in the stream's buffer.
        self.assertEqual((bytes(r.stdout), r.code),
                         (b"interrupted: SIGINT\nrest b' world\\n'\n", 0),
                         "%r\nlog:\n%s" % (r, self.w.log()))


if __name__ == "__main__":
    unittest.main()
