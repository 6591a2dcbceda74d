"""Tests of a shared-world class that run in a world of their own (continuous_test/fresh_worlds.py), the
per-test shared_temp_dir, and a shared world that stays sound for torch-style suites (subgroups released
only once every rank ended the test; a failed call makes the default group again)."""
from __future__ import annotations

import collections
import json
import os
import sys
from os import _exit
from pathlib import Path

import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts

from continuous_test import changes_its_world, expect_exit, fresh_world
from continuous_test.errors import ConfigError
from continuous_test.fresh_worlds import either, wanted
from continuous_test.wire.env import ENV_LEAKS

SCENARIO = "test_fresh_worlds.py"
SHARED = ("test_a_shared", "test_d_shared", "test_f_shared")
OWN = ("test_b_decorated_destroys_the_group", "test_c_by_pattern", "test_e_by_rule")
BAD = "BadFreshWorldTest.fresh_world_tests must be test names or fnmatch patterns"


def _pids(out: Path) -> dict:
    """test -> {rank: pid}, from the scenario's log."""
    found: dict = collections.defaultdict(dict)
    for line in (out / "pids").read_text().splitlines():
        test, rank, pid = line.split()
        found[test][int(rank)] = int(pid)
    return found


def _check_worlds(out: Path) -> None:
    pids = _pids(out)
    assert sorted(pids) == sorted(SHARED + OWN), dict(pids)
    for rank in (0, 1):
        shared = {pids[test][rank] for test in SHARED}
        assert len(shared) == 1, dict(pids)  # one shared world, kept across the tests of their own
        own = [pids[test][rank] for test in OWN]
        assert len(set(own)) == len(OWN) and not set(own) & shared, dict(pids)  # a world each


def _check_dirs(out: Path) -> None:
    paths = collections.defaultdict(set)
    for line in (out / "dirs").read_text().splitlines():
        test, _, path = line.split()
        paths[test].add(path)
    assert sorted(paths) == ["test_a_dir", "test_b_dir"], dict(paths)
    assert all(len(p) == 1 for p in paths.values()), dict(paths)  # the same directory on every rank
    assert paths["test_a_dir"] != paths["test_b_dir"]
    # test_a_dir's directory, looked for by each rank two tests later, in the world that made it:
    # removed once every rank reported test_a, not only when its world stopped.
    gone = sorted(line.split() for line in (out / "gone").read_text().splitlines())
    (made,) = paths["test_a_dir"]
    assert gone == [["0", made, "False", "True"], ["1", made, "False", "True"]], gone


@pytest.mark.e2e
@pytest.mark.parametrize("runner", ["python", "pytest"])
def test_tests_that_change_their_world_get_one_of_their_own_and_the_others_share_one(runner, tmp_path):
    env = {"FRESH_DIR": str(tmp_path), "CONTINUOUS_TEST_BISECT": "off"}
    if runner == "python":
        report = tmp_path / "report.json"
        proc = helpers.python(SCENARIO, env={**env, "CONTINUOUS_TEST_REPORT": str(report)}, real=True)
        assert unittest_counts(proc.stderr) == {"ran": 16, "errors": 1}, describe(proc)
        # The run report puts the worlds of their own on one lane of kind "fresh", 3 starts.
        worlds = {w["id"]: w for w in json.loads(report.read_text())["worlds"]}
        assert worlds["FreshWorldTest"]["kind"] == "shared" and len(worlds["FreshWorldTest"]["starts"]) == 1
        own = worlds["FreshWorldTest (fresh)"]
        assert own["kind"] == "fresh" and len(own["starts"]) == 3, own
    else:
        proc = helpers.pytest(SCENARIO, env=env)
        assert pytest_counts(proc.stdout) == {"passed": 15, "failed": 1}, describe(proc)
    assert BAD in proc.stdout + proc.stderr, describe(proc)
    _check_worlds(tmp_path)
    _check_dirs(tmp_path)


