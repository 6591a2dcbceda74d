"""benchmarks/run.py keeps working: a --smoke run reports every scenario (no timing asserted)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

import helpers
from helpers import ROOT

RUN = ROOT / "benchmarks" / "run.py"
SMOKE_TIMEOUT = 600  # a guard against hangs, never a performance assertion
SCENARIOS = ("suite", "world_start", "negative", "faults", "memory")
# Rows of the smoke run's tables (N=2, 2 ranks), by their first column.
EXPECTED_ROWS = {
    "suite": [
        "N=2, 2 ranks, continuous: whole suite",
        "N=2, 2 ranks, continuous: suite part: first test (world start)",
        "N=2, 2 ranks, continuous: test phase per test",
        "N=2, 2 ranks, continuous: per test beyond floor",
        "N=2, 2 ranks, ours continuous vs torch fresh: whole suite",
        "N=2, 2 ranks, ours continuous vs torch fresh: test phase per test",
        "N=2, 2 ranks, fresh: test phase per test",
    ],
    "world_start": ["2 ranks: first test", "2 ranks: launch to first result"],
    "negative": ["2 ranks: per test"],
    "faults": [f"{kind}: fault to next test's {what}" for kind in ("assert", "exit", "hang")
               for what in ("body", "result")],
    "memory": ["controller peak RSS", "per-rank peak RSS (max over ranks)", "whole process tree PSS"],
}


class Smoke:
    """What one ``run.py --smoke`` run left: exit code, output and the JSON it wrote."""

    def __init__(self, returncode: int, stdout: str, stderr: str, data: dict) -> None:
        self.returncode, self.stdout, self.stderr, self.data = returncode, stdout, stderr, data

    def describe(self) -> str:
        return f"exit code {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr[-6000:]}"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Smoke:
    out = tmp_path_factory.mktemp("benchmarks") / "smoke.json"
    proc = subprocess.Popen([sys.executable, str(RUN), "--smoke", "--json", str(out)], cwd=str(ROOT),
                            env=helpers.scenario_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=SMOKE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"benchmarks/run.py --smoke did not finish within {SMOKE_TIMEOUT} s\n{stdout}\n{stderr[-6000:]}")
    data = json.loads(out.read_text()) if out.exists() else {}
    return Smoke(proc.returncode, stdout, stderr, data)


def test_smoke_run_succeeds(smoke):
    assert smoke.returncode == 0, smoke.describe()


def test_json_has_every_scenario_with_numbers(smoke):
    scenarios = smoke.data.get("scenarios", {})
    assert sorted(scenarios) == sorted(SCENARIOS), smoke.describe()
    for name in SCENARIOS:
        rows = {row["measurement"]: row for row in scenarios[name]}
        for label in EXPECTED_ROWS[name]:
            assert label in rows, f"{name}: no row {label!r}\n{smoke.describe()}"
            ours = rows[label]["ours"]
            assert ours is not None and isinstance(ours["median"], (int, float)), f"{name}: {label}: {ours}"


def test_json_compares_with_torch_and_the_floor(smoke):
    suite = {row["measurement"]: row for row in smoke.data["scenarios"]["suite"]}
    row = suite["N=2, 2 ranks, continuous: test phase per test"]
    assert isinstance(row["torch"]["median"], (int, float)), row
    assert isinstance(row["floor"]["median"], (int, float)), row
    assert isinstance(row["ratio"], (int, float)), row
    fresh = suite["N=2, 2 ranks, fresh: test phase per test"]
    assert isinstance(fresh["torch"]["median"], (int, float)), fresh


def test_json_keeps_the_raw_runs_and_the_machine(smoke):
    meta = smoke.data["meta"]
    assert meta["cpus"] == os.cpu_count() and meta["smoke"] is True, meta
    assert {"torch", "python", "date"} <= set(meta), meta
    runs = smoke.data["runs"]
    systems = {run["system"] for run in runs}
    assert systems == {"ours-continuous", "torch-continuous", "ours-fresh", "torch-fresh", "floor"}, systems
    assert all(run["stamps"] for run in runs), [run["key"] for run in runs if not run["stamps"]]


def test_table_has_the_expected_rows(smoke):
    lines = smoke.stdout.splitlines()
    for title in ("1. Suite time", "2. World start", "3. Negative tests", "4. Faults", "5. Memory"):
        assert title in lines, smoke.describe()
    for labels in EXPECTED_ROWS.values():
        for label in labels:
            assert any(line.startswith(label + "  ") for line in lines), f"no row {label!r}\n{smoke.describe()}"


def test_every_target_says_met_or_missed(smoke):
    targets = smoke.data["targets"]
    assert targets, smoke.describe()
    for target in targets:
        assert target["status"] == "met" or target["status"].startswith("MISSED"), target
    summary = [line for line in smoke.stdout.split("Targets:", 1)[1].splitlines() if line.startswith("  ")]
    assert len(summary) == len(targets), smoke.describe()


def test_a_progress_line_per_measurement(smoke):
    progress = [line for line in smoke.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == len(smoke.data["runs"]), smoke.describe()
    assert progress[-1].startswith(f"[{len(progress)}/{len(progress)}] rep 1/1 "), progress[-1]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
