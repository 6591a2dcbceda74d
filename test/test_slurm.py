"""Launches under a real Slurm: a private two-node cluster on this host (test/slurm_cluster.py).

Skipped, with the reason, where Slurm is not installed or cannot start.  The node
names ``n1`` and ``n2`` do not resolve, so MASTER_ADDR is given; the port is
Slurm's default, derived from the job and the step.
"""
from __future__ import annotations

import re
from typing import Iterator

import helpers
import pytest
from helpers import describe, unittest_counts, verbose_name
from slurm_cluster import Cluster, ClusterUnavailable, start_cluster

pytestmark = pytest.mark.e2e

STEP_TIMEOUT = 60  # a guard against hangs, never a performance assertion
LIMITS = {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo", "CONTINUOUS_TEST_START_TIMEOUT": "20",
          "CONTINUOUS_TEST_TIMEOUT": "20"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    try:
        started = start_cluster()
    except ClusterUnavailable as why:
        pytest.skip(str(why))
    try:
        yield started
    finally:
        started.stop()
    assert started.job_processes() == [], "processes of the private Slurm cluster outlived it"


def slurm(cluster: Cluster, *args: str):
    return cluster.client(["timeout", str(STEP_TIMEOUT), *args], helpers.scenario_env(LIMITS), STEP_TIMEOUT + 5,
                          cwd=helpers.SCENARIOS)


def test_a_two_node_step_runs_the_scenario(cluster):
    proc = slurm(cluster, "srun", "--time=1", "-N", "2", "-n", "4", helpers.interpreter(), "test_multinode.py", "-v")
    out = proc.stderr
    assert proc.returncode == 1, describe(proc)  # rank 3 fails on purpose
    assert out.count("Ran 3 tests") == 1, describe(proc)
    assert unittest_counts(out) == {"ran": 3, "failures": 1}, describe(proc)
    assert "FourRankTest.test_fails_on_rank_3 failed on rank 3 of 4" in out
    # LOCAL_WORLD_SIZE is 2 on each node (SLURM_STEP_TASKS_PER_NODE=2(x2)), not 4.
    assert f"{verbose_name('test_device_from_local_rank', 'FourRankTest')} ... ok" in out, describe(proc)


def test_two_concurrent_steps_of_one_allocation_run_side_by_side(cluster, tmp_path):
    step = f"srun --overlap -N 2 -n 2 {helpers.interpreter()} test_launched_faults.py -v BreaksTheWorld.test_a_healthy"
    script = f"{step} > {tmp_path}/1.out 2>&1 & {step} > {tmp_path}/2.out 2>&1 & wait"
    proc = slurm(cluster, "salloc", "--time=1", "-N", "2", "-n", "4", "bash", "-c", script)
    outputs = [(tmp_path / f"{i}.out").read_text() for i in (1, 2)]
    for out in outputs:
        assert unittest_counts(out) == {"ran": 1}, describe(proc) + "\n" + "\n".join(outputs)
        assert f"{verbose_name('test_a_healthy', 'BreaksTheWorld')} ... ok" in out


def test_a_job_array_runs_disjoint_shards_whose_union_is_the_file(cluster, tmp_path):
    env = {**LIMITS, "NO_FUNCTIONS": "1", "CONTINUOUS_TEST_DURATIONS": str(tmp_path / "none.json")}
    whole = helpers.python("test_shard.py", "-v", env=env)
    env["CONTINUOUS_TEST_SHARD"] = "slurm"  # shard by the array: asked, never by the array's variables alone
    proc = cluster.client(["timeout", str(STEP_TIMEOUT), "sbatch", "--wait", "--array=0-2", "--time=1",
                           f"--output={tmp_path}/%a.out", "--wrap", f"{helpers.interpreter()} test_shard.py -v"],
                          helpers.scenario_env(env), STEP_TIMEOUT + 5, cwd=helpers.SCENARIOS)
    outputs = [(tmp_path / f"{i}.out").read_text() for i in range(3)]
    assert proc.returncode == 0, describe(proc) + "\n".join(outputs)
    tests = [re.findall(r"ran (\S+)", out) for out in outputs]
    assert sorted(sum(tests, [])) == sorted(re.findall(r"ran (\S+)", whole.stdout + whole.stderr)), outputs
    assert all(tests) and len(sum(tests, [])) == 18, outputs
    classes = [{name.split(".")[0] for name in part} for part in tests]
    assert sum(map(len, classes)) == len(set().union(*classes)), classes  # no world in two shards
    assert all(out.rstrip().endswith("OK") for out in outputs), outputs
    for i, out in enumerate(outputs):
        assert f"shard {i + 1}/3 (Slurm job array, asked by CONTINUOUS_TEST_SHARD environment variable: " \
            f"SLURM_ARRAY_TASK_ID={i}, SLURM_ARRAY_TASK_MIN=0" in out, out


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
