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

__all__ = ["distributed", "distributed_fixture", "function_classes", "function_sizes", "NOT_PICKLABLE", "SIZE_ARG",
           "NOT_A_PLAIN_CLASS", "NO_TEST_METHODS", "NOT_A_TEST_METHOD", "FIXTURE_NOT_A_FUNCTION"]

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
NOT_A_PLAIN_CLASS = (
    "@distributed on {cls}: a unittest.TestCase class already has its ranks; make it a plain pytest class "
    "(class {name}:) or subclass MultiProcContinuousTest instead of decorating it"
)
NO_TEST_METHODS = (
    "@distributed on {cls}: the class has no test methods (functions named {prefix}*, taking self); "
    "decorate a plain pytest class of test methods"
)
NOT_A_TEST_METHOD = (
    "{cls}.{name}: @distributed runs a plain class's test methods on every rank, and this is a {kind}, not a "
    "function taking self; write it as def {name}(self, ...)"
)
FIXTURE_NOT_A_FUNCTION = (
    "@distributed_fixture on {name}: {why}; decorate a plain function that returns its value (its teardown: "
    "write under class_tmpdir, which is removed at the class's end)"
)
BAD_RETURN = "@distributed_fixture {name}: rank {rank}'s return value ({kind}) cannot be sent back: {error}"
# Where a distributed fixture's ranks write their return values (a keyword argument of its hidden method).
RESULT_ARG = "ct_fixture_results"
F = TypeVar("F", bound=Callable[..., Any])


def distributed(world_size: Union[int, Sequence[int], None] = None, *, timeout: Optional[float] = None,
                backend: Optional[str] = None, world_scope: Optional[str] = None) -> Callable[[F], F]:
    """Decorator: run a pytest test function, or each test method of a plain pytest class, on every rank.

    ``world_size=[1, 2, 4]`` runs it once per size, in each size's world, with the
    ids ``test_x[ws1]``, ``test_x[ws2]``, ``test_x[ws4]``.  Left out: a class's own
    ``world_size`` attribute, else 2.  See docs/pytest-classes.rst for classes.
    ``world_scope`` ("class", "module", "session") is the hidden classes'
    ``world_scope`` (docs/fresh-worlds.rst).
    """
    if world_scope is not None:
        config.parse_world_scope(world_scope, "@distributed(world_scope=...)")
    if world_size is None:
        def decorate_default(fn: F) -> F:
            given = fn.__dict__.get("world_size", 2) if inspect.isclass(fn) else 2
            return distributed(given, timeout=timeout, backend=backend, world_scope=world_scope)(fn)

        return decorate_default
    limit = None if timeout is None else config.parse_seconds(timeout, "timeout", "@distributed(timeout=...)")
    several = sizes.check(world_size, "@distributed(world_size=...)") if sizes.is_list(world_size) else None

    def decorate(fn: F) -> F:
        if inspect.isclass(fn):
            return _distribute_class(fn, world_size, limit, backend, world_scope)  # type: ignore[return-value]
        return _distribute(fn, several or [int(world_size)], bool(several), limit, backend,  # type: ignore[arg-type]
                           world_scope=world_scope)

    return decorate


def _distribute(fn: Callable, size_list: List[int], several: bool, limit: Optional[float], backend: Optional[str],
                owner: Optional[type] = None, world_scope: Optional[str] = None) -> Any:
    """``fn`` as pytest calls it: each call runs ``fn`` on every rank of its size's world.

    ``owner`` is the plain pytest class ``fn`` is a method of (``self`` in a rank is a new
    instance of it), else None for a module function.
    """
    module = sys.modules[fn.__module__]
    classes = {size: _class_for(module, size, backend, owner) for size in size_list}
    if world_scope is not None:
        for cls in classes.values():
            cls.world_scope = world_scope  # type: ignore[attr-defined]
    # A function of several sizes is method test_x[wsN] of each size's class, as a class's test is.
    names = {size: sizes.name(fn.__name__, size) if several else fn.__name__ for size in classes}
    for size, cls in classes.items():
        setattr(cls, names[size], _as_method(fn, limit, owner))
    what = "@distributed functions" if owner is None else f"the tests of @distributed class {owner.__qualname__}"

    @functools.wraps(fn)
    def run_everywhere(*args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True  # noqa: F841 - pytest shows the ranks' tracebacks
        if args[1 if owner is not None else 0:]:
            raise TypeError(f"{fn.__qualname__}: {what} take keyword arguments only")
        size = kwargs.pop(SIZE_ARG, next(iter(classes)))
        replay.raise_verdict(None, _verdict(classes[size], names[size], kwargs), fn)

    setattr(run_everywhere, FUNCTION_CLASS_ATTR, next(iter(classes.values())))
    if several:
        setattr(run_everywhere, SIZES_ATTR, size_list)
        # pytest parametrizes this argument (the plugin's pytest_generate_tests): ids test_x[ws2].
        signature = inspect.signature(fn)
        extra = inspect.Parameter(SIZE_ARG, inspect.Parameter.KEYWORD_ONLY)
        run_everywhere.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*signature.parameters.values(), extra])
    return run_everywhere


