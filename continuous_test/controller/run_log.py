"""The run's record for machines: every world and every test of this process, with times and diagnoses.

How data flows (all in the controller process; stdlib only, no torch)::

    runner (pytest plugin, run_tests' result) ── begin(test) ... end(test, outcome) ──┐
    controller/world.py  ── world_started / world_stopped / test_ran (every run, replays too)
    controller/fresh.py  ── fresh_started / test_ran (one world per MultiProcessTestCase test)
    controller/bisect.py ── replay_lane (a lane for the fresh worlds of one diagnosis), diagnosed
    controller/dispatch.py, controller/fresh.py ── distributed_test (a skip for want of devices: its reason)
                                                                                     ▼
              RunLog ─► as_dict() ─► merge(parts of xdist workers) ─► write(): the JSON report
                    ├─► properties(test): the test's JUnit properties
                    └─► device_tally() ─► all_skipped_line(tallies of xdist workers): the run's last line

Events that arrive while the runner runs a test (between ``begin`` and ``end``)
belong to that test.  A *lane* is one world: a class's shared world (its
restarts are marks on it), the fresh ranks of a ``MultiProcessTestCase`` class
(every test starts one), or the fresh worlds in which one failed test was rerun
and bisected.  Times are seconds since the epoch (``time.time()``), so that the
parts written by xdist workers on one host line up.  The report's layout is
``continuous_test/run_report.schema.json``, documented in ``docs/run-report.rst``.
"""
from __future__ import annotations

import json
import os
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from continuous_test import config
from continuous_test._role import world_name
from continuous_test.wire import files
from continuous_test.verdict import report as verdict_report

__all__ = [
    "VERSION",
    "SCHEMA_FILE",
    "RunLog",
    "log",
    "reset",
    "wall",
    "merge",
    "write",
    "all_skipped_line",
    "ALL_SKIPPED",
    "FAILS_ALONE",
    "ORDER_DEPENDENT",
    "FLAKY",
    "NOT_RERUN",
    "STOPPED",
    "INTERRUPTED",
    "OUTCOMES",
    "outcome_after",
]

VERSION = 1
SCHEMA_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run_report.schema.json")
# How a test ended, in the run report's words (the schema's "outcome"); every runner says them from here.
PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
XFAILED, XPASSED, UNKNOWN = "xfailed", "xpassed", "unknown"
OUTCOMES = (PASSED, FAILED, ERROR, SKIPPED, XFAILED, XPASSED, UNKNOWN)


def outcome_after(so_far: Optional[str], new: str) -> str:
    """A test's outcome once one more of its results came (a subtest's, a phase's): a failure or an error
    outranks the rest; called by run_tests' result and the pytest plugin's report shaping."""
    return so_far if so_far in (FAILED, ERROR) else new


# Rerun-and-bisect verdicts, as the report and the JUnit ``diagnosis`` property spell them.
FAILS_ALONE = "fails-alone"
ORDER_DEPENDENT = "order-dependent"
FLAKY = "flaky"
NOT_RERUN = "not-rerun"
STOPPED = "stopped"
INTERRUPTED = "interrupted"
# The last line of a run whose every distributed test skipped for want of devices or a backend.
ALL_SKIPPED = "all {n} distributed test{s} skipped: {reasons}"


def wall(monotonic: float) -> float:
    """The epoch time of a ``time.monotonic()`` reading taken in this process."""
    return time.time() - (time.monotonic() - monotonic)


@dataclass
class _Lane:
    """One world's lane: its starts, stop and the test that made it start again."""

    id: str
    cls: str
    world_size: int
    kind: str  # shared, fresh or replay
    for_test: Optional[str] = None  # a replay lane: the test it diagnoses
    starts: List[dict] = field(default_factory=list)
    stopped: Optional[float] = None
    # The test after which the world must start again (failed, leaked, a rank died), until it does.
    broken_by: Optional[str] = None

    def as_dict(self) -> dict:
        return {"id": self.id, "class": self.cls, "world_size": self.world_size, "kind": self.kind,
                "for_test": self.for_test, "starts": self.starts, "stopped": self.stopped}


@dataclass
class _Test:
    """What the runner ran as one test, and every diagnosis made about it."""

    id: str
    start: float
    end: Optional[float] = None
    outcome: Optional[str] = None
    world: Optional[str] = None
    world_start: Optional[int] = None
    restarts_world: bool = False
    failing_ranks: List[int] = field(default_factory=list)
    raising_ranks: List[int] = field(default_factory=list)
    diagnosis: Optional[dict] = None
    leaks: List[dict] = field(default_factory=list)

    def as_dict(self, seed: Optional[int]) -> dict:
        end = self.end if self.end is not None else self.start
        restored = None if not self.leaks else all(leak["restored"] for leak in self.leaks)
        return {"id": self.id, "outcome": self.outcome or UNKNOWN, "start": self.start, "end": end,
                "seconds": round(end - self.start, 6), "world": self.world, "world_start": self.world_start,
                "world_restarts": max(0, (self.world_start or 1) - 1), "restarts_world": self.restarts_world,
                "failing_ranks": self.failing_ranks, "raising_ranks": self.raising_ranks, "diagnosis": self.diagnosis, "leaks": self.leaks,
                "leaks_restored": restored, "shuffle_seed": seed,
                # A --ct-repeat run's test counts, known only at the end: runner.write_reports fills them in.
                "repeat": None}


