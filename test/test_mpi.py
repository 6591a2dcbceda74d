"""mpiexec as a launcher: detection from the launchers' variables, and real runs compared with torchrun.

The real runs use Debian's Open MPI (``mpiexec.openmpi``, which ``.ci/run``
installs) and MPICH's Hydra (``mpiexec.hydra``) where installed; each is skipped,
with the reason, where missing.  Every scenario runs once under torchrun too, and
the verdicts must be the same.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from typing import Dict, List

import helpers
import pytest
from helpers import describe, unittest_counts

from continuous_test.errors import ConfigError
from continuous_test._launch import LAUNCH_HINTS, Mode, detect, export_env, mpi_port
from continuous_test.launched.join import _launcher_store

LAUNCH_TIMEOUT = 90  # a guard against hangs, never a performance assertion
# Each scenario: its command line and environment, the same under every launcher.
SCENARIOS = {
    "green": (["test_mpi_launch.py", "-v", "Pair", "FreshPair"], {}),
    "rank 1 fails": (["test_mpi_launch.py", "-v", "Rank1Fails"], {}),
    "hang": (["test_launched_faults.py", "-v", "StuckRank"], {}),
}
# Open MPI refuses root and counts cores as slots unless told; "timeout" ends a hung launch (and its ranks).
OPEN_MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def _mpiexec(flavour: str) -> List[str]:
    """The command that starts 2 ranks with ``flavour``'s mpiexec; skips, with the reason, if it is missing."""
    if flavour == "openmpi":
        exe = shutil.which("mpiexec.openmpi") or _plain_mpiexec("Open MPI", "OpenRTE")
        return [exe, "--oversubscribe", "--bind-to", "none", "-n", "2"]
    exe = shutil.which("mpiexec.hydra") or shutil.which("mpiexec.mpich") or _plain_mpiexec("HYDRA")
    return [exe, "-launcher", "fork", "-n", "2"]


def _plain_mpiexec(*words: str) -> str:
    exe = shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec is not installed (Debian: apt-get install openmpi-bin, or mpich)")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    if not any(word in version for word in words):
        pytest.skip(f"{exe} is not {words[0]}'s mpiexec")
    return exe


