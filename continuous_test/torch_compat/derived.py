"""Bases that torch derives inside its own testing modules, rebuilt on continuous_test's.

torch defines some bases on ``MultiProcessTestCase`` and its kin inside
``torch.testing._internal``, so they bind to torch's classes when torch imports
them, before a test file can migrate.  :func:`rebase` builds the same class again
from torch's own class body on a replacement base: every attribute is torch's own
object, and a method that calls zero-argument ``super()`` gets a copy of its
function whose ``__class__`` cell names the new class, so ``super()`` continues
along the new class's MRO instead of torch's.  No torch code is copied here.

* ``DynamoDistributedMultiProcTestCase`` (``common_distributed``, on
  ``DistributedTestBase``): fresh ranks per test, each entering through torch's
  own ``_run``.  torch's ``world_size`` is the accelerator count; where it is 0, a
  test is a skip here (torch starts no rank and reports a pass it never ran);
* ``C10dTorchCommsTestBase`` (``common_distributed``, on ``MultiProcContinuousTest``):
  one world per class; its ``setUp`` skips where torchcomms lacks the backend, as
  torch's does, and its ``_init_pg`` turns torchcomms on before the default group;
* ``ShardedTensorTestBase`` (``distributed._shard.sharded_tensor``, on
  ``MultiProcessTestCase``): fresh ranks per test, ``world_size`` 4 as torch's, and
  torch's ``init_pg``, ``init_rpc``, ``init_comms``, ``destroy_comms`` and
  ``assert_sharded_tensor_equal``.  torch's ``with_comms`` of that module works on it
  as it is (it skips with torch's exit code where the backend needs more
  accelerators, then calls ``init_comms``).
"""
from __future__ import annotations

import types
from typing import Any, Dict, Mapping, Optional

from torch.testing._internal import common_distributed as _torch_distributed
from torch.testing._internal.distributed._shard import sharded_tensor as _torch_sharded_tensor

from continuous_test.case import MultiProcContinuousTest
from continuous_test.multiprocess import MultiProcessTestCase
from continuous_test.torch_compat.distributed import DistributedTestBase

__all__ = ["rebase", "DynamoDistributedMultiProcTestCase", "C10dTorchCommsTestBase", "ShardedTensorTestBase"]

# Hide this module's frames from unittest tracebacks.
__unittest = True

# What a class body has that the new class makes itself.
_NOT_COPIED = frozenset({"__dict__", "__weakref__"})


def rebase(torch_cls: type, replacements: Mapping[type, type], module: str,
           extra: Optional[Mapping[str, Any]] = None) -> type:
    """torch's class ``torch_cls`` built again with each of its bases that is a key of ``replacements`` replaced.

    The new class has torch's name, lives in ``module`` under that name (where the
    caller binds it, so that it pickles), and holds torch's own attributes; a function
    whose zero-argument ``super()`` (its ``__class__`` cell) named ``torch_cls`` is
    copied with a cell that names the new class.  ``extra`` adds or overrides
    attributes after torch's (functions there must not use zero-argument ``super()``).
    Raises TypeError when no base of ``torch_cls`` is replaced.
    """
    bases = tuple(replacements.get(base, base) for base in torch_cls.__bases__)
    if bases == torch_cls.__bases__:
        names = ", ".join(base.__qualname__ for base in torch_cls.__bases__)
        raise TypeError(f"rebase({torch_cls.__qualname__}): none of its bases ({names}) is a key of replacements; "
                        f"map one of them to the class that replaces it")
    cell = types.CellType()
    body = {name: _rebound(value, torch_cls, cell, {})
            for name, value in vars(torch_cls).items() if name not in _NOT_COPIED}
    body.update(extra or {})
    body["__module__"] = module
    body["__qualname__"] = torch_cls.__name__
    new_cls = types.new_class(torch_cls.__name__, bases, exec_body=lambda ns: ns.update(body))
    cell.cell_contents = new_cls
    return new_cls


def _rebound(value: Any, old: type, cell: Any, seen: Dict[int, Any]) -> Any:
    """``value`` with every ``__class__`` cell naming ``old`` replaced by ``cell``; ``value`` itself where none does."""
    if isinstance(value, (staticmethod, classmethod)):
        func = _rebound(value.__func__, old, cell, seen)
        return value if func is value.__func__ else type(value)(func)
    if isinstance(value, property):
        accessors = [_rebound(f, old, cell, seen) for f in (value.fget, value.fset, value.fdel)]
        if all(new is f for new, f in zip(accessors, (value.fget, value.fset, value.fdel))):
            return value
        return type(value)(accessors[0], accessors[1], accessors[2], value.__doc__)
    if isinstance(value, types.FunctionType):
        return _rebound_function(value, old, cell, seen)
    return value


def _rebound_function(func: types.FunctionType, old: type, cell: Any, seen: Dict[int, Any]) -> types.FunctionType:
    if id(func) in seen:
        return seen[id(func)]
    seen[id(func)] = func  # a closure that reaches itself is left as it is
    closure = func.__closure__ or ()
    cells = []
    for name, old_cell in zip(func.__code__.co_freevars, closure):
        contents = _contents(old_cell)
        if name == "__class__" and contents is old:
            cells.append(cell)
        elif isinstance(contents, types.FunctionType):
            # A decorator's wrapper: the function it wraps may call super() too.
            inner = _rebound_function(contents, old, cell, seen)
            cells.append(old_cell if inner is contents else types.CellType(inner))
        else:
            cells.append(old_cell)
    if all(new is prior for new, prior in zip(cells, closure)):
        return func
    copy = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__, tuple(cells))
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__qualname__ = func.__qualname__
    copy.__doc__ = func.__doc__
    copy.__module__ = func.__module__
    copy.__annotations__ = func.__annotations__
    copy.__dict__.update(func.__dict__)
    seen[id(func)] = copy
    return copy


def _contents(cell: Any) -> Optional[Any]:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


NO_RANKS = ("{cls}.world_size is {size}: torch's DynamoDistributedMultiProcTestCase sizes its world by the "
            "accelerators, and this machine has none, so there is no rank to run the test (torch reports it "
            "passed without running it); give {cls} a world_size, as torch's own tests do (a property "
            "returning 2)")


def _spawn_processes_or_skip(self: Any) -> None:
    """Start the ranks, or skip the test when the world has none (torch's accelerator count on a machine without any)."""
    size = self.world_size
    if isinstance(size, int) and size < 1:
        self.skipTest(NO_RANKS.format(cls=type(self).__qualname__, size=size))
    DistributedTestBase._spawn_processes(self)


DynamoDistributedMultiProcTestCase = rebase(
    _torch_distributed.DynamoDistributedMultiProcTestCase,
    {_torch_distributed.DistributedTestBase: DistributedTestBase}, __name__,
    extra={"_spawn_processes": _spawn_processes_or_skip})

C10dTorchCommsTestBase = rebase(
    _torch_distributed.C10dTorchCommsTestBase,
    {_torch_distributed.MultiProcContinuousTest: MultiProcContinuousTest}, __name__)

ShardedTensorTestBase = rebase(
    _torch_sharded_tensor.ShardedTensorTestBase,
    {_torch_distributed.MultiProcessTestCase: MultiProcessTestCase}, __name__)
