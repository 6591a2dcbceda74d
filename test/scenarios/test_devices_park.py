"""A module's @distributed world holds devices while a class of the same module needs them.

Under ``CONTINUOUS_TEST_SIMULATE_DEVICES=4`` the functions' world of 2 is still up when
the class's world of 3 starts: the process would wait for itself, so its idle world
is stopped (parked) and starts again for the last function.
"""
import os

import pytest

from continuous_test import MultiProcContinuousTest, distributed


@distributed(world_size=2)
def test_first():
    assert len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")) == 2


class Three(MultiProcContinuousTest):
    world_size = 3

    def test_three(self):
        assert len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")) == 3


@distributed(world_size=2)
def test_last():
    assert len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")) == 2


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__]))
