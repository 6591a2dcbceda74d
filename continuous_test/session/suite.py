"""unittest's side of shards and repeats: the loaded suite cut to one shard, each test repeated.

Called once per run with the whole loaded suite, after unittest's own selection
(test names, ``-k``), from unittest's ``TestProgram.runTests`` (``run_tests()``,
``python -m unittest``, torch's ``run_tests()`` in a migrated file)::

    loaded suite ─► flat list of tests ─► shard I of N (CONTINUOUS_TEST_SHARD: I/N, or slurm)
                                              ─► repeats (CONTINUOUS_TEST_REPEAT, CONTINUOUS_TEST_REPEAT_FRESH)
                                              ─► the suite the runner runs

A repeated run is a copy of the test whose description says which run it is
(``repeat-2of3``); a fresh run is in a suite of its own that stops the class's
shared world before and after it.  The durations file is
``CONTINUOUS_TEST_DURATIONS``, else ``.ct_durations.json`` in the current
directory; test ids are the file relative to the current directory, then
``::Class::test``, as pytest's node ids from the rootdir.

Touches: nothing but the suite (and, for a fresh run, the class's shared world).
"""
from __future__ import annotations

import copy
import os
import sys
import unittest
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Set, Tuple

from continuous_test import config, sizes
from continuous_test.session import repeat, shard

__all__ = ["Prepared", "prepare", "case_world", "case_id"]


def _path(cls: type) -> str:
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    return os.path.relpath(file) if file else cls.__module__


def case_world(case: unittest.TestCase) -> str:
    """The world ``case`` runs in (:func:`continuous_test.session.shard.world_of`)."""
    cls, name = type(case), case._testMethodName
    return shard.world_of(_path(cls), cls, name, sizes.size_of(name))  # test_x[ws2]: the world of size 2


def case_id(case: unittest.TestCase) -> str:
    """The id of ``case`` in the durations file: ``path::Class::test``, as pytest's node id."""
    cls = type(case)
    return f"{_path(cls)}::{cls.__qualname__}::{case._testMethodName}"


class _FreshRun(unittest.TestSuite):
    """One run of a shared-world test in a world started for it alone."""

    def run(self, result, debug=False):  # unittest's seam
        cls = type(next(iter(self)))
        with repeat.fresh_world(cls):
            return super().run(result, debug)


@dataclass
class Prepared:
    """The suite to run, the shard line to print (or None), and each repeated run with its test."""

    suite: unittest.TestSuite
    line: Optional[str] = None
    runs: List[Tuple[unittest.TestCase, repeat.RepeatRun]] = field(default_factory=list)
    # id() of each run after which its world started again (the run failed and restarted it).
    restarted: Set[int] = field(default_factory=set)

    def tally(self, result: unittest.TestResult) -> repeat.RepeatTally:
        """The outcome of every repeated run in ``result``."""
        failed = {id(test) for test, _ in [*result.failures, *result.errors]}
        failed.update(id(test) for test in result.unexpectedSuccesses)
        skipped = {id(test) for test, _ in result.skipped}
        tally = repeat.RepeatTally()
        for case, run in self.runs:
            tally.record(run, None if id(case) in skipped else id(case) not in failed)
            if id(case) in self.restarted:
                tally.restarted(run)
        return tally


def _flat(test: unittest.TestSuite) -> Iterator[unittest.TestCase]:
    for item in test:
        if isinstance(item, unittest.TestSuite):
            yield from _flat(item)
        else:
            yield item


def prepare(test: unittest.TestSuite, shared_world: Callable[[type], bool]) -> Prepared:
    """Cut ``test`` to this run's shard and repeat each test as configured; ``test`` itself when neither is."""
    chosen = shard.shard_from_env()
    count, fresh = config.repeat_count(), config.repeat_fresh()
    if chosen is None and count == 1 and not fresh:
        return Prepared(test)
    cases = list(_flat(test))
    line = None
    if chosen is not None:
        durations = shard.Durations.load(shard.durations_path(None, os.getcwd()))
        kept = shard.keep(cases, case_world, case_id, lambda case: shared_world(type(case)), chosen, durations)
        cases, line = kept.tests, kept.line
    prepared = Prepared(unittest.TestSuite(), line)
    if count == 1 and not fresh:
        prepared.suite.addTests(cases)
        return prepared
    _repeat(prepared, cases, count, fresh, shared_world)
    return prepared


def _repeat(prepared: Prepared, cases: List[unittest.TestCase], count: int, fresh: bool,
            shared_world: Callable[[type], bool]) -> None:
    pending: List[unittest.TestCase] = []
    for index, case in enumerate(cases):
        for number in range(1, count + 1):
            prepared.suite.addTest(_run_of(prepared, case, repeat.SHARED, number, count))
        if fresh and shared_world(type(case)):
            pending.extend(_run_of(prepared, case, repeat.FRESH, n, count) for n in range(1, count + 1))
        following = cases[index + 1] if index + 1 < len(cases) else None
        if pending and (following is None or case_world(following) != case_world(case)):
            prepared.suite.addTests(_FreshRun([run]) for run in pending)
            pending = []


def _run_of(prepared: Prepared, case: unittest.TestCase, mode: str, number: int, count: int) -> unittest.TestCase:
    """A copy of ``case`` for one run, described as ``repeat-2of3`` in the runner's report."""
    run = copy.copy(case)
    tag = repeat.run_tag(mode, number, count)
    run.shortDescription = lambda: tag  # type: ignore[method-assign]  # on this copy only: unittest's seam
    original = run.run

    def run_and_note_the_restart(result=None):  # unittest's seam, on this copy only, as above
        try:
            return original(result)
        finally:
            from continuous_test.controller import run_log

            record = run_log.log().tests.get(run.id())
            if record is not None and record.restarts_world:
                prepared.restarted.add(id(run))

    run.run = run_and_note_the_restart  # type: ignore[method-assign]
    prepared.runs.append((run, repeat.RepeatRun(case_id(case), mode, number, count)))
    return run
