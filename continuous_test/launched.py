"""Running tests in place when an external launcher (torchrun, srun) started the ranks.

Each launched process is one rank: it joins the default process group once, on
``env://`` rendezvous, and runs every test itself.  After each test every rank
publishes its :class:`~continuous_test.outcome.RankOutcome` in the launcher's
store (not through the process group, which the test may have broken) and reads
everyone else's, so that

* every rank replays the same merged verdict: a failure on rank 3 fails the test
  on rank 0, whose runner prints the summary, and every rank exits non-zero;
* no rank starts test N+1 before every rank has finished test N.

A per-test time limit runs on each rank: when it expires the rank prints which
test it was running and the stacks of all its threads, then exits non-zero, so
the launcher ends the job instead of hanging.
"""
from __future__ import annotations

import faulthandler
import os
import pickle
import sys
import threading
import unittest
from dataclasses import dataclass
from datetime import timedelta
from typing import Dict, List, Optional

from continuous_test import config, replay, worker
from continuous_test.launch import Launch
from continuous_test.outcome import FaultKind, RankFault, RankOutcome, Verdict, merge

__all__ = ["run_in_place", "WORLD_SIZE_MISMATCH", "TIME_LIMIT_EXCEEDED", "EXIT_TIME_LIMIT"]

WORLD_SIZE_MISMATCH = (
    "{cls} needs world_size={needed} but the launcher started WORLD_SIZE={launched} ranks; "
    "launch it with --nproc-per-node/--nnodes giving {needed} ranks, or run it without a launcher"
)
TIME_LIMIT_EXCEEDED = (
    "continuous_test: {test} exceeded its time limit of {limit:g} s on rank {rank}; "
    "stacks of all threads follow, then this rank exits with code {code}"
)
EXIT_TIME_LIMIT = 75
EXCHANGE_MARGIN = 60.0


@dataclass
class _Joined:
    """This process's membership in the launched world."""

    store: object
    seq: int = 0
    reinits: int = 0


_joined: Optional[_Joined] = None


def run_in_place(case: unittest.TestCase, result, launch: Launch):
    """Run ``case`` on this rank and record the verdict merged across all ranks."""
    return replay.run_with(case, result, lambda: _run(case, launch))


def _run(case, launch: Launch) -> Verdict:
    cls = type(case)
    needed = cls._resolve_world_size()
    if needed != launch.world_size:
        raise unittest.SkipTest(WORLD_SIZE_MISMATCH.format(cls=cls.__qualname__, needed=needed, launched=launch.world_size))
    cls._check_backend(needed)
    joined = _join(cls, launch)
    joined.seq += 1
    case.rank = launch.rank
    test = replay.short_id(case)
    limit = config.test_time_limit(cls, getattr(case, case._testMethodName))
    with _time_limit(test, limit, launch.rank):
        outcome = worker.run_case(case, launch.rank)
    outcomes, faults = _exchange(joined, outcome, test, launch, limit)
    if any(o.pg_destroyed for o in outcomes.values()):
        _rejoin(cls, joined, launch)
    return merge(test, launch.world_size, outcomes, faults, time_limit=limit)


def _join(cls, launch: Launch) -> _Joined:
    global _joined
    import torch.distributed as dist

    if _joined is None:
        store, _, _ = next(dist.rendezvous("env://", timeout=cls.timeout))
        _joined = _Joined(store=store)
    cls.rank = launch.rank
    if not dist.is_initialized():
        _init(cls, _joined, launch, "default_pg")
    if launch.is_launcher and os.environ.get("LOCAL_RANK") is not None:
        os.environ.setdefault("LOCAL_WORLD_SIZE", str(launch.local_world_size))
    return _joined


def _init(cls, joined: _Joined, launch: Launch, prefix: str) -> None:
    import torch
    import torch.distributed as dist

    device = cls._resolve_device_type()
    if device != "cpu":
        torch.accelerator.set_device_index(launch.local_rank)
    dist.init_process_group(backend=cls.backend_str(), store=dist.PrefixStore(prefix, joined.store),
                            rank=launch.rank, world_size=launch.world_size, pg_options=cls.opts(),
                            timeout=cls.timeout)
    cls.pg = dist.distributed_c10d._get_default_group()


def _rejoin(cls, joined: _Joined, launch: Launch) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    joined.reinits += 1
    _init(cls, joined, launch, f"default_pg.{joined.reinits}")


def _exchange(joined: _Joined, outcome: RankOutcome, test: str, launch: Launch, limit: float):
    """Publish this rank's outcome and read every rank's; this is also the per-test barrier."""
    import torch.distributed as dist

    store = dist.PrefixStore(f"continuous_test/{joined.seq}/{test}", joined.store)
    store.set(str(launch.rank), pickle.dumps(outcome))
    store.set_timeout(timedelta(seconds=limit + EXCHANGE_MARGIN))
    outcomes: Dict[int, RankOutcome] = {}
    faults: List[RankFault] = []
    for rank in range(launch.world_size):
        if rank == launch.rank:
            outcomes[rank] = outcome
            continue
        try:
            outcomes[rank] = pickle.loads(store.get(str(rank)))
        except Exception:  # the store timed out: that rank hung or died
            faults.append(RankFault(rank, FaultKind.NO_REPORT))
    return outcomes, faults


class _time_limit:
    """Context manager: dump stacks and exit this rank if the test outlives ``limit``."""

    def __init__(self, test: str, limit: float, rank: int) -> None:
        self.test, self.limit, self.rank = test, limit, rank
        self.timer = threading.Timer(limit, self._expired)
        self.timer.daemon = True

    def __enter__(self) -> "_time_limit":
        self.timer.start()
        # Backstop for a main thread that holds the GIL forever.
        faulthandler.dump_traceback_later(self.limit + 5, exit=True)
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        faulthandler.cancel_dump_traceback_later()

    def _expired(self) -> None:
        print(TIME_LIMIT_EXCEEDED.format(test=self.test, limit=self.limit, rank=self.rank, code=EXIT_TIME_LIMIT),
              file=sys.stderr, flush=True)
        print(worker.format_stacks(), file=sys.stderr, flush=True)
        os._exit(EXIT_TIME_LIMIT)
