"""A suite that overrides ``_run``, torch's per-rank entry, as torch's ``TestDistBackend`` does.

Each rank makes its own case, creates the default group on the test's
rendezvous file, waits at a file barrier, runs the test through
``self.run_test``, waits again, destroys the group and exits 0.  ``test_b``
fails on rank 1 only: the other ranks must not wait at the after-test barrier
for it (torch's ``run_test`` ends a rank whose test failed).  ``test_c`` skips in
its ranks; ``test_d`` is skipped by the suite's ``_run`` before the test, with
torch's skip exit code.  With ``ENTRY_DIR`` set, every rank marks there that
it came through this entry.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import TEST_SKIPS

from continuous_test import MultiProcessTestCase, run_tests


def file_barrier(directory, name, rank, world_size, timeout=30.0):
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, f"{name}.{rank}"), "w").close()
    deadline = time.monotonic() + timeout
    while len([f for f in os.listdir(directory) if f.startswith(name + ".")]) < world_size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name}: not every rank came")
        time.sleep(0.01)


class SuiteEntryTest(MultiProcessTestCase):
    world_size = 3

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    @property
    def destroy_pg_upon_exit(self):
        return False

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, **kwargs):
        self = cls(test_name)
        self.rank = rank
        self.file_name = file_name
        if os.environ.get("ENTRY_DIR"):
            open(os.path.join(os.environ["ENTRY_DIR"], f"{test_name}.{rank}"), "w").close()
        if test_name == "test_d_skipped_by_the_entry":
            sys.exit((TEST_SKIPS.get("multi-device-8") or TEST_SKIPS["multi-gpu-8"]).exit_code)  # the key torch 2.15 renamed
        dist.init_process_group("gloo", init_method=f"file://{file_name}", rank=rank, world_size=self.world_size)
        barrier_dir = file_name + ".barrier"
        file_barrier(barrier_dir, "before", rank, self.world_size)
        self.run_test(test_name, pipe)
        file_barrier(barrier_dir, "after", rank, self.world_size)
        dist.destroy_process_group()
        sys.exit(0)

    def test_a_passes(self):
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [3.0, 3.0])

    def test_b_fails_on_one_rank(self):
        self.assertNotEqual(self.rank, 1, "rank 1 fails")

    def test_c_skips_in_its_ranks(self):
        self.skipTest("not on this machine")

    def test_d_skipped_by_the_entry(self):
        raise AssertionError("never runs")


if __name__ == "__main__":
    run_tests()
