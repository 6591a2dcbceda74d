"""How many devices a test or a world needs: the one rule, read by the device pool's leases and the pytest marker.

::

    a class's world size, device type, backend  ─┐
    its tests' decorators (requires_world_size, ├─► devices_needed ─► class_need: what a world leases
      skip_if_lt_x_gpu)                         ─┘                ─► test_need: the ct_devices(n=N) marker

The pool that leases them is :mod:`continuous_test.controller.devices`; this module
reads classes, functions and settings and touches nothing.
"""
from __future__ import annotations

import inspect
import os
import unittest
from typing import Any, Iterable, Mapping, Optional

from continuous_test import config
from continuous_test.controller.devices import simulated_devices
from continuous_test.errors import ConfigError

__all__ = ["devices_needed", "required_devices", "class_need", "test_need"]


def devices_needed(world_size: int, device_type: str, backend: Optional[str], required: int = 0,
                   env: Mapping[str, str] = os.environ) -> int:
    """The number of devices one world (or test) needs: the one rule, for leases and for the pytest marker.

    ``required`` is what the test's own decorators ask for (:func:`required_devices`).
    A world on an accelerator (its ``device_type``, or a backend of
    :data:`continuous_test.config.ACCELERATOR_BACKENDS`) needs one device per rank; a CPU world none, unless
    its test asks; under ``CONTINUOUS_TEST_SIMULATE_DEVICES`` every world is an
    accelerator world.
    """
    accelerator = (device_type != "cpu" or simulated_devices(env) is not None
                   or any(name in config.ACCELERATOR_BACKENDS for name in config.backend_names(backend)))
    return max(world_size if accelerator else 0, required)


def required_devices(function: Any) -> int:
    """The devices a test function's decorators require: torch's ``requires_world_size(n)`` and
    ``skip_if_lt_x_gpu(n)`` (without ``allow_cpu``), through every ``functools.wraps`` layer; 0 if none."""
    need, seen = 0, 0
    while function is not None and seen < 20:
        need = max(need, _int(getattr(function, "_required_world_size", 0)))
        need = max(need, _skip_if_lt_x_gpu(function))
        function, seen = getattr(function, "__wrapped__", None), seen + 1
    return need


def _skip_if_lt_x_gpu(function: Any) -> int:
    # torch's skip_if_lt_x_gpu keeps x only in its wrapper's closure (it sets no attribute,
    # and functools.wraps gives the wrapper the test's names): known by its code.
    code = getattr(function, "__code__", None)
    if code is None or not (code.co_filename.endswith("common_distributed.py")
                            and getattr(code, "co_qualname", "skip_if_lt_x_gpu.").startswith("skip_if_lt_x_gpu.")
                            and {"x", "func"} <= set(code.co_freevars)):
        return 0
    cells = dict(zip(code.co_freevars, function.__closure__ or ()))
    try:
        if "allow_cpu" in cells and cells["allow_cpu"].cell_contents:
            return 0  # it runs on a machine without accelerators
        return _int(cells["x"].cell_contents) if "x" in cells else 0
    except ValueError:  # an empty cell
        return 0


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def class_need(cls: type, world_size: int, device_type: str, backend: Optional[str],
               methods: Iterable[str], pool_size: int) -> int:
    """What the world of ``cls`` leases: :func:`devices_needed` with the largest requirement among
    its tests that this host can meet (a test asking for more skips by itself)."""
    required = [required_devices(getattr(cls, name, None)) for name in methods]
    return devices_needed(world_size, device_type, backend, max([r for r in required if r <= pool_size], default=0))


def test_need(cls: type, function: Any, method: Optional[str], size: Optional[int] = None) -> int:
    """The devices one collected test needs (the pytest plugin's ``ct_devices`` marker), under the runner's
    overrides: :func:`devices_needed` of the test's world size (``size``, a sized test's ``test_x[ws2]``,
    else the class's), device type and backend, and the requirements of the test's decorators (on
    ``function``, a ``@distributed`` function, or the method)."""
    device = config.resolve_device_type(cls)
    size = size if size is not None else _collected_world_size(cls, device, method)
    required = max(required_devices(function), required_devices(getattr(cls, method, None) if method else None))
    return devices_needed(size, device, _backend_spec(cls), required)


def _collected_world_size(cls: type, device: str, method: Optional[str]) -> int:
    overrides = config.current_overrides()
    marked = overrides.world_size if overrides.world_size is not None else overrides.marked_world_size
    if marked is not None:
        return marked
    if method is not None and isinstance(inspect.getattr_static(cls, "world_size", None), property):
        # A per-test property (torch's get_required_world_size idiom) needs the test's instance.
        try:
            value = cls(method).world_size
            value = int(value) if isinstance(value, str) and value.strip().isdigit() else value
        except Exception:  # noqa: BLE001 - read again below, as the run reads it
            value = None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    try:
        return config.class_world_size(cls, device)
    except (unittest.SkipTest, ConfigError):
        return 1  # no device to count, or a bad value that the run reports: at least one device


def _backend_spec(cls: type) -> Optional[str]:
    backend_str = getattr(cls, "backend_str", None)
    try:
        spec = backend_str() if callable(backend_str) else None
    except Exception:  # noqa: BLE001 - an instance method (torch's style): the device type decides
        return None
    return spec if isinstance(spec, str) else None
