"""One test per kind of outcome; the tests assert on how each is reported."""
import os
import unittest

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests


def touch_marker(cls):
    """Record that cls started a world (MARKER_DIR is set by the test that runs this file)."""
    marker_dir = os.environ.get("MARKER_DIR")
    if marker_dir:
        open(os.path.join(marker_dir, f"{cls.__name__}.rank{cls.rank}"), "w").close()


class MarkedTest(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def _init_pg(cls, rank, world_size, rdvz_file):
        touch_marker(cls)
        super()._init_pg(rank, world_size, rdvz_file)


class OutcomeTest(MarkedTest):
    def test_pass(self):
        t = torch.ones(1)
        dist.all_reduce(t)

    @unittest.skip("decided in the controller")
    def test_skip_decorator(self):
        raise AssertionError("a skipped test ran")

    def test_skip_on_all_ranks(self):
        self.skipTest("feature X is missing")

    def test_skip_on_some_ranks(self):
        if self.rank == 1:
            self.skipTest("only rank 1 lacks it")

    @unittest.expectedFailure
    def test_expected_failure(self):
        if self.rank == 1:
            self.fail("known bug on rank 1")

    @unittest.expectedFailure
    def test_unexpected_success(self):
        pass

    def test_subtests(self):
        for i in range(3):
            with self.subTest(i=i):
                if i == 1 and self.rank == 1:
                    self.fail("subtest boom")

    def test_error_keeps_type(self):
        if self.rank == 0:
            raise ValueError("bad value on rank 0")

    def test_failure_with_output(self):
        print(f"diagnostic line from rank {self.rank}")
        if self.rank == 1:
            self.assertEqual(torch.ones(2), torch.zeros(2))


@unittest.skip("whole class skipped")
class SkippedClassTest(MarkedTest):
    def test_in_skipped_class(self):
        pass


class NotSelectedTest(MarkedTest):
    def test_not_selected(self):
        pass


if __name__ == "__main__":
    run_tests()
