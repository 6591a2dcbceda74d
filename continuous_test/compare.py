"""Equality for test assertions: tensors, arrays, numbers and nested containers of them.

:func:`assert_equal` is what ``TestCase.assertEqual`` calls.  Floating point values
compare as close, with dtype-based default tolerances (those of
:func:`torch.testing.assert_close`) unless ``rtol``/``atol`` are given; integers and
bools must match exactly.  Containers are walked recursively and a mismatch
names the path where it happened, e.g. ``at ['layer.weight'][2]``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable, List, Optional

import torch

__all__ = ["Mismatch", "assert_equal", "is_tensor_like"]


class Mismatch(AssertionError):
    """Two values differ; the message says where and by how much."""


def is_tensor_like(value: Any) -> bool:
    """True for tensors and numpy arrays (and numpy scalars)."""
    if isinstance(value, torch.Tensor):
        return True
    np = _numpy()
    return np is not None and isinstance(value, (np.ndarray, np.generic))


def _numpy():
    try:
        import numpy
    except ImportError:  # numpy is a dependency, but keep tensors working without it
        return None
    return numpy


def assert_equal(
    actual: Any,
    expected: Any,
    *,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    equal_nan: bool = True,
    exact_dtype: bool = True,
    exact_device: bool = False,
    fallback: Optional[Callable[[Any, Any], None]] = None,
) -> None:
    """Raise :class:`Mismatch` if ``actual`` and ``expected`` differ; called by assertEqual."""
    if (rtol is None) != (atol is None):
        raise ValueError("rtol and atol must be given together")
    opts = dict(rtol=rtol, atol=atol, equal_nan=equal_nan, exact_dtype=exact_dtype, exact_device=exact_device)
    _compare(actual, expected, [], opts, fallback)


def _compare(actual, expected, path: List[str], opts, fallback) -> None:
    if is_tensor_like(actual) or is_tensor_like(expected):
        _compare_tensors(actual, expected, path, opts)
    elif _is_number(actual) and _is_number(expected):
        _compare_numbers(actual, expected, path, opts)
    elif isinstance(actual, Mapping) and isinstance(expected, Mapping):
        _compare_mappings(actual, expected, path, opts, fallback)
    elif _is_sequence(actual) and _is_sequence(expected) and _contains_comparable(actual, expected):
        _compare_sequences(actual, expected, path, opts, fallback)
    elif fallback is not None:
        try:
            fallback(actual, expected)
        except AssertionError as exc:
            raise Mismatch(_where(path) + str(exc)) from None
    elif actual != expected:
        raise Mismatch(f"{_where(path)}{actual!r} != {expected!r}")


def _compare_tensors(actual, expected, path, opts) -> None:
    a, e = _as_tensor(actual), _as_tensor(expected)
    if not opts["exact_dtype"] and a.dtype != e.dtype:
        common = torch.promote_types(a.dtype, e.dtype)
        a, e = a.to(common), e.to(common)
    if not opts["exact_device"] and a.device != e.device:
        a, e = a.cpu(), e.cpu()
    try:
        torch.testing.assert_close(
            a, e,
            rtol=opts["rtol"], atol=opts["atol"], equal_nan=opts["equal_nan"],
            check_dtype=opts["exact_dtype"], check_device=opts["exact_device"],
        )
    except AssertionError as exc:
        raise Mismatch(_where(path) + str(exc)) from None


def _as_tensor(value) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    np = _numpy()
    if np is not None and isinstance(value, (np.ndarray, np.generic)):
        return torch.from_numpy(np.asarray(value))
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, (int, float, complex)):
        # A Python scalar takes the other side's dtype question out of play: it
        # compares by value, like torch's own assertEqual.
        return torch.tensor(value)
    raise Mismatch(f"cannot compare a tensor with {type(value).__name__} {value!r}")


def _is_number(value) -> bool:
    return isinstance(value, (int, float, complex))  # bool is an int


def _compare_numbers(actual, expected, path, opts) -> None:
    if isinstance(actual, bool) or isinstance(expected, bool) or (isinstance(actual, int) and isinstance(expected, int)):
        if actual != expected:
            raise Mismatch(f"{_where(path)}{actual!r} != {expected!r}")
        return
    rtol = 1.3e-6 if opts["rtol"] is None else opts["rtol"]
    atol = 1e-5 if opts["atol"] is None else opts["atol"]
    if _isnan(actual) and _isnan(expected) and opts["equal_nan"]:
        return
    diff = abs(actual - expected)
    if not diff <= atol + rtol * abs(expected):
        raise Mismatch(
            f"{_where(path)}{actual!r} != {expected!r} (difference {diff:.3g} exceeds "
            f"atol={atol:g} + rtol={rtol:g} * |expected|)"
        )


def _isnan(value) -> bool:
    return isinstance(value, (float, complex)) and (value != value)


def _compare_mappings(actual, expected, path, opts, fallback) -> None:
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    if missing or extra:
        raise Mismatch(f"{_where(path)}keys differ: missing {missing!r}, unexpected {extra!r}")
    for key in expected:
        _compare(actual[key], expected[key], path + [f"[{key!r}]"], opts, fallback)


def _is_sequence(value) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _contains_comparable(actual, expected) -> bool:
    # Only walk sequences ourselves when they hold something we compare differently
    # from ==; plain lists of strings keep unittest's readable diff.
    def special(v) -> bool:
        return is_tensor_like(v) or isinstance(v, (float, complex, Mapping)) or (_is_sequence(v) and any(special(x) for x in v))

    return any(special(v) for v in actual) or any(special(v) for v in expected)


def _compare_sequences(actual, expected, path, opts, fallback) -> None:
    if len(actual) != len(expected):
        raise Mismatch(f"{_where(path)}lengths differ: {len(actual)} != {len(expected)}")
    for i, (a, e) in enumerate(zip(actual, expected)):
        _compare(a, e, path + [f"[{i}]"], opts, fallback)


def _where(path: List[str]) -> str:
    return f"at {''.join(path)}: " if path else ""

