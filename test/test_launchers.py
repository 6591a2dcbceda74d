"""torchrun across two (local) nodes, and srun simulated by its environment variables."""
from __future__ import annotations

import subprocess
import sys

import pytest

import helpers
from helpers import describe, unittest_counts


def start(args, env=None) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=helpers.SCENARIOS, env=helpers.scenario_env(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs) -> list:
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=helpers.RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def test_torchrun_two_nodes_rank_0_reports_every_node():
    port = helpers.free_port()
    node = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes",
            "test_multinode.py", "-v"]
    nodes = finish([start(node), start(node)])
    both = "".join(p.stderr for p in nodes)
    for proc in nodes:
        assert proc.returncode != 0, describe(proc)  # rank 3 fails on purpose, so every rank fails
    assert both.count("Ran 3 tests") == 1, both  # only global rank 0 prints the report
    assert unittest_counts(both) == {"ran": 3, "failures": 1}, both
    assert "FourRankTest.test_fails_on_rank_3 failed on rank 3 of 4 (ranks 0-2 passed)" in both
    assert "test_device_from_local_rank (__main__.FourRankTest.test_device_from_local_rank) ... ok" in both


def slurm_env(rank: int, ntasks: int, port: int) -> dict:
    return {"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "4242", "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(ntasks),
            "SLURM_LOCALID": str(rank % 2), "SLURM_NTASKS_PER_NODE": "2", "SLURM_STEP_NODELIST": "127.0.0.1",
            "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}


def test_srun_simulated_with_four_tasks():
    port = helpers.free_port()
    tasks = finish([start([sys.executable, "test_multinode.py", "-v"], slurm_env(r, 4, port)) for r in range(4)])
    assert unittest_counts(tasks[0].stderr) == {"ran": 3, "failures": 1}, describe(tasks[0])
    assert "failed on rank 3 of 4" in tasks[0].stderr
    assert all(t.returncode == 1 for t in tasks), [t.returncode for t in tasks]
    assert all("Ran 3 tests" not in t.stderr for t in tasks[1:])


def test_rendezvous_names_the_ranks_that_never_arrived():
    port = helpers.free_port()
    env = {"CONTINUOUS_TEST_START_TIMEOUT": "3"}
    tasks = finish([start([sys.executable, "test_multinode.py"], {**slurm_env(r, 4, port), **env}) for r in (0, 1)])
    assert all(t.returncode == 1 for t in tasks), [describe(t) for t in tasks]
    assert f"rank(s) 2, 3 of 4 never arrived at the rendezvous at 127.0.0.1:{port} within 3 s" in tasks[0].stderr
    assert unittest_counts(tasks[0].stderr) == {"ran": 3, "errors": 3}, describe(tasks[0])


def test_missing_store_host_is_named_on_other_ranks():
    proc = helpers.python("test_multinode.py", env={**slurm_env(1, 4, helpers.free_port()),
                                                    "CONTINUOUS_TEST_START_TIMEOUT": "2"})
    assert proc.returncode == 1, describe(proc)
    assert "continuous_test: rank 1: cannot reach the rendezvous store of rank 0 at 127.0.0.1:" in proc.stderr


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
