"""assertExpectedInline inside ranks."""
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests


class ExpectTest(MultiProcContinuousTest):
    world_size = 2

    def test_inline(self):
        self.assertExpectedInline(f"world of {dist.get_world_size()}", """world of 2""")


if __name__ == "__main__":
    run_tests()
