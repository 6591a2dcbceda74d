"""Replay a merged :class:`~continuous_test.outcome.Verdict` into a unittest result.

:func:`run_with` is unittest's ``run(result)`` protocol (startTest, skip decisions,
expected failures, subtests, stopTest) around a verdict that was produced
elsewhere: by the ranks of a dispatcher world, or by the ranks of a torchrun
launch.  Class- and method-level ``unittest.skip`` decorators are decided here,
before anything is started.
"""
from __future__ import annotations

import sys
import unittest
from typing import Callable, Optional
from unittest.case import _SubTest, _subtest_msg_sentinel  # type: ignore[attr-defined]

from continuous_test.outcome import SubTestId, Verdict

__all__ = ["run_with", "apply", "short_id", "ReprValue"]

# unittest hides frames of modules that define __unittest from tracebacks, so a
# report starts at the rank's own traceback, not at this replay machinery.
__unittest = True


def short_id(case: unittest.TestCase) -> str:
    """``Class.test_method``, the name reports use."""
    return f"{type(case).__qualname__}.{case._testMethodName}"


def run_with(case: unittest.TestCase, result: Optional[unittest.TestResult],
             produce: Callable[[], Verdict]) -> Optional[unittest.TestResult]:
    """Run ``case`` by asking ``produce`` for its verdict; the TestCase's ``run`` calls this."""
    own_result = result is None
    if own_result:
        result = case.defaultTestResult()
        getattr(result, "startTestRun", lambda: None)()
    result.startTest(case)
    try:
        _run(case, result, produce)
    finally:
        result.stopTest(case)
        if own_result:
            getattr(result, "stopTestRun", lambda: None)()
    return result


def _run(case, result, produce) -> None:
    method = getattr(case, case._testMethodName)
    if getattr(type(case), "__unittest_skip__", False) or getattr(method, "__unittest_skip__", False):
        why = getattr(type(case), "__unittest_skip_why__", "") or getattr(method, "__unittest_skip_why__", "")
        _add_skip(result, case, why)
        return
    expecting_failure = bool(getattr(case, "__unittest_expecting_failure__", False)
                             or getattr(method, "__unittest_expecting_failure__", False))
    try:
        verdict = produce()
    except unittest.SkipTest as skip:
        _add_skip(result, case, str(skip))
        return
    except KeyboardInterrupt:
        # Ctrl-C: the world is already stopped.  A unittest runner records the
        # interrupted test and stops, then reports what ran; pytest handles it itself.
        if not isinstance(result, unittest.TestResult):
            raise
        result.addError(case, sys.exc_info())
        result.stop()
        return
    except BaseException:  # noqa: B902 - a world that cannot start is this test's error
        result.addError(case, sys.exc_info())
        return
    if verdict.leak_report:
        from continuous_test.leaks import warn

        warn(verdict, method)
    apply(case, result, verdict, expecting_failure)


def apply(case: unittest.TestCase, result: unittest.TestResult, verdict: Verdict, expecting_failure: bool = False) -> None:
    """Record ``verdict`` in ``result`` as unittest itself would have."""
    failed_subtests = [(sid, v) for sid, v in verdict.subtests if v.status == "fail"]
    if expecting_failure and verdict.status != "fail" and failed_subtests:
        result.addExpectedFailure(case, _exc_info(failed_subtests[0][1].error))
        return
    for sid, sub in verdict.subtests:
        _apply_subtest(case, result, sid, sub)
    if verdict.status == "skip":
        _add_skip(result, case, verdict.skip_reason or "")
    elif verdict.status == "fail":
        info = _exc_info(verdict.error)
        if expecting_failure:
            result.addExpectedFailure(case, info)
        elif issubclass(info[0], case.failureException):
            result.addFailure(case, info)
        else:
            result.addError(case, info)
    elif not failed_subtests:
        if expecting_failure:
            result.addUnexpectedSuccess(case)
        else:
            result.addSuccess(case)


def _apply_subtest(case, result, sid: SubTestId, sub: Verdict) -> None:
    subtest = _SubTest(case, sid.message if sid.message is not None else _subtest_msg_sentinel,
                       {k: ReprValue(v) for k, v in sid.params})
    if sub.status == "skip":
        _add_skip(result, subtest, sub.skip_reason or "")
    elif sub.status == "fail":
        info = _exc_info(sub.error)
        if hasattr(result, "addSubTest"):
            result.addSubTest(case, subtest, info)
        elif issubclass(info[0], case.failureException):
            result.addFailure(subtest, info)
        else:
            result.addError(subtest, info)
    elif hasattr(result, "addSubTest"):
        result.addSubTest(case, subtest, None)


class ReprValue(str):
    """A parameter value whose repr was taken on the rank."""

    def __repr__(self) -> str:
        return str(self)


def _add_skip(result, test, reason: str) -> None:
    add_skip = getattr(result, "addSkip", None)
    if add_skip is not None:
        add_skip(test, reason)
    else:
        result.addSuccess(test)


def _exc_info(error: BaseException):
    __tracebackhide__ = True  # noqa: F841 - pytest hides this frame
    try:
        raise error
    except BaseException:  # noqa: B902
        return sys.exc_info()
