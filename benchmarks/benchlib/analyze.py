"""Turning runs into figures: per-run metrics from stamps, then medians and spreads.

Definitions (every system gets the same ones, all from the controller's stamps
unless noted):

* ``wall_s``: launch to exit of the whole ``python <scenario>.py`` subprocess;
  ``startup_s``: launch to the first test's start; ``stop_s``: the class's
  ``tearDownClass`` (continuous classes stop their world there); ``exit_s``: from
  then to the process's exit.
* ``first_test_s`` (world start): start of the first test's ``run()`` in the
  controller to the end of it.  It holds whatever the class does lazily for its
  first test: starting the template or spawning interpreters, joining the process
  group, and the trivial first test itself.
* ``phase_s`` (test phase): end of the first test to the end of the last, i.e. the
  steady state over ``n - 1`` tests, with process start and world start excluded;
  ``per_test_s = phase_s / (n - 1)``.
* faults: ``next_start_s`` runs from the ``fault`` stamp of the faulty rank to rank
  0 starting the next test's body; ``next_result_s`` to the controller recording
  the next test's outcome.
* ``negative_test_s`` (negative runs: a ``MultiProcessTestCase`` suite whose every
  test is stamped): the median over its tests but the first (which may start the
  template) of each test's start of ``run()`` to its end in the controller: what one
  user's fresh-world test costs.
* floors (scenarios/floor.py, in one test of a running world): ``collective_per_body_s``
  and ``fresh_per_body_s``, the loops' time per body; ``fresh_median_s``, the median
  fresh body but the first; ``world_s``, joining a world
  (init_process_group and one all_reduce) in ranks already up.  ``import`` floors:
  ``imported_s``, from launching ``python -c "import torch; import <test module>"``
  to the end of its imports (its exit is not part of what a test waits for).
* memory: VmHWM (peak resident set) and Pss of every process of the tree, read in
  the controller after the last test while the ranks still live.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional

from benchlib.measure import RunRecord

__all__ = ["Stat", "run_metrics", "collect"]


@dataclass(frozen=True)
class Stat:
    """Median and min-max spread of one metric over repetitions."""

    median: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Optional["Stat"]:
        """The stat of ``values``, or None when there are none."""
        data = [float(v) for v in values if v is not None]
        if not data:
            return None
        return cls(statistics.median(data), min(data), max(data), len(data))

    def as_dict(self) -> Dict[str, float]:
        """For the JSON file."""
        return {"median": self.median, "min": self.lo, "max": self.hi, "n": self.n}


def run_metrics(record: RunRecord) -> Dict[str, Any]:
    """The metrics of one run; empty for a run that failed to measure."""
    if record.error:
        return {}
    if record.scenario == "suite":
        return _suite_metrics(record)
    if record.scenario == "negative":
        return _negative_metrics(record)
    if record.scenario == "floor":
        return _floor_metrics(record)
    if record.scenario == "fault":
        return _fault_metrics(record)
    if record.scenario == "import":
        return _import_metrics(record)
    raise ValueError(f"unknown scenario {record.scenario!r}")


def _controller_events(record: RunRecord) -> Dict[tuple, Dict[str, Any]]:
    return {(s["event"], s.get("test")): s for s in record.stamps if s["event"] in ("test_start", "test_end")}


def _suite_metrics(record: RunRecord) -> Dict[str, Any]:
    n = int(record.params["n"])
    events = _controller_events(record)
    first, last = "test_0000", f"test_{n - 1:04d}"
    start0 = events.get(("test_start", first))
    end0 = events.get(("test_end", first))
    end_n = events.get(("test_end", last))
    if start0 is None or end0 is None or end_n is None:
        record.error = "the first or last test left no stamps"
        return {}
    metrics: Dict[str, Any] = {
        "wall_s": record.wall_s,
        "startup_s": start0["t"] - record.launched_at,
        "first_test_s": end0["t"] - start0["t"],
        "launch_to_first_s": end0["t"] - record.launched_at,
    }
    if n > 1:
        metrics["phase_s"] = end_n["t"] - end0["t"]
        metrics["per_test_s"] = metrics["phase_s"] / (n - 1)
    teardown = {s["event"]: s["t"] for s in record.stamps if s["event"].startswith("class_teardown")}
    if len(teardown) == 2:
        metrics["stop_s"] = teardown["class_teardown_end"] - teardown["class_teardown_start"]
        metrics["exit_s"] = record.launched_at + record.wall_s - teardown["class_teardown_end"]
    metrics.update(_memory_metrics(record, controller_pid=start0["pid"]))
    return metrics


def _negative_metrics(record: RunRecord) -> Dict[str, Any]:
    n = int(record.params["n"])
    events = _controller_events(record)
    tests = []
    for name in [f"test_{i:04d}" for i in range(1, n)]:
        start, end = events.get(("test_start", name)), events.get(("test_end", name))
        if start is None or end is None or end.get("status") != "pass":
            record.error = f"{name} left no stamps or did not pass"
            return {}
        tests.append(end["t"] - start["t"])
    if not tests:
        record.error = "a negative run needs at least 2 tests"
        return {}
    return {"wall_s": record.wall_s, "negative_test_s": statistics.median(tests)}


def _memory_metrics(record: RunRecord, controller_pid: int) -> Dict[str, Any]:
    tree = [s for s in record.stamps if s["event"] == "tree_memory"]
    ranks = {s["pid"]: s for s in record.stamps if s["event"] == "rank_memory"}
    if not tree:
        return {}
    procs = {p["pid"]: p for p in tree[-1]["procs"] if p.get("hwm_kb") is not None}
    rank_hwm = [procs.get(pid, stamp).get("hwm_kb") for pid, stamp in ranks.items()]
    others = [p for pid, p in procs.items() if pid != controller_pid and pid not in ranks]
    return {
        "controller_hwm_mb": procs.get(controller_pid, {}).get("hwm_kb", 0) / 1024,
        "rank_hwm_mb": max(rank_hwm) / 1024 if rank_hwm else None,
        "others_hwm_mb": sum(p["hwm_kb"] for p in others) / 1024,
        "others_count": len(others),
        "tree_pss_mb": sum(p.get("pss_kb") or 0 for p in procs.values()) / 1024,
    }


def _floor_metrics(record: RunRecord) -> Dict[str, Any]:
    by_event: Dict[str, List[Dict[str, Any]]] = {}
    for s in record.stamps:
        by_event.setdefault(s["event"], []).append(s)
    if not all(k in by_event for k in ("floor_world", "floor_collective", "floor_fresh")):
        record.error = "the floor left no timings"
        return {}
    collective, fresh = by_event["floor_collective"][0], by_event["floor_fresh"][0]
    metrics: Dict[str, Any] = {
        "wall_s": record.wall_s,
        "world_s": min(s["seconds"] for s in by_event["floor_world"]),
        "collective_per_body_s": collective["seconds"] / max(1, collective["n"]),
    }
    if fresh["n"] > 1:  # one fresh body is only the join (world_s)
        metrics["fresh_per_body_s"] = fresh["seconds"] / fresh["n"]
    if fresh.get("bodies"):
        metrics["fresh_median_s"] = statistics.median(fresh["bodies"])
    return metrics


def _import_metrics(record: RunRecord) -> Dict[str, Any]:
    imported = [s["t"] for s in record.stamps if s["event"] == "imported"]
    if not imported:
        record.error = "the imports left no stamp"
        return {}
    return {"wall_s": record.wall_s, "imported_s": imported[0] - record.launched_at}


def _fault_metrics(record: RunRecord) -> Dict[str, Any]:
    events = _controller_events(record)
    faults = [s for s in record.stamps if s["event"] == "fault"]
    metrics: Dict[str, Any] = {"wall_s": None if record.timed_out else record.wall_s,
                               "finished": not record.timed_out}
    if not faults:
        record.error = "the faulty test never ran its fault"
        return {}
    fault_t = faults[0]["t"]
    body = [s for s in record.stamps if s["event"] == "body_start"]
    if body:
        metrics["next_start_s"] = body[0]["t"] - fault_t
    next_end = events.get(("test_end", "test_c_healthy"))
    if next_end is not None:
        metrics["next_result_s"] = next_end["t"] - fault_t
        metrics["next_status"] = next_end.get("status")
    fault_end = events.get(("test_end", "test_b_fault"))
    if fault_end is not None:
        metrics["fault_status"] = fault_end.get("status")
    return metrics


def collect(records: Iterable[RunRecord]) -> Dict[str, Dict[str, List[Any]]]:
    """Metric values of every key over its repetitions, in run order."""
    values: Dict[str, Dict[str, List[Any]]] = {}
    for record in records:
        slot = values.setdefault(record.key, {})
        for name, value in run_metrics(record).items():
            slot.setdefault(name, []).append(value)
    return values
