"""Tests sent ahead (continuous_test.controller.ahead), run as real scenario files under each runner."""
import os
import re
import sys
import time
import unittest

import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts

from continuous_test.controller import ahead
from continuous_test.wire.env import ENV_AHEAD, ENV_LIVE_OUTPUT, ENV_RECORD

SCENARIO = "test_ahead.py"
GAP = "0.6"  # seconds of pretended runner work before each test, in the controller (a margin under load)


def run(runner, classes, stamp_dir, env=None, args=()):
    env = {"STAMP_DIR": str(stamp_dir), **(env or {})}
    if runner == "python":
        return helpers.python(SCENARIO, *classes, *args, env=env)
    if runner == "unittest":
        return helpers.unittest(*(f"test_ahead.{c}" for c in classes), *args, env=env)
    ids = [f"{SCENARIO}::{c}" for c in classes]
    # real: in process the outer session's plugins would decide what may be sent ahead.
    return helpers.pytest(*ids, "-rA", *args, env=env, real=True)


def passed_all(runner, proc, n):
    """Every one of the ``n`` tests ran and passed: none skipped (an exit code of 0 alone allows that)."""
    if runner == "pytest":
        assert pytest_counts(proc.stdout) == {"passed": n}, describe(proc)
    else:
        assert unittest_counts(proc.stderr) == {"ran": n}, describe(proc)


def sent_ahead(proc, cls):
    match = re.search(rf"SENT_AHEAD {cls} (\S+)", proc.stdout + proc.stderr)
    assert match, describe(proc)
    return match.group(1)


def stamp(stamp_dir, name):
    return float((stamp_dir / name).read_text())


@pytest.mark.e2e
@pytest.mark.parametrize("runner", ["python", "unittest", "pytest"])
def test_the_next_test_starts_while_the_runner_records_the_last(runner, tmp_path):
    proc = run(runner, ["AheadTest"], tmp_path, env={"AHEAD_GAP": GAP})
    assert proc.returncode == 0, describe(proc)
    passed_all(runner, proc, 4)
    assert sent_ahead(proc, "AheadTest") == "3", describe(proc)
    # The first test waits for the runner; each later one was on the ranks before
    # the runner (slow by GAP seconds) asked for it.
    assert stamp(tmp_path, "rank0-AheadTest.test_a") > stamp(tmp_path, "ctl-AheadTest.test_a")
    for test in ("test_b", "test_c", "test_d"):
        for rank in (0, 1):
            assert stamp(tmp_path, f"rank{rank}-AheadTest.{test}") < stamp(tmp_path, f"ctl-AheadTest.{test}"), test
    # A test sent ahead keeps its own output.
    out = proc.stdout + proc.stderr
    assert "[rank0] rank 0 prints in test_c" in out and "[rank1] rank 1 prints in test_c" in out, describe(proc)


@pytest.mark.e2e
def test_turned_off_every_test_waits_for_the_runner(tmp_path):
    proc = run("python", ["AheadTest"], tmp_path, env={"AHEAD_GAP": GAP, "CONTINUOUS_TEST_AHEAD": "0"})
    assert proc.returncode == 0, describe(proc)
    passed_all("python", proc, 4)
    assert sent_ahead(proc, "AheadTest") == "0", describe(proc)
    for test in ("test_a", "test_b", "test_c", "test_d"):
        assert stamp(tmp_path, f"rank0-AheadTest.{test}") > stamp(tmp_path, f"ctl-AheadTest.{test}"), test


@pytest.mark.e2e
def test_only_a_plain_pass_on_every_rank_sends_the_next_test(tmp_path):
    # test_a fails on rank 1 and test_b leaks: neither sends the next test; test_c does.
    proc = run("python", ["NotAheadTest"], tmp_path)
    assert unittest_counts(proc.stderr) == {"ran": 4, "failures": 1}, describe(proc)
    assert sent_ahead(proc, "NotAheadTest") == "1", describe(proc)
    assert "left environment variable CT_AHEAD_LEAK changed" in proc.stderr, describe(proc)


@pytest.mark.e2e
@pytest.mark.parametrize("runner", ["python", "pytest"])
def test_a_test_the_runner_skips_is_never_sent_ahead(runner, tmp_path):
    proc = run(runner, ["SkippedNextTest"], tmp_path)
    assert proc.returncode == 0, describe(proc)
    ran = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ran-"))
    if runner == "python":  # pytest's marker means nothing to unittest: that test runs
        assert unittest_counts(proc.stderr) == {"ran": 4, "skipped": 1}, describe(proc)
        assert sent_ahead(proc, "SkippedNextTest") == "1", describe(proc)
        assert ran == ["ran-0-test_c_pytest_skipped", "ran-1-test_c_pytest_skipped"], ran
    else:
        assert pytest_counts(proc.stdout) == {"passed": 2, "skipped": 2}, describe(proc)
        assert sent_ahead(proc, "SkippedNextTest") == "0", describe(proc)
        assert ran == [], ran


