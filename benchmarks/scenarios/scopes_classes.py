"""A file of ``BENCH_CLASSES`` classes of one size (gloo, cpu), ``BENCH_TESTS`` tests each (one all_reduce).

``BENCH_SYSTEM``: ``ours_module`` (continuous_test, ``world_scope = "module"``),
``ours_class`` (continuous_test, a world per class) or ``torch`` (torch's
``MultiProcContinuousTest`` of ``torch.testing._internal.common_distributed``).
Every test appends ``<rank> <pid>`` to ``BENCH_PIDS``: the distinct rank-0 pids are
the world starts (benchmarks/world_scopes.py).
"""
import os

import torch
import torch.distributed as dist

SYSTEM = os.environ.get("BENCH_SYSTEM", "ours_module")
CLASSES = int(os.environ.get("BENCH_CLASSES", "10"))
TESTS = int(os.environ.get("BENCH_TESTS", "2"))
PIDS = os.environ.get("BENCH_PIDS", os.devnull)

if SYSTEM == "torch":
    from torch.testing._internal.common_distributed import MultiProcContinuousTest
    from torch.testing._internal.common_utils import run_tests
else:
    from continuous_test import MultiProcContinuousTest, run_tests


class Base(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"


if SYSTEM == "ours_module":
    Base.world_scope = "module"


def _test(name):
    def test(self):
        with open(PIDS, "a") as f:
            f.write(f"{self.rank} {os.getpid()}\n")
        t = torch.ones(4)
        dist.all_reduce(t)
        assert t[0].item() == 2.0

    test.__name__ = name
    return test


for c in range(CLASSES):
    name = f"Class{c:02d}"
    globals()[name] = type(name, (Base,), {f"test_{i}": _test(f"test_{i}") for i in range(TESTS)})
del Base  # not a test class of its own
if SYSTEM != "torch":
    del MultiProcContinuousTest


if __name__ == "__main__":
    run_tests()
