"""A world_size marker on one test of a shared world: that test runs in a world of its size."""
import pytest
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest


class MarkedTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    def test_a(self):
        assert self.world_size == dist.get_world_size() == 2

    @pytest.mark.world_size(3)
    def test_b(self):
        assert self.world_size == dist.get_world_size() == 3

    def test_c(self):
        assert self.world_size == dist.get_world_size() == 2


class BadMarkerTest(MultiProcContinuousTest):
    world_size = 2

    @pytest.mark.world_size(0)
    def test_zero(self):
        pass


if __name__ == "__main__":
    # Markers are pytest's.
    raise SystemExit(pytest.main([__file__]))
