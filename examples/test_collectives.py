"""A small, realistic distributed test file: collectives and one DDP training step.

Runs unchanged as any of::

    python examples/test_collectives.py
    python -m pytest examples/test_collectives.py
    torchrun --nproc-per-node 2 examples/test_collectives.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from continuous_test import MultiProcContinuousTest, run_tests


class CollectivesTest(MultiProcContinuousTest):
    world_size = 2

    def test_all_reduce_sum(self):
        t = torch.arange(4, dtype=torch.float32) * (self.rank + 1)
        dist.all_reduce(t)
        self.assertEqual(t, torch.arange(4, dtype=torch.float32) * 3)

    def test_broadcast_from_rank_0(self):
        t = torch.full((2, 2), float(self.rank))
        dist.broadcast(t, src=0)
        self.assertEqual(t, torch.zeros(2, 2))

    def test_all_gather_object(self):
        gathered = [None] * self.world_size
        dist.all_gather_object(gathered, {"rank": self.rank})
        self.assertEqual(gathered, [{"rank": r} for r in range(self.world_size)])

    def test_ddp_step_keeps_replicas_in_sync(self):
        model = DDP(nn.Linear(4, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        inputs = torch.randn(8, 4) + self.rank  # different data on each rank
        model(inputs).sum().backward()
        optimizer.step()
        params = torch.cat([p.detach().flatten() for p in model.parameters()])
        gathered = [torch.empty_like(params) for _ in range(self.world_size)]
        dist.all_gather(gathered, params)
        self.assertEqual(gathered[0], gathered[1])


if __name__ == "__main__":
    run_tests()
