"""Cost of leak detection, measured inside the ranks of a real 2-rank world.

``test_measure`` times ``leaks.check(leaks.take(), "restore")`` (the whole per-test
cost: snapshot before, snapshot and compare after) BENCH_LEAK_LOOPS times on every
rank at once and prints ``LEAK_COST rank=R us_per_test=X cpu_us_per_test=Y``
(wall time, and the CPU time of the rank's thread, which a loaded machine
inflates less).  With BENCH_LEAK_TESTS=N
the class also gets N trivial tests (an all_reduce of 8 floats), for the suite
comparison of benchmarks/leaks.py.
"""
import os
import time

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, leaks, run_tests

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


def _trivial(self):
    t = torch.ones(8)
    dist.all_reduce(t)


for i in range(TESTS):
    setattr(LeakCost, f"test_suite_{i:04d}", _trivial)


if __name__ == "__main__":
    run_tests()
