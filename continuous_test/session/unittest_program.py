"""The session under unittest's own program (``python -m unittest``, ``unittest.main``, torch's ``run_tests()``).

:func:`install` runs once, as :mod:`continuous_test.case` is imported.  It is the
one place the session touches unittest's ``TestProgram`` (docs/isolation.rst): the
default loader shuffled when a seed is set, and ``TestProgram.runTests`` wrapped
so that the loaded tests are cut to this run's shard and repeated, the rank
template is made before any test runs, and a launched rank other than 0 prints no
report.  This module imports no more than the leaves; what the hooks need loads
when unittest's program calls them, so a rank, which imports ``case`` but runs
no program, loads none of the session's code but this.
"""
from __future__ import annotations

import os
import sys
import unittest
from typing import Any, Callable

from continuous_test import _role, config
from continuous_test._launch import detect
from continuous_test._role import ProcessRole
from continuous_test.errors import ConfigError

__all__ = ["install"]


def install(shares_a_world: Callable[[type], bool]) -> None:
    """Install the session's hooks into unittest, once; ``shares_a_world`` tells which classes shards keep whole.

    ``python -m unittest`` loads tests with unittest's default loader: it shuffles
    too when CONTINUOUS_TEST_SHUFFLE is set (``run_tests()`` uses a loader of its own).
    """
    if config.shuffle_seed() is not None:
        from continuous_test.session import shuffle

        shuffle.install_default()
    _wrap_run_tests(shares_a_world)


def _wrap_run_tests(shares_a_world: Callable[[type], bool]) -> None:
    """Wrap unittest's ``TestProgram.runTests`` (the runner's, not the code under test's), once.

    * Under ``python -m unittest`` (and torch's ``run_tests()``), the rank template
      is made once the tests are loaded and before any runs, as ``run_tests()`` and
      the pytest plugin do.  It was left to the first world start, after the plain
      tests and class setups that ran before: its ranks saw what they changed in
      this process, which the other runners' ranks do not.
    * Under a launcher, a rank other than 0 prints no unittest report: rank 0
      prints the merged one (``run_tests()`` does the same with a runner of its own;
      torch's ``run_tests()`` in a migrated file comes here).
    """
    program = unittest.main  # unittest.TestProgram
    original = program.runTests
    if getattr(original, "_ct_prepares_template", False):
        return

    def runTests(self: Any) -> Any:  # noqa: N802 - unittest's name
        role = _role.current_role()
        quiet = role is ProcessRole.LAUNCHED and detect().rank != 0
        prepared = _shard_and_repeat(self, quiet, shares_a_world)  # first: a bad setting is said before anything starts
        if role is ProcessRole.CONTROLLER:
            from continuous_test import session

            session.tests_loaded()
        elif quiet:
            _quiet_runner(self)
        try:
            return original(self)
        finally:
            _repeat_summary(self, prepared, quiet)

    runTests._ct_prepares_template = True  # type: ignore[attr-defined]
    program.runTests = runTests  # type: ignore[method-assign]


def _shard_and_repeat(program: Any, quiet: bool, shares_a_world: Callable[[type], bool]) -> Any:
    """Cut the loaded tests to this run's shard and repeat them (:mod:`continuous_test.session.suite`)."""
    from continuous_test.session import suite

    try:
        prepared = suite.prepare(program.test, shares_a_world)
    except ConfigError as exc:  # a bad CONTINUOUS_TEST_SHARD, say: a usage error, as unittest's own
        print(f"continuous_test: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    program.test = prepared.suite
    if prepared.line and not quiet:
        print(prepared.line, file=sys.stderr, flush=True)
    return prepared


def _repeat_summary(program: Any, prepared: Any, quiet: bool) -> None:
    """Keep the repeats' tally on the result (``result.repeat_tally``) and print its summary."""
    result = getattr(program, "result", None)
    if not prepared.runs or result is None:
        return
    result.repeat_tally = tally = prepared.tally(result)
    # unittest's id of each run (the runs of a test share it) -> the test's counts, for the run report.
    result.repeat_reports = {case.id(): tally.tests[run.test].as_report() for case, run in prepared.runs
                             if run.test in tally.tests}
    if not quiet:
        print("\n".join(tally.summary()), file=sys.stderr, flush=True)


QUIET_ATTR = "_ct_quiet"  # on a runner class that quiet() made


def quiet(runner: type) -> type:
    """``runner``, a unittest runner class, writing its report nowhere: the runner of a launched rank other
    than 0, whose report rank 0 prints merged.  The one answer for ``run_tests()`` and unittest's own program
    (:func:`_quiet_runner`).  A runner that takes no ``stream`` prints as it would."""
    if getattr(runner, QUIET_ATTR, False):
        return runner

    class Quiet(runner):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            stream = open(os.devnull, "w")
            try:
                super().__init__(*args, **{**kwargs, "stream": stream})
            except TypeError:  # no stream argument (or another one that unittest's program tries without)
                stream.close()
                super().__init__(*args, **kwargs)

    Quiet.__name__ = Quiet.__qualname__ = f"Quiet{runner.__name__}"
    setattr(Quiet, QUIET_ATTR, True)
    return Quiet


def _quiet_runner(program: Any) -> None:
    """Make ``program``'s test runner write its report nowhere (a launched rank other than 0)."""
    runner = program.testRunner
    if runner is None:
        runner = unittest.TextTestRunner
    if isinstance(runner, type):
        program.testRunner = quiet(runner)
    elif hasattr(runner, "stream"):
        runner.stream = unittest.runner._WritelnDecorator(open(os.devnull, "w"))
