"""The controller survives what happens to it (test/scenarios/test_controller_faults.py, real runs).

An exception raised in the controller while it waits (a runner's own timeout) ends
that test only: no world is left running the old test.  A setting a test needs is
checked before anything is sent, whatever the verbosity.  Under ``pytest --pdb`` a
test's ``tearDown`` runs in the ranks only, as without it.
"""
from __future__ import annotations

import time

import helpers
import pytest
from continuous_test._procfs import running
from helpers import describe, pytest_counts, unittest_counts, verbose_name

SCENARIO = "test_controller_faults.py"


@pytest.mark.world
def test_an_exception_in_the_waiting_controller_leaves_no_busy_world():
    started = time.monotonic()
    proc = helpers.python(SCENARIO, "-v", "InterruptedWaitTest")
    took = time.monotonic() - started
    assert unittest_counts(proc.stderr) == {"ran": 3, "errors": 1}, describe(proc)
    assert "ControllerTimeout: the runner's own timeout fired in the controller" in proc.stderr, describe(proc)
    assert f"{verbose_name('test_b_innocent', 'InterruptedWaitTest')} ... ok" in proc.stderr, describe(proc)
    assert f"{verbose_name('test_c_innocent', 'InterruptedWaitTest')} ... ok" in proc.stderr, describe(proc)
    assert "ProtocolError" not in proc.stderr, describe(proc)
    # The slow test's ranks sleep 20 s: they were stopped, not waited for.
    assert took < 15, describe(proc)


@pytest.mark.world
def test_an_exception_while_the_world_starts_is_the_tests_own(tmp_path):
    # The alarm fires while the controller waits for the ranks to make their group: the
    # slow test errors, and its world is started again for the innocent tests (a start
    # the controller was interrupted in is not a start that failed).
    proc = helpers.python(SCENARIO, "-v", "InterruptedStartTest", env={"MARK_DIR": str(tmp_path)})
    assert unittest_counts(proc.stderr) == {"ran": 3, "errors": 1}, describe(proc)
    assert f"{verbose_name('test_a_slow', 'InterruptedStartTest')} ... ERROR" in proc.stderr, describe(proc)
    assert f"{verbose_name('test_b_innocent', 'InterruptedStartTest')} ... ok" in proc.stderr, describe(proc)
    assert "not retried" not in proc.stderr, describe(proc)


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["signal", "thread"])
def test_pytest_timeouts_leave_no_busy_world(method, tmp_path):
    # pytest-timeout's signal method raises in the controller while it waits: the slow
    # test fails, the others pass.  Its thread method ends the whole process: the
    # ranks must go with it.
    pytest.importorskip("pytest_timeout")
    started = time.monotonic()
    # A limit of 5 s, not less: the world starts inside the first test's window, and on a loaded
    # machine a start has taken more than 2 s (the fork server's interpreter imports torch).
    proc = helpers.pytest(SCENARIO, "-k", "RunnerTimeoutTest", "--timeout", "5", "--timeout-method", method, real=True,
                          env={"MARK_DIR": str(tmp_path)})
    assert time.monotonic() - started < 40, describe(proc)  # the slow test's ranks sleep 60 s
    if method == "signal":
        assert pytest_counts(proc.stdout) == {"failed": 1, "passed": 2, "deselected": 9}, describe(proc)
        assert "Failed: Timeout (>5.0s) from pytest-timeout" in proc.stdout, describe(proc)
        assert "ProtocolError" not in proc.stdout + proc.stderr, describe(proc)
    else:
        assert proc.returncode != 0 and "Timeout" in proc.stdout + proc.stderr, describe(proc)
    pids = [int(p.read_text()) for p in tmp_path.glob("slow-*")]
    assert len(pids) == 2, describe(proc)
    deadline = time.monotonic() + 5
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(running, pids)), describe(proc)


@pytest.mark.world
@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_a_bad_heartbeat_fails_each_test_before_anything_is_sent(verbose, tmp_path):
    proc = helpers.python(SCENARIO, *verbose, "TearDownInRanksTest",
                          env={"CONTINUOUS_TEST_HEARTBEAT": "often", "MARK_DIR": str(tmp_path)})
    assert unittest_counts(proc.stderr) == {"ran": 2, "errors": 2}, describe(proc)
    assert proc.stderr.count("Invalid heartbeat 'often' from CONTINUOUS_TEST_HEARTBEAT environment variable") == 2, \
        describe(proc)
    assert "ProtocolError" not in proc.stderr, describe(proc)
    assert list(tmp_path.iterdir()) == [], describe(proc)  # no rank ran a test


# Settings read only in some runs (after a failure, where devices are leased, under -v):
# each is checked before any rank runs a test, in shared worlds and fresh ranks alike.
@pytest.mark.world
@pytest.mark.parametrize("name, message", [("CONTINUOUS_TEST_BISECT", "Invalid bisect budget 'often'"),
                                           ("CONTINUOUS_TEST_DEVICE_WAIT", "Invalid device wait 'often'"),
                                           ("CONTINUOUS_TEST_HEARTBEAT", "Invalid heartbeat 'often'"),
                                           ("CONTINUOUS_TEST_RECORD", "Invalid value 'often' from CONTINUOUS_TEST_RECORD")])
def test_every_setting_is_checked_before_any_rank_runs_a_test(name, message, tmp_path):
    proc = helpers.python(SCENARIO, "-v", "TearDownInRanksTest", "FreshTest",
                          env={name: "often", "MARK_DIR": str(tmp_path)})
    assert unittest_counts(proc.stderr) == {"ran": 3, "errors": 3}, describe(proc)
    assert proc.stderr.count(message) == 3 and f"from {name} environment variable" in proc.stderr, describe(proc)
    assert "a failure of its own" not in proc.stderr and "ProtocolError" not in proc.stderr, describe(proc)
    assert list(tmp_path.iterdir()) == [], describe(proc)  # no rank ran a test


@pytest.mark.e2e
def test_under_pdb_teardown_runs_in_the_ranks_only():
    proc = helpers.pytest(SCENARIO, "--pdb", "-k", "TearDownInRanksTest")
    assert pytest_counts(proc.stdout) == {"passed": 2, "deselected": 10}, describe(proc)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
