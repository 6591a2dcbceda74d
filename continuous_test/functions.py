"""Plain pytest test functions that run on every rank: ``@continuous_test.distributed``.

.. code-block:: python

    @continuous_test.distributed(world_size=2)
    @pytest.mark.parametrize("n", [1, 4])
    def test_all_reduce(n):
        t = torch.ones(n)
        dist.all_reduce(t)
        assert t.tolist() == [2.0] * n

All such functions of one module with the same world size (and backend) share one
world.  Each decorated function is also added, as a method, to a hidden
``MultiProcContinuousTest`` subclass of its module; ranks import that class by name
and run the method, so failures, skips (``pytest.skip``), time limits and
``-k``/``-x`` behave exactly as for test classes.  Arguments pytest passes (parameters,
fixture values) are pickled to every rank.
"""
from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar, Union

from continuous_test import _role, config, sizes
from continuous_test._role import FUNCTION_CLASS_ATTR, WORLD_NAME_ATTR, ProcessRole
from continuous_test.case import MultiProcContinuousTest
from continuous_test._launch import detect
from continuous_test.verdict import replay
from continuous_test.verdict.merge import Verdict

__all__ = ["distributed", "function_classes", "function_sizes", "NOT_PICKLABLE", "SIZE_ARG"]

# The argument pytest parametrizes for a function of several world sizes, and
# where the wrapper keeps them.
SIZE_ARG = "ct_world_size"
SIZES_ATTR = "_ct_world_sizes"

# Hide this module's frames (the method wrapper) from the ranks' tracebacks.
__unittest = True

NOT_PICKLABLE = (
    "{test}: argument {name!r} ({kind}) cannot be sent to the rank processes: {error}. "
    "Pass only picklable parameters and fixture values to @distributed functions"
)
F = TypeVar("F", bound=Callable[..., Any])


def distributed(world_size: Union[int, Sequence[int]] = 2, *, timeout: Optional[float] = None,
                backend: Optional[str] = None, world_scope: Optional[str] = None) -> Callable[[F], F]:
    """Decorator: run a pytest test function on every rank of the module's shared world.

    ``world_size=[1, 2, 4]`` runs it once per size, in each size's world, with the
    ids ``test_x[ws1]``, ``test_x[ws2]``, ``test_x[ws4]``.  ``world_scope``
    ("class", "module", "session") is the hidden class's ``world_scope``
    (docs/fresh-worlds.rst).
    """
    if world_scope is not None:
        config.parse_world_scope(world_scope, "@distributed(world_scope=...)")
    limit = None if timeout is None else config.parse_seconds(timeout, "timeout", "@distributed(timeout=...)")
    several = sizes.check(world_size, "@distributed(world_size=...)") if sizes.is_list(world_size) else None

    def decorate(fn: F) -> F:
        module = sys.modules[fn.__module__]
        classes = {size: _class_for(module, size, backend) for size in several or [int(world_size)]}  # type: ignore[arg-type]
        if world_scope is not None:
            for cls in classes.values():
                cls.world_scope = world_scope  # type: ignore[attr-defined]
        # A function of several sizes is method test_x[wsN] of each size's class, as a class's test is.
        names = {size: sizes.name(fn.__name__, size) if several else fn.__name__ for size in classes}
        for size, cls in classes.items():
            setattr(cls, names[size], _as_method(fn, limit))

        @functools.wraps(fn)
        def run_everywhere(*args: Any, **kwargs: Any) -> None:
            __tracebackhide__ = True  # noqa: F841 - pytest shows the ranks' tracebacks
            if args:
                raise TypeError(f"{fn.__name__}: @distributed functions take keyword arguments only")
            size = kwargs.pop(SIZE_ARG, next(iter(classes)))
            replay.raise_verdict(None, _verdict(classes[size], names[size], kwargs), fn)

        setattr(run_everywhere, FUNCTION_CLASS_ATTR, next(iter(classes.values())))
        if several:
            setattr(run_everywhere, SIZES_ATTR, several)
            # pytest parametrizes this argument (the plugin's pytest_generate_tests): ids test_x[ws2].
            signature = inspect.signature(fn)
            extra = inspect.Parameter(SIZE_ARG, inspect.Parameter.KEYWORD_ONLY)
            run_everywhere.__signature__ = signature.replace(  # type: ignore[attr-defined]
                parameters=[*signature.parameters.values(), extra])
        return run_everywhere  # type: ignore[return-value]

    return decorate


