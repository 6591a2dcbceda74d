"""World scopes and fresh groups, beside torch's classes, in one run (docs/benchmarks.rst).

Usage::

    python benchmarks/world_scopes.py [--repeat N] [--classes 10] [--tests 2] [--n 40] [--out DIR]

Two measurements, every run a real ``python <scenario>.py`` whose wall time is taken
here, the systems alternating in each repetition:

* ``scenarios/scopes_classes.py``: a file of ``--classes`` classes of one size, ``--tests``
  tests each, on continuous_test with ``world_scope = "module"``, on continuous_test
  with a world per class, and on torch's ``MultiProcContinuousTest``
  (``torch.testing._internal.common_distributed``).  World starts are counted from
  the ranks' pids (distinct rank-0 pids).
* ``scenarios/fresh_groups.py``: one class of ``--n`` tests, all plain, all
  ``@fresh_group`` or all ``@fresh_world``.  A mark's cost per test is its run's wall
  time less the plain run's, over ``--n``.

Writes ``world_scopes.json`` (every run) and ``world_scopes.txt`` (the table) to
``--out`` (default benchmarks/results/).  Exit status 1 if a run failed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "benchmarks" / "scenarios"
SYSTEMS = ("ours_module", "ours_class", "torch")
MODES = ("plain", "fresh_group", "fresh_world")
CAP = 600  # seconds a run may take before its process group is killed


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(scenario: str, env: Dict[str, str]) -> Dict[str, object]:
    """One ``python scenario`` run: wall seconds, exit code, world starts (from BENCH_PIDS)."""
    with tempfile.TemporaryDirectory() as tmp:
        pids = os.path.join(tmp, "pids")
        full = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_PIDS": pids, **env}
        began = time.monotonic()
        child = subprocess.Popen([sys.executable, scenario], cwd=SCENARIOS, env=full, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = child.communicate(timeout=CAP)
        except subprocess.TimeoutExpired:
            _kill_group(child.pid)
            out, err = child.communicate()
            err += f"\n(killed at its cap of {CAP} s)"
        wall = time.monotonic() - began
        _kill_group(child.pid)  # whatever it left behind
        proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
        starts = None
        if os.path.exists(pids):
            with open(pids) as f:
                starts = len({line.split()[1] for line in f if line.split()[0] == "0"})
    ok = proc.returncode == 0 and "\nOK" in proc.stderr
    if not ok:
        sys.stderr.write(proc.stderr[-3000:])
    return {"scenario": scenario, "env": env, "wall": round(wall, 3), "rc": proc.returncode, "ok": ok,
            "world_starts": starts}


def _table(args: argparse.Namespace, runs: List[Dict[str, object]]) -> str:
    """The tables of both measurements, from every run."""
    def median(key: str, value: str) -> float:
        return statistics.median(float(r["wall"]) for r in runs if r.get(key) == value)  # type: ignore[arg-type]

    lines: List[str] = []
    if args.only != "groups":
        lines += [f"World scopes: a file of {args.classes} classes x {args.tests} tests, 2 ranks, gloo on cpu "
                  f"(median of {args.repeat})", "",
                  f"{'system':<48} {'wall (s)':>9} {'world starts':>13}"]
        names = {"ours_module": 'continuous_test, world_scope = "module"',
                 "ours_class": "continuous_test, a world per class", "torch": "torch MultiProcContinuousTest"}
        for system in SYSTEMS:
            starts = sorted({r["world_starts"] for r in runs if r.get("system") == system}, key=str)
            lines.append(f"{names[system]:<48} {median('system', system):>9.2f} {'/'.join(map(str, starts)):>13}")
        lines.append("")
    if args.only != "scopes":
        plain = median("mode", "plain")
        lines += [f"Fresh groups: one class of {args.n} tests, 2 ranks, gloo on cpu (median of {args.repeat})", "",
                  f"{'every test':<24} {'wall (s)':>9} {'per test (ms)':>14} {'cost over plain, per test (ms)':>31}"]
        extra = {}
        for mode in MODES:
            wall = median("mode", mode)
            extra[mode] = (wall - plain) / args.n * 1000
            lines.append(f"{mode:<24} {wall:>9.2f} {wall / args.n * 1000:>14.1f} {extra[mode]:>31.1f}")
        ratio = extra["fresh_group"] / extra["fresh_world"] if extra["fresh_world"] > 0 else float("nan")
        paired = []  # the same ratio within each repetition (its three runs back to back, under one load)
        for rep in range(args.repeat):
            wall = {r["mode"]: float(r["wall"]) for r in runs if r.get("rep") == rep and "mode" in r}  # type: ignore
            if wall.get("fresh_world", 0) > wall.get("plain", 0):
                paired.append((wall["fresh_group"] - wall["plain"]) / (wall["fresh_world"] - wall["plain"]))
        lines += ["", f"fresh_group's cost / fresh_world's cost, per test: {ratio:.2f} of the medians; "
                  f"per repetition {', '.join(f'{p:.2f}' for p in paired)} (median "
                  f"{statistics.median(paired) if paired else float('nan'):.2f}); target <= 0.33"]
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--tests", type=int, default=2)
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--only", choices=("scopes", "groups"), default=None, help="one of the two measurements")
    parser.add_argument("--name", default="world_scopes", help="results file names (default world_scopes)")
    args = parser.parse_args(argv)
    runs: List[Dict[str, object]] = []
    for rep in range(args.repeat):
        order = SYSTEMS if rep % 2 == 0 else tuple(reversed(SYSTEMS))
        for system in order if args.only != "groups" else ():
            r = run("scopes_classes.py", {"BENCH_SYSTEM": system, "BENCH_CLASSES": str(args.classes),
                                          "BENCH_TESTS": str(args.tests)})
            runs.append({"rep": rep, "system": system, **r})
            sys.stderr.write(f"rep {rep} {system}: {r['wall']} s, {r['world_starts']} world starts\n")
        for mode in (MODES if rep % 2 == 0 else tuple(reversed(MODES))) if args.only != "scopes" else ():
            r = run("fresh_groups.py", {"BENCH_MODE": mode, "BENCH_N": str(args.n)})
            runs.append({"rep": rep, "mode": mode, **r})
            sys.stderr.write(f"rep {rep} {mode}: {r['wall']} s\n")

    table = _table(args, runs)
    sys.stdout.write(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load": os.getloadavg(), "args": vars(args), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        import torch

        meta["torch"] = torch.__version__
    except ImportError:
        pass
    try:
        meta["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                        text=True).stdout.strip()
    except OSError:
        pass
    (out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")
    (out / f"{args.name}.txt").write_text(table)
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
