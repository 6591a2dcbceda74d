"""Running tests in place when an external launcher (torchrun, srun) started the ranks.

Each launched process is one rank.  It reaches the launcher's store once (torchrun's
agent store, or a store that rank 0 hosts under srun), joins the default process
group on it, and runs every test itself::

    launcher ──> rank r: connect to the store (run-scoped keys) ── await every rank
                   │
                   ├─ MultiProcContinuousTest test N:  run ── publish outcome ── read all ── merge
                   │      failed anywhere: abandon the default group, rendezvous a new one
                   │      a rank timed out or vanished: skip the rest, naming test N
                   │
                   └─ MultiProcessTestCase test N:  rank 0 runs it with fresh forked ranks
                          and publishes the verdict; the other ranks replay it

Outcomes travel through the store, never through the process group, which the
test may have broken.  The exchange after each test is also the barrier that
brings every rank to a known point, from which a broken default group can be
replaced: a new group on new keys, while the old one is abandoned (shutting down
a broken gloo group can hang).  Every key lives under the launch's ``run_id``
(:mod:`continuous_test.launch`), so a rank that reached another run's store never
joins that run's world.

A per-test time limit runs on each rank.  When it expires the rank prints which test
it was running and the stacks of all its threads, publishes that it timed out (so
its peers stop waiting and report it), prints the errors its peers have published
for the test (so a failing rank's error is seen even when the reporting rank 0 is
the one that times out), then exits non-zero, so the launcher ends the job.

Every wait is bounded: the store connection and the arrival of every rank by the
start timeout, the exchange by the time limit plus a margin, a group's rendezvous by
the start timeout, and the steps of an expired time limit by the grace period and
the shutdown timeout.
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
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

from continuous_test import config, recorder, replay, timeline, worker
from continuous_test.launch import Launch
from continuous_test.outcome import FaultKind, RankFault, RankOutcome
from continuous_test.report import Status, Verdict, merge

__all__ = [
    "run_in_place",
    "run_case_in_place",
    "run_fresh_once",
    "RendezvousError",
    "WORLD_SIZE_MISMATCH",
    "NEVER_ARRIVED",
    "NO_STORE",
    "PORT_IN_USE",
    "OTHER_RUN",
    "TIME_LIMIT_EXCEEDED",
    "PEER_ERROR",
    "WORLD_BROKEN",
    "REBUILD_FAILED",
    "FRESH_FAILED",
    "EXIT_TIME_LIMIT",
]

WORLD_SIZE_MISMATCH = (
    "{cls} needs world_size={needed} but the launcher started WORLD_SIZE={launched} ranks; "
    "launch it with {hint} giving {needed} ranks, or run it without a launcher"
)
TIME_LIMIT_EXCEEDED = (
    "continuous_test: {test} exceeded its time limit of {limit:g} s on rank {rank}; "
    "stacks of all threads follow, then this rank exits with code {code}"
)
PEER_ERROR = "continuous_test: rank {rank} had already failed {test} (rank {me} timed out):\n{error}"
PEER_MISSING = "continuous_test: rank {rank} had not finished {test} either"
EXIT_TIME_LIMIT = 75
# Hide this module's frames from unittest tracebacks: its errors speak for themselves.
__unittest = True
NO_STORE = (
    "cannot reach the rendezvous store of {owner} at {where} within {seconds:g} s ({error}); "
    "check MASTER_ADDR/MASTER_PORT or the rendezvous endpoint (CONTINUOUS_TEST_START_TIMEOUT sets this limit)"
)
PORT_IN_USE = (
    "rank 0 cannot host the rendezvous store at {where}: the port is already in use (EADDRINUSE), "
    "by another program or by another launch given the same port; set MASTER_PORT to a free port"
)
OTHER_RUN = (
    "the rendezvous store at {where} belongs to another launch ({owner}), not to this one ({run}); "
    "give each concurrent launch its own MASTER_PORT"
)
NEVER_ARRIVED = (
    "rank(s) {ranks} of {world_size} never arrived at the rendezvous at {where} within {seconds:g} s; "
    "check that every rank was launched with the same {hint} and rendezvous endpoint "
    "(CONTINUOUS_TEST_START_TIMEOUT sets this limit)"
)
WORLD_BROKEN = (
    "skipped: the launched world broke in {test} ({why}); no later test of this launch can run"
)
STOPPED_NOTE = "(the launched world cannot continue: every later test of this launch is skipped)"
REBUILD_FAILED = "the default process group could not be rebuilt after {test} failed: {error}"
FRESH_FAILED = (
    "{test} failed in the fresh ranks that launcher rank 0 started for it; "
    "rank 0's report has the ranks' errors"
)
FRESH_NO_VERDICT = "launcher rank 0 published no verdict for {test} within {seconds:g} s"
EXCHANGE_MARGIN = 60.0
# How long a rank whose time limit expired waits for its peers' collective records.
TIMELINE_WAIT = 2.0
BACKSTOP_MARGIN = 5.0
STORE_PREFIX = "continuous_test"


@dataclass
class _Joined:
    """This process's membership in the launched world (one per process)."""

    store: Any  # the launcher's store, under this launch's run-scoped prefix
    rank: int
    start_timeout: float
    seq: int = 0  # tests of any class run so far; the same on every rank, so it keys the exchange
    generation: int = 0  # default groups created so far; each rendezvous on its own keys
    group: Any = None  # the default group this module created
    broken: Optional[str] = None  # why no later test can run (names the test that broke the world)
    # Broken default groups, kept referenced: their destructors could block like their shutdown.
    abandoned: List[Any] = field(default_factory=list)


