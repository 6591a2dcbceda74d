"""A private two-node Slurm cluster on this host, owned by the tests that use it.

:func:`start_cluster` writes a ``slurm.conf`` in a temp dir and starts munged (with
its own key and socket), slurmctld and two slurmd (nodes ``n1`` and ``n2``, both on
``localhost`` with their own ports); :meth:`Cluster.stop` stops them all and removes
the dir.  Where Slurm is not installed (``.ci/run`` installs Debian's ``slurmctld``,
``slurmd``, ``slurm-client`` and ``munge`` when it can) or cannot start here,
:func:`start_cluster` raises :class:`ClusterUnavailable` with the reason, and the
tests skip with it.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

__all__ = ["Cluster", "ClusterUnavailable", "start_cluster", "DAEMONS"]

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "salloc", "sinfo")
START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0
NODES = ("n1", "n2")

CONF = """\
ClusterName=ct
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge.socket
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool-%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
PlugStackConfig={dir}/plugstack.conf
{nodes}
PartitionName=ct Nodes={node_names} Default=YES MaxTime=10 State=UP OverSubscribe=FORCE
"""
NODE = "NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=4 State=UNKNOWN"


class ClusterUnavailable(RuntimeError):
    """Slurm is not installed here, or its daemons did not come up; the message says which."""


class Cluster:
    """The daemons of one private cluster, and the environment its clients need."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.procs: List[subprocess.Popen] = []
        self.env: Dict[str, str] = {"SLURM_CONF": str(directory / "slurm.conf")}

    def client(self, args: List[str], env: Dict[str, str], timeout: float,
               cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
        """Run a Slurm client command (srun, salloc, sinfo) against this cluster, bounded."""
        return subprocess.run(args, env={**env, **self.env}, timeout=timeout, cwd=cwd, check=False,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)

    def start_daemon(self, args: List[str]) -> None:
        with open(self.dir / f"{Path(args[0]).name}-{len(self.procs)}.out", "w") as log:
            self.procs.append(subprocess.Popen(args, env={**os.environ, **self.env}, stdin=subprocess.DEVNULL,
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def logs(self) -> str:
        """Every daemon's log, for a failure message."""
        parts = []
        for path in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")):
            parts.append(f"--- {path.name} ---\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop every daemon and every process of this cluster's jobs, then remove the dir."""
        for proc in reversed(self.procs):
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for proc in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        self.procs = []
        # slurmstepd daemonizes out of slurmd's session, and job tasks run under it:
        # they are found by the SLURM_CONF they inherited, which names this cluster.
        for pid in self.job_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def job_processes(self) -> List[int]:
        """Processes other than this one whose environment names this cluster's slurm.conf."""
        marker = b"SLURM_CONF=" + self.env["SLURM_CONF"].encode() + b"\0"
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:  # gone, or not ours to read
                continue
            if marker in environ:
                found.append(int(entry.name))
        return found


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def start_cluster() -> Cluster:
    """Start munged, slurmctld and two slurmd; wait until both nodes are idle (bounded)."""
    missing = [d for d in DAEMONS if not shutil.which(d) and not Path("/usr/sbin", d).exists()]
    if missing:
        raise ClusterUnavailable(f"Slurm is not installed ({', '.join(missing)} not found); "
                                 ".ci/run installs Debian's slurmctld, slurmd, slurm-client and munge")
    if os.geteuid() != 0:
        raise ClusterUnavailable("a private Slurm cluster needs root (slurmd runs jobs as their user)")
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="continuous_test-slurm-")))
    try:
        _write_config(cluster.dir)
        _start_munge(cluster)
        cluster.start_daemon([_daemon("slurmctld"), "-D", "-i", "-f", str(cluster.dir / "slurm.conf")])
        for name in NODES:
            cluster.start_daemon([_daemon("slurmd"), "-D", "-N", name, "-f", str(cluster.dir / "slurm.conf")])
        _await_idle(cluster)
    except BaseException as exc:
        logs = cluster.logs()
        cluster.stop()
        raise ClusterUnavailable("the private Slurm cluster did not start:\n" + logs) from exc
    return cluster


def _daemon(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _write_config(directory: Path) -> None:
    os.chmod(directory, 0o700)
    (directory / "state").mkdir()
    (directory / "plugstack.conf").write_text("")
    ports = _free_ports(1 + len(NODES))
    nodes = "\n".join(NODE.format(name=n, port=p) for n, p in zip(NODES, ports[1:]))
    (directory / "slurm.conf").write_text(CONF.format(host=socket.gethostname().split(".")[0], ctld_port=ports[0],
                                                      dir=directory, nodes=nodes, node_names=",".join(NODES)))


def _start_munge(cluster: Cluster) -> None:
    key = cluster.dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    d = cluster.dir
    cluster.start_daemon([_daemon("munged"), "-F", "--force", f"--key-file={key}", f"--socket={d}/munge.socket",
                          f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"])
    _wait_for(lambda: (d / "munge.socket").exists(), "munged did not create its socket")


def _await_idle(cluster: Cluster) -> None:
    def idle() -> bool:
        proc = cluster.client(["sinfo", "-h", "-N", "-o", "%N %t"], dict(os.environ), timeout=10)
        states = dict(line.split() for line in proc.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in NODES)

    _wait_for(idle, "the nodes n1 and n2 did not become idle")


def _wait_for(ready, what: str, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    raise ClusterUnavailable(f"{what} within {timeout:g} s")


def _free_ports(count: int) -> List[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def main() -> Optional[int]:
    """Start a cluster, print sinfo, stop it: a manual check of this module."""
    cluster = start_cluster()
    try:
        print(cluster.client(["sinfo", "-N"], dict(os.environ), timeout=10).stdout)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
