"""test/gpu/check.py, the CUDA/NCCL check: on a machine without GPUs every check skips cleanly."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import helpers
import pytest
import torch
import torch.distributed as dist
from helpers import ROOT, describe

from continuous_test import config

CHECK = ROOT / "test" / "gpu" / "check.py"
# The package's rule, which initializes no CUDA here (torch.cuda.is_available() would, in the test process).
no_gpu = pytest.mark.skipif(config.accelerator() == "cuda", reason="this machine has a GPU: run test/gpu/check.py")
# Why test/gpu's nccl classes skip on this machine: no nccl in a CPU build; no GPU for it in a CUDA build.
NCCL_SKIP = ("NcclWorld needs 1 cuda device(s), found 0" if dist.is_nccl_available()
             else "backend 'nccl' is not available")
LEASES_SKIP = ("needs 1 cuda device(s), found 0" if dist.is_nccl_available() else "backend 'nccl' is not available")


def _load_check():
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for the dataclasses in it
    spec.loader.exec_module(module)
    return module


check = _load_check()


@pytest.mark.e2e
@no_gpu
def test_every_check_skips_without_gpus():
    proc = helpers.run([sys.executable, str(CHECK)], cwd=ROOT)
    assert proc.returncode == 0, describe(proc)
    lines = proc.stdout.splitlines()
    results = [line for line in lines if line.split(" ", 1)[0] in ("PASS", "FAIL", "SKIP")]
    assert [line.split()[1] for line in results] == [c.name for c in check.CHECKS]
    assert all(line.startswith("SKIP") and "no CUDA GPU" in line for line in results), proc.stdout
    n = len(check.CHECKS)
    assert lines[-1] == check.SUMMARY.format(total=n, passed=0, skipped=n, failed=0)


@no_gpu
def test_a_check_runs_the_file_and_reports_its_skip_reason():
    # As if this machine had GPUs: the file itself runs, and nccl's absence (a CPU build) or the GPUs'
    # (a CUDA build) is its skip reason.
    inventory = check.Inventory(torch.__version__, gpus=2, nccl=True)
    result = check.run_check(check.CHECKS[0], inventory)
    assert (result.name, result.status) == ("world-nccl-1", "SKIP"), result
    assert NCCL_SKIP in result.detail, result


def test_the_lease_check_fails_when_two_worlds_at_once_saw_one_gpu():
    # xdist-leases: two one-GPU classes under pytest -n 2 (test/gpu/test_leases.py); judged from the ranks' records.
    assert "xdist-leases" in [c.name for c in check.CHECKS]
    a = {"test": "A", "uuid": "GPU-1", "count": 1, "visible": "0", "start": 0.0, "end": 2.0}
    assert check.no_shared_gpu([a, {**a, "test": "B", "uuid": "GPU-2", "start": 1.0, "end": 3.0}]) == ""
    assert check.no_shared_gpu([a, {**a, "test": "B", "start": 2.5, "end": 3.0}]) == ""  # one after the other
    assert check.no_shared_gpu([a, {**a, "test": "B", "start": 1.0, "end": 3.0}]).startswith("worlds that ran")
    assert "saw 2 GPUs" in check.no_shared_gpu([a, {**a, "test": "B", "count": 2}])
    assert check.no_shared_gpu([a]) == check.UNSEEN.format(n=1)


@no_gpu
def test_the_lease_check_runs_its_file_under_xdist():
    # As if this machine had GPUs: pytest -n 2 runs test/gpu/test_leases.py, whose classes skip without nccl.
    inventory = check.Inventory(torch.__version__, gpus=2, nccl=True)
    [leases] = [c for c in check.CHECKS if c.name == "xdist-leases"]
    result = check.run_check(leases, inventory)
    assert result.status == "SKIP" and LEASES_SKIP in result.detail, result


@pytest.mark.e2e
def test_vendored_expecttest_wheel_imports():
    # The GPU machine has no expecttest; check.py puts this wheel on the ranks' path.
    [wheel] = sorted((ROOT / "test" / "gpu" / "wheels").glob("expecttest-*.whl"))
    code = f"import sys; sys.path.insert(0, {str(wheel)!r}); import expecttest; print(expecttest.__file__)"
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(str(wheel)), proc.stdout


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
