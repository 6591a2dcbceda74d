"""A class whose second test hangs; the tests kill or interrupt its controller."""
import os
import time

from continuous_test import MultiProcContinuousTest, run_tests


class HangTest(MultiProcContinuousTest):
    world_size = 2

    def test_a_quick(self):
        pass

    def test_b_hang(self):
        pid_dir = os.environ.get("PID_DIR")
        if pid_dir:
            with open(os.path.join(pid_dir, f"rank{self.rank}.pid"), "w") as f:
                f.write(str(os.getpid()))
        time.sleep(600)


if __name__ == "__main__":
    run_tests()
