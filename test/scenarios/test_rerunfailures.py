"""A flaky test of a shared world, rerun by pytest-rerunfailures (``pytest --reruns 1``).

``test_b_flaky`` fails on rank 1 the first time it runs (a file in
``FLAKY_DIR`` remembers it), then passes.  The plugin runs the same item again:
it must run again in the ranks, and the tests around it pass in their world.
"""
import os

import pytest
import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest


def all_reduce_ones() -> float:
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


class RerunTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def test_a(self):
        self.assertEqual(all_reduce_ones(), 2.0)

    def test_b_flaky(self):
        self.assertEqual(all_reduce_ones(), 2.0)
        if self.rank == 1:
            mark = os.path.join(os.environ["FLAKY_DIR"], "failed-once")
            if not os.path.exists(mark):
                open(mark, "w").close()
                self.fail("fails the first time only")

    def test_c(self):
        self.assertEqual(all_reduce_ones(), 2.0)


if __name__ == "__main__":
    # pytest-rerunfailures is pytest's.
    raise SystemExit(pytest.main([__file__, "--reruns", "1"]))
