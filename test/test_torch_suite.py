"""torch's own distributed suite (distributed_test.py, from the torch wheel) on this engine.

``examples/test_torch_distributed_suite.py`` is torch's glue for it with the one
migration line.  The CI subset of ``benchmarks/torch_suite.py`` runs here under
pytest and must give, test by test, the verdicts torch's spawn runner gave, as
that script recorded them (``benchmarks/results/torch_suite_verdicts.json``).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
import pytest

import helpers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch_suite  # noqa: E402

ALL_RESULTS = torch_suite.RESULTS / "torch_suite_all.json"  # both engines' verdicts on all 285 tests, as recorded


def test_the_ci_subset_keeps_torchs_verdicts():
    recorded = json.loads(torch_suite.VERDICTS.read_text())
    assert (recorded["backend"], recorded["world_size"]) == ("gloo", 3)
    torch_verdicts = recorded["torch_verdicts"]
    assert sorted(torch_verdicts) == sorted(torch_suite.CI_SUBSET)
    run = torch_suite.run_engine("ours", torch_suite.CI_SUBSET, None)
    differ = torch_suite.verdicts_that_differ(torch_verdicts, run)
    assert not differ, f"(torch's verdict, ours) where they differ: {differ}; ours said: " + str(
        {name: run.messages.get(name) for name in differ})
    assert [verdict for verdict, _ in run.tests.values()].count("passed") >= 20  # a run where every test skipped cannot match


@pytest.mark.e2e
def test_python_file_v_with_k_patterns_prints_torchs_names_and_verdicts():
    # The glue runs as torch's spawn file does: python FILE -v -k PATTERN ..., unittest's
    # verbose lines with torch's test names; each verdict is the one torch's runner recorded.
    recorded = json.loads(ALL_RESULTS.read_text())["runs"]["torch"]["tests"]
    proc = helpers.run([sys.executable, str(torch_suite.SUITE), "-v", "-k", "test_all_reduce_sum", "-k", "test_get_backend"],
                       cwd=ROOT, env={"BACKEND": "gloo", "WORLD_SIZE": "3"})
    # The ranks' own output ([rank0] ... lines, torch's profiler's) comes between a test's name and its
    # verdict, as a spawned child's does under torch's runner.
    text = re.sub(r"\[rank\d+\][^\n]*\n", "", proc.stderr)
    lines = re.findall(r"^(test_\w+) \(__main__\.TestDistBackendWithSpawn\.\1\) \.\.\. (ok|skipped)", text, re.M)
    expected = {name: verdict for name, verdict in ((n, v["verdict"]) for n, v in recorded.items())
                if "test_all_reduce_sum" in name or "test_get_backend" in name}
    assert {name: {"ok": "passed"}.get(word, word) for name, word in lines} == expected, helpers.describe(proc)
    assert len(expected) == 7 and proc.returncode == 0, helpers.describe(proc)
