"""Shards (whole worlds, balanced on recorded durations) and repeats, under pytest and unittest.

Units: the assignment, the durations file, the shard settings, the repeat diagnosis.
Scenarios (test/scenarios/test_shard.py): the union of the shards is the selection,
no world is in two shards, durations are recorded with the world start apart,
xdist's loadscope inside a shard, repeats as real items and results.  The Slurm job
array is in test_slurm.py.
"""
from __future__ import annotations

import html
import json
import os
import random
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter

import helpers
import pytest
from helpers import describe, verbose_name

from continuous_test import config
from continuous_test.session import repeat, shard
from continuous_test.errors import ConfigError
from continuous_test.wire.env import ENV_DURATIONS, ENV_REPEAT, ENV_REPEAT_FRESH, ENV_SHARD

SCENARIO = "test_shard.py"
NODE = "test/scenarios/test_shard.py::"


# -- settings ----------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0/4", "5/4", "x", "", "2/0", "-1/4", "1/4/2", "1/1_0", "²/4", "1/²",
                                   "1/" + "9" * 40])
def test_a_bad_shard_names_its_setting(value):
    with pytest.raises(ConfigError, match=re.escape(f"Invalid shard {value!r} from the --ct-shard option")):
        shard.parse_shard(value, "the --ct-shard option")
    with pytest.raises(ConfigError, match=ENV_SHARD):
        shard.shard_from_env({ENV_SHARD: value or " x"})


SLURM_ARRAY = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_COUNT": "4",
               "SLURM_ARRAY_JOB_ID": "100"}


def test_the_shard_comes_from_the_variable_and_from_a_slurm_job_array_only_when_asked():
    array = SLURM_ARRAY
    assert shard.shard_from_env({}) is None
    assert shard.shard_from_env(array) is None, "an array task runs its whole file unless asked to shard"
    asked = shard.shard_from_env({**array, ENV_SHARD: "slurm"})
    assert (asked.index, asked.count) == (3, 4) and asked.source.startswith("Slurm job array, asked by "), asked
    assert shard.parse_shard("slurm", "the --ct-shard option", array).index == 3
    assert shard.shard_from_env({**array, ENV_SHARD: "1/2"}) == shard.Shard(1, 2, f"{ENV_SHARD} environment variable")
    with pytest.raises(ConfigError, match="not a task of a Slurm job array .SLURM_ARRAY_TASK_MIN not set"):
        shard.shard_from_env({**{k: v for k, v in array.items() if k != "SLURM_ARRAY_TASK_MIN"}, ENV_SHARD: "slurm"})
    with pytest.raises(ConfigError, match="Invalid shard 'slurm' from the --ct-shard option"):
        shard.parse_shard("slurm", "the --ct-shard option", {})
    with pytest.raises(ConfigError, match="Slurm job array"):
        shard.shard_from_env({**array, "SLURM_ARRAY_TASK_ID": "10", ENV_SHARD: "slurm"})  # 6/4


@pytest.mark.e2e
@pytest.mark.parametrize("runner", ["python", "pytest"])
def test_inside_a_slurm_array_task_a_file_runs_whole_unless_asked_to_shard(runner, tmp_path):
    # One test file per array task: every test of it runs.  CONTINUOUS_TEST_SHARD=slurm (or
    # --ct-shard=slurm) asks for the task's shard of it.
    def run(**extra):
        env = {"NO_FUNCTIONS": "1", ENV_DURATIONS: str(tmp_path / "none.json"), **SLURM_ARRAY, **extra}
        proc = helpers.python(JOBS, env=env) if runner == "python" else helpers.pytest(JOBS, "-s", env=env)
        assert proc.returncode == 0, describe(proc)
        return proc

    whole = run()
    assert len(ran(whole)) == 18 and "shard" not in whole.stdout + whole.stderr, describe(whole)
    asked = run(**{ENV_SHARD: "slurm"})
    assert 0 < len(ran(asked)) < 18, describe(asked)
    assert "shard 3/4 (Slurm job array, asked by CONTINUOUS_TEST_SHARD environment variable: " \
        "SLURM_ARRAY_TASK_ID=7" in asked.stdout + asked.stderr, describe(asked)


def test_repeat_settings():
    assert config.repeat_count({}) == 1 and config.repeat_count({ENV_REPEAT: "3"}) == 3
    assert not config.repeat_fresh({}) and config.repeat_fresh({ENV_REPEAT_FRESH: "1"})
    for bad in ("0", "1_0", "²", "٣", "9" * 40):  # underscores and Unicode digits are no count
        with pytest.raises(ConfigError, match=f"Invalid repeat count {re.escape(repr(bad))} from {ENV_REPEAT}"):
            config.repeat_count({ENV_REPEAT: bad})


def test_a_huge_shard_count_is_a_usage_error_not_a_memory_error():
    with pytest.raises(ConfigError, match=f"expected at most {shard.MAX_SHARDS} shards"):
        shard.parse_shard(f"1/{10 ** 12}", "the --ct-shard option")
    assert shard.parse_shard(f"1/{shard.MAX_SHARDS}", "x").count == shard.MAX_SHARDS


