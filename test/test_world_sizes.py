"""Several world sizes for one class or function (continuous_test/sizes.py): ids, one world per size and
class under every runner, per-size bisect, launchers, bad lists."""
from __future__ import annotations

import collections
import re
import sys

import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts, verbose_name

from continuous_test import sizes
from continuous_test.errors import ConfigError

SCENARIO = "test_world_sizes.py"
SIZED_IDS = [f"SizesTest::test_all_reduce[ws{n}]" for n in (1, 2, 3, 4)] + \
    [f"SizesTest::test_rank_below_size[ws{n}]" for n in (1, 2, 3, 4)] + \
    ["FreshSizesTest::test_fresh[ws1]", "FreshSizesTest::test_fresh[ws2]"]


def _worlds(log) -> dict:
    """test -> world size -> the rank-0 pids that ran it (from the scenario's log)."""
    found: dict = collections.defaultdict(lambda: collections.defaultdict(set))
    for line in log.read_text().splitlines():
        test, pid, size = line.split()
        found[test][int(size)].add(int(pid))
    return found


def _one_world_per_size(log, class_tests=("SizesTest.test_all_reduce", "SizesTest.test_rank_below_size")) -> None:
    found = _worlds(log)
    assert sorted(found[class_tests[0]]) == [1, 2, 3, 4], dict(found)
    for size in (1, 2, 3, 4):
        pids = set().union(*(found[test][size] for test in class_tests))
        assert len(pids) == 1, (size, dict(found))  # both tests of one size: one world
    assert len({next(iter(found[class_tests[0]][size])) for size in (1, 2, 3, 4)}) == 4  # a world per size


@pytest.mark.e2e
@pytest.mark.parametrize("runner", ["python", "pytest", "xdist"])
def test_each_test_runs_once_per_size_in_one_world_per_size(runner, tmp_path):
    log = tmp_path / "log"
    env = {"WS_LOG": str(log)}
    if runner == "python":
        proc = helpers.python(SCENARIO, "-v", env=env)
        assert unittest_counts(proc.stderr) == {"ran": 10}, describe(proc)
        for name in (f"{verbose_name('test_all_reduce[ws3]', 'SizesTest')} ... ok",
                     f"{verbose_name('test_fresh[ws2]', 'FreshSizesTest')} ... ok"):
            assert name in proc.stderr, describe(proc)
    else:
        extra = ["-n", "2", "--dist", "loadscope"] if runner == "xdist" else []
        proc = helpers.pytest(SCENARIO, "-vv", *extra, env=env)
        assert pytest_counts(proc.stdout) == {"passed": 10}, describe(proc)
        for test_id in SIZED_IDS:
            assert re.search(rf"(PASSED.*{re.escape(SCENARIO)}::{re.escape(test_id)}|"
                             rf"{re.escape(SCENARIO)}::{re.escape(test_id)} PASSED)", proc.stdout), (test_id, describe(proc))
    _one_world_per_size(log)


@pytest.mark.world
def test_k_selects_one_size():
    proc = helpers.pytest(SCENARIO, "-k", "ws3")
    assert pytest_counts(proc.stdout) == {"passed": 2, "deselected": 8}, describe(proc)
    proc = helpers.python(SCENARIO, "-v", "-k", "ws2")
    assert unittest_counts(proc.stderr) == {"ran": 3}, describe(proc)


@pytest.mark.world
def test_a_function_runs_once_per_size_in_its_sizes_world(tmp_path):
    log = tmp_path / "log"
    proc = helpers.pytest("test_world_sizes_functions.py", "-vv", env={"WS_LOG": str(log)})
    assert pytest_counts(proc.stdout) == {"passed": 6}, describe(proc)
    for test_id in ("test_function_sizes[ws1]", "test_function_sizes[ws2]", "test_parametrized_function_sizes[ws3-4]"):
        assert f"::{test_id} PASSED" in proc.stdout, (test_id, describe(proc))
    assert sorted(_worlds(log)["test_function_sizes"]) == [1, 2]


@pytest.mark.world
def test_a_marker_with_several_sizes_sizes_a_class():
    proc = helpers.pytest("test_world_sizes_marker.py", "-vv")
    assert pytest_counts(proc.stdout) == {"passed": 4}, describe(proc)
    assert "MarkedTest::test_size[ws1] PASSED" in proc.stdout and "MarkedTest::test_size[ws3] PASSED" in proc.stdout

    # The marker's sizes win over a list of the class too: its own sizes [2] never run.
    assert "MarkedOverListTest::test_size[ws1] PASSED" in proc.stdout, describe(proc)
    assert "MarkedOverListTest::test_size[ws3] PASSED" in proc.stdout, describe(proc)


INHERIT = "test_world_sizes_inherit.py"
INHERITED_RUNS = ["Base.test_x[ws1] at 1", "Base.test_x[ws2] at 2", "Three.test_x at 3",
                  "TwoThree.test_x[ws2] at 2", "TwoThree.test_x[ws3] at 3"]


def _ran_at(proc) -> list:
    return sorted(re.findall(r"ran (\S+ at \d)", proc.stdout + proc.stderr))


@pytest.mark.world
@pytest.mark.parametrize("runner", ["python", "pytest"])
def test_a_subclass_runs_its_own_sizes_not_its_parents(runner):
    # Base is [1, 2]; Three says 3 (one size: its tests under their own names), TwoThree [2, 3].
    proc = helpers.python(INHERIT, "-v") if runner == "python" else helpers.pytest(INHERIT, "-s")
    assert proc.returncode == 0, describe(proc)
    assert _ran_at(proc) == INHERITED_RUNS, describe(proc)


