"""Shared helpers for the SDK tests."""

import os
import sys
import unittest

import driver

HERE = os.path.dirname(os.path.abspath(__file__))
BASIC = os.path.join(HERE, "workers", "basic.py")


def client_env(**extra):
    """A plausible client environment: the test's own, minus the SDK path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONUNBUFFERED")}
    env.update(extra)
    return env


class WorkerTest(unittest.TestCase):
    """Starts tests/workers/basic.py once per test class."""

    worker_argv = [sys.executable, BASIC]
    worker_env_extra = {}

    @classmethod
    def setUpClass(cls):
        cls.w = driver.Worker(cls.worker_argv, env=driver.worker_env(cls.worker_env_extra))
        cls.hello = cls.w.hello()

    @classmethod
    def tearDownClass(cls):
        cls.w.stop()

    def run_ok(self, command, *args, **kw):
        r = self.w.run(command, args, **kw)
        self.assertEqual(r.code, 0, r)
        return r
