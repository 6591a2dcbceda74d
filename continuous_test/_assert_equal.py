"""Equality for test assertions: tensors, arrays, numbers and nested containers of them.

:func:`assert_equal` is what ``TestCase.assertEqual`` calls.  Floating point values
compare as close, with dtype-based default tolerances (those of
:func:`torch.testing.assert_close`) unless ``rtol``/``atol`` are given; integers and
bools must match exactly.  Containers are walked recursively and a mismatch
names the path where it happened, e.g. ``at ['layer.weight'][2]``.

The semantics are those of torch's own ``TestCase.assertEqual``
(``torch.testing._internal.common_utils``), which test files written for torch
rely on:

* a Python number compares by value with a number, a numpy scalar or a
  single-element tensor or array, whatever their dtypes (``1 == torch.tensor(1.0)``);
  a bool compares by truth value;
* a tensor compared with a list or tuple compares with ``torch.as_tensor`` of it,
  in the tensor's dtype and on its device;
* tensors must have the same dtype unless ``exact_dtype=False``; they may be on
  different devices (and layouts) unless ``exact_device=True``
  (``exact_layout=True``), as in torch, where ``exact_device`` defaults to False;
* sequences compare elementwise whatever their types (a tuple equals a list, a
  ``torch.Size`` a list), mappings by keys whatever their types (an
  ``OrderedDict`` equals a ``dict``);
* ``rtol_floor``/``atol_floor`` raise the tolerances to at least the given values,
  as torch's ``precision``/``rel_tol`` overrides do.
"""
from __future__ import annotations

import cmath
from collections.abc import Mapping, Sequence
from typing import Any, Callable, List, Optional, Tuple

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
    exact_layout: bool = False,
    exact_stride: bool = False,
    exact_is_coalesced: bool = False,
    rtol_floor: float = 0.0,
    atol_floor: float = 0.0,
    fallback: Optional[Callable[[Any, Any], None]] = None,
) -> None:
    """Raise :class:`Mismatch` if ``actual`` and ``expected`` differ under torch's assertEqual semantics."""
    if (rtol is None) != (atol is None):
        raise ValueError("rtol and atol must be given together")
    opts = dict(rtol=rtol, atol=atol, equal_nan=equal_nan, exact_dtype=exact_dtype, exact_device=exact_device,
                exact_layout=exact_layout, exact_stride=exact_stride, exact_is_coalesced=exact_is_coalesced,
                rtol_floor=rtol_floor, atol_floor=atol_floor)
    _compare(actual, expected, [], opts, fallback)


def _compare(actual, expected, path: List[str], opts, fallback) -> None:
    if _is_bool(actual) or _is_bool(expected):
        if _is_scalar_like(actual) and _is_scalar_like(expected):
            _compare_bools(actual, expected, path)
            return
    if (_is_number(actual) and _is_scalar_like(expected)) or (_is_number(expected) and _is_scalar_like(actual)):
        _compare_numbers(_to_number(actual, path), _to_number(expected, path), path, opts)
    elif is_tensor_like(actual) or is_tensor_like(expected):
        _compare_tensors(actual, expected, path, opts)
    elif isinstance(actual, Mapping) and isinstance(expected, Mapping):
        _compare_mappings(actual, expected, path, opts, fallback)
    elif _is_sequence(actual) and _is_sequence(expected):
        _compare_plain_sequences(actual, expected, path, opts, fallback)
    else:
        _compare_plain(actual, expected, path, fallback)


def _compare_plain(actual, expected, path, fallback) -> None:
    """Values compared by ``==``, through unittest's assertEqual when given (for its diffs)."""
    if fallback is not None:
        try:
            fallback(actual, expected)
        except AssertionError as exc:
            raise Mismatch(_where(path) + str(exc)) from None
    elif actual != expected:
        raise Mismatch(f"{_where(path)}{actual!r} != {expected!r}")


def _compare_tensors(actual, expected, path, opts) -> None:
    # A list or tuple against a tensor is read as a tensor of the same dtype and
    # device, as torch's assertEqual does; everything else must be tensor-like.
    if _is_sequence(actual) and isinstance(expected, torch.Tensor):
        actual = torch.as_tensor(actual, dtype=expected.dtype, device=expected.device)
    elif _is_sequence(expected) and isinstance(actual, torch.Tensor):
        expected = torch.as_tensor(expected, dtype=actual.dtype, device=actual.device)
    a, e = _as_tensor(actual, path), _as_tensor(expected, path)
    if a.layout == e.layout == torch.sparse_coo:
        if opts["exact_is_coalesced"] and a.is_coalesced() != e.is_coalesced():
            raise Mismatch(f"{_where(path)}is_coalesced() differs: {a.is_coalesced()} != {e.is_coalesced()}")
        a, e = a.coalesce(), e.coalesce()  # as torch's assertEqual: the same values, however stored
    rtol, atol = _tensor_tolerances(a, e, opts)
    try:
        # assert_close itself moves values to a common device, dtype and layout
        # when those are not checked, and compares meta tensors by metadata only.
        torch.testing.assert_close(
            a, e,
            rtol=rtol, atol=atol, equal_nan=opts["equal_nan"],
            check_dtype=opts["exact_dtype"], check_device=opts["exact_device"],
            check_layout=opts["exact_layout"], check_stride=opts["exact_stride"],
        )
    except AssertionError as exc:
        raise Mismatch(_where(path) + str(exc)) from None


