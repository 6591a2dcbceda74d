"""Merging every rank's outcome of one test into one verdict.

::

    RankOutcome per rank ─┐
    RankFault (controller)├─► merge() / judge_endings() ─► Verdict(PASS | SKIP | FAIL, error)
    rank outputs ─────────┘          │
                                     └─ report.Report: header line, one line per group of ranks
                                        that failed alike, stacks, outputs, extra sections
                                        ─► the error: the first failing rank's own exception
                                        object, its first line naming the test and ranks,
                                        each distinct rank traceback chained as __cause__

Faults the controller saw itself (deaths, time limits) raise
:class:`~continuous_test.errors.RankDiedError` and friends; a leak the ranks
reported becomes a warning, a failure (policy ``fail``) or a restart.  Used by the
controller and by every launched rank.
"""
from __future__ import annotations

import enum
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from continuous_test.errors import (
    ConfigError,
    ExpectMismatchError,
    InconsistentSkipError,
    RankDiedError,
    RankStuckError,
    RankTimeoutError,
    UnexpectedEndingError,
)
from continuous_test.verdict import leaks as verdict_leaks
from continuous_test.verdict.report import WAITED_FOR_A_PEER, RankReport, RankStatus, Report, add_note
from continuous_test.verdict.text import indent, rank_list
from continuous_test.verdict.timeline import Timeline
from continuous_test.wire.outcome import (
    TEST_ERROR_EXIT_CODE,
    ErrorRecord,
    EventKind,
    ExpectedExit,
    FaultKind,
    LeakReport,
    RankEnding,
    RankFault,
    RankOutcome,
    SubTestId,
    exit_description,
    torch_skip_code_message,
)

__all__ = [
    "Status",
    "Verdict",
    "merge",
    "judge_endings",
    "FAILED",
    "INCONSISTENT_SKIP",
    "DIED",
    "STUCK",
    "TIMED_OUT",
    "NO_REPORT",
    "INTERRUPTED",
    "TEMPLATE_DIED",
    "UNEXPECTED_ENDING",
    "EXPECT_DIFFERS",
]

FAILED = "{test} failed on {ranks} of {world_size}"
INCONSISTENT_SKIP = (
    "{test} was skipped on {skipped} but ran on {ran}: a test must "
    "skip on every rank or on none, because peers may be blocked in a collective. "
    "Decide the skip from facts that are the same on all ranks."
)
DIED = "rank {rank} died with {how} while running {test}"
STUCK = "rank {rank} did not finish {test} within the {grace:g} s grace period after {cause}"
TIMED_OUT = "{test} exceeded its time limit of {limit:g} s on {ranks}"
NO_REPORT = "rank {rank} never reported an outcome for {test}"
INTERRUPTED = "rank {rank} was still running {test} {grace:g} s after a peer died"
TEMPLATE_DIED = (
    "rank {rank} was killed with the template process it was forked from, which died while {test} ran "
    "(killed by a test, or by the OOM killer)"
)
UNEXPECTED_ENDING = "{test}: {ranks} did not end as expected"
NO_SUCH_RANK = (
    "{test}: @expect_exit(ranks={ranks}) names {missing}, which does not exist: the test ran at world size "
    "{world_size} ({existing}); name ranks below the world size, or give the test a larger world_size"
)
EXPECT_DIFFERS = (
    "under EXPECTTEST_ACCEPT=1 the value checked at {where} differs between ranks; "
    "rank {ref}'s value was written to the file:\n{values}"
)


class Status(enum.Enum):
    """The merged outcome of a test or subtest across all ranks."""

    PASS = "pass"
    SKIP = "skip"
    FAIL = "fail"