class _Suite:
    """Tests in the styles the rule must read (a torch-style mixin: no base of ours)."""

    def _reinit(self):
        self._really_reinit()

    def _really_reinit(self):
        import torch.distributed as dist

        dist.destroy_process_group()
        dist.init_process_group("gloo")

    def test_plain(self):
        import torch.distributed as dist

        dist.all_reduce(self.t)
        group = dist.new_group()
        dist.destroy_process_group(group)  # a subgroup the test made: fine

    def test_destroys_the_default_group(self):
        import torch.distributed as dist

        dist.destroy_process_group()

    def test_through_helpers(self):
        self._reinit()

    def test_new_port(self):
        os.environ["MASTER_PORT"] = "29501"

    def test_deletes_the_port(self):
        del os.environ["MASTER_PORT"]

    def test_deletes_another_variable(self):
        del os.environ["NCCL_DEBUG"]

    def test_other_variable(self):
        os.environ["NCCL_DEBUG"] = "INFO"

    def test_exits(self):
        sys.exit(3)

    @expect_exit(code=3)
    def test_declared_exit(self):
        pass

    def test_recursive(self):
        self.test_recursive()

    def test_raises_system_exit(self):
        raise SystemExit(3)

    def test_raises_another_error(self):
        raise ValueError("not an exit")

    def test_exits_by_an_imported_name(self):
        _exit(0)

    def test_exits_by_a_local_alias(self):
        from os import abort as stop

        stop()

    def test_destroys_the_default_group_named_none(self):
        import torch.distributed as dist

        dist.destroy_process_group(group=None)

    def test_updates_the_port(self):
        os.environ.update(MASTER_PORT="29501")

    def test_updates_the_port_from_a_dict(self):
        os.environ.update({"MASTER_ADDR": "127.0.0.1"})

    def test_updates_another_variable(self):
        os.environ.update(NCCL_DEBUG="INFO")


def test_the_rule_reads_the_test_and_its_helpers():
    picked = sorted(name for name in dir(_Suite) if name.startswith("test") and changes_its_world(_Suite, name))
    assert picked == ["test_declared_exit", "test_deletes_the_port", "test_destroys_the_default_group",
                      "test_destroys_the_default_group_named_none", "test_exits", "test_exits_by_a_local_alias",
                      "test_exits_by_an_imported_name", "test_new_port", "test_raises_system_exit",
                      "test_through_helpers", "test_updates_the_port", "test_updates_the_port_from_a_dict"]


def test_decorator_names_patterns_dicts_and_rules_choose_tests():
    class Chosen(_Suite):
        fresh_world_tests = either({"test_plain": 300}, "test_other_*")

        @fresh_world
        def test_decorated(self):
            pass

    assert wanted(Chosen, "test_plain") and wanted(Chosen, "test_other_variable")
    assert wanted(Chosen, "test_decorated") and wanted(Chosen, "test_decorated[ws2]")
    assert not wanted(Chosen, "test_exits")
    assert not wanted(_Suite, "test_exits")  # no choice made: the rule applies only where chosen
    # A sized test (test_x[ws2]) is chosen by its unsized name, as a name, a pattern or a rule sees it.
    assert wanted(Chosen, "test_plain[ws2]") and wanted(Chosen, "test_other_variable[ws1]")
    assert not wanted(Chosen, "test_exits[ws2]")

    class Ruled(_Suite):
        fresh_world_tests = changes_its_world

    assert wanted(Ruled, "test_exits[ws2]") and not wanted(Ruled, "test_plain[ws2]")

    class Bad(_Suite):
        fresh_world_tests = 42

    with pytest.raises(ConfigError, match=r"Bad.fresh_world_tests must be test names"):
        wanted(Bad, "test_plain")

    class OneShot(_Suite):  # read once, it would choose test_plain for the first test asked about only
        fresh_world_tests = (name for name in ["test_plain"])

    with pytest.raises(ConfigError, match=r"OneShot.fresh_world_tests is an iterator .* give a list, set or tuple"):
        wanted(OneShot, "test_plain")


def test_a_world_of_its_own_has_no_leak_check_even_under_the_fail_policy(monkeypatch):
    # Nothing a test leaves in a world of its own reaches another test: the test's plan says
    # CONTINUOUS_TEST_LEAKS=fail, what its world runs says off (the ranks take no snapshot).
    # (The scenario's FreshWorldTest shows it on real ranks, under its class's policy.)
    from continuous_test import config
    from continuous_test.controller import dispatch, run_log, world
    from continuous_test.verdict.merge import Status, Verdict

    class OwnWorld:  # the world dispatch starts for the one test, never started here
        def __init__(self, cls, settings):
            self.cls, self.world_size, self.ran = cls, settings.world_size, []

        def start(self):
            pass

        def run_test(self, plan, meanwhile=None):
            self.ran.append(plan)
            return Verdict(Status.PASS)

        def stop(self):
            return []

    started: list = []
    monkeypatch.setattr(world, "World", lambda cls, settings: started.append(OwnWorld(cls, settings)) or started[-1])
    monkeypatch.setattr(config, "resolve", lambda cls, size=None: config.ClassSettings(
        cls.__qualname__, 2, "cpu", "gloo", 1.0, 10.0, 10.0))
    monkeypatch.setattr(run_log, "_LOG", run_log.RunLog())
    monkeypatch.setenv(ENV_LEAKS, "fail")

    class Own(_Suite):
        fresh_world_tests = "test_plain"

    planned = dispatch.plan(Own, "test_plain", "Own.test_plain")
    assert planned.leak_policy == "fail" and wanted(Own, "test_plain")
    assert dispatch._run_in_a_world_of_its_own(Own, planned).status is Status.PASS
    assert [[(p.method, p.leak_policy) for p in w.ran] for w in started] == [[("test_plain", "off")]]


