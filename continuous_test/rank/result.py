"""A rank's record of one test as unittest reports it: events, and the values expecttest accepted.

:class:`RankResult` turns unittest's calls into picklable
:class:`~continuous_test.wire.outcome.Event` records; a skip a test signals the
way pytest or torch does is recorded as a skip, and in a fresh rank a test's
``sys.exit(code)`` is the exit it asks for, not an error.  The values
``assertExpectedInline`` accepted are kept here until the test ends.
"""
from __future__ import annotations

import os
import sys
import unittest
from typing import List, Optional, Tuple

from continuous_test.wire.env import ENV_TB_LOCALS
from continuous_test.wire.outcome import ErrorRecord, Event, EventKind, ExpectValue, SubTestId, torch_skip_reason


# Values recorded by assertExpectedInline during the current test of this rank.
_expect_values: List[ExpectValue] = []


def record_expect_value(where: str, actual: str) -> None:
    """Remember ``actual``, the value expecttest accepts at ``where`` on this rank, until taken."""
    _expect_values.append(ExpectValue(where, actual))


def take_expect_values() -> Tuple[ExpectValue, ...]:
    """Take the values recorded since the last call (one test's, when taken as it ends)."""
    if not _expect_values:
        return ()
    values = tuple(_expect_values)
    _expect_values.clear()
    return values


class RankResult(unittest.TestResult):
    """Records a rank's unittest events as :class:`Event` records (``exits_allowed``: ``sys.exit`` requests an exit)."""

    def __init__(self, exits_allowed: bool = False) -> None:
        super().__init__()
        self.events: List[Event] = []
        # MultiProcessTestCase ranks may end a test with sys.exit(code) on purpose.
        self.exits_allowed = exits_allowed
        # The runner shows local variables (unittest's --locals, pytest's -l): so do ranks.
        self.tb_locals = os.environ.get(ENV_TB_LOCALS) == "1"
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
        skip = torch_skip_reason(err[1])
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


def _safe_repr(value) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unreprable {type(value).__name__}>"
