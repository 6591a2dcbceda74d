"""Subclasses of a class of several world sizes: one of one size (the int 3), one of other sizes ([2, 3]).

Each test prints ``ran <Class>.<test name> at <world size>`` on rank 0, and fails at the
world size FAIL_AT names.
"""
import os

import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests


class Base(MultiProcContinuousTest):
    world_size = [1, 2]

    def test_x(self):
        self.assertEqual(dist.get_world_size(), self.world_size)
        if self.rank == 0:
            print(f"ran {type(self).__name__}.{self._testMethodName} at {dist.get_world_size()}", flush=True)
        self.assertNotEqual(str(self.world_size), os.environ.get("FAIL_AT"))


class Three(Base):
    world_size = 3


class TwoThree(Base):
    world_size = [2, 3]


if __name__ == "__main__":
    run_tests()
