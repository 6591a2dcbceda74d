"""Rerun and bisect, on real worlds: order-dependent, flaky and plain failures are told apart."""
from __future__ import annotations

import tempfile

import helpers
import pytest
from helpers import describe, unittest_counts

from continuous_test import MultiProcContinuousTest, config
from continuous_test.controller import bisect
from continuous_test.controller.world import TestPlan
from continuous_test.wire.env import ENV_BISECT


def run_order(*args: str, **env: str):
    with tempfile.TemporaryDirectory() as flaky_dir:
        return helpers.python("test_order.py", *args, env={"FLAKY_DIR": flaky_dir, **helpers.BISECT_ON, **env})


@pytest.mark.world
def test_failures_are_told_apart_and_still_fail():
    proc = run_order(*[arg for letter in "abcdefg" for arg in ("-k", f"test_{letter}")])
    # Verdicts stay honest: the three failures are still failures.
    assert unittest_counts(proc.stderr) == {"ran": 7, "failures": 3}, describe(proc)
    others = bisect.OTHERS.format(n=3)
    assert bisect.ORDER_DEPENDENT.format(test="test_e_victim", culprits="test_a_poisons", others=others) in proc.stderr
    # test_f runs first in the world restarted after test_e failed.
    assert bisect.FLAKY_FIRST.format(test="test_f_first_run") in proc.stderr, describe(proc)
    assert bisect.FAILS_ALONE.format(test="test_g_always") in proc.stderr, describe(proc)


@pytest.mark.world
def test_a_failure_that_does_not_come_back_after_the_same_tests_is_flaky():
    proc = run_order("-k", "test_b", "-k", "test_c", "-k", "test_f")
    assert unittest_counts(proc.stderr) == {"ran": 3, "failures": 1}, describe(proc)
    assert bisect.FLAKY.format(test="test_f_first_run", n=2) in proc.stderr, describe(proc)


@pytest.mark.world
def test_a_failure_that_needs_two_earlier_tests_names_both():
    proc = run_order("-k", "test_h")
    assert unittest_counts(proc.stderr) == {"ran": 5, "failures": 1}, describe(proc)
    others = bisect.OTHERS.format(n=2)
    assert bisect.ORDER_DEPENDENT.format(test="test_h5_needs_one_unset", culprits="test_h1_sets_x, test_h3_sets_y",
                                         others=others) in proc.stderr, describe(proc)


@pytest.mark.world
def test_off_and_budget():
    proc = run_order("-k", "test_a", "-k", "test_e", **{ENV_BISECT: "off"})
    assert unittest_counts(proc.stderr) == {"ran": 2, "failures": 1}, describe(proc)
    assert "rerun and bisect" not in proc.stderr
    proc = run_order("-k", "test_a", "-k", "test_e", **{ENV_BISECT: "0.001"})
    # A rerun takes at least as long as the test took: with 1 ms of budget, none is made.
    assert "not rerun in a fresh world: it ran" in proc.stderr, describe(proc)
    assert "rerun and bisect (" not in proc.stderr, describe(proc)


def test_a_timed_out_test_is_not_rerun():
    from continuous_test.errors import RankTimeoutError
    from continuous_test.verdict.merge import Status, Verdict

    class FakeWorld:  # never started: a timed-out test must not reach a fresh world
        cls, world_size, starts, history = None, 2, 1, []

    verdict = Verdict(Status.FAIL, error=RankTimeoutError("T.test_x exceeded its time limit"), restart_world=True)
    bisect.after_test(FakeWorld(), TestPlan("test_x", "T.test_x", 1.0, "restore"), verdict)
    assert helpers.notes(verdict.error) == [bisect.NOT_RERUN]


class TwoRanks(MultiProcContinuousTest):
    """A world that test_a_world_started_again_starts_a_new_history never starts."""

    world_size = 2


def test_a_world_started_again_starts_a_new_history(monkeypatch):
    # The ranks of a restarted world ran none of the tests before the restart (a
    # death between tests, a test sent ahead that the runner did not run): a
    # bisect must not replay them as the failing test's predecessors.
    from continuous_test.controller import world as worlds
    from continuous_test.verdict.merge import Status, Verdict

    world = worlds.World(TwoRanks, config.resolve(TwoRanks, None))
    for method in ("test_a", "test_b"):
        bisect.after_test(world, TestPlan(method, f"T.{method}", 1.0, "restore"), Verdict(Status.PASS))
    assert [ran.method for ran in world.history] == ["test_a", "test_b"]

    def no_ranks(*args, **kwargs):
        raise RuntimeError("no ranks in this test")

    monkeypatch.setattr(worlds, "start_ranks", no_ranks)
    with pytest.raises(RuntimeError, match="no ranks"):
        world.start()
    assert world.history == []


def test_bad_budget_names_its_source():
    try:
        config.bisect_budget({ENV_BISECT: "soon"})
    except config.ConfigError as exc:
        assert "'soon' from CONTINUOUS_TEST_BISECT environment variable" in str(exc)
    else:
        raise AssertionError("no ConfigError")


