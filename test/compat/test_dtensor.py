"""DTensor on a CPU device mesh, on one persistent world of 4 ranks.

Written as PyTorch's ``test/distributed/tensor`` tests are: the default group is
created by the class, each test builds its mesh with ``init_device_mesh("cpu", ...)``
and checks sharded results against the full tensor with ``assertEqual``.

``CT_COMPAT_BASE=ours`` (the default) takes the base class from ``continuous_test``,
``CT_COMPAT_BASE=torch`` keeps torch's.  This file runs under continuous_test's
``run_tests``, which runs torch's classes too.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.testing._internal.common_distributed import MultiProcContinuousTest

from continuous_test import run_tests

if os.environ.get("CT_COMPAT_BASE", "ours") == "ours":
    from continuous_test import MultiProcContinuousTest  # noqa: F811 - the migration


class DTensorCPUTest(MultiProcContinuousTest):
    world_size = 4

    @classmethod
    def backend_str(cls) -> str:
        return "gloo"

    @classmethod
    def device_type(cls) -> str:
        return "cpu"

    def test_shard_and_gather(self):
        mesh = init_device_mesh("cpu", (self.world_size,))
        full = torch.arange(16.0).reshape(8, 2)
        dt = distribute_tensor(full, mesh, [Shard(0)])
        self.assertEqual(dt.to_local(), full.chunk(self.world_size)[self.rank])
        self.assertEqual(dt.full_tensor(), full)

    def test_redistribute_shard_to_replicate(self):
        mesh = init_device_mesh("cpu", (self.world_size,))
        full = torch.randn(8, 4)
        dist.broadcast(full, src=0)
        sharded = distribute_tensor(full, mesh, [Shard(1)])
        replicated = sharded.redistribute(mesh, [Replicate()])
        self.assertEqual(replicated.to_local(), full)
        # DTensor against DTensor compares placements, then the local shards.
        self.assertEqual(replicated, distribute_tensor(full, mesh, [Replicate()]))

    def test_elementwise_and_reduction(self):
        mesh = init_device_mesh("cpu", (self.world_size,))
        full = torch.ones(8, 8)
        dt = distribute_tensor(full, mesh, [Shard(0)])
        out = (dt * 3 + 1).sum()
        self.assertIsInstance(out, DTensor)
        self.assertEqual(out.full_tensor(), torch.tensor(256.0))
        self.assertEqual(out.full_tensor().item(), 256)

    def test_2d_mesh(self):
        mesh = init_device_mesh("cpu", (2, self.world_size // 2), mesh_dim_names=("dp", "tp"))
        self.assertEqual(mesh["dp"].size(), 2)
        self.assertEqual(mesh["tp"].size(), self.world_size // 2)
        full = torch.arange(32.0).reshape(4, 8)
        dt = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
        self.assertEqual(dt.to_local().shape, torch.Size([2, 4]))
        self.assertEqual(dt.full_tensor(), full)
        tp_sum = torch.ones(1) * self.rank
        dist.all_reduce(tp_sum, group=mesh.get_group("tp"))
        self.assertEqual(tp_sum.item(), sum(r for r in range(self.world_size) if r // 2 == self.rank // 2))

    def test_2d_mesh_again(self):
        # The same mesh shape once more: the previous test's subgroups were released.
        mesh = init_device_mesh("cpu", (2, self.world_size // 2), mesh_dim_names=("dp", "tp"))
        dt = distribute_tensor(torch.ones(4, 4), mesh, [Replicate(), Shard(0)])
        self.assertEqual(dt.full_tensor(), torch.ones(4, 4))


if __name__ == "__main__":
    run_tests()
