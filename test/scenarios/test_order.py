"""Rerun and bisect: an order-dependent pair, a test that fails only on its first run, one that always fails.

``test_a_poisons`` sets a module global of this file that ``test_e_victim`` needs
unset: the victim fails only after it.  ``test_f_first_run`` fails the first time
it runs anywhere (a marker file in FLAKY_DIR remembers the run), so its rerun
passes and the failure cannot be reproduced.  ``test_g_always`` fails wherever it
runs.  ``test_h5_needs_one_unset`` fails only after both ``test_h1_sets_x`` and
``test_h3_sets_y``.  Pick tests with ``-k``.
"""
import os

import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests

STATE = {"poisoned": False, "x": False, "y": False}


class OrderTest(MultiProcContinuousTest):
    world_size = 2

    def test_a_poisons(self):
        STATE["poisoned"] = True

    def test_b(self):
        pass

    def test_c(self):
        pass

    def test_d(self):
        pass

    def test_e_victim(self):
        self.assertFalse(STATE["poisoned"], "poisoned by an earlier test")

    def test_f_first_run(self):
        marker = os.path.join(os.environ["FLAKY_DIR"], "ran")
        seen = os.path.exists(marker)
        dist.barrier()
        if self.rank == 0 and not seen:
            open(marker, "w").close()
        self.assertTrue(seen, "fails on its first run only")

    def test_g_always(self):
        self.fail("fails wherever it runs")

    def test_h1_sets_x(self):
        STATE["x"] = True

    def test_h2(self):
        pass

    def test_h3_sets_y(self):
        STATE["y"] = True

    def test_h4(self):
        pass

    def test_h5_needs_one_unset(self):
        self.assertFalse(STATE["x"] and STATE["y"], "both set by earlier tests")


if __name__ == "__main__":
    run_tests()