def test_a_durations_file_nested_too_deeply_or_not_a_file_is_named(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ConfigError, match=f"Invalid durations file {re.escape(str(deep))}: nested too deeply"):
        shard.Durations.load(str(deep))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # opened for reading, it would wait for a writer for ever
    with pytest.raises(ConfigError, match=f"Invalid durations file {re.escape(str(fifo))}: not a regular file"):
        shard.Durations.load(str(fifo))


# -- assignment --------------------------------------------------------------------

def skewed(count: int, seed: int) -> dict:
    rng = random.Random(seed)
    return {f"test_{i}.py::Class{i}": rng.paretovariate(1.5) for i in range(count)}


def test_shards_are_balanced_and_the_same_whatever_the_order_at_hand():
    weights = skewed(40, 1)
    placed = shard.assign(weights, 4)
    loads = [sum(w for k, w in weights.items() if placed[k] == i) for i in range(4)]
    assert max(loads) <= 1.15 * sum(loads) / 4, loads
    backwards = dict(reversed(list(weights.items())))
    assert shard.assign(backwards, 4) == placed
    assert sorted(placed) == sorted(weights)


def test_one_heavy_world_gets_a_shard_of_its_own():
    weights = {"big": 100.0, **{f"small{i}": 1.0 for i in range(9)}}
    placed = shard.assign(weights, 3)
    assert [k for k, i in placed.items() if i == placed["big"]] == ["big"]


def test_split_keeps_worlds_whole_and_loses_nothing():
    tests = [(f"C{i % 7}", f"test_{i}") for i in range(50)]
    durations = shard.Durations({f"f.py::C1::test_{i}": 5.0 for i in range(50)}, {"f.py::C2": 30.0})
    cut = shard.split(tests, lambda t: f"f.py::{t[0]}", lambda t: f"f.py::{t[0]}::{t[1]}", lambda t: True, 3, durations)
    shards = [cut.tests(i) for i in (1, 2, 3)]
    assert sorted(t for s in shards for t in s) == sorted(tests)
    owners = {cls: {i for i, s in enumerate(shards) for c, _ in s if c == cls} for cls, _ in tests}
    assert all(len(found) == 1 for found in owners.values()), owners


def test_unknown_tests_count_as_the_median_and_worlds_as_the_median_start():
    durations = shard.Durations({"a": 1.0, "b": 3.0, "c": 10.0}, {"w1": 2.0, "w2": 4.0})
    assert durations.test_seconds("new") == 3.0 and durations.world_seconds("new") == 3.0
    assert shard.Durations().test_seconds("x") == shard.DEFAULT_TEST_SECONDS
    cut = shard.split(["new1", "new2"], lambda t: "w-new", str, lambda t: True, 2, durations)
    assert cut.seconds() in ([3.0 + 3.0 + 3.0, 0.0], [0.0, 9.0])


def test_the_durations_file_is_plain_json_and_a_bad_one_is_named(tmp_path):
    path = tmp_path / "d.json"
    shard.Durations({"t": 1.5}, {"w": 2.0}).save(str(path))
    assert json.loads(path.read_text()) == {"version": 1, "tests": {"t": 1.5}, "worlds": {"w": 2.0}}
    assert shard.Durations.load(str(path)).tests == {"t": 1.5}
    assert path.stat().st_mode & 0o777 == 0o666 & ~current_umask(), "a file to commit, not a private one"
    assert shard.Durations.load(str(tmp_path / "missing.json")).tests == {}
    path.write_text('{"version": 1, "tests": {"t": "slow"}}')
    with pytest.raises(ConfigError, match=f"Invalid durations file {re.escape(str(path))}"):
        shard.Durations.load(str(path))


def test_a_shards_stored_records_wait_for_every_shard_of_its_run(tmp_path):
    path = str(tmp_path / "d.json")
    durations = shard.Durations({"old": 1.0}, {"w": 2.0})
    two = [shard.Shard(i, 2, "test") for i in (1, 2)]
    assert durations.record(shard.Durations({"a": 0.1}), two[1]) == [1]
    durations.save(path)
    loaded = shard.Durations.load(path)
    assert loaded.tests == {"old": 1.0} and loaded.worlds == {"w": 2.0}, "the split reads committed records only"
    assert json.loads(open(path).read())["pending"] == {"count": 2, "shards": {"2": {"tests": {"a": 0.1},
                                                                                       "worlds": {}}}}
    assert loaded.record(shard.Durations({"a": 0.3}), two[1]) == [1], "a job run again replaces its shard's"
    assert loaded.record(shard.Durations({"b": 0.2}, {"w": 3.0}), two[0]) == []
    assert (loaded.tests, loaded.worlds, loaded.pending) == ({"old": 1.0, "a": 0.3, "b": 0.2}, {"w": 3.0}, {})
    loaded.record(shard.Durations({"c": 0.1}), two[0])
    loaded.record(shard.Durations({"d": 0.1}), shard.Shard(1, 3, "test"))
    assert loaded.pending_count == 3 and list(loaded.pending) == [1], "another shard count starts a new run"
    loaded.record(shard.Durations({"e": 0.4}), None)
    assert loaded.tests["e"] == 0.4 and list(loaded.pending) == [1], "no shard: committed at once"
    for pending in ({"count": 2}, {"count": 1, "shards": {}}, {"count": 2, "shards": {"3": {}}},
                    {"count": 2, "shards": {"1": {"tests": {"a": "slow"}}}}):
        open(path, "w").write(json.dumps({"version": 1, "tests": {}, "pending": pending}))
        with pytest.raises(ConfigError, match=f"Invalid durations file {re.escape(path)}"):
            shard.Durations.load(path)


