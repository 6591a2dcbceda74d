"""Test ids with a dot in their parameters: @distributed functions that fail on rank 1, parametrized
with 0.1, with torch.float32 (its id the dtype's name) and with a fixture's value 3.0, after one that
passes in the same world."""
import pytest
import torch
import torch.distributed as dist

import continuous_test


@continuous_test.distributed(world_size=2)
def test_passes_first():
    dist.barrier()


@continuous_test.distributed(world_size=2)
@pytest.mark.parametrize("lr", [0.1])
def test_lr(lr):
    dist.barrier()
    assert dist.get_rank() == 0, f"lr {lr} fails on rank 1"


@continuous_test.distributed(world_size=2)
@pytest.mark.parametrize("dtype", [torch.float32], ids=str)
def test_dtype(dtype):
    dist.barrier()
    assert dist.get_rank() == 0, f"{dtype} fails on rank 1"


@pytest.fixture(params=[3.0], ids=str)
def scale(request):
    return request.param


@continuous_test.distributed(world_size=2)
def test_scale(scale):
    dist.barrier()
    assert dist.get_rank() == 0, f"scale {scale} fails on rank 1"
