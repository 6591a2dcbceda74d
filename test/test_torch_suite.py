"""torch's own distributed suite (distributed_test.py, from the torch wheel) on this engine.

``examples/test_torch_distributed_suite.py`` is torch's glue for it with the one
migration line.  The CI subset of ``benchmarks/torch_suite.py`` runs here under
pytest and must give, test by test, the verdicts torch's spawn runner gave, as
that script recorded them (``benchmarks/results/torch_suite_verdicts.json``).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch_suite  # noqa: E402


def test_the_ci_subset_keeps_torchs_verdicts():
    recorded = json.loads(torch_suite.VERDICTS.read_text())
    assert (recorded["backend"], recorded["world_size"]) == ("gloo", 3)
    torch_verdicts = recorded["torch_verdicts"]
    assert sorted(torch_verdicts) == sorted(torch_suite.CI_SUBSET)
    run = torch_suite.run_engine("ours", torch_suite.CI_SUBSET, None)
    ours = {name: verdict for name, (verdict, _) in run.tests.items()}
    differ = {name: (torch_verdicts[name], ours.get(name)) for name in torch_verdicts if ours.get(name) != torch_verdicts[name]}
    assert not differ, f"(torch's verdict, ours) where they differ: {differ}; ours said: " + str(
        {name: run.messages.get(name) for name in differ})
    assert list(ours.values()).count("passed") >= 20  # a run where every test skipped cannot match
