"""The controller's one path from a test to its verdict, for test classes and ``@distributed`` functions.

::

    MultiProcContinuousTest.run ─► run(case, result) ─┐
    @distributed function ─────► function_verdict ────┤
                                                      ▼
        plan(cls, method): settings checked, leak policy and time limit resolved, once
                                                      │ (a bad value fails the test here, before anything is sent)
                                                      ▼
        world.start_world_for(cls) ─► World.run_test(plan, then=next plan) ─► bisect.after_test ─► Verdict
          │
          └ a test that wants a world of its own (:mod:`continuous_test.fresh_worlds`):
            World(cls) started ─► World.run_test(plan, leak check off) ─► stopped ─► Verdict

A test class's verdict is raised inside unittest's own run of the test
(:func:`continuous_test.verdict.replay.run_with`); a function's, inside pytest's
call of it.  The test the runner runs next, when it is certain
(:mod:`continuous_test.controller.ahead`), is planned here too, so that the world
can send it as soon as every rank passed plainly.
"""
from __future__ import annotations

import dataclasses
import unittest
from typing import Callable, Dict, List, Optional

from continuous_test import config, fresh_worlds, sizes
from continuous_test.controller import ahead, bisect, devices, progress, run_log, world
from continuous_test.controller.processes import SPARES
from continuous_test.controller.world import TestPlan
from continuous_test.errors import ConfigError, RankDiedError
from continuous_test.verdict import replay
from continuous_test.verdict.merge import Status, Verdict
from continuous_test.wire.env import ENV_AHEAD

__all__ = ["run", "function_verdict", "plan", "run_settings", "stop_class"]


def plan(cls: type, method: str, test_id: str, kwargs: Optional[dict] = None) -> TestPlan:
    """Resolve one test's own settings; raises ConfigError naming a bad one."""
    function = getattr(cls, method, None)
    return TestPlan(method, test_id, config.test_time_limit(cls, function), config.leak_policy(cls, function), kwargs,
                    fresh_group=fresh_worlds.group_wanted(cls, method), cls=cls)


def run_settings() -> bool:
    """Check every setting of the run a test may read (raises ConfigError); whether sending ahead is on.

    Due before anything is sent to a rank: a setting read only later (the
    heartbeat, read only under ``-v``; the rerun budget, read only after a
    failure; the device wait, read only where devices are leased) would
    otherwise fail a test that already ran, or be ignored.  The settings of one
    test (its time limit, its leak policy) are checked by :func:`plan`.
    """
    switches = config.check_switches()
    progress.heartbeat_seconds()
    config.bisect_budget()
    devices.device_wait()
    devices.simulated_devices()
    return bool(switches[ENV_AHEAD])


def run(case: unittest.TestCase, result: Optional[unittest.TestResult]) -> Optional[unittest.TestResult]:
    """Run ``case`` in its class's shared world and record its verdict in ``result``."""
    progress.observe(result)
    cls, method = type(case), case._testMethodName
    planned: Optional[TestPlan] = None
    error: Optional[ConfigError] = None
    following: Optional[str] = None
    own_world = sending_ahead = False
    try:
        planned = plan(cls, method, replay.short_id(case))
        own_world = fresh_worlds.wanted(cls, method)
        sending_ahead = run_settings()
        if sending_ahead or own_world:
            following = ahead.next_test(case)
    except ConfigError as exc:  # raised inside the test, so that the runner reports it as the test's error
        planned, error = None, exc
    produced: List[Verdict] = []

    def produce() -> Verdict:
        produced.append(_counted(lambda: _verdict(cls, planned, error, following, own_world, sending_ahead)))
        return produced[-1]

    outcome = replay.run_with(case, result, produce)
    if produced and produced[-1].interrupted:
        _stop_after_this_test()  # after the runner recorded the failure
    return outcome


def _stop_after_this_test() -> None:
    """Stop the run after a Ctrl-C during a rerun or bisect, once the failure already known is recorded.

    unittest's runners: a KeyboardInterrupt now, as a Ctrl-C between tests would be.
    pytest: its session is asked to stop after this test's report
    (:func:`continuous_test.controller.progress.take_stop`, as ``-x`` does), which keeps
    the failure in its summary; a KeyboardInterrupt raised in the test would end the
    session with the failure unreported.
    """
    if not progress.under_pytest():
        raise KeyboardInterrupt
    progress.stop_after_this_test(bisect.INTERRUPTED_STOP)


