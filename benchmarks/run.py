"""Suite-time benchmarks of continuous_test beside torch's own classes, in one run.

Usage::

    python benchmarks/run.py [--repeat N] [--json PATH] [--smoke] [--update-readme]
    python benchmarks/run.py --report-from PATH [--update-readme]   # re-tabulate, measure nothing

With --update-readme the README's section is rewritten from this run, its raw
JSON is kept as benchmarks/results/readme.json (with the commit it measured)
and its figure as benchmarks/results/benchmarks.png: every figure the README
shows comes from that file.

How data flows::

    plan.schedule ──(rep, job)──► measure.run_job ──► python scenarios/<file>.py
                                        │                (stamps file, exit, wall time)
                                        ▼
                                   RunRecord ──► analyze.collect ──► report.build ──► table
                                                         │                         ├─► JSON
                                                         └─► plot.draw (PNG)       └─► docs/benchmarks.rst

Each scenario runs for ``continuous_test``'s classes, torch's
``torch.testing._internal.common_distributed`` classes and a floor (the same
bodies in plain ranks) in the same run, the systems alternating, every
measurement repeated.  A line per measurement goes to stderr as it finishes.
Exit status: 0 when every measurement produced its figures (missed targets
included: a benchmark is not a test), 1 otherwise.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO, Tuple

# benchlib lives next to this file; continuous_test in the checkout above it.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from benchlib import analyze, plot, readme, report  # noqa: E402
from benchlib import plan as plans  # noqa: E402
from benchlib.measure import ROOT, RunRecord, run_job  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_JSON = RESULTS / "latest.json"
README_JSON = RESULTS / "readme.json"  # the run the docs show, committed
FIGURE = RESULTS / "benchmarks.png"
# The full tables live in docs/; README.rst quotes a few rows (test/test_readme.py keeps them equal).
README = ROOT / "docs" / "benchmarks.rst"


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    """The command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of every measurement (default 3)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"raw results (default {DEFAULT_JSON})")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition: keeps the scripts working")
    parser.add_argument("--update-readme", action="store_true", help="rewrite the results section of docs/benchmarks.rst")
    parser.add_argument("--only", metavar="REGEX", help="run only the jobs whose progress name matches (a partial run)")
    parser.add_argument("--report-from", type=Path, metavar="JSON",
                        help="measure nothing: rebuild the tables (and docs/benchmarks.rst) from the runs of an earlier --json file")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    return args


def machine() -> Dict[str, Any]:
    """Where the figures come from."""
    import torch

    return {
        "commit": _git("rev-parse", "HEAD"),
        # Uncommitted changes outside benchmarks/results when the run started: the
        # commit alone would not say what was measured.
        "dirty": bool(_git("status", "--porcelain", "--", ".", ":!benchmarks/results")),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.date.today().isoformat(),
    }


