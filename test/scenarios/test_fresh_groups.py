"""Tests of a shared world that run on a default group made again for them, in the same ranks (``@fresh_group``).

Every test writes ``<test> <rank> <pid> <sequence number> <groups> <rendezvous file>`` to
``$FRESH_DIR/groups`` at its start.  ``test_a`` runs collectives on the default group and
makes a subgroup; ``test_b`` (``@fresh_group``) and ``test_c`` (a pattern of
``fresh_group_tests``) must see the default group's sequence number at 0, no group but
the default one, and a rendezvous file of their own, in the ranks of ``test_a``;
``test_d`` runs on the group ``test_c`` got (its sequence number goes on).
``BadFreshGroupTest``'s ``fresh_group_tests`` is neither names nor a rule: its test fails
naming the attribute.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from continuous_test import MultiProcContinuousTest, fresh_group, run_tests

OUT = os.environ.get("FRESH_DIR", "/tmp")
_kept = []


class Gloo(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"


class FreshGroupTest(Gloo):
    fresh_group_tests = {"test_c_*"}

    def _note(self, test):
        seq = c10d._get_default_group()._get_sequence_number_for_group()
        with open(os.path.join(OUT, "groups"), "a") as f:
            f.write(f"{test} {self.rank} {os.getpid()} {seq} {len(c10d._world.pg_names)} {self.rdvz_file}\n")
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [2.0, 2.0])

    def test_a_makes_a_subgroup(self):
        self._note("test_a_makes_a_subgroup")
        sub = dist.new_group([0, 1])
        dist.all_reduce(torch.ones(1), group=sub)
        _kept.append(sub)

    @fresh_group
    def test_b_decorated(self):
        self._note("test_b_decorated")

    def test_c_by_pattern(self):
        self._note("test_c_by_pattern")

    def test_d_shared(self):
        self._note("test_d_shared")


class BadFreshGroupTest(Gloo):
    fresh_group_tests = 3

    def test_bad(self):
        pass


if __name__ == "__main__":
    run_tests()
