"""The replay of a verdict into unittest: one path, through unittest's own run, for every outcome.

No world is started: each test hands replay.run_with a verdict built by hand and
checks what unittest's result recorded, as it would for a test that ran here.
"""
from __future__ import annotations

import unittest

import pytest

from continuous_test import TestCase
from continuous_test.verdict import replay
from continuous_test.verdict.merge import Status, Verdict
from continuous_test.wire.outcome import SubTestId


class Sample(TestCase):
    __test__ = False  # replayed by the tests below, not collected itself
    ran_here = False

    def setUp(self):
        type(self).ran_here = True  # in a world, setUp runs in the ranks, never here

    def test_x(self):
        type(self).ran_here = True

    @unittest.expectedFailure
    def test_expected(self):
        pass


def replayed(verdict: Verdict, name: str = "test_x") -> unittest.TestResult:
    Sample.ran_here = False
    result = unittest.TestResult()
    replay.run_with(Sample(name), result, lambda: verdict)
    assert not Sample.ran_here, "the test body or setUp ran in the controller"
    return result


def test_a_pass_is_a_success():
    result = replayed(Verdict(Status.PASS))
    assert result.testsRun == 1 and result.wasSuccessful() and not result.skipped


def test_an_assertion_is_a_failure_and_anything_else_an_error():
    assert len(replayed(Verdict(Status.FAIL, error=AssertionError("1 != 2"))).failures) == 1
    result = replayed(Verdict(Status.FAIL, error=RuntimeError("boom")))
    assert len(result.errors) == 1 and "RuntimeError: boom" in result.errors[0][1]


def test_a_skip_keeps_its_reason():
    assert replayed(Verdict(Status.SKIP, skip_reason="no nccl")).skipped[0][1] == "no nccl"


def test_subtests_are_reported_one_by_one():
    sub = SubTestId(None, (("i", "1"),))
    verdict = Verdict(Status.PASS, subtests=[(sub, Verdict(Status.FAIL, error=AssertionError("bad i")))])
    result = replayed(verdict)
    assert len(result.failures) == 1 and "(i=1)" in str(result.failures[0][0])


def test_expected_failure_is_honoured():
    failing = replayed(Verdict(Status.FAIL, error=AssertionError("as expected")), "test_expected")
    assert len(failing.expectedFailures) == 1
    passing = replayed(Verdict(Status.PASS), "test_expected")
    assert len(passing.unexpectedSuccesses) == 1


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
