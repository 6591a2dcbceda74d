"""Rerun, then bisect: what kind of failure a failed test of a shared world is.

How data flows (controller side only)::

    dispatch ──────── verdict ──► after_test(world, plan, verdict)
                                     │ passed: remember it in the world's history
                                     │ failed: diagnose(history, test)
                                     ▼
        fresh World(cls, n) ─ run [test] ─────────────► fails: "fails alone as well"
                            ─ run history + [test] ───► passes: "flaky"
                            ─ delta debugging: subsets of the history + [test], down to
                              the smallest set after which it still fails
                            ─ repeat: that set + [test] and [test] alone, again ─► replays
                              disagree: "flaky"; else "fails only after test_a, test_c;
                                                         passes alone and after the others"
                                     │
                                     ▼
                          a note on the verdict's error (the verdict stays a failure), and the
                          verdict's word for machines in the run log (controller/run_log.py:
                          fails-alone, order-dependent with the polluters, flaky, ...)

Every replay runs in a new world forked from the template, through the World's
public API only (``start()``, ``run_test()``, ``stop()``), with the same
environment, so the same shuffle seed and RNG seed.  The time spent is bounded
per process by ``CONTINUOUS_TEST_BISECT`` (``--ct-bisect``) seconds, which also
turns it off (``off`` or 0).  Under torchrun or srun tests never come here: the
ranks cannot be re-forked.  A test that exceeded its time limit, or whose
collective ended in the process group's timeout, is not rerun: the rerun would
wait as long again.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, List, Optional, Sequence, Tuple

from continuous_test import config
from continuous_test.controller import run_log
from continuous_test.controller.world import TestPlan, World
from continuous_test.errors import RankTimeoutError
from continuous_test.verdict.merge import Verdict
from continuous_test.verdict.report import add_note

__all__ = [
    "after_test",
    "diagnose",
    "reset_budget",
    "FAILS_ALONE",
    "ORDER_DEPENDENT",
    "FLAKY",
    "FLAKY_FIRST",
    "FLAKY_DISAGREE",
    "CONFIRMATIONS",
    "STOPPED",
    "NOTE_HEADER",
    "NOT_RERUN",
    "NOT_RERUN_LONG",
    "NOT_RERUN_HUNG",
    "INTERRUPTED",
    "INTERRUPTED_STOP",
]

NOTE_HEADER = "continuous_test rerun and bisect ({worlds} fresh world(s), {seconds:.1f} s):"
FAILS_ALONE = "  {test} fails alone as well: it failed again when rerun first in a fresh world."
ORDER_DEPENDENT = "  {test} fails only after {culprits}; passes alone{others}."
OTHERS = " and after the others ({n} more earlier test(s) of its world)"
FLAKY = (
    "  {test} is flaky: it passed when rerun alone in a fresh world, and again after the same "
    "{n} earlier test(s) in the same order; the failure could not be reproduced."
)
FLAKY_FIRST = "  {test} is flaky: it passed when rerun alone in a fresh world (no test ran before it in its world)."
FLAKY_DISAGREE = (
    "  {test} is flaky: replays disagree: after {culprits} it failed {after} of {after_runs} time(s), and "
    "alone it failed {alone} of {alone_runs} time(s); no earlier test is blamed."
)
# Replays, beyond the first, of the culprits + the test and of the test alone, before
# the culprits are blamed: every one must agree (fail after them, pass alone).
CONFIRMATIONS = 2
STOPPED = "  rerun/bisect stopped: {why}. {found}"
BUDGET_SPENT = "its time budget is spent (CONTINUOUS_TEST_BISECT={budget:g} seconds per run)"
PREDECESSOR_BROKE = "{test}, an earlier test, failed or needed a new world during the replay"
NOT_RERUN = "continuous_test: not rerun in a fresh world: it exceeded its time limit, and a rerun would wait as long again."
NOT_RERUN_HUNG = ("continuous_test: not rerun in a fresh world: a collective ended in the process group's timeout, "
                  "and a rerun would wait as long again.")
NOT_RERUN_LONG = (
    "continuous_test: not rerun in a fresh world: it ran {seconds:.0f} s, and a rerun would take as long, "
    "more than the {left:.0f} s left of the rerun budget (CONTINUOUS_TEST_BISECT)."
)
START_FAILED = "a fresh world could not start ({error})"
INTERRUPTED = "continuous_test: rerun and bisect interrupted (Ctrl-C); the failure above is the test's own run."
# Why pytest's session stops after that test (pytest prints "Interrupted: ...").
INTERRUPTED_STOP = "continuous_test: rerun and bisect interrupted (Ctrl-C)"


# Seconds spent on reruns and bisects in this process.
_spent = 0.0


class _Stop(Exception):
    """A replay could not give an answer (budget, a predecessor failed, a start error)."""


def reset_budget() -> None:
    """Forget the time spent so far: the whole budget is available again."""
    global _spent
    _spent = 0.0


def after_test(world: World, plan: TestPlan, verdict: Verdict) -> Verdict:
    """Record the test of ``plan`` in ``world``'s history; if it failed, add the diagnosis to ``verdict``.

    The history is the world's (:attr:`World.history`), begun anew whenever its ranks
    start: a test after which the world restarts (any failure, fault or unrestorable
    leak) is not kept.
    """
    history = world.history
    if verdict.failed and not verdict.expected_failure:
        budget = config.bisect_budget()
        if budget <= 0:
            note = None
        elif _timed_out(verdict):
            note = NOT_RERUN
            run_log.log().diagnosed(run_log.NOT_RERUN, text=note)
        elif verdict.backend_timeout:
            note = NOT_RERUN_HUNG
            run_log.log().diagnosed(run_log.NOT_RERUN, text=note)
        elif verdict.duration >= budget - _spent:
            note = NOT_RERUN_LONG.format(seconds=verdict.duration, left=max(0.0, budget - _spent))
            run_log.log().diagnosed(run_log.NOT_RERUN, text=note)
        else:
            try:
                note = diagnose(world.cls, world.settings, list(history), plan)
            except KeyboardInterrupt:  # the failure is known: it is reported, then the run stops
                note, verdict.interrupted = INTERRUPTED, True
                run_log.log().diagnosed(run_log.INTERRUPTED, text=note)
        seed_line = config.shuffle_failure_line()
        for text in (note, seed_line):
            if text:
                _add_note(verdict, text)
    if not verdict.restart_world:
        history.append(plan)
    return verdict


def diagnose(cls: type, settings: Any, history: Sequence[TestPlan], failed: TestPlan) -> Optional[str]:
    """Rerun ``failed`` alone, then bisect ``history``; returns the report's text, or None when off."""
    budget = config.bisect_budget()
    if budget <= 0:
        return None
    replay = _Replayer(cls, settings, budget, failed.test_id)
    polluters: List[str] = []
    try:
        kind, polluters, line = _judge(replay, list(history), failed)
    except _Stop as stop:
        kind, line = run_log.STOPPED, STOPPED.format(why=stop, found=replay.found)
    header = NOTE_HEADER.format(worlds=replay.worlds, seconds=replay.seconds)
    note = "\n".join([header, line])
    run_log.log().diagnosed(kind, polluters, replay.worlds, replay.seconds, note)
    return note