def _counted(verdict: Callable[[], Verdict]) -> Verdict:
    """``verdict()``, counted in the run log as one distributed test (with its reason, if it skipped for want of
    devices or a backend: a run of nothing but those ends saying so)."""
    try:
        result = verdict()
    except config.DeviceSkip as skip:
        run_log.log().distributed_test(str(skip))
        raise
    except BaseException:
        run_log.log().distributed_test()
        raise
    run_log.log().distributed_test()
    return result


def _verdict(cls: type, planned: Optional[TestPlan], error: Optional[ConfigError], following: Optional[str],
             own_world: bool, sending_ahead: bool) -> Verdict:
    if planned is None:
        assert error is not None
        raise error
    if own_world:
        return _run_in_a_world_of_its_own(cls, planned, following)
    return _run_in_world(cls, planned, _next_plan(cls, following, planned.method) if sending_ahead else None)


def function_verdict(cls: type, name: str, test_id: str, kwargs: Dict[str, object]) -> Verdict:
    """The verdict of one call of a ``@distributed`` function, run as method ``name`` of its hidden class."""
    planned = plan(cls, name, test_id, kwargs)
    run_settings()
    verdict = _counted(lambda: _run_in_world(cls, planned))
    if verdict.interrupted:
        _stop_after_this_test()
    return verdict


def _run_in_world(cls: type, planned: TestPlan, then: Optional[Callable[[], Optional[TestPlan]]] = None) -> Verdict:
    started = world.start_world_for(cls, sizes.size_of(planned.method))
    verdict = started.run_test(planned, then=then)
    return bisect.after_test(started, planned, verdict)


def _run_in_a_world_of_its_own(cls: type, planned: TestPlan, following: Optional[str] = None) -> Verdict:
    """Run one test in a world started for it alone and stopped after it (:mod:`continuous_test.fresh_worlds`).

    The class's shared world, if it runs, is left as it is for the class's other
    tests.  Nothing the test leaves can reach another test, so its leak check is
    off, and a failure is neither rerun nor bisected.  When the runner's next test
    (``following``, if known) also wants a world of its own of the same size, its
    ranks are forked while this test runs (:class:`~continuous_test.controller.processes.Spares`).
    """
    own = world.World(cls, config.resolve(cls, sizes.size_of(planned.method)))
    own.for_one_test = True
    run_log.log().use_lane(own, run_log.log().own_world_lane(cls, own.world_size))
    meanwhile = None
    if following is not None and _same_sized_own_world(cls, following, own.world_size):
        def meanwhile() -> None:
            SPARES.refill(cls, own.settings)
    try:
        own.start()
        verdict = own.run_test(dataclasses.replace(planned, leak_policy="off"), meanwhile=meanwhile)
    finally:
        deaths = own.stop()
    if deaths and verdict.status is Status.PASS:  # a rank that died after its test passed, before it stopped
        return Verdict(Status.FAIL, error=RankDiedError("\n".join(d.describe(cls) for d in deaths)))
    return verdict


def _same_sized_own_world(cls: type, following: str, world_size: int) -> bool:
    """Whether the next test ``following`` wants a world of its own of ``world_size`` ranks.

    A setting of the next test that is bad is its own error, reported when it runs: no spares.
    """
    try:
        return fresh_worlds.wanted(cls, following) and config.resolve(cls, sizes.size_of(following)).world_size == world_size
    except ConfigError:
        return False


def _next_plan(cls: type, following: Optional[str], current: str) -> Optional[Callable[[], Optional[TestPlan]]]:
    """What the world may send ahead once every rank passed: the next test's plan, or None."""
    if following is None or sizes.size_of(following) != sizes.size_of(current) or fresh_worlds.wanted(cls, following):
        return None  # no next test, or it runs in the world of another size, or in one of its own

    def next_plan() -> Optional[TestPlan]:
        if getattr(cls, following, None) is None:
            return None
        try:
            return plan(cls, following, f"{cls.__qualname__}.{following}")
        except ConfigError:  # the next test's own error, reported when it runs: not sent ahead
            return None

    return next_plan


def stop_class(cls: type) -> None:
    """Stop the shared world of ``cls``, if it has one, and kill spares forked for a test of it that did not come.

    Raises RankDiedError if a rank died outside a test.
    """
    SPARES.discard(cls)
    world.stop_world(cls)
