"""NCCL on real GPUs: the file that test/gpu/check.py runs in every mode.

Each class skips with its reason where nccl or enough GPUs are missing.  The world
size comes from GPU_CHECK_WORLD_SIZE (default 1), so one file serves world sizes 1
and 2 and ``torchrun --nproc-per-node N``.
"""
import os

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests
from continuous_test.rank import run as rank_run

WORLD_SIZE = int(os.environ.get("GPU_CHECK_WORLD_SIZE", "1"))


class NcclWorld(MultiProcContinuousTest):
    world_size = WORLD_SIZE

    @classmethod
    def backend_str(cls):
        return "nccl"

    @classmethod
    def device_type(cls):
        return "cuda"

    def test_device_is_local_rank(self):
        local_rank = int(os.environ["LOCAL_RANK"])
        self.assertEqual(self.device, torch.device("cuda", local_rank))
        self.assertEqual(torch.cuda.current_device(), local_rank)

    def test_no_cuda_in_template(self):
        # Under torchrun there is no template: each rank is a process of its own.
        self.assertFalse(rank_run.template_cuda_initialized())

    def test_all_reduce(self):
        t = torch.full((4,), float(self.rank + 1), device=self.device)
        dist.all_reduce(t)
        total = self.world_size * (self.world_size + 1) / 2
        self.assertEqual(t.cpu(), torch.full((4,), total))


class NcclFresh(MultiProcessTestCase):
    world_size = WORLD_SIZE

    def test_all_reduce(self):
        if torch.cuda.device_count() < self.world_size:
            self.skipTest(f"needs {self.world_size} GPUs, found {torch.cuda.device_count()}")
        torch.cuda.set_device(self.rank)
        self.init_pg("nccl")
        t = torch.ones(4, device=f"cuda:{self.rank}")
        dist.all_reduce(t)
        self.assertEqual(t.cpu(), torch.full((4,), float(self.world_size)))


if __name__ == "__main__":
    run_tests()
