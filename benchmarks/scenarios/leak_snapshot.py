"""Cost of leak detection, measured inside the ranks of a real 2-rank world.

``test_measure`` times ``leaks.check(leaks.take(), "restore")`` (the whole per-test
cost: snapshot before, snapshot and compare after) BENCH_LEAK_LOOPS times on every
rank at once and prints ``LEAK_COST rank=R us_per_test=X cpu_us_per_test=Y``
(wall time, and the CPU time of the rank's thread, which a loaded machine
inflates less).  With BENCH_LEAK_TESTS=N
the class also gets N trivial tests (an all_reduce of 8 floats), for the suite
comparison of benchmarks/leaks.py; the last prints ``LEAK_SUITE_CPU rank=R
cpu_us_per_test=Z``, the CPU time of the rank's thread per test in the suite.
"""
import os
import time

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests
from continuous_test.rank import leaks

LOOPS = int(os.environ.get("BENCH_LEAK_LOOPS", "2000"))
TESTS = int(os.environ.get("BENCH_LEAK_TESTS", "0"))


class LeakCost(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    def test_measure(self):
        if not LOOPS:
            return
        dist.barrier()
        start, cpu = time.perf_counter(), time.thread_time()
        for _ in range(LOOPS):
            leaks.check(leaks.take(), "restore")
        took, cpu = time.perf_counter() - start, time.thread_time() - cpu
        print(f"LEAK_COST rank={self.rank} us_per_test={took / LOOPS * 1e6:.1f} "
              f"cpu_us_per_test={cpu / LOOPS * 1e6:.1f}", flush=True)


_first_cpu = []


def _trivial(self):
    t = torch.ones(8)
    dist.all_reduce(t)
    if self._testMethodName == "test_suite_0000":
        _first_cpu.append(time.thread_time())
    elif self._testMethodName == f"test_suite_{TESTS - 1:04d}" and _first_cpu:
        # In place: the rank's own thread, per test, between the ends of the first and last
        # test (the harness and the body, with caches as cold as a collective leaves them).
        cpu = (time.thread_time() - _first_cpu[0]) / (TESTS - 1)
        print(f"LEAK_SUITE_CPU rank={self.rank} cpu_us_per_test={cpu * 1e6:.1f}", flush=True)


for i in range(TESTS):
    setattr(LeakCost, f"test_suite_{i:04d}", _trivial)


if __name__ == "__main__":
    run_tests()
