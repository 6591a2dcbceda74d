"""Object collectives, subgroups, errors and torch's decorators, on one persistent world.

A ``MultiProcContinuousTest`` as PyTorch writes them (``test/distributed/test_c10d_*``):
class-level ``world_size``, ``backend_str``, ``timeout`` and an ``_init_pg`` override,
tests parametrized with ``instantiate_parametrized_tests``, torch's skip decorators
and ``TEST_SKIPS`` exit codes, ``assertRaisesRegex`` on an error raised by c10d, and
a test that mocks a c10d internal.

``CT_COMPAT_BASE=ours`` (the default) takes the base class from ``continuous_test``,
``CT_COMPAT_BASE=torch`` keeps torch's.
"""
import os
import sys
from datetime import timedelta
from unittest import mock

import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import (
    TEST_SKIPS,
    MultiProcContinuousTest,
    requires_gloo,
    requires_nccl,
    skip_if_lt_x_gpu,
)
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize, run_tests

if os.environ.get("CT_COMPAT_BASE", "ours") == "ours":
    from continuous_test import MultiProcContinuousTest  # noqa: F811 - the migration

OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


@instantiate_parametrized_tests
class CollectivesTest(MultiProcContinuousTest):
    world_size = 2
    timeout = timedelta(seconds=60)

    @classmethod
    def backend_str(cls) -> str:
        return "gloo"

    @classmethod
    def _init_pg(cls, rank, world_size, rdvz_file):
        super()._init_pg(rank, world_size, rdvz_file)
        # A group every test may use, created once per world.
        cls.reversed_group = dist.new_group(list(reversed(range(world_size))))

    def test_class_attributes(self):
        self.assertEqual(type(self).rank, self.rank)
        self.assertEqual(dist.get_rank(), self.rank)
        self.assertEqual(dist.get_world_size(), self.world_size)
        self.assertIs(type(self).pg, dist.distributed_c10d._get_default_group())
        self.assertEqual(dist.get_backend(), "gloo")

    def test_all_gather_object(self):
        gathered = [None] * self.world_size
        dist.all_gather_object(gathered, {"rank": self.rank, "data": [self.rank] * 3})
        self.assertEqual(gathered, [{"rank": r, "data": [r] * 3} for r in range(self.world_size)])

    def test_broadcast_object_list(self):
        objects = [{"step": 7, "lr": 0.5}, "hello", torch.arange(3)] if self.rank == 0 else [None, None, None]
        dist.broadcast_object_list(objects, src=0)
        self.assertEqual(objects, [{"step": 7, "lr": 0.5}, "hello", torch.arange(3)])

    def test_scatter_and_gather_object(self):
        received = [None]
        inputs = [f"for rank {r}" for r in range(self.world_size)] if self.rank == 0 else None
        dist.scatter_object_list(received, inputs, src=0)
        self.assertEqual(received[0], f"for rank {self.rank}")
        gathered = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(self.rank * 10, gathered, dst=0)
        if self.rank == 0:
            self.assertEqual(gathered, [r * 10 for r in range(self.world_size)])

    def test_subgroups(self):
        # new_group must be called by every rank, for every group, in the same order.
        groups = [dist.new_group([r]) for r in range(self.world_size)]
        t = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(t, group=groups[self.rank])
        self.assertEqual(t, torch.tensor([float(self.rank + 1)]))
        dist.all_reduce(t, group=type(self).reversed_group)
        self.assertEqual(t.item(), sum(range(1, self.world_size + 1)))
        # new_group sorts the ranks it is given.
        self.assertEqual(dist.get_process_group_ranks(type(self).reversed_group), list(range(self.world_size)))

    def test_error_raised_by_c10d(self):
        with self.assertRaisesRegex(RuntimeError, "invalid root rank"):
            dist.broadcast(torch.ones(1), src=self.world_size + 3)

    @mock.patch.object(dist.distributed_c10d, "_warn_not_in_group")
    def test_mocked_internal(self, warn):
        group = dist.new_group([0])
        t = torch.ones(1)
        dist.all_reduce(t, group=group)
        self.assertEqual(warn.call_count, 0 if self.rank == 0 else 1)

    @parametrize("op", list(OPS))
    @parametrize("dtype", [torch.float32, torch.int64])
    def test_all_reduce(self, op, dtype):
        t = torch.full((4,), self.rank + 1, dtype=dtype)
        dist.all_reduce(t, op=OPS[op])
        expected = sum(range(1, self.world_size + 1)) if op == "sum" else self.world_size
        self.assertEqual(t, torch.full((4,), expected, dtype=dtype))
        self.assertEqual(t.tolist(), [expected] * 4)

    @requires_gloo()
    def test_requires_gloo(self):
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(t, [2.0, 2.0])

    @requires_nccl()
    def test_requires_nccl(self):
        # Runs wherever the build has NCCL (a CUDA build, with or without a GPU); skipped elsewhere.
        self.assertTrue(dist.is_nccl_available())

    @skip_if_lt_x_gpu(2)
    def test_two_gpus(self):
        self.fail("runs only with 2 GPUs")

    def test_skip_with_torch_exit_code(self):
        if self.world_size < 4:
            sys.exit(TEST_SKIPS["small_worldsize"].exit_code)
        self.fail("the world has 2 ranks")


if __name__ == "__main__":
    run_tests()
