"""A test skipped on one rank while its peer waits for it in a collective.

``test_a`` skips on rank 0 only; rank 1 goes on into an ``all_reduce`` that rank 0
never joins.  It is an inconsistent skip, reported within the grace period, not
after the process group's timeout (120 s); ``test_b`` then runs in a new world.
"""
import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests


class SkipOnOneRankTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def test_a_skips_on_rank_0_only(self):
        if self.rank == 0:
            self.skipTest("a fact only rank 0 sees")
        dist.all_reduce(torch.ones(2))

    def test_b_innocent(self):
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [2.0, 2.0])


if __name__ == "__main__":
    run_tests()
