"""Tests for continuous_test/ddp.py: error cases in-process, the real thing in a 4-rank scenario."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import helpers
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "test" / "scenarios" / "ddp_rebind.py"


def _load(name: str, path: Path) -> ModuleType:
    # By file path: the package __init__ is edited concurrently and may not import.
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ctd = _load("continuous_test_ddp_under_test", REPO / "continuous_test" / "ddp.py")


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A 1-rank gloo world in this process, torn down after the test."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def ddp(world: None) -> Iterator[DistributedDataParallel]:
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)))
    yield model
    # torch 2.13 can deadlock when a gloo group is freed while one of its worker
    # threads still waits for the GIL to drop the last all-reduce that DDP
    # launched inside backward. A barrier waits with the GIL released and lets
    # those threads finish before the world fixture destroys the groups.
    group = model.process_group
    if isinstance(group, dist.ProcessGroup) and not dist.distributed_c10d._rank_not_in_group(group):
        dist.barrier(group=group)


def _train(model: Any) -> None:
    model(torch.randn(3, 4)).sum().backward()


# ---------------------------------------------------------------- happy paths


def test_rebinds_ddp_and_keeps_training(ddp: DistributedDataParallel) -> None:
    _train(ddp)
    group = dist.new_group([0])
    ctd.update_process_group(ddp, group)
    assert ddp.process_group is group
    _train(ddp)
    _train(ddp)


def test_accepts_compiled_ddp(ddp: DistributedDataParallel) -> None:
    group = dist.new_group([0])
    ctd.update_process_group(torch.compile(ddp, backend="eager"), group)
    assert ddp.process_group is group


def test_unwrap_ddp_returns_inner_module(ddp: DistributedDataParallel) -> None:
    assert ctd.unwrap_ddp(ddp) is ddp
    assert ctd.unwrap_ddp(torch.compile(ddp, backend="eager")) is ddp


def test_recovers_reducer_after_failed_backward(ddp: DistributedDataParallel) -> None:
    """A backward that dies midway leaves the reducer unfinished; rebinding clears it."""
    second = ddp.module[0].weight
    handle = second.register_post_accumulate_grad_hook(_raise_boom)
    with pytest.raises(RuntimeError, match="boom"):
        _train(ddp)
    handle.remove()
    with pytest.raises(RuntimeError, match="Expected to have finished reduction"):
        _train(ddp)
    ctd.update_process_group(ddp, dist.group.WORLD)
    _train(ddp)


def _raise_boom(_: torch.Tensor) -> None:
    raise RuntimeError("boom")


def test_broadcast_module_states_keeps_single_rank_state(ddp: DistributedDataParallel) -> None:
    before = [p.detach().clone() for p in ddp.parameters()]
    ctd.broadcast_module_states(torch.compile(ddp, backend="eager"))
    for b, p in zip(before, ddp.parameters()):
        torch.testing.assert_close(p, b, rtol=0, atol=0)


# ---------------------------------------------------------------- not DDP


def test_rejects_plain_module(world: None) -> None:
    with pytest.raises(ctd.NotDDPError) as info:
        ctd.update_process_group(nn.Linear(2, 2), dist.group.WORLD)
    expected = ctd.NOT_DDP_MESSAGE.format(got="torch.nn.modules.linear.Linear", hint="")
    assert str(info.value) == expected
    assert isinstance(info.value, TypeError)


def test_rejects_ddp_nested_in_another_module(ddp: DistributedDataParallel) -> None:
    outer = nn.Sequential(nn.Identity(), ddp)
    with pytest.raises(ctd.NotDDPError) as info:
        ctd.update_process_group(outer, dist.group.WORLD)
    hint = ctd.NESTED_DDP_HINT.format(path="1")
    got = "torch.nn.modules.container.Sequential"
    assert str(info.value) == ctd.NOT_DDP_MESSAGE.format(got=got, hint=hint)


def test_rejects_compiled_plain_module(world: None) -> None:
    compiled = torch.compile(nn.Linear(2, 2), backend="eager")
    with pytest.raises(ctd.NotDDPError) as info:
        ctd.update_process_group(compiled, dist.group.WORLD)
    got = "torch._dynamo.eval_frame.OptimizedModule wrapping torch.nn.modules.linear.Linear"
    assert str(info.value) == ctd.NOT_DDP_MESSAGE.format(got=got, hint="")


def test_rejects_non_module() -> None:
    with pytest.raises(ctd.NotDDPError, match="got builtins.str"):
        ctd.update_process_group("model", None)


# ---------------------------------------------------------------- bad groups


def test_rejects_none_group(ddp: DistributedDataParallel) -> None:
    with pytest.raises(ctd.InvalidProcessGroupError) as info:
        ctd.update_process_group(ddp, None)
    assert str(info.value) == ctd.NO_GROUP_MESSAGE


def test_rejects_object_that_is_not_a_group(ddp: DistributedDataParallel) -> None:
    with pytest.raises(ctd.InvalidProcessGroupError) as info:
        ctd.update_process_group(ddp, [0, 1])
    assert str(info.value) == ctd.NOT_A_GROUP_MESSAGE.format(got="builtins.list")


def test_rejects_group_without_this_rank(ddp: DistributedDataParallel) -> None:
    # What dist.new_group(ranks) returns on a rank outside ``ranks``.
    with pytest.raises(ctd.InvalidProcessGroupError) as info:
        ctd.update_process_group(ddp, dist.GroupMember.NON_GROUP_MEMBER)
    assert str(info.value) == ctd.NOT_A_MEMBER_MESSAGE.format(rank=0)
    assert ddp.process_group is dist.group.WORLD


def test_rejects_destroyed_group(ddp: DistributedDataParallel) -> None:
    group = dist.new_group([0])
    dist.destroy_process_group(group)
    with pytest.raises(ctd.InvalidProcessGroupError) as info:
        ctd.update_process_group(ddp, group)
    prefix = ctd.UNREGISTERED_GROUP_MESSAGE.split("{reason}")[0]
    assert str(info.value).startswith(prefix)
    assert "is not registered" in str(info.value)


# ---------------------------------------------------------------- torch too old


def test_rejects_torch_without_the_hook(
    ddp: DistributedDataParallel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(DistributedDataParallel, "_update_process_group")
    with pytest.raises(ctd.UnsupportedTorchError) as info:
        ctd.update_process_group(ddp, dist.group.WORLD)
    expected = ctd.UNSUPPORTED_TORCH_MESSAGE.format(
        installed=torch.__version__, minimum=ctd.MIN_TORCH_VERSION
    )
    assert str(info.value) == expected
    assert torch.__version__ in str(info.value)


# ---------------------------------------------------------------- backward in flight


def _register(kind: str, param: torch.Tensor, callback: Any) -> Any:
    if kind == "tensor_hook":  # fires before DDP sees any gradient
        return param.register_hook(lambda grad: callback())
    return param.register_post_accumulate_grad_hook(lambda p: callback())  # mid-reduction


@pytest.mark.parametrize("kind", ["tensor_hook", "post_accumulate_grad_hook"])
def test_rejects_rebind_from_inside_backward(ddp: DistributedDataParallel, kind: str) -> None:
    group = dist.new_group([0])
    seen: list[BaseException] = []

    def rebind() -> None:
        try:
            ctd.update_process_group(ddp, group)
        except ctd.BackwardInFlightError as exc:
            seen.append(exc)

    handle = _register(kind, ddp.module[1].weight, rebind)
    _train(ddp)
    handle.remove()
    assert [str(e) for e in seen] == [ctd.BACKWARD_IN_FLIGHT_MESSAGE]
    assert ddp.process_group is dist.group.WORLD, "rejected call must not rebind"
    _train(ddp)  # the reducer finished that backward normally


def test_allows_rebind_right_after_backward(ddp: DistributedDataParallel) -> None:
    _train(ddp)
    group = dist.new_group([0])
    ctd.update_process_group(ddp, group)
    assert ddp.process_group is group, "the call returned without rebinding"
    _train(ddp)  # the reducer, reset by the rebind, runs the next iteration
    assert ddp.process_group is group


# ---------------------------------------------------------------- comm hooks


def test_warns_about_registered_comm_hook(ddp: DistributedDataParallel) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    with pytest.warns(UserWarning) as record:
        ctd.update_process_group(ddp, dist.new_group([0]))
    messages = [str(w.message) for w in record]
    assert ctd.COMM_HOOK_WARNING.format(hook="allreduce_hook") in messages


def test_no_warning_without_comm_hook(
    ddp: DistributedDataParallel, recwarn: pytest.WarningsRecorder
) -> None:
    ctd.update_process_group(ddp, dist.new_group([0]))
    assert not [w for w in recwarn if "communication hook" in str(w.message)]


# ---------------------------------------------------------------- 4 real ranks


@pytest.mark.e2e
def test_scenario_shrink_grow_and_compile_across_four_ranks() -> None:
    # The zygote's socket in its environment (helpers.scenario_env): the scenario is forked from the zygote,
    # and so are the ranks it spawns; without it the shim runs a real interpreter, and each rank is one too.
    env = helpers.scenario_env({"GLOO_SOCKET_IFNAME": "lo"})
    result = subprocess.run(
        [helpers.interpreter(), str(SCENARIO)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    scenario = _load("ddp_rebind_scenario", SCENARIO)
    assert scenario.PASSED_MARKER in result.stdout, output
    for rank in range(scenario.WORLD_SIZE):
        for step in scenario.STEPS:
            assert f"[rank {rank}] PASS {step}:" in result.stdout, output
    for rank in scenario.SHRUNK_RANKS:
        assert f"[rank {rank}] PASS compile: no recompilation after rebind" in result.stdout


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
