"""A test that raises KeyboardInterrupt in one rank: that test errors, naming it, and the run goes on.

Only the controller's own Ctrl-C stops a run (test_faults.py); a KeyboardInterrupt a rank raises is
that test's error, in a shared world (the rank dies with it; the next test gets a new world) and in
fresh ranks alike.
"""
import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests


class SharedInterrupt(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def test_a_interrupted(self):
        if self.rank == 1:
            raise KeyboardInterrupt

    def test_b_innocent(self):
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [2.0, 2.0])


class FreshInterrupt(MultiProcessTestCase):
    world_size = 2

    def test_a_interrupted(self):
        if self.rank == 1:
            raise KeyboardInterrupt

    def test_b_innocent(self):
        pass


if __name__ == "__main__":
    run_tests()