def test_a_next_test_whose_setting_is_bad_gets_no_spares_and_leaves_this_test_alone(monkeypatch):
    # Spares are forked for the runner's next test when it wants a world of its own of the
    # same size; a bad setting of that test is its own error, raised when it runs, not here.
    from continuous_test import config
    from continuous_test.controller import dispatch

    class Own(_Suite):
        fresh_world_tests = "test_plain"

    monkeypatch.setattr(config, "resolve", lambda cls, size=None: config.ClassSettings(
        cls.__qualname__, 2, "cpu", "gloo", 1.0, 10.0, 10.0))
    assert dispatch._same_sized_own_world(Own, "test_plain", 2)
    assert not dispatch._same_sized_own_world(Own, "test_plain", 3)
    assert not dispatch._same_sized_own_world(Own, "test_through_helpers", 2)  # it shares the class's world

    def bad(cls, size=None):
        raise config.ConfigError("Own.world_size = 0: make it 1 or more")

    monkeypatch.setattr(config, "resolve", bad)
    assert not dispatch._same_sized_own_world(Own, "test_plain", 2)


# -- fresh groups in warm ranks (@fresh_group, fresh_group_tests) ----------------------------------------------


def _groups(out: Path) -> dict:
    """test -> {rank: (pid, sequence number at its start, groups, rendezvous file)}, from the scenario's log."""
    found: dict = collections.defaultdict(dict)
    for line in (out / "groups").read_text().splitlines():
        test, rank, pid, seq, groups, rendezvous = line.split()
        found[test][int(rank)] = (int(pid), int(seq), int(groups), rendezvous)
    return found


@pytest.mark.world
@pytest.mark.parametrize("runner", ["python", "pytest"])
def test_a_fresh_group_test_gets_a_new_default_group_in_the_same_ranks(runner, tmp_path):
    env = {"FRESH_DIR": str(tmp_path), "CONTINUOUS_TEST_BISECT": "off"}
    if runner == "python":
        proc = helpers.python("test_fresh_groups.py", env=env)
        assert unittest_counts(proc.stderr) == {"ran": 5, "errors": 1}, describe(proc)
    else:
        proc = helpers.pytest("test_fresh_groups.py", env=env)
        assert pytest_counts(proc.stdout) == {"passed": 4, "failed": 1}, describe(proc)
    assert "BadFreshGroupTest.fresh_group_tests must be test names or fnmatch patterns" in proc.stdout + proc.stderr
    found = _groups(tmp_path)
    for rank in (0, 1):
        a, b, c, d = (found[t][rank] for t in ("test_a_makes_a_subgroup", "test_b_decorated", "test_c_by_pattern",
                                               "test_d_shared"))
        assert len({a[0], b[0], c[0], d[0]}) == 1, dict(found)  # the same ranks throughout
        assert (b[1], b[2]) == (0, 1) and (c[1], c[2]) == (0, 1), dict(found)  # sequence 0, the default group only
        assert d[1] > 0, dict(found)  # a plain test goes on with the group before it
        assert len({a[3], b[3], c[3]}) == 3 and d[3] == c[3], dict(found)  # a rendezvous of its own each


def test_fresh_group_is_chosen_like_fresh_world():
    from continuous_test import fresh_group
    from continuous_test.fresh_worlds import group_wanted

    class Suite:
        fresh_group_tests = ["test_p_*"]

        @fresh_group
        def test_decorated(self):
            pass

        def test_p_one(self):
            pass

        def test_plain(self):
            pass

    assert group_wanted(Suite, "test_decorated") and group_wanted(Suite, "test_p_one")
    assert not group_wanted(Suite, "test_plain") and not wanted(Suite, "test_decorated")
    Suite.fresh_group_tests = lambda cls, name: name == "test_plain"  # type: ignore[assignment]
    assert group_wanted(Suite, "test_plain")
    Suite.fresh_group_tests = 3  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="Suite.fresh_group_tests must be"):
        group_wanted(Suite, "test_plain")


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
