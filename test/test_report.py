"""Merging per-rank outcomes into one verdict and its report (pure functions, no processes)."""
from __future__ import annotations

import pytest

from continuous_test.errors import InconsistentSkipError, RankDiedError, RankTimeoutError, RemoteError, RemoteTraceback
from continuous_test.verdict.merge import Status, merge
from continuous_test.wire.outcome import ErrorRecord, Event, EventKind, FaultKind, RankFault, RankOutcome, SubTestId


def record(exc: BaseException) -> ErrorRecord:
    return ErrorRecord.from_exception(exc, f"Traceback (most recent call last):\n{type(exc).__name__}: {exc}\n")


def outcome(rank, *events):
    return RankOutcome(rank, list(events))


PASS = Event(EventKind.SUCCESS)


def test_all_pass():
    verdict = merge("T.test", 2, {0: outcome(0, PASS), 1: outcome(1, PASS)})
    assert verdict.status is Status.PASS and not verdict.restart_world


def test_failure_on_one_rank_keeps_type_and_chains_tracebacks():
    fail = Event(EventKind.ERROR, errors=(record(KeyError("k")),))
    verdict = merge("T.test", 2, {0: outcome(0, PASS), 1: outcome(1, fail)}, outputs={1: "hi\n"})
    assert verdict.status is Status.FAIL and verdict.restart_world
    assert isinstance(verdict.error, KeyError)
    assert "T.test failed on rank 1 of 2 (rank 0 passed)" in str(verdict.error)
    assert "[rank1] hi" in str(verdict.error)
    assert isinstance(verdict.error.__cause__, RemoteTraceback)
    assert "[rank 1] Traceback" in str(verdict.error.__cause__)


def test_every_failing_rank_is_chained():
    fail0 = Event(EventKind.FAILURE, errors=(record(AssertionError("a")),))
    fail1 = Event(EventKind.FAILURE, errors=(record(AssertionError("b")),))
    verdict = merge("T.test", 2, {0: outcome(0, fail0), 1: outcome(1, fail1)})
    causes = [str(verdict.error.__cause__), str(verdict.error.__cause__.__cause__)]
    assert "[rank 0]" in causes[0] and "[rank 1]" in causes[1]


def test_unknown_exception_type_becomes_remote_error():
    rec = ErrorRecord("no_such_module", "Gone", "msg", "tb", is_failure=False)
    verdict = merge("T.test", 1, {0: outcome(0, Event(EventKind.ERROR, errors=(rec,)))})
    assert type(verdict.error) is RemoteError
    assert "no_such_module.Gone" in str(verdict.error)


def test_skips():
    skip = Event(EventKind.SKIP, reason="why")
    assert merge("T.test", 2, {0: outcome(0, skip), 1: outcome(1, skip)}).skip_reason == "why"
    verdict = merge("T.test", 2, {0: outcome(0, PASS), 1: outcome(1, skip)})
    assert isinstance(verdict.error, InconsistentSkipError)
    differing = merge("T.test", 2, {0: outcome(0, Event(EventKind.SKIP, reason="a")), 1: outcome(1, skip)})
    assert differing.skip_reason == "rank 0: a; rank 1: why"


def test_subtests_merge_per_subtest():
    sid = SubTestId(None, (("i", "1"),))
    bad = Event(EventKind.FAILURE, subtest=sid, errors=(record(AssertionError("x")),))
    verdict = merge("T.test", 2, {0: outcome(0, Event(EventKind.SUCCESS, subtest=sid)), 1: outcome(1, bad)})
    assert verdict.status is Status.PASS and verdict.failed
    [(got, sub)] = verdict.subtests
    assert got == sid and sub.status is Status.FAIL
    assert "T.test (i=1) failed on rank 1 of 2" in str(sub.error)


def test_rank_died():
    faults = [RankFault(1, FaultKind.DIED, exitcode=-11), RankFault(0, FaultKind.INTERRUPTED, stacks="File x\n")]
    verdict = merge("T.test", 2, {}, faults)
    assert isinstance(verdict.error, RankDiedError)
    text = str(verdict.error)
    assert text.startswith("rank 1 died with signal SIGSEGV while running T.test")
    assert "rank 0 was still running T.test" in text and "File x" in text
    assert "after a peer died" in text


def test_timeout_and_stuck():
    verdict = merge("T.test", 2, {}, [RankFault(0, FaultKind.TIMED_OUT, stacks="s0"),
                                      RankFault(1, FaultKind.TIMED_OUT, stacks="s1")], time_limit=5)
    assert isinstance(verdict.error, RankTimeoutError)
    assert "T.test exceeded its time limit of 5 s on ranks 0, 1" in str(verdict.error)
    fail = Event(EventKind.FAILURE, errors=(record(AssertionError("boom")),))
    stuck = merge("T.test", 2, {0: outcome(0, fail)}, [RankFault(1, FaultKind.STUCK, stacks="in all_reduce")], grace=3)
    assert isinstance(stuck.error, AssertionError)
    assert "rank 1 did not finish T.test within the 3 s grace period after rank 0 failed" in str(stuck.error)
    assert "in all_reduce" in str(stuck.error)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
