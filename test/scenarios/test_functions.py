"""Plain pytest functions run on every rank with @continuous_test.distributed."""
import os

import pytest
import torch
import torch.distributed as dist

import continuous_test


@continuous_test.distributed(world_size=2)
def test_all_reduce():
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [2.0, 2.0]


@continuous_test.distributed(world_size=2)
@pytest.mark.parametrize("n", [1, 3])
def test_parametrized(n):
    t = torch.ones(n)
    dist.all_reduce(t)
    assert t.tolist() == [2.0] * n


@continuous_test.distributed(world_size=2)
def test_same_world_for_the_module():
    pids = [None, None]
    dist.all_gather_object(pids, os.getpid())
    path = os.environ.get("PID_LOG")
    if path and dist.get_rank() == 0:
        with open(path, "a") as f:
            f.write(f"{pids}\n")


@continuous_test.distributed(world_size=2)
def test_same_world_again():
    test_same_world_for_the_module.__wrapped__()


@continuous_test.distributed(world_size=3)
def test_other_world_size():
    assert dist.get_world_size() == 3


@continuous_test.distributed(world_size=2)
def test_fails_on_rank_1():
    print(f"output of rank {dist.get_rank()}")
    assert dist.get_rank() == 0, "rank 1 disagrees"


@continuous_test.distributed(world_size=2)
def test_skips_on_every_rank():
    pytest.skip("not on this machine")


@pytest.mark.skip(reason="decided before any world starts")
@continuous_test.distributed(world_size=2)
def test_skip_marker():
    raise AssertionError("must not run")


@continuous_test.distributed(world_size=2, timeout=2)
def test_hangs_on_rank_0():
    if dist.get_rank() == 0:
        import time

        time.sleep(600)
    dist.barrier()


@continuous_test.distributed(world_size=2)
def test_fixture_values_reach_the_ranks(tmp_path):
    (tmp_path / f"rank{dist.get_rank()}").write_text("here")
    dist.barrier()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0", "rank1"]


@continuous_test.distributed(world_size=2)
def test_after_faults_still_runs():
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2.0


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