def _as_method(fn: Callable, limit: Optional[float]) -> Callable:
    def method(self: MultiProcContinuousTest) -> None:
        fn(**getattr(self, "call_kwargs", {}))

    method.__name__ = method.__qualname__ = fn.__name__
    if hasattr(fn, "pytestmark"):  # ranks read ct_leaks markers from the method
        method.pytestmark = fn.pytestmark  # type: ignore[attr-defined]
    if limit is not None:
        setattr(method, config.TIMEOUT_ATTR, limit)
    return method


def _class_for(module: Any, world_size: int, backend: Optional[str]) -> type:
    """The hidden test class of ``module`` for this world size and backend, made on first use."""
    name = f"_DistributedFunctions_{world_size}" + (f"_{backend}" if backend else "")
    cls = module.__dict__.get(name)
    if cls is None:
        shown = f"@distributed(world_size={world_size}" + (f", backend={backend!r}" if backend else "")
        namespace: Dict[str, Any] = {"world_size": world_size, "__module__": module.__name__,
                                     "__qualname__": name, "__test__": False,
                                     WORLD_NAME_ATTR: f"{shown}) functions of {module.__name__}"}
        if backend is not None:
            namespace["backend_str"] = classmethod(lambda c: backend)
        cls = type(name, (MultiProcContinuousTest,), namespace)
        setattr(module, name, cls)
    return cls


def function_sizes(function: Any) -> Optional[List[int]]:
    """The sizes of a ``@distributed`` function of several world sizes, else None."""
    return getattr(function, SIZES_ATTR, None)


def function_classes(module: Any) -> List[type]:
    """The hidden classes of ``module``: one per shared world its ``@distributed`` functions run in."""
    return [v for k, v in vars(module).items() if k.startswith("_DistributedFunctions_") and isinstance(v, type)]


# The id pytest gave the test it is running (``test_lr[0.1]``), set by the pytest plugin around
# each distributed test: what reports name a function's call by.  None outside pytest.
_pytest_id: Optional[str] = None


def use_pytest_id(test_id: Optional[str]) -> None:
    """Name the next calls of @distributed functions ``test_id`` (pytest's own id), until None."""
    global _pytest_id
    _pytest_id = test_id


def _verdict(cls: type, name: str, kwargs: Dict[str, Any]) -> Verdict:
    test_id = _pytest_id or (f"{name}[{', '.join(f'{k}={v!r}' for k, v in kwargs.items())}]" if kwargs else name)
    _check_picklable(test_id, kwargs)
    role = _role.current_role()
    if role is ProcessRole.RANK:
        raise RuntimeError(f"{test_id}: a @distributed function cannot be called inside a rank")
    if role is ProcessRole.LAUNCHED:
        from continuous_test.launched import run as launched

        case = cls(name)
        case.call_kwargs = kwargs
        return launched.run_case_in_place(case, detect(), test_id)
    from continuous_test.controller import dispatch

    return dispatch.function_verdict(cls, name, test_id, kwargs)


def _check_picklable(test_id: str, kwargs: Dict[str, Any]) -> None:
    import pickle

    for key, value in kwargs.items():
        try:
            pickle.dumps(value)
        except Exception as exc:
            raise TypeError(NOT_PICKLABLE.format(test=test_id, name=key, kind=type(value).__name__,
                                                 error=exc)) from None