@dataclass
class Verdict:
    """The single outcome of one test across all ranks, ready to replay into a TestResult."""

    status: Status
    error: Optional[BaseException] = None
    skip_reason: Optional[str] = None
    subtests: List[Tuple[SubTestId, "Verdict"]] = field(default_factory=list)
    restart_world: bool = False
    # The merged leak report under the restore policy: replay warns with it.
    leak_report: Optional[str] = None
    # Every rank failed as its test declared (unittest's expectedFailure), and nothing else happened.
    expected_failure: bool = False
    # Seconds from the test's send to the last rank's report (0.0 where not measured).
    duration: float = 0.0
    # Ctrl-C came while its failure was diagnosed: the runner records the failure, then stops.
    interrupted: bool = False
    # A rank's collective ended in the backend's own timeout (the process group's): a hang.
    backend_timeout: bool = False

    @property
    def failed(self) -> bool:
        """True when the test or any of its subtests failed."""
        return self.status is Status.FAIL or any(v.failed for _, v in self.subtests)


_FAULT_STATUS = {
    FaultKind.DIED: RankStatus.DIED,
    FaultKind.TEMPLATE_DIED: RankStatus.TEMPLATE_DIED,
    FaultKind.STUCK: RankStatus.STUCK,
    FaultKind.TIMED_OUT: RankStatus.TIMED_OUT,
    FaultKind.NO_REPORT: RankStatus.NO_REPORT,
    FaultKind.INTERRUPTED: RankStatus.INTERRUPTED,
}
_DEATHS = (FaultKind.DIED, FaultKind.TEMPLATE_DIED)
# How the backends word a collective that outlived the process group's timeout:
# gloo raises it in the test; NCCL's watchdog, where it raises rather than aborts.
BACKEND_TIMEOUT = re.compile(r"Timed out waiting \d+ ?ms for \w+ operation|Watchdog caught collective operation timeout")


# -- merging ------------------------------------------------------------------------


@dataclass
class _RankUnit:
    """One rank's status for one unit (the test itself, or one subtest)."""

    status: Status
    errors: List[ErrorRecord] = field(default_factory=list)
    reason: Optional[str] = None

    def report(self, output: str = "") -> RankReport:
        if self.status is Status.FAIL:
            return RankReport(RankStatus.FAILED, "\n".join(r.traceback.rstrip() for r in self.errors), output)
        if self.status is Status.SKIP:
            return RankReport(RankStatus.SKIPPED, self.reason or "", output)
        return RankReport(RankStatus.PASSED, "", output)


def merge(
    test: str,
    world_size: int,
    outcomes: Dict[int, RankOutcome],
    faults: Sequence[RankFault] = (),
    outputs: Optional[Dict[int, str]] = None,
    grace: float = 0.0,
    time_limit: float = 0.0,
    note: Optional[str] = None,
    timeline: Optional[Callable[[], Optional[Timeline]]] = None,
    restartable: bool = True,
    ranks_died: bool = False,
) -> Verdict:
    """Merge every rank's outcome of one run of ``test``, and the faults seen, into one verdict.

    ``note`` ends the report of a fault (the controller says what it does next).
    ``timeline`` builds the collective timeline; it is called only for a report
    that shows it (a fault, a failure on some ranks, or ranks whose calls differ).
    ``ranks_died``: a rank died after it replied (reported as a death between tests).
    The verdict's ``restart_world`` is the one decision whether the next test needs a
    new world (new ranks, or under a launcher a new group).
    """
    outputs = outputs or {}
    units = _units(outcomes)
    main = units.pop(None, {})
    for rank in outcomes:
        main.setdefault(rank, _RankUnit(Status.PASS))
    _check_expect_values(test, outcomes, main)
    subtests = [(sid, _merge_unit(f"{test} {sid.describe()}", world_size, per_rank, outputs))
                for sid, per_rank in units.items() if sid is not None]
    if faults:
        error = _fault_error(test, world_size, main, faults, outputs, grace, time_limit, note, timeline)
        verdict = Verdict(Status.FAIL, error=error)
    else:
        verdict = _merge_unit(test, world_size, main, outputs, timeline)
    verdict.subtests = subtests
    verdict.expected_failure = not faults and len(outcomes) == world_size and all(
        _failed_as_expected(o) for o in outcomes.values())
    # After a failure the next test starts in a new world: a collective one rank made
    # before it failed may be unmatched on another.  Not after a failure every rank
    # declared (expectedFailure) whose calls the timeline shows ended and paired up.
    # After a call that failed, even one the test caught and passed: gloo closes a pair
    # whose call timed out, so the group's connections may be broken (a new default group
    # in the same processes is not enough: torch's DDP logger then crashed in
    # test_ddp_logging_data_cpu).
    verdict.restart_world = (bool(faults) or ranks_died or any(o.call_failed for o in outcomes.values())
                             or (verdict.failed and not (verdict.expected_failure and _settled(timeline))))
    verdict.backend_timeout = any(BACKEND_TIMEOUT.search(record.message) for outcome in outcomes.values()
                                  for event in outcome.events for record in event.errors)
    leak_reports = {r: o.leaks for r, o in outcomes.items() if o.leaks is not None}
    if leak_reports:
        _judge_leaks(test, verdict, leak_reports, restartable)
    return verdict