_joined: Optional[_Joined] = None
_join_error: Optional[BaseException] = None


class RendezvousError(RuntimeError):
    """Launched ranks could not all meet; the message names the ranks that never arrived."""


# -- MultiProcContinuousTest: run on every rank, exchange, merge -------------------------


def run_in_place(case: unittest.TestCase, result, launch: Launch):
    """Run ``case`` on this rank and record the verdict merged across all ranks."""
    return replay.run_with(case, result, lambda: run_case_in_place(case, launch, replay.short_id(case)))


def run_case_in_place(case: unittest.TestCase, launch: Launch, test: str) -> Verdict:
    """Run one test on this launched rank; return the verdict merged across all ranks."""
    cls = type(case)
    needed = config.resolve(cls, check_importable=False).world_size
    if needed != launch.world_size:
        raise unittest.SkipTest(WORLD_SIZE_MISMATCH.format(cls=cls.__qualname__, needed=needed,
                                                           launched=launch.world_size, hint=launch.hint))
    joined = _join(cls, launch)
    joined.seq += 1
    if joined.broken:
        raise unittest.SkipTest(joined.broken)
    setattr(case, "rank", launch.rank)
    limit = config.test_time_limit(cls, getattr(case, case._testMethodName))
    key = _test_key(joined, test)
    recorder.open_ring(None, launch.rank)
    with _time_limit(launch, key, test, limit, config.grace_period(cls), config.shutdown_timeout(cls)):
        outcome = worker.run_case(case, launch.rank)
    outcome.records = recorder.snapshot()
    outcomes, faults = _exchange(joined, key, outcome, launch, limit)
    records = timeline.lazy(lambda: timeline.build({r: timeline.parse(getattr(outcomes.get(r), "records", None) or b"")
                                                    if r in outcomes else None for r in range(launch.world_size)}))
    verdict = merge(test, launch.world_size, outcomes, faults, time_limit=limit,
                    note=STOPPED_NOTE if faults else None, timeline=records)
    _after_test(cls, joined, launch, test, verdict, faults)
    return verdict


def _after_test(cls, joined: _Joined, launch: Launch, test: str, verdict: Verdict, faults: List[RankFault]) -> None:
    if faults:
        # A rank that timed out or vanished will not run another test: nothing can continue.
        why = "; ".join(f"rank {f.rank} {_fault_words(f)}" for f in faults)
        joined.broken = WORLD_BROKEN.format(test=test, why=why)
    elif verdict.restart_world or not _group_intact(joined):
        _rebuild(cls, joined, launch, test)


