"""benchmarks/run.py keeps working: a --smoke run reports every scenario (no timing asserted)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import helpers
import pytest
from helpers import ROOT

RUN = ROOT / "benchmarks" / "run.py"
SMOKE_TIMEOUT = 600  # a guard against hangs, never a performance assertion
SCENARIOS = ("suite", "world_start", "negative", "dispatch", "faults", "memory")
# Rows of the smoke run's tables (N=2, 2 ranks), by their first column.
EXPECTED_ROWS = {
    "suite": [
        "N=2, 2 ranks, continuous: whole suite",
        "N=2, 2 ranks, continuous: suite part: first test (world start)",
        "N=2, 2 ranks, continuous: per test",
        "N=2, 2 ranks, fresh: per test",
        "N=2, 2 ranks, ours continuous vs torch fresh: whole suite",
    ],
    "world_start": ["launch floor: import torch and the test module", "2 ranks: first test",
                    "2 ranks: launch to first result"],
    "negative": ["2 ranks, fork template: per test (median)", "2 ranks, forkserver template: per test (median)",
                 "2 ranks: per test", "2 ranks: per test beyond floor"],
    "dispatch": ["2 ranks: per test", "2 ranks: per test beyond floor"],
    "faults": [f"{kind}: fault to next test's {what}" for kind in ("assert", "exit", "hang")
               for what in ("body", "result")],
    "memory": ["controller peak RSS", "per-rank peak RSS (max over ranks)", "whole process tree PSS"],
}
FIGURE_UNIT = re.compile(r"^-?[\d.]+(?: \([\d.-]+-[\d.-]+\))? (s|ms|MB)$|^-?[\d./]+x(?: \(1/\d+\))?$|^-$")


class Smoke:
    """What one ``run.py --smoke`` run left: exit code, output and the JSON it wrote."""

    def __init__(self, returncode: int, stdout: str, stderr: str, data: dict) -> None:
        self.returncode, self.stdout, self.stderr, self.data = returncode, stdout, stderr, data

    def describe(self) -> str:
        return f"exit code {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr[-6000:]}"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Smoke:
    out = tmp_path_factory.mktemp("benchmarks") / "smoke.json"
    proc = subprocess.Popen([helpers.interpreter(), str(RUN), "--smoke", "--json", str(out)], cwd=str(ROOT),
                            env=helpers.scenario_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=SMOKE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"benchmarks/run.py --smoke did not finish within {SMOKE_TIMEOUT} s\n{stdout}\n{stderr[-6000:]}")
    data = json.loads(out.read_text()) if out.exists() else {}
    figure = out.with_suffix(".png")
    if figure.exists():
        figure.unlink()
    return Smoke(proc.returncode, stdout, stderr, data)


@pytest.mark.e2e
def test_smoke_run_succeeds(smoke):
    assert smoke.returncode == 0, smoke.describe()


@pytest.mark.e2e
def test_json_has_every_scenario_with_numbers(smoke):
    scenarios = smoke.data.get("scenarios", {})
    assert sorted(scenarios) == sorted(SCENARIOS), smoke.describe()
    for name in SCENARIOS:
        rows = {row["measurement"]: row for row in scenarios[name]}
        for label in EXPECTED_ROWS[name]:
            assert label in rows, f"{name}: no row {label!r}\n{smoke.describe()}"
            ours = rows[label]["ours"]
            assert ours is not None and isinstance(ours["median"], (int, float)), f"{name}: {label}: {ours}"


@pytest.mark.e2e
def test_json_compares_with_torch_and_the_floor(smoke):
    suite = {row["measurement"]: row for row in smoke.data["scenarios"]["suite"]}
    row = suite["N=2, 2 ranks, continuous: per test"]
    assert isinstance(row["torch"]["median"], (int, float)), row
    assert isinstance(row["floor"]["median"], (int, float)), row
    assert isinstance(row["ratio"], (int, float)), row
    fresh = suite["N=2, 2 ranks, fresh: per test"]
    assert isinstance(fresh["torch"]["median"], (int, float)), fresh


@pytest.mark.e2e
def test_json_keeps_the_raw_runs_and_the_machine(smoke):
    meta = smoke.data["meta"]
    assert meta["cpus"] == os.cpu_count() and meta["smoke"] is True, meta
    assert {"torch", "python", "date", "commit", "dirty"} <= set(meta), meta
    runs = smoke.data["runs"]
    systems = {run["system"] for run in runs}
    assert systems == {"ours-continuous", "torch-continuous", "ours-fresh", "torch-fresh", "floor"}, systems
    assert all(run["stamps"] for run in runs), [run["key"] for run in runs if not run["stamps"]]


@pytest.mark.e2e
def test_table_has_the_expected_rows(smoke):
    lines = smoke.stdout.splitlines()
    for title in ("1. Suite time", "2. World start", "3. Fresh world per test", "4. Per-test dispatch", "5. Faults",
                  "6. Memory"):
        assert title in lines, smoke.describe()
    for labels in EXPECTED_ROWS.values():
        for label in labels:
            assert any(line.startswith(label + "  ") for line in lines), f"no row {label!r}\n{smoke.describe()}"


@pytest.mark.e2e
def test_every_target_says_met_or_missed(smoke):
    targets = smoke.data["targets"]
    assert targets, smoke.describe()
    for target in targets:
        assert target["status"] in ("met", "invalid measurement") or target["status"].startswith("MISSED"), target
    summary = [line for line in smoke.stdout.split("Targets:", 1)[1].splitlines() if line.startswith("  ")]
    assert len(summary) == len(targets), smoke.describe()


@pytest.mark.e2e
def test_a_progress_line_per_measurement(smoke):
    progress = [line for line in smoke.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == len(smoke.data["runs"]), smoke.describe()
    assert progress[-1].startswith(f"[{len(progress)}/{len(progress)}] rep 1/1 "), progress[-1]


@pytest.mark.e2e
def test_every_figure_has_a_unit(smoke):
    for name, rows in smoke.data["scenarios"].items():
        for row in rows:
            for cell in row["cells"][1:6]:  # the figure and ratio columns
                if "not run" in cell or "skipped" in cell or "did not finish" in cell:
                    continue
                assert FIGURE_UNIT.match(cell), f"{name}: {row['measurement']}: cell {cell!r} has no unit"


@pytest.mark.e2e
def test_figures_are_sane(smoke):
    """No negative overhead and no floor above the system it bounds, unless the row says it is invalid."""
    for name, rows in smoke.data["scenarios"].items():
        for row in rows:
            assert row["unit"] in ("s", "ms", "MB"), row
            if row["status"] == "invalid measurement":
                continue
            for side in ("ours", "torch"):
                stat = row[side]
                if stat is None:
                    continue
                if row["overhead"]:
                    assert stat["median"] >= 0, f"{name}: {row['measurement']}: negative overhead {stat}"
                if row["floor"] is not None:
                    assert row["floor"]["min"] <= stat["median"], f"{name}: {row['measurement']}: floor above {side}"


def _on_benchmarks_path() -> None:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))


def _benchlib():
    _on_benchmarks_path()
    from benchlib import analyze, report

    return analyze, report


def test_a_figure_below_its_floor_is_invalid_never_met():
    analyze, report = _benchlib()
    ms = analyze.Stat.of
    row = report.Row("2 ranks: per test", "ms", ms([0.001] * 3), ms([0.004] * 3), floor=ms([0.002, 0.003, 0.002]))
    row.set_target("ours/floor <= 2", 2.0, judged="floor_ratio")
    assert row.status == report.MET  # 0.5 x the floor: "met", were the floor not checked
    row.check_floor()
    assert row.status == report.INVALID and row.invalid_because() == "ours below the floor"


def test_a_negative_overhead_is_invalid():
    analyze, report = _benchlib()
    row = report.Row("beyond floor", "ms", analyze.Stat.of([-0.0005, 0.0001, -0.0002]), analyze.Stat.of([0.005]),
                     overhead=True)
    row.set_target("ours/torch <= 0.5", 0.5)
    row.check_floor()
    assert row.status == report.INVALID and row.invalid_because() == "ours negative"


def test_a_floor_is_its_best_repetition_and_every_cell_has_a_unit():
    analyze, report = _benchlib()
    row = report.Row("per test", "ms", analyze.Stat.of([0.010, 0.012, 0.011]), analyze.Stat.of([0.020] * 3),
                     floor=analyze.Stat.of([0.004, 0.002, 0.003]))
    cells = row.cells()
    assert cells[1:6] == ["11.0 (10.0-12.0) ms", "20.0 (20.0-20.0) ms", "2.00 ms", "0.55x", "5.50x"], cells
    assert row.floor_ratio == pytest.approx(0.011 / 0.002)


@pytest.mark.e2e
def test_the_floor_leaves_nothing_behind(tmp_path):
    env = helpers.scenario_env({"TMPDIR": str(tmp_path), "BENCH_N": "2", "BENCH_N_FRESH": "2",
                                "BENCH_STAMPS": str(tmp_path / "stamps.jsonl")})
    proc = subprocess.run([sys.executable, "floor.py"], cwd=str(ROOT / "benchmarks" / "scenarios"), env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=helpers.RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stamps.jsonl"]


@pytest.mark.e2e
def test_leak_benchmark_reports_every_figure(tmp_path):
    out = tmp_path / "leaks.json"
    proc = helpers.run([sys.executable, str(ROOT / "benchmarks" / "leaks.py"), "--repeat", "1", "--tests", "3",
                        "--loops", "10", "--json", str(out)], timeout=SMOKE_TIMEOUT)
    assert proc.returncode == 0, helpers.describe(proc)
    for line in ("snapshot + compare per test, slower rank:", "CPU time of the same, slower rank:",
                 "suite of 3 trivial tests, per test: off", "CPU time of the slower rank's thread per test"):
        assert line in proc.stdout, helpers.describe(proc)
    raw = json.loads(out.read_text())
    assert raw["suite_cpu_us_off"] > 0 and raw["suite_cpu_us_restore"] > 0, raw


@pytest.mark.e2e
def test_rpc_floor_times_every_row_from_the_ranks_stamps(tmp_path):
    out = tmp_path / "rpc_floor.json"
    proc = helpers.run([sys.executable, str(ROOT / "benchmarks" / "rpc_floor.py"), "--tests", "3", "--json", str(out)],
                       timeout=SMOKE_TIMEOUT)
    assert proc.returncode == 0, helpers.describe(proc)
    rows = json.loads(out.read_text())["rows"]
    assert list(rows) == ["torch, warm processes", "torch, fresh processes", "ours, shared world", "ours, fresh ranks"]
    for name, row in rows.items():
        assert len(row["intervals"]) == 2 and 0 < row["min_s"] <= row["median_s"] <= row["max_s"], (name, row)
        assert re.search(rf"^{re.escape(name)} +[\d.]+( +[+-][\d.]+ ms)?$", proc.stdout, re.M), helpers.describe(proc)
    assert "fresh ranks beyond shared (ours):" in proc.stdout, helpers.describe(proc)


def test_suite_profile_sums_each_file_and_bounds_the_run_by_its_cpu(tmp_path):
    # benchmarks/suite_profile.py's table: files by wall time, idle = wall - own - children's CPU,
    # and the CPU bound on this host's cores (benchmarks/README.rst quotes it).
    _on_benchmarks_path()
    import suite_profile

    lines = [{"id": "test/a.py::t1", "wall": 2.0, "self": 0.5, "kids": 1.0},
             {"id": "test/b.py::t", "wall": 9.0, "self": 1.0, "kids": 6.0},
             {"id": "test/a.py::t2", "wall": 3.0, "self": 0.5, "kids": 1.0}]
    (tmp_path / "gw0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines[:2]))
    (tmp_path / "gw1.jsonl").write_text(json.dumps(lines[2]) + "\n")
    table = [line.split() for line in suite_profile.summary(str(tmp_path))]
    assert table[1] == ["test/b.py", "1", "9.0", "1.0", "6.0", "2.0"], table
    assert table[2] == ["test/a.py", "2", "5.0", "1.0", "2.0", "2.0"], table
    assert table[3] == ["all", "3", "14.0", "2.0", "8.0", "4.0"], table
    cores = len(os.sched_getaffinity(0))
    assert table[4][-5] == str(round(10.0 / cores)) and table[4][1] == str(cores), table
    assert suite_profile.durations(str(tmp_path)) == {"test/a.py::t1": 2.0, "test/a.py::t2": 3.0, "test/b.py::t": 9.0}


def test_the_suite_hands_out_its_longest_work_first(tmp_path):
    # test/conftest.py's order for --dist loadgroup: units by recorded time, longest first; a shared run's
    # tests (those that take a module-scoped fixture) are one unit, together and in their order.
    import conftest

    source = tmp_path / "test_x.py"
    source.write_text("import pytest\n\n@pytest.fixture(scope='module')\ndef run():\n    pass\n\n"
                      "def test_a(run):\n    pass\n\ndef test_b():\n    pass\n\ndef test_c(run):\n    pass\n\n"
                      "def test_d():\n    pass\n")

    class Item:
        def __init__(self, name: str) -> None:
            self.nodeid = f"{source}::{name}"

    items = [Item(name) for name in ("test_a", "test_b", "test_c", "test_d")]
    seconds = {item.nodeid: s for item, s in zip(items, (2.0, 5.0, 2.5))}  # test_d: not recorded
    order = [item.nodeid.rpartition("::")[2] for item in conftest.longest_first(items, seconds)]  # type: ignore
    assert order == ["test_b", "test_a", "test_c", "test_d"], order  # 5 s, then the shared 4.5 s, then 1 s
    seconds[items[1].nodeid] = 4.0
    order = [item.nodeid.rpartition("::")[2] for item in conftest.longest_first(items, seconds)]  # type: ignore
    assert order == ["test_a", "test_c", "test_b", "test_d"], order


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
