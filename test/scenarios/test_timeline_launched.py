"""Divergent ranks under torchrun: the time-limit report and the merged verdict show the timeline."""
import torch
import torch.distributed as dist

import continuous_test
from continuous_test import MultiProcContinuousTest, run_tests


class LaunchedDivergeTest(MultiProcContinuousTest):
    world_size = 2

    def test_a_different_shapes(self):
        dist.all_gather_object([None, None], self.rank)
        dist.all_reduce(torch.ones((2, 4) if self.rank == 0 else (4, 2)))  # same bytes: gloo does not notice
        self.assertEqual(self.rank, 0)

    @continuous_test.timeout(4)
    def test_b_different_collectives(self):
        t = torch.ones(8)
        if self.rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, src=1)


if __name__ == "__main__":
    run_tests()