def _fault_words(fault: RankFault) -> str:
    return "timed out" if fault.kind is FaultKind.TIMED_OUT else "never reported"


def _group_intact(joined: _Joined) -> bool:
    """Whether the default group is still the one this module created (a test may replace it)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    return dist.is_initialized() and c10d._get_default_group() is joined.group


def _rebuild(cls, joined: _Joined, launch: Launch, test: str) -> None:
    """Replace the default group after a failed test; every rank is past the exchange, a known point."""
    _abandon_default_group(joined)
    try:
        _init(cls, joined, launch)
    except Exception as exc:
        reason = REBUILD_FAILED.format(test=test, error=exc)
        joined.broken = WORLD_BROKEN.format(test=test, why=reason)
        print(f"continuous_test: rank {launch.rank}: {reason}", file=sys.stderr, flush=True)


def _abandon_default_group(joined: _Joined) -> None:
    """Forget every process group without shutting it down: a broken gloo group's shutdown can hang.

    This is ``destroy_process_group()`` (torch/distributed/distributed_c10d.py) minus
    its ``pg.shutdown()`` calls; the groups stay referenced so they are never destructed.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if not dist.is_initialized():
        return
    world = c10d._world
    try:
        joined.abandoned.extend(world.pg_names)
        c10d._update_default_pg(None)
        for name in ("pg_map", "pg_names", "pg_group_ranks", "pg_backend_config", "pg_to_tag", "tags_to_pg",
                     "pg_coalesce_state"):
            getattr(world, name).clear()
        c10d._unregister_all_process_groups()
        world.group_count = 0
    except AttributeError:  # another torch's internals: fall back to the public call
        dist.destroy_process_group()


def _exchange(joined: _Joined, key: str, outcome: RankOutcome, launch: Launch, limit: float):
    """Publish this rank's outcome and read every rank's; this is also the per-test barrier."""
    import torch.distributed as dist

    store = dist.PrefixStore(key, joined.store)
    store.set(str(launch.rank), pickle.dumps(outcome))  # type: ignore[arg-type]  # bytes are fine; the stub says str
    # Each peer publishes within its own time limit (an expired one publishes its
    # timeout), so this bound is only reached by a rank that vanished.
    store.set_timeout(timedelta(seconds=limit + EXCHANGE_MARGIN))
    outcomes: Dict[int, RankOutcome] = {}
    faults: List[RankFault] = []
    for rank in range(launch.world_size):
        if rank == launch.rank:
            outcomes[rank] = outcome
            continue
        try:
            value = pickle.loads(store.get(str(rank)))
        except Exception:  # the store timed out: that rank hung or died
            faults.append(RankFault(rank, FaultKind.NO_REPORT))
            continue
        if isinstance(value, RankFault):
            faults.append(value)
        else:
            outcomes[rank] = value
    return outcomes, faults


def _test_key(joined: _Joined, test: str) -> str:
    return f"test/{joined.seq}/{test}"


# -- MultiProcessTestCase: once per launch ------------------------------------------------


def run_fresh_once(case: unittest.TestCase, result, launch: Launch,
                   run: Callable[[Any], Any]) -> Any:
    """Run a MultiProcessTestCase test once per launch; its ``run`` calls this under a launcher.

    Launcher rank 0 runs it as without a launcher (``run``: fresh forked ranks) and
    publishes the verdict in the store; the other launcher ranks replay that verdict.
    """
    test = replay.short_id(case)
    if launch.rank != 0:
        return replay.run_with(case, result, lambda: _fresh_verdict(case, launch, test))
    if _decorated_skip(case):
        return run(result)  # unittest records the skip; no rank counts this test
    try:
        joined = _connect(type(case), launch)
    except Exception as exc:
        error = exc
        return replay.run_with(case, result, lambda: _raise(error))
    joined.seq += 1
    if joined.broken:
        reason = joined.broken
        return replay.run_with(case, result, lambda: _raise(unittest.SkipTest(reason)))
    own = result if result is not None else case.defaultTestResult()
    recorder = _Recorder(own)
    try:
        run(recorder)
    finally:
        joined.store.set(_test_key(joined, test) + "/verdict", pickle.dumps(recorder.status))
    return own


