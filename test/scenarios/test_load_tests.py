"""Tests made by the module's ``load_tests``, as unittest's load_tests protocol allows.

The methods exist only once unittest loaded the module: a rank that merely
imports it must load it too before it looks the test up.  Each class gets its
tests there, one per value; every rank checks its value through a collective.
"""
import unittest

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests


class SharedGenerated(MultiProcContinuousTest):
    world_size = 2


class FreshGenerated(MultiProcessTestCase):
    world_size = 2

    def setUp(self):
        super().setUp()
        self._spawn_processes()


def _shared(value):
    def test(self):
        t = torch.full((1,), float(value))
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0 * value)
    return test


def _fresh(value):
    def test(self):
        store = dist.FileStore(self.file_name, self.world_size)
        dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.world_size)
        t = torch.full((1,), float(value))
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0 * value)
        dist.destroy_process_group()
    return test


def load_tests(loader, tests, pattern):
    for value in (1, 2):
        setattr(SharedGenerated, f"test_value_{value}", _shared(value))
        setattr(FreshGenerated, f"test_value_{value}", _fresh(value))
    suite = unittest.TestSuite()
    for cls in (SharedGenerated, FreshGenerated):
        suite.addTests(loader.loadTestsFromTestCase(cls))
    return suite


if __name__ == "__main__":
    run_tests()
