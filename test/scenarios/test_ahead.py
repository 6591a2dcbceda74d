"""Tests sent ahead (continuous_test.controller.ahead): the next test starts while the runner records the last.

Run as ``python test_ahead.py [Class ...]``, under unittest or pytest (``-k`` picks
classes), or as ``python test_ahead.py mispredict|stop`` for a runner that does not
run the test sent ahead.  ``STAMP_DIR`` receives one file per event:
``ctl-<Class.test>`` when the controller's ``run`` starts a test (after
``AHEAD_GAP`` seconds of pretended runner work), ``rank<r>-<Class.test>`` when a
rank starts it, ``pid<r>-<Class.test>`` with the rank's pid, ``ran-<r>-<test>``
from tests that must not run.  Each class prints ``SENT_AHEAD <class> <n>``
at its end, from the world's count.
"""
import os
import sys
import time
import unittest

import pytest
import torch
import torch.distributed as dist

import continuous_test
from continuous_test import _role, MultiProcContinuousTest, run_tests


def stamp(name, text=None):
    directory = os.environ.get("STAMP_DIR")
    if directory:
        with open(os.path.join(directory, name), "w") as f:
            f.write(text if text is not None else repr(time.monotonic()))


class Stamped(MultiProcContinuousTest):
    world_size = 2
    send_ahead = True  # its run() below always runs the test

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def run(self, result=None):
        if _role.current() is None:  # the controller: slow runner work before each test
            time.sleep(float(os.environ.get("AHEAD_GAP", "0")))
            stamp(f"ctl-{type(self).__name__}.{self._testMethodName}")
        return super().run(result)

    def setUp(self):
        super().setUp()
        stamp(f"rank{self.rank}-{type(self).__name__}.{self._testMethodName}")
        stamp(f"pid{self.rank}-{type(self).__name__}.{self._testMethodName}", str(os.getpid()))

    @classmethod
    def tearDownClass(cls):
        from continuous_test.controller import world

        started = world._WORLDS.get((cls, None))  # (class, size): this class has one size
        print(f"SENT_AHEAD {cls.__name__} {started.sent_ahead if started else None}", file=sys.stderr, flush=True)
        super().tearDownClass()


def all_reduce_sum():
    t = torch.ones(2)
    dist.all_reduce(t)
    return t[0].item()


# test_a's shared_temp_dir, in each rank: gone before test_b, sent ahead, starts.
_LAST_SHARED_DIR = []


class AheadTest(Stamped):
    def test_a(self):
        self.assertEqual(all_reduce_sum(), 2)
        # Enough files that removing them takes a while: what test_a left alive may
        # use them until test_b starts (a FileStore's destructor opens its file).
        directory = os.path.join(self.shared_temp_dir, f"rank{self.rank}")
        os.makedirs(directory)
        for i in range(2000):
            open(os.path.join(directory, str(i)), "w").close()
        _LAST_SHARED_DIR.append(self.shared_temp_dir)

    def test_b(self):
        self.assertFalse(os.path.exists(_LAST_SHARED_DIR[0]), "test_a's shared_temp_dir when test_b started")
        self.assertEqual(all_reduce_sum(), 2)

    def test_c(self):
        print(f"rank {self.rank} prints in test_c")

    def test_d(self):
        self.assertEqual(all_reduce_sum(), 2)


class NotAheadTest(Stamped):
    """Only test_c passes plainly: only test_d is sent ahead."""

    def test_a_fails(self):
        self.assertEqual(self.rank, 0, "rank 1 fails on purpose")

    def test_b_leaks(self):
        os.environ["CT_AHEAD_LEAK"] = "1"

    def test_c(self):
        pass

    def test_d(self):
        pass


class SkippedNextTest(Stamped):
    def test_a(self):
        pass

    @unittest.skip("never sent ahead")
    def test_b_skipped(self):
        stamp(f"ran-{self.rank}-test_b_skipped")

    @pytest.mark.skip(reason="pytest skips it: never sent ahead")
    def test_c_pytest_skipped(self):
        stamp(f"ran-{self.rank}-test_c_pytest_skipped")

    def test_d(self):
        pass


