"""Distributed tests that need 0 to 4 devices (some at several world sizes), and one plain test: the ct_devices
marker routes them."""
import pytest
from torch.testing._internal.common_distributed import skip_if_lt_x_gpu

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, distributed


class Gloo(MultiProcContinuousTest):
    """A CPU world: 0 devices (3 under a simulated host, where every world is a GPU world)."""

    world_size = 3

    def test_cpu(self):
        pass


class Nccl(MultiProcContinuousTest):
    """An nccl world of 2: 2 devices (skipped on a machine without nccl)."""

    world_size = 2

    @classmethod
    def backend_str(cls):
        return "nccl"

    def test_nccl(self):
        pass


class FreshAsksForGpus(MultiProcessTestCase):
    """torch's style: a CPU world whose test asks for 2 GPUs."""

    world_size = 1

    @skip_if_lt_x_gpu(2)
    def test_two_gpus(self):
        pass


@distributed(world_size=4, backend="nccl")
def test_nccl_function():
    pass


class NcclSizes(MultiProcContinuousTest):
    """Several world sizes: each size's test needs its own count."""

    world_size = [1, 3]

    @classmethod
    def backend_str(cls):
        return "nccl"

    def test_sized(self):
        pass


@distributed(world_size=[2, 4], backend="nccl")
def test_sized_function():
    pass


def test_plain():
    pass


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__]))
