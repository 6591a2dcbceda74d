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
  unsized name to a :class:`SizedTest` in the class, which no runner collects (it
  is not callable) and which keeps the test's function; it replaces
  ``world_size`` with :class:`WorldSizes`, which gives a test instance its own
  size and the class the list.  On a subclass, or again on the same class (a
  pytest marker's sizes over the attribute's), it sizes the tests it inherits
  from the functions their :class:`SizedTest` kept, and hides the sized names of
  sizes it no longer has.
* :func:`unexpand` (called by ``TestCase.__init_subclass__``) gives a subclass
  of one world size (``world_size = 3``) of a sized class its tests under their
  own names again and hides the inherited sized names.
* :func:`size_tests` (called by the pytest plugin for the tests of a shared-world
  class that carry their own ``world_size(n)`` marker) gives each such test its
  sized name at its marker's size only, as :func:`expand` does, and replaces
  ``world_size`` with :class:`TestSizes`, which gives those tests their size and
  every other test (and the class) the class's own value.
* :func:`sized_method` lets a process that made the class without the list (a
  rank of a class sized by a pytest marker) run a sized name anyway.

Everything else about the class is left alone.  Stdlib only (a leaf).
"""
from __future__ import annotations

import inspect
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from continuous_test.errors import ConfigError

__all__ = ["SIZED", "parse", "size_of", "name", "check", "expand", "unexpand", "sized_method", "SizedTest", "WorldSizes",
           "set_size", "test_size", "sizes_of", "size_tests", "TestSizes"]

# ``test_x[ws2]``: the base name and the size.
SIZED = re.compile(r"^(?P<base>.+)\[ws(?P<size>[1-9][0-9]*)\]$")
# The attribute a sized test instance keeps its size in.
SIZE_ATTR = "_ct_world_size"
BAD_SIZES = ("{where} must be a positive int or a non-empty list of distinct positive ints, got {value!r}")


def parse(method: str) -> Optional[Tuple[str, int]]:
    """``("test_x", 2)`` for ``"test_x[ws2]"``; None for an unsized name."""
    found = SIZED.match(method)
    return (found.group("base"), int(found.group("size"))) if found else None


def size_of(method: str) -> Optional[int]:
    """The size a sized name asks for: 2 for ``"test_x[ws2]"``; None for an unsized name."""
    parsed = parse(method)
    return parsed[1] if parsed else None


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


class TestSizes:
    """``world_size`` of a class of one size some of whose tests have their own (a method's marker):
    a sized test instance's size; the class's own value (an attribute or a property) for the rest."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def __get__(self, instance: Any, owner: Optional[type] = None) -> Any:
        if instance is not None and SIZE_ATTR in instance.__dict__:
            return instance.__dict__[SIZE_ATTR]
        if isinstance(self.original, property) and self.original.fget is not None:
            return self.original.fget(instance if instance is not None else object.__new__(owner))  # type: ignore[arg-type]
        return self.original

    def __set__(self, instance: Any, value: Any) -> None:
        instance.__dict__[SIZE_ATTR] = value

    def __repr__(self) -> str:
        return f"TestSizes({self.original!r})"


def size_tests(cls: type, marked: Dict[str, int]) -> None:
    """Run each test of ``marked`` (unsized name -> size) at that size alone, in that size's world; idempotent."""
    tests = _tests(cls)
    for attr, size in marked.items():
        raw = tests.get(attr)
        if raw is None:
            continue
        setattr(cls, name(attr, size), raw)
        setattr(cls, attr, SizedTest(raw, cls.__qualname__, attr, [size]))
        _hide_sizes(cls, {attr: raw}, keep=[size])
    if marked and not isinstance(inspect.getattr_static(cls, "world_size", None), (WorldSizes, TestSizes)):
        setattr(cls, "world_size", TestSizes(inspect.getattr_static(cls, "world_size", None)))


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


class SizedTest:
    """What a sized class holds under a test's unsized name: not callable, so that no runner collects it,
    and the test's own function, so that a subclass of other sizes (or of one) still has the test."""

    def __init__(self, function: Any, owner: str, method: str, sizes: Sequence[int]) -> None:
        self.function, self.owner, self.method, self.sizes = function, owner, method, list(sizes)

    def __bool__(self) -> bool:  # as the None it replaces: no test under this name
        return False

    def __repr__(self) -> str:  # unittest's loader prints it for the unsized name: "don't know how to make test from"
        names = ", ".join(f"{self.owner}.{name(self.method, size)}" for size in self.sizes)
        return (f"{self.owner}.{self.method}, which runs once per world size of {self.owner}.world_size: "
                f"name one of {names} (or the class, for every size)")


def _prefix(cls: type) -> str:
    prefix = getattr(cls, "testMethodPrefix", "test")
    return prefix if isinstance(prefix, str) else "test"


def _tests(cls: type) -> Dict[str, Any]:
    """Every test of ``cls`` by its unsized name -> its function: its own, and the ones sizes hid."""
    found = {}
    prefix = _prefix(cls)
    for attr in dir(cls):
        if not attr.startswith(prefix) or parse(attr) is not None:
            continue
        raw = inspect.getattr_static(cls, attr, None)
        if isinstance(raw, SizedTest):
            found[attr] = raw.function
        elif callable(getattr(cls, attr, None)):
            found[attr] = raw
    return found


def expand(cls: type, sizes: Sequence[int]) -> None:
    """Give each test of ``cls`` one name per size and no other (see the module docstring); idempotent."""
    tests = _tests(cls)
    for attr, raw in tests.items():
        for size in sizes:
            setattr(cls, name(attr, size), raw)
        setattr(cls, attr, SizedTest(raw, cls.__qualname__, attr, sizes))  # not collected: each size is
    _hide_sizes(cls, tests, keep=sizes)
    setattr(cls, "world_size", WorldSizes(sizes))


def unexpand(cls: type) -> None:
    """Give ``cls``, a class of one world size, its tests under their own names again (see the module docstring)."""
    tests = _tests(cls)
    for attr, raw in tests.items():
        if isinstance(inspect.getattr_static(cls, attr, None), SizedTest):
            setattr(cls, attr, raw)
    _hide_sizes(cls, tests, keep=())


def _hide_sizes(cls: type, tests: Dict[str, Any], keep: Sequence[int]) -> None:
    """The sized names of ``tests`` at sizes not in ``keep``, inherited or set before, no longer collected."""
    for attr in dir(cls):
        parsed = parse(attr)
        if parsed is not None and parsed[0] in tests and parsed[1] not in keep and \
                inspect.getattr_static(cls, attr, None) is not None:
            setattr(cls, attr, None)


def sized_method(cls: type, method: str) -> None:
    """Make ``method`` (``test_x[ws2]``) an attribute of ``cls`` if only ``test_x`` is (a marker's sizes)."""
    parsed = parse(method)
    if parsed is None or inspect.getattr_static(cls, method, None) is not None:
        return
    raw = _tests(cls).get(parsed[0])
    if raw is not None:
        setattr(cls, method, raw)


def set_size(instance: Any, size: int) -> None:
    """Make ``instance.world_size`` read ``size`` (a sized test; in a rank of a marker-sized class too)."""
    cls = type(instance)
    if not isinstance(inspect.getattr_static(cls, "world_size", None), (WorldSizes, TestSizes)):
        setattr(cls, "world_size", WorldSizes([size]))  # a rank of a class sized by a pytest marker
    instance.__dict__[SIZE_ATTR] = size


def test_size(instance: Any) -> Optional[int]:
    """The size of a sized test instance (from its method name), or None."""
    return size_of(getattr(instance, "_testMethodName", ""))
