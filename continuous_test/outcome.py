"""Per-rank test outcomes, and how they merge into one unittest result.

A rank runs a test under :class:`RankResult`, which records unittest's events
as picklable :class:`Event` records.  The controller (or, under torchrun, every
rank) gathers one :class:`RankOutcome` per rank plus any :class:`RankFault` it
observed itself (a rank that died, hung or never answered), and
:func:`merge` turns them into a single :class:`Verdict`: pass, skip or fail,
with an exception whose message names the ranks and whose ``__cause__`` chain
holds each failing rank's own traceback.

Side-neutral: imported by the controller and by the ranks.
"""
from __future__ import annotations

import enum
import importlib
import sys
import traceback
import unittest
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from continuous_test.timeline import HEADING as TIMELINE_HEADING, Timeline

__all__ = [
    "EventKind",
    "ErrorRecord",
    "SubTestId",
    "Event",
    "RankOutcome",
    "FaultKind",
    "RankFault",
    "Verdict",
    "RankReport",
    "RankResult",
    "RemoteTraceback",
    "RemoteError",
    "RankDiedError",
    "RankTimeoutError",
    "RankStuckError",
    "InconsistentSkipError",
    "UnexpectedEndingError",
    "ExpectedExit",
    "RankEnding",
    "judge_endings",
    "merge",
    "prefix_lines",
    "signal_name",
    "TEST_ERROR_EXIT_CODE",
]

INCONSISTENT_SKIP = (
    "{test} was skipped on rank(s) {skipped} but ran on rank(s) {ran}: a test must "
    "skip on every rank or on none, because peers may be blocked in a collective. "
    "Decide the skip from facts that are the same on all ranks."
)
DIED = "rank {rank} died with {how} while running {test}"
STUCK = "rank {rank} did not finish {test} within the {grace:g} s grace period after rank(s) {failed} failed"
TIMED_OUT = "{test} exceeded its time limit of {limit:g} s on rank(s) {ranks}"
NO_REPORT = "rank {rank} never reported an outcome for {test}"
INTERRUPTED = "rank {rank} was still running {test} {grace:g} s after a peer died"
TEMPLATE_DIED = (
    "rank {rank} was killed with the template process it was forked from, which died while {test} ran "
    "(killed by a test, or by the OOM killer)"
)
# torch's exit code for a rank of a MultiProcessTestCase whose test failed.
TEST_ERROR_EXIT_CODE = 10


class EventKind(str, enum.Enum):
    """What unittest recorded for one test or subtest on one rank."""

    SUCCESS = "success"
    FAILURE = "failure"
    ERROR = "error"
    SKIP = "skip"
    EXPECTED_FAILURE = "expected_failure"
    UNEXPECTED_SUCCESS = "unexpected_success"


@dataclass(frozen=True)
class ErrorRecord:
    """A rank's exception, reduced to what can cross a process boundary."""

    type_module: str
    type_qualname: str
    message: str
    traceback: str
    is_failure: bool

    @property
    def type_name(self) -> str:
        """``module.Qualname`` for builtins-less display."""
        if self.type_module == "builtins":
            return self.type_qualname
        return f"{self.type_module}.{self.type_qualname}"

    def headline(self) -> str:
        """First line of the error, as ``Type: message``."""
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.type_name}: {first}" if first else self.type_name

    @classmethod
    def from_exception(cls, exc: BaseException, formatted: Optional[str] = None) -> "ErrorRecord":
        """Record ``exc``; ranks call this from their result and init paths."""
        etype = type(exc)
        if formatted is None:
            formatted = "".join(traceback.format_exception(etype, exc, exc.__traceback__))
        return cls(
            type_module=etype.__module__,
            type_qualname=etype.__qualname__,
            message=_safe_str(exc),
            traceback=formatted,
            is_failure=isinstance(exc, AssertionError),
        )


@dataclass(frozen=True)
class SubTestId:
    """Identity of a ``subTest`` block: its message and the ``repr`` of its params."""

    message: Optional[str]
    params: Tuple[Tuple[str, str], ...]

    def describe(self) -> str:
        """``[message] (k=v, ...)``, as unittest prints a subtest."""
        parts = [f"[{self.message}]"] if self.message is not None else []
        if self.params:
            parts.append("(" + ", ".join(f"{k}={v}" for k, v in self.params) + ")")
        return " ".join(parts) or "(<subtest>)"


