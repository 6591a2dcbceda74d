"""Several world sizes with faults: a polluter at one size, and a bad list of sizes."""
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests

POLLUTED = []


class PerSizeTest(MultiProcContinuousTest):
    world_size = [1, 2]

    def test_a_pollutes_at_size_2(self):
        if self.world_size == 2:
            POLLUTED.append(dist.get_world_size())  # module state the next test of this world sees

    def test_b_victim(self):
        self.assertEqual(POLLUTED, [])


class BadSizesTest(MultiProcContinuousTest):
    world_size = [2, 0]

    def test_never_runs(self):
        pass


if __name__ == "__main__":
    run_tests()
