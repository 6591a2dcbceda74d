"""``@expect_exit`` declares how ranks end; it never hides a failure on the way there.

Each test here must FAIL: a subtest that failed before the declared exit, an
assertion that failed on a rank declared to exit with 10 (the code a failed rank
exits with anyway), a rank whose own assertion failed while another rank's
ending was wrong, and (``test_e``, nothing declared) a rank whose assertion failed
while rank 0 exited without reporting.  ``test_d_passes`` is the control: the
declared exit, nothing else.  ``NoSuchRankTest`` declares the exit of rank 1 at
world size 1: it checks nothing, and fails so.
"""
import os
import sys

from continuous_test import MultiProcessTestCase, expect_exit, run_tests


class ExpectExitTest(MultiProcessTestCase):
    world_size = 2

    @expect_exit(3, ranks=[1])
    def test_a_subtest_failed_before_the_exit(self):
        if self.rank == 1:
            with self.subTest(step="before the exit"):
                self.assertEqual(1, 2)
            sys.exit(3)

    @expect_exit(10, ranks=[1])
    def test_b_assertion_on_a_rank_declared_to_exit_10(self):
        if self.rank == 1:
            self.assertEqual("declared", "failed")

    @expect_exit(10, ranks=[1])
    def test_c_own_failure_beside_a_wrong_ending(self):
        if self.rank == 1:
            self.assertEqual("rank 1's own", "failure")
        if self.rank == 0:
            sys.exit(4)

    @expect_exit(3, ranks=[1])
    def test_d_passes(self):
        if self.rank == 1:
            sys.exit(3)

    def test_e_rank_0_exits_without_reporting(self):
        if self.rank == 0:
            os._exit(0)
        self.assertEqual("rank 1's assertion", "still reported")


class NoSuchRankTest(MultiProcessTestCase):
    world_size = 1

    @expect_exit(3, ranks=[1])
    def test_rank_one_exits(self):
        if self.rank == 1:
            sys.exit(3)


if __name__ == "__main__":
    run_tests()
