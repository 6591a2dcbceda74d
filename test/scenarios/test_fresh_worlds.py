"""Tests that change their world run in a world of their own; the others share one (continuous_test.fresh_worlds).

Every test writes ``<test> <rank> <pid>`` to ``$FRESH_DIR/pids`` so the caller can
tell which tests shared a world: ``test_a``, ``test_d`` and ``test_f`` share the
class's world; ``test_b`` (``@fresh_world``), ``test_c`` (a pattern of
``fresh_world_tests``) and ``test_e`` (picked by ``changes_its_world``: its helper
destroys and re-creates the default group) each get one of their own.  Had
``test_b`` or ``test_e`` run in the shared world, ``test_f`` would find no group.
The class's leak policy is ``fail``, and ``test_b``, ``test_c`` and ``test_e`` each
leave their world changed (the default group destroyed, a variable set): they pass,
as a world of its own has no leak check.

``SharedDirTest`` checks ``shared_temp_dir``: one directory per test, the same on
every rank, empty at the test's start, removed after it (its paths go to
``$FRESH_DIR/dirs``; ``test_c``, two tests later in the same world, writes to
``$FRESH_DIR/gone`` whether ``test_a``'s directory still exists, and its world's).
``GroupInUseTest`` is torch's ``test_barrier_timeout_full_group``: rank 0 alone
waits in a barrier on a group that its peers, done with their test, must not have
closed yet, so it times out after the group's one second.
``ClassGroupTest``: the group a class's ``_init_pg`` makes again after a test destroyed
the default group is the world's, never released as the test's.  ``BrokenPairTest``: a call that failed (a monitored barrier timed out on rank 0)
may leave the default group's connections closed; the next test gets a new group.
"""
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from continuous_test import MultiProcContinuousTest, changes_its_world, fresh_world, run_tests
from continuous_test.fresh_worlds import either

OUT = os.environ.get("FRESH_DIR", "/tmp")


def note(test, rank):
    with open(os.path.join(OUT, "pids"), "a") as f:
        f.write(f"{test} {rank} {os.getpid()}\n")


class Gloo(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"


class FreshWorldTest(Gloo):
    fresh_world_tests = either({"test_c_*"}, changes_its_world)
    leak_policy = "fail"  # no leak check in a world of its own: its tests that leave changes pass

    def _sum(self):
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [2.0, 2.0])

    def _make_the_group_again(self):
        store = dist.FileStore(f"{self.rdvz_file}.again", self.world_size)
        dist.destroy_process_group()
        dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.world_size)

    def test_a_shared(self):
        note("test_a_shared", self.rank)
        self._sum()

    @fresh_world
    def test_b_decorated_destroys_the_group(self):
        note("test_b_decorated_destroys_the_group", self.rank)
        self._sum()
        dist.destroy_process_group()

    def test_c_by_pattern(self):
        note("test_c_by_pattern", self.rank)
        self._sum()
        os.environ["FRESH_WORLD_LEAK"] = "1"

    def test_d_shared(self):
        note("test_d_shared", self.rank)
        self._sum()

    def test_e_by_rule(self):
        note("test_e_by_rule", self.rank)
        self._make_the_group_again()
        self._sum()
        dist.destroy_process_group()

    def test_f_shared(self):
        note("test_f_shared", self.rank)
        self._sum()


class SharedDirTest(Gloo):
    def _check(self, test):
        path = self.shared_temp_dir
        self.assertEqual(os.listdir(path), [] if self.rank == 0 else os.listdir(path))
        dist.barrier()
        with open(os.path.join(path, f"rank{self.rank}"), "w") as f:
            f.write(test)
        dist.barrier()
        self.assertEqual(sorted(os.listdir(path)), [f"rank{r}" for r in range(self.world_size)])
        self.assertEqual(oct(os.stat(path).st_mode & 0o777), "0o700")
        with open(os.path.join(OUT, "dirs"), "a") as f:
            f.write(f"{test} {self.rank} {path}\n")

    def test_a_dir(self):
        self._check("test_a_dir")

    def test_b_dir(self):
        self._check("test_b_dir")

    def test_c_after_the_dirs(self):
        # test_a's directory is removed once every rank reported test_a: gone now, while the
        # world that made it still runs (test_b's may still be there: this test may have been
        # sent ahead before the controller was done with test_b).
        with open(os.path.join(OUT, "dirs")) as f:
            (made,) = {line.split()[2] for line in f if line.startswith("test_a_dir ")}
        world_dir = os.path.dirname(os.path.dirname(made))  # <world dir>/shared/<test>
        with open(os.path.join(OUT, "gone"), "a") as f:
            f.write(f"{self.rank} {made} {os.path.exists(made)} {os.path.isdir(world_dir)}\n")


class GroupInUseTest(Gloo):
    def test_a_barrier_on_a_group_the_peers_are_done_with_times_out(self):
        group = dist.new_group(timeout=timedelta(seconds=1))
        if self.rank == 0:
            began = time.monotonic()
            with self.assertRaisesRegex(Exception, "Timed out|timeout"):
                dist.barrier(group)
            self.assertGreater(time.monotonic() - began, 0.9)

    def test_b_after(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)


class BrokenPairTest(Gloo):
    # torch's test_monitored_barrier_* before test_reduce_max: the timed-out barrier
    # leaves rank 0's connection closed; the world makes its default group again.
    def test_a_rank_0_times_out_in_a_monitored_barrier(self):
        if self.rank == 0:
            with self.assertRaisesRegex(RuntimeError, "monitoredBarrier"):
                dist.monitored_barrier(timeout=timedelta(seconds=1))

    def test_b_the_default_group_works(self):
        t = torch.ones(1)
        dist.reduce(t, 0)
        dist.all_reduce(t)
        self.assertGreaterEqual(t.item(), 2.0)


class ClassGroupTest(Gloo):
    # A test destroys the default group in the shared world: the world makes it again
    # before the next test, with the group its _init_pg makes; that group is the
    # world's, not the test's, and must not be released with what a test made.
    @classmethod
    def _init_pg(cls, rank, world_size, rdvz_file):
        super()._init_pg(rank, world_size, rdvz_file)
        cls.everyone = dist.new_group(list(range(world_size)))

    def test_a_destroys_the_default_group(self):
        dist.destroy_process_group()

    def test_b_uses_the_class_group(self):
        t = torch.ones(1)
        dist.all_reduce(t, group=type(self).everyone)
        self.assertEqual(t.item(), 2.0)


class BadFreshWorldTest(Gloo):
    fresh_world_tests = 42

    def test_a(self):
        pass


if __name__ == "__main__":
    run_tests()
