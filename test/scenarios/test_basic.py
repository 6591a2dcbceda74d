"""Positive tests that every launch mode must report as passed."""
import random

import numpy as np
import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests
from continuous_test.rank.run import SEED


class AllReduceTest(MultiProcContinuousTest):
    world_size = 2

    def test_sum(self):
        t = torch.ones(3) * (self.rank + 1)
        dist.all_reduce(t)
        self.assertEqual(t, torch.full((3,), 3.0))

    def test_rank_and_world(self):
        self.assertEqual(dist.get_rank(), self.rank)
        self.assertEqual(dist.get_world_size(), 2)
        self.assertEqual(self.world_size, 2)
        self.assertEqual(self.device, torch.device("cpu"))

    def test_same_seed_on_every_rank(self):
        values = torch.tensor([torch.rand(1).item(), random.random(), float(np.random.rand())], dtype=torch.float64)
        gathered = [torch.zeros(3, dtype=torch.float64) for _ in range(self.world_size)]
        dist.all_gather(gathered, values)
        self.assertEqual(gathered[0], gathered[1])

    def test_seed_is_reset_before_each_test(self):
        first = torch.rand(4)
        torch.manual_seed(SEED)
        self.assertEqual(first, torch.rand(4))
        torch.rand(100)  # leave the generator advanced; the next test must not see it


class PropertyWorldSizeTest(MultiProcContinuousTest):
    @property
    def world_size(self):
        return 3

    def test_three_ranks(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 3.0)
        self.assertEqual(dist.get_world_size(), 3)


if __name__ == "__main__":
    run_tests()
