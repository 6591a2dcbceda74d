"""Cleanup a test registers for its process's end runs at a rank's end, as in a process of its own.

Each test registers an ``atexit`` handler that writes ``atexit-<Class>-<rank>`` in
``MARK_DIR`` and leaves a ``tempfile.TemporaryDirectory`` to its finalizer.  This
module also registers, at import (so in the controller, and inherited by the
template and every rank forked from it), a handler that writes ``module-<pid>``:
it must run once, in the controller, never in a rank.  The shared class's test
that registers is the second one, sent ahead of the runner (controller/ahead.py):
its world's graceful shutdown at the class's end is what runs the cleanup.
"""
import atexit
import os
import tempfile

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests

MARK_DIR = os.environ["MARK_DIR"]
_LEFT = []  # TemporaryDirectory objects left for their finalizers


def mark(name):
    with open(os.path.join(MARK_DIR, name), "w"):
        pass


atexit.register(lambda pid=os.getpid(): mark(f"module-{os.getpid()}") if os.getpid() == pid else mark(f"inherited-{os.getpid()}"))


def register_cleanup(case):
    atexit.register(mark, f"atexit-{type(case).__name__}-{case.rank}")
    _LEFT.append(tempfile.TemporaryDirectory(dir=MARK_DIR, prefix=f"tmp-{type(case).__name__}-{case.rank}-"))


class SharedCleanupTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def test_a_plain_pass(self):
        pass  # a plain pass on every rank: the next test is sent ahead of the runner

    def test_registers_cleanup(self):
        register_cleanup(self)  # sent ahead: the world must still shut down gracefully after it


class FreshCleanupTest(MultiProcessTestCase):
    world_size = 2

    def test_registers_cleanup(self):
        register_cleanup(self)


if __name__ == "__main__":
    run_tests()
