"""The pytest plugin, @distributed functions and pytest-xdist, driven through real pytest runs."""
from __future__ import annotations

import json
import os
import re
import sys
import xml.etree.ElementTree as ET

import helpers
import pytest
from helpers import describe, pytest_counts


@pytest.fixture(scope="module")
def functions(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("functions")
    pid_log = tmp / "pids"
    junit = tmp / "junit.xml"
    proc = helpers.pytest("test_functions.py", "-vv", f"--junitxml={junit}", "--durations=3",
                          f"--ct-store-durations={tmp / 'durations.json'}", env={"PID_LOG": str(pid_log)})
    return proc, pid_log, junit


@pytest.mark.world
def test_function_outcomes(functions):
    proc, _, _ = functions
    assert proc.returncode == 1, describe(proc)
    assert pytest_counts(proc.stdout) == {"failed": 2, "passed": 8, "skipped": 2}, describe(proc)
    for name in ["test_all_reduce", "test_parametrized[1]", "test_parametrized[3]", "test_other_world_size",
                 "test_fixture_values_reach_the_ranks", "test_after_faults_still_runs"]:
        assert re.search(rf"::{re.escape(name)} PASSED", proc.stdout), describe(proc)
    assert re.search(r"::test_skips_on_every_rank SKIPPED \(not on this", proc.stdout), describe(proc)
    assert re.search(r"::test_skip_marker SKIPPED \(decided before", proc.stdout), describe(proc)


@pytest.mark.world
def test_functions_of_a_module_share_one_world(functions):
    _, pid_log, _ = functions
    lines = pid_log.read_text().splitlines()
    assert len(lines) == 2 and lines[0] == lines[1], lines


@pytest.mark.world
def test_report_has_a_section_per_failing_rank(functions):
    out = functions[0].stdout
    block = out.split("test_fails_on_rank_1 ___", 1)[1].split("___ test_hangs_on_rank_0", 1)[0]
    assert "test_fails_on_rank_1 failed on rank 1 of 2 (rank 0 passed)" in block
    assert re.search(r"-+ rank 1: failed -+\nTraceback", block), block
    assert "--- output of rank 1 ---\noutput of rank 1" in block
    assert re.search(r"-+ other ranks -+\nrank 0: passed", block), block
    hang = out.split("test_hangs_on_rank_0 ___", 1)[1]
    assert re.search(r"-+ rank 0: timed out -+\n.*time.sleep\(600\)", hang, re.S), hang


@pytest.mark.world
def test_junitxml_records_failing_ranks(functions):
    _, _, junit = functions
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_fails_on_rank_1"].iter("property")}
    # The other diagnoses (test_run_report.py reads them back) come with it.
    assert props["failing_ranks"] == "1" and props["world"] == "@distributed(world_size=2) functions of test_functions"
    assert cases["test_fails_on_rank_1"].find("failure") is not None
    assert cases["test_all_reduce"].find("failure") is None


@pytest.mark.world
def test_ids_with_a_dot_are_named_whole_and_as_pytest_names_them(tmp_path):
    # test_dotted_ids.py: ids test_lr[0.1], test_dtype[torch.float32] and a fixture's test_scale[3.0],
    # each failing on rank 1 after a test that passed: the failure's head, the rerun-and-bisect note,
    # the page and JUnit name pytest's own id, whole, and the module's world of @distributed functions
    # as the user wrote them, never the hidden class _DistributedFunctions_2.
    page, junit = tmp_path / "run.html", tmp_path / "junit.xml"
    proc = helpers.pytest("test_dotted_ids.py", f"--ct-report-html={page}", f"--junitxml={junit}",
                          env={**helpers.BISECT_ON, "CONTINUOUS_TEST_GRACE": "1"})
    assert pytest_counts(proc.stdout) == {"failed": 3, "passed": 1}, describe(proc)
    html = page.read_text()
    for test in ("test_lr[0.1]", "test_dtype[torch.float32]", "test_scale[3.0]"):
        assert f"AssertionError: {test} failed on rank 1 of 2 (rank 0 passed)" in proc.stdout, describe(proc)
        assert f"\n      {test} fails alone as well" in proc.stdout, describe(proc)
        assert f"rerun/bisect of {test}<" in html, html
    world = "@distributed(world_size=2) functions of test_dotted_ids"
    worlds = {p.get("value") for p in ET.parse(junit).getroot().iter("property") if p.get("name") == "world"}
    assert worlds == {world} and world in html, worlds
    assert "_DistributedFunctions" not in proc.stdout + html and "lr=0.1" not in proc.stdout, describe(proc)


@pytest.mark.world
def test_durations_option(functions):
    # pytest's --durations=3 lists the three slowest phases with the time the ranks took: the hang's call
    # waited out its time limit (2 s, counted from the send).
    proc, _, junit = functions
    listed = proc.stdout.split("slowest 3 durations", 1)[1].split("\n=", 1)[0]
    slowest = re.findall(r"^(\d+\.\d+)s (setup|call|teardown) +(\S+)$", listed, re.M)
    seconds = [float(s) for s, _, _ in slowest]
    assert len(slowest) == 3 and seconds == sorted(seconds, reverse=True), describe(proc)
    calls = {node.rsplit("::", 1)[1]: float(s) for s, when, node in slowest if when == "call"}
    assert calls.get("test_hangs_on_rank_0", 0.0) >= 2.0, describe(proc)
    # --ct-store-durations wrote every test's own time (all its phases, as JUnit's time, less the world start
    # it paid for) and each world's start.
    stored = json.loads((junit.parent / "durations.json").read_text())
    tests = {node.rsplit("::", 1)[1]: s for node, s in stored["tests"].items()}
    worlds = {world.rsplit("::", 1)[1]: s for world, s in stored["worlds"].items()}
    total = {case.get("name"): float(case.get("time")) for case in ET.parse(junit).getroot().iter("testcase")}
    assert set(tests) == set(total) and len(total) == 12, stored
    assert set(worlds) == {"_DistributedFunctions_2", "_DistributedFunctions_3"} and all(worlds.values()), stored
    assert all(tests[name] <= total[name] + 0.002 for name in total), (stored, total)
    assert tests["test_hangs_on_rank_0"] >= 2.0, stored
    # The only test of the world of 3 paid for its one start.
    paid = total["test_other_world_size"] - tests["test_other_world_size"]
    assert abs(paid - worlds["_DistributedFunctions_3"]) < 0.002, (stored, total)


@pytest.mark.world
def test_last_failed_reruns_only_failures(tmp_path):
    cache = ["-p", "cacheprovider", "-o", f"cache_dir={tmp_path}"]
    first = helpers.pytest("test_outcomes.py", "-k", "OutcomeTest", *cache)
    # 4 failed tests and one failed subtest; pytest (like for plain unittest) reruns the 4.
    assert pytest_counts(first.stdout).get("failed") == 5, describe(first)
    again = helpers.pytest("test_outcomes.py", "-k", "OutcomeTest", "--lf", *cache)
    assert pytest_counts(again.stdout) == {"failed": 4, "deselected": 7}, describe(again)


@pytest.mark.world
def test_markers_override_world_size_and_time_limit():
    proc = helpers.pytest("test_markers.py")
    assert pytest_counts(proc.stdout) == {"failed": 1, "passed": 3}, describe(proc)
    assert "PlainWorldTest.test_time_limit_from_marker exceeded its time limit of 1 s" in proc.stdout


@pytest.mark.world
def test_command_line_overrides_markers_and_classes():
    proc = helpers.pytest("test_markers.py", "--ct-world-size", "4", "--ct-timeout", "2",
                          env={"EXPECTED_WORLD_SIZE": "4"})
    assert pytest_counts(proc.stdout) == {"failed": 1, "passed": 3}, describe(proc)
    assert "exceeded its time limit of 2 s on ranks 0-3" in proc.stdout


@pytest.mark.world
def test_ini_setting(tmp_path):
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\nct_world_size = 4\n")
    proc = helpers.pytest("test_markers.py", "-c", str(ini), "--rootdir", str(helpers.SCENARIOS),
                          "-k", "from_class_or_option", env={"EXPECTED_WORLD_SIZE": "4"})
    assert pytest_counts(proc.stdout) == {"passed": 1, "deselected": 3}, describe(proc)


@pytest.mark.world
@pytest.mark.parametrize("args, message", [
    (["--ct-timeout", "abc"], "Invalid timeout 'abc' from the --ct-timeout option"),
    (["--ct-world-size", "0"], "Invalid world size '0' from the --ct-world-size option"),
])
def test_bad_options_are_usage_errors(args, message):
    proc = helpers.pytest("test_markers.py", *args)
    assert proc.returncode == 4, describe(proc)
    assert message in proc.stderr, describe(proc)


@pytest.mark.e2e
def test_xdist_runs_files_at_the_same_time_without_collisions():
    proc = helpers.pytest("test_basic.py", "test_isolation.py", "test_functions.py", "test_negative.py",
                          "-n", "2", "-k", "not fails and not hangs and not skips and not wrong and not unexpected "
                          "and not failure and not SlowNegative and not torch_skip", "--dist", "loadscope")
    assert proc.returncode == 0, describe(proc)
    assert pytest_counts(proc.stdout).get("passed", 0) >= 25, describe(proc)


@pytest.mark.e2e
def test_functions_under_torchrun_pytest():
    launcher = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                "--master-port", str(helpers.free_port())]
    proc = helpers.run([helpers.sys.executable, *launcher, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                        "test_functions.py", "-k", "all_reduce or parametrized or fails_on"])
    assert proc.returncode != 0, describe(proc)
    # Every rank's pytest reports the merged outcome: rank 1's failure fails the test on rank 0 too.
    assert proc.stdout.count("test_fails_on_rank_1 failed on rank 1 of 2") >= 2, describe(proc)
    assert proc.stdout.count("1 failed, 3 passed") == 2, describe(proc)