def _settled(timeline: Optional[Callable[[], Optional[Timeline]]]) -> bool:
    """Whether the test's calls on every rank are known, ended and paired up (False where unknown)."""
    built = timeline() if timeline is not None else None
    return built is not None and built.settled


def _judge_leaks(test: str, verdict: Verdict, reports: Dict[int, LeakReport], restartable: bool) -> None:
    """Fold the ranks' leak reports into ``verdict``: a warning (restore), a failure (fail), a restart."""
    if verdict_leaks.unrestored(reports):
        verdict.restart_world = True
    failure = verdict_leaks.failing(test, reports, restartable)
    if failure is None:
        verdict.leak_report = verdict_leaks.format_report(test, reports, restartable)
    elif not verdict.failed:
        verdict.status, verdict.error = Status.FAIL, failure
        verdict.restart_world = True  # as for any failure: the next test starts clean
    elif verdict.error is not None:
        add_note(verdict.error, verdict_leaks.format_report(test, reports, restartable))


def _failed_as_expected(outcome: RankOutcome) -> bool:
    kinds = {event.kind for event in outcome.events}
    return EventKind.EXPECTED_FAILURE in kinds and not kinds & {EventKind.FAILURE, EventKind.ERROR}


def _units(outcomes: Dict[int, RankOutcome]) -> Dict[Optional[SubTestId], Dict[int, _RankUnit]]:
    units: Dict[Optional[SubTestId], Dict[int, _RankUnit]] = {}
    for rank, outcome in sorted(outcomes.items()):
        for event in outcome.events:
            unit = units.setdefault(event.subtest, {}).setdefault(rank, _RankUnit(Status.PASS))
            if event.kind in (EventKind.FAILURE, EventKind.ERROR, EventKind.EXPECTED_FAILURE):
                unit.status = Status.FAIL
                unit.errors.extend(event.errors)
            elif event.kind is EventKind.SKIP and unit.status is not Status.FAIL:
                unit.status, unit.reason = Status.SKIP, event.reason
    return units


def _check_expect_values(test: str, outcomes: Dict[int, RankOutcome], main: Dict[int, _RankUnit]) -> None:
    """Fail the ranks whose accepted expecttest value differs from the lowest rank's (which was written)."""
    seen: Dict[Tuple[str, int], Dict[int, str]] = {}
    for rank, outcome in sorted(outcomes.items()):
        count: Counter = Counter()
        for value in outcome.expect_values:
            seen.setdefault((value.where, count[value.where]), {})[rank] = value.actual
            count[value.where] += 1
    for (where, _), values in seen.items():
        ref = min(values)
        differing = sorted(r for r, v in values.items() if v != values[ref])
        if not differing:
            continue
        listed = "\n".join(f"  rank {r}: {v!r}" for r, v in sorted(values.items()))
        error = ExpectMismatchError(EXPECT_DIFFERS.format(where=where, ref=ref, values=listed))
        record = ErrorRecord.from_exception(error, f"{type(error).__name__}: {error}\n")
        record = ErrorRecord(**{**record.__dict__, "location": where.rsplit("/", 1)[-1]})
        for rank in differing:
            main[rank].status = Status.FAIL
            main[rank].errors.append(record)