class RunLog:
    """The record of one process's run; see the module docstring."""

    def __init__(self) -> None:
        self.started = time.time()
        self.lanes: List[_Lane] = []
        self.tests: Dict[str, _Test] = {}
        # Every run of a test on a lane (the runner's, reruns and bisects): the bars of the picture.
        self.runs: List[dict] = []
        self._current: Optional[_Test] = None  # the test the runner is running now
        # World -> its lane; a replay's world gets its lane from bisect before it starts.
        self._lane_of: "weakref.WeakKeyDictionary[Any, _Lane]" = weakref.WeakKeyDictionary()
        self._fresh_lanes: Dict[type, _Lane] = {}
        self._count: Dict[str, int] = {}
        # The controller's test id (``Class.test``) -> the runner's, for naming polluters.
        self._runner_ids: Dict[str, str] = {}
        # The distributed tests the runner ran, and the reasons (with counts) of those skipped
        # for want of devices or a backend (config.DeviceSkip).
        self.distributed = 0
        self.device_skips: Dict[str, int] = {}

    # -- the runner ------------------------------------------------------------------

    def begin(self, test_id: str) -> None:
        """The runner starts ``test_id`` (a pytest node id, or unittest's ``test.id()``)."""
        self._current = self.tests[test_id] = _Test(test_id, time.time())

    def error_seen(self, error: Any) -> None:
        """The runner recorded ``error`` for the test running now: its ranks count for the test.

        The same ranks a world's run gave (:meth:`test_ran`); the only source of them
        for a test that ran in place under a launcher, where no world runs it.
        """
        ranks = getattr(error, "ct_ranks", None)
        if self._current is None or not ranks:
            return
        test = self._current
        test.failing_ranks = sorted(set(test.failing_ranks) | set(verdict_report.failing_ranks(ranks)))
        test.raising_ranks = sorted(set(test.raising_ranks) | set(verdict_report.raising_ranks(ranks)))

    def end(self, test_id: str, outcome: str) -> None:
        """The runner is done with ``test_id``: passed, failed, error, skipped, xfailed or xpassed."""
        test = self.tests.get(test_id)
        if test is not None:
            test.end, test.outcome = time.time(), outcome
        self._current = None

    def distributed_test(self, device_skip: Optional[str] = None) -> None:
        """The runner ran one distributed test; ``device_skip``: the reason it skipped for want of devices or a backend."""
        self.distributed += 1
        if device_skip is not None:
            self.device_skips[device_skip] = self.device_skips.get(device_skip, 0) + 1

    def device_tally(self) -> dict:
        """What :func:`all_skipped_line` reads (an xdist worker sends it to the main process)."""
        return {"distributed": self.distributed, "device_skips": dict(self.device_skips)}

    # -- worlds ----------------------------------------------------------------------

    def _new_lane(self, cls: type, world_size: int, kind: str, for_test: Optional[str] = None) -> _Lane:
        name = world_name(cls)
        key = f"{name}/{kind}"
        self._count[key] = self._count.get(key, 0) + 1
        suffix = "" if kind == "shared" else f" ({kind})"
        number = self._count[key]
        lane = _Lane(f"{name}{suffix}" + (f" #{number}" if number > 1 else ""), cls.__qualname__, world_size, kind,
                     for_test)
        self.lanes.append(lane)
        return lane

    def replay_lane(self, cls: type, world_size: int, test_id: str) -> Any:
        """A lane for the fresh worlds that rerun and bisect ``test_id``; bisect gives it to each with ``use_lane``."""
        return self._new_lane(cls, world_size, "replay", self._current_id() or test_id)

    def use_lane(self, world: Any, lane: Any) -> None:
        """Put ``world``'s starts and runs on ``lane`` (a replay's fresh world)."""
        self._lane_of[world] = lane

    def world_started(self, world: Any, began: float, purpose: str = "tests", failed: Optional[str] = None) -> None:
        """``world`` (a shared World) started at monotonic ``began`` and is ready now, or ``failed`` to (why)."""
        lane = self._lane_of.get(world)
        if lane is None:
            lane = self._lane_of[world] = self._new_lane(world.cls, world.world_size, "shared")
        self._started(lane, began, purpose, failed)

    def _started(self, lane: _Lane, began: float, purpose: str, failed: Optional[str] = None) -> None:
        start = wall(began)
        restart = lane.kind == "shared" and bool(lane.starts)  # a replay's or fresh ranks' world is new each time
        lane.starts.append({"time": start, "seconds": round(time.time() - start, 6), "restart": restart,
                            "after": lane.broken_by if restart else None, "purpose": purpose,
                            "for_test": self._current_id(), "failed": failed.splitlines()[0] if failed else None})
        lane.broken_by = None
        lane.stopped = time.time() if failed else None
        if failed and self._current is not None and lane.kind == "shared":  # the test that needed it failed with it
            self._current.world, self._current.world_start = lane.id, len(lane.starts)

    def world_stopped(self, world: Any) -> None:
        """``world`` stopped (its class is done, or it was replaced)."""
        lane = self._lane_of.get(world)
        if lane is not None:
            lane.stopped = time.time()

    def fresh_started(self, cls: type, world_size: int, began: float) -> None:
        """The fresh ranks of one ``MultiProcessTestCase`` test of ``cls`` started at monotonic ``began``."""
        self._started(self.own_world_lane(cls, world_size), began, "tests")

    def use_own_world_lane(self, world: Any) -> None:
        """Put ``world`` (started for one test: a fresh repeat run's) on its class's lane of kind ``fresh``,
        unless it has a lane already (a replay's)."""
        if world not in self._lane_of:
            self._lane_of[world] = self.own_world_lane(world.cls, world.world_size)

    def own_world_lane(self, cls: type, world_size: int) -> Any:
        """The lane (of kind ``fresh``) of ``cls``'s fresh ranks, or of its tests' worlds of their own (:meth:`use_lane`)."""
        lane = self._fresh_lanes.get(cls)
        if lane is None or lane.world_size != world_size:
            lane = self._fresh_lanes[cls] = self._new_lane(cls, world_size, "fresh")
        return lane

    def fresh_lane(self, cls: type) -> Any:
        """The lane of ``cls``'s fresh ranks, for :meth:`test_ran`."""
        return self._fresh_lanes.get(cls)

    def lane_of(self, world: Any) -> Any:
        """The lane of ``world``, or None."""
        return self._lane_of.get(world)

    # -- tests on worlds -------------------------------------------------------------

    def test_ran(self, lane: Any, test: str, sent: float, verdict: Any, outcomes: Optional[dict] = None) -> None:
        """One run of ``test`` on ``lane``, sent at monotonic ``sent`` and judged now as ``verdict``."""
        if lane is None:
            return
        failing, raising = failing_ranks(verdict), raising_ranks(verdict)
        outcome = FAILED if verdict.failed else (SKIPPED if verdict.status.value == "skip" else PASSED)
        purpose = lane.starts[-1]["purpose"] if lane.starts else "tests"
        current = self._current_id()
        self.runs.append({"world": lane.id, "test": test, "for_test": current, "start": wall(sent),
                          "end": time.time(), "outcome": outcome, "failing_ranks": failing,
                          "raising_ranks": raising, "purpose": purpose})
        if verdict.restart_world and lane.kind == "shared":
            lane.broken_by = current or test
        if lane.kind == "replay" or self._current is None:
            return
        record = self._current
        self._runner_ids[test] = record.id
        record.world, record.world_start = lane.id, len(lane.starts)
        record.failing_ranks, record.raising_ranks = failing, raising
        record.restarts_world = bool(verdict.restart_world) and lane.kind != "fresh"
        record.leaks = _leaks(outcomes or {})

    def diagnosed(self, verdict: str, polluters: Iterable[str] = (), worlds: int = 0, seconds: float = 0.0,
                  text: str = "") -> None:
        """The rerun-and-bisect verdict of the test running now (``FAILS_ALONE``, ``ORDER_DEPENDENT``, ...);
        ``polluters`` are the controller's test ids (``Class.test``)."""
        if self._current is not None:
            named = [self._runner_ids.get(p, p) for p in polluters]  # as the runner named them
            self._current.diagnosis = {"verdict": verdict, "polluters": named, "worlds": worlds,
                                       "seconds": round(seconds, 6), "text": text}

    def _current_id(self) -> Optional[str]:
        return self._current.id if self._current is not None else None

    # -- out -------------------------------------------------------------------------

    def as_dict(self, worker: Optional[str] = None) -> dict:
        """The report of this process (one part, under xdist), as the schema lays it out."""
        seed = config.shuffle_seed()
        prefix = f"{worker}:" if worker else ""
        lanes = [dict(lane.as_dict(), id=prefix + lane.id, worker=worker) for lane in self.lanes]
        tests = []
        for test in self.tests.values():
            entry = test.as_dict(seed)
            entry["worker"] = worker
            if entry["world"] is not None:
                entry["world"] = prefix + entry["world"]
            tests.append(entry)
        runs = [dict(run, world=prefix + run["world"], worker=worker) for run in self.runs]
        return {"version": VERSION, "tool": "continuous_test", "started": self.started, "finished": time.time(),
                "shuffle_seed": seed, "workers": [worker] if worker else [], "worlds": lanes, "tests": tests,
                "runs": runs}

    def properties(self, test_id: str) -> List[Tuple[str, str]]:
        """The JUnit properties of ``test_id``: every diagnosis made about it, as strings."""
        test = self.tests.get(test_id)
        if test is None:
            return []
        entry = test.as_dict(config.shuffle_seed())
        found: List[Tuple[str, str]] = []
        for name in ("failing_ranks", "raising_ranks"):
            if entry[name]:
                found.append((name, ",".join(map(str, entry[name]))))
        if entry["diagnosis"] is not None:
            found.append(("diagnosis", entry["diagnosis"]["verdict"]))
            if entry["diagnosis"]["polluters"]:
                found.append(("polluters", ",".join(entry["diagnosis"]["polluters"])))
        if entry["leaks"]:
            found.append(("leaks", ",".join(leak["item"] for leak in entry["leaks"])))
            found.append(("leaks_restored", str(entry["leaks_restored"]).lower()))
        if entry["shuffle_seed"] is not None:
            found.append(("shuffle_seed", str(entry["shuffle_seed"])))
        if entry["world"] is not None:
            found.append(("world", entry["world"]))
            found.append(("world_restarts", str(entry["world_restarts"])))
            if entry["restarts_world"]:
                found.append(("restarts_world", "true"))
        return found


