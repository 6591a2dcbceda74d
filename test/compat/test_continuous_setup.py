"""``FSDPTestContinuous``'s ``setUp`` and ``tearDown`` run in every rank here, not in torch.

torch's class runs them only in its main process (where the barrier is skipped), so
the per-test barrier, dynamo reset and seeding it defines never reach a rank.  Each
test here looks for that ``setUp`` from inside a rank.  It passes on continuous_test's
class and fails on torch's: a difference that fixes a torch defect.  The class
creates its group past torch's accelerator check, so that it runs on CPU with gloo.
"""
import os

import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcContinuousTest
from torch.testing._internal.common_fsdp import FSDPTestContinuous
from torch.testing._internal.common_utils import run_tests

if os.environ.get("CT_COMPAT_BASE", "ours") == "ours":
    from continuous_test import FSDPTestContinuous, MultiProcContinuousTest  # noqa: F811 - the migration

RESETS = []  # one entry per torch._dynamo.reset() call in this process
_dynamo_reset = torch._dynamo.reset


def counting_reset():
    RESETS.append(dist.get_rank() if dist.is_initialized() else None)
    _dynamo_reset()


torch._dynamo.reset = counting_reset


class SetUpOnRanksTest(FSDPTestContinuous):
    world_size = 2

    @classmethod
    def _init_pg(cls, rank, world_size, rdvz_file):
        MultiProcContinuousTest._init_pg.__func__(cls, rank, world_size, rdvz_file)

    def test_setup_reset_dynamo_in_this_rank(self):
        self.assertIn(self.rank, RESETS)

    def test_teardown_ran_after_the_previous_test(self):
        # Whatever the order, one of the two tests runs second and sees 3 calls.
        self.assertIn(len(RESETS), (1, 3))


if __name__ == "__main__":
    run_tests()
