"""A small run with something to see: the example behind docs/run-report.rst and its screenshot.

``test_a_sets_mode`` leaves a module global set that ``test_c_needs_default``
needs unset (an order-dependent failure, which bisect pins on it);
``test_d_one_rank`` fails on rank 1 wherever it runs; ``test_b_dtype`` leaves the
default dtype changed (put back by the leak check).  ``BatchTest`` is a second
world of 3 ranks, ``AbortTest`` a ``MultiProcessTestCase`` whose every test starts
fresh ranks, and ``test_plain`` runs without ranks.
"""
import time

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, expect_exit

STATE = {"mode": "default"}


class TrainTest(MultiProcContinuousTest):
    world_size = 2

    def test_a_sets_mode(self):
        STATE["mode"] = "eval"
        dist.barrier()

    def test_b_dtype(self):
        torch.set_default_dtype(torch.float64)
        time.sleep(0.2)

    def test_c_needs_default(self):
        time.sleep(0.1)
        self.assertEqual(STATE["mode"], "default")

    def test_d_one_rank(self):
        time.sleep(0.1)
        self.assertNotEqual(self.rank, 1, "rank 1 disagrees")

    def test_e_all_reduce(self):
        t = torch.ones(4)
        dist.all_reduce(t)
        time.sleep(0.2)
        self.assertEqual(t[0].item(), 2.0)


class BatchTest(MultiProcContinuousTest):
    world_size = 3

    def test_scatter(self):
        time.sleep(0.3)
        dist.barrier()

    def test_gather(self):
        time.sleep(0.2)
        dist.barrier()


class AbortTest(MultiProcessTestCase):
    world_size = 2

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    @expect_exit(3, ranks=[1])
    def test_exit(self):
        if self.rank == 1:
            raise SystemExit(3)

    def test_fresh(self):
        time.sleep(0.1)


def test_plain():
    time.sleep(0.1)