def _judge(replay: "_Replayer", history: List[TestPlan], failed: TestPlan) -> Tuple[str, List[str], str]:
    """(the verdict's word for machines, the polluters' test ids, the line for people)."""
    test = failed.short()
    if replay.fails([failed]):
        return run_log.FAILS_ALONE, [], FAILS_ALONE.format(test=test)
    replay.found = "It passed when rerun alone in a fresh world."
    if not history:
        return run_log.FLAKY, [], FLAKY_FIRST.format(test=test)
    if not replay.fails(history + [failed]):
        return run_log.FLAKY, [], FLAKY.format(test=test, n=len(history))
    culprits = _minimize(replay, history, failed)
    names = ", ".join(r.short() for r in culprits)
    # Repeat before blaming: a flaky test can fail after innocent tests by chance.
    after, alone = _confirm(replay, culprits, failed)
    if after[0] < after[1] or alone[0] > 0:
        return run_log.FLAKY, [], FLAKY_DISAGREE.format(test=test, culprits=names, after=after[0],
                                                        after_runs=after[1], alone=alone[0], alone_runs=alone[1])
    others = [r for r in history if r not in culprits]
    after_others = bool(others) and not replay.fails(others + [failed])
    line = ORDER_DEPENDENT.format(test=test, culprits=names, others=OTHERS.format(n=len(others)) if after_others else "")
    return run_log.ORDER_DEPENDENT, [r.test_id for r in culprits], line


