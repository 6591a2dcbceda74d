"""Flake hunting: each selected test run N times in its shared world (and N times in fresh worlds).

``--ct-repeat=N`` (``CONTINUOUS_TEST_REPEAT=N``) runs every selected test N times
in a row in its class's shared world; ``--ct-repeat-fresh``
(``CONTINUOUS_TEST_REPEAT_FRESH=1``) runs it N more times, each in a world started
for that run alone (after the class's shared runs).  Each run is a test of its
own for the runner: under pytest an item ``test_x[repeat-2of3]`` (``[fresh-2of3]``),
under unittest a copy of the test whose description says ``repeat 2 of 3``.

:class:`RepeatTally` keeps the outcome of every run, per test; the summary says for
each test that failed at least once whether the failure follows the order (it
fails at one place in the sequence: only the first run, after the tests before it,
or every run after a run of itself in the same world, which it spoiled; a failed
run restarts the world, so the run after it is the first in a new one), the world (only in the
shared world, never in a fresh one), or neither (flaky).  The pytest plugin keeps
its tally on the session's config (``continuous_test.pytest_plugin.repeat_tally``),
``run_tests()`` on its result (``ContinuousTestResult.repeat_tally``); both are
:class:`RepeatTally`, which reports read.

Touches: the shared world of a test run fresh (stopped before and after it).
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Set

__all__ = [
    "SHARED",
    "FRESH",
    "RepeatRun",
    "RepeatCounts",
    "RepeatTally",
    "fresh_world",
    "run_name",
    "run_tag",
    "SUMMARY_HEAD",
]

SHARED = "repeat"
FRESH = "fresh"
SUMMARY_HEAD = "continuous_test repeats: passed runs per test ({count} in the shared world{fresh})"
PASSED_ALL = "passed every run"
EVERY_RUN = "failed every run: not a flake"
FOLLOWS_WORLD = "follows the world: fails only in the shared world, never in a fresh one (state earlier tests left in it)"
FOLLOWS_ORDER_FIRST = "follows the order: fails only on its first run, right after the tests before it"
FOLLOWS_ORDER_LATER = ("follows the order: passes on its first run, then fails on every run after a run of itself in "
                       "the same world (it spoils its own state)")
FOLLOWS_ORDER_FRESH = "follows the order: fails only in a fresh world, passes after the tests before it (it needs their state)"
FLAKY = "flaky: fails at no fixed place in the order, {where}"


@dataclass(frozen=True)
class RepeatRun:
    """Run ``number`` of ``count`` of test ``test`` (its id without the repeat), in the shared world or a fresh one."""

    test: str
    mode: str  # SHARED or FRESH
    number: int
    count: int

    def as_list(self) -> list:
        """A JSON-able form, which crosses from xdist workers on reports."""
        return [self.test, self.mode, self.number, self.count]


def run_tag(mode: str, number: int, count: int) -> str:
    """The id of one run among a test's parameters: ``repeat-2of3``, ``fresh-1of3``."""
    return f"{mode}-{number}of{count}"


def run_name(name: str, mode: str, number: int, count: int) -> str:
    """The name of one run of ``name``: ``test_x[repeat-2of3]``, a parametrized ``test_x[a-fresh-1of3]``."""
    tag = run_tag(mode, number, count)
    return f"{name[:-1]}-{tag}]" if name.endswith("]") else f"{name}[{tag}]"


