"""State-dict parity under replicate and DDP, written as PyTorch writes it.

A torch-style ``MultiProcessTestCase``: ranks start in ``setUp`` and every test
creates its own process group on ``self.file_name``.  Modeled on
``test/distributed/_composable/test_replicate.py``.

The one-line migration: with ``CT_COMPAT_BASE=ours`` (the default) the base class
comes from ``continuous_test``; with ``CT_COMPAT_BASE=torch`` it stays torch's.
"""
import os
import signal
import sys
from copy import deepcopy

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._composable.replicate import replicate
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.testing._internal.common_distributed import MultiProcessTestCase, skip_if_lt_x_gpu
from torch.testing._internal.common_utils import run_tests

if os.environ.get("CT_COMPAT_BASE", "ours") == "ours":
    from continuous_test import MultiProcessTestCase  # noqa: F811 - the migration


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, 10, bias=False)
        self.fc2 = nn.Linear(10, 50, bias=False)
        self.fc3 = nn.Linear(50, 4, bias=False)

    def forward(self, x):
        return self.fc3(self.fc2(self.fc1(x)))


class ReplicateStateDictTest(MultiProcessTestCase):
    @property
    def world_size(self) -> int:
        return 2

    def setUp(self) -> None:
        super().setUp()
        # Negative tests, declared torch's way (the decorators give __wrapped__).
        self.special_return_code_checks = {self.test_abort_is_expected.__wrapped__: -signal.SIGABRT}
        self.skip_return_code_checks = [self.test_exit_code_not_checked.__wrapped__]
        self._spawn_processes()

    def tearDown(self):
        super().tearDown()
        try:
            os.remove(self.file_name)
        except OSError:
            pass

    def _init_pg(self):
        dist.init_process_group(
            backend="gloo",
            rank=self.rank,
            world_size=self.world_size,
            store=dist.FileStore(self.file_name, self.world_size),
        )

    def _check_state_dict_parity(self, sd_1, sd_2):
        for k1, k2 in zip(sd_1.keys(), sd_2.keys()):
            self.assertEqual(k1, k2)
        for v1, v2 in zip(sd_1.values(), sd_2.values()):
            self.assertEqual(v1, v2)

    def test_replicate_single_module_save_load(self):
        self._init_pg()
        model = Net()
        replicate_model = replicate(deepcopy(model))
        local_model = deepcopy(model)
        self._check_state_dict_parity(replicate_model.state_dict(), local_model.state_dict())

    def test_ddp_matches_local_training(self):
        self._init_pg()
        torch.manual_seed(0)
        model = Net()
        ddp_model = DDP(deepcopy(model))
        local_model = deepcopy(model)
        ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        local_opt = torch.optim.SGD(local_model.parameters(), lr=0.1)
        # Every rank sees its own slice of the batch; the local model sees all of it.
        batch = torch.randn(2 * self.world_size, 2)
        mine = batch.chunk(self.world_size)[self.rank]
        for _ in range(3):
            ddp_opt.zero_grad()
            ddp_model(mine).sum().backward()
            ddp_opt.step()
            local_opt.zero_grad()
            (local_model(batch).sum() / self.world_size).backward()
            local_opt.step()
        # An OrderedDict against a plain dict, tensors compared elementwise.
        self.assertEqual(ddp_model.module.state_dict(), dict(local_model.state_dict()))
        self.assertNotEqual(ddp_model.module.state_dict(), model.state_dict())
        self.assertEqual(ddp_model.module.fc1.weight.sum(), local_model.fc1.weight.sum().item(), rtol=1e-5, atol=1e-6)

    @skip_if_lt_x_gpu(2, allow_cpu=True)
    def test_abort_is_expected(self):
        self._init_pg()
        dist.barrier()
        os.abort()

    @skip_if_lt_x_gpu(2, allow_cpu=True)
    def test_exit_code_not_checked(self):
        sys.exit(3 + self.rank)


if __name__ == "__main__":
    run_tests()