class MarkerSkippedNextTest(Stamped):
    """Under pytest, test_b and test_d are skipped by their markers: neither is sent ahead, so
    test_a, test_c and test_e run in one world (a test sent ahead that the runner does not
    run would stop the world, and the next test would start in a fresh one)."""

    def test_a(self):
        pass

    @pytest.mark.skip(reason="pytest skips it: never sent ahead")
    def test_b_skip(self):
        stamp(f"ran-{self.rank}-test_b_skip")

    def test_c(self):
        pass

    @pytest.mark.skipif(True, reason="pytest skips it: never sent ahead")
    def test_d_skipif(self):
        stamp(f"ran-{self.rank}-test_d_skipif")

    def test_e(self):
        pass


class CrashAheadTest(Stamped):
    def test_a(self):
        all_reduce_sum()

    def test_b_crashes(self):
        if self.rank == 1:
            os._exit(3)
        all_reduce_sum()

    def test_c(self):
        self.assertEqual(all_reduce_sum(), 2)


class FixtureTest(Stamped):
    """Under pytest, a function fixture runs before each test: nothing may be sent ahead of it."""

    @pytest.fixture(autouse=True)
    def _prepare(self):
        stamp(f"fixture-{self._testMethodName}")
        yield

    def test_a(self):
        self.assertTrue(os.path.exists(os.path.join(os.environ["STAMP_DIR"], "fixture-test_a")))

    def test_b(self):
        self.assertTrue(os.path.exists(os.path.join(os.environ["STAMP_DIR"], "fixture-test_b")))


@pytest.fixture
def slow_teardown():
    yield
    time.sleep(0.3)
    stamp("teardown-test_a")


class FixtureTeardownTest(Stamped):
    """Under pytest, test_a's fixture ends (slowly) before test_b may start."""

    @pytest.mark.usefixtures("slow_teardown")
    def test_a(self):
        pass

    def test_b(self):
        self.assertTrue(os.path.exists(os.path.join(os.environ["STAMP_DIR"], "teardown-test_a")))


class RunSkipTest(MultiProcContinuousTest):
    """A run() override that skips a known-broken test without running it: nothing is sent ahead."""

    world_size = 2
    BROKEN = ("test_b_broken",)

    @classmethod
    def backend_str(cls):
        return "gloo"

    def run(self, result=None):
        if _role.current() is None and self._testMethodName in self.BROKEN:
            result.startTest(self)
            result.addSkip(self, "known broken")
            result.stopTest(self)
            return result
        return super().run(result)

    def test_a(self):
        pass

    def test_b_broken(self):
        stamp(f"ran-{self.rank}-test_b_broken")

    def test_c(self):
        pass


class LiveOutputTest(Stamped):
    def test_a(self):
        print(f"OUT-test_a rank {self.rank}")

    def test_b(self):
        print(f"OUT-test_b rank {self.rank}")

    def test_c(self):
        print(f"OUT-test_c rank {self.rank}")


class TimeLimitTest(Stamped):
    def test_a(self):
        pass

    @continuous_test.time_limit(2)
    def test_b_three_seconds(self):
        time.sleep(3)


class XfailStopTest(Stamped):
    @pytest.mark.xfail(strict=True, reason="passes: a strict xfail that passes fails, and -x stops")
    def test_a(self):
        pass

    def test_b(self):
        stamp(f"ran-{self.rank}-test_b")


class LongNextTest(Stamped):
    """For the runners below: test_b would run a minute, and test_c is short."""

    shutdown_timeout = 60.0

    def test_a(self):
        all_reduce_sum()

    def test_b(self):
        time.sleep(60)

    def test_c(self):
        self.assertEqual(all_reduce_sum(), 2)


class _StopAfterA(unittest.TextTestResult):
    """A runner that stops after test_a (``stop``), or runs test_c in test_b's place (``mispredict``)."""

    mode = "stop"
    suite = None

    def addSuccess(self, test):  # noqa: N802 - unittest's name
        super().addSuccess(test)
        if test._testMethodName == "test_a":
            if self.mode == "stop":
                self.stop()
            else:
                self.suite._tests[1] = LongNextTest("test_c")


def _run_stopping(mode):
    suite = unittest.TestSuite([LongNextTest("test_a"), LongNextTest("test_b")])
    _StopAfterA.mode, _StopAfterA.suite = mode, suite
    result = unittest.TextTestRunner(resultclass=_StopAfterA, verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("stop", "mispredict"):
        _run_stopping(sys.argv[1])
    run_tests()
