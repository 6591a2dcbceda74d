"""Per-rank test outcomes: the data a rank reports about one test.

A rank runs a test under :class:`RankResult`, which records unittest's events
as picklable :class:`Event` records; an exception travels as an
:class:`ErrorRecord` that holds the exception itself, pickled, when it pickles
(and unpickles), and always its type, message, traceback and test-file line.
The controller (or, under torchrun, every rank) gathers one :class:`RankOutcome`
per rank plus any :class:`RankFault` it observed itself (a rank that died, hung
or never answered); :mod:`continuous_test.report` merges them into one verdict.

Side-neutral: imported by the controller and by the ranks.  Nothing here merges
or formats a report.
"""
from __future__ import annotations

import enum
import os
import pickle
import sys
import traceback
import unittest
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

__all__ = [
    "EventKind",
    "ErrorRecord",
    "SubTestId",
    "Event",
    "ExpectValue",
    "RankOutcome",
    "FaultKind",
    "RankFault",
    "RankResult",
    "ExpectedExit",
    "RankEnding",
    "subtest_id",
    "record_expect_value",
    "take_expect_values",
    "torch_skip_code_message",
    "prefix_lines",
    "signal_name",
    "exit_description",
    "TEST_ERROR_EXIT_CODE",
]

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
    """A rank's exception: the object itself when it pickles, and always a text record of it."""

    type_module: str
    type_qualname: str
    message: str
    traceback: str
    is_failure: bool
    # The exception pickled, or None when it does not survive a pickle round trip.
    pickled: Optional[bytes] = None
    # ``file.py:line`` of the innermost frame in the test's own file ("" if none).
    location: str = ""

    @property
    def type_name(self) -> str:
        """``module.Qualname``, or just the name for builtins."""
        if self.type_module == "builtins":
            return self.type_qualname
        # A rank imports the script under test as __mp_main__; the user knows it as __main__.
        module = "__main__" if self.type_module == "__mp_main__" else self.type_module
        return f"{module}.{self.type_qualname}"

    def headline(self) -> str:
        """First line of the error, as ``Type: message``."""
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.type_name}: {first}" if first else self.type_name

    def exception(self) -> Optional[BaseException]:
        """The rank's exception object, unpickled here; None when it cannot be."""
        if self.pickled is None:
            return None
        try:
            return pickle.loads(self.pickled)
        except Exception:  # its class is not importable in this process
            return None

    @classmethod
    def from_exception(cls, exc: BaseException, formatted: Optional[str] = None,
                       test_file: Optional[str] = None) -> "ErrorRecord":
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
            pickled=_pickled(exc),
            location=_location(exc.__traceback__, test_file),
        )


def _pickled(exc: BaseException) -> Optional[bytes]:
    """``exc`` pickled, if it also unpickles here into the same type (checked now, on the rank)."""
    try:
        data = pickle.dumps(exc, pickle.HIGHEST_PROTOCOL)
        return data if type(pickle.loads(data)) is type(exc) else None
    except Exception:  # unpicklable state, or a constructor that rejects its own args
        return None


def _location(tb, test_file: Optional[str]) -> str:
    frames = traceback.extract_tb(tb) if tb is not None else []
    if test_file:
        mine = [f for f in frames if os.path.abspath(f.filename) == test_file]
        frames = mine or frames
    return f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""


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


@dataclass(frozen=True)
class ExpectValue:
    """A value ``assertExpectedInline`` saw under ``EXPECTTEST_ACCEPT=1``, where it was checked."""

    where: str
    actual: str


@dataclass
class RankOutcome:
    """Everything one rank reports about one test."""

    rank: int
    events: List[Event] = field(default_factory=list)
    # The default process group was destroyed or replaced: the world makes a new one.
    group_changed: bool = False
    requested_exit: Optional[int] = None
    # Values accepted by expecttest (only under EXPECTTEST_ACCEPT=1): ranks must agree.
    expect_values: Tuple[ExpectValue, ...] = ()
    # What the test left changed in the rank (a leaks.LeakReport), if anything.
    leaks: Optional[object] = None
    # The rank's recorded calls of this test (timeline file format); launched ranks only.
    records: Optional[bytes] = None

    def has_failure(self) -> bool:
        """True if the rank reported a failure or error (an expected one included)."""
        return any(e.kind in _FAILING for e in self.events)


_FAILING = (EventKind.FAILURE, EventKind.ERROR, EventKind.EXPECTED_FAILURE)


# Values recorded by assertExpectedInline during the current test of this rank.
_expect_values: List[ExpectValue] = []


def record_expect_value(where: str, actual: str) -> None:
    """Remember a value expecttest accepts on this rank; ``assertExpectedInline`` calls this."""
    _expect_values.append(ExpectValue(where, actual))


def take_expect_values() -> Tuple[ExpectValue, ...]:
    """The values recorded since the last call; the rank calls this when a test ends."""
    if not _expect_values:
        return ()
    values = tuple(_expect_values)
    _expect_values.clear()
    return values


class FaultKind(str, enum.Enum):
    """What the controller saw happen to a rank, beyond its own report."""

    DIED = "died"
    STUCK = "stuck"
    TIMED_OUT = "timed_out"
    NO_REPORT = "no_report"
    INTERRUPTED = "interrupted"
    TEMPLATE_DIED = "template_died"


@dataclass(frozen=True)
class RankFault:
    """A rank that did not report normally: died, stuck after a peer failed, or timed out."""

    rank: int
    kind: FaultKind
    exitcode: Optional[int] = None
    stacks: Optional[str] = None


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
        formatted = getattr(self, "_exc_info_to_string")(err, test)  # unittest's formatting, not in its stubs
        return ErrorRecord.from_exception(err[1], formatted, test_file=_test_file(test))

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


def _test_file(test) -> Optional[str]:
    case = getattr(test, "test_case", test)  # a subtest's case
    module = sys.modules.get(type(case).__module__)
    path = getattr(module, "__file__", None)
    return os.path.abspath(path) if path else None


def subtest_id(test) -> Optional[SubTestId]:
    """The :class:`SubTestId` of a unittest subtest, or None for a plain test."""
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
    # their codes; importing them here would cost seconds, print an ImportWarning
    # about hypothesis and leave a torchinductor_root folder in TMPDIR.
    common = sys.modules.get("torch.testing._internal.common_distributed")
    TEST_SKIPS = getattr(common, "TEST_SKIPS", None)
    if not TEST_SKIPS:
        return None
    for skip in TEST_SKIPS.values():
        if skip.exit_code == exc.code:
            return skip.message
    return None


def torch_skip_code_message(exitcode: Optional[int]) -> Optional[str]:
    """The skip message of one of torch's skip exit codes, if the test file uses them."""
    if not exitcode or exitcode < 0:
        return None
    return _torch_skip_reason(SystemExit(exitcode))


# -- endings of fresh ranks (MultiProcessTestCase) ----------------------------------


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


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, which Python 3.10 lacks: there the note joins the message."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    elif error.args and isinstance(error.args[0], str):
        error.args = (f"{error.args[0]}\n{note}",) + error.args[1:]
    else:
        error.args = error.args + (note,)
