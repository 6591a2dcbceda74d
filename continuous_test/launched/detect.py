"""How this process was launched: by a plain test runner, by torchrun, or by srun.

* **none**: ``python test_x.py``, ``python -m unittest``, ``pytest``.  This
  process becomes the controller and starts the ranks itself (the ranks it starts
  read as none too: :data:`ENV_RANK_MARKER` tells them from a launcher's).
* **torchrun**: torchrun (or any launcher that exports ``RANK``, ``WORLD_SIZE``,
  ``MASTER_ADDR`` and ``MASTER_PORT``).  This process is one rank and runs the
  tests in place, with ``env://`` rendezvous.
* **slurm**: an ``srun`` step with more than one task.  The Slurm variables are
  translated into the ``env://`` ones, then it behaves like torchrun.

Each launch has a ``run_id`` (torchrun's ``TORCHELASTIC_RUN_ID``, or Slurm's job
and step ids) that scopes every key the ranks put in the rendezvous store, so a
rank that reaches another run's store never joins that run's world.  Under Slurm
the default port is derived from the job *and* the step, so concurrent steps of
one allocation do not compete for one port.
"""
from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from typing import List, Mapping, MutableMapping, Optional

from continuous_test.errors import ConfigError
from continuous_test.wire.env import ENV_RANK_MARKER

__all__ = [
    "Mode",
    "Launch",
    "detect",
    "export_env",
    "first_host",
    "slurm_port",
    "tasks_per_node",
    "ENV_RANK_MARKER",
    "LAUNCH_HINTS",
]

SLURM_DEFAULT_PORT_BASE = 20000
SLURM_PORT_SPAN = 20000
BAD_SLURM = "Cannot run under srun: {what}. Set MASTER_ADDR and MASTER_PORT explicitly."
BAD_TASKS_PER_NODE = "Cannot run under srun: cannot read {name}={value!r} for node {node}"


class Mode(str, enum.Enum):
    """The three ways a test process can be launched."""

    NONE = "none"
    TORCHRUN = "torchrun"
    SLURM = "slurm"


@dataclass(frozen=True)
class Launch:
    """The launch mode and, for launcher modes, this process's place in the world."""

    mode: Mode
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    # Scopes every store key of this launch (see the module docstring).
    run_id: str = ""
    # Where master_addr came from, for messages: "MASTER_ADDR", or the Slurm node list.
    master_addr_source: str = "MASTER_ADDR"

    @property
    def is_launcher(self) -> bool:
        """True when an external launcher started one process per rank."""
        return self.mode is not Mode.NONE

    @property
    def hint(self) -> str:
        """How to give this launcher a number of ranks, for messages."""
        return LAUNCH_HINTS[self.mode]


# How to change the number of ranks, for each launcher; messages end with these.
LAUNCH_HINTS = {
    Mode.TORCHRUN: "torchrun --nnodes/--nproc-per-node",
    Mode.SLURM: "srun --ntasks/--nodes (-n/-N)",
    Mode.NONE: "world_size",
}


_detected: Optional[Launch] = None


def detect(env: Optional[Mapping[str, str]] = None) -> Launch:
    """How this process (or one with environment ``env``) was launched.

    Without ``env`` the answer for this process's own environment is computed once:
    the launch does not change while the process runs (:func:`export_env` even sets
    variables that would change the answer for srun).
    """
    global _detected
    if env is None:
        if _detected is None:
            _detected = _classify(os.environ)
        return _detected
    return _classify(env)


BAD_LAUNCH_VARIABLE = (
    "Invalid {name} {value!r} from the {name} environment variable (set by {launcher}): expected an int >= {minimum}"
)


def _int(env: Mapping[str, str], name: str, launcher: str, default: Optional[str] = None, minimum: int = 0) -> int:
    """A launcher variable as an int; a bad value raises ConfigError naming the variable."""
    raw = env.get(name, default)
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(BAD_LAUNCH_VARIABLE.format(name=name, value=raw, launcher=launcher, minimum=minimum))
    return value


