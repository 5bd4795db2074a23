"""How CPython turns the end of `python script.py` into an exit status, repeated for code
that runs inside a worker: SystemExit codes, `sys.exit("msg")`, uncaught exceptions,
KeyboardInterrupt, and the final flush of the standard streams."""

import os
import signal
import sys
import threading
import traceback

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
try:
    import runpy as _runpy

    _RUNPY = _runpy.__file__
except (ImportError, AttributeError):  # pragma: no cover
    _RUNPY = None

#: More streams to flush at exit (the worker's stdio objects, in a forked child).
also_flush = []
also_flush_err = []


def status_of_exit_code(code):
    """(status, message) for `SystemExit(code)`, as CPython's _Py_HandleSystemExit does it:
    None is 0; an int is truncated like the C int it becomes; anything else is printed
    (str) on stderr and gives 1."""
    if code is None:
        return 0, None
    if isinstance(code, int):
        if -(1 << 63) <= code < (1 << 63):
            return code & 0xFF, None
        return 255, None
    return 1, str(code)


def _is_runner_frame(filename):
    """Whether a frame's file is the SDK's own (the package and its subpackages) or
    runpy's, which runs script-mode programs: frames a cold run would not have."""
    if filename in ("<frozen runpy>", _RUNPY):
        return True
    path = os.path.abspath(filename)
    return path == _PKG_DIR or path.startswith(_PKG_DIR + os.sep)


def user_traceback(tb):
    """Drops the SDK's own frames (and runpy's) from the top of a traceback, so the first
    frame shown is the command's, as in a cold run."""
    while tb is not None and _is_runner_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def run_main(fn, before_exit=None):
    """Runs `fn()` the way the interpreter runs a main module, in a forked session child.
    Never returns: ends the process with the status a cold run would have.
    `before_exit(status)` runs last, right before _exit (not when dying of SIGINT)."""
    status = 0
    reraise_sigint = False
    try:
        try:
            result = fn()
        except SystemExit as e:
            status, message = status_of_exit_code(e.code)
            if message is not None:
                _write_stderr(message + "\n")
        else:
            status, message = status_of_exit_code(result)
            if message is not None:
                _write_stderr(message + "\n")
        status = _finalize(status)
    except BaseException as e:  # noqa: B902 - the top level catches everything, as CPython does
        tb = user_traceback(e.__traceback__)
        e.__traceback__ = tb  # the default excepthook prints the exception's own traceback
        try:
            sys.excepthook(type(e), e, tb)
        except BaseException:
            traceback.print_exception(type(e), e, tb)
        reraise_sigint = isinstance(e, KeyboardInterrupt)
        status = _finalize(1)
    if reraise_sigint:
        # CPython ends an uncaught KeyboardInterrupt by dying of SIGINT (exit 130).
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            pass
    elif before_exit is not None:
        try:
            before_exit(status)
        except BaseException:
            pass
    os._exit(status)


def _write_stderr(text):
    try:
        if sys.stderr is not None:
            sys.stderr.write(text)
            sys.stderr.flush()
            return
    except Exception:
        pass
    try:
        os.write(2, os.fsencode(text))
    except OSError:
        pass


def _finalize(status):
    """The parts of Py_FinalizeEx a command can observe: joining non-daemon threads,
    atexit handlers, flushing stdout (a failure there makes the status 120) and stderr."""
    try:
        main = threading.main_thread()
        for t in threading.enumerate():
            if t is not main and not t.daemon and t.is_alive():
                t.join()
    except BaseException:
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    # CPython reports a failed flush (and exits 120) only for sys.stdout as the program
    # left it. Other stream objects are flushed when collected, where errors pass
    # silently: the original stdout once the program replaced sys.stdout (click does on
    # EPIPE, with a wrapper that ignores it), and the objects preloaded modules kept,
    # which stand for that original.
    replaced = sys.stdout is not sys.__stdout__
    seen = set()
    for stream in [sys.stdout, sys.__stdout__] + also_flush:
        if stream is None or id(stream) in seen:
            continue
        seen.add(id(stream))
        try:
            stream.flush()
        except Exception as e:
            if replaced and stream is not sys.stdout:
                continue
            _write_stderr(
                "Exception ignored in: %r\n%s"
                % (stream, "".join(traceback.format_exception_only(type(e), e)))
            )
            status = 120
    for stream in [sys.stderr, sys.__stderr__] + also_flush_err:
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass
    return status
