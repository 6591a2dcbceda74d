"""Sharding and repeats: shared-world classes, plain classes and @distributed functions of two world sizes.

Each test prints ``ran <Class>.<test>`` (on rank 0 for distributed tests).
``Flaky.test_flaky`` fails on the runs named in FLAKY_RUNS (a comma-separated list
of its run numbers in the whole run, counted in files under FLAKY_DIR), and with
FLAKY_SECOND_IN_WORLD=1 whenever its world ran a test before (a failure that
follows the world).
"""
import os

import pytest
import torch.distributed as dist

import continuous_test
from continuous_test import MultiProcContinuousTest, TestCase, run_tests

_RUNS = {"n": 0}


def _say(name):
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(f"ran {name}", flush=True)


class WorldA(MultiProcContinuousTest):
    world_size = 2

    def test_a1(self):
        _say("WorldA.test_a1")

    def test_a2(self):
        _say("WorldA.test_a2")


class Flaky(MultiProcContinuousTest):
    world_size = 2

    def test_flaky(self):
        _say("Flaky.test_flaky")
        _RUNS["n"] += 1  # runs in this world
        if os.environ.get("FLAKY_SECOND_IN_WORLD") and _RUNS["n"] > 1:
            self.fail("fails when its world ran a test before")
        run = _count_run()
        if run in {int(n) for n in os.environ.get("FLAKY_RUNS", "").split(",") if n}:
            self.fail(f"fails on run {run}")


def _count_run():
    """This test's run number in the whole run, counted in a file per rank under FLAKY_DIR."""
    folder = os.environ.get("FLAKY_DIR")
    if not folder:
        return 0
    path = os.path.join(folder, f"rank{dist.get_rank()}")
    run = (int(open(path).read()) if os.path.exists(path) else 0) + 1
    with open(path, "w") as f:
        f.write(str(run))
    return run


def _plain_class(name):
    def make(test):
        def method(self):
            _say(f"{name}.{test}")
        method.__name__ = test
        return method
    return type(name, (TestCase,), {t: make(t) for t in ("test_x", "test_y", "test_z")})


Plain1, Plain2, Plain3, Plain4, Plain5 = (_plain_class(f"Plain{i}") for i in range(1, 6))



# pytest only: unittest's loader would also load their hidden classes (NO_FUNCTIONS=1 leaves them out).
if __name__ != "__main__" and not os.environ.get("NO_FUNCTIONS"):
    @continuous_test.distributed(world_size=2)
    def test_f2():
        _say("test_f2")


    @continuous_test.distributed(world_size=2)
    @pytest.mark.parametrize("n", [1, 2])
    def test_g2(n):
        _say(f"test_g2[{n}]")


    @continuous_test.distributed(world_size=1)
    def test_f1():
        _say("test_f1")


if __name__ == "__main__":
    run_tests()
