"""The one path from a merged :class:`~continuous_test.verdict.merge.Verdict` to a test result.

Every harness raises its verdict inside the test itself, under unittest's own
``run`` (or pytest's call of a function), so unittest and pytest decide the rest
as they do for any test: skip decorators, expected failures, subtests (through
the public ``subTest``), failure versus error, ``-x``/``failfast``::

    MultiProcContinuousTest.run ─► run_with ─► unittest.TestCase.run ─► _callTestMethod ─┐
    MultiProcessTestCase (setUp in the controller) ─► _callTestMethod ──────────────────┤
    @distributed function (pytest calls it) ────────────────────────────────────────────┴─► raise_verdict

While a verdict is replayed, :class:`~continuous_test.case.TestCase` skips
``setUp`` and ``tearDown`` in the controller (they run in the ranks) and its
``_callTestMethod`` raises the verdict instead of calling the test.
"""
from __future__ import annotations

import unittest
from typing import Callable, Optional

from continuous_test import _role, config
from continuous_test.errors import (
    ExpectMismatchError,
    InconsistentSkipError,
    LeakError,
    RankFailedError,
    UnexpectedEndingError,
)
from continuous_test.verdict.leaks import warn
from continuous_test.verdict.merge import Status, Verdict

__all__ = ["run_with", "verdict_of", "raise_verdict", "short_id", "ReprValue", "SOURCE_ATTR"]

# unittest hides frames of modules that define __unittest from tracebacks, so a
# report starts at the rank's own traceback, not at this replay machinery.
__unittest = True

# The instance attribute that holds the verdict's producer while run_with runs.
SOURCE_ATTR = "_ct_verdict_source"


def short_id(case: unittest.TestCase) -> str:
    """``Class.test_method``, the name reports use."""
    return f"{type(case).__qualname__}.{case._testMethodName}"


def run_with(case: unittest.TestCase, result: Optional[unittest.TestResult],
             produce: Callable[[], Verdict]) -> Optional[unittest.TestResult]:
    """Run ``case`` with unittest's own ``run``, its body raising ``produce()``'s verdict."""
    setattr(case, SOURCE_ATTR, produce)
    try:
        return unittest.TestCase.run(case, result)
    finally:
        setattr(case, SOURCE_ATTR, None)


def verdict_of(case: unittest.TestCase, produce: Callable[[], Verdict]) -> Verdict:
    """Call ``produce`` from inside ``case``'s run, with no verdict source set meanwhile, and keep its ``_outcome``."""
    # Under a launcher, produce() runs this very case for real (unittest's run
    # again, nested): it must see no verdict source, and it resets _outcome,
    # which the outer run's subTest still needs.
    outer = case._outcome  # type: ignore[attr-defined]
    setattr(case, SOURCE_ATTR, None)
    try:
        return produce()
    finally:
        setattr(case, SOURCE_ATTR, produce)
        case._outcome = outer  # type: ignore[attr-defined]


def raise_verdict(case: Optional[unittest.TestCase], verdict: Verdict, fn: Optional[Callable] = None) -> None:
    """Raise ``verdict`` inside the running test (``case``, or None for the pytest function ``fn``)."""
    __tracebackhide__ = True  # noqa: F841 - pytest starts the report at the ranks' tracebacks
    if verdict.leak_report and not _role.rank():  # launched: rank 0 reports for every rank
        warn(verdict, fn if case is None else getattr(case, case._testMethodName, None))
    as_errors = case is not None and config.keeps_torch_defaults(type(case))
    for sid, sub in verdict.subtests:
        if case is None:  # a plain function has no subtests to report into
            if sub.status is Status.FAIL:
                raise sub.error  # type: ignore[misc]
            continue
        params = {k: ReprValue(v) for k, v in sid.params}
        with case.subTest(sid.message, **params) if sid.message is not None else case.subTest(**params):
            _raise_status(sub, as_errors)
    _raise_status(verdict, as_errors)


# Set on an error raised from a verdict: its frames here are the runner's and the
# replay's, never the test's, and a report may hide them (the pytest plugin does).
VERDICT_ATTR = "ct_verdict"


# Failed assertions of the harness's own, which stay failures under torch's counts too.
_HARNESS_FAILURES = (InconsistentSkipError, UnexpectedEndingError, ExpectMismatchError, LeakError)


def _raise_status(verdict: Verdict, as_errors: bool = False) -> None:
    __tracebackhide__ = True  # noqa: F841
    if verdict.status is Status.SKIP:
        raise unittest.SkipTest(verdict.skip_reason or "")
    if verdict.status is Status.FAIL:
        error = verdict.error
        if as_errors and isinstance(error, AssertionError) and not isinstance(error, _HARNESS_FAILURES):
            error = _as_error(error)
        try:
            setattr(error, VERDICT_ATTR, True)
        except Exception:  # an exception type that takes no attributes
            pass
        raise error  # type: ignore[misc]


def _as_error(failure: AssertionError) -> RankFailedError:
    """A rank's failed assertion as torch's harness reports it: an error, with the same report and causes."""
    error = RankFailedError(str(failure))
    error.__dict__.update(failure.__dict__)  # the report's parts (ct_ranks, ct_sections, ...)
    error.__cause__ = failure.__cause__  # the ranks' tracebacks
    return error


class ReprValue(str):
    """A parameter value whose repr was taken on the rank."""

    def __repr__(self) -> str:
        return str(self)