CONFLICTED = """{"version": 1,
<<<<<<< HEAD
 "tests": {"t": 1.5},
=======
 "tests": {"t": 2.5},
>>>>>>> shard-4
 "worlds": {}}
"""


@pytest.mark.parametrize("text", ['{"version": 1, "tests": {"t": 1.', CONFLICTED, ""],
                         ids=["truncated", "merge-conflict", "empty"])
def test_a_durations_file_that_is_not_json_is_a_clear_error_naming_it(tmp_path, text):
    # Read for a shard: the error names the file and says what to do (pytest makes it a usage error).
    path = tmp_path / "d.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        shard.Durations.load(str(path))
    message = str(caught.value)
    assert message.startswith(f"Invalid durations file {path}: ") and "--ct-store-durations" in message, message


def test_storing_over_a_durations_file_that_is_not_json_writes_it_again_from_this_run(tmp_path):
    # Stored at a session's end: an unreadable file is written again from this run alone (pytest_sessionfinish).
    from continuous_test import pytest_plugin

    path = tmp_path / "d.json"
    path.write_text(CONFLICTED)
    sharding = pytest_plugin._Sharding(None, str(path), str(path), 1, False)
    sharding.test_seconds, sharding.world_seconds = {"f.py::C::test_a": 0.25}, {"f.py::C": 1.5}

    class Session:
        exitstatus = pytest.ExitCode.OK

    pytest_plugin._Recorder(sharding).pytest_sessionfinish(Session())  # type: ignore[arg-type]
    assert json.loads(path.read_text()) == {"version": 1, "tests": {"f.py::C::test_a": 0.25},
                                            "worlds": {"f.py::C": 1.5}}


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_bare_store_durations_option_never_swallows_a_path():
    from continuous_test import pytest_plugin

    args = ["--ct-store-durations", "test/", "--ct-shuffle", "-q"]
    pytest_plugin.pytest_load_initial_conftests(None, None, args)  # type: ignore[arg-type]
    assert args == ["--ct-store-durations=", "test/", f"--ct-shuffle={pytest_plugin.SHUFFLE_RANDOM}", "-q"]


def test_world_of_is_the_class_or_the_function_itself():
    class Cls:
        pass

    assert shard.world_of("t.py", Cls, "test_a") == "t.py::" + Cls.__qualname__
    assert shard.world_of("t.py", None, "test_f") == "t.py::test_f"
    assert shard.world_of("t.py", Cls, "test_a", world_size=4).endswith("[ws4]")


@pytest.mark.e2e
def test_the_balance_benchmark_meets_its_target_and_keeps_worlds_whole(tmp_path):
    path = tmp_path / "balance.json"
    proc = helpers.run([sys.executable, str(helpers.ROOT / "benchmarks" / "shard_balance.py"), "--json", str(path)])
    assert proc.returncode == 0, describe(proc)
    results = json.loads(path.read_text())
    for result in [results["project"], *results["generated"].values()]:
        assert result["slowest_over_mean"] <= 1.15 and result["union_is_selection"], result
        assert result["worlds_in_two_shards"] == 0
    assert " met " in proc.stdout and "MISSED" not in proc.stdout, describe(proc)


# -- repeat diagnosis ------------------------------------------------------------------

@pytest.mark.parametrize("shared, fresh, said", [
    ([True] * 3, [True] * 3, repeat.PASSED_ALL),
    ([False] * 3, [False] * 3, repeat.EVERY_RUN),
    ([True, False, True], [True] * 3, repeat.FOLLOWS_WORLD),
    ([False, True, True], [], repeat.FOLLOWS_ORDER_FIRST),
    ([True, False, False], [], repeat.FOLLOWS_ORDER_LATER),
    ([True] * 3, [False] * 3, repeat.FOLLOWS_ORDER_FRESH),
    ([True, False, True], [], "flaky"),
    ([True, False, True], [True, False, True], "in fresh worlds too"),
])
def test_the_diagnosis_says_what_a_failure_follows(shared, fresh, said):
    counts = repeat.RepeatCounts("t", 3, dict(enumerate(shared, 1)), dict(enumerate(fresh, 1)))
    assert said in counts.diagnosis()