@pytest.mark.e2e
def test_a_test_a_skip_or_skipif_marker_skips_is_never_sent_ahead(tmp_path):
    # Sent ahead, test_b_skip (or test_d_skipif) would run on the ranks, and the runner's
    # next test (test_c, test_e) would start in a fresh world: new rank pids.
    proc = run("pytest", ["MarkerSkippedNextTest"], tmp_path)
    assert pytest_counts(proc.stdout) == {"passed": 3, "skipped": 2}, describe(proc)
    ran = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ran-"))
    assert ran == [], describe(proc)
    for rank in (0, 1):
        pids = {test: (tmp_path / f"pid{rank}-MarkerSkippedNextTest.{test}").read_text()
                for test in ("test_a", "test_c", "test_e")}
        assert len(set(pids.values())) == 1, f"rank {rank} was restarted: {pids}\n{describe(proc)}"


@pytest.mark.e2e
def test_a_rank_dying_in_a_test_sent_ahead_fails_that_test(tmp_path):
    proc = run("python", ["CrashAheadTest"], tmp_path)
    assert unittest_counts(proc.stderr) == {"ran": 3, "errors": 1}, describe(proc)
    assert sent_ahead(proc, "CrashAheadTest") == "1", describe(proc)
    assert "rank 1 died with exit code 3 while running CrashAheadTest.test_b_crashes" in proc.stderr, describe(proc)
    assert "died with exit code 3 after" not in proc.stderr, describe(proc)  # not "between tests"


@pytest.mark.e2e
@pytest.mark.parametrize("cls", ["FixtureTest", "FixtureTeardownTest"])
def test_pytest_fixtures_of_either_test_run_before_the_next_test_starts(cls, tmp_path):
    # FixtureTest: the next test's own fixture; FixtureTeardownTest: the last one's teardown.
    proc = run("pytest", [cls], tmp_path)
    assert pytest_counts(proc.stdout) == {"passed": 2}, describe(proc)
    assert sent_ahead(proc, cls) == "0", describe(proc)


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["stop", "mispredict"])
def test_a_test_sent_ahead_that_the_runner_does_not_run_is_stopped(mode, tmp_path):
    # test_b (a minute long) is sent ahead after test_a; the runner then stops
    # (``stop``) or runs test_c instead (``mispredict``).  Waiting for test_b, or
    # for a graceful shutdown (60 s on this class), would take a minute.
    started = time.monotonic()
    proc = run("python", [], tmp_path, args=[mode])
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, describe(proc)
    assert elapsed < 30, f"{elapsed:.1f} s\n{describe(proc)}"
    assert sent_ahead(proc, "LongNextTest") == "1", describe(proc)
    # A rank stopped while it wrote its pid leaves the file empty: nothing to check there.
    pids = {p.name: int(p.read_text()) for p in tmp_path.iterdir() if p.name.startswith("pid") and p.read_text()}
    if mode == "mispredict":
        passed_all("python", proc, 2)
        # test_c ran in a fresh world: test_b's ranks were stopped with theirs.
        assert pids["pid0-LongNextTest.test_c"] != pids["pid0-LongNextTest.test_a"], pids
    else:
        passed_all("python", proc, 1)
    for pid in pids.values():
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid), f"rank {pid} outlived the run"


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.e2e
def test_a_class_whose_run_may_skip_a_test_sends_nothing_ahead(tmp_path):
    proc = run("python", ["RunSkipTest"], tmp_path)
    assert unittest_counts(proc.stderr) == {"ran": 3, "skipped": 1}, describe(proc)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("ran-")], describe(proc)


@pytest.mark.e2e
@pytest.mark.parametrize("runner", ["python", "pytest"])
def test_live_output_shows_what_a_test_sent_ahead_printed_before_the_runner_asked(runner, tmp_path):
    args = ["--ct-live-output", "-s"] if runner == "pytest" else []
    env = {"AHEAD_GAP": GAP, "CONTINUOUS_TEST_LIVE_OUTPUT": "1"} if runner == "python" else {"AHEAD_GAP": GAP}
    proc = run(runner, ["LiveOutputTest"], tmp_path, env=env, args=args)
    assert proc.returncode == 0, describe(proc)
    passed_all(runner, proc, 3)
    out = proc.stdout + proc.stderr
    for test in ("test_a", "test_b", "test_c"):
        for rank in (0, 1):
            assert f"OUT-{test} rank {rank}" in out, f"{test} rank {rank}\n{describe(proc)}"