@dataclass(frozen=True)
class Event:
    """One unittest event on one rank."""

    kind: EventKind
    subtest: Optional[SubTestId] = None
    errors: Tuple[ErrorRecord, ...] = ()
    reason: Optional[str] = None


@dataclass
class RankOutcome:
    """Everything one rank reports about one test."""

    rank: int
    events: List[Event] = field(default_factory=list)
    # The default process group was destroyed or replaced: the world makes a new one.
    group_changed: bool = False
    requested_exit: Optional[int] = None
    # What the test left changed in the rank (a leaks.LeakReport), if anything.
    leaks: Optional[object] = None
    # The rank's recorded calls of this test (timeline file format); launched ranks only.
    records: Optional[bytes] = None

    def has_failure(self) -> bool:
        """True if the rank reported a failure or error (an expected one included)."""
        return any(e.kind in _FAILING for e in self.events)


_FAILING = (EventKind.FAILURE, EventKind.ERROR, EventKind.EXPECTED_FAILURE)


class FaultKind(str, enum.Enum):
    """What the controller saw happen to a rank, beyond its own report."""

    DIED = "died"
    STUCK = "stuck"
    TIMED_OUT = "timed_out"
    NO_REPORT = "no_report"
    INTERRUPTED = "interrupted"
    TEMPLATE_DIED = "template_died"


_DEATHS = (FaultKind.DIED, FaultKind.TEMPLATE_DIED)


@dataclass(frozen=True)
class RankFault:
    """A rank that did not report normally: died, stuck after a peer failed, or timed out."""

    rank: int
    kind: FaultKind
    exitcode: Optional[int] = None
    stacks: Optional[str] = None


@dataclass(frozen=True)
class RankReport:
    """One rank's part of a failure report; merged errors carry them as ``ct_ranks``."""

    status: str  # passed, skipped, failed, died, stuck, timed_out, interrupted, ...
    detail: str = ""
    output: str = ""


def _attach(error: BaseException, statuses: Dict[int, Tuple[str, str]], outputs: Dict[int, str]) -> BaseException:
    """Attach per-rank reports to a merged error, for the pytest plugin's report sections."""
    error.ct_ranks = {r: RankReport(status, detail, outputs.get(r, ""))  # type: ignore[attr-defined]
                      for r, (status, detail) in sorted(statuses.items())}
    return error


def _status_of(unit: "_RankUnit") -> Tuple[str, str]:
    if unit.status == "fail":
        return "failed", "\n".join(rec.traceback.rstrip() for rec in unit.errors)
    return ("skipped", unit.reason or "") if unit.status == "skip" else ("passed", "")


# -- exceptions that appear in reports ---------------------------------------------


class RemoteTraceback(Exception):
    """Carries a rank's formatted traceback as the ``__cause__`` of a merged error."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class RemoteError(Exception):
    """A rank's exception whose type could not be rebuilt in this process."""


class RankDiedError(RuntimeError):
    """A rank process ended while a test was running."""


class RankTimeoutError(RuntimeError):
    """A test exceeded its per-test time limit."""


class RankStuckError(RuntimeError):
    """Some ranks never finished a test after a peer failed it."""


class InconsistentSkipError(AssertionError):
    """A test skipped on some ranks and ran on others."""


# -- rank side ----------------------------------------------------------------------


class RankResult(unittest.TestResult):
    """Records a rank's unittest events as :class:`Event` records; ranks run tests under it."""

    def __init__(self, exits_allowed: bool = False) -> None:
        super().__init__()
        self.events: List[Event] = []
        # MultiProcessTestCase ranks may end a test with sys.exit(code) on purpose.
        self.exits_allowed = exits_allowed
        self.requested_exit: Optional[int] = None

    def _record(self, kind: EventKind, test, err=None, reason=None, subtest=None) -> None:
        errors = (self._error_record(err, test),) if err is not None else ()
        self.events.append(Event(kind, subtest=subtest, errors=errors, reason=reason))

    def _error_record(self, err, test) -> ErrorRecord:
        formatted = self._exc_info_to_string(err, test)
        return ErrorRecord.from_exception(err[1], formatted)

    def addSuccess(self, test) -> None:
        self._record(EventKind.SUCCESS, test)

    def addFailure(self, test, err) -> None:
        self._record(EventKind.FAILURE, test, err)

    def addError(self, test, err) -> None:
        skip = _torch_skip_reason(err[1])
        if skip is not None:
            self._record(EventKind.SKIP, test, reason=skip)
        elif self.exits_allowed and isinstance(err[1], SystemExit):
            code = err[1].code
            self.requested_exit = code if isinstance(code, int) else (0 if code is None else 1)
        else:
            self._record(EventKind.ERROR, test, err)

    def addSkip(self, test, reason) -> None:
        self._record(EventKind.SKIP, test, reason=reason, subtest=subtest_id(test))

    def addExpectedFailure(self, test, err) -> None:
        self._record(EventKind.EXPECTED_FAILURE, test, err)

    def addUnexpectedSuccess(self, test) -> None:
        self._record(EventKind.UNEXPECTED_SUCCESS, test)

    def addSubTest(self, test, subtest, err) -> None:
        sid = subtest_id(subtest)
        if err is None:
            self.events.append(Event(EventKind.SUCCESS, subtest=sid))
            return
        kind = EventKind.FAILURE if issubclass(err[0], test.failureException) else EventKind.ERROR
        self._record(kind, test, err, subtest=sid)