@pytest.mark.world
def test_a_fixture_that_calls_torch_distributed_says_where_fixtures_run():
    proc = helpers.pytest("test_fixture_calls_dist.py")
    assert pytest_counts(proc.stdout) == {"passed": 1, "error": 1}, describe(proc)
    assert "Default process group has not been initialized" in proc.stdout, describe(proc)
    assert "continuous_test: the fixture 'world_rank' of " in proc.stdout, describe(proc)
    assert "test_fixture_calls_dist.py::test_sum ran in the pytest process (the controller), not in the ranks" \
        in proc.stdout, describe(proc)
    assert "Call torch.distributed in the test itself" in proc.stdout, describe(proc)


@pytest.mark.e2e
def test_xdist_under_torchrun_is_a_usage_error_naming_both():
    # xdist would split the one launched world's tests among its workers: a test then waits for peers that
    # run other tests, until its time limit.
    launcher = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                "--master-port", str(helpers.free_port())]
    proc = helpers.run([helpers.sys.executable, *launcher, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2",
                        "test_functions.py", "-k", "all_reduce"],
                       env={"CONTINUOUS_TEST_TIMEOUT": "5", "CONTINUOUS_TEST_START_TIMEOUT": "5"})
    assert proc.returncode != 0, describe(proc)
    # The first rank to refuse ends the launch: torchrun stops the other before it may have said so too.
    assert "pytest-xdist (-n 2) cannot run under torchrun" in proc.stderr, describe(proc)
    assert "Drop -n 2 from the pytest command under torchrun" in proc.stderr, describe(proc)
    assert "passed" not in proc.stdout, describe(proc)


