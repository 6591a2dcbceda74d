"""Coverage across ranks: lines that only ranks execute show up in the controller's report."""
from __future__ import annotations

import json
import shutil
import sys

import helpers
import pytest
from helpers import SCENARIOS, describe

from continuous_test.controller import coverage as controller_coverage
from continuous_test.wire.env import ENV_COVERAGE

pytest.importorskip("coverage")
pytest.importorskip("pytest_cov")

TARGET = "coverage_target"
RUNNERS = {
    "pytest-cov": ["-m", "pytest", f"--cov={TARGET}", "--cov-report="],
    "pytest-cov-xdist": ["-m", "pytest", "-n", "2", f"--cov={TARGET}", "--cov-report="],
    "coverage-run": ["-m", "coverage", "run", f"--source={TARGET}", "-m", "pytest"],
}


def _marked_lines(marker: str) -> set:
    text = (SCENARIOS / f"{TARGET}.py").read_text()
    return {n for n, line in enumerate(text.splitlines(), 1) if marker in line}


@pytest.mark.e2e
@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_lines_run_only_in_ranks_are_covered(runner, tmp_path):
    # A private directory: the data files of one run never meet another's.
    for name in (f"{TARGET}.py", "test_coverage.py"):
        shutil.copy(SCENARIOS / name, tmp_path / name)
    args = [sys.executable, *RUNNERS[runner], "-p", "no:cacheprovider", "-q", "test_coverage.py"]
    proc = helpers.run(args, cwd=tmp_path, fresh=True)  # fresh: coverage starts with the interpreter
    assert proc.returncode == 0, describe(proc)
    assert helpers.pytest_counts(proc.stdout) == {"passed": 3}, describe(proc)
    # Every rank's data file was folded into the controller's data (newer `coverage
    # report` would combine leftovers itself, older versions and tools would not).
    assert sorted(p.name for p in tmp_path.glob(".coverage*")) == [".coverage"]
    report = helpers.run([sys.executable, "-m", "coverage", "json", "-o", "cov.json"], cwd=tmp_path)
    assert report.returncode == 0, describe(report)
    lines = json.loads((tmp_path / "cov.json").read_text())["files"][f"{TARGET}.py"]
    executed = set(lines["executed_lines"])
    assert _marked_lines("MultiProcContinuousTest rank") <= executed, lines
    assert _marked_lines("MultiProcessTestCase rank") <= executed, lines
    assert _marked_lines("the controller") <= executed, lines
    assert lines["missing_lines"] == [], lines


def test_ranks_get_no_settings_when_the_controller_is_not_measuring(monkeypatch):
    monkeypatch.setenv(ENV_COVERAGE, "stale")
    monkeypatch.setattr(controller_coverage, "_current", lambda: None)
    assert ENV_COVERAGE not in controller_coverage.rank_environment()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
