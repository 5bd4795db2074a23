"""The SDK's signal names agree with ngd's: the one Rust table (`proto/src/signal.rs`,
read from its source) names the same signals, with the same numbers, as the names the
Python worker understands in an `i` chunk and writes in a death-by-signal `X`
(`ngw._signals`, which takes them from the standard `signal` module)."""

import os
import re
import signal
import unittest

from ngw import _signals

RUST_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                          "proto", "src", "signal.rs")

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


if __name__ == "__main__":
    unittest.main()
