"""A torch-only DTensor, FSDP, sharded tensor and dynamo file, migrated by its directory's ``conftest.py`` alone.

The file imports nothing from ``continuous_test``.  Under pytest with the
``conftest.py`` of this directory its bases are continuous_test's; with
``--noconftest`` they stay torch's.  ``CT_EXPECT_ENGINE=ours|torch`` says which one the
run must see, and the tests check it where the test body runs: in the ranks.  Run as
a script (no conftest.py), the file keeps torch's bases: ``CT_EXPECT_ENGINE=torch``.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.testing._internal.common_distributed import DynamoDistributedMultiProcTestCase, MultiProcContinuousTest
from torch.testing._internal.common_fsdp import FSDPTest
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed._tensor.common_dtensor import (
    DTensorContinuousTestBase,
    DTensorTestBase,
    with_comms,
)
from torch.testing._internal.distributed._shard.sharded_tensor import ShardedTensorTestBase
from torch.testing._internal.distributed._shard.sharded_tensor import with_comms as with_sharded_comms

EXPECTED_ENGINE = os.environ.get("CT_EXPECT_ENGINE", "ours")


def engine(cls):
    """``ours`` when ``cls`` runs on continuous_test's engine, else ``torch``."""
    return "ours" if any(c.__module__.startswith("continuous_test.") for c in cls.__mro__) else "torch"


class MigratedFreshTest(DTensorTestBase):
    @property
    def world_size(self):
        return 2

    @with_comms
    def test_engine_in_rank(self):
        self.assertEqual(engine(type(self)), EXPECTED_ENGINE)

    @with_comms
    def test_redistribute(self):
        mesh = self.build_device_mesh()
        full = torch.arange(8.0).reshape(4, 2)
        self.assertEqual(distribute_tensor(full, mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).to_local(), full)


class MigratedContinuousTest(DTensorContinuousTestBase):
    world_size = 2

    def test_engine_in_rank(self):
        self.assertEqual(engine(type(self)), EXPECTED_ENGINE)
        self.assertEqual(engine(MultiProcContinuousTest), EXPECTED_ENGINE)

    def test_all_reduce(self):
        t = torch.ones(2) * (self.rank + 1)
        dist.all_reduce(t)
        self.assertEqual(t, torch.full((2,), 3.0))


class MigratedFSDPTest(FSDPTest):
    def test_skipped_on_cpu(self):
        self.assertEqual(engine(type(self)), EXPECTED_ENGINE)


class MigratedShardedTest(ShardedTensorTestBase):
    """A base torch derives in a helper module of its own: migrated too, in the controller and the ranks."""

    @property
    def world_size(self):
        return 2

    @with_sharded_comms(init_rpc=False, backend="gloo")
    def test_engine_in_rank(self):
        self.assertEqual(engine(type(self)), EXPECTED_ENGINE)
        self.assertEqual(engine(ShardedTensorTestBase), EXPECTED_ENGINE)


class MigratedDynamoTest(DynamoDistributedMultiProcTestCase):
    @property
    def world_size(self):
        return 2

    def test_engine_in_rank(self):
        self.assertEqual(engine(type(self)), EXPECTED_ENGINE)


if __name__ == "__main__":
    run_tests()