def failing_ranks(verdict: Any) -> List[int]:
    """The ranks that did not pass in ``verdict`` (its error's and its subtests'), sorted."""
    return _ranks(verdict, verdict_report.failing_ranks)


def raising_ranks(verdict: Any) -> List[int]:
    """The ranks whose own code raised in ``verdict`` (its error's and its subtests'), not those that waited, sorted."""
    return _ranks(verdict, verdict_report.raising_ranks)


def _ranks(verdict: Any, which: Callable[[dict], List[int]]) -> List[int]:
    errors = [verdict.error] + [sub.error for _, sub in getattr(verdict, "subtests", ())]
    ranks: set = set()
    for error in errors:
        ranks.update(which(getattr(error, "ct_ranks", None) or {}))
    return sorted(ranks)


def _leaks(outcomes: dict) -> List[dict]:
    """One entry per changed item: which ranks changed it, and whether it was put back everywhere."""
    found: Dict[str, dict] = {}
    for rank, outcome in sorted(outcomes.items()):
        report = getattr(outcome, "leaks", None)
        for leak in getattr(report, "leaks", ()):
            entry = found.setdefault(leak.item, {"item": leak.item, "ranks": [], "restored": True,
                                                 "before": leak.before, "after": leak.after})
            entry["ranks"].append(rank)
            entry["restored"] = entry["restored"] and leak.restored
    return list(found.values())


