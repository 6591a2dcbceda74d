"""A test that prints a lot on every rank, then fails: its report shows the head and tail, and where the rest is."""
from continuous_test import MultiProcContinuousTest, run_tests


class BigOutputTest(MultiProcContinuousTest):
    world_size = 2

    def test_prints_5000_lines_and_fails(self):
        for i in range(5000):
            print(f"line {i} of rank {self.rank}")
        print("x" * 50000)
        self.fail("after a lot of output")


if __name__ == "__main__":
    run_tests()
