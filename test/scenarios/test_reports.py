"""Failures of every shape, for the report tests (test/test_reports.py)."""
import atexit
import os
import subprocess
import sys
import threading
import time

from continuous_test import MultiProcContinuousTest, MultiProcessTestCase, run_tests


class ConstantStr(Exception):
    def __str__(self):
        return "always the same text"


class RaisingStr(Exception):
    def __str__(self):
        raise RuntimeError("no str for you")


class Unpicklable(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.lock = threading.Lock()  # cannot be pickled: the exception cannot travel


class ReportTest(MultiProcContinuousTest):
    world_size = 3

    def test_a_same_everywhere(self):
        self.assertEqual(1, 2)

    def test_b_key_error(self):
        if self.rank == 1:
            raise KeyError("missing")

    def test_c_called_process_error(self):
        if self.rank == 2:
            subprocess.run([sys.executable, "-c", "raise SystemExit(3)"], check=True)

    def test_d_constant_str(self):
        if self.rank == 0:
            raise ConstantStr()

    def test_e_raising_str(self):
        if self.rank == 1:
            raise RaisingStr()

    def test_f_unpicklable(self):
        if self.rank == 0:
            raise Unpicklable("cannot travel")

    def test_g_differing_tracebacks(self):
        if self.rank == 0:
            raise ValueError("rank 0 went this way")
        raise ValueError("the others went that way")

    def test_h_slow(self):
        print(f"hello from rank {self.rank}", flush=True)
        release = os.environ.get("RELEASE_FILE")
        deadline = time.monotonic() + float(os.environ.get("SLOW_SECONDS", "2.5"))
        while time.monotonic() < deadline and not (release and os.path.exists(release)):
            time.sleep(0.05)
        if release:
            self.assertTrue(os.path.exists(release), "the output was not seen while the test ran")


class FreshFailureTest(MultiProcessTestCase):
    world_size = 2

    def test_failing_rank(self):
        if self.rank == 1:
            self.fail("rank 1 fails")

    def test_system_exit(self):
        if self.rank == 1:
            raise SystemExit(3)


if os.environ.get("REPORT_IMPORTS"):
    # The controller must not import torch's testing internals on a failure path.
    atexit.register(lambda: print("torch testing internals imported:",
                                  "torch.testing._internal.common_distributed" in sys.modules, flush=True))


if __name__ == "__main__":
    run_tests()