@dataclass
class RepeatCounts:
    """The outcomes of one test's runs: run number -> passed (True), failed (False); skips are left out."""

    test: str
    count: int
    shared: Dict[int, bool] = field(default_factory=dict)
    fresh: Dict[int, bool] = field(default_factory=dict)
    # Shared runs after which the world started again (a failed run restarts it): the next run is the
    # first in a new world, after no test at all, not after a run of itself.
    restarted_after: Set[int] = field(default_factory=set)

    def diagnosis(self) -> str:
        """Whether the failures follow the order, the world, or neither.

        Each shared run has its place: the first, right after the tests before it;
        one right after a run of itself in the same world (it may have spoiled its
        own state); or the first in a world started again after a failed run, as
        clean as a fresh world.
        """
        ordered = sorted(self.shared.items())
        shared = [ok for _, ok in ordered]
        fresh = [ok for _, ok in sorted(self.fresh.items())]
        runs = shared + fresh
        if all(runs):
            return PASSED_ALL
        if not any(runs):
            return EVERY_RUN
        after_itself = [ok for (_, ok), (before, _) in zip(ordered[1:], ordered) if before not in self.restarted_after]
        renewed = [ok for (_, ok), (before, _) in zip(ordered[1:], ordered) if before in self.restarted_after]
        if not fresh or all(fresh):
            if len(shared) > 1 and shared[0] is False and all(after_itself) and all(renewed):
                return FOLLOWS_ORDER_FIRST
            if shared and shared[0] and after_itself and not any(after_itself) and all(renewed):
                return FOLLOWS_ORDER_LATER
        if fresh and all(fresh):
            return FOLLOWS_WORLD
        if fresh and not any(fresh) and all(shared):
            return FOLLOWS_ORDER_FRESH
        where = "in fresh worlds too" if fresh and not all(fresh) else (
            "in the shared world (add --ct-repeat-fresh to tell the world apart)" if not fresh else "in the shared world")
        return FLAKY.format(where=where)

    def as_report(self) -> dict:
        """The run report's ``repeat`` of each of this test's runs: ``runs``, ``passed`` and ``diagnosis``."""
        runs = [*self.shared.values(), *self.fresh.values()]
        return {"runs": len(runs), "passed": sum(1 for ok in runs if ok), "diagnosis": self.diagnosis()}

    def line(self) -> str:
        """``<test>: shared world 2/3 passed, fresh worlds 3/3 passed: <diagnosis>``."""
        parts = [f"shared world {sum(self.shared.values())}/{len(self.shared)} passed"]
        if self.fresh:
            parts.append(f"fresh worlds {sum(self.fresh.values())}/{len(self.fresh)} passed")
        return f"{self.test}: {', '.join(parts)}: {self.diagnosis()}"


@dataclass
class RepeatTally:
    """Per test id, the outcomes of its repeated runs; filled as runs end, read by the summary and reports."""

    tests: Dict[str, RepeatCounts] = field(default_factory=dict)

    def record(self, run: RepeatRun, passed: Optional[bool]) -> None:
        """Record one run's outcome (None: skipped, left out); a run recorded twice keeps its failure."""
        counts = self.tests.setdefault(run.test, RepeatCounts(run.test, run.count))
        if passed is None:
            return
        outcomes = counts.shared if run.mode == SHARED else counts.fresh
        outcomes[run.number] = outcomes.get(run.number, True) and passed

    def restarted(self, run: RepeatRun) -> None:
        """The world started again after shared run ``run`` (it failed): the next run is in a new world."""
        if run.mode == SHARED:
            self.tests.setdefault(run.test, RepeatCounts(run.test, run.count)).restarted_after.add(run.number)

    def summary(self) -> List[str]:
        """The summary lines, head first; empty when nothing was repeated."""
        if not self.tests:
            return []
        first = next(iter(self.tests.values()))
        fresh = any(c.fresh for c in self.tests.values())
        head = SUMMARY_HEAD.format(count=first.count, fresh=f", {first.count} in fresh worlds" if fresh else "")
        return [head] + [counts.line() for counts in self.tests.values() if counts.shared or counts.fresh]


@contextlib.contextmanager
def fresh_world(cls: type) -> Iterator[None]:
    """Run the body in a world of ``cls`` started for it alone: the shared world is stopped before and after."""
    from continuous_test.controller.world import one_test_worlds

    _stop(cls)
    try:
        with one_test_worlds(cls):
            yield
    finally:
        _stop(cls)


def _stop(cls: type) -> None:
    from continuous_test.controller.world import stop_world
    from continuous_test.errors import RankDiedError

    try:
        stop_world(cls)
    except RankDiedError as exc:  # a rank died between tests: said here, the fresh run goes on
        sys.stderr.write(f"continuous_test: {exc}\n")
