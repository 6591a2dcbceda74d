"""How this process was launched: by a plain test runner, by torchrun, by srun, or by mpiexec.

* **none**: ``python test_x.py``, ``python -m unittest``, ``pytest``.  This
  process becomes the controller and starts the ranks itself (the ranks it starts
  read as none too: :data:`ENV_RANK_MARKER` tells them from a launcher's).
* **torchrun**: torchrun (or any launcher that exports ``RANK``, ``WORLD_SIZE``,
  ``MASTER_ADDR`` and ``MASTER_PORT``).  This process is one rank and runs the
  tests in place, with ``env://`` rendezvous.
* **slurm**: an ``srun`` step with more than one task.  The Slurm variables are
  translated into the ``env://`` ones, then it behaves like torchrun.
* **mpi**: ``mpiexec``/``mpirun`` of Open MPI (``OMPI_COMM_WORLD_*``) or of an
  MPICH-style Hydra (``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``,
  ``MPI_LOCALNRANKS``; Intel MPI's too) with more than one process.  Translated
  into the ``env://`` ones like Slurm's.  The MPI library itself is never
  initialised: only the launcher's variables are read.

Each launch has a ``run_id`` (torchrun's ``TORCHELASTIC_RUN_ID``, Slurm's job
and step ids, the MPI job's id) that scopes every key the ranks put in the
rendezvous store, so a rank that reaches another run's store never joins that
run's world.  Under Slurm the default port is derived from the job *and* the
step, so concurrent steps of one allocation do not compete for one port; under
mpiexec from the MPI job (:func:`mpi_port`).

The MPI job's id is Open MPI's ``OMPI_MCA_ess_base_jobid``, else PMIx's
``PMIX_NAMESPACE``, else PMI's ``PMI_KVSNAME``/``PMI_JOBID``.  MPICH's Hydra
exports none of them: on one host its ranks share one ``hydra_pmi_proxy``, whose
pid is read from the peer of the ``PMI_FD`` socket (``SO_PEERCRED``; the socket
is only inspected, never read or written: it stays the MPI library's).  Without ``MASTER_ADDR``, every rank must run on this host (the
launcher's local size equals its world size): the rendezvous is on loopback.
Across hosts the launcher says nothing of where rank 0 runs, so ``MASTER_ADDR``
(and, without a job id, ``MASTER_PORT``) must be set, or the launch fails at
once saying so.

Where Slurm's variables and an MPI launcher's are both set, their rank and size
decide: equal means ``srun`` launched the ranks itself (``--mpi=pmix``/``pmi2``),
and Slurm's node list gives the rendezvous host; different means ``mpirun`` ran
inside an allocation, started its daemons with ``srun``, and the ranks inherited
the daemons' Slurm variables, so the MPI launcher's are the truth.
"""
from __future__ import annotations

import enum
import os
import re
import socket
import struct
import zlib
from dataclasses import dataclass
from typing import List, Mapping, MutableMapping, NamedTuple, Optional

from continuous_test.errors import ConfigError
from continuous_test.wire.env import ENV_RANK_MARKER

__all__ = [
    "Mode",
    "Launch",
    "detect",
    "export_env",
    "first_host",
    "slurm_port",
    "mpi_port",
    "tasks_per_node",
    "ENV_RANK_MARKER",
    "LAUNCH_HINTS",
]

SLURM_DEFAULT_PORT_BASE = 20000
SLURM_PORT_SPAN = 20000
BAD_SLURM = "Cannot run under srun: {what}. Set MASTER_ADDR and MASTER_PORT explicitly."
BAD_TASKS_PER_NODE = "Cannot run under srun: cannot read {name}={value!r} for node {node}"
MPI_DEFAULT_PORT_BASE = 20000
MPI_PORT_SPAN = 12000  # 20000-31999: below Linux's ephemeral ports (32768-)
MPI_ACROSS_HOSTS = (
    "Cannot run under {launcher} across hosts without MASTER_ADDR: {local} of its {size} ranks run on this host, "
    "and the launcher does not say where rank 0 runs. Set MASTER_ADDR to an address of rank 0's host that every "
    "host resolves{port}, and pass it to every rank (Open MPI: mpiexec -x MASTER_ADDR=...; MPICH: "
    "mpiexec -genv MASTER_ADDR ...)"
)
MPI_NO_JOB_ID = (
    "Cannot run under {launcher}: it exports no job id that every rank shares (OMPI_MCA_ess_base_jobid, "
    "PMIX_NAMESPACE, PMI_KVSNAME, PMI_JOBID; on one host, the PMI_FD socket stands in), so no rendezvous port "
    "private to this job can be derived. Set MASTER_PORT to a port of this launch's own and pass it to every rank"
)


class Mode(str, enum.Enum):
    """The three ways a test process can be launched."""

    NONE = "none"
    TORCHRUN = "torchrun"
    SLURM = "slurm"
    MPI = "mpi"


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
    Mode.MPI: "mpiexec -n",
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
    mpi = _mpi_world(env)
    if _is_srun(env) and (mpi is None or _agrees_with_slurm(mpi, env)):
        return _slurm_launch(env)
    if mpi is not None and mpi.size > 1:
        return _mpi_launch(env, mpi)
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


