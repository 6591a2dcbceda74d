"""Wall time of PyTorch-style DTensor and FSDP files on torch's derived bases and on ours.

Usage::

    python benchmarks/derived_bases.py [--repeat N] > benchmarks/results/derived_bases.txt

How data flows::

    JOBS ──► run_one ──► python test/compat/<file> (CT_COMPAT_BASE or CT_THREADS_SHAPE)
                │            (exit code, wall seconds, unittest's summary and verdicts)
                ▼
             Run ──► table (median wall time per file and engine, speed-up)

* ``test_dtensor_bases.py`` and ``test_fsdp_bases.py`` (``test/compat``) under torch's
  classes and under ours: the migration's speed-up, with the counts each run reported.
* ``threads_vs_processes.py``: the same ``DTensorOpTestBase``-style bodies on torch's
  threads and on our process world, with the verdicts of the two bodies that depend
  on state that threads share.

Every run is printed as it ends (the raw output), then the table.  Runs alternate
between engines so that a change in the machine's load hits both.  A benchmark,
not a test: the exit status is 0 unless a run produced no summary.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "test" / "compat"
TIMEOUT = 1200  # a guard against hangs

# (file, label, environment) per engine; the first of each pair is the reference.
JOBS: List[Tuple[str, str, Dict[str, str]]] = [
    ("test_dtensor_bases.py", "torch", {"CT_COMPAT_BASE": "torch"}),
    ("test_dtensor_bases.py", "ours", {"CT_COMPAT_BASE": "ours"}),
    ("test_fsdp_bases.py", "torch", {"CT_COMPAT_BASE": "torch"}),
    ("test_fsdp_bases.py", "ours", {"CT_COMPAT_BASE": "ours"}),
    ("threads_vs_processes.py", "threads", {"CT_THREADS_SHAPE": "threads"}),
    ("threads_vs_processes.py", "processes", {"CT_THREADS_SHAPE": "processes"}),
]


@dataclass
class Run:
    """One subprocess run of a file under one engine."""

    file: str
    label: str
    returncode: int
    wall: float
    ran_in: float  # unittest's own "Ran N tests in X s": the tests without interpreter start and imports
    summary: str
    not_passed: Tuple[str, ...]


def environment(extra: Dict[str, str]) -> Dict[str, str]:
    """The run's environment: this checkout first on the path, none of torch's CI switches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTINUOUS_TEST_") and k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def run_one(file: str, label: str, extra: Dict[str, str]) -> Run:
    """Run ``file`` once under one engine and read unittest's summary from its stderr."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, file], cwd=str(COMPAT), env=environment(extra), timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    ran = re.search(r"^Ran (\d+) tests? in ([\d.]+)s", proc.stderr, re.M)
    summary = re.search(r"^(OK|FAILED)(?: \(.*\))?$", proc.stderr, re.M)
    not_passed = tuple(sorted(set(re.findall(r"^(?:FAIL|ERROR): (\w+)", proc.stderr, re.M))))
    text = f"Ran {ran.group(1)}, {summary.group(0)}" if ran and summary else "no summary"
    return Run(file, label, proc.returncode, wall, float(ran.group(2)) if ran else float("nan"), text, not_passed)


def report(runs: List[Run]) -> str:
    """The table: median wall and in-test seconds per file and engine, and the speed-up of the second."""
    lines = [f"{'file':<26} {'engine':<10} {'runs':>4} {'wall s':>8} {'tests s':>8} {'speed-up':>8}  summary"]
    reference: Dict[str, float] = {}
    for file, label, _ in JOBS:
        mine = [r for r in runs if r.file == file and r.label == label]
        if not mine:
            continue
        wall = statistics.median(r.wall for r in mine)
        tests = statistics.median(r.ran_in for r in mine)
        speedup = f"{reference[file] / wall:.1f}x" if file in reference else "1.0x"
        reference.setdefault(file, wall)
        summaries = "; ".join(sorted({r.summary + (f" not passed: {', '.join(r.not_passed)}" if r.not_passed else "")
                                      for r in mine}))
        lines.append(f"{file:<26} {label:<10} {len(mine):>4} {wall:>8.1f} {tests:>8.1f} {speedup:>8}  {summaries}")
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    """Run every job ``--repeat`` times, alternating engines; print each run, then the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
    runs: List[Run] = []
    for rep in range(args.repeat):
        for file, label, extra in JOBS:
            run = run_one(file, label, extra)
            runs.append(run)
            print(f"run {rep + 1} {file} {label}: exit {run.returncode}, wall {run.wall:.1f} s, tests "
                  f"{run.ran_in:.1f} s, {run.summary}, not passed: {', '.join(run.not_passed) or '-'}, "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    print()
    print(report(runs))
    return 0 if all(r.summary != "no summary" for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