def _tensor_tolerances(a: torch.Tensor, e: torch.Tensor, opts) -> Tuple[Optional[float], Optional[float]]:
    rtol, atol = opts["rtol"], opts["atol"]
    if not (opts["rtol_floor"] or opts["atol_floor"]):
        return rtol, atol
    if rtol is None:
        from torch.testing._comparison import default_tolerances

        rtol, atol = default_tolerances(a, e)
    return max(rtol, opts["rtol_floor"]), max(atol, opts["atol_floor"])


def _as_tensor(value, path) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    np = _numpy()
    if np is not None and isinstance(value, (np.ndarray, np.generic)):
        return torch.from_numpy(np.asarray(value))
    raise Mismatch(f"{_where(path)}cannot compare a tensor with {type(value).__name__} {value!r}")


def _is_bool(value) -> bool:
    np = _numpy()
    return isinstance(value, bool) or (np is not None and isinstance(value, np.bool_))


def _is_number(value) -> bool:
    """A Python number (bool is an int) or a numpy scalar number."""
    if isinstance(value, (int, float, complex)):
        return True
    np = _numpy()
    return np is not None and isinstance(value, (np.number, np.bool_))


def _is_scalar_like(value) -> bool:
    """What compares with a number by value: a number or any tensor or array (one element, checked later)."""
    return _is_number(value) or is_tensor_like(value)


def _to_number(value, path):
    if isinstance(value, (int, float, complex)):
        return value
    numel = value.numel() if isinstance(value, torch.Tensor) else getattr(value, "size", 1)
    if numel != 1:
        raise Mismatch(f"{_where(path)}only a single-element tensor or array compares with a number, "
                       f"got {numel} elements")
    number = value.item()
    return int(number) if isinstance(number, bool) else number


def _compare_bools(actual, expected, path) -> None:
    a, e = (bool(_to_number(v, path)) for v in (actual, expected))
    if a != e:
        raise Mismatch(f"{_where(path)}{actual!r} != {expected!r}")


def _compare_numbers(actual, expected, path, opts) -> None:
    if isinstance(actual, int) and isinstance(expected, int):
        if actual != expected:
            raise Mismatch(f"{_where(path)}{actual!r} != {expected!r}")
        return
    rtol = max(1.3e-6 if opts["rtol"] is None else opts["rtol"], opts["rtol_floor"])
    atol = max(1e-5 if opts["atol"] is None else opts["atol"], opts["atol_floor"])
    if actual == expected or (_isnan(actual) and _isnan(expected) and opts["equal_nan"]):
        return
    diff = abs(actual - expected)
    if not (cmath.isfinite(actual) and cmath.isfinite(expected) and diff <= atol + rtol * abs(expected)):
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


def _compare_plain_sequences(actual, expected, path, opts, fallback) -> None:
    if _contains_comparable(actual, expected) or _nested_types_differ(actual, expected):
        _compare_sequences(actual, expected, path, opts, fallback)
        return
    if type(actual) is not type(expected):
        # torch compares any two sequences elementwise: (1, 2) equals [1, 2].
        actual, expected = list(actual), list(expected)
    _compare_plain(actual, expected, path, fallback)


def _contains_comparable(actual, expected) -> bool:
    # Only walk sequences ourselves when they hold something we compare differently
    # from ==; plain lists of strings keep unittest's readable diff.
    def special(v) -> bool:
        return is_tensor_like(v) or isinstance(v, (float, complex, Mapping)) or (_is_sequence(v) and any(special(x) for x in v))

    return any(special(v) for v in actual) or any(special(v) for v in expected)


def _nested_types_differ(actual, expected) -> bool:
    # [[1, 2]] against [torch.Size([1, 2])]: == says unequal (a list is never a
    # tuple), torch says equal; so walk them when an inner pair differs in type.
    return any(_is_sequence(a) and _is_sequence(e) and (type(a) is not type(e) or _nested_types_differ(a, e))
               for a, e in zip(actual, expected))


def _compare_sequences(actual, expected, path, opts, fallback) -> None:
    if len(actual) != len(expected):
        raise Mismatch(f"{_where(path)}lengths differ: {len(actual)} != {len(expected)}")
    for i, (a, e) in enumerate(zip(actual, expected)):
        _compare(a, e, path + [f"[{i}]"], opts, fallback)


def _where(path: List[str]) -> str:
    return f"at {''.join(path)}: " if path else ""