def test_a_run_that_failed_in_any_phase_stays_failed():
    # The failing phase is never the last: keeping the last outcome would say passed.
    tally = repeat.RepeatTally()
    run = repeat.RepeatRun("t", repeat.SHARED, 1, 2)
    tally.record(run, True)  # setup
    tally.record(run, False)  # call
    tally.record(run, True)  # teardown
    tally.record(run, None)
    later = repeat.RepeatRun("t", repeat.SHARED, 2, 2)
    tally.record(later, False)  # setup failed, then the rest was skipped
    tally.record(later, None)
    tally.record(later, True)
    fresh = repeat.RepeatRun("t", repeat.FRESH, 1, 2)
    tally.record(fresh, True)
    tally.record(fresh, True)
    assert tally.tests["t"].shared == {1: False, 2: False} and tally.tests["t"].fresh == {1: True}
    assert tally.summary()[1] == f"t: shared world 0/2 passed, fresh worlds 1/1 passed: {repeat.FOLLOWS_WORLD}"


@pytest.mark.parametrize("shared, fresh, said", [
    # fail, pass, fail in the shared world: neither its first run nor every run after it; every fresh run passed.
    ([False, True, False], [True] * 3, repeat.FOLLOWS_WORLD),
    ([False, True, False], [], repeat.FLAKY.format(
        where="in the shared world (add --ct-repeat-fresh to tell the world apart)")),
    ([False, True, False], [True, False, True], repeat.FLAKY.format(where="in fresh worlds too")),
    ([False, True, True], [True] * 3, repeat.FOLLOWS_ORDER_FIRST),
    ([True, False, False], [True] * 3, repeat.FOLLOWS_ORDER_LATER),
])
def test_the_diagnosis_of_a_shared_world_that_went_fail_pass_fail(shared, fresh, said):
    counts = repeat.RepeatCounts("t", 3, dict(enumerate(shared, 1)), dict(enumerate(fresh, 1)))
    assert counts.diagnosis() == said


@pytest.mark.parametrize("shared, restarted_after, fresh, said", [
    # It spoils its own state: each failed run restarts the world, so the run after it passes again.
    ([True, False, True, False], {2, 4}, [], repeat.FOLLOWS_ORDER_LATER),
    ([True, False, True], {2}, [True] * 3, repeat.FOLLOWS_ORDER_LATER),
    # It fails after the tests before it: its failure restarts the world, every later run passes.
    ([False, True, True, True], {1}, [], repeat.FOLLOWS_ORDER_FIRST),
    # A run first in a restarted world that fails too: no place in the order explains it.
    ([True, False, False], {2, 3}, [], "flaky"),
])
def test_the_diagnosis_knows_a_failed_run_restarted_the_world(shared, restarted_after, fresh, said):
    counts = repeat.RepeatCounts("t", len(shared), dict(enumerate(shared, 1)), dict(enumerate(fresh, 1)),
                                 restarted_after)
    assert said in counts.diagnosis()


@pytest.mark.world
@pytest.mark.parametrize("runner", ["pytest", "run_tests"])
def test_a_test_that_spoils_its_own_state_follows_the_order_over_four_runs(runner):
    # Fails whenever its world ran a test before: pass, fail (the world restarts), pass, fail.
    env = {"FLAKY_SECOND_IN_WORLD": "1", "NO_FUNCTIONS": "1", "CONTINUOUS_TEST_BISECT": "off"}
    proc = (helpers.pytest(SCENARIO, "-k", "Flaky", "--ct-repeat=4", env=env) if runner == "pytest" else
            helpers.python(SCENARIO, "Flaky", env={**env, ENV_REPEAT: "4"}))
    assert proc.returncode == 1, describe(proc)
    line = f"Flaky::test_flaky: shared world 2/4 passed: {repeat.FOLLOWS_ORDER_LATER}"
    assert line in proc.stdout + proc.stderr, describe(proc)


# -- a fresh run's world ------------------------------------------------------------------

class FreshRunClass:
    """Stands for a shared-world class whose test is repeated in fresh worlds."""


