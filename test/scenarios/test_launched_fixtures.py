"""``@distributed`` functions whose fixture values differ by rank, for ``torchrun -m pytest``.

Under a launcher each rank is its own pytest session: its ``tmp_path`` is its own,
and ``by_rank``'s repr names the rank, so the test's id (built from the values'
reprs) differs between ranks.  Every test passes on every rank, and the test after
them runs.
"""
import os

import pytest
import torch
import torch.distributed as dist

import continuous_test


class ByRank:
    """A fixture value whose repr differs on every rank."""

    def __init__(self, rank: str) -> None:
        self.rank = rank

    def __repr__(self) -> str:
        return f"ByRank({self.rank})"


@pytest.fixture
def by_rank():
    return ByRank(os.environ.get("RANK", "0"))


@continuous_test.distributed(world_size=2)
def test_a_tmp_path_of_its_own_on_each_rank(tmp_path):
    (tmp_path / "here").write_text(str(dist.get_rank()))
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2.0


@continuous_test.distributed(world_size=2)
def test_b_a_fixture_whose_repr_differs_by_rank(by_rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2.0 and repr(by_rank) == f"ByRank({by_rank.rank})"


@continuous_test.distributed(world_size=2)
def test_c_after_them():
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2.0
