"""MultiProcessTestCase: fresh ranks per test, declared endings, torch-style setUp."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from continuous_test import MultiProcessTestCase, expect_exit, run_tests


class NegativeTest(MultiProcessTestCase):
    world_size = 2

    def test_init_all_reduce_destroy(self):
        self.init_pg("gloo")
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)
        dist.destroy_process_group()

    def test_destroy_and_recreate(self):
        self.init_pg("gloo")
        dist.destroy_process_group()
        # A new rendezvous file: the first FileStore deletes its file once every rank let go of it.
        store = dist.FileStore(self.file_name + ".second", self.world_size)
        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size, store=store)
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)

    @expect_exit(3, ranks=[1])
    def test_expected_exit_code(self):
        if self.rank == 1:
            sys.exit(3)

    @expect_exit(signal="SIGABRT")
    def test_expected_signal_on_all(self):
        os.abort()

    @expect_exit(signal=signal.SIGSEGV, ranks=0)
    def test_expected_segfault_on_rank_0(self):
        if self.rank == 0:
            os.kill(os.getpid(), signal.SIGSEGV)

    @expect_exit(3, ranks=[1])
    def test_wrong_ending(self):
        print(f"rank {self.rank} about to end")
        if self.rank == 1:
            os._exit(4)

    def test_unexpected_crash(self):
        if self.rank == 0:
            os._exit(7)

    def test_failure_on_one_rank(self):
        self.assertEqual(self.rank, 0)

    def test_skip_on_every_rank(self):
        self.skipTest("not today")

    def test_torch_skip_exit_code(self):
        from torch.testing._internal.common_distributed import TEST_SKIPS

        sys.exit((TEST_SKIPS.get("multi-device-4") or TEST_SKIPS["multi-gpu-4"]).exit_code)  # the key torch 2.15 renamed

    def test_rank_attributes(self):
        self.assertIn(self.rank, (0, 1))
        self.assertEqual(self.world_size, 2)
        self.assertTrue(os.path.exists(os.path.dirname(self.file_name)))
        self.assertEqual(self.is_master, self.rank == 0)


class TorchStyleTest(MultiProcessTestCase):
    """Written as against torch's class: setUp spawns, tests init per test."""

    @property
    def world_size(self):
        return 2

    def setUp(self):
        super().setUp()
        self.special_return_code_checks = {self.test_special_return_code: -signal.SIGABRT}
        self.skip_return_code_checks = [self.test_skipped_return_code]
        self._spawn_processes()

    def test_per_test_init(self):
        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size,
                                store=dist.FileStore(self.file_name, self.world_size))
        t = torch.full((1,), float(self.rank))
        dist.all_reduce(t)
        self.assertEqual(t.item(), 1.0)

    def test_special_return_code(self):
        os.abort()

    def test_skipped_return_code(self):
        os._exit(42)


class SlowNegativeTest(MultiProcessTestCase):
    world_size = 2
    test_timeout = 3

    def test_hang(self):
        if self.rank == 1:
            time.sleep(600)


if __name__ == "__main__":
    run_tests()
