"""Ctrl-C while a failed test is rerun: the failure already known is still reported.

``test_a`` fails on its first run; on its rerun in a fresh world it writes
``rerun-started`` in ``STAMP_DIR`` and sleeps, so that the caller can press Ctrl-C
(SIGINT to the controller) while the rerun runs.  ``InterruptedReplayTest``: its
``test_b`` fails on its first run only, so that its rerun passes and the bisect
replays ``test_a`` before it in a fresh world; that replay writes ``rerun-started``
and sleeps.  In both, the test after the failing one never runs.  Run one class at a time.
"""
import os
import time

from continuous_test import MultiProcContinuousTest, run_tests

STAMP_DIR = os.environ["STAMP_DIR"]


class InterruptedBisectTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def test_a_fails_then_hangs_in_its_rerun(self):
        first = os.path.join(STAMP_DIR, f"first-run-{self.rank}")
        if not os.path.exists(first):
            open(first, "w").close()
            self.fail("the failure of the test's own run")
        open(os.path.join(STAMP_DIR, "rerun-started"), "w").close()
        time.sleep(60)

    def test_b_never_runs(self):
        pass


class InterruptedReplayTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def test_a_earlier(self):
        first = os.path.join(STAMP_DIR, f"first-run-a-{self.rank}")
        if os.path.exists(first):  # replayed before test_b by the bisect
            open(os.path.join(STAMP_DIR, "rerun-started"), "w").close()
            time.sleep(60)
        open(first, "w").close()

    def test_b_fails_on_its_first_run(self):
        first = os.path.join(STAMP_DIR, f"first-run-b-{self.rank}")
        if not os.path.exists(first):
            open(first, "w").close()
            self.fail("the failure of the test's own run")

    def test_c_never_runs(self):
        pass


if __name__ == "__main__":
    run_tests()
