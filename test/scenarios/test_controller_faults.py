"""What happens to the controller itself: an exception while it waits for the ranks, pytest's --pdb.

``InterruptedWaitTest.test_a_slow`` gets an exception raised in the controller one
second into the test, while the controller waits for its ranks, as pytest-timeout's
signal method raises one (the ranks sleep on).  The tests after it are innocent.
``InterruptedStartTest`` gets it while its world still starts.
``RunnerTimeoutTest`` is the same under pytest-timeout itself (``--timeout 2``).
``TearDownInRanksTest`` has a ``tearDown`` that only works in a rank (it uses the
process group): under ``pytest --pdb`` it must not run in the controller.
``FreshTest`` runs in fresh ranks.  Every rank that runs a test of
``TearDownInRanksTest`` or ``FreshTest`` leaves a file in ``$MARK_DIR`` (when
set): a bad setting must fail the test before any rank runs it.
"""
import os
import signal
import time

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, _role, run_tests


class ControllerTimeout(Exception):
    """Stands for the exception a runner's own timeout raises in the controller."""


def _raise(signum, frame):
    raise ControllerTimeout("the runner's own timeout fired in the controller")


class Gloo(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def _sum(self):
        _mark(self)
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [2.0, 2.0])


class InterruptedWaitTest(Gloo):
    def run(self, result=None):
        if _role.current() is None and self._testMethodName == "test_a_slow":
            previous = signal.signal(signal.SIGALRM, _raise)
            signal.setitimer(signal.ITIMER_REAL, 1.0)
            try:
                return super().run(result)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
        return super().run(result)

    def test_a_slow(self):
        time.sleep(20)

    def test_b_innocent(self):
        self._sum()

    def test_c_innocent(self):
        self._sum()


class InterruptedStartTest(InterruptedWaitTest):
    """The same exception, raised while the controller still waits for its first world to start (the ranks take
    three seconds to make their group): the world is started again for the next test."""

    @classmethod
    def _init_pg(cls, rank, world_size, rdvz_file):
        if not os.path.exists(os.path.join(os.environ["MARK_DIR"], "started-once")):
            time.sleep(3)
        super()._init_pg(rank, world_size, rdvz_file)
        if rank == 0:
            open(os.path.join(os.environ["MARK_DIR"], "started-once"), "w").close()


class RunnerTimeoutTest(Gloo):
    """For a runner's real timeout (``pytest --timeout 5`` with pytest-timeout): only test_a_slow exceeds it."""

    def test_a_slow(self):
        if os.environ.get("MARK_DIR"):  # the rank's pid, for the check that it ended
            with open(os.path.join(os.environ["MARK_DIR"], f"slow-{self.rank}"), "w") as f:
                f.write(str(os.getpid()))
        time.sleep(60)

    def test_b_innocent(self):
        self._sum()

    def test_c_innocent(self):
        self._sum()


class TearDownInRanksTest(Gloo):
    def tearDown(self):
        dist.barrier()  # a process-group call: it only works in a rank
        super().tearDown()

    def test_a(self):
        self._sum()

    def test_b(self):
        self._sum()


class FreshTest(MultiProcessTestCase):
    world_size = 2

    def test_fails_on_purpose(self):
        _mark(self)
        self.fail("a failure of its own")


def _mark(test):
    if os.environ.get("MARK_DIR"):
        open(os.path.join(os.environ["MARK_DIR"], f"{test._testMethodName}-{test.rank}"), "w").close()


if __name__ == "__main__":
    run_tests()
