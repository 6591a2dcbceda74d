"""The floor: the scenarios' bodies in a plain loop inside one test of a running world.

The loop runs in the same kind of ranks and on the same kind of process group as
the suites (``continuous_test.MultiProcContinuousTest``, gloo on loopback), so
the only thing it leaves out is what a test runner adds per test.  Timed between
``time.monotonic()`` stamps, with no barrier in the loop:

* ``floor_collective``: ``BENCH_N`` suite bodies (``all_reduce`` of 8 floats) on the
  world's default group;
* ``floor_world``: then, with the default group destroyed, ``init_process_group``
  (FileStore, gloo) plus the first all_reduce, i.e. joining a world in ranks whose
  interpreter and torch are already up (every rank stamps it; the runner takes the
  minimum, as the last rank to arrive waits least);
* ``floor_fresh``: ``BENCH_N_FRESH`` fresh-world bodies (init, all_reduce, destroy),
  the first one included, and each later body's own time (``bodies``).

Rank 0 stamps the loops.  Rendezvous files live in the world's own directory,
which the library removes with the world: the floor leaves nothing behind.
"""
from __future__ import annotations

import os
import time

import scenario_common as common
from scenario_common import SETTINGS

from continuous_test import MultiProcContinuousTest, run_tests


class Floor(MultiProcContinuousTest):
    world_size = SETTINGS.world_size

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"

    def test_loops(self) -> None:
        import torch.distributed as dist

        common.body()  # the group's first collective is not part of the loop
        t0 = time.monotonic()
        for _ in range(SETTINGS.n):
            common.body()
        t1 = time.monotonic()
        dist.destroy_process_group()
        self._fresh_loop(max(1, int(os.environ.get("BENCH_N_FRESH", "1"))))
        if self.rank == 0:
            common.stamp("floor_collective", seconds=t1 - t0, n=SETTINGS.n)

    def _fresh_loop(self, n_fresh: int) -> None:
        import torch.distributed as dist

        rendezvous = os.path.join(os.path.dirname(self.rdvz_file), "floor")

        def init(i: int) -> None:
            store = dist.FileStore(f"{rendezvous}.{i}", self.world_size)
            dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size, store=store)

        t0 = time.monotonic()
        init(0)
        common.body()
        common.stamp("floor_world", rank=self.rank, seconds=time.monotonic() - t0)
        dist.destroy_process_group()
        bodies = []
        for i in range(1, n_fresh):
            t1 = time.monotonic()
            common.fresh_body(lambda i=i: init(i))
            bodies.append(time.monotonic() - t1)
        if self.rank == 0:
            common.stamp("floor_fresh", seconds=time.monotonic() - t0, n=n_fresh, bodies=bodies)


if __name__ == "__main__":
    common.mark_controller()
    run_tests()
