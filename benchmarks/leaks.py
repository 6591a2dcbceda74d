"""What leak detection costs per test, at 2 ranks (target: at most 0.2 ms per test).

Usage::

    python benchmarks/leaks.py [--repeat N] [--tests N] [--json PATH]

Two measurements, both in real 2-rank worlds (``scenarios/leak_snapshot.py``):

1. **Snapshot and compare**, inside the ranks: ``leaks.check(leaks.take())`` in a
   loop on both ranks at once, microseconds per test on each rank (the ranks run
   it in parallel, so this is the per-test cost at 2 ranks), as wall time and as
   the CPU time of the rank's thread (a loaded machine inflates wall time most).
2. **Suite difference**: the same file with N trivial tests under
   ``CONTINUOUS_TEST_LEAKS=off`` and ``restore``, alternating, ``--repeat`` times;
   the median wall time per test of each, and their difference.  Noisy on a
   loaded machine: (1) is the figure to quote, (2) checks nothing else costs.
   The same runs also give the CPU time of each rank's thread per test, in
   place: the harness and the body, with caches as cold as a collective leaves
   them, which is what a test really pays (the loop of (1) runs hot).

Prints the figures; raw runs go to the JSON file (default benchmarks/results/leaks.json).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCENARIO = HERE / "scenarios" / "leak_snapshot.py"
TARGET_US = 200.0


def run(env: Dict[str, str]) -> subprocess.CompletedProcess:
    """One run of the scenario file, bounded, with the checkout first on the path."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUOUS_TEST_") and k != "CI"}
    full.update(env, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(SCENARIO)], env=full, cwd=str(HERE / "scenarios"), timeout=900,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)


def snapshot_cost(loops: int) -> Dict[str, Dict[str, float]]:
    """Microseconds per test of snapshot + compare, per rank: wall and CPU time."""
    proc = run({"BENCH_LEAK_LOOPS": str(loops), "BENCH_LEAK_TESTS": "0"})
    found = re.findall(r"LEAK_COST rank=(\d+) us_per_test=([\d.]+) cpu_us_per_test=([\d.]+)", proc.stdout + proc.stderr)
    if proc.returncode != 0 or len(found) != 2:
        raise SystemExit(f"scenario failed:\n{proc.stdout}\n{proc.stderr}")
    return {f"rank {r}": {"wall": float(wall), "cpu": float(cpu)} for r, wall, cpu in sorted(found)}


def suite_time(tests: int, policy: str) -> Dict[str, float]:
    """Wall seconds per test of a suite of trivial tests under ``policy``, and the slower rank's CPU per test."""
    start = time.monotonic()
    proc = run({"BENCH_LEAK_LOOPS": "0", "BENCH_LEAK_TESTS": str(tests), "CONTINUOUS_TEST_LEAKS": policy})
    took = time.monotonic() - start
    cpu = re.findall(r"LEAK_SUITE_CPU rank=\d+ cpu_us_per_test=([\d.]+)", proc.stdout + proc.stderr)
    if proc.returncode != 0 or len(cpu) != 2:
        raise SystemExit(f"suite under {policy} failed:\n{proc.stderr[-3000:]}")
    return {"wall_s": took / tests, "cpu_us": max(float(c) for c in cpu)}


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tests", type=int, default=300)
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=HERE / "results" / "leaks.json")
    args = parser.parse_args(argv)
    raw: Dict[str, list] = {"snapshot_us": [], "suite_off_s": [], "suite_restore_s": []}
    for rep in range(args.repeat):
        raw["snapshot_us"].append(snapshot_cost(args.loops))
        for policy in (("off", "restore") if rep % 2 == 0 else ("restore", "off")):
            raw[f"suite_{policy}_s"].append(suite_time(args.tests, policy))
        print(f"repetition {rep + 1}/{args.repeat}: {raw['snapshot_us'][-1]}", file=sys.stderr, flush=True)
    per_rank = [max(r["wall"] for r in rep.values()) for rep in raw["snapshot_us"]]
    cpu_per_rank = [max(r["cpu"] for r in rep.values()) for rep in raw["snapshot_us"]]
    snapshot, cpu = statistics.median(per_rank), statistics.median(cpu_per_rank)
    off = statistics.median(r["wall_s"] for r in raw["suite_off_s"])
    restore = statistics.median(r["wall_s"] for r in raw["suite_restore_s"])
    cpu_off = statistics.median(r["cpu_us"] for r in raw["suite_off_s"])
    cpu_restore = statistics.median(r["cpu_us"] for r in raw["suite_restore_s"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"leak detection at 2 ranks ({args.repeat} repetitions, medians; min-max in brackets; "
          f"{os.cpu_count()} cores, load average {load:.1f} at the end)")
    print(f"  snapshot + compare per test, slower rank: {snapshot:.1f} us "
          f"[{min(per_rank):.1f}-{max(per_rank):.1f}]  target <= {TARGET_US:.0f} us: "
          f"{'met' if snapshot <= TARGET_US else 'MISSED'}")
    print(f"  CPU time of the same, slower rank: {cpu:.1f} us [{min(cpu_per_rank):.1f}-{max(cpu_per_rank):.1f}]  "
          f"target <= {TARGET_US:.0f} us: {'met' if cpu <= TARGET_US else 'MISSED'}")
    print(f"  suite of {args.tests} trivial tests, per test: off {off * 1e3:.2f} ms, restore {restore * 1e3:.2f} ms, "
          f"difference {(restore - off) * 1e3:+.2f} ms (noisy)")
    print(f"  the same suites, CPU time of the slower rank's thread per test (caches as a collective leaves them): "
          f"off {cpu_off:.1f} us, restore {cpu_restore:.1f} us, difference {cpu_restore - cpu_off:+.1f} us")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "raw": raw,
                                     "snapshot_us_median": snapshot, "snapshot_cpu_us_median": cpu, "load_average": load, "off_s": off, "restore_s": restore,
                                     "suite_cpu_us_off": cpu_off, "suite_cpu_us_restore": cpu_restore}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