def _classify(env: Mapping[str, str]) -> Launch:
    if env.get(ENV_RANK_MARKER):
        return Launch(Mode.NONE)
    if _is_torchrun(env):
        return Launch(
            Mode.TORCHRUN,
            rank=_int(env, "RANK", "torchrun"),
            world_size=_int(env, "WORLD_SIZE", "torchrun", minimum=1),
            local_rank=_int(env, "LOCAL_RANK", "torchrun", default=env["RANK"]),
            local_world_size=_int(env, "LOCAL_WORLD_SIZE", "torchrun", default=env["WORLD_SIZE"], minimum=1),
            master_addr=env.get("MASTER_ADDR"),
            master_port=_int(env, "MASTER_PORT", "torchrun", minimum=1) if env.get("MASTER_PORT") else None,
            run_id="torchrun-" + env.get("TORCHELASTIC_RUN_ID", "env"),
        )
    if _is_srun(env):
        return _slurm_launch(env)
    return Launch(Mode.NONE)


def _is_torchrun(env: Mapping[str, str]) -> bool:
    if env.get("TORCHELASTIC_RUN_ID") and "RANK" in env and "WORLD_SIZE" in env:
        return True
    return all(env.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _is_srun(env: Mapping[str, str]) -> bool:
    in_step = "SLURM_STEP_ID" in env or "SLURM_STEPID" in env
    return in_step and "SLURM_PROCID" in env and _int(env, "SLURM_NTASKS", "srun", default="1", minimum=1) > 1


def _slurm_launch(env: Mapping[str, str]) -> Launch:
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    addr = env.get("MASTER_ADDR") or (first_host(nodelist) if nodelist else None)
    source = "MASTER_ADDR" if env.get("MASTER_ADDR") else f"the first host of the Slurm node list {nodelist!r}"
    if not addr:
        raise RuntimeError(BAD_SLURM.format(what="no SLURM_STEP_NODELIST or MASTER_ADDR"))
    job = env.get("SLURM_JOB_ID", "0")
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or "0"
    port = _int(env, "MASTER_PORT", "you", minimum=1) if env.get("MASTER_PORT") else slurm_port(job, step)
    return Launch(
        Mode.SLURM,
        rank=_int(env, "SLURM_PROCID", "srun"),
        world_size=_int(env, "SLURM_NTASKS", "srun", minimum=1),
        local_rank=_int(env, "SLURM_LOCALID", "srun", default="0"),
        local_world_size=_slurm_local_world_size(env),
        master_addr=addr,
        master_port=port,
        run_id=f"slurm-{job}.{step}",
        master_addr_source=source,
    )


def slurm_port(job: str, step: str) -> int:
    """The default rendezvous port of a Slurm step: distinct for each step of a job."""
    number = int(job) * 100 + int(step) if job.isdigit() and step.isdigit() else sum(map(ord, job + "." + step))
    return SLURM_DEFAULT_PORT_BASE + number % SLURM_PORT_SPAN


def _slurm_local_world_size(env: Mapping[str, str]) -> int:
    """Tasks on this node, from the step's per-node counts (not the job's, nor the total)."""
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"):
        value = env.get(name)
        if value:
            node = _int(env, "SLURM_NODEID", "srun", default="0")
            counts = tasks_per_node(value)
            if not 0 <= node < len(counts) and len(counts) != 1:
                raise RuntimeError(BAD_TASKS_PER_NODE.format(name=name, value=value, node=node))
            return counts[node] if node < len(counts) else counts[0]
    return _int(env, "SLURM_NTASKS", "srun", minimum=1)


def tasks_per_node(value: str) -> List[int]:
    """Expand Slurm's per-node task counts: ``2(x2),1`` gives ``[2, 2, 1]``."""
    counts: List[int] = []
    for part in value.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise RuntimeError(BAD_TASKS_PER_NODE.format(name="tasks per node", value=value, node="any"))
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def export_env(launch: Launch, env: MutableMapping[str, str] = os.environ) -> None:
    """Export the ``env://`` variables of a Slurm launch (nothing otherwise); due before any rendezvous."""
    if launch.mode is not Mode.SLURM:
        return
    env.setdefault("MASTER_ADDR", str(launch.master_addr))
    env.setdefault("MASTER_PORT", str(launch.master_port))
    env["RANK"] = str(launch.rank)
    env["WORLD_SIZE"] = str(launch.world_size)
    env["LOCAL_RANK"] = str(launch.local_rank)
    env["LOCAL_WORLD_SIZE"] = str(launch.local_world_size)


def first_host(nodelist: str) -> str:
    """First host of a Slurm hostlist such as ``node[07-09,12],gpu3`` (gives ``node07``)."""
    match = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?", nodelist.strip())
    if not match:
        return nodelist
    prefix, ranges = match.group(1), match.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first
