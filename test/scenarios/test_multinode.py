"""A 4-rank class for launches across two (simulated) nodes: torchrun or srun."""
import os

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests


class FourRankTest(MultiProcContinuousTest):
    world_size = 4

    def test_all_reduce_across_nodes(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 4.0)

    def test_device_from_local_rank(self):
        per_node = int(os.environ["LOCAL_WORLD_SIZE"])
        self.assertEqual(int(os.environ["LOCAL_RANK"]), self.rank % per_node)
        self.assertEqual(self.device, torch.device("cpu"))

    def test_fails_on_rank_3(self):
        self.assertNotEqual(self.rank, 3, "rank 3 fails on purpose")


if __name__ == "__main__":
    run_tests()
