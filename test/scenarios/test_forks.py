"""A test's own forks leave the rank's garbage collector alone.

In a rank (``ForkTest``), a test builds a reference cycle, forks a child that exits
at once (as a DataLoader worker or a multiprocessing start does), drops the cycle
and collects: the cycle must be gone.  ``ZControllerForkTest`` does the same in the
controller, after the template was made and a world ran.  Run under both templates
(``fork`` and ``forkserver``, by ``CONTINUOUS_TEST_START_METHOD``).
"""
import gc
import os
import unittest
import weakref

from continuous_test import MultiProcContinuousTest, run_tests


class Node:
    pass


def cycle_survives_a_fork() -> bool:
    """Build a cycle, fork a child that exits at once, drop the cycle: True if a collection keeps it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    del a, b
    gc.collect()
    return alive() is not None


class ForkTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def test_a_cycle_is_collected_after_a_fork(self):
        self.assertFalse(cycle_survives_a_fork(), "a fork froze the rank's objects: the cycle was never collected")

    def test_b_again(self):
        self.assertFalse(cycle_survives_a_fork())


class ZControllerForkTest(unittest.TestCase):
    def test_a_cycle_is_collected_after_a_fork_in_the_controller(self):
        self.assertFalse(cycle_survives_a_fork(), "a fork froze the controller's objects: the cycle was never collected")


if __name__ == "__main__":
    run_tests()
