"""A run ended by SIGTERM: the first test's big output is kept whole on disk (it fails on every
rank), then the next test waits in its ranks, after rank 0 wrote STAMP_DIR/waiting."""
import os
import time

from continuous_test import MultiProcContinuousTest, run_tests


class AKeptTest(MultiProcContinuousTest):
    world_size = 2

    def test_prints_a_big_output_and_fails(self):
        for line in range(300):
            print(f"line {line} of rank {self.rank}")
        self.fail("fails after a big output")


class BWaitTest(MultiProcContinuousTest):
    world_size = 2

    def test_waits(self):
        if self.rank == 0:
            with open(os.path.join(os.environ["STAMP_DIR"], "waiting"), "w"):
                pass
        time.sleep(60)


if __name__ == "__main__":
    run_tests()
