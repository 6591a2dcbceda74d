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
import sys
from typing import Any, Callable, Dict, List, Optional, TypeVar

from continuous_test import _role, config
from continuous_test._role import FUNCTION_CLASS_ATTR, ProcessRole
from continuous_test.case import MultiProcContinuousTest
from continuous_test.launched.detect import detect
from continuous_test.verdict import replay
from continuous_test.verdict.merge import Verdict

__all__ = ["distributed", "function_classes", "NOT_PICKLABLE"]

# Hide this module's frames (the method wrapper) from the ranks' tracebacks.
__unittest = True

NOT_PICKLABLE = (
    "{test}: argument {name!r} ({kind}) cannot be sent to the rank processes: {error}. "
    "Pass only picklable parameters and fixture values to @distributed functions"
)
F = TypeVar("F", bound=Callable[..., Any])


def distributed(world_size: int = 2, *, timeout: Optional[float] = None,
                backend: Optional[str] = None) -> Callable[[F], F]:
    """Decorator: run a pytest test function on every rank of the module's shared world."""
    limit = None if timeout is None else config.parse_seconds(timeout, "timeout", "@distributed(timeout=...)")

    def decorate(fn: F) -> F:
        cls = _class_for(sys.modules[fn.__module__], world_size, backend)
        setattr(cls, fn.__name__, _as_method(fn, limit))

        @functools.wraps(fn)
        def run_everywhere(*args: Any, **kwargs: Any) -> None:
            __tracebackhide__ = True  # noqa: F841 - pytest shows the ranks' tracebacks
            if args:
                raise TypeError(f"{fn.__name__}: @distributed functions take keyword arguments only")
            replay.raise_verdict(None, _verdict(cls, fn.__name__, kwargs), fn)

        setattr(run_everywhere, FUNCTION_CLASS_ATTR, cls)
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
        namespace: Dict[str, Any] = {"world_size": world_size, "__module__": module.__name__,
                                     "__qualname__": name, "__test__": False}
        if backend is not None:
            namespace["backend_str"] = classmethod(lambda c: backend)
        cls = type(name, (MultiProcContinuousTest,), namespace)
        setattr(module, name, cls)
    return cls


def function_classes(module: Any) -> List[type]:
    """The hidden classes of ``module``: one per shared world its ``@distributed`` functions run in."""
    return [v for k, v in vars(module).items() if k.startswith("_DistributedFunctions_") and isinstance(v, type)]


def _verdict(cls: type, name: str, kwargs: Dict[str, Any]) -> Verdict:
    test_id = f"{name}[{', '.join(f'{k}={v!r}' for k, v in kwargs.items())}]" if kwargs else name
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
