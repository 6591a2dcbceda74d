"""The 2-rank test file behind docs/reports.rst's captured reports (docs/capture_reports.py runs it)."""
import torch
import torch.distributed as dist

import continuous_test
from continuous_test import MultiProcContinuousTest, run_tests


class ReportExample(MultiProcContinuousTest):
    world_size = 2

    def test_fails_on_rank_1(self):
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(self.rank, 0, "rank 1 disagrees")

    @continuous_test.time_limit(4)
    def test_every_rank_hangs(self):
        t = torch.ones(2)
        if self.rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, src=1)


if __name__ == "__main__":
    run_tests()
