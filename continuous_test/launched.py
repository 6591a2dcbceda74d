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

import atexit
import faulthandler
import os
import pickle
import sys
import threading
import time
import unittest
from dataclasses import dataclass
from datetime import timedelta
from typing import Dict, List, Optional

from continuous_test import config, replay, worker
from continuous_test.launch import Launch
from continuous_test.outcome import FaultKind, RankFault, RankOutcome
from continuous_test.report import Verdict, merge

__all__ = [
    "run_in_place",
    "run_case_in_place",
    "RendezvousError",
    "WORLD_SIZE_MISMATCH",
    "NEVER_ARRIVED",
    "TIME_LIMIT_EXCEEDED",
    "EXIT_TIME_LIMIT",
]

WORLD_SIZE_MISMATCH = (
    "{cls} needs world_size={needed} but the launcher started WORLD_SIZE={launched} ranks; "
    "launch it with --nproc-per-node/--nnodes giving {needed} ranks, or run it without a launcher"
)
TIME_LIMIT_EXCEEDED = (
    "continuous_test: {test} exceeded its time limit of {limit:g} s on rank {rank}; "
    "stacks of all threads follow, then this rank exits with code {code}"
)
EXIT_TIME_LIMIT = 75
# Hide this module's frames from unittest tracebacks: its errors speak for themselves.
__unittest = True
NO_STORE = (
    "cannot reach the rendezvous store of {owner} at {where} within {seconds:g} s ({error}); "
    "check MASTER_ADDR/MASTER_PORT or the rendezvous endpoint (CONTINUOUS_TEST_START_TIMEOUT sets this limit)"
)
NEVER_ARRIVED = (
    "rank(s) {ranks} of {world_size} never arrived at the rendezvous at {where} within {seconds:g} s; "
    "check that every node was launched with the same --nnodes/--nproc-per-node and rendezvous endpoint "
    "(CONTINUOUS_TEST_START_TIMEOUT sets this limit)"
)
EXCHANGE_MARGIN = 60.0


@dataclass
class _Joined:
    """This process's membership in the launched world."""

    store: object
    seq: int = 0
    reinits: int = 0


_joined: Optional[_Joined] = None
_join_error: Optional[BaseException] = None
_unhealthy = False


class RendezvousError(RuntimeError):
    """Launched ranks could not all meet; the message names the ranks that never arrived."""


def run_in_place(case: unittest.TestCase, result, launch: Launch):
    """Run ``case`` on this rank and record the verdict merged across all ranks."""
    return replay.run_with(case, result, lambda: run_case_in_place(case, launch, replay.short_id(case)))


def run_case_in_place(case: unittest.TestCase, launch: Launch, test: str) -> Verdict:
    """Run one test on this launched rank; return the verdict merged across all ranks."""
    cls = type(case)
    needed = config.resolve(cls, check_importable=False).world_size
    if needed != launch.world_size:
        raise unittest.SkipTest(WORLD_SIZE_MISMATCH.format(cls=cls.__qualname__, needed=needed, launched=launch.world_size))
    joined = _join(cls, launch)
    joined.seq += 1
    case.rank = launch.rank
    limit = config.test_time_limit(cls, getattr(case, case._testMethodName))
    with _time_limit(test, limit, launch.rank):
        outcome = worker.run_case(case, launch.rank)
    outcomes, faults = _exchange(joined, outcome, test, launch, limit)
    if faults:
        global _unhealthy
        _unhealthy = True  # a peer hung or died: destroying the group at exit could hang
    if any(o.group_changed for o in outcomes.values()):
        _rejoin(cls, joined, launch)
    return merge(test, launch.world_size, outcomes, faults, time_limit=limit)


def _join(cls, launch: Launch) -> _Joined:
    global _joined, _join_error
    import torch.distributed as dist

    if _join_error is not None:
        raise RendezvousError(str(_join_error))
    try:
        if _joined is None:
            timeout = config.start_timeout(cls)
            store = _launcher_store(launch, timeout)
            _await_everyone(store, launch, timeout)
            _joined = _Joined(store=store)
            atexit.register(_leave)
        cls.rank = launch.rank
        if not dist.is_initialized():
            _init(cls, _joined, launch, "default_pg")
    except Exception as exc:
        _join_error = exc
        if launch.rank != 0:  # only rank 0 prints a report; this error must not go unseen
            print(f"continuous_test: rank {launch.rank}: {exc}", file=sys.stderr, flush=True)
        raise
    return _joined


def _launcher_store(launch: Launch, timeout: float):
    """A client of the launcher's store (torchrun's agent), or rank 0 hosting one (srun).

    Unlike ``env://``, the host does not block until every rank connected: the
    arrival check below waits instead, and can say who never came.
    """
    import torch.distributed as dist

    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    host = not agent and launch.rank == 0
    try:
        return dist.TCPStore(launch.master_addr, launch.master_port, launch.world_size if host else None, host,
                             timedelta(seconds=timeout), wait_for_workers=False, multi_tenant=True)
    except Exception as exc:
        owner = "the launcher's agent" if agent else "rank 0"
        raise RendezvousError(NO_STORE.format(owner=owner, where=f"{launch.master_addr}:{launch.master_port}",
                                              seconds=timeout, error=exc)) from exc


def _await_everyone(store, launch: Launch, timeout: float) -> None:
    """Wait until every rank announced itself in the store; name those that never did."""
    import torch.distributed as dist

    arrivals = dist.PrefixStore("continuous_test/arrived", store)
    arrivals.set(str(launch.rank), "1")
    deadline = time.monotonic() + timeout
    missing = [str(r) for r in range(launch.world_size)]
    while missing and time.monotonic() < deadline:
        missing = [r for r in missing if not arrivals.check([r])]
        if missing:
            time.sleep(0.05)
    if missing:
        where = f"{launch.master_addr}:{launch.master_port}"
        raise RendezvousError(NEVER_ARRIVED.format(ranks=", ".join(missing), world_size=launch.world_size,
                                                   where=where, seconds=timeout))


def _leave() -> None:
    """At exit, destroy the default group if the last test left the world healthy."""
    import torch.distributed as dist

    if dist.is_initialized() and not _unhealthy:
        dist.destroy_process_group()


def _init(cls, joined: _Joined, launch: Launch, prefix: str) -> None:
    import torch
    import torch.distributed as dist

    device = config.resolve_device_type(cls)
    if device != "cpu":
        torch.accelerator.set_device_index(launch.local_rank)
    dist.init_process_group(backend=cls.backend_str(), store=dist.PrefixStore(prefix, joined.store),
                            rank=launch.rank, world_size=launch.world_size, pg_options=cls.opts(),
                            timeout=cls.timeout)
    cls.pg = dist.distributed_c10d._get_default_group()
    worker.remember_default_group()


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
