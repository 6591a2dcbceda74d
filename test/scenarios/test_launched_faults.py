"""Faults under a launcher (torchrun, srun): run with explicit class names.

* ``BreaksTheWorld``: rank 1 raises while rank 0 waits in ``all_reduce``; the later
  healthy tests must still pass.  With ``CONTINUOUS_TEST_TIMEOUT`` below the
  process-group timeout, rank 0 times out instead and must print rank 1's error.
* ``StuckRank``: rank 1 prints a line, then outlives its time limit; rank 0 reports it
  and skips the rest.
* ``SkipsOnOneRank``: a skip decorator that reads ``RANK`` skips ``test_a`` and
  ``test_c`` on rank 0 only.  ``test_a`` has no collective, and the world goes on;
  in ``test_c`` rank 1 waits in a collective for rank 0, and the world cannot go
  on.  Both are inconsistent skips, reported within the grace period.
* ``FreshOnce``: a ``MultiProcessTestCase`` must run once per launch, not once per
  launcher rank; each run appends a line to ``SCENARIO_COUNT_FILE``.
* ``PrintsAndFails``: each rank prints a line, then rank 1 fails an assertion (no
  collective): its output belongs in the merged report, labelled by rank.
"""
import os
import time
import unittest
from datetime import timedelta

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests, timeout


def all_reduce_ones() -> float:
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


class BreaksTheWorld(MultiProcContinuousTest):
    world_size = 2
    timeout = timedelta(seconds=float(os.environ.get("SCENARIO_PG_TIMEOUT", "10")))

    def test_a_healthy(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    def test_b_rank_1_raises_while_rank_0_waits(self):
        if self.rank == 1:
            raise RuntimeError("rank 1 breaks on purpose")
        all_reduce_ones()

    def test_c_healthy(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    def test_d_healthy(self):
        self.assertEqual(all_reduce_ones(), 2.0)


class PrintsAndFails(MultiProcContinuousTest):
    world_size = 2

    def test_rank_1_prints_and_fails(self):
        print(f"printed by rank {self.rank}")
        self.assertEqual(self.rank, 0, "rank 1 disagrees")


class StuckRank(MultiProcContinuousTest):
    world_size = 2

    @timeout(2)
    def test_a_rank_1_is_stuck(self):
        print(f"rank {self.rank} starts the test")
        if self.rank == 1:
            time.sleep(60)

    def test_b_healthy(self):
        self.assertEqual(all_reduce_ones(), 2.0)


class SkipsOnOneRank(MultiProcContinuousTest):
    world_size = 2
    grace_period = 2.0

    @unittest.skipIf(os.environ.get("RANK") == "0", "not on rank 0")
    def test_a_no_collective(self):
        pass

    def test_b_healthy(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    @unittest.skipIf(os.environ.get("RANK") == "0", "not on rank 0")
    def test_c_waits_for_the_skipper(self):
        all_reduce_ones()

    def test_d_after(self):
        self.assertEqual(all_reduce_ones(), 2.0)


class FreshOnce(MultiProcessTestCase):
    world_size = 2

    def test_counts_its_runs(self):
        with open(os.environ["SCENARIO_COUNT_FILE"], "a") as f:
            f.write(f"{self.rank}\n")

    def test_fails_on_fresh_rank_1(self):
        self.assertNotEqual(self.rank, 1, "fresh rank 1 fails on purpose")


if __name__ == "__main__":
    run_tests()
