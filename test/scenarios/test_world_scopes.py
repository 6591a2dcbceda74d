"""Classes that share one world: ``world_scope = "module"`` (continuous_test.controller.world's registry).

Every test writes ``<class> <test> <rank> <pid>`` to ``$SCOPE_DIR/pids``; each class's
``setUpClass`` and ``tearDownClass`` write ``setup <class>`` and ``teardown <class>`` to
``$SCOPE_DIR/class``.  ``A``, ``B`` and ``E`` (one base, same settings) share one world, which stays up while
``C_OwnInit`` (it overrides ``_init_pg``) and ``D_OtherTimeout`` (another group timeout)
run in worlds of their own (each says why under ``-v``), and stops after ``E``, before
``F_Plain`` (``world_scope = "class"``) starts its own.
``$SCOPE_ATTR`` replaces ``"module"`` (empty: unset).  ``$SCOPE_POLLUTE=1``: ``A.test_a2`` leaves state that fails ``B.test_b1``, a test of
another class in the same world, which the rerun and bisect must name.  ``$SCOPE_BAD=1`` adds ``BadScope``, whose ``world_scope`` is not a scope.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, run_tests

OUT = os.environ.get("SCOPE_DIR", "/tmp")
POLLUTE = os.environ.get("SCOPE_POLLUTE") == "1"
_polluted = []  # rank-local state A.test_a2 leaves behind when SCOPE_POLLUTE=1 (no leak check sees it)


def _write(name, line):
    with open(os.path.join(OUT, name), "a") as f:
        f.write(line + "\n")


class Shared(MultiProcContinuousTest):
    world_size = 2
    world_scope = os.environ.get("SCOPE_ATTR", "module") or None  # SCOPE_ATTR="": the run's scope decides

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        _write("class", f"setup {cls.__name__} {os.getpid()}")

    @classmethod
    def tearDownClass(cls):
        _write("class", f"teardown {cls.__name__} {os.getpid()}")
        super().tearDownClass()

    def _check(self, test):
        _write("pids", f"{type(self).__name__} {test} {self.rank} {os.getpid()}")
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)
        self.assertIs(type(self).pg, dist.distributed_c10d._get_default_group())


class A(Shared):
    def test_a1(self):
        self._check("test_a1")

    def test_a2(self):
        self._check("test_a2")
        if POLLUTE:
            _polluted.append("test_a2")


class B(Shared):
    def test_b1(self):
        self._check("test_b1")
        self.assertEqual(_polluted, [])  # fails after A.test_a2 under SCOPE_POLLUTE=1: in the same world


class C_OwnInit(Shared):
    @classmethod
    def _init_pg(cls, rank, world_size, rdvz_file):
        super()._init_pg(rank, world_size, rdvz_file)

    def test_own_init(self):
        self._check("test_own_init")


class D_OtherTimeout(Shared):
    timeout = timedelta(seconds=60)

    def test_other_timeout(self):
        self._check("test_other_timeout")


class E(Shared):
    def test_e1(self):
        self._check("test_e1")


class F_Plain(Shared):
    world_scope = "class"

    def test_plain(self):
        self._check("test_plain")


if os.environ.get("SCOPE_BAD"):
    class BadScope(Shared):
        world_scope = "package"

        def test_bad(self):
            pass


if __name__ == "__main__":
    run_tests()
