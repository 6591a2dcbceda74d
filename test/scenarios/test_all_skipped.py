"""Classes that ask by name for what a host without GPUs lacks: cuda devices, and the nccl backend.

Every test skips, each saying why; the run then ends with one line that counts
them and gives the reasons (test_devices.py runs it under python and pytest).
``Plain`` runs anywhere: with it selected, no such line.
"""
import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests


class NamedCuda(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def device_type(cls):
        return "cuda"

    def test_one(self):
        self.fail("runs only with 2 cuda devices")

    def test_two(self):
        self.fail("runs only with 2 cuda devices")


class NamedNccl(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "nccl"

    def test_all_reduce(self):
        self.fail("runs only with nccl and 2 cuda devices")


class Plain(MultiProcContinuousTest):
    world_size = 2

    def test_all_reduce(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)


if __name__ == "__main__":
    run_tests()
