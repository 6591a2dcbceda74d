"""Device-generic tests instantiated by ``instantiate_device_type_tests(..., only_for="cpu")``.

Two shapes PyTorch uses: a ``MultiProcContinuousTest`` whose tests take a ``device``
(and ``dtype``) argument, and a ``DistributedTestBase`` whose tests create their
process group with ``self.create_pg(device)``.

``CT_COMPAT_BASE=ours`` (the default) takes the base classes from ``continuous_test``,
``CT_COMPAT_BASE=torch`` keeps torch's.  This file runs under continuous_test's
``run_tests``.
"""
import os

import torch
import torch.distributed as dist
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_distributed import DistributedTestBase, MultiProcContinuousTest
from torch.testing._internal.common_utils import parametrize

from continuous_test import run_tests

if os.environ.get("CT_COMPAT_BASE", "ours") == "ours":
    from continuous_test import DistributedTestBase, MultiProcContinuousTest  # noqa: F811 - the migration


class DeviceCollectivesTest(MultiProcContinuousTest):
    world_size = 2

    def test_device_type_attribute(self, device):
        # instantiate_device_type_tests sets device_type as a string on the class.
        self.assertEqual(self.device_type, "cpu")
        self.assertEqual(torch.device(device).type, "cpu")

    @dtypes(torch.float32, torch.float64, torch.int32)
    def test_all_reduce(self, device, dtype):
        t = torch.full((3,), self.rank + 1, device=device, dtype=dtype)
        dist.all_reduce(t)
        self.assertEqual(t, torch.full((3,), 3, device=device, dtype=dtype))
        self.assertEqual(t.sum(), 9)

    @parametrize("src", [0, 1])
    def test_broadcast(self, device, src):
        t = torch.tensor([float(self.rank)], device=device)
        dist.broadcast(t, src=src)
        self.assertEqual(t.item(), float(src))

    def test_dtype_mismatch_fails(self, device):
        with self.assertRaisesRegex(AssertionError, "dtype"):
            self.assertEqual(torch.ones(2, device=device), torch.ones(2, device=device, dtype=torch.float64))
        self.assertEqual(torch.ones(2, device=device), torch.ones(2, dtype=torch.float64), exact_dtype=False)


class CreatePgTest(DistributedTestBase):
    @property
    def world_size(self) -> int:
        return 2

    def test_create_pg(self, device):
        pg = self.create_pg(device)
        self.assertEqual(pg.size(), self.world_size)
        self.assertEqual(self.backend(device), "gloo")
        self.assertEqual(self.rank_to_device(device), {0: [0], 1: [0]})
        t = torch.ones(2, device=device) * (self.rank + 1)
        dist.all_reduce(t)
        self.assertEqual(t, [3.0, 3.0])
        sub = dist.new_group([0])
        if self.rank == 0:
            dist.all_reduce(t, group=sub)
            self.assertEqual(t, [3.0, 3.0])


instantiate_device_type_tests(DeviceCollectivesTest, globals(), only_for="cpu")
instantiate_device_type_tests(CreatePgTest, globals(), only_for="cpu")

if __name__ == "__main__":
    run_tests()
