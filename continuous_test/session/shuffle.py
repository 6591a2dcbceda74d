"""Shuffled test order, replayable from a seed.

Every ordering is a sort by a keyed hash of ``(seed, name)``, never a random
shuffle of the list at hand: the relative order of two tests depends only on the
seed and their names, so deselecting tests (``-k``) or stopping early (``-x``)
leaves the order of the others unchanged, and every xdist worker computes the
same collection.  Tests stay grouped by class (one world per class) and classes
by module; only the order within those groups changes:

* unittest (``run_tests()``, ``python -m unittest``): test methods within each
  class (the loader's ``sortTestMethodsUsing``) and classes within each module;
* pytest (``--ct-shuffle[=SEED]``): tests within each class (module-level
  functions count as one group), and those groups within each module.  Keys are
  the same names as unittest's, so a seed gives the same order under both.

The seed comes from ``--ct-shuffle=SEED`` or ``CONTINUOUS_TEST_SHUFFLE=SEED``; it is
printed when tests are loaded, and in every failure report.
"""
from __future__ import annotations

import functools
import hashlib
import random
import sys
import unittest
from typing import Any, Dict, List, Optional

from continuous_test import config

__all__ = ["order_key", "install", "install_default", "shuffle_items", "random_seed", "SEED_LINE"]

SEED_LINE = "continuous_test: test order shuffled with seed {seed} (CONTINUOUS_TEST_SHUFFLE={seed} replays it)"
_INSTALLED = "_continuous_test_shuffle_seed"


def order_key(seed: int, name: str) -> bytes:
    """The sort key of ``name`` under ``seed``; the same in every process."""
    return hashlib.blake2b(f"{seed}\0{name}".encode(), digest_size=8).digest()


def random_seed() -> int:
    """A fresh seed for ``--ct-shuffle`` without a value."""
    return random.SystemRandom().randrange(10**6)


def install(loader: unittest.TestLoader, seed: int, announce: bool = True) -> unittest.TestLoader:
    """Make ``loader`` shuffle test methods and classes by ``seed`` (announced once if ``announce``); returns it."""
    def compare(a: str, b: str) -> int:
        ka, kb = order_key(seed, a), order_key(seed, b)
        return (ka > kb) - (ka < kb)

    loader.sortTestMethodsUsing = compare
    load_module = loader.loadTestsFromModule

    @functools.wraps(load_module)
    def load_shuffled(module: Any, *args: Any, **kwargs: Any) -> unittest.TestSuite:
        if announce and not getattr(loader, "_ct_announced", False):
            loader._ct_announced = True  # type: ignore[attr-defined]
            print(SEED_LINE.format(seed=seed), file=sys.stderr, flush=True)
        suite = load_module(module, *args, **kwargs)
        groups: List[Any] = sorted(suite, key=lambda group: order_key(seed, _first_class(group)))
        return loader.suiteClass(groups)

    loader.loadTestsFromModule = load_shuffled  # type: ignore[method-assign]
    setattr(loader, _INSTALLED, seed)
    return loader


def _first_class(group: Any) -> str:
    if isinstance(group, unittest.TestSuite):
        for test in group:
            return _first_class(test)
        return ""
    return type(group).__qualname__


def install_default() -> None:
    """Make unittest's default loader (``python -m unittest``) shuffle when CONTINUOUS_TEST_SHUFFLE is set, once."""
    seed = config.shuffle_seed()
    loader = unittest.defaultTestLoader
    if seed is not None and getattr(loader, _INSTALLED, None) is None:
        install(loader, seed)


def shuffle_items(items: List[Any], seed: int) -> None:
    """Reorder pytest items in place: tests within each class, classes within each module."""
    modules: Dict[Any, Dict[Any, List[Any]]] = {}
    for item in items:
        module = getattr(item, "module", None) or getattr(item, "fspath", None)
        scope = getattr(item, "cls", None)
        modules.setdefault(module, {}).setdefault(scope, []).append(item)
    ordered: List[Any] = []
    for groups in modules.values():
        for scope in sorted(groups, key=lambda s: order_key(seed, _scope_name(s))):
            ordered.extend(sorted(groups[scope], key=lambda item: order_key(seed, item.name)))
    items[:] = ordered


def _scope_name(scope: Optional[type]) -> str:
    return "" if scope is None else scope.__qualname__
