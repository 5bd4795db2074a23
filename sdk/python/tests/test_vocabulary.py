"""The SDK's words agree with ngd's, as the Rust tables define them (read from their
source):

* the signal names (`proto/src/signal.rs`) are the same signals, with the same numbers,
  as the names the Python worker understands in an `i` chunk and writes in a
  death-by-signal `X` (`ngw._signals`, which takes them from the standard `signal`
  module);
* the signals that leave an in-process command alone (`_signals.HARMLESS`) are those
  whose effect stops, continues or does nothing (`vocab/src/signal.rs`);
* the chunk types (`proto/src/chunk.rs`) are `_wire`'s;
* every feature the worker names, and every notice kind it sends, is in the vocabulary
  (`vocab/src/feature.rs`, `vocab/src/notice.rs`)."""

import glob
import os
import re
import signal
import unittest

from ngw import _signals, _wire

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
RUST_TABLE = os.path.join(ROOT, "proto", "src", "signal.rs")
SDK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "ngw")

#: One entry of the Rust table: `(Signal::Int, "SIGINT", libc::SIGINT),`.
ENTRY = re.compile(r'^\s*\(Signal::(\w+), "(SIG\w+)", libc::(SIG\w+)\),\s*$', re.M)


def rust_table():
    """The Rust table's (variant, name, libc constant) entries, in its order."""
    with open(RUST_TABLE, encoding="utf-8") as f:
        return ENTRY.findall(f.read())


class SignalTable(unittest.TestCase):
    def setUp(self):
        self.table = rust_table()
        self.assertGreater(len(self.table), 0, "no entry found in %s" % RUST_TABLE)
        self.names = [name for _, name, _ in self.table]

    def test_each_rust_name_is_its_own_libc_constant(self):
        for variant, name, constant in self.table:
            self.assertEqual(name, constant, variant)
            self.assertEqual(name, "SIG" + variant.upper(), variant)

    def test_the_python_worker_knows_the_same_names(self):
        python = [s.name for s in signal.Signals if s < signal.SIGRTMIN]
        self.assertEqual(sorted(self.names), sorted(python))

    def test_names_mean_the_same_numbers_both_ways(self):
        numbers = []
        for name in self.names:
            interrupt = _signals.Interrupt(name)
            self.assertEqual(interrupt.kind, "signal", name)
            self.assertEqual(int(interrupt.signum), int(getattr(signal, name)), name)
            self.assertEqual(_signals.signal_name(interrupt.signum), name)
            numbers.append(int(interrupt.signum))
        # The Rust table is written in the order of the numbers.
        self.assertEqual(numbers, sorted(numbers))
        self.assertEqual(len(set(numbers)), len(numbers))


def rust_source(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def sdk_source():
    """Every module of the SDK, as one text."""
    texts = []
    for path in sorted(glob.glob(os.path.join(SDK, "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            texts.append(f.read())
    return "\n".join(texts)


class SignalEffects(unittest.TestCase):
    def test_harmless_signals_are_those_that_do_not_end_a_process(self):
        names = {variant: name for variant, name, _ in rust_table()}
        effects = re.findall(r"^\s*\(Signal::(\w+), Effect::(\w+)\),\s*$",
                             rust_source("vocab", "src", "signal.rs"), re.M)
        self.assertEqual([v for v, _ in effects], list(names), "the tables' order")
        harmless = {names[v] for v, effect in effects
                    if effect in ("Stops", "Continues", "Ignored")}
        python = {signal.Signals(n).name for n in _signals.HARMLESS}
        self.assertEqual(python, harmless)


class ChunkTypes(unittest.TestCase):
    #: `_wire`'s name for each of `ChunkType`'s constants.
    NAMES = {
        "ARGUMENT": "ARG", "ENVIRONMENT": "ENV", "WORKING_DIR": "DIR", "COMMAND": "CMD",
        "LONG_ARG": "LONGARG", "STDIN": "STDIN", "STDIN_EOF": "STDIN_EOF",
        "HEARTBEAT": "HEARTBEAT", "STDOUT": "STDOUT", "STDERR": "STDERR",
        "SEND_INPUT": "SEND_INPUT", "EXIT": "EXIT", "WORKER_HELLO": "HELLO",
        "WORKER_INTERRUPT": "INTERRUPT", "WORKER_PING": "PING", "WORKER_PONG": "PONG",
        "WORKER_QUIT": "QUIT", "WORKER_NOTICE": "NOTICE", "WORKER_TAKEN": "TAKEN",
        "WORKER_STOPPED": "STOPPED",
    }

    def test_the_wire_module_uses_the_rust_bytes(self):
        consts = dict(re.findall(r"pub const (\w+): Self = Self\(b'(.)'\);",
                                 rust_source("proto", "src", "chunk.rs")))
        for rust, python in self.NAMES.items():
            self.assertIn(rust, consts)
            self.assertEqual(getattr(_wire, python), ord(consts[rust]), rust)


class Words(unittest.TestCase):
    def rust_names(self, path, enum):
        pattern = r'^\s*\(%s::\w+, "([\w-]+)"\),\s*$' % enum
        names = set(re.findall(pattern, rust_source(*path), re.M))
        self.assertTrue(names, "no entry in %s" % os.path.join(*path))
        return names

    def test_the_features_the_worker_names_are_known(self):
        known = self.rust_names(("vocab", "src", "feature.rs"), "WorkerFeature")
        source = sdk_source()
        used = set(re.findall(r'\["([a-z-]+)"\] if ', source))
        used |= set(re.findall(r'"([a-z-]+)" in offered', source))
        self.assertIn("stdin-window", used)
        self.assertLessEqual(used, known)

    def test_the_notices_the_worker_sends_are_known(self):
        known = self.rust_names(("vocab", "src", "notice.rs"), "NoticeKind")
        used = set(re.findall(r'notices\.send\(\s*"(\w+)"', sdk_source()))
        self.assertIn("retire", used)
        self.assertLessEqual(used, known)


if __name__ == "__main__":
    unittest.main()
