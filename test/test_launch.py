"""Launch-mode detection."""
from __future__ import annotations

import pytest

from continuous_test._launch import (
    LAUNCH_HINTS,
    Mode,
    detect,
    export_env,
    first_host,
    slurm_port,
    tasks_per_node,
)
from continuous_test.wire.env import ENV_RANK_MARKER


def test_plain_process_is_not_launched():
    assert detect({}).mode is Mode.NONE


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
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1", ENV_RANK_MARKER: "1"}
    assert detect(env).mode is Mode.NONE


def test_srun():
    env = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
           "SLURM_NTASKS_PER_NODE": "4(x2)", "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "1234"}
    launch = detect(env)
    assert (launch.mode, launch.rank, launch.world_size, launch.local_rank, launch.local_world_size) == (
        Mode.SLURM, 5, 8, 1, 4)
    assert launch.master_addr == "gpu07"
    exported: dict = {}
    export_env(launch, exported)
    assert exported == {"MASTER_ADDR": "gpu07", "MASTER_PORT": str(20000 + 123400 % 20000), "RANK": "5",
                        "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    assert launch.run_id == "slurm-1234.0"


def test_concurrent_steps_of_one_job_get_their_own_port_and_keys():
    base = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "n1", "SLURM_JOB_ID": "77"}
    first, second = detect({**base, "SLURM_STEP_ID": "0"}), detect({**base, "SLURM_STEP_ID": "1"})
    assert first.master_port != second.master_port
    assert first.run_id != second.run_id
    assert slurm_port("77", "1") == 20000 + 7701


def test_torchrun_run_id_scopes_the_keys():
    env = {"TORCHELASTIC_RUN_ID": "abc", "RANK": "0", "WORLD_SIZE": "2"}
    assert detect(env).run_id == "torchrun-abc"


@pytest.mark.parametrize("per_node, node, local", [
    ("2(x2)", "0", 2), ("2(x2)", "1", 2), ("3,1", "0", 3), ("3,1", "1", 1), ("2(x2),1", "2", 1), ("4", "3", 4)])
def test_local_world_size_follows_the_step_tasks_of_this_node(per_node, node, local):
    env = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_NODELIST": "n[1-3]",
           "SLURM_STEP_TASKS_PER_NODE": per_node, "SLURM_NODEID": node, "SLURM_TASKS_PER_NODE": "9"}
    assert detect(env).local_world_size == local


def test_tasks_per_node():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(RuntimeError, match="cannot read"):
        tasks_per_node("2(y3)")


def test_hint_names_the_launcher_in_use():
    torchrun = detect({"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "2"})
    srun = detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "n1"})
    assert "--nproc-per-node" in torchrun.hint and "srun" not in torchrun.hint
    assert srun.hint == LAUNCH_HINTS[Mode.SLURM] and "srun" in srun.hint and "nproc" not in srun.hint


def test_single_task_srun_is_not_launched():
    assert detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}).mode is Mode.NONE


@pytest.mark.parametrize("nodelist, host", [
    ("node01", "node01"), ("node[07-09,12],gpu3", "node07"), ("a,b", "a"), ("n[003]", "n003")])
def test_first_host(nodelist, host):
    assert first_host(nodelist) == host


@pytest.mark.parametrize("env, message", [
    ({"TORCHELASTIC_RUN_ID": "x", "RANK": "abc", "WORLD_SIZE": "2"},
     "Invalid RANK 'abc' from the RANK environment variable (set by torchrun): expected an int >= 0"),
    ({"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "0"},
     "Invalid WORLD_SIZE '0' from the WORLD_SIZE environment variable (set by torchrun): expected an int >= 1"),
    ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "x2", "SLURM_STEP_NODELIST": "n1"},
     "Invalid SLURM_NTASKS 'x2' from the SLURM_NTASKS environment variable (set by srun)"),
])
def test_bad_launcher_variables_name_the_variable(env, message):
    from continuous_test.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        detect(env)
    assert message in str(info.value)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