def merge(parts: List[dict]) -> dict:
    """One report from the parts of several processes (xdist's workers, and the main process)."""
    parts = [p for p in parts if p]
    if not parts:
        return RunLog().as_dict()
    merged = dict(parts[0], worlds=[], tests=[], runs=[], workers=[])
    for part in parts:
        for key in ("worlds", "tests", "runs", "workers"):
            merged[key] = merged[key] + part.get(key, [])
    merged["started"] = min(p["started"] for p in parts)
    merged["finished"] = max(p["finished"] for p in parts)
    merged["tests"].sort(key=lambda t: t["start"])
    merged["runs"].sort(key=lambda r: r["start"])
    return merged


def write(report: dict, path: str) -> None:
    """Write ``report`` to ``path`` as JSON (``wire/files.write_text``: a reader never sees half of a
    regular file; a device, a FIFO or a link's target is written in place of being replaced)."""
    files.write_text(path, json.dumps(report, indent=1, sort_keys=True) + "\n")


def all_skipped_line(tallies: Iterable[dict]) -> Optional[str]:
    """The line that ends a run whose every distributed test skipped for want of devices or a backend, else None."""
    total, reasons = 0, {}  # type: ignore[var-annotated]
    for tally in tallies:
        total += tally["distributed"]
        for reason, n in tally["device_skips"].items():
            reasons[reason] = reasons.get(reason, 0) + n
    if total == 0 or sum(reasons.values()) != total:
        return None
    return ALL_SKIPPED.format(n=total, s="s" if total != 1 else "", reasons="; ".join(sorted(reasons)))


_LOG = RunLog()


def log() -> RunLog:
    """This process's run log."""
    return _LOG


def reset() -> RunLog:
    """Start a new run log (a pytest session starts one); returns it."""
    global _LOG
    _LOG = RunLog()
    return _LOG