class _Popen:
    """A ``subprocess.Popen`` as a rank's ``multiprocessing`` process looks to the controller."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.pid = proc, proc.pid

    @property
    def exitcode(self):
        return self.proc.poll()

    def join(self, timeout=None) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


class _NoPipe:
    def close(self) -> None:
        pass


@pytest.mark.e2e
def test_the_world_a_fresh_run_started_is_stopped_after_it_and_never_reused(monkeypatch):
    # Each start of a world is one process of its own group (sleep), where the template would fork ranks.
    from continuous_test import config as ct_config
    from continuous_test.controller import world
    from continuous_test.controller.processes import RankProcess
    from continuous_test.wire.messages import ClassSettings

    started: list = []

    def start(self) -> None:
        proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
        started.append(proc)
        self.ranks = [RankProcess(0, _Popen(proc), _NoPipe(), os.devnull)]
        self.starts += 1
        self.state = world.WorldState.READY

    settings = ClassSettings("FreshRunClass", 1, "cpu", "gloo", 1.0, 10.0, 5.0)
    monkeypatch.setattr(world, "_WORLDS", {})
    monkeypatch.setattr(world.World, "start", start)
    monkeypatch.setattr(world.World, "_shutdown_gracefully", lambda self: None)  # no rank to ask
    monkeypatch.setattr(ct_config, "resolve", lambda cls, size=None: settings)
    try:
        shared = world.start_world_for(FreshRunClass)  # the class's shared runs
        with repeat.fresh_world(FreshRunClass):
            assert started[0].returncode is not None, "the shared world is stopped before the fresh run"
            fresh = world.start_world_for(FreshRunClass)  # what the fresh run's test asks for
            assert fresh is not shared and len(started) == 2
        assert started[1].returncode is not None, "the fresh run's rank is still running (or unreaped) after it"
        assert fresh.state is world.WorldState.STOPPED and fresh.ranks == []
        assert not any(key[0] is FreshRunClass for key in world._WORLDS), world._WORLDS
        again = world.start_world_for(FreshRunClass)  # the next fresh run, or a later shared test
        assert again is not fresh and len(started) == 3 and started[2].poll() is None
        world.stop_world(FreshRunClass)
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


# -- scenarios: pytest --------------------------------------------------------------------

def collected(*args: str, **kwargs) -> list:
    return collect(*args, **kwargs)[0]


def collect(*args: str, **kwargs) -> tuple:
    proc = helpers.pytest(SCENARIO, "--collect-only", *args, **kwargs)
    assert proc.returncode == 0, describe(proc)
    return [line for line in proc.stdout.splitlines() if line.startswith(NODE)], proc


def world(node: str) -> str:
    rest = node[len(NODE):]
    if "::" in rest:
        return rest.split("::")[0]
    return {"test_f1": "world size 1", "test_f2": "world size 2", "test_g2": "world size 2"}.get(rest[:7], rest)


@pytest.mark.world
def test_pytest_shards_cover_the_selection_once_without_splitting_a_world():
    selection = collected("-k", "not Plain5")
    runs = [collect("-k", "not Plain5", f"--ct-shard={i}/3") for i in (1, 2, 3)]
    shards = [nodes for nodes, _ in runs]
    everything = [node for part in shards for node in part]
    assert Counter(everything) == Counter(selection), "a test lost or run twice"
    assert not any("Plain5" in node for node in everything)
    proc = runs[0][1]
    assert re.search(rf"shard 1/3 \(the --ct-shard option\): \d+ of {len(selection)} tests", proc.stdout), \
        "the shard did not come after -k: " + describe(proc)
    homes = {world(node): {i for i, part in enumerate(shards) if any(world(n) == world(node) for n in part)}
             for node in everything}
    assert all(len(home) == 1 for home in homes.values()), homes
    assert all(part for part in shards), shards


@pytest.mark.world
def test_each_world_size_is_a_world_of_its_own():
    files = ("test_world_sizes.py", "test_world_sizes_functions.py")
    whole = helpers.pytest(*files, "--collect-only")
    runs = [helpers.pytest(*files, "--collect-only", f"--ct-shard={i}/2") for i in (1, 2)]
    nodes = [[line for line in proc.stdout.splitlines() if "::" in line] for proc in [whole, *runs]]
    assert Counter(nodes[1] + nodes[2]) == Counter(nodes[0]) and len(nodes[0]) == 16, describe(whole)
    # SizesTest at sizes 1, 2, 3, 4; FreshSizesTest (fresh ranks: one group); the functions at sizes 1, 2, 3.
    groups = [re.search(r"in (\d+) of (\d+) groups", proc.stdout) for proc in runs]
    assert all(groups) and {g.group(2) for g in groups} == {"8"}, describe(runs[0])  # type: ignore[union-attr]
    assert sum(int(g.group(1)) for g in groups) == 8, describe(runs[0])  # type: ignore[union-attr]
    size = re.compile(r"\[ws(\d)")
    homes: dict = {}
    for index, part in enumerate(nodes[1:]):
        for node in part:
            key = (node.split("::")[1] if node.count("::") == 2 else "functions", size.search(node).group(1))
            homes.setdefault(key, set()).add(index)
    assert all(len(home) == 1 for key, home in homes.items() if key[0] != "FreshSizesTest"), homes


@pytest.mark.world
def test_pytest_bad_shard_is_a_usage_error_naming_the_option():
    proc = helpers.pytest(SCENARIO, "--collect-only", "--ct-shard=5/4")
    assert proc.returncode == 4 and "Invalid shard '5/4' from the --ct-shard option" in proc.stderr, describe(proc)
    proc = helpers.pytest(SCENARIO, "--collect-only", env={ENV_SHARD: "x"})
    assert proc.returncode == 4 and f"from {ENV_SHARD} environment variable" in proc.stderr, describe(proc)


@pytest.mark.world
def test_an_empty_shard_of_a_non_empty_selection_passes():
    proc = helpers.pytest(SCENARIO, "-k", "Plain1", "--ct-shard=2/2")
    assert proc.returncode == 0 and "0 of 3 tests in 0 of 1 groups" in proc.stdout, describe(proc)
    proc = helpers.pytest(SCENARIO, "-k", "nothing_has_this_name", "--ct-shard=2/2")
    assert proc.returncode == 5, describe(proc)  # an empty selection still says so


@pytest.mark.world
def test_stored_durations_put_the_world_start_on_the_world_and_balance_the_next_run(tmp_path):
    path = tmp_path / "durations.json"
    proc = helpers.pytest(SCENARIO, "-k", "WorldA or test_f1 or test_f2", f"--ct-store-durations={path}")
    assert proc.returncode == 0, describe(proc)
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert set(data["worlds"]) == {NODE + "WorldA", NODE + "_DistributedFunctions_2", NODE + "_DistributedFunctions_1"}
    assert NODE + "WorldA::test_a1" in data["tests"] and NODE + "test_f2" in data["tests"]
    # A later run adds to the file, and the shards read it: one heavy class alone in its shard.
    proc = helpers.pytest(SCENARIO, "-k", "Plain", f"--ct-store-durations={path}")
    data = json.loads(path.read_text())
    assert proc.returncode == 0 and NODE + "WorldA::test_a1" in data["tests"], describe(proc)
    data["tests"][NODE + "Plain1::test_x"] = 1000.0
    path.write_text(json.dumps(data))
    first = collected(f"--ct-durations={path}", "--ct-shard=1/2")
    assert {world(node) for node in first} == {"Plain1"}, first


JOBS = "test_shard_jobs.py"  # six plain classes, A to F, of three tests each
JOBS_NODE = "test/scenarios/test_shard_jobs.py::"


def _committed_durations(path) -> None:
    """A committed durations file that says every test of the jobs' scenario takes a second: the tests a
    job stores (milliseconds) then weigh far less than the others, whichever job stores first."""
    tests = {f"{JOBS_NODE}{cls}::{test}": 1.0 for cls in "ABCDEF" for test in ("test_x", "test_y", "test_z")}
    path.write_text(json.dumps({"version": 1, "tests": tests, "worlds": {}}))


@pytest.mark.world
@pytest.mark.parametrize("order", [(1, 2), (2, 1), (3, 1, 2)], ids=["forward", "reverse", "mixed"])
def test_the_jobs_of_one_run_storing_into_one_file_in_turn_run_every_test_once(tmp_path, order):
    path = tmp_path / "durations.json"
    _committed_durations(path)
    ran_by_job = []
    for index in order:
        proc = helpers.pytest(JOBS, "-s", f"--ct-shard={index}/{len(order)}", f"--ct-durations={path}",
                              "--ct-store-durations")
        assert proc.returncode == 0, describe(proc)
        ran_by_job.append(ran(proc))
    everything = Counter(name for names in ran_by_job for name in names)
    expected = Counter(f"{cls}.{test}" for cls in "ABCDEF" for test in ("test_x", "test_y", "test_z"))
    assert everything == expected, f"jobs in order {order} ran {ran_by_job}"
    # Once every shard stored, the file holds this run's times and nothing pending.
    data = json.loads(path.read_text())
    assert "pending" not in data and all(seconds < 1.0 for seconds in data["tests"].values()), data


@pytest.mark.e2e
@pytest.mark.parametrize("order", [("pytest", "python"), ("python", "pytest")])
def test_a_python_job_and_a_pytest_job_of_one_run_run_every_test_once(tmp_path, order):
    # run_tests() reads the file the pytest job stores into; run from the rootdir, both name tests alike.
    path = tmp_path / "durations.json"
    _committed_durations(path)
    scenario = str(helpers.SCENARIOS.relative_to(helpers.ROOT) / JOBS)
    ran_by_job = []
    for index, runner in enumerate(order, 1):
        if runner == "pytest":
            proc = helpers.pytest(scenario, "-s", f"--ct-shard={index}/2", f"--ct-durations={path}",
                                  "--ct-store-durations", cwd=helpers.ROOT)
        else:
            proc = helpers.python(scenario, cwd=helpers.ROOT, env={ENV_SHARD: f"{index}/2", ENV_DURATIONS: str(path)})
        assert proc.returncode == 0, describe(proc)
        ran_by_job.append(ran(proc))
    everything = Counter(name for names in ran_by_job for name in names)
    assert everything == Counter(f"{cls}.{test}" for cls in "ABCDEF" for test in ("test_x", "test_y", "test_z")), \
        f"jobs {order} ran {ran_by_job}"


@pytest.mark.e2e
def test_xdist_loadscope_runs_exactly_the_shard(tmp_path):
    expected = collected("--ct-shard=2/3")
    stored = tmp_path / "durations.json"
    proc = helpers.pytest(SCENARIO, "--ct-shard=2/3", "-n", "2", "--dist", "loadscope", "-rA", "-v",
                          f"--ct-store-durations={stored}")
    assert proc.returncode == 0, describe(proc)
    assert "continuous_test: shard 2/3 (the --ct-shard option)" in proc.stdout, describe(proc)  # the header
    ran = re.findall(r"^PASSED (\S+)$", proc.stdout, re.M)
    assert sorted("test/scenarios/" + node for node in ran) == sorted(expected), describe(proc)
    # The workers' reports carry the world starts to the controller, which stores them.
    data = json.loads(stored.read_text())
    assert sorted(data["tests"]) == sorted(expected)
    worlds = {NODE + {"test_f1": "_DistributedFunctions_1"}.get(node[len(NODE):][:7], "_DistributedFunctions_2")
              if "::" not in node[len(NODE):] else NODE + node[len(NODE):].split("::")[0] for node in expected}
    assert set(data["worlds"]) == {w for w in worlds if w.endswith(("WorldA", "Flaky", "_2", "_1"))}, data


@pytest.mark.world
def test_pytest_repeats_are_items_and_the_summary_says_the_world(tmp_path):
    proc = helpers.pytest(SCENARIO, "-k", "Flaky or test_a1", "--ct-repeat=3", "--ct-repeat-fresh", "--ct-bisect=off",
                          "-rA", env={"FLAKY_SECOND_IN_WORLD": "1"})
    assert proc.returncode == 1, describe(proc)
    assert "FAILED test_shard.py::Flaky::test_flaky[repeat-2of3]" in proc.stdout, describe(proc)
    assert "PASSED test_shard.py::Flaky::test_flaky[fresh-3of3]" in proc.stdout
    assert "PASSED test_shard.py::WorldA::test_a1[repeat-3of3]" in proc.stdout
    assert helpers.pytest_counts(proc.stdout) == {"passed": 11, "failed": 1, "deselected": 20}, describe(proc)
    # pass, fail, pass: its failed run restarted the world, so it fails only after a run of itself.
    line = f"{NODE}Flaky::test_flaky: shared world 2/3 passed, fresh worlds 3/3 passed: {repeat.FOLLOWS_ORDER_LATER}"
    assert line in proc.stdout, describe(proc)
    assert f"{NODE}WorldA::test_a1: shared world 3/3 passed, fresh worlds 3/3 passed" in proc.stdout


@pytest.mark.world
def test_pytest_repeats_say_when_a_failure_follows_the_order(tmp_path):
    report, page, junit = tmp_path / "run.json", tmp_path / "run.html", tmp_path / "junit.xml"
    proc = helpers.pytest(SCENARIO, "-k", "Flaky or test_g2", "--ct-repeat=3", "--ct-bisect=off",
                          f"--ct-report={report}", f"--ct-report-html={page}", f"--junitxml={junit}",
                          env={"FLAKY_RUNS": "1", "FLAKY_DIR": str(tmp_path)})
    assert proc.returncode == 1, describe(proc)
    assert f"{NODE}Flaky::test_flaky: shared world 2/3 passed: {repeat.FOLLOWS_ORDER_FIRST}" in proc.stdout
    assert f"{NODE}test_g2[2]: shared world 3/3 passed" in proc.stdout, describe(proc)
    # The diagnosis reaches every report, not the terminal alone.
    flaky = [t["repeat"] for t in json.loads(report.read_text())["tests"] if "test_flaky" in t["id"]]
    assert flaky == [{"runs": 3, "passed": 2, "diagnosis": repeat.FOLLOWS_ORDER_FIRST}] * 3, flaky
    assert html.escape(f"repeats 2/3 passed: {repeat.FOLLOWS_ORDER_FIRST}") in page.read_text(), describe(proc)
    said = {case.get("name"): [p.get("value") for p in case.iter("property") if p.get("name") == "repeat_diagnosis"]
            for case in ET.parse(junit).getroot().iter("testcase")}
    assert said["test_flaky[repeat-3of3]"] == [repeat.FOLLOWS_ORDER_FIRST], said
    assert said["test_flaky[repeat-1of3]"] == [] and said["test_g2[2-repeat-3of3]"] == [repeat.PASSED_ALL], said


# -- scenarios: unittest ------------------------------------------------------------------

def ran(proc) -> list:
    return re.findall(r"ran (\S+)", proc.stdout + proc.stderr)


@pytest.mark.world
def test_run_tests_shards_cover_the_file_once(tmp_path):
    env = {"NO_FUNCTIONS": "1", ENV_DURATIONS: str(tmp_path / "none.json")}
    whole = ran(helpers.python(SCENARIO, env=env))
    parts = [helpers.python(SCENARIO, env={**env, ENV_SHARD: f"{i}/2"}) for i in (1, 2)]
    assert all(p.returncode == 0 for p in parts), describe(parts[0])
    assert Counter(name for p in parts for name in ran(p)) == Counter(whole) and len(whole) == 18
    classes = [{name.split(".")[0] for name in ran(p)} for p in parts]
    assert sum(len(c) for c in classes) == len(set().union(*classes)), classes
    assert "shard 2/2 (CONTINUOUS_TEST_SHARD environment variable)" in parts[1].stderr
    unittest_main = helpers.unittest("test_shard", env={**env, ENV_SHARD: "2/2"})
    assert sorted(ran(unittest_main)) == sorted(ran(parts[1])), describe(unittest_main)


@pytest.mark.world
def test_run_tests_bad_shard_is_a_usage_error():
    proc = helpers.python(SCENARIO, env={"NO_FUNCTIONS": "1", ENV_SHARD: "0/4"})
    assert proc.returncode == 2, describe(proc)
    assert f"Invalid shard '0/4' from {ENV_SHARD} environment variable" in proc.stderr


@pytest.mark.world
def test_run_tests_repeats_are_results_with_a_summary(tmp_path):
    report, page = tmp_path / "run.json", tmp_path / "run.html"
    proc = helpers.python(SCENARIO, "-v", "Flaky", "WorldA.test_a2",
                          env={"NO_FUNCTIONS": "1", ENV_REPEAT: "3", "FLAKY_RUNS": "1", "FLAKY_DIR": str(tmp_path),
                               "CONTINUOUS_TEST_BISECT": "off", "CONTINUOUS_TEST_REPORT": str(report),
                               "CONTINUOUS_TEST_REPORT_HTML": str(page)})
    assert proc.returncode == 1, describe(proc)
    assert helpers.unittest_counts(proc.stderr) == {"ran": 6, "failures": 1}, describe(proc)
    assert re.search(re.escape(verbose_name("test_flaky", "Flaky")) + r"\nrepeat-1of3 \.\.\. (.*\n)?FAIL", proc.stderr), \
        describe(proc)
    assert "Flaky::test_flaky: shared world 2/3 passed: " + repeat.FOLLOWS_ORDER_FIRST in proc.stderr
    assert "WorldA::test_a2: shared world 3/3 passed" in proc.stderr
    # The diagnosis reaches the run report and its page too.
    repeats = {t["id"]: t["repeat"] for t in json.loads(report.read_text())["tests"]}
    assert repeats == {"__main__.Flaky.test_flaky": {"runs": 3, "passed": 2, "diagnosis": repeat.FOLLOWS_ORDER_FIRST},
                       "__main__.WorldA.test_a2": {"runs": 3, "passed": 3, "diagnosis": repeat.PASSED_ALL}}, repeats
    assert html.escape(f"repeats 2/3 passed: {repeat.FOLLOWS_ORDER_FIRST}") in page.read_text()



@pytest.mark.world
def test_run_tests_fresh_repeats_tell_the_world_apart(tmp_path):
    report = tmp_path / "run.json"
    proc = helpers.python(SCENARIO, "-v", "Flaky", env={"NO_FUNCTIONS": "1", ENV_REPEAT: "2", ENV_REPEAT_FRESH: "1",
                                                        "FLAKY_SECOND_IN_WORLD": "1", "CONTINUOUS_TEST_BISECT": "off",
                                                        "CONTINUOUS_TEST_REPORT": str(report)})
    assert proc.returncode == 1, describe(proc)
    # The two fresh runs' worlds are one lane of kind fresh with two starts, beside the shared world's lane.
    lanes = sorted((w["kind"], len(w["starts"])) for w in json.loads(report.read_text())["worlds"])
    assert lanes == [("fresh", 2), ("shared", 1)], lanes
    assert helpers.unittest_counts(proc.stderr) == {"ran": 4, "failures": 1}, describe(proc)
    assert re.search(r"repeat-2of2 \.\.\. (.*\n)?FAIL", proc.stderr), describe(proc)
    assert re.search(r"fresh-2of2 \.\.\. (.*\n)?ok", proc.stderr), describe(proc)
    assert "Flaky::test_flaky: shared world 1/2 passed, fresh worlds 2/2 passed: follows the" in proc.stderr


@pytest.mark.world
def test_a_fresh_repeats_failure_does_not_say_its_world_is_restarted():
    # Rank 1 raises while rank 0 waits (stuck: the report ends with what happens to the world).
    # Runs 1 and 2 are in the shared world, which is restarted; 3 and 4 each in a world of its own.
    proc = helpers.python("test_launched_faults.py", "BreaksTheWorld.test_b_rank_1_raises_while_rank_0_waits",
                          env={ENV_REPEAT: "2", ENV_REPEAT_FRESH: "1", **helpers.QUIET})
    assert helpers.unittest_counts(proc.stderr) == {"ran": 4, "errors": 4}, describe(proc)
    assert proc.stderr.count("(the world of 2 ranks is restarted before the next test)") == 2, describe(proc)
    assert proc.stderr.count("(this world of 2 ranks was started for this test alone and is stopped after it)") == 2, \
        describe(proc)

if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
