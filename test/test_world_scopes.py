"""World scopes: classes of one module (or session) with the same settings share one world
(continuous_test/controller/world.py's registry, ``world_scope``, ``CONTINUOUS_TEST_WORLD_SCOPE``)."""
from __future__ import annotations

import collections
import json
from pathlib import Path

import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts

from continuous_test import config
from continuous_test.errors import ConfigError

SCENARIO = "test_world_scopes.py"
SHARING = ("A", "B", "E")
OWN = ("C_OwnInit", "D_OtherTimeout", "F_Plain")


def _pids(out: Path) -> dict:
    """class -> {rank: {pids}}."""
    found: dict = collections.defaultdict(lambda: collections.defaultdict(set))
    for line in (out / "pids").read_text().splitlines():
        cls, _test, rank, pid = line.split()
        found[cls][int(rank)].add(int(pid))
    return found


def _check(out: Path) -> None:
    pids = _pids(out)
    assert sorted(pids) == sorted(SHARING + OWN), dict(pids)
    for rank in (0, 1):
        shared = set().union(*(pids[c][rank] for c in SHARING))
        assert len(shared) == 1, dict(pids)  # A, B and E: one world, kept while C and D ran in theirs
        own = [pids[c][rank] for c in OWN]
        assert all(len(p) == 1 for p in own) and len(set().union(*own)) == 3 and not set().union(*own) & shared
    lines = (out / "class").read_text().split("\n")
    events = collections.Counter(" ".join(line.split()[:2]) for line in lines if line)
    assert events == {f"{what} {c}": 1 for c in SHARING + OWN for what in ("setup", "teardown")}, events


@pytest.mark.world
@pytest.mark.parametrize("runner", ["python", "pytest"])
def test_classes_of_a_module_share_one_world_until_the_last_of_them_ends(runner, tmp_path):
    env = {"SCOPE_DIR": str(tmp_path), "CONTINUOUS_TEST_BISECT": "off"}
    report = tmp_path / "report.json"
    if runner == "python":
        proc = helpers.python(SCENARIO, "-v", env={**env, "CONTINUOUS_TEST_REPORT": str(report)})
        assert unittest_counts(proc.stderr) == {"ran": 7}, describe(proc)
    else:
        proc = helpers.pytest(SCENARIO, "-vv", f"--ct-report={report}", env=env)
        assert pytest_counts(proc.stdout) == {"passed": 7}, describe(proc)
    _check(tmp_path)
    out = proc.stdout + proc.stderr
    assert "C_OwnInit keeps a world of its own (world_scope = 'module'): its _init_pg differs from A's" in out
    assert "D_OtherTimeout keeps a world of its own (world_scope = 'module'): its process-group timeout" in out
    worlds = {w["id"]: w for w in json.loads(report.read_text())["worlds"]}
    assert sorted(worlds) == ["A", "C_OwnInit", "D_OtherTimeout", "F_Plain"], sorted(worlds)
    assert all(len(w["starts"]) == 1 for w in worlds.values()), worlds  # one start for A, B and E
    shared, plain = worlds["A"], worlds["F_Plain"]
    # Up while D's world ran, stopped after E (its last class), before F's world started.
    assert worlds["D_OtherTimeout"]["stopped"] < shared["stopped"] <= plain["starts"][0]["time"], worlds


@pytest.mark.world
@pytest.mark.parametrize("how", ["variable", "option", "ini", "unset"])
def test_the_environment_or_pytest_sets_the_scope_of_classes_that_do_not(how, tmp_path):
    env = {"SCOPE_DIR": str(tmp_path), "SCOPE_ATTR": ""}
    if how == "variable":
        proc = helpers.python(SCENARIO, env={**env, "CONTINUOUS_TEST_WORLD_SCOPE": "session"})
        assert unittest_counts(proc.stderr) == {"ran": 7}, describe(proc)
    else:
        args = {"option": ["--ct-world-scope=session"], "ini": ["-o", "ct_world_scope=module"], "unset": []}[how]
        proc = helpers.pytest(SCENARIO, *args, env=env)
        assert pytest_counts(proc.stdout) == {"passed": 7}, describe(proc)
    if how == "unset":  # a world per class
        assert len(set().union(*(_pids(tmp_path)[c][0] for c in SHARING))) == 3
    else:
        _check(tmp_path)


