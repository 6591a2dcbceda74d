"""The rank template: forked from the controller when safe, a fresh interpreter otherwise; never a deadlock."""
from __future__ import annotations

import gc
import importlib.util
import os
import re
import sys
import threading

import helpers
import pytest
from helpers import pytest_counts, unittest_counts

SCENARIO = "test_template_fork.py"
# A guard against a deadlocked rank: each test body takes well under a second.
ENV = {"PRINT_TEMPLATE_KIND": "1", "CONTINUOUS_TEST_TIMEOUT": "60"}


def describe(proc) -> str:
    return f"exit code {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr[-4000:]}"


@pytest.mark.e2e
def test_run_tests_forks_the_template_before_any_test_runs():
    # The controller runs intra-op parallel work in its first test, after the
    # template was forked: the ranks are unaffected.
    proc = helpers.python(SCENARIO, env=ENV, real=True)
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 4}, describe(proc)
    assert "template kind: fork" in proc.stdout, describe(proc)


@pytest.mark.e2e
def test_pytest_forks_the_template_after_collection():
    proc = helpers.pytest(SCENARIO, "-p", "no:randomly", env=ENV, real=True)
    assert proc.returncode == 0, describe(proc)
    assert pytest_counts(proc.stdout) == {"passed": 4}, describe(proc)
    assert "template kind: fork" in proc.stdout, describe(proc)


@pytest.mark.e2e
def test_parallel_work_before_the_template_falls_back_to_a_fresh_interpreter():
    # OpenMP's pool exists before the fork: the template's probe child deadlocks,
    # so ranks come from a fresh interpreter that does not import the test file.
    proc = helpers.python(SCENARIO, env=dict(ENV, PARALLEL_AT_IMPORT="1"), real=True)
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 4}, describe(proc)
    assert "template kind: forkserver" in proc.stdout, describe(proc)


@pytest.mark.e2e
def test_python_m_unittest_forks_the_template_before_any_test_runs():
    # python -m unittest calls no run_tests(): the template is made once unittest
    # loaded the tests, before the controller's parallel work (it was made at the
    # first world start, after it, which forced the fresh-interpreter template).
    proc = helpers.unittest("test_template_fork", env=ENV, real=True)
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 4}, describe(proc)
    assert "template kind: fork" in proc.stdout, describe(proc)


@pytest.mark.e2e
def test_the_fresh_interpreter_template_on_request():
    # Forked through the zygote's shim, which runs the template as its child: the ranks check their parent
    # against the pid the template sets for them (rank/main.py), not the shim's that its starter got.
    proc = helpers.python(SCENARIO, env=dict(ENV, CONTINUOUS_TEST_START_METHOD="forkserver"), real=True)
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 4}, describe(proc)
    assert "template kind: forkserver" in proc.stdout, describe(proc)


@pytest.mark.e2e
def test_a_dead_template_is_replaced_and_the_next_test_passes_on_its_first_run():
    # The template is killed between two classes: the next world's ranks come from a
    # new template, and its test passes at once, without a rerun in a fresh world.
    proc = helpers.python("test_template_dies.py", real=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 2}, describe(proc)
    killed = re.search(r"^killed template (\d+)$", proc.stdout, re.M)
    forked_from = set(re.findall(r"^\[rank\d\] forked from (\d+)$", out, re.M))
    assert killed and len(forked_from) == 1 and killed.group(1) not in forked_from, describe(proc)
    assert "rerun" not in out, describe(proc)


def test_a_controller_with_a_second_thread_is_not_forked():
    from continuous_test.template import server as template

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert template.fork_hazard() == "the controller runs more than one Python thread"
    finally:
        stop.set()
        thread.join()


def test_bad_start_method_lists_the_choices(monkeypatch):
    from continuous_test.template import server as template

    monkeypatch.setenv("CONTINUOUS_TEST_START_METHOD", "thread")
    with pytest.raises(ValueError, match="expected one of fork, forkserver, spawn"):
        template.start_method()


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_fork_a_test_makes_in_a_rank_leaves_its_garbage_collector_alone(method):
    # Only the template freezes its objects before a fork (so that ranks share its
    # pages); a rank's own forks (a DataLoader worker, a multiprocessing start) must not.
    # The controller's own fork (a plain test, after the world ran) must not either.
    proc = helpers.python("test_forks.py", "-v", env={"CONTINUOUS_TEST_START_METHOD": method}, real=True)
    assert unittest_counts(proc.stderr) == {"ran": 3}, describe(proc)
    assert "test_a_cycle_is_collected_after_a_fork_in_the_controller (__main__.ZControllerForkTest" in proc.stderr, \
        describe(proc)


def _forks_scenario():
    import continuous_test.rank.run  # noqa: F401 - a controller imports the ranks' modules too

    spec = importlib.util.spec_from_file_location("forks_scenario", helpers.SCENARIOS / "test_forks.py")
    assert spec is not None and spec.loader is not None
    scenario = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scenario)
    return scenario


def test_a_fork_in_the_controller_leaves_its_garbage_collector_alone():
    assert not _forks_scenario().cycle_survives_a_fork()


