"""MultiProcContinuousTest end to end: real scenario files run as subprocesses."""
from __future__ import annotations

import io
import json
import os
import re

import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts, verbose_name

from continuous_test.wire.env import ENV_REPORT


@pytest.mark.world
def test_python_runs_every_test_on_every_rank():
    proc = helpers.python("test_basic.py", "-v")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 5}, describe(proc)
    assert re.search(r"test_three_ranks .* \.\.\. ok", proc.stderr), describe(proc)


@pytest.mark.world
def test_python_k_selects_tests():
    proc = helpers.python("test_basic.py", "-k", "sum", "-v")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 1}, describe(proc)
    assert "test_sum" in proc.stderr


@pytest.mark.world
def test_python_names_one_test():
    proc = helpers.python("test_basic.py", "AllReduceTest.test_sum", "-v")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 1}, describe(proc)


@pytest.mark.world
def test_python_m_unittest():
    proc = helpers.unittest("test_basic")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 5}, describe(proc)


@pytest.mark.world
def test_pytest_with_k():
    proc = helpers.pytest("test_basic.py", "-k", "sum or three")
    assert proc.returncode == 0, describe(proc)
    assert pytest_counts(proc.stdout) == {"passed": 2, "deselected": 3}, describe(proc)


@pytest.mark.world
def test_pytest_x_stops_at_first_failure():
    proc = helpers.pytest("test_outcomes.py", "-x", "-k", "OutcomeTest")
    assert proc.returncode == 1, describe(proc)
    assert pytest_counts(proc.stdout).get("failed") == 1, describe(proc)
    assert "stopping after 1 failures" in proc.stdout, describe(proc)


@pytest.mark.e2e
def test_torchrun_runs_each_rank_in_place():
    proc = helpers.torchrun("test_basic.py", 2, "-v")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 5, "skipped": 1}, describe(proc)
    assert "PropertyWorldSizeTest needs world_size=3 but the launcher started WORLD_SIZE=2" in proc.stderr
    # Only rank 0 prints the summary.
    assert proc.stderr.count("Ran 5 tests") == 1, describe(proc)


@pytest.mark.world
def test_isolation_between_tests_python():
    proc = helpers.python("test_isolation.py")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 4}, describe(proc)


@pytest.mark.e2e
def test_isolation_between_tests_torchrun():
    proc = helpers.torchrun("test_isolation.py", 2)
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 4}, describe(proc)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    marker_dir = tmp_path_factory.mktemp("markers")
    proc = helpers.python("test_outcomes.py", "-v", "-k", "OutcomeTest", "-k", "SkippedClass",
                          env={"MARKER_DIR": str(marker_dir), ENV_REPORT: str(marker_dir.parent / "run.json")})
    return proc, marker_dir


@pytest.mark.world
def test_outcome_counts(outcomes):
    proc, _ = outcomes
    assert proc.returncode == 1, describe(proc)
    # unittest's own count: Python 3.12.1 leaves out the two tests @unittest.skip skips (see
    # helpers.decorator_skips_counted); the skips are counted, and reported, on every version.
    assert unittest_counts(proc.stderr) == {
        "ran": 10 if helpers.decorator_skips_counted() else 8, "failures": 3, "errors": 1, "skipped": 3,
        "expected failures": 1, "unexpected successes": 1,
    }, describe(proc)


@pytest.mark.world
def test_the_run_report_has_every_outcome(outcomes):
    # Including the two that @unittest.skip skips, which Python 3.12.1 skips without startTest.
    proc, marker_dir = outcomes
    report = json.loads((marker_dir.parent / "run.json").read_text())
    outcomes_by_test = {t["id"].split(".", 1)[1]: t["outcome"] for t in report["tests"]}
    assert outcomes_by_test == {
        "OutcomeTest.test_pass": "passed", "OutcomeTest.test_skip_decorator": "skipped",
        "OutcomeTest.test_skip_on_all_ranks": "skipped", "OutcomeTest.test_skip_on_some_ranks": "failed",
        "OutcomeTest.test_expected_failure": "xfailed", "OutcomeTest.test_unexpected_success": "xpassed",
        "OutcomeTest.test_subtests": "failed", "OutcomeTest.test_error_keeps_type": "error",
        "OutcomeTest.test_failure_with_output": "failed", "SkippedClassTest.test_in_skipped_class": "skipped",
    }, describe(proc)