@pytest.mark.world
def test_a_failure_is_bisected_over_the_tests_of_every_class_of_its_world(tmp_path):
    proc = helpers.python(SCENARIO, env={"SCOPE_DIR": str(tmp_path), "SCOPE_POLLUTE": "1", **helpers.BISECT_ON})
    assert unittest_counts(proc.stderr) == {"ran": 7, "failures": 1}, describe(proc)
    assert "test_b1 fails only after test_a2; passes alone" in proc.stderr, describe(proc)


@pytest.mark.e2e
def test_under_xdist_each_worker_shares_a_world_between_the_classes_it_runs_in_a_row(tmp_path):
    # A worker knows only its next item: its world stops when that is of a class that does not share it.
    proc = helpers.pytest(SCENARIO, "-n", "2", "--dist", "loadfile", env={"SCOPE_DIR": str(tmp_path)})
    assert pytest_counts(proc.stdout) == {"passed": 7}, describe(proc)
    pids = _pids(tmp_path)
    for rank in (0, 1):  # A and B, run in a row, share; E, after C and D, starts the module's world again
        assert pids["A"][rank] == pids["B"][rank] and pids["E"][rank] != pids["A"][rank], dict(pids)


@pytest.mark.world
def test_a_bad_world_scope_fails_the_classes_tests_naming_it(tmp_path):
    proc = helpers.python(SCENARIO, env={"SCOPE_DIR": str(tmp_path), "SCOPE_BAD": "1"})
    assert unittest_counts(proc.stderr) == {"ran": 8, "errors": 1}, describe(proc)
    assert "BadScope.world_scope is 'package': expected one of class, module, session" in proc.stderr


def test_world_scope_precedence_and_errors():
    class Unset:
        pass

    class Module:
        world_scope = "Module"

    assert config.world_scope(Unset, env={}) == "class"
    assert config.world_scope(Unset, env={"CONTINUOUS_TEST_WORLD_SCOPE": "session"}) == "session"
    assert config.world_scope(Module, env={"CONTINUOUS_TEST_WORLD_SCOPE": "session"}) == "module"
    with pytest.raises(ConfigError, match="the CONTINUOUS_TEST_WORLD_SCOPE environment variable is 'x'"):
        config.world_scope(Unset, env={"CONTINUOUS_TEST_WORLD_SCOPE": "x"})
    from continuous_test import distributed

    with pytest.raises(ConfigError, match=r"@distributed\(world_scope=...\) is 'y'"):
        distributed(world_scope="y")


def test_classes_that_may_share_a_world_are_one_shard_unit():
    from continuous_test.session.shard import world_of

    class One:
        world_scope = "module"

    class Two:
        world_scope = "module"

    class Everywhere:
        world_scope = "session"

    class Own:
        pass

    assert world_of("a.py", One, "test_x") == world_of("a.py", Two, "test_y") != world_of("b.py", One, "test_x")
    assert world_of("a.py", Everywhere, "test_x") == world_of("b.py", Everywhere, "test_y")
    assert world_of("a.py", Own, "test_x") != world_of("a.py", One, "test_x")


@pytest.mark.world
@pytest.mark.parametrize("scope", ["session", None])
def test_distributed_functions_of_two_files_share_a_session_world(scope, tmp_path):
    log = tmp_path / "pids"
    env = {"PID_LOG": str(log), "SCOPED_FUNCTIONS": scope or ""}
    proc = helpers.pytest("test_scoped_functions_a.py", "test_scoped_functions_b.py", env=env)
    assert pytest_counts(proc.stdout) == {"passed": 2}, describe(proc)
    worlds = {line.split(" ", 1)[1] for line in log.read_text().splitlines()}
    assert len(worlds) == (1 if scope else 2), worlds