@pytest.mark.world
def test_the_unsized_name_of_a_sized_test_runs_every_size_or_names_them():
    proc = helpers.python(INHERIT, "-v", "Base.test_x", "Three.test_x")
    assert proc.returncode == 0 and _ran_at(proc) == INHERITED_RUNS[:3], describe(proc)
    # unittest's own loader cannot be given the sizes: its error names them.
    proc = helpers.unittest("test_world_sizes_inherit.TwoThree.test_x")
    assert proc.returncode != 0 and "TwoThree.test_x, which runs once per world size of TwoThree.world_size: " \
        "name one of TwoThree.test_x[ws2], TwoThree.test_x[ws3]" in proc.stderr, describe(proc)


@pytest.mark.e2e
def test_last_failed_reruns_only_the_size_that_failed(tmp_path):
    args = [sys.executable, "-m", "pytest", "-q", "-p", "cacheprovider", "-o", f"cache_dir={tmp_path}", "-s",
            INHERIT, "-k", "Base"]
    env = {"FAIL_AT": "2", **helpers.QUIET}
    proc = helpers.run(args, env=env)
    assert pytest_counts(proc.stdout) == {"passed": 1, "failed": 1, "deselected": 3}, describe(proc)
    proc = helpers.run([*args, "--lf"], env=env)
    assert pytest_counts(proc.stdout) == {"failed": 1, "deselected": 4}, describe(proc)
    assert "ran Base.test_x[ws1]" not in proc.stdout + proc.stderr, describe(proc)


@pytest.mark.world
def test_bisect_looks_only_at_predecessors_of_the_same_size():
    proc = helpers.python("test_world_sizes_faults.py", "-v", env=helpers.BISECT_ON)
    output = proc.stderr
    assert unittest_counts(output) == {"ran": 5, "failures": 1, "errors": 1}, describe(proc)
    assert f"{verbose_name('test_b_victim[ws1]', 'PerSizeTest')} ... ok" in output, describe(proc)
    assert "FAIL: test_b_victim[ws2]" in output
    assert "test_b_victim[ws2] fails only after test_a_pollutes_at_size_2[ws2]; passes alone." in output, output
    # A bad list fails its class's test with an error that names the class and the value.
    assert "BadSizesTest.world_size must be a positive int or a non-empty list of distinct positive ints, " \
        "got [2, 0]" in output, describe(proc)


@pytest.mark.e2e
def test_under_a_launcher_the_other_sizes_skip_with_the_reason():
    proc = helpers.torchrun(SCENARIO, 2, "-v")
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 10, "skipped": 6}, describe(proc)
    assert f"{verbose_name('test_all_reduce[ws3]', 'SizesTest')} ... skipped 'SizesTest needs " \
        "world_size=3 but the launcher started WORLD_SIZE=2 ranks" in proc.stderr, describe(proc)
    assert f"{verbose_name('test_all_reduce[ws2]', 'SizesTest')} ... ok" in proc.stderr


def test_sizes_parse_check_and_expand():
    assert sizes.parse("test_x[ws12]") == ("test_x", 12)
    assert sizes.parse("test_x") is None and sizes.parse("test_x[ws0]") is None
    assert sizes.check((1, 2), "where") == [1, 2]
    for bad in ([], [1, 1], [0], [True], ["2"]):
        with pytest.raises(ConfigError, match="where must be a positive int or a non-empty list"):
            sizes.check(bad, "where")

    class Plain:
        def test_a(self):
            return "a"

        def helper(self):
            return "h"

    sizes.expand(Plain, [1, 2])
    assert isinstance(Plain.test_a, sizes.SizedTest) and not callable(Plain.test_a)  # the unsized name: not collected
    assert Plain.helper is not None
    assert getattr(Plain, "test_a[ws1]") is getattr(Plain, "test_a[ws2]")  # the test's own function, unwrapped
    assert Plain.world_size.sizes == [1, 2]
    case = Plain()
    sizes.set_size(case, 2)
    assert case.world_size == 2 and Plain.world_size.sizes == [1, 2]


def test_a_subclass_of_a_sized_class_has_each_test_once_per_size():
    # expand runs again for the subclass (its world_size is the parent's WorldSizes): the names the parent
    # already sized are kept, not sized again (test_a[ws1][ws2]); the subclass's own tests are sized.
    import unittest

    from continuous_test import MultiProcContinuousTest

    class Sized(MultiProcContinuousTest):
        world_size = [1, 2]

        def test_a(self):
            pass

    class Sub(Sized):
        def test_b(self):
            pass

    names = ["test_a[ws1]", "test_a[ws2]", "test_b[ws1]", "test_b[ws2]"]
    assert unittest.defaultTestLoader.getTestCaseNames(Sub) == names
    assert sorted(n for n in dir(Sub) if n.startswith("test") and callable(getattr(Sub, n))) == names
    assert getattr(Sub, "test_a[ws2]") is getattr(Sized, "test_a[ws2]") and Sub.world_size.sizes == [1, 2]

    class Plain:
        def test_a(self):
            pass

    sizes.expand(Plain, [1, 2])
    sizes.expand(Plain, [1, 2])  # idempotent
    assert sorted(n for n in vars(Plain) if n.startswith("test") and callable(vars(Plain)[n])) == \
        ["test_a[ws1]", "test_a[ws2]"]