def _git(*args: str) -> str:
    import subprocess

    try:
        return subprocess.run(["git", *args], cwd=str(ROOT), capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def execute(plan: plans.Plan, progress: TextIO, only: Optional[str] = None) -> List[RunRecord]:
    """Run every scheduled job (or those ``only`` matches), printing a line per measurement."""
    import re

    order = [(rep, job) for rep, job in plans.schedule(plan) if not only or re.search(only, plans.describe(job))]
    records = []
    for i, (rep, job) in enumerate(order, 1):
        record = run_job(job, rep)
        records.append(record)
        progress.write(f"[{i}/{len(order)}] rep {rep + 1}/{plan.repeat} {plans.describe(job)}: {_summary(record)}\n")
        progress.flush()
    return records


def _summary(record: RunRecord) -> str:
    metrics = analyze.run_metrics(record)
    if record.error:
        tail = "".join(f"    | {line}\n" for line in record.output_tail[-1500:].splitlines())
        return f"ERROR: {record.error}; the output's tail:\n{tail}".rstrip("\n")
    parts = ["did not finish within %g s" % record.cap_s if record.timed_out else f"wall {record.wall_s:.2f} s"]
    for name, unit, scale in (("first_test_s", "s", 1), ("per_test_s", "ms", 1000), ("world_s", "s", 1),
                              ("collective_per_body_s", "ms", 1000), ("fresh_per_body_s", "ms", 1000),
                              ("fresh_median_s", "ms", 1000), ("negative_test_s", "ms", 1000),
                              ("next_start_s", "s", 1), ("next_result_s", "s", 1)):
        if name in metrics:
            parts.append(f"{name} {metrics[name] * scale:.3g} {unit}")
    if "next_status" in metrics:
        parts.append(f"next test {metrics['next_status']}")
    return ", ".join(parts)


def results_json(records: List[RunRecord], values: Dict[str, Any], sections: List[report.Section],
                 meta: Dict[str, Any]) -> Dict[str, Any]:
    """Everything the run measured: raw runs, per-key metric values and the tables' figures."""
    return {
        "meta": meta,
        "scenarios": {s.key: [row.as_dict() for row in s.rows] for s in sections},
        "targets": [{"scenario": s.key, **row.as_dict()} for s in sections for row in s.rows if row.status],
        "metrics": values,
        "runs": [asdict(r) for r in records],
    }


def readme_content(text: str, meta: Dict[str, Any], plan: plans.Plan, figure: bool) -> str:
    """The results section of docs/benchmarks.rst: how the figures were made, the figure, then the tables."""
    import textwrap

    reps = f"{plan.repeat} repetition" + ("s" if plan.repeat != 1 else "")
    commit = meta.get("commit") or "unknown"
    state = " plus uncommitted changes" if meta.get("dirty") else ""
    intro = (
        f"Measured by ``python benchmarks/{meta['command']}`` on {meta['date']} at commit {commit[:12]}{state}: "
        f"{meta['cpus']} CPU cores (os.cpu_count()), torch {meta['torch']}, Python {meta['python']}, gloo "
        f"on CPU; {reps}, median (min-max), floors the best repetition; the run took "
        f"{meta['duration_s'] / 60:.1f} min.  Raw results: ``benchmarks/results/readme.json``.  Regenerate "
        "with ``python benchmarks/run.py --update-readme``; ``benchmarks/README.rst`` explains the "
        "scenarios.  Figures come from a shared machine and vary from run to run."
    )
    parts = [textwrap.fill(intro, 92, break_on_hyphens=False, break_long_words=False)]
    if figure:
        parts.append(f".. image:: ../benchmarks/results/{FIGURE.name}\n   :alt: suite time against N, and world "
                     "start against world size")
    return "\n\n".join(parts) + "\n\n" + text.strip("\n")


def load(path: Path) -> Tuple[plans.Plan, Dict[str, Any], List[RunRecord]]:
    """The plan, machine and runs of an earlier run's JSON file (for --report-from)."""
    data = json.loads(path.read_text())
    meta = data["meta"]
    plan = plans.Plan.smoke_plan() if meta["smoke"] else plans.Plan.full(meta["repeat"])
    return plan, meta, [RunRecord(**run) for run in data["runs"]]


def measure(args: argparse.Namespace, argv: List[str]) -> Tuple[plans.Plan, Dict[str, Any], List[RunRecord]]:
    """Run the plan the command line asks for (or load an earlier run's)."""
    if args.report_from:
        return load(args.report_from)
    plan = plans.Plan.smoke_plan() if args.smoke else plans.Plan.full(args.repeat)
    started = time.monotonic()
    meta = dict(machine(), repeat=plan.repeat, smoke=plan.smoke, command=" ".join(["run.py"] + argv))
    records = execute(plan, sys.stderr, args.only)
    meta["duration_s"] = time.monotonic() - started
    return plan, meta, records


def main(argv: Optional[List[str]] = None) -> int:
    """Run the benchmarks and report; see the module docstring."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    plan, meta, records = measure(args, argv)
    values = analyze.collect(records)
    sections = report.build(values, plan)
    table = report.render(sections)
    print(table)
    print("Targets:")
    print("\n".join("  " + line for line in report.summary_lines(sections)))
    errors = [r for r in records if r.error]
    for record in errors:
        print(f"ERROR: {record.key} (repetition {record.rep + 1}): {record.error}")
    data = json.dumps(results_json(records, values, sections, meta), indent=1)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(data)
    print(f"Raw results: {args.json}; the measurements took {meta['duration_s']:.0f} s")
    figure_path = FIGURE if args.update_readme else args.json.with_suffix(".png")
    why_not = plot.draw(values, plan, figure_path, f"continuous_test benchmarks, {meta['date']}, commit "
                        f"{(meta.get('commit') or 'unknown')[:12]}, {meta['cpus']} CPU cores")
    print(why_not or f"Figure: {figure_path}")
    if args.update_readme:
        README_JSON.write_text(data)
        readme.update(README, readme_content(table, meta, plan, figure=why_not is None))
        print(f"Updated {README}; its raw results: {README_JSON}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