def test_only_the_process_named_as_the_template_freezes_its_objects_before_a_fork(monkeypatch):
    # CONTINUOUS_TEST_TEMPLATE_PID, set in the template itself, is what tells it from
    # any other process: named there, this process freezes (so the cycle survives).
    from continuous_test.wire.env import ENV_TEMPLATE_PID

    scenario = _forks_scenario()
    monkeypatch.setenv(ENV_TEMPLATE_PID, str(os.getpid()))
    try:
        assert scenario.cycle_survives_a_fork()
    finally:
        gc.unfreeze()
    monkeypatch.setenv(ENV_TEMPLATE_PID, str(os.getppid()))
    assert not scenario.cycle_survives_a_fork()


@pytest.mark.e2e
def test_the_template_removes_the_controllers_private_dir_when_it_exits(tmp_path):
    # The template's exit handler (template/at_exit.py) removes CONTINUOUS_TEST_PRIVATE_DIR:
    # the controller may have died without removing it.  This interpreter plays the template.
    from continuous_test.wire.env import ENV_PRIVATE_DIR

    private = tmp_path / "private"
    (private / "world-X").mkdir(parents=True)
    proc = helpers.run([sys.executable, "-c", "import continuous_test.template.at_exit"], env={ENV_PRIVATE_DIR: str(private)})
    assert proc.returncode == 0, describe(proc)
    assert not private.exists(), describe(proc)


_SCRIPT = """
import os
import sys

print("imported as", __name__, flush=True)
if __name__ == "__main__":
    from continuous_test.template import server

    modules = server.preload_modules()
    print("preload main:", os.environ.get("{name}"), "continuous_test.template.preload_main" in modules)
"""


@pytest.mark.e2e
def test_a_fresh_interpreter_template_imports_a_test_file_run_as_a_script(tmp_path):
    # Run as a script, the test file is named in CONTINUOUS_TEST_PRELOAD_MAIN and preloaded
    # by a fresh-interpreter template (template/preload_main.py), as __mp_main__.
    from continuous_test.wire.env import ENV_PRELOAD_MAIN

    script = tmp_path / "test_as_script.py"
    script.write_text(_SCRIPT.replace("{name}", ENV_PRELOAD_MAIN))
    proc = helpers.run([sys.executable, str(script)], cwd=tmp_path)
    assert proc.returncode == 0, describe(proc)
    assert f"preload main: {script} True" in proc.stdout, describe(proc)
    template = helpers.run([sys.executable, "-c", "import continuous_test.template.preload_main"], cwd=tmp_path,
                           env={ENV_PRELOAD_MAIN: str(script)})
    assert template.returncode == 0, describe(template)
    assert template.stdout == "imported as __mp_main__\n", describe(template)


def test_a_rank_takes_the_class_from_the_controllers_file_when_its_name_is_another_file(tmp_path, monkeypatch):
    # A template whose __main__ is another program's (or a same-named module earlier on the
    # rank's sys.path): the rank loads the file the controller took the class from.
    from continuous_test.rank import run as rank_run

    theirs, ours = tmp_path / "theirs.py", tmp_path / "ours.py"
    theirs.write_text("class Other:\n    pass\n")
    ours.write_text("class Wanted:\n    def test_x(self):\n        pass\n")
    import types
    other = types.ModuleType("ct_same_name")
    other.__file__ = str(theirs)
    monkeypatch.setitem(sys.modules, "ct_same_name", other)
    cls = rank_run.import_test_class("ct_same_name", "Wanted", str(ours), "test_x")
    assert cls.__name__ == "Wanted" and sys.modules["ct_same_name"].__file__ == str(ours)
    # The same file under the name is used as it is.
    assert rank_run.import_test_class("ct_same_name", "Wanted", str(ours)) is cls


@pytest.mark.world
def test_a_template_started_during_an_in_process_run_ends_with_it(monkeypatch):
    # test/inprocess.py: a later run's ranks must not fork from a template that holds this
    # run's __main__ (its module-level reads of the environment): server.stop ends it, and
    # the next world starts a new one; so also the fresh interpreter that replaces a forked
    # template whose probe failed (as on a loaded machine), which preloads the run's __main__.
    from continuous_test.template import server

    server.stop()  # no world of this process uses it between tests
    seen: list = []
    parent_pid = server.parent_pid

    def recording() -> int:
        pid = parent_pid()
        seen.append((pid, server.template_kind()))
        return pid

    monkeypatch.setattr(server, "parent_pid", recording)
    for probe_fails in (False, True):
        if probe_fails:
            monkeypatch.setattr(server, "_READY", b"never")  # every forked template's probe reads as failed
        proc = helpers.python("test_basic.py", "-k", "test_sum")
        assert unittest_counts(proc.stderr) == {"ran": 1}, helpers.describe(proc)
        assert server.template_pid() is None
    pids = list(dict.fromkeys(seen))
    # One template per run.  The first run's is forked, unless forking was unsafe at its start (a
    # thread an earlier test of this worker left) or its probe timed out on a loaded machine: then it
    # too is a fresh interpreter.  The second run's probe always fails.
    assert len(pids) == 2 and pids[0][1] in ("fork", "forkserver") and pids[1][1] == "forkserver", seen
    for pid, _ in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
