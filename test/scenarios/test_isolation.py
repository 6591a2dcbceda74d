"""Each test starts clean: subgroups released, a destroyed default group replaced."""
import os

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from continuous_test import MultiProcContinuousTest, run_tests


# Set by the first test; later tests prove they run in the same rank processes.
FIRST_PID = []


class IsolationTest(MultiProcContinuousTest):
    world_size = 2

    def test_1_create_subgroups(self):
        group = dist.new_group([0, 1])
        single = dist.new_group([0])
        t = torch.ones(1)
        dist.all_reduce(t, group=group)
        self.assertEqual(t.item(), 2.0)
        # new_group([0]) registers a group on its member only.
        self.assertEqual(len(c10d._world.pg_names), 3 if self.rank == 0 else 2)
        del single
        FIRST_PID.append(os.getpid())

    def test_2_subgroups_were_released(self):
        self.assertEqual(FIRST_PID, [os.getpid()], "not the same rank process as the previous test")
        self.assertEqual(list(c10d._world.pg_names.values()), [c10d._get_default_group().group_name])

    def test_3_destroy_default_group(self):
        dist.destroy_process_group()
        self.assertFalse(dist.is_initialized())

    def test_4_fresh_default_group(self):
        self.assertEqual(FIRST_PID, [os.getpid()], "the world was restarted instead of re-initialized")
        self.assertTrue(dist.is_initialized())
        t = torch.full((2,), float(self.rank))
        dist.all_reduce(t)
        self.assertEqual(t, torch.full((2,), 1.0))


if __name__ == "__main__":
    run_tests()