def _fresh_verdict(case: unittest.TestCase, launch: Launch, test: str) -> Verdict:
    cls = type(case)
    joined = _connect(cls, launch)
    joined.seq += 1
    if joined.broken:
        raise unittest.SkipTest(joined.broken)
    method = getattr(cls, case._testMethodName)
    seconds = (config.test_time_limit(cls, method) + config.grace_period(cls) + config.start_timeout(cls)
               + config.shutdown_timeout(cls) + EXCHANGE_MARGIN)
    joined.store.set_timeout(timedelta(seconds=seconds))
    try:
        status, reason = pickle.loads(joined.store.get(_test_key(joined, test) + "/verdict"))
    except Exception as exc:
        raise RendezvousError(FRESH_NO_VERDICT.format(test=test, seconds=seconds)) from exc
    if status is Status.FAIL:
        return Verdict(Status.FAIL, error=RuntimeError(FRESH_FAILED.format(test=test)))
    return Verdict(status, skip_reason=reason)


def _decorated_skip(case: unittest.TestCase) -> bool:
    method = getattr(case, case._testMethodName)
    return bool(getattr(type(case), "__unittest_skip__", False) or getattr(method, "__unittest_skip__", False))


def _raise(error: BaseException) -> Verdict:
    raise error


class _Recorder:
    """A result that forwards to the real one and remembers the test's status, to publish it."""

    def __init__(self, result: Any) -> None:
        self._result = result
        self.status: Tuple[Status, Optional[str]] = (Status.PASS, None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._result, name)

    def _failed(self) -> None:
        self.status = (Status.FAIL, None)

    def addFailure(self, test, err) -> None:  # noqa: N802 - unittest's names
        self._failed()
        self._result.addFailure(test, err)

    def addError(self, test, err) -> None:  # noqa: N802
        self._failed()
        self._result.addError(test, err)

    def addUnexpectedSuccess(self, test) -> None:  # noqa: N802
        self._failed()
        self._result.addUnexpectedSuccess(test)

    def addSubTest(self, test, subtest, err) -> None:  # noqa: N802
        if err is not None:
            self._failed()
        self._result.addSubTest(test, subtest, err)

    def addSkip(self, test, reason) -> None:  # noqa: N802
        if self.status[0] is Status.PASS:
            self.status = (Status.SKIP, reason)
        self._result.addSkip(test, reason)


# -- joining ------------------------------------------------------------------------------


def _connect(cls, launch: Launch) -> _Joined:
    """Reach the launcher's store and wait for every rank, once per process."""
    global _joined
    import torch.distributed as dist

    if _join_error is not None:
        raise RendezvousError(str(_join_error))
    if _joined is None:
        try:
            timeout = config.start_timeout(cls)
            store = dist.PrefixStore(f"{STORE_PREFIX}/{launch.run_id}", _launcher_store(launch, timeout))
            _await_everyone(store, launch, timeout)
        except Exception as exc:
            _failed_to_join(exc, launch)
            raise
        _joined = _Joined(store=store, rank=launch.rank, start_timeout=timeout)
        atexit.register(_leave)
    return _joined


def _join(cls, launch: Launch) -> _Joined:
    """Connect, and create the default group if there is none yet."""
    import torch.distributed as dist

    joined = _connect(cls, launch)
    cls.rank = launch.rank
    if not dist.is_initialized() and not joined.broken:
        try:
            _init(cls, joined, launch)
        except Exception as exc:
            _failed_to_join(exc, launch)
            raise
    cls.pg = joined.group
    return joined


def _failed_to_join(exc: BaseException, launch: Launch) -> None:
    global _join_error
    _join_error = exc
    if launch.rank != 0:  # only rank 0 prints a report; this error must not go unseen
        print(f"continuous_test: rank {launch.rank}: {exc}", file=sys.stderr, flush=True)


