"""FSDP tests on torch's derived bases, as PyTorch writes ``test/distributed/_composable/fsdp``.

* ``FSDPTest`` and ``FSDPTestContinuous``: a ``fully_shard`` training step checked
  against a replicated reference, and ``run_subtests`` over ``reshard_after_forward``.
  torch skips both bases on a machine without accelerators (its per-rank preamble
  compares ``torch.accelerator.device_count()`` with the world size), so on CPU
  every test of theirs is a skip, under torch's classes and ours alike.
* The same training step on CPU with gloo, on ``DTensorTestBase`` with ``@with_comms``,
  which runs on CPU.
* ``FSDPTestMultiThread``: ``fully_shard`` on threads as ranks.

``CT_COMPAT_BASE=ours`` (the default) takes the bases from ``continuous_test`` by the
one import line below; ``CT_COMPAT_BASE=torch`` keeps torch's.
"""
import copy
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.testing._internal.common_fsdp import MLP, FSDPTest, FSDPTestContinuous, FSDPTestMultiThread
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed._tensor.common_dtensor import DTensorTestBase, with_comms

if os.environ.get("CT_COMPAT_BASE", "ours") == "ours":
    from continuous_test import (  # noqa: F811 - the migration
        DTensorTestBase,
        FSDPTest,
        FSDPTestContinuous,
        FSDPTestMultiThread,
        with_comms,
    )


class TrainingBodies:
    """A ``fully_shard`` training step against a replicated reference, on any base."""

    def check_train_step(self, reshard_after_forward=True):
        torch.manual_seed(42)
        model = nn.Sequential(MLP(16, torch.device("cpu")), MLP(16, torch.device("cpu")))
        reference = copy.deepcopy(model)
        for layer in model:
            fully_shard(layer, reshard_after_forward=reshard_after_forward)
        fully_shard(model, reshard_after_forward=reshard_after_forward)
        self.assertIsInstance(next(model.parameters()), DTensor)
        optim = torch.optim.SGD(model.parameters(), lr=0.1)
        ref_optim = torch.optim.SGD(reference.parameters(), lr=0.1)
        torch.manual_seed(self.rank + 1)  # each rank trains on its own batch
        for _ in range(2):
            batch = torch.randn(4, 16)
            loss = model(batch).sum()
            loss.backward()
            optim.step()
            optim.zero_grad()
            ref_loss = reference(batch).sum()
            ref_loss.backward()
            for param in reference.parameters():  # the replicated reference averages gradients
                dist.all_reduce(param.grad, op=dist.ReduceOp.AVG)
            ref_optim.step()
            ref_optim.zero_grad()
            self.assertEqual(loss, ref_loss)
        for param, ref_param in zip(model.parameters(), reference.parameters()):
            self.assertEqual(param.full_tensor(), ref_param)

    def check_reshard_subtests(self):
        self.run_subtests({"reshard_after_forward": [True, False]}, self.check_train_step)


class FSDPTrainingTest(TrainingBodies, FSDPTest):
    @property
    def world_size(self):
        return 2

    def test_train_step(self):
        self.check_train_step()

    def test_reshard_subtests(self):
        self.check_reshard_subtests()


class FSDPContinuousTrainingTest(TrainingBodies, FSDPTestContinuous):
    world_size = 2

    def test_train_step(self):
        self.check_train_step()

    def test_reshard_subtests(self):
        self.check_reshard_subtests()


class FSDPOnCPUTest(TrainingBodies, DTensorTestBase):
    @property
    def world_size(self):
        return 2

    @with_comms
    def test_train_step(self):
        self.check_train_step()

    @with_comms
    def test_reshard_subtests(self):
        self.check_reshard_subtests()


class FSDPThreadedInitTest(FSDPTestMultiThread):
    @property
    def world_size(self):
        return 2

    def test_fully_shard_shards_dim_0(self):
        model = MLP(8, torch.device("cpu"))
        fully_shard(model)
        for param in model.parameters():
            self.assertIsInstance(param, DTensor)
            self.assertEqual(param.to_local().shape[0], (param.shape[0] + 1) // 2)


if __name__ == "__main__":
    run_tests()