@pytest.mark.world
def test_expected_failures_are_not_rerun():
    proc = helpers.python("test_rerun_limits.py", "ExpectedFailuresTest", env=helpers.BISECT_ON)
    assert unittest_counts(proc.stderr) == {"ran": 5, "expected failures": 4}, describe(proc)
    # No rerun follows, and the world restarts only after the test whose send no peer
    # received (it may be unmatched); those that made no call keep it: 2 starts.
    assert "WORLD_STARTS ExpectedFailuresTest 2" in proc.stderr, describe(proc)
    assert "rerun and bisect" not in proc.stderr, describe(proc)


@pytest.mark.world
def test_a_failure_is_not_rerun_when_the_rerun_would_outlast_the_budget():
    proc = helpers.python("test_rerun_limits.py", "LongFailureTest",
                          env={ENV_BISECT: "1.5", "SLOW_SECONDS": "2"})
    assert unittest_counts(proc.stderr) == {"ran": 1, "failures": 1}, describe(proc)
    assert "not rerun in a fresh world: it ran 2 s" in proc.stderr, describe(proc)
    assert "rerun and bisect (" not in proc.stderr, describe(proc)
    # With the budget to spare, the same failure is rerun.
    proc = helpers.python("test_rerun_limits.py", "LongFailureTest", env={"SLOW_SECONDS": "2", **helpers.BISECT_ON})
    assert bisect.FAILS_ALONE.format(test="test_slow_failure") in proc.stderr, describe(proc)


@pytest.mark.world
def test_a_hang_ended_by_the_process_groups_timeout_is_not_rerun():
    # The budget (120 s) has room for a 2 s rerun, but it would hang as long again.
    proc = helpers.python("test_rerun_limits.py", "PgTimeoutTest", env=helpers.BISECT_ON)
    assert unittest_counts(proc.stderr) == {"ran": 1, "errors": 1}, describe(proc)
    assert "Timed out waiting" in proc.stderr, describe(proc)
    assert bisect.NOT_RERUN_HUNG in proc.stderr, describe(proc)
    assert "rerun and bisect (" not in proc.stderr, describe(proc)


class _FakeReplayer:
    """Stands for bisect's replayer: a sequence fails when it holds every culprit before the failed test."""

    def __init__(self, culprits):
        self.culprits, self.runs, self.found = set(culprits), [], ""

    def fails(self, sequence):
        self.runs.append([ran.method for ran in sequence])
        return self.culprits <= {ran.method for ran in sequence[:-1]} or not self.culprits


def _plans(names, time_limit=1.0):
    return [TestPlan(name, f"T.{name}", time_limit, "restore") for name in names]


@pytest.mark.parametrize("position", range(7))
def test_bisect_finds_one_culprit_wherever_it_stands(position):
    # The scenario files put their culprit first; a halving that drops or shifts an
    # entry of either half shows only when it stands elsewhere.
    history = _plans([f"test_{i}" for i in range(7)])
    culprit = history[position].method
    found = bisect._minimize(_FakeReplayer([culprit]), list(history), _plans(["test_victim"])[0])
    assert [ran.method for ran in found] == [culprit]


@pytest.mark.parametrize("pair", [(0, 8), (3, 4), (1, 6), (7, 8)])
def test_bisect_finds_both_polluters_when_the_failure_needs_two(pair):
    # Halving alone gave up here and named all nine predecessors.
    history = _plans([f"test_{i}" for i in range(9)])
    culprits = [history[i].method for i in pair]
    replayer = _FakeReplayer(culprits)
    found = bisect._minimize(replayer, list(history), _plans(["test_victim"])[0])
    assert [ran.method for ran in found] == culprits
    assert len(replayer.runs) <= 30, replayer.runs  # delta debugging, not every subset


class _FlakyReplayer:
    """A test that fails on every other replay, whatever ran before it."""

    def __init__(self, answers):
        self.answers, self.runs, self.found = list(answers), [], ""

    def fails(self, sequence):
        self.runs.append([ran.method for ran in sequence])
        return self.answers.pop(0)


def test_a_culprit_is_blamed_only_when_every_replay_agrees():
    history = _plans(["test_a", "test_b"])
    victim = _plans(["test_victim"])[0]
    # alone: passes; after both: fails; minimizing: fails after test_a; confirming: passes after test_a.
    replayer = _FlakyReplayer([False, True, True, False, False])
    verdict, polluters, note = bisect._judge(replayer, list(history), victim)
    assert (verdict, polluters) == ("flaky", [])  # the words for machines (test_run_report.py)
    assert note == bisect.FLAKY_DISAGREE.format(test="test_victim", culprits="test_a", after=1, after_runs=2,
                                                alone=0, alone_runs=2), note
    # Every replay agrees: blamed, after CONFIRMATIONS more replays of each kind.
    replayer = _FakeReplayer(["test_a"])
    verdict, polluters, note = bisect._judge(replayer, list(history), victim)
    assert (verdict, polluters) == ("order-dependent", ["T.test_a"])
    assert note == bisect.ORDER_DEPENDENT.format(test="test_victim", culprits="test_a",
                                                 others=bisect.OTHERS.format(n=1))
    assert replayer.runs.count(["test_a", "test_victim"]) == 1 + bisect.CONFIRMATIONS
    assert replayer.runs.count(["test_victim"]) == 1 + bisect.CONFIRMATIONS


