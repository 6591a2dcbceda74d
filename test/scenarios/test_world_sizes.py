"""Classes at several world sizes (world_size = [1, 2, 3, 4])."""
import os

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests

LOG = os.environ.get("WS_LOG")


def note(what):
    if LOG and dist.get_rank() == 0:
        with open(LOG, "a") as f:
            f.write(f"{what} {os.getpid()} {dist.get_world_size()}\n")


class SizesTest(MultiProcContinuousTest):
    world_size = [1, 2, 3, 4]

    def test_all_reduce(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), self.world_size)
        self.assertEqual(dist.get_world_size(), self.world_size)
        note("SizesTest.test_all_reduce")

    def test_rank_below_size(self):
        self.assertLess(self.rank, self.world_size)
        note("SizesTest.test_rank_below_size")


class FreshSizesTest(MultiProcessTestCase):
    world_size = [1, 2]

    def test_fresh(self):
        self.init_pg("gloo")
        self.assertEqual(dist.get_world_size(), self.world_size)


if __name__ == "__main__":
    run_tests()
