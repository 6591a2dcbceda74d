"""Fault handling: failing, crashing and hanging ranks never stall or poison the suite."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts
from helpers import running as alive

from continuous_test.runner import EXIT_INTERRUPTED

pytestmark = pytest.mark.e2e

LEAK_BOUND = 5.0  # seconds; generous, this guards against leaks, not speed


def wait_gone(pids, bound: float = LEAK_BOUND) -> float:
    start = time.monotonic()
    while any(alive(p) for p in pids) and time.monotonic() - start < bound:
        time.sleep(0.05)
    return time.monotonic() - start


def section(output: str, test: str) -> str:
    """The report block of one failed test in unittest's output."""
    match = re.search(rf"^(?:ERROR|FAIL): {test} .*?(?=^={{70}}|^-{{70}}\nRan )", output, re.M | re.S)
    assert match, f"no report for {test}\n{output}"
    return match.group(0)


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tmp")
    proc = helpers.python("test_faults.py", "-v", env={"TMPDIR": str(tmp), **helpers.BISECT_ON}, real=True)
    return proc, tmp


def test_no_poison_pill_every_remaining_test_runs(faults):
    proc, _ = faults
    assert proc.returncode == 1, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 16, "failures": 1, "errors": 6}, describe(proc)
    for name in "acegikmo":
        assert re.search(rf"test_{name}_healthy .* \.\.\. ok$", proc.stderr, re.M), describe(proc)


def test_failure_while_peer_waits_names_stuck_rank_and_where(faults):
    report = section(faults[0].stderr, "test_b_assert_while_peer_waits")
    assert "FaultTest.test_b_assert_while_peer_waits failed on rank 0 of 2" in report
    assert 'self.fail("rank 0 gave up")' in report
    assert "rank 1 did not finish FaultTest.test_b_assert_while_peer_waits within the 1 s grace period" in report
    assert re.search(r'rank 1 stacks \(stuck\):\n.*test_faults.py", line \d+, in test_b_assert_while_peer_waits\n'
                     r".*all_reduce_ones\(\)", report, re.S), report


@pytest.mark.parametrize("test, rank, how", [
    ("test_d_exit_code", 1, "exit code 3"),
    ("test_f_segfault", 1, "signal SIGSEGV"),
    ("test_h_abort", 0, "signal SIGABRT"),
    ("test_j_sigkill", 1, "signal SIGKILL"),
])
def test_dead_rank_is_reported_with_survivor_stacks(faults, test, rank, how):
    report = section(faults[0].stderr, test)
    assert f"RankDiedError: rank {rank} died with {how} while running FaultTest.{test}" in report
    # The survivor either failed fast in all_reduce (its traceback is chained) or
    # was still in it after the grace period (its stacks are attached).
    survivor = 1 - rank
    assert f"rank {survivor} stacks (interrupted)" in report or f"[rank {survivor}] Traceback" in report, report
    assert re.search(r"in all_reduce\n\s+work.wait\(\)", report), report


def test_time_limit_reports_every_rank_stack(faults):
    report = section(faults[0].stderr, "test_l_hang")
    assert "FaultTest.test_l_hang exceeded its time limit of 3 s on ranks 0, 1" in report
    assert re.search(r'rank 0 stacks \(timed out\):\n.*line \d+, in test_l_hang\n\s+time.sleep\(600\)', report, re.S)
    assert re.search(r'rank 1 stacks \(timed out\):\n.*line \d+, in test_l_hang\n\s+all_reduce_ones\(\)', report, re.S)


def test_rank_holding_the_gil_is_dumped_by_faulthandler(faults):
    report = section(faults[0].stderr, "test_n_hang_holding_the_gil")
    assert "rank 1 stacks (timed out):\n    (dumped by faulthandler)" in report  # words, not the enum's value
    assert re.search(r'test_faults.py", line \d+ in test_n_hang_holding_the_gil', report)


# The shutdown bound is asserted on the time actually waited, in test_world_faults.py.


def test_nothing_left_in_tmpdir(faults):
    _, tmp = faults
    assert os.listdir(tmp) == []


def start_hanging(tmp: Path, **popen) -> tuple:
    pid_dir = tmp / "pids"
    tmpdir = tmp / "tmp"
    pid_dir.mkdir()
    tmpdir.mkdir()
    env = helpers.scenario_env({"PID_DIR": str(pid_dir), "TMPDIR": str(tmpdir)})
    proc = subprocess.Popen([helpers.interpreter(), "test_hang.py", "-v"], cwd=helpers.SCENARIOS, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)
    deadline = time.monotonic() + 120
    while len(list(pid_dir.glob("*.pid"))) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the hanging test never started"
        time.sleep(0.05)
    time.sleep(0.2)
    pids = [int(p.read_text()) for p in pid_dir.glob("*.pid")]
    return proc, pids, tmpdir


