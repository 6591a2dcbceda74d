"""Ranks run intra-op parallel work, after the controller ran some: no rank may deadlock.

GNU OpenMP deadlocks in a child forked after its parent ran a parallel region.
``A_ControllerWork`` runs one in the controller before any world starts;
``PARALLEL_AT_IMPORT=1`` runs one at import time, before the template exists.
With ``PRINT_TEMPLATE_KIND=1`` the controller prints which template its ranks
were forked from when it exits.
"""
import atexit
import os
import unittest

import torch

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests
from continuous_test.template import server as template


def parallel_work():
    torch.ones(1 << 22).exp_().sum()
    torch.randn(256, 256) @ torch.randn(256, 256)


if os.environ.get("PARALLEL_AT_IMPORT"):
    parallel_work()

if os.environ.get("PRINT_TEMPLATE_KIND") and "CONTROLLER_PID" not in os.environ:
    os.environ["CONTROLLER_PID"] = str(os.getpid())
    atexit.register(lambda: print(f"template kind: {template.template_kind()}", flush=True))


class A_ControllerWork(unittest.TestCase):
    def test_parallel_work_in_the_controller(self):
        parallel_work()


class B_Continuous(MultiProcContinuousTest):
    world_size = 2

    def test_parallel_work_in_ranks(self):
        parallel_work()

    def test_ranks_are_children_of_the_template(self):
        self.assertNotEqual(os.getppid(), int(os.environ.get("CONTROLLER_PID", "-1")))


class C_Fresh(MultiProcessTestCase):
    world_size = 2

    def test_parallel_work_in_fresh_ranks(self):
        parallel_work()


if __name__ == "__main__":
    run_tests()