def _distribute_class(cls: type, world_size: Any, limit: Optional[float], backend: Optional[str],
                      world_scope: Optional[str] = None) -> type:
    """``cls``, a plain pytest class, with each test method run on every rank (a method's world_size marker
    picks its own sizes): the class pytest collects, as the user wrote it otherwise."""
    import unittest

    if issubclass(cls, unittest.TestCase):
        raise TypeError(NOT_A_PLAIN_CLASS.format(cls=cls.__qualname__, name=cls.__name__))
    several = sizes.check(world_size, f"@distributed(world_size=...) of {cls.__qualname__}") \
        if sizes.is_list(world_size) else None
    default = several or [int(world_size)]
    found = False
    for name, raw in list(vars(cls).items()):
        if not name.startswith("test"):
            continue
        if not inspect.isfunction(raw):
            if callable(raw) or isinstance(raw, (staticmethod, classmethod, property)):
                raise TypeError(NOT_A_TEST_METHOD.format(cls=cls.__qualname__, name=name, kind=type(raw).__name__))
            continue
        found = True
        own = _marked_sizes(raw)
        chosen = own if own is not None else default
        runs = _distribute(raw, chosen, len(chosen) > 1 or (own is None and several is not None), limit, backend, cls,
                           world_scope)
        setattr(cls, name, runs)
    if not found:
        raise TypeError(NO_TEST_METHODS.format(cls=cls.__qualname__, prefix="test"))
    setattr(cls, "world_size", several or default[0])
    return cls


def _marked_sizes(fn: Callable) -> Optional[List[int]]:
    """The sizes a method's own ``@pytest.mark.world_size(n)`` (or ``([n, m])``) asks for; None for no marker
    or a bad value (which the pytest plugin reports, naming the test)."""
    for mark in getattr(fn, "pytestmark", []):
        if getattr(mark, "name", None) != "world_size":
            continue
        value = mark.args[0] if mark.args else next(iter(mark.kwargs.values()), None)
        try:
            return sizes.check(value if sizes.is_list(value) else [value], "world_size")
        except ValueError:
            return None
    return None


