"""Ranks forked ahead of need (spares): the next fresh test's ranks, or those of the next test in a world of its own.

``EXPECT_AHEAD`` names the tests whose ranks must have been forked ahead (run
in file order, under ``python`` or pytest).  The last class checks that nothing
forked ahead outlives its class: the template has no child left.
"""
import os
import time
import unittest

import torch
import torch.distributed as dist

from continuous_test import _role, MultiProcContinuousTest, MultiProcessTestCase, run_tests


def check_forked_ahead(case):
    expected = case._testMethodName in os.environ.get("EXPECT_AHEAD", "").split(",")
    context = _role.current()
    assert context is not None
    case.assertEqual(context.forked_ahead, expected, f"rank {context.rank} of {case._testMethodName}")


class FreshSpareTest(MultiProcessTestCase):
    world_size = 2

    def setUp(self):
        # Changed in the controller after the next test's spares were forked: the
        # ranks must see this test's value.
        os.environ["SPARE_MARK"] = self._testMethodName
        super().setUp()

    def _check(self):
        check_forked_ahead(self)
        self.assertEqual(os.environ.get("SPARE_MARK"), self._testMethodName)
        self.assertEqual(os.environ.get("RANK"), str(self.rank))
        self.init_pg("gloo")
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)

    def test_fresh_a(self):
        self._check()

    def test_fresh_b(self):
        self._check()

    def test_fresh_c(self):
        print(f"rank {self.rank} says hello", flush=True)
        self._check()
        self.fail(f"rank {self.rank} fails on purpose")


class FreshSparesLeftNothingTest(unittest.TestCase):
    """Runs right after FreshSpareTest, before any other rank starts."""

    def test_the_controller_holds_no_spare_and_no_unreaped_rank(self):
        from continuous_test.controller import processes

        self.assertEqual((processes.SPARES._ranks, processes._RETIRED), ([], []))


class _GlooPair(MultiProcContinuousTest):
    """Two gloo ranks that check whether they were forked ahead; no tests of its own."""

    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def _check(self):
        check_forked_ahead(self)
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)


class OwnWorldSpareTest(_GlooPair):
    """Tests of a shared class in worlds of their own: the next one's ranks are forked ahead too."""

    fresh_world_tests = ["test_own_*"]

    def test_own_a(self):
        self._check()

    def test_own_b(self):
        self._check()

    def test_own_c(self):
        self._check()


class WorldAfterSparesTest(_GlooPair):
    """Runs after FreshSpareTest and OwnWorldSpareTest: the spares forked for them were killed when they ended."""

    def test_world_a(self):
        self._check()

    def test_world_b(self):
        self._check()


def _children(pid):
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(name))
    return found


class ZzNothingLeftTest(unittest.TestCase):
    def test_template_has_no_children(self):
        from continuous_test.template import server as template

        pid = template.parent_pid()
        deadline = time.monotonic() + 10
        while _children(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(_children(pid), [], f"children of the template {pid}")


if __name__ == "__main__":
    run_tests()
