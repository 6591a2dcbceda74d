"""Plain pytest classes run on every rank (@distributed on a class), a world_size marker on one test of a
shared world, and fixtures computed at their own world size (@distributed_fixture): continuous_test/functions.py,
sizes.size_tests and the pytest plugin's class_tmpdir."""
from __future__ import annotations

import re

import helpers
import pytest
from helpers import describe, pytest_counts

from continuous_test.functions import NO_TEST_METHODS, NOT_A_PLAIN_CLASS, NOT_A_TEST_METHOD, NOT_PICKLABLE

SCENARIO = "test_pytest_classes.py"
PASSED = ["TestPlain::test_all_reduce", "TestPlain::test_parametrized[1]", "TestPlain::test_parametrized[3]",
          "TestPlain::test_marked", "TestPlain::test_class_tmpdir", "TestPlain::test_loads_at_two",
          "TestPlain::test_per_rank", "TestSizes::test_size[ws1]", "TestSizes::test_size[ws2]"]


def outcomes(output: str) -> dict:
    """node id (after the file) -> outcome, from pytest's -rA summary."""
    found = {}
    for word, test in re.findall(rf"^(PASSED|FAILED|ERROR|XFAIL|SKIPPED) \S*{re.escape(SCENARIO)}::(\S+)", output, re.M):
        found[test] = word
    return found


@pytest.mark.world
def test_a_deepspeed_style_class_runs_on_every_rank(tmp_path):
    # Fixtures of every scope, parametrize, a method's world_size marker, class_tmpdir, skip and xfail,
    # a fixture saved at 4 ranks and loaded at 2, a per-rank fixture, a non-picklable fixture value.
    proc = helpers.pytest(SCENARIO, "-rA", "--basetemp", str(tmp_path / "base"))
    assert pytest_counts(proc.stdout) == {"passed": 9, "failed": 2, "skipped": 1, "xfailed": 1}, describe(proc)
    found = outcomes(proc.stdout)
    assert {test: found.get(test) for test in PASSED} == {test: "PASSED" for test in PASSED}, describe(proc)
    assert found["TestPlain::test_xfail"] == "XFAIL", describe(proc)
    assert found["TestPlain::test_fails_on_rank_1"] == "FAILED", describe(proc)
    assert "test_fails_on_rank_1 failed on rank 1 of 2 (rank 0 passed)" in proc.stdout, describe(proc)
    picklable = NOT_PICKLABLE.split("{test}")[0] + "TestPlain::test_not_picklable: argument 'a_lock' (lock)"
    assert found["TestPlain::test_not_picklable"] == "FAILED" and picklable in proc.stdout, describe(proc)
    # class_tmpdir is removed at the class's end; nothing else of the run's is left but pytest's own
    assert not list((tmp_path / "base").glob("TestPlain-*")), list((tmp_path / "base").iterdir())


@pytest.mark.world
def test_k_selects_a_plain_class_test():
    proc = helpers.pytest(SCENARIO, "-k", "parametrized or ws1")
    assert pytest_counts(proc.stdout) == {"passed": 3, "deselected": 10}, describe(proc)


@pytest.mark.world
def test_a_world_size_marker_on_one_test_of_a_shared_world_runs_it_at_that_size():
    # test_b runs in a world of 3, test_a and test_c in the class's world of 2 (each test asserts its size).
    proc = helpers.pytest("test_marker_on_a_test.py::MarkedTest", "-rA")
    assert pytest_counts(proc.stdout) == {"passed": 3}, describe(proc)
    assert "test_marker_on_a_test.py::MarkedTest::test_b[ws3]" in proc.stdout, describe(proc)
    proc = helpers.pytest("test_marker_on_a_test.py::MarkedTest", "-k", "test_a or test_b")
    assert pytest_counts(proc.stdout) == {"passed": 2, "deselected": 1}, describe(proc)


@pytest.mark.world
@pytest.mark.parametrize("scenario, error", [
    ("test_marker_on_a_test.py::BadMarkerTest",
     "Invalid world size 0 from the world_size marker of test/scenarios/test_marker_on_a_test.py::BadMarkerTest::test_zero"),
    ("test_pytest_classes_bad.py::TestBadMarker::test_bad_size",
     "Invalid world size 'two' from the world_size marker of test/scenarios/test_pytest_classes_bad.py::TestBadMarker::test_bad_size"),
    ("test_pytest_classes_bad.py::TestBadMarker::test_bad_list",
     "the world_size marker of test/scenarios/test_pytest_classes_bad.py::TestBadMarker::test_bad_list must be a positive int"),
], ids=["shared-world", "plain-class", "plain-class-list"])
def test_a_bad_world_size_marker_on_a_test_is_a_usage_error_naming_it(scenario, error):
    proc = helpers.pytest(scenario, env={"PLAIN_BAD": "marker"})
    assert proc.returncode == 4 and error in proc.stderr, describe(proc)


@pytest.mark.world
@pytest.mark.parametrize("bad, error", [
    ("static", NOT_A_TEST_METHOD.format(cls="TestStatic", name="test_static", kind="staticmethod")),
    ("no_tests", NO_TEST_METHODS.format(cls="TestNothing", prefix="test")),
], ids=["static", "no_tests"])
def test_a_plain_class_that_cannot_run_fails_collection_naming_it(bad, error):
    proc = helpers.pytest("test_pytest_classes_bad.py", env={"PLAIN_BAD": bad})
    assert proc.returncode == 2 and error in proc.stdout, describe(proc)


def test_a_unittest_class_is_refused():
    import unittest

    import continuous_test

    class Case(unittest.TestCase):
        def test_x(self):
            pass

    with pytest.raises(TypeError) as caught:
        continuous_test.distributed(world_size=2)(Case)
    assert str(caught.value) == NOT_A_PLAIN_CLASS.format(cls=Case.__qualname__, name="Case")
