"""Classes sized by a pytest marker with several sizes, over a list of the class too (pytest only)."""
import pytest
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest


@pytest.mark.world_size([1, 3])
class MarkedTest(MultiProcContinuousTest):
    def test_size(self):
        assert dist.get_world_size() == self.world_size
        assert self.world_size in (1, 3)


@pytest.mark.world_size([1, 3])
class MarkedOverListTest(MultiProcContinuousTest):
    world_size = [2]  # the marker's sizes win

    def test_size(self):
        assert dist.get_world_size() == self.world_size
        assert self.world_size in (1, 3)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__]))
