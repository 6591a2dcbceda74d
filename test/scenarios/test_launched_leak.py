"""A leak that cannot be put back, under a launcher: said once, by rank 0, as it is there.

Run under ``torchrun --nproc-per-node 2``: ``test_a`` leaves a thread running (it
ends a few seconds later), which cannot be put back; under a launcher the ranks
are the launched processes, so nothing restarts them.
"""
import threading
import time

from continuous_test import MultiProcContinuousTest, run_tests


class LaunchedLeakTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def test_a_leaves_a_thread(self):
        threading.Thread(target=time.sleep, args=(3,), name="left-running").start()

    def test_b_after_it(self):
        pass


if __name__ == "__main__":
    run_tests()
