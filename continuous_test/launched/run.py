"""Running tests in place when an external launcher (torchrun, srun, mpiexec) started the ranks.

Each launched process is one rank and its own controller.  It reaches the launcher's
store once (torchrun's agent store, or a store that rank 0 hosts under srun and
mpiexec), joins
the default process group on it (:mod:`continuous_test.launched.join`), and runs
every test itself::

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
replaced (:func:`continuous_test.launched.join.rebuild`): a new group on new keys,
while the old one is abandoned (shutting down a broken gloo group can hang).  Every
key lives under the launch's ``run_id`` (:mod:`continuous_test._launch`), so
a rank that reached another run's store never joins that run's world.

A per-test time limit runs on each rank (:mod:`continuous_test.launched.time_limit`).
When it expires the rank prints which test it was running and the stacks of all its
threads, prints the errors its peers have published for the test (so a failing
rank's error is seen even when the reporting rank 0 is the one that times out),
publishes that it timed out (so its peers stop waiting and report it), then exits
non-zero, so the launcher ends the job.

Every wait is bounded: the store connection and the arrival of every rank by the
start timeout, the exchange by the time limit plus a margin, a group's rendezvous by
the start timeout, and the steps of an expired time limit by the grace period and
the shutdown timeout.
"""
from __future__ import annotations

import os
import pickle
import unittest
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

from continuous_test import _role, config, sizes
from continuous_test.errors import RendezvousError
from continuous_test._launch import Launch
from continuous_test.launched.join import WORLD_BROKEN, Joined, connect, group_intact, join, rebuild
from continuous_test.launched.output import Output
from continuous_test.launched.time_limit import TimeLimit
from continuous_test.rank import recorder, run as rank_run
from continuous_test.verdict import replay, timeline
from continuous_test.verdict.merge import Status, Verdict, merge
from continuous_test.wire import records
from continuous_test.wire.outcome import Event, EventKind, FaultKind, RankFault, RankOutcome

__all__ = [
    "run_in_place",
    "run_case_in_place",
    "run_fresh_once",
    "WORLD_SIZE_MISMATCH",
    "world_size_mismatch",
    "FRESH_FAILED",
]

WORLD_SIZE_MISMATCH = (
    "{cls} needs world_size={needed} but the launcher started WORLD_SIZE={launched} {launched_ranks}; "
    "launch it with {hint} giving {needed} {ranks}, or run it without a launcher"
)


def world_size_mismatch(cls: str, needed: int, launched: int, hint: str) -> str:
    """:data:`WORLD_SIZE_MISMATCH` filled in, each count with its own ``rank`` or ``ranks``."""
    return WORLD_SIZE_MISMATCH.format(cls=cls, needed=needed, launched=launched, hint=hint,
                                      ranks="rank" if needed == 1 else "ranks",
                                      launched_ranks="rank" if launched == 1 else "ranks")
# Hide this module's frames from unittest tracebacks: its errors speak for themselves.
__unittest = True
STOPPED_NOTE = "(the launched world cannot continue: every later test of this launch is skipped)"
FRESH_FAILED = (
    "{test} failed in the fresh ranks that launcher rank 0 started for it; "
    "rank 0's report has the ranks' errors"
)
FRESH_NO_VERDICT = "launcher rank 0 published no verdict for {test} within {seconds:g} s"
EXCHANGE_MARGIN = 60.0
ORDER_MISMATCH = (
    "launched ranks ran different tests as test {seq} of this launch ({names}): every rank must "
    "collect the same tests in the same order (the same files, -k, shuffle seed and arguments on every rank)"
)


# -- MultiProcContinuousTest: run on every rank, exchange, merge -------------------------


def run_in_place(case: unittest.TestCase, result, launch: Launch):
    """Run ``case`` on this rank and record the verdict merged across all ranks."""
    if _role.skipped_by_unittest(type(case), case._testMethodName):
        return _skip_in_place(case, result, launch)
    return replay.run_with(case, result, lambda: run_case_in_place(case, launch, replay.short_id(case)))


