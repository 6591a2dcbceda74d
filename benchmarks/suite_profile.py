"""Where the suite's time goes: wall time and CPU time (its own and its children's) per test.

As a pytest plugin it appends one JSON line per test to ``$CT_SUITE_PROFILE_DIR/<worker>.jsonl``::

    CT_SUITE_PROFILE_DIR=/tmp/prof PYTHONPATH=benchmarks python -m pytest -p suite_profile -n 4 --dist loadgroup test

As a script it sums those lines by test file, heaviest first::

    python benchmarks/suite_profile.py /tmp/prof

and with ``--durations FILE`` also writes each test's wall time to FILE, the record by
which ``test/conftest.py`` hands the longest tests out first (``test/durations.json``).

A child's CPU time counts once the child is reaped (``RUSAGE_CHILDREN``): a scenario's
interpreter when its run ends, ranks forked from a template when that template is reaped.
``idle`` is wall time spent neither here nor in children: sleeps, timeouts, waits on locks.
"""
from __future__ import annotations

import collections
import glob
import json
import os
import resource
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, TextIO

ENV_DIR = "CT_SUITE_PROFILE_DIR"
_out: Optional[TextIO] = None


def _cpu() -> tuple:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _sink() -> Optional[TextIO]:
    global _out
    folder = os.environ.get(ENV_DIR)
    if _out is None and folder:
        os.makedirs(folder, exist_ok=True)
        _out = open(os.path.join(folder, os.environ.get("PYTEST_XDIST_WORKER", "main") + ".jsonl"), "a")
    return _out


try:
    import pytest
except ImportError:  # the summary needs no pytest
    pytest = None  # type: ignore[assignment]
else:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
        wall0, (own0, kids0) = time.monotonic(), _cpu()
        yield
        (own1, kids1), sink = _cpu(), _sink()
        if sink is not None:
            sink.write(json.dumps({"id": item.nodeid, "wall": time.monotonic() - wall0,
                                   "self": own1 - own0, "kids": kids1 - kids0}) + "\n")
            sink.flush()


def _rows(folder: str) -> List[Dict[str, Any]]:
    return [json.loads(line) for path in sorted(glob.glob(os.path.join(folder, "*.jsonl"))) for line in open(path)]


def durations(folder: str) -> Dict[str, float]:
    """Each test's wall time (setup, call and teardown), by node id, to a tenth of a second."""
    return {row["id"]: round(row["wall"], 1) for row in sorted(_rows(folder), key=lambda row: row["id"])}


def summary(folder: str) -> List[str]:
    """The table: one line per test file, heaviest wall time first, and a total."""
    rows = _rows(folder)
    by_file: Dict[str, List[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for row in rows:
        sums = by_file[row["id"].split("::")[0]]
        for i, key in enumerate(("wall", "self", "kids")):
            sums[i] += row[key]
        sums[3] += 1
    lines = [f"{'file':40s} {'tests':>5s} {'wall':>7s} {'self':>7s} {'kids':>7s} {'idle':>7s}"]
    for name, (wall, own, kids, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{name:40s} {n:5.0f} {wall:7.1f} {own:7.1f} {kids:7.1f} {wall - own - kids:7.1f}")
    total = [sum(r[k] for r in rows) for k in ("wall", "self", "kids")]
    lines.append(f"{'all':40s} {len(rows):5d} {total[0]:7.1f} {total[1]:7.1f} {total[2]:7.1f} "
                 f"{total[0] - total[1] - total[2]:7.1f}")
    cores = len(os.sched_getaffinity(0))
    lines.append(f"on {cores} cores the CPU alone takes at least {(total[1] + total[2]) / cores:.0f} s of wall time")
    return lines


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (1, 3) or (len(args) == 3 and args[1] != "--durations"):
        sys.exit(f"usage: python {sys.argv[0]} FOLDER [--durations FILE] (FOLDER: where CT_SUITE_PROFILE_DIR pointed)")
    print("\n".join(summary(args[0])))
    if len(args) == 3:
        with open(args[2], "w") as f:
            json.dump(durations(args[0]), f, indent=0)
            f.write("\n")
