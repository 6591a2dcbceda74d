"""The example runs in every launch mode."""
from __future__ import annotations

import sys

import helpers
import pytest
from helpers import ROOT, describe, pytest_counts, unittest_counts

pytestmark = pytest.mark.e2e

EXAMPLE = str(ROOT / "examples" / "test_collectives.py")


def test_python():
    proc = helpers.run([sys.executable, EXAMPLE, "-v"], cwd=ROOT)
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 4}, describe(proc)


def test_pytest():
    proc = helpers.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", EXAMPLE], cwd=ROOT)
    assert proc.returncode == 0, describe(proc)
    assert pytest_counts(proc.stdout) == {"passed": 4}, describe(proc)


def test_torchrun():
    proc = helpers.torchrun(EXAMPLE, 2, cwd=ROOT)
    assert proc.returncode == 0, describe(proc)
    assert unittest_counts(proc.stderr) == {"ran": 4}, describe(proc)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
