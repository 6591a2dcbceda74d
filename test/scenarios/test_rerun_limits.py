"""Reruns that could not change anything are not made.

``ExpectedFailuresTest``: four ``@unittest.expectedFailure`` tests fail on every rank,
as they declare; they are not rerun, and only the one whose send no peer received
restarts the world (its class prints ``WORLD_STARTS <n>``).  ``LongFailureTest``: a test that fails after
``SLOW_SECONDS`` is rerun only while the rerun budget (``CONTINUOUS_TEST_BISECT``)
has that long left.  ``PgTimeoutTest``: rank 1 waits in a collective rank 0 never
makes until the process group's timeout (2 s) ends it; a rerun would wait as long
again, however much budget is left.
"""
import os
import sys
import time
import unittest
from datetime import timedelta

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests


class Gloo(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    @classmethod
    def tearDownClass(cls):
        from continuous_test.controller import world

        started = world._WORLDS.get((cls, None))  # (class, size): this class has one size
        print(f"WORLD_STARTS {cls.__name__} {started.starts if started else None}", file=sys.stderr, flush=True)
        super().tearDownClass()


class ExpectedFailuresTest(Gloo):
    @unittest.expectedFailure
    def test_0_unmatched_send(self):
        # Rank 0's send is never received: the world restarts after this test.
        if self.rank == 0:
            dist.isend(torch.ones(1), 1)
        self.assertEqual(self.rank, -1)

    @unittest.expectedFailure
    def test_a(self):
        self.assertEqual(self.rank, -1)

    @unittest.expectedFailure
    def test_b(self):
        raise ValueError("known to fail")

    @unittest.expectedFailure
    def test_c(self):
        self.assertEqual(self.rank, -1)

    def test_d(self):
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [2.0, 2.0])


class LongFailureTest(Gloo):
    def test_slow_failure(self):
        time.sleep(float(os.environ.get("SLOW_SECONDS", "2")))
        self.fail("slow and failing")


class PgTimeoutTest(Gloo):
    timeout = timedelta(seconds=2)

    def test_peer_never_arrives(self):
        if self.rank == 1:
            dist.all_reduce(torch.ones(2))


if __name__ == "__main__":
    run_tests()
