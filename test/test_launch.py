"""Launch-mode detection."""
from __future__ import annotations

import pytest

from continuous_test.launch import RANK_MARKER_ENV, Mode, detect, export_env, first_host


def test_plain_process_is_a_dispatcher():
    assert detect({}).mode is Mode.DISPATCHER


def test_torchrun():
    env = {"TORCHELASTIC_RUN_ID": "x", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
           "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
    launch = detect(env)
    assert (launch.mode, launch.rank, launch.world_size, launch.local_rank, launch.local_world_size) == (
        Mode.TORCHRUN, 3, 4, 1, 2)


def test_generic_env_launcher():
    launch = detect({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    assert launch.mode is Mode.TORCHRUN


def test_ranks_of_our_own_world_are_not_launched():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1", RANK_MARKER_ENV: "1"}
    assert detect(env).mode is Mode.DISPATCHER


def test_srun():
    env = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
           "SLURM_NTASKS_PER_NODE": "4(x2)", "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "1234"}
    launch = detect(env)
    assert (launch.mode, launch.rank, launch.world_size, launch.local_rank, launch.local_world_size) == (
        Mode.SLURM, 5, 8, 1, 4)
    assert launch.master_addr == "gpu07"
    exported: dict = {}
    export_env(launch, exported)
    assert exported == {"MASTER_ADDR": "gpu07", "MASTER_PORT": str(20000 + 1234), "RANK": "5",
                        "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}


def test_single_task_srun_is_a_dispatcher():
    assert detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}).mode is Mode.DISPATCHER


@pytest.mark.parametrize("nodelist, host", [
    ("node01", "node01"), ("node[07-09,12],gpu3", "node07"), ("a,b", "a"), ("n[003]", "n003")])
def test_first_host(nodelist, host):
    assert first_host(nodelist) == host


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
