"""A pytest fixture that calls torch.distributed: fixtures run in the controller, which has no process group.

``test_sum`` errors at setup with torch's "Default process group has not been
initialized" and continuous_test's note naming the fixture and where fixtures run;
``test_plain_value`` (a fixture returning a plain value) passes on every rank.
"""
import pytest
import torch
import torch.distributed as dist

import continuous_test


@pytest.fixture
def world_rank():
    return dist.get_rank()


@pytest.fixture
def ones():
    return torch.ones(2)


@continuous_test.distributed(world_size=2)
def test_sum(world_rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2.0


@continuous_test.distributed(world_size=2)
def test_plain_value(ones):
    dist.all_reduce(ones)
    assert ones.tolist() == [2.0, 2.0]
