"""assertExpectedInline inside ranks."""
import os

import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests


class ExpectTest(MultiProcContinuousTest):
    world_size = 2

    def test_inline(self):
        self.assertExpectedInline(f"world of {dist.get_world_size()}", """world of 2""")


if os.environ.get("EXPECT_DIFFERING"):

    class DifferingExpectTest(MultiProcContinuousTest):
        world_size = 3

        def test_differs_on_rank_2(self):
            self.assertExpectedInline("a" if self.rank < 2 else "b", """a""")


if __name__ == "__main__":
    run_tests()
