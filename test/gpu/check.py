"""The CUDA/NCCL check: run test/gpu/test_nccl.py in every mode on a machine with NVIDIA GPUs.

    python test/gpu/check.py

One line per check (PASS, FAIL or SKIP with the reason), then a summary; the exit
status is 1 if any check failed.  Without a CUDA GPU or without nccl every check is
skipped and the status is 0.  Needs torch with CUDA and pytest; expecttest, which
continuous_test imports, is taken from test/gpu/wheels/*.whl when it is not
installed (a wheel is a zip that Python imports from directly)::

    pip download expecttest --no-deps -d test/gpu/wheels     # on a machine with an index

How data flows::

    gpu_inventory ──> CHECKS ──> run_check (a subprocess each: python, pytest, torchrun)
                                    │ exit status + unittest/pytest summary
                                    ▼
                                 Result ──> one line each, summary, exit status
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = ["CHECKS", "NO_GPU", "Check", "Result", "gpu_inventory", "main", "run_check"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TEST_FILE = HERE / "test_nccl.py"
CHECK_TIMEOUT = 300  # seconds per check: a guard against hangs
NO_GPU = "no CUDA GPU (torch {torch}, torch.cuda.device_count() == 0)"
NO_NCCL = "torch.distributed has no nccl backend in torch {torch}"
TOO_FEW = "needs {needed} GPUs, found {found}"
LINE = "{status:<4}  {name:<22} {seconds:6.1f}s  {detail}"
SUMMARY = "gpu check: {total} checks, {passed} passed, {skipped} skipped, {failed} failed"


@dataclass(frozen=True)
class Check:
    """One way of running the NCCL test file; ``gpus`` is the world size it needs."""

    name: str
    gpus: int
    args: Sequence[str]  # after the interpreter; {file} is the test file, {n} the world size
    runner: str = "unittest"  # how to read its summary: unittest or pytest


def _checks(max_gpus: int) -> list[Check]:
    two = 2 if max_gpus >= 2 else 1  # the checks that need not two GPUs run on what there is
    return [
        Check("world-nccl-1", 1, ["{file}", "-v", "NcclWorld.test_all_reduce"]),
        Check("world-nccl-2", 2, ["{file}", "-v", "NcclWorld.test_all_reduce"]),
        Check("device-local-rank", two, ["{file}", "-v", "NcclWorld.test_device_is_local_rank"]),
        Check("no-cuda-in-template", 1, ["{file}", "-v", "NcclWorld.test_no_cuda_in_template"]),
        Check("fresh-nccl", two, ["{file}", "-v", "NcclFresh"]),
        Check("pytest", two, ["-m", "pytest", "-p", "no:cacheprovider", "-rs", "-v", "{file}"], "pytest"),
        Check("torchrun", two, ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "{n}",
                                "{file}", "-v", "NcclWorld"]),
    ]


CHECKS = _checks(2)


class Inventory(NamedTuple):
    """What this machine offers: torch's version, CUDA GPUs, nccl."""

    torch: str
    gpus: int
    nccl: bool


class Result(NamedTuple):
    """How one check ended; ``status`` is PASS, FAIL or SKIP."""

    name: str
    status: str
    seconds: float
    detail: str


def gpu_inventory() -> Inventory:
    """Called once by main; counts GPUs without initializing CUDA in this process."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.version.cuda else 0
    nccl = dist.is_available() and dist.is_nccl_available()
    return Inventory(torch.__version__, gpus, nccl)


def _env(world_size: int) -> dict:
    env = dict(os.environ)
    paths = [str(ROOT)]
    try:
        import expecttest  # noqa: F401
    except ImportError:
        paths += sorted(glob.glob(str(HERE / "wheels" / "expecttest-*.whl")))
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["GPU_CHECK_WORLD_SIZE"] = str(world_size)
    env.pop("CI", None)  # torch's run_tests() would want XML reporting under CI=true
    return env


def run_check(check: Check, inventory: Inventory) -> Result:
    """Run one check in a subprocess (main calls this for each) and judge its output."""
    if inventory.gpus == 0:
        return Result(check.name, "SKIP", 0.0, NO_GPU.format(torch=inventory.torch))
    if not inventory.nccl:
        return Result(check.name, "SKIP", 0.0, NO_NCCL.format(torch=inventory.torch))
    if inventory.gpus < check.gpus:
        return Result(check.name, "SKIP", 0.0, TOO_FEW.format(needed=check.gpus, found=inventory.gpus))
    args = [a.format(file=TEST_FILE, n=check.gpus) for a in check.args]
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(check.gpus), timeout=CHECK_TIMEOUT,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    except subprocess.TimeoutExpired:
        return Result(check.name, "FAIL", time.monotonic() - start, f"no result within {CHECK_TIMEOUT} s")
    seconds = time.monotonic() - start
    status, detail = _judge(proc, check.runner)
    return Result(check.name, status, seconds, detail)


def _judge(proc: subprocess.CompletedProcess, runner: str) -> tuple:
    output = proc.stdout + proc.stderr
    summary = _summary(output, runner)
    if proc.returncode != 0:
        return "FAIL", f"exit status {proc.returncode}: {summary}\n{_tail(output)}"
    # unittest -v: ... skipped 'reason' (or "reason"); pytest -rs: SKIPPED [1] file:line: reason
    skipped = re.search(r"""skipped (['"])(.*?)\1$|^SKIPPED \[\d+\] [^:]+:\d+: (.*)$""", output, re.MULTILINE)
    if skipped:
        return "SKIP", skipped.group(2) or skipped.group(3)
    return "PASS", summary


def _summary(output: str, runner: str) -> str:
    pattern = r"^(Ran \d+ tests? in .*|OK.*|FAILED.*)$" if runner == "unittest" else r"^=+ (.* in .*) =+$"
    found = re.findall(pattern, output, re.MULTILINE)
    return "; ".join(found[-2:]) if found else "(no summary in the output)"


def _tail(output: str, lines: int = 30) -> str:
    return "\n".join("      | " + line for line in output.rstrip().splitlines()[-lines:])


def main(argv: Sequence[str] | None = None) -> int:
    """``python test/gpu/check.py``: run every check, print one line each, return the exit status."""
    inventory = gpu_inventory()
    print(f"gpu check: torch {inventory.torch}, {inventory.gpus} CUDA GPU(s), nccl {inventory.nccl}")
    results = []
    for check in _checks(inventory.gpus):
        result = run_check(check, inventory)
        results.append(result)
        print(LINE.format(**result._asdict()), flush=True)
    counts = {s: sum(r.status == s for r in results) for s in ("PASS", "SKIP", "FAIL")}
    print(SUMMARY.format(total=len(results), passed=counts["PASS"], skipped=counts["SKIP"], failed=counts["FAIL"]))
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
