"""Where the run report goes: a test that fails on rank 1, and plain tests in the controller that
change its working directory (CHDIR_TO) or turn the report's directory into a file (BREAK_DIR)
before the run ends."""
import os
import shutil
import unittest

import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests


class ControllerSideTest(unittest.TestCase):
    def test_changes_the_working_directory(self):
        where = os.environ.get("CHDIR_TO")
        if where:
            os.chdir(where)

    def test_breaks_the_report_directory(self):
        folder = os.environ.get("BREAK_DIR")
        if folder:
            shutil.rmtree(folder)
            with open(folder, "w"):
                pass


class FailsOnRankOneTest(MultiProcContinuousTest):
    world_size = 2

    def test_fails_on_rank_1(self):
        dist.barrier()
        self.assertEqual(self.rank, 0, "rank 1 fails here")


if __name__ == "__main__":
    run_tests()