def _launcher_store(launch: Launch, timeout: float):
    """A client of the launcher's store (torchrun's agent), or rank 0 hosting one (srun).

    Unlike ``env://``, the host does not block until every rank connected: the
    arrival check below waits instead, and can say who never came.
    """
    import torch.distributed as dist

    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    host = not agent and launch.rank == 0
    where = f"{launch.master_addr}:{launch.master_port}"
    assert launch.master_addr is not None and launch.master_port is not None, "a launch without MASTER_ADDR/PORT"
    try:
        store = dist.TCPStore(launch.master_addr, launch.master_port, launch.world_size if host else None, host,
                              timedelta(seconds=timeout), wait_for_workers=False, multi_tenant=True)
    except Exception as exc:
        if host and _address_in_use(exc):
            raise RendezvousError(PORT_IN_USE.format(where=where)) from exc
        owner = "the launcher's agent" if agent else "rank 0"
        raise RendezvousError(NO_STORE.format(owner=owner, where=where, seconds=timeout, error=exc)) from exc
    if not agent:
        _check_owner(store, launch, host, where)
    return store


def _address_in_use(exc: BaseException) -> bool:
    text = str(exc)
    return "EADDRINUSE" in text or "address already in use" in text.lower()


def _check_owner(store, launch: Launch, host: bool, where: str) -> None:
    """The host labels its store with the run id; the others check the label (bounded by the store timeout)."""
    key = f"{STORE_PREFIX}/owner"
    if host:
        store.set(key, launch.run_id)
        return
    owner = store.get(key).decode()
    if owner != launch.run_id:
        raise RendezvousError(OTHER_RUN.format(where=where, owner=owner, run=launch.run_id))


def _await_everyone(store, launch: Launch, timeout: float) -> None:
    """Wait until every rank announced itself in the store; name those that never did."""
    import torch.distributed as dist

    arrivals = dist.PrefixStore("arrived", store)
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
                                                   where=where, seconds=timeout, hint=launch.hint))


def _leave() -> None:
    """At exit: tell peers that rank 0 reported, and destroy the default group if it is healthy."""
    import torch.distributed as dist

    joined = _joined
    if joined is None:
        return
    if joined.rank == 0:
        try:
            joined.store.set("reported", "1")
        except Exception:  # the store's host is gone: nobody is waiting any more
            pass
    if dist.is_initialized() and not joined.broken and _group_intact(joined):
        dist.destroy_process_group()


def _init(cls, joined: _Joined, launch: Launch) -> None:
    import torch
    import torch.distributed as dist

    device = config.resolve_device_type(cls)
    if device != "cpu":
        torch.accelerator.set_device_index(launch.local_rank)
    joined.store.set_timeout(timedelta(seconds=joined.start_timeout))
    prefix = f"default_pg.{joined.generation}"
    joined.generation += 1
    dist.init_process_group(backend=cls.backend_str(), store=dist.PrefixStore(prefix, joined.store),
                            rank=launch.rank, world_size=launch.world_size, pg_options=cls.opts(),
                            timeout=cls.timeout)
    joined.group = cls.pg = dist.distributed_c10d._get_default_group()
    worker.remember_default_group()


# -- the per-test time limit ------------------------------------------------------------