def _merge_unit(test: str, world_size: int, per_rank: Dict[int, _RankUnit], outputs, timeline=None) -> Verdict:
    failed = {r: u.errors for r, u in per_rank.items() if u.status is Status.FAIL}
    skipped = {r: u.reason for r, u in per_rank.items() if u.status is Status.SKIP}
    if failed:
        return Verdict(Status.FAIL, error=_failure_error(test, world_size, failed, per_rank, outputs, timeline))
    if skipped and len(skipped) < len(per_rank):
        ran = sorted(set(per_rank) - set(skipped))
        report = Report([INCONSISTENT_SKIP.format(test=test, skipped=rank_list(skipped), ran=rank_list(ran)),
                         "Skip reasons:" + "".join(f"\n  rank {r}: {why}" for r, why in sorted(skipped.items()))])
        report.statuses = {r: u.report(outputs.get(r, "")) for r, u in per_rank.items()}
        return Verdict(Status.FAIL, error=report.error(InconsistentSkipError))
    if skipped:
        reasons = sorted(set(skipped.values()), key=str)
        if len(reasons) == 1:
            return Verdict(Status.SKIP, skip_reason=reasons[0])
        return Verdict(Status.SKIP, skip_reason="; ".join(f"rank {r}: {why}" for r, why in sorted(skipped.items())))
    return Verdict(Status.PASS)


def _waited(failed: Dict[int, List[ErrorRecord]]) -> List[int]:
    """The failed ranks whose every error is a collective a peer broke, when another rank failed in its own code."""
    waited = [r for r, errors in sorted(failed.items())
              if errors and all(WAITED_FOR_A_PEER.search(e.message) for e in errors)]
    return waited if len(waited) < len(failed) else []


def _failure_error(test, world_size, failed, per_rank, outputs, timeline=None) -> BaseException:
    waited = _waited(failed)
    raised = [r for r in sorted(failed) if r not in waited]
    head = FAILED.format(test=test, ranks=rank_list(raised), world_size=world_size)
    others: Dict[Status, List[int]] = {}
    for rank, unit in sorted(per_rank.items()):
        if rank not in failed:
            others.setdefault(unit.status, []).append(rank)
    words = {Status.PASS: "passed", Status.SKIP: "skipped"}
    parts = ([f"{rank_list(waited)} failed waiting for {'it' if len(raised) == 1 else 'them'} in a collective"]
             if waited else []) + [f"{rank_list(r)} {words[s]}" for s, r in others.items()]
    if parts:
        head += " (" + "; ".join(parts) + ")"
    report = Report([head])
    report.add_errors([(rank, record) for rank, errors in sorted(failed.items()) for record in errors])
    report.add_timeline(timeline, always=len(failed) < world_size)
    report.add_outputs(outputs)
    report.statuses = {r: u.report(outputs.get(r, "")) for r, u in per_rank.items()}
    return report.error()


