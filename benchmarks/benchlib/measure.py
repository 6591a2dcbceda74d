"""Running one scenario file as a real, bounded subprocess and reading its stamps.

Every measurement is ``python <scenario>.py`` with its settings in ``BENCH_*``
environment variables.  The runner times the whole subprocess on the same
``time.monotonic()`` clock the scenario writes its stamps with, so stamps can be
placed relative to the launch.  Each subprocess starts its own session: on a
timeout, and again after it exited, its whole process group is killed, so no rank,
template or helper process outlives its measurement.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

__all__ = ["ROOT", "SCENARIOS", "Job", "RunRecord", "base_env", "run_job", "read_stamps"]

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "benchmarks" / "scenarios"
TAIL_CHARS = 3000
# Settings of the caller that must not leak into a measured subprocess.
_DROPPED_PREFIXES = ("CONTINUOUS_TEST_", "TORCHELASTIC_", "SLURM_", "BENCH_", "PYTEST_")
# CI: under it torch's run_tests() writes XML reports and needs unittest-xml-reporting.
_DROPPED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "CI")


@dataclass
class Job:
    """One measurement: a scenario file, its settings, and how long it may run."""

    scenario: str  # "suite", "negative", "fault", "floor" or "import"
    system: str
    params: Dict[str, Any]
    script: str
    env: Dict[str, str]
    cap_s: float
    expect_success: bool = True
    once: bool = False  # measured in the first repetition only
    # The interpreter's arguments; None: just the script.
    argv: Optional[List[str]] = None

    @property
    def key(self) -> str:
        """Stable name of the measurement, the same in every repetition."""
        parts = [self.scenario, self.system] + [f"{k}{v}" for k, v in sorted(self.params.items())]
        return "/".join(parts)


@dataclass
class RunRecord:
    """What one run of a job produced: timings, exit, stamps and the output's tail."""

    key: str
    scenario: str
    system: str
    params: Dict[str, Any]
    rep: int
    launched_at: float
    wall_s: float
    returncode: Optional[int]
    timed_out: bool
    cap_s: float
    stamps: List[Dict[str, Any]] = field(default_factory=list)
    output_tail: str = ""
    error: Optional[str] = None


def base_env() -> Dict[str, str]:
    """The environment every measured subprocess starts from: the checkout first on the path."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_DROPPED_PREFIXES) and k not in _DROPPED}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    # Every system (and the floor) uses loopback for gloo, as continuous_test's ranks do by default.
    env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def run_job(job: Job, rep: int) -> RunRecord:
    """Run ``job`` once, killing its process group at ``job.cap_s``; the runner calls this."""
    with tempfile.TemporaryDirectory(prefix="continuous_test-bench-") as tmp:
        stamps_path = os.path.join(tmp, "stamps.jsonl")
        out_path = os.path.join(tmp, "output.txt")
        env = dict(base_env(), **job.env, BENCH_STAMPS=stamps_path)
        with open(out_path, "wb") as out:
            launched_at = time.monotonic()
            proc = subprocess.Popen([sys.executable] + (job.argv or [job.script]), cwd=str(SCENARIOS), env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            returncode, timed_out = _wait_bounded(proc, job.cap_s)
            wall = time.monotonic() - launched_at
        record = RunRecord(job.key, job.scenario, job.system, dict(job.params), rep, launched_at, wall,
                           returncode, timed_out, job.cap_s, read_stamps(stamps_path), _tail(out_path))
    record.error = _check(job, record)
    return record


def _wait_bounded(proc: subprocess.Popen, cap_s: float) -> tuple:
    """Wait up to ``cap_s``; then kill the whole group.  Leftovers are killed either way."""
    try:
        returncode: Optional[int] = proc.wait(timeout=cap_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        returncode, timed_out = None, True
    _kill_group(proc.pid)
    if timed_out:
        proc.wait()
    return returncode, timed_out


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read_stamps(path: str) -> List[Dict[str, Any]]:
    """The stamps a scenario wrote, in file order; a torn last line is ignored."""
    stamps = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    stamps.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return stamps


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_CHARS))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _check(job: Job, record: RunRecord) -> Optional[str]:
    """Why the run cannot be used as a measurement, or None."""
    if record.timed_out:
        return None if not job.expect_success else f"did not finish within {job.cap_s:g} s"
    if job.expect_success and record.returncode != 0:
        return f"exited with {record.returncode}"
    if not record.stamps:
        return "wrote no stamps"
    return None
