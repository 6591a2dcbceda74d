"""Tests a subclass inherits run again in the subclass's own world, of its own size.

``SumTest`` (2 ranks) defines two tests; ``SumTestOfThree`` inherits them and runs them
in a world of 3.  Each test checks the size of the world it runs in through a
collective, and which class it runs for: an inherited test run in the other
class's world would fail.  With ``RUNS_DIR`` set, each run leaves a file there:
each test runs once on each rank of its own class's world.  Under unittest's
runners ``load_tests`` puts all four in one flat suite, as some files do, so the
test after ``SumTest.test_b_size`` is one of another class.
"""
import os
import unittest

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests


class SumTest(MultiProcContinuousTest):
    world_size = 2
    expected = ("SumTest", 2)

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def setUp(self):
        super().setUp()
        folder = os.environ.get("RUNS_DIR")
        if folder:
            with open(os.path.join(folder, f"{self.id()}-{self.rank}"), "a") as f:
                f.write(f"{type(self).__name__}\n")

    def test_a_sum(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual((type(self).__name__, int(t.item())), self.expected)

    def test_b_size(self):
        self.assertEqual((type(self).__name__, dist.get_world_size()), self.expected)


class SumTestOfThree(SumTest):
    world_size = 3
    expected = ("SumTestOfThree", 3)


def load_tests(loader, tests, pattern):
    return unittest.TestSuite(test for cls in (SumTest, SumTestOfThree) for test in loader.loadTestsFromTestCase(cls))


if __name__ == "__main__":
    run_tests()
