"""Fresh ranks: the processes of one ``MultiProcessTestCase`` test, from start to the judged endings.

The API class (:mod:`continuous_test.multiprocess`) keeps torch's surface; this is
the controller's half: the test's private directory, starting its ranks (and the
next test's spares), waiting until every rank ended, and judging the endings
against what the test declared.
"""
from __future__ import annotations

import tempfile
import time
import unittest
from typing import Any, Dict, List, Optional, Tuple

from continuous_test import config, sizes
from continuous_test.controller import device_needs, devices, output as rank_output, progress, run_log
from continuous_test.controller.processes import (
    KILL_TIMEOUT,
    SPARES,
    RankProcess,
    kill_ranks,
    reap_retired,
    retire,
    start_ranks,
)
from continuous_test.controller.watch import Goal, Waited, Watch
from continuous_test.template import server as template
from continuous_test.verdict import timeline
from continuous_test.verdict.merge import Verdict, judge_endings
from continuous_test.wire import files
from continuous_test.wire.messages import ClassSettings, RankKind, TestDone
from continuous_test.wire.outcome import ExpectedExit, RankEnding, RankOutcome


class FreshRanks:
    """The ranks of one MultiProcessTestCase test: started, awaited until they end, reaped."""

    def __init__(self, cls: type, settings: ClassSettings, method: str, world_dir: str, rendezvous: str) -> None:
        self.cls, self.settings, self.method = cls, settings, method
        self.world_dir, self.rendezvous = world_dir, rendezvous
        self.ranks: List[RankProcess] = []
        self._watch: Optional[Watch] = None
        # How each rank ended, as wait() saw it (exit codes declared or reported).
        self.exits: Dict[int, Optional[int]] = {}
        self.sent = time.monotonic()  # when the ranks were started (they run the test at once)
        # The devices the ranks use (continuous_test.controller.devices), until stop().
        self.lease: Optional[devices.Lease] = None

    def start(self) -> None:
        """Lease the devices the test needs, then fork the ranks; each starts running the test at once."""
        from continuous_test.controller.world import park_idle_worlds

        s, cls, method = self.settings, self.cls, self.method
        self.lease = devices.lease_for(
            s.device_type, lambda size: device_needs.class_need(cls, s.world_size, s.device_type, s.backend, [method], size),
            f"{cls.__qualname__}.{method} (world of {s.world_size})", make_room=lambda: park_idle_worlds(None))
        try:
            self.ranks = start_ranks(cls, s, self.world_dir, RankKind.FRESH, method, self.rendezvous,
                                     self.lease.env() if self.lease is not None else None)
        except BaseException:
            if self.lease is not None:
                self.lease.release()
            raise
        self._watch = Watch(self.ranks)

    def wait(self, time_limit: float, grace: float, progress: Any = None) -> Tuple[Waited, Dict[int, str]]:
        """Wait until every rank ended, or the time limit (or the grace after a failure) expired."""
        assert self._watch is not None, "FreshRanks.wait() before start()"
        goal = Goal(replies=(TestDone,), deadline=time.monotonic() + time_limit, grace=grace, until_exit=True,
                    progress=progress)
        waited = self._watch.wait(goal)
        self.exits.update(waited.exits)
        return waited, {h.rank: rank_output.bounded(h.read_output(), self.method, h.rank) for h in self.ranks}

    def processes(self) -> List["RankView"]:
        """The ranks' processes as torch's ``self.processes`` holds them."""
        return [RankView(h.process, h.rank, self.exits) for h in self.ranks]

    def stop(self) -> None:
        """Kill whatever still runs, with what its tests started, and reap it.

        Ranks that declared their exit are only killed (with their groups) here,
        and reaped later by :func:`reap_retired`: their test is over, and
        waiting for the kernel to tear them down would cost every test that much.
        """
        declared: set = set()
        if self._watch is not None:
            self._watch.close()
            declared, self._watch = self._watch.declared, None
        if self.lease is not None:
            # The devices go back only once every rank is gone: a rank still ending
            # may hold memory on them.
            declared = set()
        retire([h for h in self.ranks if h.rank in declared])
        kill_ranks([h for h in self.ranks if h.rank not in declared])
        self.ranks = []
        if self.lease is not None:
            self.lease.release()
            self.lease = None


