"""Several world sizes for one test class or function: ``world_size = [1, 2, 4]``.

A class whose ``world_size`` is a list (a class attribute, or a property that
returns one) has each of its tests once per size, under the name
``test_x[ws2]``, which unittest prints and pytest uses as the test's id, so
``-k ws2`` selects one size.  Each size has its own world (the registry of worlds
is keyed by class *and* size), so shuffle, leaks, bisect (predecessors in the
same world only), the timeline and the reports work per size.  In the test,
``self.world_size`` is that test's size.

What this module touches, and where:

* :func:`expand` (called by ``TestCase.__init_subclass__`` at class creation, and
  by the pytest plugin for a class marked ``world_size([...])``) adds one
  attribute per test and size to the class, each the test's own function object
  (not a wrapper: tracebacks and ``__wrapped__`` are unchanged), and sets the
  unsized name to ``None`` in the class, so that no runner collects it; it
  replaces ``world_size`` with :class:`WorldSizes`, which gives a test instance
  its own size and the class the list.
* :func:`sized_method` lets a process that made the class without the list (a
  rank of a class sized by a pytest marker) run a sized name anyway.

Everything else about the class is left alone.  Stdlib only (a leaf).
"""
from __future__ import annotations

import inspect
import re
from typing import Any, List, Optional, Sequence, Tuple

from continuous_test.errors import ConfigError

__all__ = ["SIZED", "parse", "name", "check", "expand", "sized_method", "WorldSizes", "set_size", "test_size", "sizes_of"]

# ``test_x[ws2]``: the base name and the size.
SIZED = re.compile(r"^(?P<base>.+)\[ws(?P<size>[1-9][0-9]*)\]$")
# The attribute a sized test instance keeps its size in.
SIZE_ATTR = "_ct_world_size"
BAD_SIZES = ("{where} must be a positive int or a non-empty list of distinct positive ints, got {value!r}")


def parse(method: str) -> Optional[Tuple[str, int]]:
    """``("test_x", 2)`` for ``"test_x[ws2]"``; None for an unsized name."""
    found = SIZED.match(method)
    return (found.group("base"), int(found.group("size"))) if found else None


def name(method: str, size: int) -> str:
    """The sized name of ``method`` at ``size``: ``test_x[ws2]``."""
    return f"{method}[ws{size}]"


def is_list(value: Any) -> bool:
    """Whether ``value`` asks for several sizes (a list or tuple; a str is not)."""
    return isinstance(value, (list, tuple))


def check(value: Any, where: str) -> List[int]:
    """``value`` (a list of sizes) checked: ConfigError naming ``where`` unless every size is a positive int, once."""
    sizes = list(value)
    good = sizes and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes)
    if not good or len(set(sizes)) != len(sizes):
        raise ConfigError(BAD_SIZES.format(where=where, value=value))
    return sizes


class WorldSizes:
    """``world_size`` of a class with several sizes: a test instance's own size; the list on the class."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = list(sizes)

    def __get__(self, instance: Any, owner: Optional[type] = None) -> Any:
        if instance is None:
            return self
        size = instance.__dict__.get(SIZE_ATTR)
        return self.sizes if size is None else size

    def __set__(self, instance: Any, value: Any) -> None:  # torch's bases assign self.world_size in a rank
        instance.__dict__[SIZE_ATTR] = value

    def __repr__(self) -> str:
        return f"WorldSizes({self.sizes})"


def sizes_of(cls: type) -> Optional[List[int]]:
    """The list of sizes ``cls`` declares (attribute, property or :class:`WorldSizes`), or None."""
    attr = inspect.getattr_static(cls, "world_size", None)
    if isinstance(attr, WorldSizes):
        return attr.sizes
    if isinstance(attr, property) and attr.fget is not None:
        try:
            value = attr.fget(object.__new__(cls))  # as config reads a size property
        except Exception:  # a property that needs a set-up instance: one size, read later
            return None
    else:
        value = attr
    return check(value, f"{cls.__qualname__}.world_size") if is_list(value) else None


def expand(cls: type, sizes: Sequence[int]) -> None:
    """Give each test of ``cls`` one name per size (see the module docstring); idempotent."""
    prefix = getattr(cls, "testMethodPrefix", "test") if isinstance(getattr(cls, "testMethodPrefix", None), str) \
        else "test"
    for attr in dir(cls):
        if not attr.startswith(prefix) or parse(attr) is not None:
            continue
        function = getattr(cls, attr, None)
        if not callable(function):
            continue
        raw = inspect.getattr_static(cls, attr)
        for size in sizes:
            setattr(cls, name(attr, size), raw)
        setattr(cls, attr, None)  # not collected: each size is
    setattr(cls, "world_size", WorldSizes(sizes))


def sized_method(cls: type, method: str) -> None:
    """Make ``method`` (``test_x[ws2]``) an attribute of ``cls`` if only ``test_x`` is (a marker's sizes)."""
    parsed = parse(method)
    if parsed is None or inspect.getattr_static(cls, method, None) is not None:
        return
    raw = inspect.getattr_static(cls, parsed[0], None)
    if raw is not None:
        setattr(cls, method, raw)


def set_size(instance: Any, size: int) -> None:
    """Make ``instance.world_size`` read ``size`` (a sized test; in a rank of a marker-sized class too)."""
    cls = type(instance)
    if not isinstance(inspect.getattr_static(cls, "world_size", None), WorldSizes):
        setattr(cls, "world_size", WorldSizes([size]))  # a rank of a class sized by a pytest marker
    instance.__dict__[SIZE_ATTR] = size


def test_size(instance: Any) -> Optional[int]:
    """The size of a sized test instance (from its method name), or None."""
    parsed = parse(getattr(instance, "_testMethodName", ""))
    return parsed[1] if parsed else None
