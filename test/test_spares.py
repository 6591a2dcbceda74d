"""Ranks forked ahead of need (continuous_test.controller.processes.Spares), run as real scenario files."""
import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts

pytestmark = pytest.mark.world

SCENARIO = "test_spares.py"
ALL_AHEAD = "test_fresh_b,test_fresh_c,test_own_b,test_own_c"


@pytest.mark.parametrize("runner", ["python", "pytest"])
def test_next_tests_ranks_are_forked_ahead_and_nothing_outlives_the_class(runner):
    env = {"EXPECT_AHEAD": ALL_AHEAD}
    if runner == "python":
        proc = helpers.python(SCENARIO, env=env)
        counts = unittest_counts(proc.stderr)
        assert counts == {"ran": 10, "failures": 1}, describe(proc)
    else:
        proc = helpers.pytest(SCENARIO, "-rA", env=env)
        assert pytest_counts(proc.stdout) == {"passed": 9, "failed": 1}, describe(proc)
    out = proc.stdout + proc.stderr
    # A spare's own output goes to the test that it served, and no further.
    said = "[rank1] rank 1 says hello" if runner == "python" else "--- output of rank 1 ---\nrank 1 says hello"
    assert "rank 1 fails on purpose" in out and said in out, describe(proc)
    assert "forked_ahead" not in out.replace("context.forked_ahead, expected", ""), describe(proc)


def test_the_first_test_and_a_lone_test_fork_their_own():
    # -k one test: the class expects more (it has three), so a spare set is forked
    # and must be killed when the class ends (the last class checks).
    proc = helpers.pytest(SCENARIO, "-k", "test_fresh_b or test_world_a or LeftNothing or NothingLeft", "-rA",
                          env={"EXPECT_AHEAD": ""})
    assert pytest_counts(proc.stdout) == {"passed": 4, "deselected": 6}, describe(proc)
