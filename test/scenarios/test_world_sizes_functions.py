"""A @distributed function at several world sizes (pytest only)."""
import os

import pytest
import torch
import torch.distributed as dist

import continuous_test


@continuous_test.distributed(world_size=[1, 2])
def test_function_sizes():
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == dist.get_world_size()
    if os.environ.get("WS_LOG") and dist.get_rank() == 0:
        with open(os.environ["WS_LOG"], "a") as f:
            f.write(f"test_function_sizes {os.getpid()} {dist.get_world_size()}\n")


@continuous_test.distributed(world_size=[2, 3])
@pytest.mark.parametrize("n", [1, 4])
def test_parametrized_function_sizes(n):
    t = torch.ones(n)
    dist.all_reduce(t)
    assert t.tolist() == [float(dist.get_world_size())] * n


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__]))