def _start(args: List[str], env: Dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(["timeout", "-k", "5", str(LAUNCH_TIMEOUT), *args], cwd=helpers.SCENARIOS,
                            env=helpers.scenario_env(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=LAUNCH_TIMEOUT + 10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


_torchrun: Dict[str, subprocess.CompletedProcess] = {}


def launch(command: List[str], scenario: str) -> subprocess.CompletedProcess:
    """The scenario under ``command``; the first time, under ``torchrun --nproc-per-node 2`` too, at once."""
    args, env = SCENARIOS[scenario]
    proc = _start([*command, helpers.interpreter(), *args], {**env, **OPEN_MPI_ENV})
    if scenario not in _torchrun:
        torchrun = [helpers.interpreter(), "-m", "torch.distributed.run", "--nproc-per-node", "2",
                    "--master-addr", "127.0.0.1", "--master-port", str(helpers.free_port())]
        _torchrun[scenario] = _finish(_start([*torchrun, *args], env))
    return _finish(proc)


def torchrun(scenario: str) -> subprocess.CompletedProcess:
    """The scenario under ``torchrun --nproc-per-node 2``, run once per module, beside the first mpiexec."""
    return _torchrun[scenario]


def verdict_lines(output: str) -> List[str]:
    """unittest's per-test lines (``test_x (__main__.C.test_x) ... ok``), without rank 1's interleaved prints."""
    return sorted(line.split("... ")[0] + "... " + line.split("... ")[-1].split(" ")[0]
                  for line in output.splitlines() if line.startswith("test_") and "... " in line)


def assert_same_as_torchrun(proc: subprocess.CompletedProcess, scenario: str) -> subprocess.CompletedProcess:
    reference = torchrun(scenario)
    assert unittest_counts(proc.stderr) == unittest_counts(reference.stderr), describe(proc) + describe(reference)
    assert verdict_lines(proc.stderr) == verdict_lines(reference.stderr), describe(proc) + describe(reference)
    assert proc.stderr.count("\nRan ") == 1, describe(proc)  # rank 0 reports; rank 1 is silent
    return reference


@pytest.fixture(params=["openmpi", "hydra"])
def mpiexec(request) -> List[str]:
    return _mpiexec(request.param)


@pytest.mark.e2e
def test_green_run_matches_torchrun(mpiexec):
    proc = launch(mpiexec, "green")
    assert_same_as_torchrun(proc, "green")
    assert unittest_counts(proc.stderr) == {"ran": 3}, describe(proc)
    assert proc.returncode == 0 == torchrun("green").returncode, describe(proc)


@pytest.mark.e2e
def test_rank_1_failure_matches_torchrun_and_later_tests_stay_healthy(mpiexec):
    proc = launch(mpiexec, "rank 1 fails")
    assert_same_as_torchrun(proc, "rank 1 fails")
    # Rank 0's report comes although rank 1 ended its tests seconds earlier (its tearDownClass is slow).
    assert unittest_counts(proc.stderr) == {"ran": 2, "errors": 1}, describe(proc)
    assert ("Rank1Fails.test_a_rank_1_raises_while_rank_0_waits failed on rank 1 of 2 "
            "(rank 0 failed waiting for it in a collective)") in proc.stderr, describe(proc)
    assert "rank 1: RuntimeError: rank 1 fails on purpose" in proc.stderr
    # No poison: the default group was rebuilt after the failure.
    assert "test_b_healthy (__main__.Rank1Fails.test_b_healthy) ... ok" in proc.stderr, describe(proc)
    assert proc.returncode == 1 == torchrun("rank 1 fails").returncode, describe(proc)


@pytest.mark.e2e
def test_hang_matches_torchrun(mpiexec):
    proc = launch(mpiexec, "hang")
    assert_same_as_torchrun(proc, "hang")
    assert unittest_counts(proc.stderr) == {"ran": 2, "errors": 1, "skipped": 1}, describe(proc)
    assert "StuckRank.test_a_rank_1_is_stuck exceeded its time limit of 2 s on rank 1" in proc.stderr
    assert "time.sleep(60)" in proc.stderr  # rank 1's stacks, in rank 0's report
    # torchrun exits 1 whatever failed; mpiexec passes on the ranks' codes: 1 (rank 0, a
    # failed test) and 75 (rank 1, its time limit), the first (Open MPI) or both OR-ed (Hydra).
    assert torchrun("hang").returncode == 1
    assert proc.returncode in (1, 75), describe(proc)


@pytest.mark.e2e
def test_two_hydra_jobs_at_once_keep_their_own_rendezvous():
    """Hydra's jobs have no id: each is told apart by its ranks' shared PMI proxy, so each gets its own port."""
    args, _ = SCENARIOS["green"]
    command = [*_mpiexec("hydra"), helpers.interpreter(), *args]
    for proc in [_finish(job) for job in [_start(command, {}), _start(command, {})]]:
        assert proc.returncode == 0 and unittest_counts(proc.stderr) == {"ran": 3}, describe(proc)


@pytest.mark.e2e
def test_rank_0s_store_listens_on_loopback_only_on_one_host(mpiexec):
    """TCPStore's own server listens on every interface (``::``): a one-host world's must not."""
    proc = _finish(_start([*mpiexec, helpers.interpreter(), "test_mpi_launch.py", "-v", "LoopbackStore"], OPEN_MPI_ENV))
    assert proc.returncode == 0 and unittest_counts(proc.stderr) == {"ran": 1}, describe(proc)


def _store_on(env: Dict[str, str]):
    """Rank 0's rendezvous store of the launch that ``env`` describes, and the addresses it listens on."""
    sys.path.insert(0, str(helpers.SCENARIOS))
    try:
        from test_mpi_launch import listening
    finally:
        sys.path.remove(str(helpers.SCENARIOS))
    launch = detect(env)
    store = _launcher_store(launch, 5.0)
    return store, listening(launch.master_port)


@pytest.mark.parametrize("flavour", ["openmpi", "hydra"])
def test_rank_0s_store_listens_where_its_ranks_connect(flavour):
    """One host: loopback only (the variables mpiexec sets, without mpiexec); across hosts: every interface."""
    port = str(helpers.free_port())
    one_host = open_mpi(0) if flavour == "openmpi" else hydra(0, PMI_KVSNAME="kvs_1_0")
    store, where = _store_on({**one_host, "MASTER_PORT": port})
    del store
    assert where == ["0100007F"], where  # 127.0.0.1; TCPStore alone listens on :: (0...0, in tcp6)
    across = open_mpi(0, size=4) if flavour == "openmpi" else hydra(0, size=4, PMI_KVSNAME="kvs_1_0")
    store, where = _store_on({**across, "MASTER_ADDR": socket.gethostname(), "MASTER_PORT": port})
    del store
    assert where == ["0" * 32], where  # other hosts connect to this one's real address


@pytest.mark.e2e
def test_pytest_under_mpiexec_sees_torchruns_variables():
    """pytest, unlike run_tests(), has no entry point of ours: the plugin exports RANK and the rest."""
    command = [*_mpiexec("openmpi"), helpers.interpreter(), "-m", "pytest", "-p", "no:cacheprovider", "-q",
               "test_mpi_launch.py", "-k", "Pair and not Fresh"]
    proc = _finish(_start(command, OPEN_MPI_ENV))
    assert proc.returncode == 0, describe(proc)
    assert "2 passed" in proc.stdout, describe(proc)


@pytest.mark.e2e
def test_across_hosts_without_master_addr_fails_at_once_saying_what_to_set():
    env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "77"}
    proc = helpers.python("test_mpi_launch.py", env=env, timeout=60)
    assert proc.returncode == 1, describe(proc)
    assert ("Cannot run under mpiexec (Open MPI) across hosts without MASTER_ADDR: 2 of its 4 ranks run on this "
            "host") in proc.stderr, describe(proc)
    assert "mpiexec -x MASTER_ADDR=" in proc.stderr
    under_pytest = helpers.pytest("test_mpi_launch.py", env=env, timeout=60)
    assert under_pytest.returncode == 4, describe(under_pytest)  # a usage error, before any test
    assert "across hosts without MASTER_ADDR" in under_pytest.stderr, describe(under_pytest)


# -- detection, from the launchers' variables ------------------------------------------------


def open_mpi(rank: int, size: int = 2, local_size: int = 2, job: str = "1569062913") -> Dict[str, str]:
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % local_size), "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
            "OMPI_MCA_ess_base_jobid": job, "PMIX_NAMESPACE": job, "PMIX_RANK": str(rank)}