def subtest_id(test) -> Optional[SubTestId]:
    """The :class:`SubTestId` of a unittest ``_SubTest``, or None for a plain test."""
    if not hasattr(test, "params") or not hasattr(test, "test_case"):
        return None
    message = test._message if isinstance(test._message, str) else None
    params = tuple((str(k), _safe_repr(v)) for k, v in test.params.items())
    return SubTestId(message, params)


def _torch_skip_reason(exc: BaseException) -> Optional[str]:
    """Map ``pytest.skip()`` and torch's ``sys.exit(TEST_SKIPS[...].exit_code)`` to a skip reason."""
    outcomes = sys.modules.get("_pytest.outcomes")
    if outcomes is not None and isinstance(exc, outcomes.Skipped):
        return str(getattr(exc, "msg", exc))
    if not isinstance(exc, SystemExit) or not isinstance(exc.code, int):
        return None
    # Only a file that imported torch's testing internals can exit with one of
    # their codes; importing them here would cost seconds and leave files behind.
    common = sys.modules.get("torch.testing._internal.common_distributed")
    TEST_SKIPS = getattr(common, "TEST_SKIPS", None)
    if not TEST_SKIPS:
        return None
    for skip in TEST_SKIPS.values():
        if skip.exit_code == exc.code:
            return skip.message
    return None


# -- merging ------------------------------------------------------------------------


@dataclass
class Verdict:
    """The single outcome of one test across all ranks, ready to replay into a TestResult."""

    status: str  # "pass", "skip" or "fail"
    error: Optional[BaseException] = None
    skip_reason: Optional[str] = None
    subtests: List[Tuple[SubTestId, "Verdict"]] = field(default_factory=list)
    restart_world: bool = False
    # The merged leak report under the restore policy: the controller warns with it.
    leak_report: Optional[str] = None

    @property
    def failed(self) -> bool:
        """True when the test or any of its subtests failed."""
        return self.status == "fail" or any(v.failed for _, v in self.subtests)


@dataclass
class _RankUnit:
    """One rank's status for one unit (the test itself, or one subtest)."""

    status: str  # "pass", "skip", "fail"
    errors: List[ErrorRecord] = field(default_factory=list)
    reason: Optional[str] = None


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
) -> Verdict:
    """Merge every rank's outcome for ``test``; the controller calls this once per test.

    ``note`` ends the report of a fault (the controller says what it does next).
    ``timeline`` builds the collective timeline; it is called only for a report
    that shows it (a fault, a failure on some ranks, or ranks whose calls differ).
    """
    outputs = outputs or {}
    units = _units(outcomes)
    main = units.pop(None, {})
    for rank in outcomes:
        main.setdefault(rank, _RankUnit("pass"))
    subtests = [(sid, _merge_unit(f"{test} {sid.describe()}", world_size, per_rank, outputs))
                for sid, per_rank in units.items()]
    if faults:
        verdict = Verdict("fail", error=_fault_error(test, world_size, main, faults, outputs, grace, time_limit, note,
                                                     timeline))
    else:
        verdict = _merge_unit(test, world_size, main, outputs, timeline)
    verdict.subtests = subtests
    verdict.restart_world = bool(faults) or verdict.failed
    leak_reports = {r: o.leaks for r, o in outcomes.items() if o.leaks is not None}
    if leak_reports:
        from continuous_test import leaks

        leaks.judge(test, verdict, leak_reports)
    return verdict


