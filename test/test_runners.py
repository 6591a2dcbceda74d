"""The same file gives the same verdicts under every runner: ``python file.py``, ``python -m unittest``, pytest, xdist."""
from __future__ import annotations


import helpers
import pytest
from helpers import describe, pytest_counts, unittest_counts

pytestmark = pytest.mark.e2e

RUNNERS = {
    "python": lambda scenario, env=None: helpers.python(scenario, env=env, real=True),
    "unittest": lambda scenario, env=None: helpers.unittest(scenario[:-3], env=env, real=True),
    "pytest": lambda scenario, env=None: helpers.pytest(scenario, env=env, real=True),
    # xdist's workers run threads of their own: their ranks always come from the fresh-interpreter template.
    "xdist": lambda scenario, env=None: helpers.pytest(scenario, "-n", "2", env=env, real=True),
}


def passed(runner: str, proc) -> int:
    """How many tests passed, by the runner's own summary (no failures, errors or skips allowed)."""
    if runner in ("pytest", "xdist"):
        counts = pytest_counts(proc.stdout)
        assert set(counts) == {"passed"}, describe(proc)
        return counts["passed"]
    counts = unittest_counts(proc.stderr)
    assert set(counts) == {"ran"} and "\nOK" in proc.stderr, describe(proc)
    return counts["ran"]


@pytest.mark.parametrize("runner", ["python", "unittest"])
def test_tests_made_by_load_tests_run_in_ranks(runner):
    # pytest does not run the load_tests protocol; unittest's runners do, in the
    # controller: a rank must make the same tests before it looks one up.
    proc = RUNNERS[runner]("test_load_tests.py")
    assert passed(runner, proc) == 4, describe(proc)


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_threads_a_test_file_starts_at_import_work_in_ranks(runner):
    # The file's import leaves the controller with more threads than one, so ranks
    # come from a fresh-interpreter template: it must not import the file for them
    # (its threads would stay in the template); each rank imports it after its fork.
    proc = RUNNERS[runner]("test_import_threads.py")
    assert passed(runner, proc) == 2, describe(proc)


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_inherited_tests_run_in_each_classs_own_world(runner, tmp_path):
    # Held up as working in issue 26: a subclass's inherited tests run in its world, of its size,
    # once on each of its ranks.
    proc = RUNNERS[runner]("test_inherited.py", env={"RUNS_DIR": str(tmp_path)})
    assert passed(runner, proc) == 4, describe(proc)
    runs = {p.name: p.read_text().split() for p in tmp_path.iterdir()}
    assert len(runs) == 2 * 2 + 2 * 3 and all(len(classes) == 1 for classes in runs.values()), (runs, describe(proc))


@pytest.mark.parametrize("runner", ["pytest", "xdist"])
def test_a_conftests_process_wide_setup_reaches_ranks_whatever_the_template(runner):
    # Its watchdog thread keeps the controller from being forked as the template;
    # the fresh-interpreter template never ran the conftest's set_default_dtype.
    proc = RUNNERS[runner]("conftest_thread/test_conftest_setup.py")
    assert passed(runner, proc) == 3, describe(proc)


def test_a_run_in_this_process_takes_the_default_dtype_it_set_along():
    # test/inprocess.py: a scenario run here leaves this process as a real run leaves its parent
    # (conftest_thread/'s conftest set float64, and a later test of the same worker failed on it).
    import inprocess
    import torch

    with inprocess._scoped(helpers.scenario_env(), ["pytest"], [], []):
        torch.set_default_dtype(torch.float64)
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_ranks_never_see_what_tests_before_their_world_changed_in_the_controller(runner):
    # python -m unittest used to make the template at the first world start, after
    # a plain test, its class's setUpClass and the shared class's own setUpClass had
    # changed the module's state in the controller.
    proc = RUNNERS[runner]("test_late_state.py")
    assert passed(runner, proc) == 2, describe(proc)