@pytest.mark.e2e
def test_the_time_limit_counts_from_when_the_test_was_sent(tmp_path):
    # test_b is sent ahead, and the runner asks for it 1.5 s later: its 2 s limit
    # still ends 2 s after it was sent, before it sleeps out its 3 s.
    proc = run("python", ["TimeLimitTest"], tmp_path, env={"AHEAD_GAP": "1.5", "CONTINUOUS_TEST_BISECT": "off"})
    assert unittest_counts(proc.stderr) == {"ran": 2, "errors": 1}, describe(proc)
    assert "exceeded its time limit of 2 s" in proc.stderr, describe(proc)
    assert sent_ahead(proc, "TimeLimitTest") == "1", describe(proc)


@pytest.mark.e2e
def test_under_pytest_x_a_strict_xfail_that_passes_sends_nothing_ahead(tmp_path):
    proc = run("pytest", ["XfailStopTest"], tmp_path, args=["-x"])
    assert pytest_counts(proc.stdout) == {"failed": 1}, describe(proc)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("ran-")], describe(proc)


_CONFTEST = """
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: skipped by this conftest")


def pytest_runtest_setup(item):
    if item.get_closest_marker("slow"):
        pytest.skip("slow")
"""

_HOOK_SKIP = """
import os
import pytest
from continuous_test import MultiProcContinuousTest


class HookSkipTest(MultiProcContinuousTest):
    world_size = 2

    def test_a(self):
        pass

    @pytest.mark.slow
    def test_b_slow(self):
        open(os.path.join(os.environ["STAMP_DIR"], f"ran-{self.rank}-test_b_slow"), "w").close()

    def test_c(self):
        pass
"""


@pytest.mark.e2e
def test_a_test_a_conftest_hook_skips_is_not_sent_ahead(tmp_path):
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    (tmp_path / "test_hook_skip.py").write_text(_HOOK_SKIP)
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    proc = helpers.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_hook_skip.py"],
                       cwd=tmp_path, env={"STAMP_DIR": str(stamps)})
    assert pytest_counts(proc.stdout) == {"passed": 2, "skipped": 1}, describe(proc)
    assert list(stamps.iterdir()) == [], describe(proc)


@pytest.mark.e2e
@pytest.mark.parametrize("name", [ENV_AHEAD, ENV_LIVE_OUTPUT, ENV_RECORD])
def test_a_bad_switch_value_fails_each_test_naming_it_before_any_rank_starts(tmp_path, name):
    # Every on/off switch is checked by the controller before anything is sent: each
    # test errors with the same message, and no world is started for them.
    proc = run("python", ["AheadTest"], tmp_path, env={name: "sometimes"})
    assert unittest_counts(proc.stderr) == {"ran": 4, "errors": 4}, describe(proc)
    assert (f"Invalid value 'sometimes' from {name} environment variable: "
            "expected one of 1, on, true, yes, 0, off, false, no") in proc.stderr, describe(proc)
    assert "SENT_AHEAD AheadTest None" in proc.stderr, describe(proc)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("rank")], describe(proc)


def _probe_class(seen: list) -> type:
    """A unittest class whose run records, from inside, the test its suite runs next (made per test:
    a module-level class would be collected)."""

    class Probe(unittest.TestCase):
        def run(self, result=None):
            seen.append(ahead.next_in_suite(self))
            return super().run(result)

        @pytest.mark.world
        def test_a(self):
            pass

        def test_b(self):
            pass

        def test_c(self):
            pass

    return Probe


class _FilteringSuite(unittest.TestSuite):
    """Runs its first and last tests only: the entry after the first in its list is not what runs next."""

    def __iter__(self):
        return iter([self._tests[0], self._tests[-1]])


@pytest.mark.e2e
@pytest.mark.parametrize("suite_class", [unittest.TestSuite, _FilteringSuite])
def test_the_next_test_is_read_from_the_suite_only_where_the_suite_runs_its_list(suite_class):
    seen: list = []
    probe = _probe_class(seen)
    tests = [probe("test_a"), probe("test_b"), probe("test_c")]
    suite_class(tests).run(unittest.TestResult())
    if suite_class is unittest.TestSuite:
        assert seen == [tests[1], tests[2], None]  # the last test has no next
    else:
        assert seen == [None, None]
    seen.clear()
    tests[0].run(unittest.TestResult())  # not run by a suite
    assert seen == [None]


@pytest.mark.e2e
def test_the_next_test_of_another_class_is_never_sent_ahead(monkeypatch):
    # A suite's next entry that is a test of another class runs in another world.
    monkeypatch.setattr(ahead, "_pytest_next", None)
    seen: list = []
    first, second = _probe_class(seen), _probe_class(seen)
    nexts: list = []

    class Asking(first):
        send_ahead = True

        def run(self, result=None):
            nexts.append(ahead.next_test(self))
            return unittest.TestCase.run(self, result)

    unittest.TestSuite([Asking("test_a"), Asking("test_b"), second("test_a")]).run(unittest.TestResult())
    assert nexts == ["test_b", None]