def _skip_in_place(case: unittest.TestCase, result, launch: Launch):
    """A test a decorator skips on this rank: it still takes part in the exchange.

    The decorator may read something that differs between ranks (``RANK``): peers
    that ran the test then learn of the skip at once, and the verdict is an
    inconsistent skip, not a rank that never reported.
    """
    test = replay.short_id(case)
    cls = type(case)
    joined = _joined_for(case, launch) if _size_matches(case, launch) else None
    if joined is None or joined.broken:
        return unittest.TestCase.run(case, result)  # unittest reports the skip
    key = _test_key(joined)
    reason = str(getattr(type(case), "__unittest_skip_why__", "") or
                 getattr(getattr(case, case._testMethodName), "__unittest_skip_why__", ""))
    outcome = RankOutcome(launch.rank, [Event(EventKind.SKIP, reason=reason)], test=_agreed_name(case))
    limit = config.test_time_limit(cls, getattr(case, case._testMethodName))
    outcomes, faults = _exchange(joined, key, outcome, launch, limit)
    verdict = merge(test, launch.world_size, outcomes, faults, grace=config.grace_period(cls), time_limit=limit,
                    note=STOPPED_NOTE if faults else None, restartable=False)
    _after_test(cls, joined, launch, test, verdict, faults)
    if verdict.status is Status.SKIP:
        return unittest.TestCase.run(case, result)
    error = verdict.error or RuntimeError(f"{test}: {verdict.status}")
    result.startTest(case)
    try:
        (result.addFailure if isinstance(error, AssertionError) else result.addError)(
            case, (type(error), error, error.__traceback__))
    finally:
        result.stopTest(case)
    return result


def _needed_size(case: unittest.TestCase) -> int:
    """The world size ``case`` needs: its own (a sized test, ``test_x[ws2]``), else its class's."""
    size = sizes.test_size(case)
    return size if size is not None else config.resolve(type(case), check_importable=False).world_size


def _size_matches(case: unittest.TestCase, launch: Launch) -> bool:
    return _needed_size(case) == launch.world_size


def _joined_for(case: unittest.TestCase, launch: Launch) -> Joined:
    """This launch's world (joined at its first test), counting one more test."""
    joined = join(type(case), launch)
    joined.seq += 1
    return joined


def run_case_in_place(case: unittest.TestCase, launch: Launch, test: str) -> Verdict:
    """Run one test on this launched rank; return the verdict merged across all ranks."""
    cls = type(case)
    needed = _needed_size(case)
    if needed != launch.world_size:
        raise unittest.SkipTest(world_size_mismatch(cls.__qualname__, needed, launch.world_size, launch.hint))
    joined = _joined_for(case, launch)
    if joined.broken:
        raise unittest.SkipTest(joined.broken)
    setattr(case, "rank", launch.rank)
    method = getattr(case, case._testMethodName)
    config.check_switches()
    limit, policy = config.test_time_limit(cls, method), config.leak_policy(cls, method)
    key = _test_key(joined)
    recorder.open_ring(None, launch.rank)
    with Output() as output:
        with TimeLimit(launch, key, test, limit, config.grace_period(cls), config.shutdown_timeout(cls)):
            outcome = rank_run.run_case(case, launch.rank, policy)
    outcome.records = recorder.snapshot()
    outcome.test, outcome.output = _agreed_name(case), output.text
    outcomes, faults = _exchange(joined, key, outcome, launch, limit)
    calls = timeline.lazy(lambda: timeline.build({r: records.parse(getattr(outcomes.get(r), "records", None) or b"")
                                                  if r in outcomes else None for r in range(launch.world_size)}))
    outputs = {r: o.output for r, o in outcomes.items() if o.output}
    verdict = merge(test, launch.world_size, outcomes, faults, outputs=outputs, grace=config.grace_period(cls),
                    time_limit=limit, note=STOPPED_NOTE if faults else None, timeline=calls, restartable=False)
    _after_test(cls, joined, launch, test, verdict, faults)
    return verdict


