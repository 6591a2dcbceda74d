"""The conftest's process-wide setup (float64 by default) reaches the ranks, as it reaches this process."""
import pytest
import torch

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase


class SetupInRanksTest(MultiProcContinuousTest):
    world_size = 2

    def test_default_dtype(self):
        self.assertEqual(torch.get_default_dtype(), torch.float64)
        self.assertEqual(torch.ones(1).dtype, torch.float64)


class SetupInFreshRanksTest(MultiProcessTestCase):
    world_size = 2

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def test_default_dtype(self):
        self.assertEqual(torch.get_default_dtype(), torch.float64)


def test_in_the_controller():
    assert torch.get_default_dtype() == torch.float64


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__]))