def hydra(rank: int, size: int = 2, local_size: int = 2, **extra: str) -> Dict[str, str]:
    return {"PMI_RANK": str(rank), "PMI_SIZE": str(size), "MPI_LOCALRANKID": str(rank % local_size),
            "MPI_LOCALNRANKS": str(local_size), **extra}


@pytest.mark.e2e
def test_open_mpi_on_one_host_rendezvous_on_loopback_with_a_port_from_the_job():
    launch = detect(open_mpi(1))
    assert (launch.mode, launch.rank, launch.world_size, launch.local_rank, launch.local_world_size) == (
        Mode.MPI, 1, 2, 1, 2)
    assert (launch.master_addr, launch.master_port, launch.run_id) == (
        "127.0.0.1", mpi_port("1569062913"), "mpi-1569062913")
    assert 20000 <= launch.master_port < 32000
    exported: dict = {}
    export_env(launch, exported)
    assert exported == {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(launch.master_port), "RANK": "1",
                        "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert launch.hint == LAUNCH_HINTS[Mode.MPI] == "mpiexec -n"


def test_concurrent_mpi_jobs_get_their_own_port_and_keys():
    first, second = detect(open_mpi(0, job="1569062913")), detect(open_mpi(0, job="1569128449"))
    assert first.master_port != second.master_port
    assert first.run_id != second.run_id


@pytest.mark.e2e
def test_master_addr_and_port_win_and_allow_several_hosts():
    launch = detect({**open_mpi(3, size=4, local_size=2), "MASTER_ADDR": "node1", "MASTER_PORT": "29400"})
    assert (launch.master_addr, launch.master_port, launch.local_rank, launch.local_world_size) == (
        "node1", 29400, 1, 2)


def test_across_hosts_without_master_addr_is_a_config_error():
    with pytest.raises(ConfigError, match="across hosts without MASTER_ADDR: 2 of its 4 ranks run on this host"):
        detect(open_mpi(0, size=4, local_size=2))
    with pytest.raises(ConfigError, match=r"MPICH/Hydra\) across hosts .*\(and MASTER_PORT\).*-genv MASTER_ADDR"):
        detect(hydra(0, size=4, local_size=2))


@pytest.mark.e2e
def test_hydra_on_one_host_names_the_job_by_its_pmi_proxy():
    """Hydra exports no job id: the ranks on one host share the proxy at the other end of PMI_FD."""
    ours, theirs = socket.socketpair()
    try:
        launch = detect(hydra(1, PMI_FD=str(ours.fileno())))
        assert (launch.mode, launch.rank, launch.world_size, launch.master_addr) == (Mode.MPI, 1, 2, "127.0.0.1")
        assert launch.run_id == f"mpi-pmi-proxy-{os.getpid()}"  # the peer of a socketpair is this process
        assert launch.master_port == mpi_port(f"pmi-proxy-{os.getpid()}")
        ours.getsockname()  # the socket is still open: only inspected
    finally:
        ours.close()
        theirs.close()


@pytest.mark.e2e
def test_hydra_across_hosts_needs_master_port_for_its_pmi_socket_names_one_proxy_per_host():
    """Across hosts each host's ranks talk to a proxy of their own at the other end of PMI_FD: it is no job
    id every rank shares, so without MASTER_PORT no port can be derived, and the launch fails at once."""
    ours, theirs = socket.socketpair()
    try:
        across = hydra(2, size=4, local_size=2, PMI_FD=str(ours.fileno()))
        with pytest.raises(ConfigError) as caught:
            detect(across)
        assert str(caught.value).startswith(
            "Cannot run under mpiexec (MPICH/Hydra) across hosts without MASTER_ADDR: 2 of its 4 ranks run on "
            "this host, and the launcher does not say where rank 0 runs. Set MASTER_ADDR to an address of rank 0's "
            "host that every host resolves (and MASTER_PORT), and pass it to every rank"), caught.value
        with pytest.raises(ConfigError) as caught:
            detect({**across, "MASTER_ADDR": "node1"})
        assert str(caught.value).startswith(
            "Cannot run under mpiexec (MPICH/Hydra): it exports no job id that every rank shares"), caught.value
        assert str(caught.value).endswith("Set MASTER_PORT to a port of this launch's own and pass it to every rank")
        # Without MPI_LOCALNRANKS nothing says that every rank is here: the same, and the count is unknown.
        unknown = {key: value for key, value in across.items() if key != "MPI_LOCALNRANKS"}
        with pytest.raises(ConfigError, match=r"across hosts without MASTER_ADDR: \? of its 4 ranks .*\(and MASTER_PORT\)"):
            detect(unknown)
        with pytest.raises(ConfigError, match="exports no job id"):
            detect({**unknown, "MASTER_ADDR": "node1"})
        # The user's address and port: this rank's place, and the launch is keyed by the port ("env").
        launch = detect({**across, "MASTER_ADDR": "node1", "MASTER_PORT": "29400"})
        assert (launch.mode, launch.rank, launch.world_size, launch.local_rank, launch.local_world_size) == (
            Mode.MPI, 2, 4, 0, 2)
        assert (launch.master_addr, launch.master_port, launch.run_id, launch.master_addr_source) == (
            "node1", 29400, "mpi-env", "MASTER_ADDR")
        exported: dict = {"MASTER_ADDR": "node1", "MASTER_PORT": "29400"}
        export_env(launch, exported)
        assert (exported["MASTER_ADDR"], exported["MASTER_PORT"], exported["RANK"]) == ("node1", "29400", "2")
        # A job id every rank shares (Intel MPI's PMI_KVSNAME) gives the port across hosts; the socket is not asked.
        kvs = {**across, "PMI_KVSNAME": "kvs_42_0"}
        with pytest.raises(ConfigError) as caught:
            detect(kvs)
        assert "(and MASTER_PORT)" not in str(caught.value) and "across hosts without MASTER_ADDR" in str(caught.value)
        launch = detect({**kvs, "MASTER_ADDR": "node1"})
        assert (launch.master_port, launch.run_id) == (mpi_port("kvs_42_0"), "mpi-kvs_42_0")
        ours.getsockname()  # still open: only inspected, if at all
    finally:
        ours.close()
        theirs.close()


def test_hydra_job_ids_and_the_fallbacks():
    assert detect(hydra(0, PMI_KVSNAME="kvs_42_0")).run_id == "mpi-kvs_42_0"
    assert detect(hydra(0, PMIX_NAMESPACE="ns7")).run_id == "mpi-ns7"
    assert detect(hydra(0, MASTER_PORT="29400")).run_id == "mpi-env"  # the user's port makes the launch private
    with pytest.raises(ConfigError, match="exports no job id .* Set MASTER_PORT"):
        detect(hydra(0, PMI_FD="not-a-number"))


def test_one_process_is_not_a_launch():
    """``mpiexec -n 1`` (like ``srun -n 1``) starts the ranks itself, and PMIx alone gives no world size."""
    assert detect(open_mpi(0, size=1, local_size=1)).mode is Mode.NONE
    assert detect({"PMIX_RANK": "0", "PMIX_NAMESPACE": "ns"}).mode is Mode.NONE


@pytest.mark.e2e
def test_mpirun_inside_a_slurm_allocation_trusts_the_mpi_variables():
    """mpirun starts its daemons with srun: the ranks inherit a daemon's SLURM_PROCID/SLURM_NTASKS."""
    slurm = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "9",
             "SLURM_STEP_NODELIST": "n[1-2]"}
    launch = detect({**slurm, **open_mpi(5, size=8, local_size=4), "MASTER_ADDR": "n1"})
    assert (launch.mode, launch.rank, launch.world_size) == (Mode.MPI, 5, 8)
    # srun --mpi=pmi2 launched the ranks itself: the variables agree, and Slurm's node list is used.
    srun = detect({**slurm, **hydra(1, size=2, local_size=1)})
    assert (srun.mode, srun.master_addr) == (Mode.SLURM, "n1")


def test_torchrun_inside_mpiexec_is_torchrun():
    env = {**open_mpi(0), "RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    assert detect(env).mode is Mode.TORCHRUN


def test_a_bad_value_names_the_variable_and_the_launcher():
    with pytest.raises(ConfigError, match=r"Invalid OMPI_COMM_WORLD_SIZE 'x' .*set by mpiexec \(Open MPI\)"):
        detect({**open_mpi(0), "OMPI_COMM_WORLD_SIZE": "x"})
    with pytest.raises(ConfigError, match=r"Invalid PMI_RANK '-1' .*set by mpiexec \(MPICH/Hydra\)"):
        detect(hydra(0, PMI_RANK="-1"))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
