"""One class (gloo, cpu, 2 ranks) of ``BENCH_N`` tests (one all_reduce each), all of one kind (``BENCH_MODE``).

``plain``: every test in the shared world; ``fresh_group``: every test ``@fresh_group``
(a default group made again in the warm ranks); ``fresh_world``: every test
``@fresh_world`` (a world of its own).  benchmarks/world_scopes.py compares them.
"""
import os

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, fresh_group, fresh_world, run_tests

MODE = os.environ.get("BENCH_MODE", "plain")
N = int(os.environ.get("BENCH_N", "20"))
MARK = {"plain": lambda fn: fn, "fresh_group": fresh_group, "fresh_world": fresh_world}[MODE]


class Groups(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"


def _test(name):
    def test(self):
        t = torch.ones(4)
        dist.all_reduce(t)
        assert t[0].item() == 2.0

    test.__name__ = name
    return MARK(test)


for i in range(N):
    setattr(Groups, f"test_{i:03d}", _test(f"test_{i:03d}"))


if __name__ == "__main__":
    run_tests()