class _MpiWorld(NamedTuple):
    """What an MPI launcher's variables say; ``local_size`` is None where they do not tell."""

    launcher: str
    rank: int
    size: int
    local_rank: int
    local_size: Optional[int]


OPEN_MPI = "mpiexec (Open MPI)"
HYDRA = "mpiexec (MPICH/Hydra)"


def _mpi_world(env: Mapping[str, str]) -> Optional[_MpiWorld]:
    """This process's place in an MPI launcher's world, from Open MPI's or PMI's variables; None without them.

    PMIx alone (``PMIX_RANK``) gives no world size, so it names the job but makes no world.
    """
    if "OMPI_COMM_WORLD_RANK" in env:
        size = _int(env, "OMPI_COMM_WORLD_SIZE", OPEN_MPI, default="", minimum=1)
        local = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", OPEN_MPI, minimum=1) if "OMPI_COMM_WORLD_LOCAL_SIZE" in env \
            else None
        return _MpiWorld(OPEN_MPI, _int(env, "OMPI_COMM_WORLD_RANK", OPEN_MPI), size,
                         _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", OPEN_MPI, default="0"), local)
    if "PMI_RANK" in env and "PMI_SIZE" in env:
        size = _int(env, "PMI_SIZE", HYDRA, minimum=1)
        local = _int(env, "MPI_LOCALNRANKS", HYDRA, minimum=1) if "MPI_LOCALNRANKS" in env else None
        return _MpiWorld(HYDRA, _int(env, "PMI_RANK", HYDRA), size, _int(env, "MPI_LOCALRANKID", HYDRA, default="0"),
                         local)
    return None


def _agrees_with_slurm(mpi: _MpiWorld, env: Mapping[str, str]) -> bool:
    """Whether srun itself launched the MPI ranks (see the module docstring)."""
    return (mpi.rank, mpi.size) == (_int(env, "SLURM_PROCID", "srun"), _int(env, "SLURM_NTASKS", "srun", minimum=1))


def _mpi_launch(env: Mapping[str, str], mpi: _MpiWorld) -> Launch:
    one_host = mpi.local_size == mpi.size
    port = _int(env, "MASTER_PORT", "you", minimum=1) if env.get("MASTER_PORT") else None
    job = _mpi_job_id(env, one_host)
    addr = env.get("MASTER_ADDR")
    if not addr:
        if not one_host:
            local = "?" if mpi.local_size is None else str(mpi.local_size)
            raise ConfigError(MPI_ACROSS_HOSTS.format(launcher=mpi.launcher, local=local, size=mpi.size,
                                                      port=" (and MASTER_PORT)" if job is None else ""))
        addr = "127.0.0.1"
    if job is None:
        if port is None:
            raise ConfigError(MPI_NO_JOB_ID.format(launcher=mpi.launcher))
        job = "env"
    return Launch(
        Mode.MPI,
        rank=mpi.rank,
        world_size=mpi.size,
        local_rank=mpi.local_rank,
        local_world_size=mpi.local_size if mpi.local_size is not None else mpi.size,
        master_addr=addr,
        master_port=port if port is not None else mpi_port(job),
        run_id=f"mpi-{job}",
        master_addr_source="MASTER_ADDR" if env.get("MASTER_ADDR") else "loopback (every rank runs on this host)",
    )


def _mpi_job_id(env: Mapping[str, str], one_host: bool) -> Optional[str]:
    """The MPI job's id, the same on every rank (see the module docstring); None if there is none."""
    for name in ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_KVSNAME", "PMI_JOBID"):
        if env.get(name):
            return env[name]
    if one_host and env.get("PMI_FD", "").isdigit():
        return _pmi_server(int(env["PMI_FD"]))
    return None


def _pmi_server(fd: int) -> Optional[str]:
    """Who serves the PMI socket ``fd`` (Hydra's proxy: the same for every rank of a job on this host)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        if sock.family == getattr(socket, "AF_UNIX", None) and hasattr(socket, "SO_PEERCRED"):
            pid, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            return f"pmi-proxy-{pid}" if pid > 0 else None
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host, port = sock.getpeername()[:2]
            return f"pmi-server-{host}:{port}"
        return None
    except OSError:
        return None
    finally:
        sock.detach()  # the fd stays open: it is the MPI library's, not ours


def mpi_port(job: str) -> int:
    """The default rendezvous port of an MPI job: stable for one job, spread over jobs."""
    return MPI_DEFAULT_PORT_BASE + zlib.crc32(job.encode()) % MPI_PORT_SPAN


def export_env(launch: Launch, env: MutableMapping[str, str] = os.environ) -> None:
    """Export the ``env://`` variables of a Slurm or MPI launch (nothing otherwise); due before any rendezvous."""
    if launch.mode not in (Mode.SLURM, Mode.MPI):
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
