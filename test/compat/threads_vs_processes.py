"""The same ``DTensorOpTestBase``-style bodies on threads (torch's) and on a process world.

``CT_THREADS_SHAPE=threads`` runs them as torch does: 4 threads as ranks on the fake
threaded process group, one interpreter.  ``CT_THREADS_SHAPE=processes`` runs the
same bodies on continuous_test's ``DTensorContinuousTestBase``: one world of 4 rank
processes with gloo.  ``benchmarks/derived_bases.py`` times both, to decide whether
threaded files should move to processes.

``SharedStateTest`` holds two bodies that depend on what threads share: one CPU RNG
(a tensor made with ``torch.randn`` differs between threads, while seeded processes
agree) and module globals (every thread appends to the same list).  Their verdicts
change with the shape; the benchmark reports them.  Not a test file (it is not
named ``test_*``): run it by hand, e.g.::

    CT_THREADS_SHAPE=processes python test/compat/threads_vs_processes.py
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.testing._internal.common_utils import run_tests

SHAPE = os.environ.get("CT_THREADS_SHAPE", "threads")
if SHAPE == "threads":
    from torch.testing._internal.distributed._tensor.common_dtensor import DTensorOpTestBase as Base
else:
    from continuous_test import DTensorContinuousTestBase as Base

SEEN_RANKS = []  # module global: one list per process


class OpBodies:
    """Ten op tests in the style of test/distributed/tensor/test_*_ops.py."""

    def test_add(self):
        mesh = self.build_device_mesh()
        a = distribute_tensor(torch.ones(8, 4), mesh, [Shard(0)])
        self.assertEqual((a + a).full_tensor(), torch.full((8, 4), 2.0))

    def test_mul_scalar(self):
        mesh = self.build_device_mesh()
        a = distribute_tensor(torch.arange(16.0).reshape(8, 2), mesh, [Shard(0)])
        self.assertEqual((a * 3).full_tensor(), torch.arange(16.0).reshape(8, 2) * 3)

    def test_sum(self):
        mesh = self.build_device_mesh()
        out = distribute_tensor(torch.ones(8, 8), mesh, [Shard(0)]).sum()
        self.assertIsInstance(out, DTensor)
        self.assertEqual(out.full_tensor(), torch.tensor(64.0))

    def test_mean_dim(self):
        mesh = self.build_device_mesh()
        full = torch.arange(32.0).reshape(8, 4)
        self.assertEqual(distribute_tensor(full, mesh, [Shard(1)]).mean(0).full_tensor(), full.mean(0))

    def test_matmul_replicate(self):
        mesh = self.build_device_mesh()
        a, b = torch.ones(4, 8), torch.ones(8, 4)
        out = distribute_tensor(a, mesh, [Shard(0)]) @ distribute_tensor(b, mesh, [Replicate()])
        self.assertEqual(out.full_tensor(), a @ b)

    def test_transpose(self):
        mesh = self.build_device_mesh()
        full = torch.arange(32.0).reshape(8, 4)
        self.assertEqual(distribute_tensor(full, mesh, [Shard(0)]).t().full_tensor(), full.t())

    def test_view(self):
        mesh = self.build_device_mesh()
        full = torch.arange(64.0).reshape(8, 8)
        self.assertEqual(distribute_tensor(full, mesh, [Shard(0)]).view(8, 2, 4).full_tensor(), full.view(8, 2, 4))

    def test_shard_to_replicate(self):
        mesh = self.build_device_mesh()
        full = torch.arange(32.0).reshape(8, 4)
        moved = distribute_tensor(full, mesh, [Shard(1)]).redistribute(mesh, [Replicate()])
        self.assertEqual(moved.to_local(), full)

    def test_shard_to_shard(self):
        mesh = self.build_device_mesh()
        full = torch.arange(64.0).reshape(8, 8)
        moved = distribute_tensor(full, mesh, [Shard(0)]).redistribute(mesh, [Shard(1)])
        self.assertEqual(moved.full_tensor(), full)

    def test_relu_backward(self):
        mesh = self.build_device_mesh()
        full = torch.arange(-16.0, 16.0).reshape(8, 4).requires_grad_()
        dt = distribute_tensor(full.detach(), mesh, [Shard(0)]).requires_grad_()
        dt.relu().sum().backward()
        self.assertEqual(dt.grad.full_tensor(), (full > 0).float())


class OpsTest(OpBodies, Base):
    world_size = 4


class SharedStateTest(Base):
    world_size = 4

    def test_randn_round_trip(self):
        # distribute_tensor scatters rank 0's tensor; every rank compares with its own.
        mesh = self.build_device_mesh()
        full = torch.randn(8, 4)
        self.assertEqual(distribute_tensor(full, mesh, [Shard(0)]).full_tensor(), full)

    def test_module_global(self):
        SEEN_RANKS.append(self.rank)
        dist.barrier()
        self.assertEqual(sorted(SEEN_RANKS), list(range(self.world_size)))


if __name__ == "__main__":
    run_tests()