def _fault_error(test, world_size, main, faults, outputs, grace, time_limit, note, timeline=None) -> BaseException:
    failed = [r for r, u in sorted(main.items()) if u.status is Status.FAIL]
    report = Report([FAILED.format(test=test, ranks=rank_list(failed), world_size=world_size)] if failed else [])
    report.add_errors([(rank, record) for rank in failed for record in main[rank].errors])
    timed_out = sorted(f.rank for f in faults if f.kind is FaultKind.TIMED_OUT)
    if timed_out:
        report.lines.insert(0, TIMED_OUT.format(test=test, limit=time_limit, ranks=rank_list(timed_out)))
    etype: type = RankTimeoutError if timed_out else RankStuckError
    skipped = [r for r, u in sorted(main.items()) if u.status is Status.SKIP]
    stuck = sorted(f.rank for f in faults if f.kind is FaultKind.STUCK)
    if skipped and stuck and not failed and not timed_out:
        # Skipped on some ranks while others never finished: they ran it, and waited for the skippers.
        etype = InconsistentSkipError
        report.lines.insert(0, INCONSISTENT_SKIP.format(test=test, skipped=rank_list(skipped), ran=rank_list(stuck)))
    for fault in sorted(faults, key=lambda f: (f.kind not in _DEATHS, f.rank)):
        if fault.kind is FaultKind.DIED:
            etype = RankDiedError
            report.lines.insert(0, DIED.format(rank=fault.rank, how=exit_description(fault.exitcode), test=test))
        elif fault.kind is FaultKind.TEMPLATE_DIED:
            etype = RankDiedError
            report.lines.insert(0, TEMPLATE_DIED.format(rank=fault.rank, test=test))
        elif fault.kind is FaultKind.STUCK:
            cause = f"{rank_list(failed)} failed" if failed else (f"{rank_list(skipped)} skipped it" if skipped
                                                                   else "a peer failed")
            report.lines.append(STUCK.format(rank=fault.rank, test=test, grace=grace, cause=cause))
        elif fault.kind is FaultKind.NO_REPORT:
            report.lines.append(NO_REPORT.format(rank=fault.rank, test=test))
        elif fault.kind is FaultKind.INTERRUPTED:
            report.lines.append(INTERRUPTED.format(rank=fault.rank, test=test, grace=grace))
    for fault in sorted(faults, key=lambda f: f.rank):
        if fault.stacks:
            report.lines.append(f"rank {fault.rank} stacks ({fault.kind.words}):\n{indent(fault.stacks)}")
    report.add_timeline(timeline, always=True)
    report.add_outputs(outputs)
    report.note = note
    report.statuses = {r: u.report(outputs.get(r, "")) for r, u in main.items()}
    for fault in faults:
        detail = exit_description(fault.exitcode) if fault.kind in _DEATHS else (fault.stacks or "")
        report.statuses[fault.rank] = RankReport(_FAULT_STATUS[fault.kind], detail, outputs.get(fault.rank, ""))
    # A rank's own failure, with peers merely stuck after it, keeps that rank's exception.
    own_failure = report.records and etype is RankStuckError
    return report.error(None if own_failure else etype)


# -- endings of fresh ranks (MultiProcessTestCase) ----------------------------------


def judge_endings(
    test: str,
    world_size: int,
    endings: Dict[int, RankEnding],
    expected: Optional[ExpectedExit],
    outputs: Dict[int, str],
    check_codes: bool = True,
    faults: Sequence[RankFault] = (),
    time_limit: float = 0.0,
    grace: float = 0.0,
    timeline: Optional[Callable[[], Optional[Timeline]]] = None,
) -> Verdict:
    """Judge the endings of fresh ranks against the declared ones; with ``faults``, merge as :func:`merge` does."""
    missing = [r for r in (expected.ranks or ()) if r >= world_size] if expected is not None else []
    if missing:  # a declaration that checks nothing at this size: the test is wrong, not its ranks
        assert expected is not None and expected.ranks is not None
        message = NO_SUCH_RANK.format(test=test, ranks=list(expected.ranks), missing=rank_list(missing),
                                      world_size=world_size, existing=rank_list(range(world_size)))
        return Verdict(Status.FAIL, error=ConfigError(message), restart_world=True)
    if faults:
        outcomes = {r: e.outcome for r, e in endings.items() if e.outcome is not None}
        return merge(test, world_size, outcomes, faults, outputs, grace=grace, time_limit=time_limit,
                     timeline=timeline)
    wrong = [r for r, e in sorted(endings.items()) if check_codes and not _ended_as_declared(e, expected)]
    if wrong:
        error = _ending_error(test, endings, expected, outputs, wrong, timeline)
        return Verdict(Status.FAIL, error=error, restart_world=True)
    skip = _skip_exit(endings, expected)
    if skip is not None:
        return Verdict(Status.SKIP, skip_reason=skip)
    # A rank that ended as declared has no outcome of its own for the test (it exited
    # in it); what it reported before, a failed subtest say, still counts.
    outcomes = {r: e.outcome for r, e in endings.items() if e.outcome is not None}
    return merge(test, world_size, outcomes, outputs=outputs, timeline=timeline)