class RankView:
    """A rank's ``multiprocessing`` process whose ``exitcode`` is known as soon as the rank declared it.

    torch's idiom reads ``self.processes[i].exitcode`` in ``tearDown``; a rank that
    declared its exit may not have been reaped yet (:func:`retire`).
    """

    def __init__(self, process: Any, rank: int, exits: Dict[int, Optional[int]]) -> None:
        self._process, self._rank, self._exits = process, rank, exits

    @property
    def exitcode(self) -> Optional[int]:
        """The process's exit code, or the one it declared before ending."""
        code = self._process.exitcode
        return code if code is not None else self._exits.get(self._rank)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._process, name)

    def __repr__(self) -> str:
        return f"<rank {self._rank}: {self._process!r}>"


# Per class: how many tests it has, and how many of them started (whether spares are worth forking).
_tests_of: Dict[type, int] = {}
_started: Dict[type, int] = {}


def test_dir(cls: type) -> str:
    """A new private directory for one test of ``cls``: its rendezvous, logs and records."""
    return tempfile.mkdtemp(prefix=f"test-{files.name_part(cls.__name__, 100)}-", dir=template.private_dir())


def start(cls: type, method: str, world_size: Any, world_dir: str, rendezvous: str) -> FreshRanks:
    """Start the fresh ranks of one test (each runs it at once); the next test's are forked meanwhile."""
    run_log.log().distributed_test()
    settings = config.resolve_fresh(cls, world_size, sized=sizes.parse(method) is not None)
    fresh = FreshRanks(cls, settings, method, world_dir, rendezvous)
    fresh.start()
    run_log.log().fresh_started(cls, settings.world_size, fresh.sent)
    if _expects_more(cls):
        SPARES.refill(cls, settings)
    return fresh


def judge(fresh: FreshRanks, test: str, expected: Optional[ExpectedExit], check_codes: bool, time_limit: float,
          grace: float) -> Verdict:
    """Wait for the ranks of ``fresh`` to end (bounded), stop them, and judge their endings."""
    waited, outputs = fresh.wait(time_limit, grace, progress.for_test(test, time_limit, fresh.ranks))
    fresh.stop()
    endings = {r: RankEnding(r, waited.exits.get(r), _outcome(waited.replies.get(r))) for r in outputs}
    dead = [r for r, e in endings.items() if e.outcome is None and e.exitcode not in (0, None)]
    world_dir = fresh.world_dir
    records = timeline.lazy(lambda: timeline.for_world(world_dir, endings, dead))
    verdict = judge_endings(test, len(endings), endings, expected, outputs, check_codes=check_codes,
                            faults=waited.faults, time_limit=time_limit, grace=grace, timeline=records)
    outcomes = {r: e.outcome for r, e in endings.items() if e.outcome is not None}
    run_log.log().test_ran(run_log.log().fresh_lane(fresh.cls), test, fresh.sent, verdict, outcomes)
    return verdict


def end_class(cls: type) -> None:
    """Kill the spares forked for a next test of ``cls`` that did not come, and reap the ranks that ended."""
    SPARES.discard(cls)
    reap_retired(KILL_TIMEOUT)


def _expects_more(cls: type) -> bool:
    """Whether a test of ``cls`` that has not started yet may follow (then spares are forked for it)."""
    if cls not in _tests_of:
        _tests_of[cls] = len(unittest.defaultTestLoader.getTestCaseNames(cls))
    _started[cls] = _started.get(cls, 0) + 1
    return _started[cls] < _tests_of[cls]


def _outcome(message: Optional[TestDone]) -> Optional[RankOutcome]:
    return message.full_outcome() if message is not None else None
