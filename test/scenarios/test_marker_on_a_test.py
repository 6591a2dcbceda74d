"""A world_size marker on one test of a shared world: a usage error, not a world sized by chance."""
import pytest

from continuous_test import MultiProcContinuousTest


class MarkedTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    def test_a(self):
        pass

    @pytest.mark.world_size(3)
    def test_b(self):
        pass


if __name__ == "__main__":
    # Markers are pytest's.
    raise SystemExit(pytest.main([__file__]))