def _after_test(cls, joined: Joined, launch: Launch, test: str, verdict: Verdict, faults: List[RankFault]) -> None:
    if faults:
        # A rank that timed out or vanished will not run another test: nothing can continue.
        why = "; ".join(f"rank {f.rank} {_fault_words(f)}" for f in faults)
        joined.broken = WORLD_BROKEN.format(test=test, why=why)
    elif verdict.restart_world or not group_intact(joined):
        # A call that failed may have broken its group's connections: a launch
        # cannot start new processes, so its group is made again.
        rebuild(cls, joined, launch, test)


def _fault_words(fault: RankFault) -> str:
    if fault.kind is FaultKind.STUCK:
        return "was stuck in it after a peer skipped it"
    return "timed out" if fault.kind is FaultKind.TIMED_OUT else "never reported"


def _exchange(joined: Joined, key: str, outcome: RankOutcome, launch: Launch, limit: float):
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
    names = {rank: o.test for rank, o in outcomes.items()}
    if len(set(names.values())) > 1:  # the same position in the order, another test: nothing can continue
        message = ORDER_MISMATCH.format(seq=joined.seq, names=", ".join(f"rank {r}: {n}" for r, n in sorted(names.items())))
        joined.broken = message
        raise RendezvousError(message)
    return outcomes, faults


def _test_key(joined: Joined) -> str:
    """The exchange's keys for this launch's current test: its position in the order, the same on every rank.

    Not the test's id: a ``@distributed`` function's id shows its fixture values,
    whose repr may differ by rank (``tmp_path``).  That the ranks ran the same
    test is checked on the names they publish (:func:`_agreed_name`).
    """
    return f"test/{joined.seq}"


def _agreed_name(case: unittest.TestCase) -> str:
    """The test as every rank names it: pytest's node id where pytest runs it (parameter ids, no fixture values)."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")  # "path::name[id] (call)", set by pytest for each phase
    return current.rsplit(" (", 1)[0] if current else replay.short_id(case)


# -- MultiProcessTestCase: once per launch ------------------------------------------------


def run_fresh_once(case: unittest.TestCase, result, launch: Launch,
                   run: Callable[[Any], Any]) -> Any:
    """Run a MultiProcessTestCase test once per launch, and record its verdict on every launched rank.

    Launcher rank 0 runs it as without a launcher (``run``: fresh forked ranks) and
    publishes the verdict in the store; the other launcher ranks replay that verdict.
    """
    test = replay.short_id(case)
    if launch.rank != 0:
        return replay.run_with(case, result, lambda: _fresh_verdict(case, launch, test))
    if _role.skipped_by_unittest(type(case), case._testMethodName):
        return run(result)  # unittest records the skip; no rank counts this test
    try:
        joined = connect(type(case), launch)
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
        joined.store.set(_test_key(joined) + "/verdict", pickle.dumps(recorder.status))
    return own


def _fresh_verdict(case: unittest.TestCase, launch: Launch, test: str) -> Verdict:
    cls = type(case)
    joined = connect(cls, launch)
    joined.seq += 1
    if joined.broken:
        raise unittest.SkipTest(joined.broken)
    method = getattr(cls, case._testMethodName)
    seconds = (config.test_time_limit(cls, method) + config.grace_period(cls) + config.start_timeout(cls)
               + config.shutdown_timeout(cls) + EXCHANGE_MARGIN)
    joined.store.set_timeout(timedelta(seconds=seconds))
    try:
        status, reason = pickle.loads(joined.store.get(_test_key(joined) + "/verdict"))
    except Exception as exc:
        raise RendezvousError(FRESH_NO_VERDICT.format(test=test, seconds=seconds)) from exc
    if status is Status.FAIL:
        return Verdict(Status.FAIL, error=RuntimeError(FRESH_FAILED.format(test=test)))
    return Verdict(status, skip_reason=reason)


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
