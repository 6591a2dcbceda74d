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
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = ["CHECKS", "NO_GPU", "Check", "Result", "gpu_inventory", "main", "run_check", "no_shared_gpu",
           "read_records"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TEST_FILE = HERE / "test_nccl.py"
LEASES_FILE = HERE / "test_leases.py"
CHECK_TIMEOUT = 300  # seconds per check: a guard against hangs
NO_GPU = "no CUDA GPU (torch {torch}, config.accelerator() is not cuda)"
NO_NCCL = "torch.distributed has no nccl backend in torch {torch}"
TOO_FEW = "needs {needed} GPUs, found {found}"
LINE = "{status:<4}  {name:<22} {seconds:6.1f}s  {detail}"
SUMMARY = "gpu check: {total} checks, {passed} passed, {skipped} skipped, {failed} failed"
NO_XDIST = "pytest-xdist is not installed (pip install pytest-xdist)"
SHARED = "worlds that ran at the same time saw the same GPU: {a} and {b}"
UNSEEN = "{n} record(s) of the ranks' GPUs, expected 2"


@dataclass(frozen=True)
class Check:
    """One way of running the NCCL test file; ``gpus`` is the world size it needs."""

    name: str
    gpus: int
    args: Sequence[str]  # after the interpreter; {file} is the test file, {n} the world size
    runner: str = "unittest"  # how to read its summary: unittest or pytest
    # Checks the ranks' records (GPU_CHECK_LOG_DIR) after a green run: a failure's detail, or "".
    verify: str = ""


def _checks(max_gpus: int) -> list[Check]:
    two = 2 if max_gpus >= 2 else 1  # the checks that need not two GPUs run on what there is
    return [
        Check("world-nccl-1", 1, ["{file}", "-v", "NcclWorld.test_all_reduce"]),
        Check("world-nccl-2", 2, ["{file}", "-v", "NcclWorld.test_all_reduce"]),
        Check("device-local-rank", two, ["{file}", "-v", "NcclWorld.test_device_is_local_rank"]),
        Check("no-cuda-in-template", 1, ["{file}", "-v", "NcclWorld.test_no_cuda_in_template"]),
        Check("fresh-nccl", two, ["{file}", "-v", "NcclFresh"]),
        Check("pytest", two, ["-m", "pytest", "-p", "no:cacheprovider", "-rs", "-v", "{file}"], "pytest"),
        # Device leases: two one-GPU classes on two xdist workers never share a GPU (docs/devices.rst).
        Check("xdist-leases", 1, ["-m", "pytest", "-p", "no:cacheprovider", "-rs", "-v", "-n", "2", str(LEASES_FILE)],
              "pytest", verify="no_shared_gpu"),
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
    """Called once by main; counts GPUs by the package's own rule (``config.accelerator()``), which
    initializes no CUDA in this process: what a run of continuous_test would use here."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # for torch's module-level checks in the children
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # the checkout's continuous_test, as the checks' PYTHONPATH has it
    import torch
    import torch.distributed as dist

    from continuous_test import config

    gpus = config.device_count("cuda") if config.accelerator() == "cuda" and torch.version.cuda else 0
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
    if "-n" in check.args and importlib.util.find_spec("xdist") is None:
        return Result(check.name, "SKIP", 0.0, NO_XDIST)
    args = [a.format(file=TEST_FILE, n=check.gpus) for a in check.args]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as folder:
        env = _env(check.gpus)
        env["GPU_CHECK_LOG_DIR"] = folder
        try:
            proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, timeout=CHECK_TIMEOUT,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        except subprocess.TimeoutExpired:
            return Result(check.name, "FAIL", time.monotonic() - start, f"no result within {CHECK_TIMEOUT} s")
        seconds = time.monotonic() - start
        status, detail = _judge(proc, check.runner)
        if status == "PASS" and check.verify:
            failure = VERIFY[check.verify](read_records(folder))
            if failure:
                status, detail = "FAIL", failure
    return Result(check.name, status, seconds, detail)


def read_records(folder: str) -> list:
    """The JSON lines the ranks wrote to ``folder``."""
    return [json.loads(line) for path in sorted(glob.glob(os.path.join(folder, "*.jsonl")))
            for line in Path(path).read_text().splitlines() if line.strip()]


def no_shared_gpu(records: list) -> str:
    """"" when no two worlds that ran at the same time saw the same GPU (and each saw one); else what went wrong."""
    if len(records) != 2:
        return UNSEEN.format(n=len(records))
    for record in records:
        if record["count"] != 1:
            return f"{record['test']} saw {record['count']} GPUs (CUDA_VISIBLE_DEVICES={record['visible']}), expected 1"
    a, b = records
    if a["uuid"] == b["uuid"] and a["start"] < b["end"] and b["start"] < a["end"]:
        return SHARED.format(a=a, b=b)
    return ""


VERIFY = {"no_shared_gpu": no_shared_gpu}


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