def _units(outcomes: Dict[int, RankOutcome]) -> Dict[Optional[SubTestId], Dict[int, _RankUnit]]:
    units: Dict[Optional[SubTestId], Dict[int, _RankUnit]] = {}
    for rank, outcome in sorted(outcomes.items()):
        for event in outcome.events:
            unit = units.setdefault(event.subtest, {}).setdefault(rank, _RankUnit("pass"))
            if event.kind in (EventKind.FAILURE, EventKind.ERROR, EventKind.EXPECTED_FAILURE):
                unit.status = "fail"
                unit.errors.extend(event.errors)
            elif event.kind is EventKind.SKIP and unit.status != "fail":
                unit.status, unit.reason = "skip", event.reason
    return units


def _merge_unit(test: str, world_size: int, per_rank: Dict[int, _RankUnit], outputs, timeline=None) -> Verdict:
    failed = {r: u.errors for r, u in per_rank.items() if u.status == "fail"}
    skipped = {r: u.reason for r, u in per_rank.items() if u.status == "skip"}
    if failed:
        return Verdict("fail", error=_failure_error(test, world_size, failed, per_rank, outputs, timeline))
    if skipped and len(skipped) < len(per_rank):
        ran = sorted(set(per_rank) - set(skipped))
        msg = INCONSISTENT_SKIP.format(test=test, skipped=_ranks(skipped), ran=_ranks(ran))
        reasons = "".join(f"\n  rank {r}: {why}" for r, why in sorted(skipped.items()))
        error = InconsistentSkipError(msg + "\nSkip reasons:" + reasons)
        statuses = {r: _status_of(u) for r, u in per_rank.items()}
        return Verdict("fail", error=_attach(error, statuses, outputs))
    if skipped:
        reasons = sorted(set(skipped.values()), key=str)
        if len(reasons) == 1:
            return Verdict("skip", skip_reason=reasons[0])
        return Verdict("skip", skip_reason="; ".join(f"rank {r}: {why}" for r, why in sorted(skipped.items())))
    return Verdict("pass")


def _failure_error(test, world_size, failed, per_rank, outputs, timeline=None) -> BaseException:
    others = {r: u.status for r, u in per_rank.items() if r not in failed}
    head = f"{test} failed on rank(s) {_ranks(failed)} of {world_size}"
    if others:
        head += " (" + ", ".join(f"rank {r} {'passed' if s == 'pass' else 'skipped'}" for r, s in sorted(others.items())) + ")"
    body = [head]
    records: List[Tuple[int, ErrorRecord]] = []
    for rank, errors in sorted(failed.items()):
        for record in errors:
            body.append(f"rank {rank}: {record.headline()}")
            records.append((rank, record))
    shown = _timeline_section(body, timeline, always=len(failed) < world_size)
    for rank in sorted(outputs):
        body.extend(_output_section(rank, outputs))
    statuses = {r: _status_of(u) for r, u in per_rank.items()}
    return _with_timeline(_attach(_chained(records, "\n".join(body)), statuses, outputs), shown)


def _fault_error(test, world_size, main, faults, outputs, grace, time_limit, note, timeline=None) -> BaseException:
    lines: List[str] = []
    records: List[Tuple[int, ErrorRecord]] = []
    failed = [r for r, u in sorted(main.items()) if u.status == "fail"]
    if failed:
        lines.append(f"{test} failed on rank(s) {_ranks(failed)} of {world_size}")
    for rank in failed:
        for record in main[rank].errors:
            lines.append(f"rank {rank}: {record.headline()}")
            records.append((rank, record))
    timed_out = sorted(f.rank for f in faults if f.kind is FaultKind.TIMED_OUT)
    if timed_out:
        lines.insert(0, TIMED_OUT.format(test=test, limit=time_limit, ranks=_ranks(timed_out)))
    etype: type = RankStuckError
    for fault in sorted(faults, key=lambda f: (f.kind not in _DEATHS, f.rank)):
        if fault.kind is FaultKind.DIED:
            etype = RankDiedError
            lines.insert(0, DIED.format(rank=fault.rank, how=exit_description(fault.exitcode), test=test))
        elif fault.kind is FaultKind.TEMPLATE_DIED:
            etype = RankDiedError
            lines.insert(0, TEMPLATE_DIED.format(rank=fault.rank, test=test))
        elif fault.kind is FaultKind.STUCK:
            lines.append(STUCK.format(rank=fault.rank, test=test, grace=grace, failed=_ranks(failed) or "?"))
        elif fault.kind is FaultKind.NO_REPORT:
            lines.append(NO_REPORT.format(rank=fault.rank, test=test))
        elif fault.kind is FaultKind.INTERRUPTED:
            lines.append(INTERRUPTED.format(rank=fault.rank, test=test, grace=grace))
    if timed_out and etype is RankStuckError:
        etype = RankTimeoutError
    shown = _timeline_section(lines, timeline, always=True)
    for fault in sorted(faults, key=lambda f: f.rank):
        if fault.stacks:
            lines.append(f"rank {fault.rank} stacks ({fault.kind.value}):\n{_indent(fault.stacks)}")
    for rank in sorted(outputs):
        lines.extend(_output_section(rank, outputs))
    if note:
        lines.append(note)
    statuses = {r: _status_of(u) for r, u in main.items()}
    for fault in faults:
        detail = exit_description(fault.exitcode) if fault.kind in _DEATHS else (fault.stacks or "")
        statuses[fault.rank] = (fault.kind.value, detail)
    if records and not any(f.kind in _DEATHS for f in faults) and not timed_out:
        return _with_timeline(_attach(_chained(records, "\n".join(lines)), statuses, outputs), shown)
    return _with_timeline(_attach(_chain_causes(etype("\n".join(lines)), records), statuses, outputs), shown)