@pytest.mark.e2e
def test_functions_whose_fixture_values_differ_by_rank_under_torchrun_pytest():
    # Each launched rank is a pytest session of its own: its tmp_path, and a value whose
    # repr names the rank, give the test another id on each rank.  The ranks still meet
    # on the test (its position in the order, its node id), and every later test runs.
    launcher = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                "--master-port", str(helpers.free_port())]
    proc = helpers.run([helpers.sys.executable, *launcher, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                        "test_launched_fixtures.py"], env={"CONTINUOUS_TEST_TIMEOUT": "10"})
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.count("3 passed") == 2, describe(proc)


@pytest.fixture(scope="module")
def rerunfailures(tmp_path_factory) -> str:
    """A directory holding pytest-rerunfailures, installed for these tests alone.

    Not in the test extra: installed beside every other test, its xdist support
    (a server thread in the controller, a socket in each worker) would be part
    of every pytest run of the suite.
    """
    target = tmp_path_factory.mktemp("rerunfailures")
    proc = helpers.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                        "pytest-rerunfailures"], timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"pytest-rerunfailures could not be installed: {proc.stderr[-500:]}")
    return str(target)


@pytest.mark.e2e
@pytest.mark.parametrize("xdist", [False, True])
def test_pytest_rerunfailures_reruns_a_flaky_test_of_a_shared_world(tmp_path, xdist, rerunfailures):
    # Held up as working in issue 26: the plugin runs the same item again; its ranks run it again.
    path = os.pathsep.join(p for p in (rerunfailures, str(helpers.ROOT), os.environ.get("PYTHONPATH")) if p)
    proc = helpers.pytest("test_rerunfailures.py", "--reruns", "1", *(["-n", "2"] if xdist else []),
                          env={"FLAKY_DIR": str(tmp_path), "PYTHONPATH": path})
    assert pytest_counts(proc.stdout) == {"passed": 3, "rerun": 1}, describe(proc)
    assert (tmp_path / "failed-once").exists(), describe(proc)


_PLAIN = '''
import sys
import unittest


class PlainTest(unittest.TestCase):
    def test_a(self):
        self.assertNotIn("torch", sys.modules)

    def test_b(self):
        self.assertNotIn("torch", sys.modules)
'''


@pytest.mark.e2e
def test_a_session_without_distributed_tests_does_not_import_torch(tmp_path):
    (tmp_path / "test_plain.py").write_text(_PLAIN)
    proc = helpers.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_plain.py"], cwd=tmp_path, fresh=True)  # fresh: what it imports is the point
    assert pytest_counts(proc.stdout) == {"passed": 2}, describe(proc)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
