"""Two ranks that go different ways: the example behind docs/timeline.rst."""
import torch
import torch.distributed as dist

import continuous_test
from continuous_test import MultiProcContinuousTest


class TrainStepTest(MultiProcContinuousTest):
    world_size = 2

    @continuous_test.timeout(5)
    def test_step(self):
        grads = torch.ones(8)
        dist.all_reduce(grads)
        if self.rank == 0:
            dist.all_reduce(grads)  # rank 0 averages once more
        else:
            dist.broadcast(grads, src=0)  # rank 1 expects rank 0's copy
        dist.barrier()

    def test_shapes(self):
        batch = 8 if self.rank == 0 else 4  # the ranks disagree on the batch size
        dist.all_reduce(torch.ones(batch))