def distributed_fixture(world_size: int = 2, *, scope: str = "function", per_rank: bool = False,
                        name: Optional[str] = None, timeout: Optional[float] = None,
                        backend: Optional[str] = None) -> Callable[[Callable], Any]:
    """Decorator: a pytest fixture whose body runs on every rank of a world of ``world_size`` ranks.

    Its arguments are fixtures, pickled to the ranks; its value is rank 0's return value, or with
    ``per_rank=True`` the list of every rank's.  DeepSpeed's ``DistributedFixture``, as a fixture.
    """
    import pytest

    limit = None if timeout is None else config.parse_seconds(timeout, "timeout", "@distributed_fixture(timeout=...)")
    size = sizes.check([world_size], "@distributed_fixture(world_size=...)")[0]

    def decorate(fn: Callable) -> Any:
        if not inspect.isfunction(fn) or inspect.isgeneratorfunction(fn):
            why = "a generator (a fixture with teardown)" if inspect.isgeneratorfunction(fn) else "not a function"
            raise TypeError(FIXTURE_NOT_A_FUNCTION.format(name=getattr(fn, "__qualname__", fn), why=why))
        cls = _class_for(sys.modules[fn.__module__], size, backend)
        method = f"fixture_{fn.__name__}"
        setattr(cls, method, _fixture_method(fn, limit, per_rank))

        def run_fixture(**kwargs: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841
            import tempfile

            shown = _pytest_id
            with tempfile.TemporaryDirectory(prefix="ct-fixture-") as out:
                use_pytest_id(f"{fn.__name__} (@distributed_fixture of {shown or 'a test'})")
                try:
                    replay.raise_verdict(None, _verdict(cls, method, {**kwargs, RESULT_ARG: out}), fn)
                finally:
                    use_pytest_id(shown)
                return _fixture_value(out, size, per_rank)

        run_fixture.__name__ = run_fixture.__qualname__ = fn.__name__
        run_fixture.__module__ = fn.__module__
        run_fixture.__doc__ = fn.__doc__
        run_fixture.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
        return pytest.fixture(scope=scope, name=name or fn.__name__)(run_fixture)  # type: ignore[call-overload]

    return decorate


def _fixture_method(fn: Callable, limit: Optional[float], per_rank: bool) -> Callable:
    """The hidden method a distributed fixture's ranks run: its body, then rank 0's (or each rank's) value saved."""
    import os
    import pickle

    def method(self: MultiProcContinuousTest) -> None:
        kwargs = dict(getattr(self, "call_kwargs", {}))
        out = kwargs.pop(RESULT_ARG)
        value = fn(**kwargs)
        if per_rank or self.rank == 0:
            try:
                data = pickle.dumps(value)
            except Exception as exc:
                raise TypeError(BAD_RETURN.format(name=fn.__name__, rank=self.rank, kind=type(value).__name__,
                                                  error=exc)) from None
            with open(os.path.join(out, f"rank{self.rank}.pickle"), "wb") as f:
                f.write(data)

    method.__name__ = method.__qualname__ = f"fixture_{fn.__name__}"
    if limit is not None:
        setattr(method, config.TIMEOUT_ATTR, limit)
    return method


def _fixture_value(out: str, size: int, per_rank: bool) -> Any:
    """What the ranks of a distributed fixture returned: rank 0's value, or the list of every rank's."""
    import os
    import pickle

    def load(rank: int) -> Any:
        with open(os.path.join(out, f"rank{rank}.pickle"), "rb") as f:
            return pickle.load(f)

    return [load(rank) for rank in range(size)] if per_rank else load(0)


def _as_method(fn: Callable, limit: Optional[float], owner: Optional[type] = None) -> Callable:
    def method(self: MultiProcContinuousTest) -> None:
        if owner is None:
            fn(**getattr(self, "call_kwargs", {}))
        else:  # a plain class's test: self is a new instance of the user's class, as pytest makes one per test
            fn(owner(), **getattr(self, "call_kwargs", {}))

    method.__name__ = method.__qualname__ = fn.__name__
    if hasattr(fn, "pytestmark"):  # ranks read ct_leaks markers from the method; its size is its class's
        method.pytestmark = [m for m in fn.pytestmark if getattr(m, "name", None) != "world_size"]  # type: ignore[attr-defined]
    if limit is not None:
        setattr(method, config.TIMEOUT_ATTR, limit)
    return method


def _class_for(module: Any, world_size: int, backend: Optional[str], owner: Optional[type] = None) -> type:
    """The hidden test class of ``module`` (or of its plain class ``owner``) for this world size and backend,
    made on first use."""
    name = f"_DistributedFunctions_{world_size}" + (f"_{backend}" if backend else "")
    if owner is not None:  # one world per size per class: the class's tests share it, and no other test
        name += "_of_" + owner.__qualname__.replace(".", "_")
    cls = module.__dict__.get(name)
    if cls is None:
        shown = f"@distributed(world_size={world_size}" + (f", backend={backend!r}" if backend else "")
        whose = f"functions of {module.__name__}" if owner is None else f"class {module.__name__}.{owner.__qualname__}"
        namespace: Dict[str, Any] = {"world_size": world_size, "__module__": module.__name__,
                                     "__qualname__": name, "__test__": False,
                                     WORLD_NAME_ATTR: f"{shown}) {whose}"}
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