def _timeline_section(lines: List[str], timeline, always: bool) -> Optional[str]:
    """Append the collective timeline to a report's lines when it belongs there; return its text."""
    built = timeline() if timeline is not None else None
    if built is None or not (always or built.divergent):
        return None
    lines.append(TIMELINE_HEADING)
    lines.append(_indent(built.text))
    return built.text


def _with_timeline(error: BaseException, text: Optional[str]) -> BaseException:
    """Keep the timeline on the merged error, for the pytest plugin's report section."""
    if text is not None:
        error.ct_timeline = text  # type: ignore[attr-defined]
    return error


def _output_section(rank: int, outputs: Dict[int, str]) -> List[str]:
    text = outputs.get(rank, "")
    if not text.strip():
        return []
    return [f"rank {rank} output:", prefix_lines(rank, text).rstrip("\n")]


def _chained(records: List[Tuple[int, ErrorRecord]], message: str) -> BaseException:
    """An exception of the first failing rank's type, with every rank's traceback chained."""
    error = _rebuild(records[0][1], message)
    return _chain_causes(error, records)


def _chain_causes(error: BaseException, records: List[Tuple[int, ErrorRecord]]) -> BaseException:
    top = error
    for rank, record in records:
        cause = RemoteTraceback(f"\n[rank {rank}] " + record.traceback.rstrip("\n"))
        top.__cause__ = cause
        top = cause
    return error


def _rebuild(record: ErrorRecord, message: str) -> BaseException:
    try:
        module = importlib.import_module(record.type_module)
        etype = module
        for part in record.type_qualname.split("."):
            etype = getattr(etype, part)
        if isinstance(etype, type) and issubclass(etype, BaseException) and not issubclass(etype, SystemExit):
            return etype(message)
    except Exception:
        pass
    if record.is_failure:
        return AssertionError(message)
    return RemoteError(f"{record.type_name}: {message}")


# -- endings of fresh ranks (MultiProcessTestCase) ----------------------------------


class UnexpectedEndingError(AssertionError):
    """A rank of a MultiProcessTestCase ended differently from what the test declared."""


@dataclass(frozen=True)
class ExpectedExit:
    """How ``@expect_exit`` says some ranks end: an exit code or a signal."""

    code: Optional[int] = None
    signal: Optional[int] = None
    ranks: Optional[Tuple[int, ...]] = None

    def applies_to(self, rank: int) -> bool:
        """True if this expectation names ``rank`` (or names no rank, meaning all)."""
        return self.ranks is None or rank in self.ranks

    def matches(self, exitcode: Optional[int]) -> bool:
        """True if a process exit code is the declared ending."""
        return exitcode == (-self.signal if self.signal is not None else self.code)

    def describe(self) -> str:
        """``exit code 3`` or ``signal SIGABRT``."""
        return exit_description(-self.signal if self.signal is not None else self.code)


@dataclass(frozen=True)
class RankEnding:
    """How one fresh rank ended: its exit code and, if it reported one, its outcome."""

    rank: int
    exitcode: Optional[int]
    outcome: Optional[RankOutcome] = None


