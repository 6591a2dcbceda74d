"""Per-rank test outcomes: the data a rank reports about one test.

A rank runs a test under :class:`~continuous_test.rank.result.RankResult`, which
records unittest's events as picklable :class:`Event` records; an exception travels as an
:class:`ErrorRecord` that holds the exception itself, pickled, when it pickles
(and unpickles), and always its type, message, traceback and test-file line.
The controller (or, when launched by torchrun or srun, every rank) gathers one :class:`RankOutcome`
per rank plus any :class:`RankFault` it observed itself (a rank that died, hung
or never answered); :mod:`continuous_test.verdict.merge` merges them into one verdict.

Both sides import it; nothing here merges or formats a report.
"""
from __future__ import annotations

import enum
import os
import pickle
import sys
import traceback
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

__all__ = [
    "EventKind",
    "ErrorRecord",
    "SubTestId",
    "Event",
    "ExpectValue",
    "RankOutcome",
    "FaultKind",
    "RankFault",
    "ExpectedExit",
    "RankEnding",
    "torch_skip_code_message",
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
        """First line of the error, as ``Type: message`` (a line longer than a screenful is cut)."""
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        if len(first) > MAX_HEADLINE:
            first = f"{first[:MAX_HEADLINE]} ... ({len(first) - MAX_HEADLINE} characters more)"
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
        """The record of ``exc``: pickled if it survives a round trip here, and always as text (``formatted``)."""
        etype = type(exc)
        if formatted is None:
            formatted = "".join(traceback.format_exception(etype, exc, exc.__traceback__))
        message = _safe_str(exc)
        whole = _Whole(formatted, etype.__qualname__, f".{os.getpid()}.txt")  # the traceback holds the message
        return cls(
            type_module=etype.__module__,
            type_qualname=etype.__qualname__,
            message=bounded_text(message, MAX_MESSAGE, "message", whole.path),
            traceback=bounded_text(formatted, MAX_TRACEBACK, "traceback", whole.path),
            is_failure=isinstance(exc, AssertionError),
            # A huge message would travel and be kept whole in the pickle: its text, cut, is enough.
            pickled=_pickled(exc) if len(message) <= MAX_MESSAGE else None,
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
    # A torch.distributed call of the test failed (other than in its argument checks):
    # its group's connections may be broken, so the world starts again before the next test.
    call_failed: bool = False
    requested_exit: Optional[int] = None
    # Values accepted by expecttest (only under EXPECTTEST_ACCEPT=1): ranks must agree.
    expect_values: Tuple[ExpectValue, ...] = ()
    # What the test left changed in the rank, if anything.
    leaks: Optional[LeakReport] = None
    # The rank's recorded calls of this test (the records file format); launched ranks only.
    records: Optional[bytes] = None
    # Launched ranks only: the test as every rank names it (its pytest node id, else
    # Class.test_method), which the exchange checks the ranks agree on.
    test: Optional[str] = None
    # Launched ranks only: what the rank printed while the test ran (its stdout and stderr).
    output: Optional[str] = None

    def has_failure(self) -> bool:
        """True if the rank reported a failure or error (an expected one included)."""
        return any(e.kind in _FAILING for e in self.events)

    def is_plain_pass(self) -> bool:
        """The one definition of a plain pass: the test passed with nothing else to report.

        No failure, skip or subtest, no change of the default group, no leak, no exit
        asked for, no expecttest value.  It travels compactly (``TestDone.outcome`` is
        None), and only after one on every rank may the next test be sent ahead.
        """
        return (self.events == [_PASSED] and not self.group_changed and not self.call_failed
                and self.requested_exit is None
                and self.leaks is None and not self.expect_values)


_FAILING = (EventKind.FAILURE, EventKind.ERROR, EventKind.EXPECTED_FAILURE)
_PASSED = Event(EventKind.SUCCESS)


class FaultKind(str, enum.Enum):
    """What the controller saw happen to a rank, beyond its own report."""

    DIED = "died"
    STUCK = "stuck"
    TIMED_OUT = "timed_out"
    NO_REPORT = "no_report"
    INTERRUPTED = "interrupted"
    TEMPLATE_DIED = "template_died"

    @property
    def words(self) -> str:
        """How a report names it ("timed out", not the value's ``timed_out``)."""
        return self.value.replace("_", " ") if self is not FaultKind.NO_REPORT else "never reported"


@dataclass(frozen=True)
class RankFault:
    """A rank that did not report normally: died, stuck after a peer failed, or timed out."""

    rank: int
    kind: FaultKind
    exitcode: Optional[int] = None
    stacks: Optional[str] = None


# -- rank side ----------------------------------------------------------------------


def torch_skip_reason(exc: BaseException) -> Optional[str]:
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
    return torch_skip_reason(SystemExit(exitcode))


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


# The most of a rank's exception message, and of its formatted traceback, that a
# report shows: longer ones keep their head and tail, and the whole text is kept
# on disk (docs/reports.rst).
MAX_MESSAGE = 10_000
MAX_TRACEBACK = 50_000
# The most of a message's first line that a one-line summary of it shows.
MAX_HEADLINE = 500
CUT = "\n... ({chars} characters of this {what} left out; the whole traceback and message: {path}) ...\n"


def bounded_text(text: str, limit: int, what: str, whole: Callable[[], str]) -> str:
    """``text`` if it is at most ``limit`` characters, else its first and last parts around a note.

    The note says how much was left out and where the whole text is: the path
    ``whole()`` gives, where it has been kept.
    """
    if len(text) <= limit:
        return text
    head, tail = text[:limit * 3 // 4], text[-(limit // 4):]
    return head + CUT.format(chars=len(text) - len(head) - len(tail), what=what, path=whole()) + tail


class _Whole:
    """A text kept whole on disk the first time its path is asked for (``continuous_test.wire.kept``)."""

    def __init__(self, text: str, name: str, suffix: str) -> None:
        self._text, self._name, self._suffix, self._path = text, name, suffix, ""

    def path(self) -> str:
        if not self._path:
            from continuous_test.wire import kept  # only when a text is cut

            self._path = kept.save(self._text, self._name, self._suffix)
        return self._path


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


@dataclass(frozen=True)
class Leak:
    """One changed item on one rank, described on the rank (values travel as text)."""

    item: str
    before: str
    after: str
    restored: bool


@dataclass(frozen=True)
class LeakReport:
    """What one rank found after one test; carried by ``RankOutcome.leaks``."""

    policy: str
    leaks: Tuple[Leak, ...]
