"""torch's counts: a class with no ``world_size``, and a rank's failed assertion.

Written as PyTorch writes ``tensor/test_optimizers.py``: a ``DTensorContinuousTestBase``
and a ``MultiProcContinuousTest`` with no ``world_size``, which torch runs on the
device count of the device type (1 on CPU), and a test that fails on one rank, which
torch's parent process reports as an error.  The file runs torch's ``run_tests``, so
continuous_test's classes keep torch's defaults (``config.keeps_torch_defaults``);
``CT_RUNNER=ours`` runs continuous_test's ``run_tests`` instead, and the plain class
takes this library's own defaults (2 ranks on CPU; a failed assertion is a failure),
while ``DTensorContinuousTestBase``, one of torch's bases, keeps torch's.  (A test
after the failing one would be a skip under torch, whose ranks poison the rest of the
class after a failure, and a pass here: a documented difference, not tested here.)

``CT_COMPAT_BASE=ours`` (the default) takes the base classes from ``continuous_test``,
``CT_COMPAT_BASE=torch`` keeps torch's.
"""
import os

import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcContinuousTest
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed._tensor.common_dtensor import DTensorContinuousTestBase

if os.environ.get("CT_COMPAT_BASE", "ours") == "ours":
    from continuous_test import DTensorContinuousTestBase, MultiProcContinuousTest  # noqa: F811 - the migration
if os.environ.get("CT_RUNNER") == "ours":
    from continuous_test import run_tests  # noqa: F811 - a file written for continuous_test


class UnsizedTest(MultiProcContinuousTest):
    def test_world_size(self):
        print(f"UnsizedTest world size {dist.get_world_size()}", flush=True)


class UnsizedDTensorTest(DTensorContinuousTestBase):
    def test_world_size(self):
        print(f"UnsizedDTensorTest world size {dist.get_world_size()}", flush=True)


class FailsOnOneRankTest(MultiProcContinuousTest):
    world_size = 2

    def test_rank_1_fails(self):
        self.assertEqual(self.rank, 0)


if __name__ == "__main__":
    run_tests()
