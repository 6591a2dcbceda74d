"""DTensor tests with LocalTensor variants, as PyTorch writes ``test/distributed/tensor`` now.

Each class is defined once on a real-process base and copied by torch's
``create_local_tensor_test_class`` onto the base that runs every rank inside one
process (``fake`` backend, ``LocalTensorMode``): ``LocalDTensorTestBase`` (the
default), ``LocalDTensorContinuousTestBase`` and ``LocalDTensorOpTestBase``, with
one test left out by ``skipped_tests``.  The copies run as torch runs them, in
the process that runs the file, also when the original derives from
continuous_test's bases.

``CT_COMPAT_BASE=ours`` (the default) takes the bases from ``continuous_test`` by the
one import line below; ``CT_COMPAT_BASE=torch`` keeps torch's.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed._tensor.common_dtensor import (
    DTensorContinuousTestBase,
    DTensorOpTestBase,
    DTensorTestBase,
    LocalDTensorContinuousTestBase,
    LocalDTensorOpTestBase,
    create_local_tensor_test_class,
    with_comms,
)

if os.environ.get("CT_COMPAT_BASE", "ours") == "ours":
    from continuous_test import DTensorContinuousTestBase, DTensorOpTestBase, DTensorTestBase, with_comms  # noqa: F811


class Bodies:
    def check_shard_and_gather(self):
        mesh = self.build_device_mesh()
        full = torch.arange(16.0).reshape(8, 2)
        dt = distribute_tensor(full, mesh, [Shard(0)])
        self.assertEqual(dt.to_local().shape, torch.Size([8 // self.world_size, 2]))
        self.assertEqual(dt.full_tensor(), full)

    def check_shard_to_replicate(self):
        mesh = self.build_device_mesh()
        full = torch.arange(32.0).reshape(8, 4)
        replicated = distribute_tensor(full, mesh, [Shard(1)]).redistribute(mesh, [Replicate()])
        self.assertEqual(replicated.to_local(), full)
        self.assertEqual(replicated.placements, (Replicate(),))

    def check_partial_to_replicate(self):
        mesh = self.build_device_mesh()
        partial = DTensor.from_local(torch.ones(3), mesh, [Partial()])
        self.assertEqual(partial.redistribute(mesh, [Replicate()]).to_local(), torch.full((3,), float(self.world_size)))


class DistTensorTest(Bodies, DTensorTestBase):
    @property
    def world_size(self):
        return 2

    @with_comms
    def test_shard_and_gather(self):
        self.check_shard_and_gather()

    @with_comms
    def test_redistribute(self):
        self.check_shard_to_replicate()
        self.check_partial_to_replicate()

    @with_comms
    def test_real_processes_only(self):
        self.assertEqual(dist.get_backend(), "gloo")


class DistTensorContinuousTest(Bodies, DTensorContinuousTestBase):
    world_size = 2

    def test_shard_and_gather(self):
        self.check_shard_and_gather()

    def test_redistribute(self):
        self.check_shard_to_replicate()
        self.check_partial_to_replicate()


class DistTensorOpTest(Bodies, DTensorOpTestBase):
    @property
    def world_size(self):
        return 2

    @with_comms
    def test_shard_and_gather(self):
        self.check_shard_and_gather()

    @with_comms
    def test_redistribute(self):
        self.check_shard_to_replicate()


DistTensorTestWithLocalTensor = create_local_tensor_test_class(
    DistTensorTest, skipped_tests=["test_real_processes_only"])
DistTensorContinuousTestWithLocalTensor = create_local_tensor_test_class(
    DistTensorContinuousTest, base_class=LocalDTensorContinuousTestBase)
DistTensorOpTestWithLocalTensor = create_local_tensor_test_class(DistTensorOpTest, base_class=LocalDTensorOpTestBase)


if __name__ == "__main__":
    run_tests()
