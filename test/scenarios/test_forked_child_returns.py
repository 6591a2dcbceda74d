"""A child a test forks that returns from the test instead of exiting ends there, reporting nothing.

In a process of its own such a child would run on as a copy of the test's
process; in a rank it would report the test a second time over the rank's pipe.
"""
import os

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests


def fork_and_return():
    if os.fork() == 0:
        return  # the child returns through the harness
    os.wait()


class SharedForkTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def test_a_forks(self):
        fork_and_return()

    def test_b_innocent(self):
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [2.0, 2.0])


class FreshForkTest(MultiProcessTestCase):
    world_size = 2

    def test_a_forks(self):
        fork_and_return()

    def test_b_innocent(self):
        pass


if __name__ == "__main__":
    run_tests()