def test_each_replay_runs_in_a_world_of_its_own(monkeypatch):
    started = []

    class FakeWorld:
        world_size = 2

        def __init__(self, cls, settings):
            started.append(self)

        def start(self):
            pass

        def run_test(self, plan):
            from continuous_test.verdict.merge import Status, Verdict

            return Verdict(Status.FAIL if plan.method == "test_victim" else Status.PASS)

        def stop(self):
            pass

    monkeypatch.setattr(bisect, "World", FakeWorld)
    bisect.reset_budget()
    replay = bisect._Replayer(object, None, budget=60.0)
    victim = _plans(["test_victim"])[0]
    assert replay.fails([victim]) and replay.fails(_plans(["test_a"]) + [victim])
    assert len(started) == 2 and started[0] is not started[1] and replay.worlds == 2


class _Clock:
    """bisect's ``time`` on a fake clock: replays take the seconds the test says, whatever the machine's load."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


def _clocked_worlds(clock, seconds, limits):
    """A World whose start and stop take 0.5 s each and whose tests take ``seconds[method]`` (1 s if not named),
    up to the time limit each was sent with (recorded in ``limits``), which ends it as a time-out."""
    from continuous_test.errors import RankTimeoutError
    from continuous_test.verdict.merge import Status, Verdict

    class ClockedWorld:
        world_size = 2
        started = 0

        def __init__(self, cls, settings):
            pass

        def start(self):
            ClockedWorld.started += 1
            clock.now += 0.5

        def run_test(self, plan):
            limits.append(plan.time_limit)
            took = seconds.get(plan.method, 1.0)
            if took > plan.time_limit:
                clock.now += plan.time_limit
                return Verdict(Status.FAIL, error=RankTimeoutError(f"{plan.test_id} exceeded its time limit"),
                               restart_world=True)
            clock.now += took
            return Verdict(Status.FAIL if plan.method == "test_victim" else Status.PASS)

        def stop(self):
            clock.now += 0.5

    return ClockedWorld


def test_replay_time_is_charged_to_the_bisect_budget(monkeypatch):
    clock, limits = _Clock(), []
    worlds = _clocked_worlds(clock, {}, limits)
    monkeypatch.setattr(bisect, "time", clock)
    monkeypatch.setattr(bisect, "World", worlds)
    monkeypatch.setattr(bisect, "_spent", 0.0)
    sequence = _plans(["test_a", "test_victim"], 30.0)
    first = bisect._Replayer(object, None, budget=6.0)
    assert first.fails(sequence)  # start 0.5 + two tests 2.0 + stop 0.5
    assert (bisect._spent, first.seconds) == (3.0, 3.0)
    # The budget is per process: the next failure's diagnosis gets what is left of it.
    second = bisect._Replayer(object, None, budget=6.0)
    assert second.fails(sequence) and (bisect._spent, second.seconds) == (6.0, 3.0)
    with pytest.raises(bisect._Stop, match=r"time budget is spent \(CONTINUOUS_TEST_BISECT=6 seconds"):
        second.fails(sequence)
    assert worlds.started == 2, "a replay started a world with no budget left"


def test_a_replays_time_limit_is_cut_to_the_budget_left(monkeypatch):
    clock, limits = _Clock(), []
    monkeypatch.setattr(bisect, "time", clock)
    monkeypatch.setattr(bisect, "World", _clocked_worlds(clock, {"test_slow": 5.0}, limits))
    monkeypatch.setattr(bisect, "_spent", 6.0)  # of 10: 4 s left
    replay = bisect._Replayer(object, None, budget=10.0)
    # Each test of the replay gets the smaller of its own limit (30 s) and what is left when it is sent.
    assert replay.fails(_plans(["test_a", "test_victim"], 30.0)) and limits == [3.5, 2.5]
    # Ended by the cut limit: the budget is spent, which says nothing about the test (no "fails" answer).
    limits.clear()
    monkeypatch.setattr(bisect, "_spent", 6.0)
    with pytest.raises(bisect._Stop, match="time budget is spent"):
        replay.fails(_plans(["test_slow", "test_victim"], 30.0))
    assert limits == [3.5]


@pytest.mark.world
def test_a_fifty_test_history_is_narrowed_to_its_one_culprit():
    proc = helpers.python("test_bisect_long.py", env=helpers.BISECT_ON)
    assert unittest_counts(proc.stderr) == {"ran": 51, "failures": 1}, describe(proc)
    others = bisect.OTHERS.format(n=49)
    assert bisect.ORDER_DEPENDENT.format(test="test_zz_victim", culprits="test_31", others=others) in proc.stderr, \
        describe(proc)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