def test_ranks_exit_when_the_controller_is_killed(tmp_path):
    proc, pids, tmpdir = start_hanging(tmp_path)
    assert all(alive(p) for p in pids)
    proc.kill()
    proc.communicate(timeout=30)
    elapsed = wait_gone(pids)
    assert not any(alive(p) for p in pids), f"ranks still alive {elapsed:.1f} s after the controller died"
    deadline = time.monotonic() + LEAK_BOUND
    while os.listdir(tmpdir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.listdir(tmpdir) == []


def test_ctrl_c_stops_ranks_and_reports_what_ran(tmp_path):
    proc, pids, tmpdir = start_hanging(tmp_path, start_new_session=True, preexec_fn=helpers.with_ctrl_c)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert re.search(r"test_a_quick .* \.\.\. ok$", err, re.M), err
    # One line names the interrupted test and what ran; no traceback, no ERROR.
    assert re.search(r"^Interrupted \(Ctrl-C\) while running __main__.HangTest.test_b_hang; the ranks were "
                     r"stopped. 1 test ran before it \(1 passed\).$", err, re.M), err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "ERROR" not in err, err
    wait_gone(pids)
    assert not any(alive(p) for p in pids)
    assert os.listdir(tmpdir) == []


def test_torchrun_time_limit_dumps_stacks_and_exits():
    proc = helpers.torchrun("test_hang.py", 2, env={"CONTINUOUS_TEST_TIMEOUT": "3"})
    assert proc.returncode != 0, describe(proc)
    output = proc.stdout + proc.stderr
    assert re.search(r"HangTest.test_b_hang exceeded its time limit of 3 s on rank [01]", output), describe(proc)
    assert re.search(r'test_hang.py", line \d+, in test_b_hang\n\s+time.sleep\(600\)', output), describe(proc)


@pytest.mark.parametrize("runner", ["python", "pytest"])
@pytest.mark.parametrize("cls, failing, after", [
    ("InterruptedBisectTest", "test_a_fails_then_hangs_in_its_rerun", "test_b_never_runs"),  # in the rerun
    ("InterruptedReplayTest", "test_b_fails_on_its_first_run", "test_c_never_runs"),  # in the bisect's replay
])
def test_ctrl_c_during_a_rerun_keeps_the_failure_already_known(runner, cls, failing, after, tmp_path):
    # The run stops (unittest: exit 130; pytest: its session is interrupted, exit 2), and
    # the failure of the test's own run is reported, with a note that its diagnosis was cut short.
    command = ([helpers.interpreter(), "test_interrupted_bisect.py", cls] if runner == "python" else
               [helpers.interpreter(), "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_interrupted_bisect.py", "-k", cls])
    proc = subprocess.Popen(command, cwd=str(helpers.SCENARIOS),
                            env=helpers.scenario_env({"STAMP_DIR": str(tmp_path), **helpers.BISECT_ON}), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=helpers.with_ctrl_c)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "rerun-started").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    output = out + err
    assert "AssertionError: the failure of the test's own run" in output, describe(done)
    assert "rerun and bisect interrupted (Ctrl-C)" in output, describe(done)
    assert after not in output, describe(done)
    if runner == "python":
        assert proc.returncode == EXIT_INTERRUPTED, describe(done)
        assert f"FAIL: {failing}" in err, describe(done)
        ran = "2 tests ran (1 passed, 1 failed)." if cls == "InterruptedReplayTest" else "1 test ran (1 failed)."
        assert (f"Interrupted (Ctrl-C) during the rerun and bisect of the failure of __main__.{cls}.{failing} "
                f"(reported above); the ranks were stopped. {ran}") in err, describe(done)
    else:
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, describe(done)
        assert f"FAILED test_interrupted_bisect.py::{cls}::{failing}" in out, describe(done)
        counts = pytest_counts(out)
        # The test after it never ran: only the tests before it passed.
        assert (counts["failed"], counts.get("passed", 0)) == (1, int(cls == "InterruptedReplayTest")), describe(done)


def test_sigterm_to_the_controller_removes_the_whole_texts_it_kept(tmp_path):
    # test_terminated.py keeps a rank's big output whole, then waits: SIGTERM ends the controller
    # (killed by the signal, as by default), and neither the kept texts' directory nor anything
    # else is left in TMPDIR.
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = helpers.scenario_env({"STAMP_DIR": str(tmp_path), "TMPDIR": str(tmpdir), **helpers.QUIET})
    proc = subprocess.Popen([helpers.interpreter(), "test_terminated.py"], cwd=helpers.SCENARIOS, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "waiting").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        kept = [name for name in os.listdir(tmpdir) if name.startswith("continuous_test-output-")]
        assert len(kept) == 1 and os.listdir(tmpdir / kept[0]), os.listdir(tmpdir)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM, err
    deadline = time.monotonic() + LEAK_BOUND
    while os.listdir(tmpdir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.listdir(tmpdir) == [], err


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
