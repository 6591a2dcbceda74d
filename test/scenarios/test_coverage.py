"""Lines that run only inside ranks, for coverage runs (test/test_coverage_support.py)."""
import coverage_target
import pytest
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase


class InRanks(MultiProcContinuousTest):
    world_size = 2

    def test_continuous(self):
        self.assertEqual(coverage_target.in_continuous_rank(dist.get_rank()), 2 * self.rank + 1)


class FreshRanks(MultiProcessTestCase):
    world_size = 2

    def test_fresh(self):
        self.assertEqual(coverage_target.in_fresh_rank(self.rank), 3 * self.rank + 1)


def test_controller():
    assert coverage_target.in_controller() == "controller"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__]))