UNEXPECTED_ENDING = "{test}: rank(s) {ranks} did not end as expected"


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
    """Judge the endings of fresh ranks against the declared ones; MultiProcessTestCase calls this."""
    if faults:
        outcomes = {r: e.outcome for r, e in endings.items() if e.outcome is not None}
        return merge(test, world_size, outcomes, faults, outputs, grace=grace, time_limit=time_limit,
                     timeline=timeline)
    wrong = [r for r, e in sorted(endings.items()) if check_codes and not _ended_as_declared(e, expected)]
    if wrong:
        error = _ending_error(test, endings, expected, outputs, wrong, timeline)
        return Verdict("fail", error=error, restart_world=True)
    skip = _skip_exit(endings, expected)
    if skip is not None:
        return Verdict("skip", skip_reason=skip)
    outcomes = {r: e.outcome for r, e in endings.items()
                if e.outcome is not None and not (expected and expected.applies_to(r))}
    return merge(test, world_size, outcomes, outputs=outputs, timeline=timeline)


def _ended_as_declared(ending: RankEnding, expected: Optional[ExpectedExit]) -> bool:
    if expected is not None and expected.applies_to(ending.rank):
        return expected.matches(ending.exitcode)
    # A rank whose test failed exits with torch's TEST_ERROR_EXIT_CODE: a normal
    # end, and its own failure is the report.
    if ending.outcome is not None and ending.exitcode == (TEST_ERROR_EXIT_CODE if ending.outcome.has_failure() else 0):
        return True
    return _torch_skip_code_message(ending.exitcode) is not None


def _skip_exit(endings: Dict[int, RankEnding], expected: Optional[ExpectedExit]) -> Optional[str]:
    for ending in endings.values():
        if expected is None or not expected.applies_to(ending.rank):
            message = _torch_skip_code_message(ending.exitcode)
            if message is not None:
                return message
    return None


def _ending_error(test, endings, expected, outputs, wrong, timeline=None) -> BaseException:
    lines = [UNEXPECTED_ENDING.format(test=test, ranks=_ranks(wrong))]
    records: List[Tuple[int, ErrorRecord]] = []
    statuses: Dict[int, Tuple[str, str]] = {}
    for rank, ending in sorted(endings.items()):
        want = expected.describe() if expected is not None and expected.applies_to(rank) else "a normal exit"
        actual = exit_description(ending.exitcode)
        if rank not in wrong:
            lines.append(f"rank {rank}: ended with {actual}, as expected")
            statuses[rank] = ("ended as expected", actual)
            continue
        errors = [rec for ev in (ending.outcome.events if ending.outcome else ()) for rec in ev.errors]
        if errors:
            actual += " after " + "; ".join(rec.headline() for rec in errors)
            records.extend((rank, rec) for rec in errors)
        elif ending.outcome is None and ending.exitcode == 0:
            actual += " without reporting an outcome"
        lines.append(f"rank {rank}: ended with {actual}; expected {want}")
        statuses[rank] = ("unexpected ending", f"ended with {actual}; expected {want}")
    shown = _timeline_section(lines, timeline, always=True)
    for rank in sorted(outputs):
        lines.extend(_output_section(rank, outputs))
    error = _chain_causes(UnexpectedEndingError("\n".join(lines)), records)
    return _with_timeline(_attach(error, statuses, outputs), shown)


def _torch_skip_code_message(exitcode: Optional[int]) -> Optional[str]:
    if not exitcode or exitcode < 0:
        return None
    return _torch_skip_reason(SystemExit(exitcode))


# -- formatting helpers -------------------------------------------------------------


def prefix_lines(rank: int, text: str) -> str:
    """Prefix every line of a rank's output with ``[rankN]``."""
    return "".join(f"[rank{rank}] {line}" for line in text.splitlines(keepends=True))


def signal_name(signum: int) -> str:
    """``SIGSEGV`` for 11, or ``signal N`` when unknown."""
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_description(exitcode: Optional[int]) -> str:
    """Describe a ``multiprocessing`` exit code: ``exit code 3`` or ``signal SIGKILL``."""
    if exitcode is None:
        return "an unknown status"
    if exitcode < 0:
        return f"signal {signal_name(-exitcode)}"
    return f"exit code {exitcode}"


def _ranks(ranks) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


def _indent(text: str, prefix: str = "    ") -> str:
    return "".join(prefix + line for line in text.splitlines(keepends=True))


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


def _safe_repr(value) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unreprable {type(value).__name__}>"
