"""Tests on the bases torch derives inside its own testing modules, as PyTorch writes them.

* ``DynamoDistributedMultiProcTestCase`` (``test/distributed/test_dynamo_distributed.py``,
  ``test_inductor_collectives.py``): a ``world_size`` property returning 2, a group
  made by ``create_pg``, ``_dynamo_dist_per_rank_init`` and a compiled function with a
  functional collective (``backend="eager"``), and a ``@skip_if_lt_x_gpu(2)`` test.
* ``C10dTorchCommsTestBase`` (``test/distributed/test_c10d_torchcomms.py``): a class
  skipped where torchcomms is missing, as upstream marks it, and one that is not
  marked, whose ``setUp`` skips each test where torchcomms lacks the backend.
* ``ShardedTensorTestBase`` (``test/distributed/_shard/sharded_tensor``): a sharded
  tensor made and compared under ``@with_comms(init_rpc=False, backend="gloo")``, and
  a default ``@with_comms`` (nccl) test, a skip without 2 accelerators.

``CT_COMPAT_BASE=ours`` (the default) takes the bases from ``continuous_test`` by the
one import line below; ``CT_COMPAT_BASE=torch`` keeps torch's.  ``CT_EXPECT_ENGINE``
(default: ``CT_COMPAT_BASE``) is the engine each test checks its class is on, in
its rank.
"""
import logging
import os
import unittest

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed._shard import sharded_tensor
from torch.distributed._shard.sharding_spec import ChunkShardingSpec
from torch.distributed.distributed_c10d import _TORCHCOMM_AVAILABLE
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_distributed import (
    C10dTorchCommsTestBase,
    DynamoDistributedMultiProcTestCase,
    _dynamo_dist_per_rank_init,
    skip_if_lt_x_gpu,
)
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed._shard.sharded_tensor import ShardedTensorTestBase, with_comms

BASE = os.environ.get("CT_COMPAT_BASE", "ours")
if BASE == "ours":
    from continuous_test import (  # noqa: F811 - the migration
        C10dTorchCommsTestBase,
        DynamoDistributedMultiProcTestCase,
        ShardedTensorTestBase,
    )

EXPECTED_ENGINE = os.environ.get("CT_EXPECT_ENGINE", BASE)


def engine(cls):
    """``ours`` when ``cls`` runs on continuous_test's engine, else ``torch``."""
    return "ours" if any(c.__module__.startswith("continuous_test.") for c in cls.__mro__) else "torch"


class DynamoMultiProcTest(DynamoDistributedMultiProcTestCase):
    device = "cpu"

    @property
    def world_size(self) -> int:
        return 2

    def test_engine_and_torchs_entry(self):
        self.assertEqual(engine(type(self)), EXPECTED_ENGINE)
        # torch's own _run entered this rank: it quiets the trace log first.
        from torch._logging._internal import trace_log

        self.assertTrue(any(isinstance(h, logging.NullHandler) for h in trace_log.handlers))

    def test_compiled_functional_all_reduce(self):
        self.create_pg("cpu")
        with _dynamo_dist_per_rank_init(self.rank, self.world_size, init_pg=False, fake_pg=True):

            @torch.compile(backend="eager", fullgraph=True)
            def reduce_and_scale(x):
                return funcol.all_reduce(x * 2, "sum", dist.group.WORLD) + 1

            out = reduce_and_scale(torch.full((3,), float(self.rank + 1)))
        self.assertEqual(out, torch.full((3,), 7.0))
        dist.destroy_process_group()

    @skip_if_lt_x_gpu(2)
    def test_needs_two_gpus(self):
        self.create_pg(self.device)


class TorchCommsUnmarkedTest(C10dTorchCommsTestBase):
    world_size = 2

    def test_all_reduce(self):
        t = torch.ones(2) * (self.rank + 1)
        dist.all_reduce(t, group=self.pg)
        self.assertEqual(t, torch.full((2,), 3.0))

    def test_engine_in_rank(self):
        self.assertEqual(engine(type(self)), EXPECTED_ENGINE)


@unittest.skipIf(not _TORCHCOMM_AVAILABLE, "TorchComms is not installed")
class TorchCommsBasic(C10dTorchCommsTestBase):
    world_size = 2

    def test_broadcast(self):
        t = torch.tensor([float(self.rank + 1)])
        dist.broadcast(t, src=0, group=self.pg)
        self.assertEqual(t.item(), 1.0)


instantiate_device_type_tests(TorchCommsBasic, globals(), only_for=["cpu"])


class ShardedTest(ShardedTensorTestBase):
    @property
    def world_size(self):
        return 2

    def _spec(self):
        return ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(self.world_size)])

    @with_comms(init_rpc=False, backend="gloo")
    def test_sharded_tensor_on_gloo(self):
        self.assertEqual(engine(type(self)), EXPECTED_ENGINE)
        st = sharded_tensor.full(self._spec(), (4, 3), float(self.rank))
        self.assertEqual(len(st.local_shards()), 1)
        local = st.local_shards()[0]
        self.assertEqual(local.metadata.shard_offsets, [2 * self.rank, 0])
        self.assertEqual(local.tensor, torch.full((2, 3), float(self.rank)))
        self.assertEqual(st.metadata(), sharded_tensor.full(self._spec(), (4, 3), 0.0).metadata())

    @with_comms
    def test_default_backend_needs_gpus(self):
        pass


if __name__ == "__main__":
    run_tests()
