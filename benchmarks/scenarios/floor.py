"""The floor: the scenarios' bodies in plain loops inside already-started ranks.

No test framework at all.  ``python floor.py`` is a torchrun-like launcher: it
starts ``BENCH_WORLD_SIZE`` plain interpreters of this same file with ``RANK`` set
and waits for them.  Each rank then times, with a barrier-free loop between
``time.monotonic()`` stamps:

* ``floor_world``: the first ``init_process_group`` (FileStore, gloo) plus the first
  all_reduce, i.e. joining a world once the process and torch are up (every rank);
* ``floor_collective``: ``BENCH_N`` suite bodies (``all_reduce`` of 8 floats);
* ``floor_fresh``: ``BENCH_N_FRESH`` fresh-world bodies (init, all_reduce, destroy);

and stamps its own memory (``rank_memory``).  Rank 0 stamps the loop timings.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import scenario_common as common
from scenario_common import SETTINGS

LAUNCH_TIMEOUT = 300.0


def launch() -> int:
    """Start the ranks as plain processes and wait for all of them (bounded)."""
    common.mark_controller()
    workdir = tempfile.mkdtemp(prefix="continuous_test-floor-")
    procs = []
    for rank in range(SETTINGS.world_size):
        env = dict(os.environ, RANK=str(rank), BENCH_FLOOR_DIR=workdir)
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=env))
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            return 1
    if SETTINGS.memory:
        common.stamp("rank_memory", rank=-1, **common.memory_of(os.getpid()))
    return max(codes)


def rank_main(rank: int) -> None:
    """One rank: join, run the loops, stamp."""
    import torch.distributed as dist

    world_size = SETTINGS.world_size
    workdir = os.environ["BENCH_FLOOR_DIR"]

    def init(i: int) -> None:
        store = dist.FileStore(os.path.join(workdir, f"rendezvous.{i}"), world_size)
        dist.init_process_group("gloo", rank=rank, world_size=world_size, store=store)

    t0 = time.monotonic()
    init(0)
    common.body()
    t1 = time.monotonic()
    for _ in range(SETTINGS.n):
        common.body()
    t2 = time.monotonic()
    dist.destroy_process_group()
    t3 = time.monotonic()
    n_fresh = int(os.environ.get("BENCH_N_FRESH", SETTINGS.n))
    for i in range(n_fresh):
        common.fresh_body(lambda: init(i + 1))
    t4 = time.monotonic()
    # Each rank's join includes waiting for slower peers; the last to arrive
    # waits least, so the runner takes the minimum over ranks.
    common.stamp("floor_world", rank=rank, seconds=t1 - t0)
    if rank == 0:
        common.stamp("floor_collective", seconds=t2 - t1, n=SETTINGS.n)
        common.stamp("floor_fresh", seconds=t4 - t3, n=n_fresh)
    common.stamp("rank_memory", rank=rank, **common.memory_of(os.getpid()))


if __name__ == "__main__":
    if "RANK" in os.environ:
        rank_main(int(os.environ["RANK"]))
    else:
        raise SystemExit(launch())