class _time_limit:
    """Context manager: if the test outlives ``limit``, report (see the module docstring) and exit."""

    def __init__(self, launch: Launch, key: str, test: str, limit: float, grace: float, report_wait: float) -> None:
        self.launch, self.key, self.test, self.limit = launch, key, test, limit
        self.grace, self.report_wait = grace, report_wait
        self.timer = threading.Timer(limit, self._expired)
        self.timer.daemon = True

    def __enter__(self) -> "_time_limit":
        self.timer.start()
        # Backstop for a main thread that holds the GIL forever.
        faulthandler.dump_traceback_later(self.limit + self.grace + self.report_wait + BACKSTOP_MARGIN, exit=True)
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        faulthandler.cancel_dump_traceback_later()

    def _expired(self) -> None:
        rank = self.launch.rank
        print(TIME_LIMIT_EXCEEDED.format(test=self.test, limit=self.limit, rank=rank, code=EXIT_TIME_LIMIT),
              file=sys.stderr, flush=True)
        stacks = worker.format_stacks()
        print(stacks, file=sys.stderr, flush=True)
        try:
            import torch.distributed as dist

            run = self._own_client()
            store = dist.PrefixStore(self.key, run)
            own = recorder.snapshot()
            if own is not None:
                store.set(f"records/{rank}", own)  # type: ignore[arg-type]
            # Everything this rank prints comes before its fault is published: the
            # fault lets rank 0 go on to print its report, which must not interleave.
            _print_peer_errors(store, self.launch, self.test, self.grace)
            if own is not None:
                print(_peers_timeline(store, self.launch, own), file=sys.stderr, flush=True)
            store.set(str(rank), pickle.dumps(RankFault(rank, FaultKind.TIMED_OUT, stacks=stacks)))  # type: ignore[arg-type]
            if rank != 0:  # give rank 0 the time to print its report, which holds this timeout
                run.set_timeout(timedelta(seconds=self.report_wait))
                run.wait(["reported"])
        except Exception as exc:  # best effort: exiting is what matters now
            print(f"continuous_test: rank {rank}: {exc}", file=sys.stderr, flush=True)
        finally:
            sys.stderr.flush()
            os._exit(EXIT_TIME_LIMIT)

    def _own_client(self):
        """A connection of this thread's own: the main thread may be using the process's one."""
        import torch.distributed as dist

        launch = self.launch
        assert launch.master_addr is not None and launch.master_port is not None, "a launch without MASTER_ADDR/PORT"
        raw = dist.TCPStore(launch.master_addr, launch.master_port, None, False, timedelta(seconds=self.grace))
        return dist.PrefixStore(f"{STORE_PREFIX}/{launch.run_id}", raw)


def _peers_timeline(store: Any, launch: Launch, own: bytes) -> str:
    """The collective timeline of every rank that can tell, for a rank whose time limit expired.

    Peers whose limit expired too publish their records; those that finished the
    test carry them in their outcome.  Waits at most ``TIMELINE_WAIT`` for them.
    """
    ranks: Dict[int, Optional[timeline.RankCalls]] = {launch.rank: timeline.parse(own)}
    pending = set(range(launch.world_size)) - {launch.rank}
    deadline = time.monotonic() + TIMELINE_WAIT
    while pending and time.monotonic() < deadline:
        for rank in sorted(pending):
            if store.check([f"records/{rank}"]):
                ranks[rank] = timeline.parse(store.get(f"records/{rank}"))
            elif store.check([str(rank)]):
                value = pickle.loads(store.get(str(rank)))
                ranks[rank] = timeline.parse(getattr(value, "records", None) or b"")
            else:
                continue
            pending.discard(rank)
        if pending:
            time.sleep(0.05)
    ranks.update((rank, None) for rank in pending)
    return timeline.HEADING + "\n" + timeline.build(ranks).text


def _print_peer_errors(store, launch: Launch, test: str, grace: float) -> None:
    """Print the errors peers published for this test, waiting up to ``grace`` for the rest."""
    deadline = time.monotonic() + grace
    for rank in range(launch.world_size):
        if rank == launch.rank:
            continue
        store.set_timeout(timedelta(seconds=max(0.01, deadline - time.monotonic())))
        try:
            value = pickle.loads(store.get(str(rank)))
        except Exception:
            print(PEER_MISSING.format(rank=rank, test=test), file=sys.stderr, flush=True)
            continue
        if isinstance(value, RankOutcome) and value.has_failure():
            error = "\n".join(rec.traceback.rstrip() for event in value.events for rec in event.errors)
            print(PEER_ERROR.format(rank=rank, test=test, me=launch.rank, error=error), file=sys.stderr, flush=True)