def test_a_test_skipped_without_start_gets_its_own_outcome():
    # The order Python 3.12.1's TestCase.run calls a result in for a test @unittest.skip skips:
    # addSkip and stopTest, no startTest.  The run log still has the test, skipped, and the failure
    # before it keeps its own outcome; a skipped subtest of a running test is that test's.
    import unittest

    from continuous_test.controller import run_log
    from continuous_test.runner import ContinuousTestResult

    class Probe(unittest.TestCase):
        def test_a(self):
            pass

        def test_b(self):
            pass

        def test_c(self):
            pass

    a, b, c = Probe("test_a"), Probe("test_b"), Probe("test_c")
    log = run_log.reset()
    try:
        result = ContinuousTestResult(unittest.runner._WritelnDecorator(io.StringIO()), True, 2)
        result.startTest(a)
        result.addFailure(a, (AssertionError, AssertionError("boom"), None))
        result.stopTest(a)
        result.addSkip(b, "decorated")
        result.stopTest(b)
        result.startTest(c)
        result.addSkip(unittest.case._SubTest(c, "", {"i": 1}), "a subtest's skip")
        result.addSuccess(c)
        result.stopTest(c)
        assert {key.rsplit(".", 1)[-1]: t.outcome for key, t in log.tests.items()} == {
            "test_a": "failed", "test_b": "skipped", "test_c": "skipped"}
    finally:
        run_log.reset()


@pytest.mark.world
def test_zero_selected_or_skipped_class_starts_no_world(outcomes):
    _, marker_dir = outcomes
    assert sorted(os.listdir(marker_dir)) == ["OutcomeTest.rank0", "OutcomeTest.rank1"]


@pytest.mark.world
def test_failure_names_rank_keeps_type_and_output(outcomes):
    proc, _ = outcomes
    err = proc.stderr
    assert "ValueError: OutcomeTest.test_error_keeps_type failed on rank 0 of 2 (rank 1 passed)" in err
    assert 'raise ValueError("bad value on rank 0")' in err  # the rank's own traceback
    assert "OutcomeTest.test_failure_with_output failed on rank 1 of 2 (rank 0 passed)" in err
    assert "[rank1] diagnostic line from rank 1" in err
    assert "[rank0] diagnostic line from rank 0" in err


@pytest.mark.world
def test_skips(outcomes):
    proc, _ = outcomes
    err = proc.stderr
    assert f"{verbose_name('test_skip_decorator', 'OutcomeTest')} ... skipped 'decided in the controller'" in err
    assert f"{verbose_name('test_skip_on_all_ranks', 'OutcomeTest')} ... skipped 'feature X is missing'" in err
    assert "skipped 'whole class skipped'" in err
    assert "InconsistentSkipError: OutcomeTest.test_skip_on_some_ranks was skipped on rank 1 but ran on rank 0" in err
    assert "rank 1: only rank 1 lacks it" in err


@pytest.mark.world
def test_expected_failure_and_subtests(outcomes):
    proc, _ = outcomes
    err = proc.stderr
    assert f"{verbose_name('test_expected_failure', 'OutcomeTest')} ... expected failure" in err
    assert f"{verbose_name('test_unexpected_success', 'OutcomeTest')} ... unexpected success" in err
    assert f"FAIL: {verbose_name('test_subtests', 'OutcomeTest')} (i=1)" in err
    assert "OutcomeTest.test_subtests (i=1) failed on rank 1 of 2" in err


@pytest.mark.world
def test_bad_configuration_names_the_class():
    proc = helpers.python("test_badconfig.py")
    err = proc.stderr
    assert proc.returncode == 1, describe(proc)
    assert unittest_counts(err) == {"ran": 8, "errors": 8}, describe(proc)
    for expected in [
        "ZeroWorldTest.world_size must be a positive int, got 0",
        "NegativeWorldTest.world_size must be a positive int, got -3",
        "StringWorldTest.world_size must be a positive int, got '2'",
        "make_local_class.<locals>.LocalTest cannot be imported by its rank processes",
        "UnknownBackendTest.backend_str() returned unknown backend 'glo'",
        "Invalid timeout -5 from BadTimeoutTest.test_timeout",
        "InitRaisesTest: rank 1 could not join the world of 2: RuntimeError: cannot join on rank 1",
        "(the world of InitRaisesTest failed to start for an earlier test and is not retried)",
    ]:
        assert expected in err, f"missing {expected!r}\n{describe(proc)}"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
