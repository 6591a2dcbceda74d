"""Rebind a DistributedDataParallel module to another process group, in place.

Shrinking or growing the set of training ranks normally means deleting the DDP
wrapper and building a new one, and a ``torch.compile``d model then compiles
again from scratch. DDP has a private hook that swaps the group under the
reducer instead (``DistributedDataParallel._update_process_group``, added in
pytorch#113580). This module wraps that hook with the checks it lacks::

    caller, on every rank of the new group
      │  update_process_group(model, group)
      ▼
    unwrap_ddp ─────────────► NotDDPError          (plain module, nested DDP)
    _check_torch_has_hook ──► UnsupportedTorchError (torch too old)
    _check_group ───────────► InvalidProcessGroupError (None, wrong type,
      │                                             not a member, destroyed)
    _check_not_in_backward ─► BackwardInFlightError (called from autograd)
      │
      ▼
    DDP._update_process_group ─► reducer: reset buckets + state, new group
      │
      ▼  (members that sat out the old group)
    broadcast_module_states(model)  ─► params/buffers from group rank 0

This module runs inside a rank; it imports only torch and the standard library.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from continuous_test.errors import (
    BackwardInFlightError,
    InvalidProcessGroupError,
    NotDDPError,
    RebindError,
    UnsupportedTorchError,
)

__all__ = [
    "BACKWARD_IN_FLIGHT_MESSAGE",
    "COMM_HOOK_WARNING",
    "MIN_TORCH_VERSION",
    "NESTED_DDP_HINT",
    "NOT_DDP_MESSAGE",
    "NOT_A_GROUP_MESSAGE",
    "NOT_A_MEMBER_MESSAGE",
    "NO_GROUP_MESSAGE",
    "UNREGISTERED_GROUP_MESSAGE",
    "UNSUPPORTED_TORCH_MESSAGE",
    "BackwardInFlightError",
    "InvalidProcessGroupError",
    "NotDDPError",
    "RebindError",
    "UnsupportedTorchError",
    "broadcast_module_states",
    "unwrap_ddp",
    "update_process_group",
]

#: First torch release that ships ``DistributedDataParallel._update_process_group``.
MIN_TORCH_VERSION = "2.2"

NOT_DDP_MESSAGE = (
    "update_process_group() needs a torch.nn.parallel.DistributedDataParallel "
    "module, or torch.compile() of one; got {got}.{hint}"
)
NESTED_DDP_HINT = (
    " It contains a DistributedDataParallel at {path!r}; pass that module instead."
)
UNSUPPORTED_TORCH_MESSAGE = (
    "update_process_group() needs DistributedDataParallel._update_process_group, "
    "which torch {installed} does not have; it needs torch >= {minimum}. "
    "Upgrade torch, or rebuild the DDP module over the new group."
)
NO_GROUP_MESSAGE = (
    "update_process_group() got process_group=None; pass the group to rebind to, "
    "e.g. dist.new_group(ranks) or dist.group.WORLD."
)
NOT_A_GROUP_MESSAGE = (
    "update_process_group() needs a torch.distributed.ProcessGroup; got {got}."
)
NOT_A_MEMBER_MESSAGE = (
    "rank {rank} is not a member of the process group passed to "
    "update_process_group(); only member ranks may rebind to it. Ranks outside "
    "the group keep their DDP module as it is until they rebind to a group that "
    "includes them."
)
UNREGISTERED_GROUP_MESSAGE = (
    "update_process_group() got a process group that torch.distributed does not "
    "know ({reason}); was it destroyed? Create it with dist.new_group()."
)
BACKWARD_IN_FLIGHT_MESSAGE = (
    "update_process_group() was called while a backward pass is running (from an "
    "autograd hook or a custom Function's backward); DDP's reducer would drop the "
    "gradients it has not reduced yet. Call it between iterations: after "
    "optimizer.step() and before the next forward."
)
COMM_HOOK_WARNING = (
    "DDP module has the communication hook {hook!r} registered; "
    "update_process_group() does not touch hook state. If that state holds a "
    "process group (or None, meaning the world group), register the hook again "
    "with state for the new group."
)


def unwrap_ddp(model: Any) -> DistributedDataParallel:
    """Return the DDP inside ``model``.

    Accepts a DDP module or a ``torch.compile`` wrapper (``OptimizedModule``,
    possibly nested) whose ``_orig_mod`` is one. Anything else raises
    NotDDPError naming the type found.
    """
    inner = model
    while _is_compiled_module(inner):
        inner = inner._orig_mod
    if isinstance(inner, DistributedDataParallel):
        return inner
    raise NotDDPError(
        NOT_DDP_MESSAGE.format(got=_describe(model, inner), hint=_nested_hint(inner))
    )


def update_process_group(model: Any, process_group: Any) -> None:
    """Swap the process group under a DDP module, in place; valid between iterations.

    Every rank of ``process_group`` must call this (it is collective in spirit:
    the reducer's bucket order is re-agreed over the new group on the next
    iteration, so members must rebind at the same point of training). Ranks
    outside the new group must not call it; they keep their old binding.

    What it does: DDP's ``_update_process_group`` resets the reducer (its
    unfinished-iteration bookkeeping, unused-parameter map, and bucket
    layout, which is rebuilt after the next backward) and points DDP and the
    reducer at the new group, so the next gradient all-reduce runs over it and
    is averaged over its size. The module is not rebuilt, so a
    ``torch.compile``d model keeps its compiled graphs.

    What the caller must still do:

    * Parameters are NOT re-broadcast. Ranks joining a group must hold the
      same parameters as the others: call :func:`broadcast_module_states`
      after growing. Optimizer state is never touched.
    * Buffers are broadcast from rank 0 of the new group at the next forward
      (DDP's usual ``broadcast_buffers=True`` behaviour), not during the call.
    * Communication hooks registered with ``register_comm_hook`` keep their
      state; a state that holds the old group (or None, which the built-in
      hooks read as the world group) must be registered again. A warning
      (COMM_HOOK_WARNING) names a registered hook.
    * Rebind between iterations. A forward output produced before the rebind
      must not be back-propagated after it: the reset makes that backward skip
      the gradient all-reduce. A backward running on the calling thread is
      rejected (BackwardInFlightError); one on another thread is not detected.
    * After a failed iteration (e.g. a peer died mid-backward) this is also the
      way to clear the reducer's half-finished state before the next forward.
    * A DDP built from a ``device_mesh`` keeps its stale ``device_mesh``
      attribute; DDP reads it only at construction.

    Verified with DDP's C++ reducer, eager and under ``torch.compile`` (the
    default DDPOptimizer path); the compiled-autograd Python reducer
    (``optimize_ddp="python_reducer"``) is not covered.
    """
    ddp = unwrap_ddp(model)
    _check_torch_has_hook(ddp)
    _check_group(process_group)
    _check_not_in_backward()
    _warn_if_comm_hook(ddp)
    ddp._update_process_group(process_group)


def broadcast_module_states(model: Any, src_group_rank: int = 0) -> None:
    """Broadcast params and buffers over the DDP's group from ``src_group_rank``, e.g. after growing it.

    All ranks of the DDP's current group must call it. It is the same
    broadcast DDP's constructor performs (``parameters_to_ignore`` is honoured,
    buffers are included when ``broadcast_buffers`` is set), so ranks that kept
    a stale replica while outside the group catch up with ``src_group_rank``.
    """
    from torch.distributed.utils import _sync_module_states

    ddp = unwrap_ddp(model)
    _sync_module_states(
        module=ddp.module,
        process_group=ddp.process_group,
        broadcast_bucket_size=ddp.broadcast_bucket_size,
        src=src_group_rank,
        params_and_buffers_to_ignore=ddp.parameters_to_ignore,
        broadcast_buffers=ddp.broadcast_buffers,
    )


def _is_compiled_module(model: Any) -> bool:
    # torch._dynamo is heavy to import and a compiled module implies it is loaded.
    if not isinstance(model, nn.Module) or not hasattr(model, "_orig_mod"):
        return False
    from torch._dynamo.eval_frame import OptimizedModule

    return isinstance(model, OptimizedModule)


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe(model: Any, inner: Any) -> str:
    if inner is model:
        return _type_name(model)
    return f"{_type_name(model)} wrapping {_type_name(inner)}"


def _nested_hint(module: Any) -> str:
    if not isinstance(module, nn.Module):
        return ""
    for path, sub in module.named_modules():
        if isinstance(sub, DistributedDataParallel):
            return NESTED_DDP_HINT.format(path=path)
    return ""


def _check_torch_has_hook(ddp: DistributedDataParallel) -> None:
    # Feature test rather than version parsing: backports and nightlies vary.
    if not hasattr(ddp, "_update_process_group"):
        raise UnsupportedTorchError(
            UNSUPPORTED_TORCH_MESSAGE.format(
                installed=torch.__version__, minimum=MIN_TORCH_VERSION
            )
        )


def _check_group(group: Any) -> None:
    if group is None:
        raise InvalidProcessGroupError(NO_GROUP_MESSAGE)
    # dist.new_group() hands non-members this sentinel (an int) instead of a group.
    if isinstance(group, int) and group == dist.GroupMember.NON_GROUP_MEMBER:
        raise InvalidProcessGroupError(NOT_A_MEMBER_MESSAGE.format(rank=_global_rank()))
    if not isinstance(group, dist.ProcessGroup):
        raise InvalidProcessGroupError(NOT_A_GROUP_MESSAGE.format(got=_type_name(group)))
    try:
        group_rank = dist.get_rank(group)
    except (ValueError, RuntimeError) as exc:
        raise InvalidProcessGroupError(
            UNREGISTERED_GROUP_MESSAGE.format(reason=exc)
        ) from exc
    if group_rank < 0:
        raise InvalidProcessGroupError(NOT_A_MEMBER_MESSAGE.format(rank=_global_rank()))


def _global_rank() -> int | str:
    return dist.get_rank() if dist.is_initialized() else "?"


def _check_not_in_backward() -> None:
    # There is no public "reducer is mid-backward" flag. The reducer's
    # _check_reducer_finalized() only trips once a DDP gradient is ready, and it
    # also trips after a backward that raised - the recovery case a rebind is
    # for. The autograd engine's thread-local graph task id is -1 exactly when
    # no backward runs on this thread, which covers every autograd hook.
    current_task = getattr(torch._C, "_current_graph_task_id", None)
    if current_task is not None and current_task() != -1:
        raise BackwardInFlightError(BACKWARD_IN_FLIGHT_MESSAGE)


def _warn_if_comm_hook(ddp: DistributedDataParallel) -> None:
    hook_name = ddp._get_ddp_logging_data().get("comm_hook")
    if hook_name:
        warnings.warn(COMM_HOOK_WARNING.format(hook=hook_name), UserWarning, stacklevel=3)