def _ended_as_declared(ending: RankEnding, expected: Optional[ExpectedExit]) -> bool:
    if expected is not None and expected.applies_to(ending.rank):
        # The declared exit, and no failure on the way to it: an assertion that failed
        # (whose rank exits with TEST_ERROR_EXIT_CODE, 10) is not a declared exit of 10.
        failed = ending.outcome is not None and ending.outcome.has_failure()
        return expected.matches(ending.exitcode) and not failed
    # A rank whose test failed exits with torch's TEST_ERROR_EXIT_CODE: a normal
    # end, and its own failure is the report.
    if ending.outcome is not None and ending.exitcode == (TEST_ERROR_EXIT_CODE if ending.outcome.has_failure() else 0):
        return True
    return torch_skip_code_message(ending.exitcode) is not None


def _own_errors(ending: RankEnding) -> List[ErrorRecord]:
    """The errors of a rank's own failures (not an expected failure's) before it ended."""
    events = ending.outcome.events if ending.outcome is not None else ()
    return [rec for ev in events if ev.kind in (EventKind.FAILURE, EventKind.ERROR) for rec in ev.errors]


def _skip_exit(endings: Dict[int, RankEnding], expected: Optional[ExpectedExit]) -> Optional[str]:
    for ending in endings.values():
        if expected is None or not expected.applies_to(ending.rank):
            message = torch_skip_code_message(ending.exitcode)
            if message is not None:
                return message
    return None


def _ending_error(test, endings, expected, outputs, wrong, timeline=None) -> BaseException:
    # A rank that ended normally after its own test failed (exit code 10) is no
    # unexpected ending, but its failure is still the test's: reported with its error.
    failed = [r for r, e in sorted(endings.items()) if r not in wrong and _own_errors(e)]
    head = UNEXPECTED_ENDING.format(test=test, ranks=rank_list(wrong))
    report = Report([head + (f"; {rank_list(failed)} failed" if failed else "")])
    for rank, ending in sorted(endings.items()):
        want = expected.describe() if expected is not None and expected.applies_to(rank) else "a normal exit"
        actual = exit_description(ending.exitcode)
        output = outputs.get(rank, "")
        if rank in failed:
            errors = _own_errors(ending)
            report.lines.append(f"rank {rank}: failed: {'; '.join(rec.headline() for rec in errors)} "
                                f"(then ended with {actual})")
            report.records.extend((rank, rec) for rec in errors)
            report.statuses[rank] = RankReport(RankStatus.FAILED, "\n".join(r.traceback.rstrip() for r in errors), output)
            continue
        if rank not in wrong:
            report.lines.append(f"rank {rank}: ended with {actual}, as expected")
            report.statuses[rank] = RankReport(RankStatus.ENDED_AS_EXPECTED, actual, output)
            continue
        errors = [rec for ev in (ending.outcome.events if ending.outcome else ()) for rec in ev.errors]
        if errors:
            actual += " after " + "; ".join(rec.headline() for rec in errors)
            report.records.extend((rank, rec) for rec in errors)
        elif ending.outcome is None and ending.exitcode == 0:
            actual += " without reporting an outcome"
        report.lines.append(f"rank {rank}: ended with {actual}; expected {want}")
        report.statuses[rank] = RankReport(RankStatus.UNEXPECTED_ENDING, f"ended with {actual}; expected {want}", output)
    report.add_timeline(timeline, always=True)
    report.add_outputs(outputs)
    return report.error(UnexpectedEndingError)
