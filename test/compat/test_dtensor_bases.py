"""DTensor tests on torch's derived bases, as PyTorch writes ``test/distributed/tensor``.

* ``DTensorTestBase`` with ``@with_comms`` (plain, ``eager_init=True`` and a
  ``backend=`` argument): a mesh from ``build_device_mesh()``, sharding,
  redistribution (shard, replicate, partial), a 2-D mesh, ``run_subtests`` over
  placements, a ``world_size`` property read through ``get_required_world_size``,
  a ``requires_world_size`` test and a ``skip_if_lt_x_gpu`` test (both skip on CPU).
* ``DTensorContinuousTestBase``: the same kind of bodies on one world of 4 ranks.
* ``DTensorOpTestBase``: threads as ranks on torch's fake threaded process group.

``CT_COMPAT_BASE=ours`` (the default) takes the bases from ``continuous_test`` by the
one import line below; ``CT_COMPAT_BASE=torch`` keeps torch's.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.testing._internal.common_distributed import get_required_world_size, requires_world_size, skip_if_lt_x_gpu
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed._tensor.common_dtensor import (
    DTensorContinuousTestBase,
    DTensorOpTestBase,
    DTensorTestBase,
    with_comms,
)

if os.environ.get("CT_COMPAT_BASE", "ours") == "ours":
    from continuous_test import (  # noqa: F811 - the migration
        DTensorContinuousTestBase,
        DTensorOpTestBase,
        DTensorTestBase,
        get_required_world_size,
        requires_world_size,
        skip_if_lt_x_gpu,
        with_comms,
    )


class RedistributeBodies:
    """Test bodies shared by the fresh-world and the continuous class."""

    def check_shard_and_gather(self):
        mesh = self.build_device_mesh()
        self.assertEqual(mesh.size(), self.world_size)
        self.assertEqual(mesh.get_local_rank(), self.rank)
        full = torch.arange(16.0).reshape(8, 2)
        dt = distribute_tensor(full, mesh, [Shard(0)])
        self.assertEqual(dt.to_local(), full.chunk(self.world_size)[self.rank])
        self.assertEqual(dt.full_tensor(), full)

    def check_shard_to_replicate(self):
        mesh = self.build_device_mesh()
        full = torch.randn(8, 4, device=self.device_type)
        dist.broadcast(full, src=0)
        replicated = distribute_tensor(full, mesh, [Shard(1)]).redistribute(mesh, [Replicate()])
        self.assertEqual(replicated.to_local(), full)
        self.assertEqual(replicated.placements, (Replicate(),))

    def check_partial_to_replicate(self):
        mesh = self.build_device_mesh()
        local = torch.full((3,), float(self.rank + 1))
        partial = DTensor.from_local(local, mesh, [Partial()])
        total = float(sum(range(1, self.world_size + 1)))
        self.assertEqual(partial.redistribute(mesh, [Replicate()]).to_local(), torch.full((3,), total))

    def check_placements(self, src, dst):
        mesh = self.build_device_mesh()
        full = torch.arange(64.0).reshape(8, 8)
        moved = distribute_tensor(full, mesh, [src]).redistribute(mesh, [dst])
        self.assertEqual(moved.placements, (dst,))
        self.assertEqual(moved.full_tensor(), full)

    def check_2d_mesh(self):
        mesh = init_device_mesh(self.device_type, (2, self.world_size // 2), mesh_dim_names=("dp", "tp"))
        full = torch.arange(32.0).reshape(4, 8)
        dt = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
        self.assertEqual(dt.to_local().shape, torch.Size([2, 4]))
        self.assertEqual(dt.redistribute(mesh, [Replicate(), Shard(1)]).full_tensor(), full)

    def check_run_subtests(self):
        placements = [Shard(0), Shard(1), Replicate()]
        self.run_subtests({"src": placements, "dst": placements}, self.check_placements)


class DTensorRedistributeTest(RedistributeBodies, DTensorTestBase):
    @property
    def world_size(self):
        return get_required_world_size(self, 4)

    @with_comms
    def test_mesh(self):
        mesh = self.build_device_mesh()
        self.assertEqual(self.device_type, "cpu")
        self.assertEqual(mesh.mesh.tolist(), list(range(self.world_size)))
        self.assertEqual(dist.get_world_size(), self.world_size)
        self.check_shard_and_gather()

    @with_comms
    def test_redistribute(self):
        self.check_shard_to_replicate()
        self.check_partial_to_replicate()

    @with_comms
    def test_2d_mesh(self):
        self.check_2d_mesh()

    @with_comms
    def test_redistribute_subtests(self):
        self.check_run_subtests()

    @with_comms(eager_init=True)
    def test_eager_init(self):
        self.assertTrue(dist.is_initialized())
        self.check_shard_and_gather()

    @with_comms(backend="gloo")
    def test_backend_argument(self):
        self.assertEqual(dist.get_backend(), "gloo")

    @requires_world_size(8)
    @with_comms
    def test_needs_eight_ranks(self):
        self.assertEqual(self.world_size, 8)

    @skip_if_lt_x_gpu(2)
    @with_comms
    def test_needs_two_gpus(self):
        self.assertEqual(self.device_type, "cuda")


class DTensorContinuousRedistributeTest(RedistributeBodies, DTensorContinuousTestBase):
    world_size = 4

    def test_shard_and_gather(self):
        self.check_shard_and_gather()

    def test_shard_to_replicate(self):
        self.check_shard_to_replicate()

    def test_partial_to_replicate(self):
        self.check_partial_to_replicate()

    def test_2d_mesh(self):
        self.check_2d_mesh()

    def test_redistribute_subtests(self):
        self.check_run_subtests()


class DTensorThreadedOpsTest(DTensorOpTestBase):
    def test_elementwise_and_sum(self):
        mesh = self.build_device_mesh()
        dt = distribute_tensor(torch.ones(8, 8), mesh, [Shard(0)])
        out = (dt * 3 + 1).sum()
        self.assertIsInstance(out, DTensor)
        self.assertEqual(out.full_tensor(), torch.tensor(256.0))

    def test_redistribute(self):
        mesh = self.build_device_mesh()
        full = torch.arange(32.0).reshape(8, 4)
        self.assertEqual(distribute_tensor(full, mesh, [Shard(1)]).redistribute(mesh, [Replicate()]).to_local(), full)


if __name__ == "__main__":
    run_tests()
