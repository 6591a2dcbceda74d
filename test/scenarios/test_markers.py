"""pytest markers and options that override world sizes and time limits."""
import os
import time

import pytest
import torch.distributed as dist

import continuous_test
from continuous_test import MultiProcContinuousTest


@pytest.mark.world_size(3)
class MarkedWorldTest(MultiProcContinuousTest):
    world_size = 2

    def test_world_size_from_marker(self):
        self.assertEqual(dist.get_world_size(), int(os.environ.get("EXPECTED_WORLD_SIZE", 3)))
        self.assertEqual(self.world_size, dist.get_world_size())


class PlainWorldTest(MultiProcContinuousTest):
    world_size = 2

    def test_world_size_from_class_or_option(self):
        self.assertEqual(dist.get_world_size(), int(os.environ.get("EXPECTED_WORLD_SIZE", 2)))

    @pytest.mark.ct_timeout(1)
    def test_time_limit_from_marker(self):
        time.sleep(30)


@continuous_test.distributed(world_size=3)
def test_function_world_size_from_its_decorator():
    assert dist.get_world_size() == int(os.environ.get("EXPECTED_WORLD_SIZE", 3))


if __name__ == "__main__":
    # Markers are pytest's, and unittest's runner skips test functions.
    raise SystemExit(pytest.main([__file__]))