def _minimize(replay: "_Replayer", candidates: List[TestPlan], failed: TestPlan) -> List[TestPlan]:
    """The smallest set of earlier tests after which ``failed`` still fails: delta debugging (Zeller's ddmin).

    ``candidates`` is known to make it fail.  Split them into ``n`` parts; keep a
    part, or else the rest without a part, that still makes it fail (the order
    of the history is kept); else split finer, until no single test can go.
    Two polluters that are both needed are both found; tests that are not needed
    are dropped.
    """
    seen: dict = {}  # subsets already replayed (by position in the history): their answer

    def fails(subset: List[TestPlan]) -> bool:
        key = tuple(id(r) for r in subset)
        if key not in seen:
            seen[key] = replay.fails(subset + [failed])
        return seen[key]

    n = 2
    while len(candidates) >= 2:
        size = len(candidates)
        chunks = [candidates[size * i // n:size * (i + 1) // n] for i in range(n)]
        # (subset, the granularity to go on with if it still makes the test fail)
        tries = [(chunk, 2) for chunk in chunks]
        if n > 2:  # at n == 2 each complement is the other chunk
            tries += [([r for r in candidates if r not in chunk], max(n - 1, 2)) for chunk in chunks]
        for subset, next_n in tries:
            if subset and fails(subset):
                candidates, n = subset, next_n
                names = ", ".join(r.short() for r in candidates)
                replay.found = f"So far it fails after {names} (and passes alone)."
                break
        else:
            if n >= size:
                break
            n = min(size, 2 * n)
    return candidates


def _confirm(replay: "_Replayer", culprits: List[TestPlan], failed: TestPlan):
    """((failures, runs) after ``culprits``, (failures, runs) alone), counting the replays already made."""
    after, alone = [1, 1], [0, 1]  # the minimization ended on a failure after them; the first rerun alone passed
    for _ in range(CONFIRMATIONS):
        after[0] += replay.fails(culprits + [failed])
        after[1] += 1
        alone[0] += replay.fails([failed])
        alone[1] += 1
        if after[0] < after[1] or alone[0]:
            break  # they disagree already: no more replays needed to say so
    return tuple(after), tuple(alone)


class _Replayer:
    """Runs sequences of tests, each in a fresh world, within the run's time budget."""

    def __init__(self, cls: type, settings: Any, budget: float, test_id: str = "") -> None:
        self.cls, self.settings, self.budget = cls, settings, budget
        self.worlds = 0
        self.seconds = 0.0
        self.found = ""
        # The run log's lane for this diagnosis's fresh worlds, made with the first.
        self.test_id, self.lane = test_id, None

    def fails(self, sequence: List[TestPlan]) -> bool:
        """Run ``sequence`` in a fresh world; True if its last test failed."""
        global _spent
        left = self.budget - _spent
        if left <= 0:
            raise _Stop(BUDGET_SPENT.format(budget=self.budget))
        started = time.monotonic()
        world = World(self.cls, self.settings)
        if self.lane is None:
            self.lane = run_log.log().replay_lane(self.cls, world.world_size, self.test_id)
        run_log.log().use_lane(world, self.lane)
        world.purpose = "rerun" if self.worlds == 0 else "bisect"
        world.for_one_test = True
        self.worlds += 1
        try:
            try:
                world.start()
            except Exception as exc:  # SkipTest included: no answer from this world
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise _Stop(START_FAILED.format(error=first)) from exc
            return self._run(world, sequence, started + left)
        finally:
            world.stop()
            took = time.monotonic() - started
            _spent += took
            self.seconds += took

    def _run(self, world: Any, sequence: List[TestPlan], deadline: float) -> bool:
        for index, ran in enumerate(sequence):
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Stop(BUDGET_SPENT.format(budget=self.budget))
            limit = min(ran.time_limit, left)
            verdict = world.run_test(replace(ran, time_limit=limit))
            if limit < ran.time_limit and isinstance(verdict.error, RankTimeoutError):
                raise _Stop(BUDGET_SPENT.format(budget=self.budget))
            if index < len(sequence) - 1 and (verdict.failed or verdict.restart_world):
                raise _Stop(PREDECESSOR_BROKE.format(test=ran.short()))
        return verdict.failed


def _timed_out(verdict: Verdict) -> bool:
    # A rerun of a test that exceeded its time limit would wait as long again.
    return isinstance(verdict.error, RankTimeoutError)


def _add_note(verdict: Verdict, note: str) -> None:
    error = verdict.error
    if error is None:  # only subtests failed: the first one carries the note
        error = next((sub.error for _, sub in verdict.subtests if sub.error is not None), None)
    if error is not None:
        add_note(error, note)
