"""Sending ahead: which test the runner will run next, when that is certain.

A shared world's ranks are idle from the moment the last of them reports test
*k* until the controller sends test *k + 1*.  In between, the controller merges
*k*'s outcomes, the runner records the result (and prints it), and unittest or
pytest reaches the next test.  When every rank reported a plain pass and the
next test of the same class is known, :meth:`World.run_test
<continuous_test.controller.world.World.run_test>` sends it at once, and does the rest
while the ranks run it.  The guarantee is the one a test always had: no rank
starts *k + 1* before every rank ended *k*, passed, and left nothing to put back.

The next test is known from the runner, never guessed:

* unittest (``python test_x.py``, ``python -m unittest``, any runner built on
  ``unittest.TestSuite``): the suite that calls the test holds the next one; it
  is found in the suite's frame (:func:`next_in_suite`);
* pytest: the plugin's ``pytest_runtest_protocol`` hook has ``nextitem``
  (:func:`set_pytest_next`).  It names the next test only when nothing of
  pytest's may skip or change it: no skip or xfail marker, no fixture of function
  scope, no other per-test option, no conftest or plugin runtest hook.

A class that overrides ``run`` or ``__call__`` sends nothing ahead (its override
may skip a test), unless it sets ``send_ahead = True``.

A test sent ahead that the runner then does not run (it stopped after a failure
the ranks did not see, or Ctrl-C) is stopped with its world before anything
else runs; the next test starts in a fresh world.  ``CONTINUOUS_TEST_AHEAD=0``
turns sending ahead off (``1`` or unset: on).  Controller side only.
"""
from __future__ import annotations

import sys
import unittest
import unittest.suite
from typing import Any, Callable, Dict, List, Optional, Tuple

from continuous_test import _role
from continuous_test._role import RANK_CLASS_ATTR


__all__ = ["next_in_suite", "set_pytest_next", "next_test", "remaining_classes", "set_pytest_remaining"]

_SUITE_RUN = unittest.suite.TestSuite.run.__code__
# How far above the caller the suite's frame may be (subclasses' run() overrides add frames).
_MAX_DEPTH = 10
# Set by the pytest plugin while one item runs: (class, method, the next item's method).
_pytest_next: Optional[Tuple[type, str, str]] = None
# Set by the pytest plugin while one item runs: the classes of the items after it.
_pytest_remaining: Optional[Tuple[Optional[type], Callable[[], List[Any]]]] = None


def next_in_suite(case: unittest.TestCase) -> Optional[unittest.TestCase]:
    """The test the ``unittest.TestSuite`` running ``case`` runs right after it, or None.

    Reads the suite's own frame (``TestSuite.run``, recognised by its code object,
    a few frames above the caller): its ``self`` holds the tests and ``index`` the
    one running.  Any other caller, or a suite whose entry is not ``case``, gives None.
    """
    frame: Any = sys._getframe(1)
    for _ in range(_MAX_DEPTH):
        frame = frame.f_back
        if frame is None:
            return None
        if frame.f_code is _SUITE_RUN:
            scope = frame.f_locals
            suite, index = scope.get("self"), scope.get("index")
            if type(suite).__iter__ is not unittest.TestSuite.__iter__:
                return None  # the suite runs its tests in an order of its own
            tests = getattr(suite, "_tests", None)
            if not isinstance(index, int) or not isinstance(tests, list) or not 0 <= index < len(tests) - 1:
                return None
            following = tests[index + 1]
            return following if tests[index] is case and isinstance(following, unittest.TestCase) else None
    return None


def set_pytest_next(current: Optional[Tuple[type, str, str]]) -> None:
    """Set the hint for the pytest item running now, (class, method, next method), or clear it with None."""
    global _pytest_next
    _pytest_next = current


def set_pytest_remaining(remaining: Optional[Tuple[Optional[type], Callable[[], List[Any]]]]) -> None:
    """Set (the current item's class, what gives the classes of the items pytest runs after it), or clear it."""
    global _pytest_remaining
    _pytest_remaining = remaining


def remaining_classes(cls: type) -> Optional[List[Any]]:
    """The classes of the tests the runner has still to run after ``cls``'s, or None where it does not say.

    A world that classes share (``world_scope``) stops after the last of them
    (:func:`continuous_test.controller.world.stop_world`).  pytest: the items after
    the current one (the plugin's ``pytest_runtest_protocol``).  unittest: the
    tests left in every ``unittest.TestSuite`` running now, read from their frames
    (entries already run are ``None``: the suite drops them).
    """
    if _pytest_remaining is not None and _pytest_remaining[0] is cls:
        return _pytest_remaining[1]()
    found: List[Any] = []
    frame: Any = sys._getframe(1)
    innermost = True
    seen = False
    while frame is not None:
        if frame.f_code is _SUITE_RUN:
            scope = frame.f_locals
            tests, index = getattr(scope.get("self"), "_tests", None), scope.get("index")
            if isinstance(tests, list) and isinstance(index, int):
                seen = True
                _flatten(tests[index if innermost else index + 1:], found)
            innermost = False
        frame = frame.f_back
    return found if seen else None


def _flatten(tests: Any, found: List[Any]) -> None:
    for test in tests:
        if isinstance(test, unittest.TestSuite):
            _flatten(getattr(test, "_tests", ()), found)
        elif isinstance(test, unittest.TestCase) and type(test) not in found:
            found.append(type(test))


def next_test(case: unittest.TestCase) -> Optional[str]:
    """The method the runner runs right after ``case`` in the same world, if certain; else None.

    Valid only within ``case``'s run, a few frames below the suite that runs it.
    """
    cls, method = type(case), case._testMethodName
    if not _class_allows(cls):
        return None
    hint = _pytest_next
    if hint is not None:
        return hint[2] if hint[0] is cls and hint[1] == method else None
    following = next_in_suite(case)
    if following is None or type(following) is not cls:
        return None
    name = following._testMethodName
    return None if _role.skipped_by_unittest(cls, name) else name


def _class_allows(cls: type) -> bool:
    """The class's ``send_ahead`` attribute; unset, False when the class overrides ``run`` or ``__call__``.

    Such an override may skip a test without running it (a list of known-broken
    tests, say): only the class can say that its override always runs the test.
    """
    setting = getattr(cls, "send_ahead", None)
    if setting is not None:
        return bool(setting)
    allowed = _ALLOWED.get(cls)
    if allowed is None:
        allowed = _ALLOWED[cls] = not any(
            "run" in vars(klass) or "__call__" in vars(klass)
            for klass in cls.__mro__[:_ours(cls)])
    return allowed


def _ours(cls: type) -> int:
    """The index in ``cls.__mro__`` of this library's engine class, whose ``run`` picks the role."""
    for index, klass in enumerate(cls.__mro__):
        if RANK_CLASS_ATTR in vars(klass):
            return index
    return len(cls.__mro__)


_ALLOWED: Dict[type, bool] = {}
